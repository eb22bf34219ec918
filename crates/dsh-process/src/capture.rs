//! Bounded capture of one output stream: a fixed ring in memory plus a spill file.
//!
//! A [`Capture`] keeps the last `max_bytes` bytes of a stream in a [`ByteRing`] and, when
//! spilling is enabled, mirrors the stream's first `max_spill_bytes` bytes to a private
//! spill file. The file is created at the first in-memory overflow and then holds the
//! whole stream from byte 0 (nothing was dropped from memory before that). Memory never
//! grows with output size: 10 GB of output costs the same as 10 KB.
//!
//! Readers address the stream by whole-stream byte offsets that they own
//! ([`Capture::read_from`]); the capture moves no shared cursor, so any number of readers
//! can follow one stream independently.
//!
//! Differs from the reference: a stream longer than the spill cap keeps its spill file,
//! holding the first `max_spill_bytes` bytes and marked incomplete ([`SpillInfo::complete`]),
//! instead of deleting it: together with the in-memory tail both ends of the output
//! survive.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use dsh_core::ring::ByteRing;
use dsh_core::spill::SpillDir;
use dsh_core::utf8;
use dsh_core::CancelToken;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, oneshot, Notify};

/// Which stream a capture holds (used in spill file names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamName {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl StreamName {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamName::Stdout => "stdout",
            StreamName::Stderr => "stderr",
        }
    }
}

/// Where the spill file of a stream is and how much of the stream it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpillInfo {
    /// The spill file (mode 0600, in a private 0700 directory).
    pub path: PathBuf,
    /// Bytes written to it.
    pub bytes: u64,
    /// True when the file holds the whole stream; false when the stream passed the spill
    /// cap, or the session's spill files reached theirs (the file then holds its first
    /// `bytes` bytes).
    pub complete: bool,
    /// Older spill files of the session deleted to make room for this one (the session's
    /// spill files together stay under a cap: see [`SpillDir::charge`]).
    pub dropped: Vec<PathBuf>,
}

/// One read of a capture from a caller-owned offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputRead {
    /// The bytes from the offset on, decoded as UTF-8 (invalid bytes become U+FFFD; a
    /// character split by the end of the data read so far is held back for the next read).
    pub text: String,
    /// Where the next read should start.
    pub next_offset: u64,
    /// True when the offset had slid out of memory: bytes were skipped, and the spill
    /// file (if any) has them.
    pub lossy: bool,
    /// The spill file, when one exists.
    pub spill: Option<SpillInfo>,
}

/// The final state of a captured stream, once the process settled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectedOutput {
    /// The retained text: the whole stream, or its tail when `truncated` (cut at a
    /// character boundary).
    pub text: String,
    /// True when bytes were dropped from memory.
    pub truncated: bool,
    /// Total bytes the stream carried.
    pub total_bytes: u64,
    /// The spill file, when one exists and was closed cleanly.
    pub spill: Option<SpillInfo>,
}

/// Limits of one capture.
#[derive(Clone, Debug)]
pub struct CaptureLimits {
    /// Bytes kept in memory (the tail).
    pub max_bytes: usize,
    /// Bytes mirrored to the spill file; `None` means no spill file is ever written.
    pub max_spill_bytes: Option<u64>,
}

/// A bounded capture of one stream. See the [module docs](self).
pub struct Capture {
    state: Mutex<State>,
    changed: Notify,
    name: StreamName,
}

struct State {
    ring: ByteRing,
    spill: SpillState,
    sealed: bool,
}

enum SpillState {
    Disabled,
    NotStarted {
        max: u64,
        dir: Arc<dyn Fn() -> Option<Arc<SpillDir>> + Send + Sync>,
    },
    Open {
        path: PathBuf,
        written: u64,
        max: u64,
        tx: Option<mpsc::Sender<Vec<u8>>>,
        done: Option<oneshot::Receiver<bool>>,
        /// The directory that grants each write ([`SpillDir::charge`]).
        dir: Arc<SpillDir>,
        /// Older files it deleted to make room for this one.
        dropped: Vec<PathBuf>,
    },
    /// Closed after the stream ended; `path` is `None` when closing failed.
    Closed {
        info: Option<SpillInfo>,
    },
}

impl Capture {
    /// A capture with `limits`. `spill_dir` is called at the first overflow to get the
    /// spill directory (so it is made lazily); returning `None` disables spilling.
    pub fn new(
        name: StreamName,
        limits: &CaptureLimits,
        spill_dir: Arc<dyn Fn() -> Option<Arc<SpillDir>> + Send + Sync>,
    ) -> Arc<Capture> {
        let spill = match limits.max_spill_bytes {
            Some(max) if max > 0 => SpillState::NotStarted {
                max,
                dir: spill_dir,
            },
            _ => SpillState::Disabled,
        };
        Arc::new(Capture {
            state: Mutex::new(State {
                ring: ByteRing::new(limits.max_bytes),
                spill,
                sealed: false,
            }),
            changed: Notify::new(),
            name,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the ring inconsistent (every update
        // is a single push), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Total bytes received so far.
    pub fn total(&self) -> u64 {
        self.lock().ring.total()
    }

    /// True once the stream ended (or was cut off) and the spill file was closed.
    pub fn is_sealed(&self) -> bool {
        self.lock().sealed
    }

    /// Reads from whole-stream byte offset `from`. Never moves shared state.
    pub fn read_from(&self, from: u64) -> OutputRead {
        let st = self.lock();
        let mut bytes = Vec::new();
        let r = st.ring.read_from(from, &mut bytes);
        let mut begin = 0;
        if r.lossy {
            begin = utf8::leading_continuations(&bytes);
        }
        // Hold back a split character until the rest of it arrives; once sealed, nothing
        // more will, so the lossy decoder gets it.
        let end = if st.sealed {
            bytes.len()
        } else {
            begin + utf8::complete_prefix_len(&bytes[begin..])
        };
        OutputRead {
            text: utf8::decode_lossy(&bytes[begin..end]),
            next_offset: r.start + end as u64,
            lossy: r.lossy,
            spill: st.spill.info(st.ring.total()),
        }
    }

    /// The final output: the retained text (cut at a character boundary when truncated)
    /// and the spill file.
    pub fn collected(&self) -> CollectedOutput {
        let st = self.lock();
        let mut bytes = Vec::new();
        st.ring.read_from(0, &mut bytes);
        let truncated = st.ring.has_dropped();
        let begin = if truncated {
            utf8::leading_continuations(&bytes)
        } else {
            0
        };
        CollectedOutput {
            text: utf8::decode_lossy(&bytes[begin..]),
            truncated,
            total_bytes: st.ring.total(),
            spill: st.spill.info(st.ring.total()),
        }
    }

    /// A future that completes when new bytes arrive or the capture is sealed after this
    /// call. Create it *before* checking the state you wait on, so nothing is missed:
    ///
    /// ```no_run
    /// # async fn f(cap: &dsh_process::Capture) {
    /// loop {
    ///     let changed = cap.changed();
    ///     if cap.read_from(0).text.contains("ready") || cap.is_sealed() {
    ///         break;
    ///     }
    ///     changed.await;
    /// }
    /// # }
    /// ```
    pub fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }

    /// Appends `chunk`, spilling as needed. Returns a spill batch to send to the writer
    /// (outside the lock) when the chunk must go to the spill file.
    fn push(&self, chunk: &[u8]) -> Option<(mpsc::Sender<Vec<u8>>, Vec<u8>)> {
        let mut st = self.lock();
        let st = &mut *st;
        let mut out = None;
        let overflow = st.ring.total() + chunk.len() as u64 > st.ring.capacity() as u64;
        if let SpillState::NotStarted { max, dir } = &st.spill {
            if overflow {
                let max = *max;
                let made =
                    dir().and_then(|d| d.create_file(self.name.as_str()).ok().map(|f| (d, f)));
                st.spill = match made {
                    Some((dir, (file, path))) => {
                        let (tx, done) = spawn_writer(file);
                        // Nothing was dropped from memory yet: the ring is the stream so far.
                        let mut first = Vec::with_capacity(st.ring.retained() + chunk.len());
                        st.ring.read_from(0, &mut first);
                        first.extend_from_slice(chunk);
                        first.truncate(max.min(usize::MAX as u64) as usize);
                        let asked = first.len() as u64;
                        let charge = dir.charge(&path, asked);
                        first.truncate(charge.granted as usize);
                        let written = first.len() as u64;
                        // The session's spill files are full: this one stops here.
                        let max = if charge.granted < asked { written } else { max };
                        out = Some((tx.clone(), first));
                        SpillState::Open {
                            path,
                            written,
                            max,
                            tx: Some(tx),
                            done: Some(done),
                            dir,
                            dropped: charge.dropped,
                        }
                    }
                    _ => SpillState::Disabled,
                };
                st.ring.push(chunk);
                return out;
            }
        }
        if let SpillState::Open {
            path,
            written,
            max,
            tx: Some(tx),
            dir,
            dropped,
            ..
        } = &mut st.spill
        {
            let room = max.saturating_sub(*written);
            if room > 0 {
                let want = (chunk.len() as u64).min(room);
                let charge = dir.charge(path, want);
                dropped.extend(charge.dropped);
                let take = charge.granted as usize;
                if charge.granted < want {
                    // The session's spill files are full: this one stops here.
                    *max = *written + charge.granted;
                }
                if take > 0 {
                    *written += take as u64;
                    out = Some((tx.clone(), chunk[..take].to_vec()));
                }
            }
        }
        st.ring.push(chunk);
        out
    }

    /// Closes the spill writer's channel; returns what the caller needs to await the
    /// writer and describe the file.
    #[allow(clippy::type_complexity)]
    fn begin_seal(
        &self,
    ) -> Option<(
        PathBuf,
        u64,
        u64,
        Option<oneshot::Receiver<bool>>,
        Vec<PathBuf>,
    )> {
        let mut st = self.lock();
        let total = st.ring.total();
        match &mut st.spill {
            SpillState::Open {
                path,
                written,
                tx,
                done,
                dropped,
                ..
            } => {
                tx.take();
                Some((path.clone(), *written, total, done.take(), dropped.clone()))
            }
            _ => None,
        }
    }

    fn finish_seal(&self, spill: Option<SpillInfo>) {
        let mut st = self.lock();
        if let SpillState::Open { .. } = st.spill {
            st.spill = SpillState::Closed { info: spill };
        }
        st.sealed = true;
        drop(st);
        self.changed.notify_waiters();
    }
}

impl SpillState {
    fn info(&self, total: u64) -> Option<SpillInfo> {
        match self {
            SpillState::Open {
                path,
                written,
                dropped,
                ..
            } => Some(SpillInfo {
                path: path.clone(),
                bytes: *written,
                complete: *written == total,
                dropped: dropped.clone(),
            }),
            SpillState::Closed { info } => info.clone(),
            _ => None,
        }
    }
}

/// The spill writer: a thread that drains a bounded channel into the file, so a slow disk
/// applies backpressure to the reader (and through the pipe to the command) instead of
/// blocking the async runtime or growing memory. It reports whether every byte was
/// written.
fn spawn_writer(file: File) -> (mpsc::Sender<Vec<u8>>, oneshot::Receiver<bool>) {
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(16);
    let (done_tx, done_rx) = oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("dsh-spill".into())
        .spawn(move || {
            let mut file = file;
            let mut ok = true;
            while let Some(buf) = rx.blocking_recv() {
                ok = ok && file.write_all(&buf).is_ok();
            }
            // No fsync: a spill file is scratch for the life of the World, and syncing up to
            // 64 MiB would hold `done` back for nothing.
            let _ = done_tx.send(ok);
        });
    // No thread: the receiver is dropped with the closure, so sends fail and the spill is
    // simply not advertised.
    drop(spawned);
    (tx, done_rx)
}

/// Reads `src` to its end (or until `stop` fires) into `capture`, then seals it.
pub(crate) async fn pump(
    capture: Arc<Capture>,
    mut src: impl AsyncRead + Unpin,
    stop: CancelToken,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut spill_intact = true;
    loop {
        let n = tokio::select! {
            biased;
            r = src.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            () = stop.cancelled() => break,
        };
        if let Some((tx, batch)) = capture.push(&buf[..n]) {
            // Backpressure: wait for the writer (a dead writer just loses the spill), but
            // never past the stop, which bounds `done`.
            tokio::select! {
                biased;
                _ = tx.send(batch) => {}
                () = stop.cancelled() => {
                    spill_intact = false;
                    break;
                }
            }
        }
        capture.changed.notify_waiters();
    }
    seal(&capture, spill_intact).await;
}

/// Seals `capture`: waits for the spill writer and records the spill file, if every byte
/// queued for it was written (`spill_intact` is false when a batch was dropped at the stop).
async fn seal(capture: &Capture, spill_intact: bool) {
    let info = match capture.begin_seal() {
        Some((path, written, total, done, dropped)) => {
            let ok = spill_intact
                && match done {
                    Some(done) => done.await.unwrap_or(false),
                    None => false,
                };
            ok.then_some(SpillInfo {
                path,
                bytes: written,
                complete: written == total,
                dropped,
            })
        }
        None => None,
    };
    capture.finish_seal(info);
}
