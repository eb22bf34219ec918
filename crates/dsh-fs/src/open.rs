//! Opening a file to read it: the file a check of its canonical path decided on, never
//! one a symlink swapped in since.

use std::os::fd::OwnedFd;
use std::path::Path;

use dsh_core::{ErrorCode, HarnessError};

use crate::fs_error;

/// `openat2(path, O_RDONLY | O_NONBLOCK, RESOLVE_NO_SYMLINKS)`: the file at `path`, which
/// must have no symlink anywhere in it (a canonical path), opened for reading without
/// waiting (a FIFO is never waited on). A component swapped for a link since `path` was
/// found fails with `ELOOP` instead of being followed, so a check of `path` holds for the
/// file opened. Where `openat2` is missing (Linux < 5.6), `open` with `O_NOFOLLOW`.
///
/// # Errors
/// The OS error.
pub fn open_no_symlinks(path: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let fd = match rustix::fs::openat2(
        rustix::fs::CWD,
        path,
        flags,
        Mode::empty(),
        ResolveFlags::NO_SYMLINKS,
    ) {
        Err(rustix::io::Errno::NOSYS) => {
            rustix::fs::open(path, flags | OFlags::NOFOLLOW, Mode::empty())
        }
        other => other,
    }?;
    Ok(std::fs::File::from(fd))
}

/// [`open_no_symlinks`] of the canonical `key`, for a call that reads `display`: what a
/// check of `key` decided holds for what is read. A component swapped for a link since
/// `key` was resolved is `FS_STALE_VERSION` (the path changed under the call).
pub(crate) fn open_for_read(key: &Path, display: &Path) -> Result<OwnedFd, HarnessError> {
    match open_no_symlinks(key) {
        Ok(file) => Ok(OwnedFd::from(file)),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => Err(fs_error(
            ErrorCode::FsStaleVersion,
            format!(
                "cannot read \"{}\": a symlink appeared on its path while the call ran; read it again",
                display.display()
            ),
        )),
        Err(e) => Err(crate::os_error("read", display, e)),
    }
}
