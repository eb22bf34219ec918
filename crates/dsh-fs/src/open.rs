//! Opening a file to read it: the file a check of its canonical path decided on, never
//! one a symlink swapped in since.

use std::os::fd::OwnedFd;
use std::path::Path;

use dsh_core::{ErrorCode, HarnessError};
use rustix::fs::{Mode, OFlags};

use crate::fs_error;

/// `openat2(key, O_RDONLY | O_NONBLOCK, RESOLVE_NO_SYMLINKS)`: the file at the canonical
/// `key` itself, never one a symlink swapped in since `key` was resolved leads to (that is
/// `FS_STALE_VERSION`: the path changed under the call), so what a check of `key` decided
/// holds for what is read. Non-blocking, so a FIFO is never waited on. Where `openat2` is
/// missing (Linux < 5.6), a plain `open`.
pub(crate) fn open_for_read(key: &Path, display: &Path) -> Result<OwnedFd, HarnessError> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let opened = rustix::fs::openat2(
        rustix::fs::CWD,
        key,
        flags,
        Mode::empty(),
        rustix::fs::ResolveFlags::NO_SYMLINKS,
    );
    match opened {
        Ok(fd) => Ok(fd),
        Err(rustix::io::Errno::NOSYS) => rustix::fs::open(key, flags, Mode::empty())
            .map_err(|e| crate::os_error("read", display, e.into())),
        Err(rustix::io::Errno::LOOP) => Err(fs_error(
            ErrorCode::FsStaleVersion,
            format!(
                "cannot read \"{}\": a symlink appeared on its path while the call ran; read it again",
                display.display()
            ),
        )),
        Err(e) => Err(crate::os_error("read", display, e.into())),
    }
}
