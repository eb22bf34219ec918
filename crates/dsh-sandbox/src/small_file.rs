//! Reading the small files git keeps its facts in (`.git` pointers, `commondir`, config
//! files), which a confined command may have replaced with something else.
//!
//! A FIFO would block the reader forever, and a sparse multi-gigabyte file would take its
//! memory and its time; both are one command away inside a writable root. [`read`] opens
//! non-blocking, reads only a regular file, and at most a given number of bytes.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The first `max` bytes of the regular file at `path` (links followed), as text (invalid
/// UTF-8 replaced); `None` when it is missing, not a regular file, or unreadable.
pub(crate) fn read(path: &Path, max: u64) -> Option<String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(max).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// What a pointer-sized file (`.git`, `commondir`, `gitdir`) may hold: a path and a line
/// break, with room to spare.
pub(crate) const POINTER_MAX: u64 = 8192;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_a_directory_and_a_huge_file_are_read_safely() {
        let d = tempfile::tempdir().expect("tempdir");
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("c");
        // SAFETY: mkfifo(3) with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(read(&fifo, 100), None, "a FIFO is not read (nor waited on)");
        assert_eq!(read(d.path(), 100), None);
        let big = d.path().join("big");
        let f = std::fs::File::create(&big).expect("big");
        f.set_len(1 << 40).expect("sparse");
        assert_eq!(read(&big, 4).map(|s| s.len()), Some(4));
    }
}
