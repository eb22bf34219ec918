//! A fixed-capacity byte ring that keeps the last `capacity` bytes of a stream and knows
//! the stream's total length, so readers can ask for "everything after byte N".

/// The last `capacity` bytes of a stream, addressed by whole-stream byte offsets.
///
/// Memory never exceeds `capacity` whatever is pushed; it grows on demand up to it, so a
/// command that prints little costs little.
#[derive(Debug)]
pub struct ByteRing {
    buf: Vec<u8>,
    capacity: usize,
    /// Index in `buf` of the oldest retained byte (only meaningful once `buf` is full).
    head: usize,
    total: u64,
}

/// What [`ByteRing::read_from`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct RingRead {
    /// The whole-stream offset of the first byte copied out.
    pub start: u64,
    /// True when the requested offset had already slid out of the window, so bytes between
    /// it and `start` are missing.
    pub lossy: bool,
}

impl ByteRing {
    /// An empty ring that will keep at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        ByteRing {
            buf: Vec::new(),
            capacity,
            head: 0,
            total: 0,
        }
    }

    /// The maximum number of bytes kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Total bytes ever pushed.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes currently retained.
    pub fn retained(&self) -> usize {
        self.buf.len()
    }

    /// Offset of the oldest retained byte.
    pub fn window_start(&self) -> u64 {
        self.total - self.buf.len() as u64
    }

    /// True once some byte has been dropped from the front.
    pub fn has_dropped(&self) -> bool {
        self.window_start() > 0
    }

    /// Appends `data`, dropping the oldest bytes beyond capacity.
    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        if self.capacity == 0 {
            return;
        }
        if data.len() >= self.capacity {
            data = &data[data.len() - self.capacity..];
            self.buf.clear();
            self.buf.extend_from_slice(data);
            self.head = 0;
            return;
        }
        let room = self.capacity - self.buf.len();
        if room > 0 {
            let n = room.min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        // Full: overwrite the oldest bytes in place, wrapping at the end.
        while !data.is_empty() {
            let n = (self.capacity - self.head).min(data.len());
            self.buf[self.head..self.head + n].copy_from_slice(&data[..n]);
            self.head = (self.head + n) % self.capacity;
            data = &data[n..];
        }
    }

    /// Appends to `out` the retained bytes from stream offset `from` on. An offset older
    /// than the window copies the whole window and reports `lossy`; an offset at or past
    /// the end copies nothing.
    pub fn read_from(&self, from: u64, out: &mut Vec<u8>) -> RingRead {
        let start = self.window_start();
        let lossy = from < start;
        let from = from.clamp(start, self.total);
        let skip = (from - start) as usize;
        let (a, b) = self.slices();
        if skip < a.len() {
            out.extend_from_slice(&a[skip..]);
            out.extend_from_slice(b);
        } else {
            out.extend_from_slice(&b[skip - a.len()..]);
        }
        RingRead { start: from, lossy }
    }

    /// The retained bytes, oldest first, as two slices.
    pub fn slices(&self) -> (&[u8], &[u8]) {
        if self.buf.len() < self.capacity {
            (&self.buf[..], &[])
        } else {
            let (newer, older) = self.buf.split_at(self.head);
            (older, newer)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(r: &ByteRing) -> Vec<u8> {
        let mut v = Vec::new();
        r.read_from(0, &mut v);
        v
    }

    #[test]
    fn keeps_exactly_the_last_capacity_bytes_whatever_the_chunking() {
        let stream: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        for cap in [1usize, 7, 64, 999, 1000, 1001] {
            for chunk in [1usize, 3, 64, 500, 1000] {
                let mut r = ByteRing::new(cap);
                for c in stream.chunks(chunk) {
                    r.push(c);
                }
                let keep = cap.min(stream.len());
                assert_eq!(
                    window(&r),
                    stream[stream.len() - keep..],
                    "cap {cap} chunk {chunk}"
                );
                assert_eq!(r.total(), 1000);
                assert_eq!(r.has_dropped(), cap < 1000);
            }
        }
    }

    #[test]
    fn single_oversize_chunk_keeps_its_tail() {
        let mut r = ByteRing::new(10);
        r.push(b"0123456789abcdef");
        assert_eq!(window(&r), b"6789abcdef");
    }

    #[test]
    fn uneven_chunks_stay_byte_exact() {
        let mut r = ByteRing::new(6);
        for c in [&b"aa"[..], b"bbbbbb", b"cc"] {
            r.push(c);
        }
        assert_eq!(window(&r), b"bbbbcc");
    }

    #[test]
    fn read_from_serves_independent_offsets() {
        let mut r = ByteRing::new(8);
        r.push(b"hello");
        let mut a = Vec::new();
        assert_eq!(
            r.read_from(2, &mut a),
            RingRead {
                start: 2,
                lossy: false
            }
        );
        assert_eq!(a, b"llo");
        r.push(b" world");
        let mut b = Vec::new();
        assert_eq!(
            r.read_from(0, &mut b),
            RingRead {
                start: 3,
                lossy: true
            }
        );
        assert_eq!(b, b"lo world");
        let mut c = Vec::new();
        assert_eq!(
            r.read_from(11, &mut c),
            RingRead {
                start: 11,
                lossy: false
            }
        );
        assert!(c.is_empty());
    }

    #[test]
    fn zero_capacity_keeps_nothing_but_counts() {
        let mut r = ByteRing::new(0);
        r.push(b"abc");
        assert_eq!(r.total(), 3);
        assert!(window(&r).is_empty());
    }
}
