//! Reading a small file a confined command may have replaced with something else.
//!
//! A FIFO would block the reader forever, and a sparse multi-gigabyte file would take its
//! memory and its time; both are one command away inside a writable root. [`read`] opens
//! non-blocking, reads only a regular file, and at most a given number of bytes.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The largest git config file dsh reads (a larger one is treated as unreadable).
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The first `max` bytes of the regular file at `path` (links followed), as text (invalid
/// UTF-8 replaced); `None` when it is missing, not a regular file, or unreadable.
pub fn read(path: &Path, max: u64) -> Option<String> {
    read_bytes(path, max).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The first `max` bytes of the regular file at `path` (links followed); `None` as for
/// [`read`].
pub fn read_bytes(path: &Path, max: u64) -> Option<Vec<u8>> {
    let (file, _) = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The regular file at `path` (links followed) opened for reading without waiting (a FIFO
/// is never waited on), with its metadata as opened; `None` when it is missing, not a
/// regular file, or unreadable.
pub fn open_regular(path: &Path) -> Option<(std::fs::File, std::fs::Metadata)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    meta.is_file().then_some((file, meta))
}
