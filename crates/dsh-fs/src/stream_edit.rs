//! Edits of LF text files without holding them in memory.
//!
//! [`scan`] reads the file once through a 1 MiB buffer and finds what the whole-file edit
//! would: a NUL byte (binary), invalid UTF-8, and the non-overlapping occurrences of the
//! old string, with the number of lines before the first. A file with a `\r` anywhere is
//! left to the whole-file edit (it may need CRLF handling), and so is one with more than
//! [`MAX_STARTS`] occurrences to replace. The new file is then written as [`Part`]s: the
//! unchanged ranges copied by the kernel (`copy_file_range`), the new string between them.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;

/// The most occurrences a streamed edit replaces (each is a write and a copy); more go to
/// the whole-file edit.
pub(crate) const MAX_STARTS: usize = 4096;

const CHUNK: usize = 1 << 20;

/// What a scan found. `starts` holds every occurrence when asked for all, else the first.
pub(crate) struct Scan {
    pub(crate) starts: Vec<u64>,
    pub(crate) count: usize,
    /// Newlines before the first occurrence.
    pub(crate) lines_before_first: usize,
}

/// Why a file cannot be edited as text.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NotText {
    Binary,
    InvalidUtf8,
}

/// Scans the first `size` bytes of `file` for `old` (see the [module docs](self)).
/// `Ok(None)`: leave it to the whole-file edit. Occurrences starting before `skip` (a
/// BOM) are not counted. Occurrences are found as `str::match_indices` finds them: left
/// to right, each search resuming where the last occurrence ended.
pub(crate) fn scan(
    file: &File,
    size: u64,
    old: &[u8],
    all: bool,
    skip: u64,
) -> std::io::Result<Result<Option<Scan>, NotText>> {
    let finder = memchr::memmem::Finder::new(old);
    let mut work = vec![0u8; CHUNK + old.len().max(4)];
    let (mut work_start, mut new_from, mut utf8_from) = (0u64, 0usize, 0usize);
    let (mut lines_before_new, mut next_allowed) = (0usize, 0u64);
    let mut invalid = false;
    let mut found = Scan {
        starts: Vec::new(),
        count: 0,
        lines_before_first: 0,
    };
    loop {
        let pos = work_start + new_from as u64;
        let want = usize::try_from(size.saturating_sub(pos).min(CHUNK as u64)).unwrap_or(CHUNK);
        let n = if want == 0 {
            0
        } else {
            file.read_at(&mut work[new_from..new_from + want], pos)?
        };
        let end = new_from + n;
        if n == 0 {
            if invalid || utf8_from < end {
                return Ok(Err(NotText::InvalidUtf8));
            }
            return Ok(Ok(Some(found)));
        }
        let new = &work[new_from..end];
        if let Some(i) = memchr::memchr2(0, b'\r', new) {
            if new[i] == 0 || memchr::memchr(0, &new[i..]).is_some() {
                return Ok(Err(NotText::Binary));
            }
            return Ok(Ok(None));
        }
        if !invalid {
            match std::str::from_utf8(&work[utf8_from..end]) {
                Ok(_) => utf8_from = end,
                Err(e) if e.error_len().is_none() => utf8_from += e.valid_up_to(),
                Err(_) => invalid = true,
            }
        }
        if invalid {
            // Nothing more to validate: no UTF-8 carry to keep.
            utf8_from = end;
        }
        // Resume where the last round could not look (an occurrence needs `old.len()`
        // bytes), after the last occurrence, and past the BOM.
        let floor = (new_from + 1).saturating_sub(old.len());
        let after_last =
            usize::try_from(next_allowed.max(skip).saturating_sub(work_start)).unwrap_or(end);
        let mut from = floor.max(after_last);
        while from < end {
            let Some(p) = finder.find(&work[from..end]).map(|p| from + p) else {
                break;
            };
            let at = work_start + p as u64;
            if found.count == 0 {
                found.lines_before_first = if p >= new_from {
                    lines_before_new + memchr::memchr_iter(b'\n', &work[new_from..p]).count()
                } else {
                    lines_before_new - memchr::memchr_iter(b'\n', &work[p..new_from]).count()
                };
            }
            found.count += 1;
            if all || found.starts.is_empty() {
                if found.starts.len() == MAX_STARTS {
                    return Ok(Ok(None));
                }
                found.starts.push(at);
            }
            next_allowed = at + old.len() as u64;
            from = p + old.len();
        }
        lines_before_new += memchr::memchr_iter(b'\n', &work[new_from..end]).count();
        // Keep what a match or a UTF-8 sequence may still need from this round.
        let keep = old.len().saturating_sub(1).max(end - utf8_from).min(end);
        work.copy_within(end - keep..end, 0);
        work_start += (end - keep) as u64;
        utf8_from -= end - keep;
        new_from = keep;
    }
}

/// The byte range `[start, end)` of `file` as text (it was checked as UTF-8).
pub(crate) fn read_range(file: &File, start: u64, end: u64) -> std::io::Result<String> {
    let mut buf = vec![0u8; usize::try_from(end - start).unwrap_or(0)];
    file.read_exact_at(&mut buf, start)?;
    String::from_utf8(buf).map_err(std::io::Error::other)
}

/// The start of the line holding byte `at` (just after the `\n` before it, or 0).
pub(crate) fn line_start(file: &File, at: u64) -> std::io::Result<u64> {
    let mut hi = at;
    let mut buf = vec![0u8; 64 << 10];
    while hi > 0 {
        let lo = hi.saturating_sub(buf.len() as u64);
        let part = &mut buf[..usize::try_from(hi - lo).unwrap_or(0)];
        file.read_exact_at(part, lo)?;
        if let Some(i) = memchr::memrchr(b'\n', part) {
            return Ok(lo + i as u64 + 1);
        }
        hi = lo;
    }
    Ok(0)
}

/// The end of the line holding byte `at - 1` (just after its `\n`, or the file's end).
pub(crate) fn line_end(file: &File, at: u64, size: u64) -> std::io::Result<u64> {
    let mut lo = at;
    let mut buf = vec![0u8; 64 << 10];
    while lo < size {
        let hi = (lo + buf.len() as u64).min(size);
        let part = &mut buf[..usize::try_from(hi - lo).unwrap_or(0)];
        file.read_exact_at(part, lo)?;
        if let Some(i) = memchr::memchr(b'\n', part) {
            return Ok(lo + i as u64 + 1);
        }
        lo = hi;
    }
    Ok(size)
}

/// A piece of a file being written.
pub(crate) enum Part<'a> {
    /// These bytes.
    Bytes(&'a [u8]),
    /// `len` bytes of `file` from `offset`.
    Copy(&'a File, u64, u64),
}

impl Part<'_> {
    /// Appends this piece to `out`: a copy inside the kernel where it can, else through a
    /// buffer. A source that ends early is an error, never a short file.
    pub(crate) fn write_to(&self, out: &mut File) -> std::io::Result<()> {
        let (src, mut off, mut len) = match *self {
            Part::Bytes(b) => return out.write_all(b),
            Part::Copy(src, off, len) => (src, off, len),
        };
        while len > 0 {
            let want = usize::try_from(len.min(1 << 30)).unwrap_or(1 << 30);
            match rustix::fs::copy_file_range(src, Some(&mut off), &*out, None, want) {
                // Some filesystems answer 0 before the end: let the plain copy decide.
                Ok(0) => return copy_through_memory(src, off, len, out),
                Ok(n) => len -= n as u64,
                Err(e) if e == rustix::io::Errno::INTR => {}
                // Not supported here (another filesystem, an old kernel): copy through memory.
                Err(_) => return copy_through_memory(src, off, len, out),
            }
        }
        Ok(())
    }
}

fn copy_through_memory(
    src: &File,
    mut off: u64,
    mut len: u64,
    out: &mut File,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; CHUNK];
    while len > 0 {
        let want = usize::try_from(len.min(CHUNK as u64)).unwrap_or(CHUNK);
        let n = src.read_at(&mut buf[..want], off)?;
        if n == 0 {
            return Err(shrank());
        }
        out.write_all(&buf[..n])?;
        off += n as u64;
        len -= n as u64;
    }
    Ok(())
}

fn shrank() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "the file shrank while it was copied",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len(f: &File) -> u64 {
        f.metadata().expect("metadata").len()
    }

    fn file_with(content: &[u8]) -> (tempfile::TempDir, File) {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(d.path().join("f"), content).expect("write");
        let f = File::open(d.path().join("f")).expect("open");
        (d, f)
    }

    #[test]
    fn occurrences_across_chunk_boundaries_are_found_once_each_with_their_line() {
        // Lines of 100 bytes; "needle" straddles the first chunk boundary, and more follow.
        let mut content = Vec::new();
        while content.len() < 3 * CHUNK {
            content.extend_from_slice(&[b'x'; 99]);
            content.push(b'\n');
        }
        let at = [CHUNK - 3, CHUNK + 500, 2 * CHUNK - 1, 3 * CHUNK - 10];
        for &a in &at {
            content[a..a + 6].copy_from_slice(b"needle");
        }
        let want_lines = content[..at[0]].iter().filter(|&&c| c == b'\n').count();
        let (_d, f) = file_with(&content);
        let scan = scan(&f, len(&f), b"needle", true, 0)
            .expect("io")
            .expect("text")
            .expect("lf");
        assert_eq!(
            scan.starts,
            at.iter().map(|&a| a as u64).collect::<Vec<_>>()
        );
        assert_eq!((scan.count, scan.lines_before_first), (4, want_lines));
        let first = super::scan(&f, len(&f), b"needle", false, 0)
            .expect("io")
            .expect("text")
            .expect("lf");
        assert_eq!((first.starts.len(), first.count), (1, 4));
    }

    #[test]
    fn self_overlapping_occurrences_across_a_boundary_match_str_match_indices() {
        for (old, run) in [("  ", 4usize), ("aa", 5), ("----", 9), ("aba", 7)] {
            let mut content = vec![b'x'; 3 * CHUNK];
            for k in 0..run {
                content[CHUNK - 2 + k] = old.as_bytes()[k % old.len()];
            }
            let text = String::from_utf8(content.clone()).expect("utf-8");
            let want: Vec<u64> = text.match_indices(old).map(|(i, _)| i as u64).collect();
            let (_d, f) = file_with(&content);
            let got = scan(&f, len(&f), old.as_bytes(), true, 0)
                .expect("io")
                .expect("text")
                .expect("lf");
            assert_eq!(
                (got.starts, got.count),
                (want.clone(), want.len()),
                "{old:?}"
            );
        }
    }

    #[test]
    fn bytes_past_the_given_size_are_not_read() {
        let (_d, f) = file_with(b"one\ntwo needle\n");
        let got = scan(&f, 4, b"needle", true, 0)
            .expect("io")
            .expect("text")
            .expect("lf");
        assert_eq!(got.count, 0, "only the first 4 bytes are scanned");
    }

    #[test]
    fn overlapping_occurrences_count_as_str_matches_does() {
        let (_d, f) = file_with(b"aaaaa\n");
        let scan = scan(&f, len(&f), b"aa", true, 0)
            .expect("io")
            .expect("text")
            .expect("lf");
        assert_eq!((scan.starts, scan.count), (vec![0, 2], 2));
    }

    #[test]
    fn utf8_split_across_chunks_is_text_and_broken_utf8_or_nul_is_not() {
        let mut content = vec![b'a'; CHUNK - 1];
        content.extend_from_slice("é and more\n".as_bytes());
        let (_d, f) = file_with(&content);
        assert!(scan(&f, len(&f), b"more", true, 0).expect("io").is_ok());
        let mut bad = content.clone();
        bad[CHUNK + 5] = 0xff;
        let (_d2, f) = file_with(&bad);
        assert_eq!(
            scan(&f, len(&f), b"more", true, 0).expect("io").err(),
            Some(NotText::InvalidUtf8)
        );
        bad[CHUNK] = 0;
        let (_d3, f) = file_with(&bad);
        assert_eq!(
            scan(&f, len(&f), b"more", true, 0).expect("io").err(),
            Some(NotText::Binary)
        );
        let (_d4, f) = file_with(b"a\r\nb\n");
        assert!(
            matches!(scan(&f, len(&f), b"b", true, 0).expect("io"), Ok(None)),
            "CRLF is left to the whole-file edit"
        );
    }

    #[test]
    fn lines_are_found_around_an_offset_and_parts_copy_exactly() {
        let content = b"one\ntwo three\nfour";
        let (d, f) = file_with(content);
        assert_eq!(line_start(&f, 8).expect("io"), 4);
        assert_eq!(line_start(&f, 2).expect("io"), 0);
        assert_eq!(line_end(&f, 9, content.len() as u64).expect("io"), 14);
        assert_eq!(line_end(&f, 15, content.len() as u64).expect("io"), 18);
        let mut out = File::create(d.path().join("out")).expect("create");
        for part in [
            Part::Copy(&f, 0, 4),
            Part::Bytes(b"2 "),
            Part::Copy(&f, 8, 10),
        ] {
            part.write_to(&mut out).expect("write");
        }
        assert_eq!(
            std::fs::read(d.path().join("out")).expect("read"),
            b"one\n2 three\nfour"
        );
        let short = Part::Copy(&f, 10, 100).write_to(&mut out);
        assert!(short.is_err(), "a source that ends early is an error");
    }
}
