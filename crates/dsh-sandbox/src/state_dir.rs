//! The user's dsh state directory (`$XDG_STATE_HOME/dsh`, else `~/.local/state/dsh`):
//! where dsh keeps what it must remember across processes about what confined commands
//! did (the placeholders it made, what it could not set aside).
//!
//! No confined command can write there: a writable root that holds the home directory or
//! the state directory, or lies inside the state directory, is a gap of every runner
//! (refused unless partial enforcement is accepted). Each area is a directory of this user's with no access for anyone else,
//! opened once per process without following a symlink.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// The state directory (`$XDG_STATE_HOME/dsh`, else `~/.local/state/dsh`), canonical as
/// far as it exists; `None` without a home.
pub fn path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => crate::home_dir()?.join(".local/state"),
    };
    base.is_absolute()
        .then(|| dsh_core::path::canonical_path(&base.join("dsh")))
}

/// The area `name` (one plain path component) of the state directory, made (0700) and
/// checked (a real directory of this user's that nobody else may enter); `None` where
/// there is none (no home, another owner, a link) or `name` is not one plain component.
pub fn open(name: &str) -> Option<OwnedFd> {
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']);
    if !plain {
        return None;
    }
    let dsh = path()?;
    let path = dsh.join(name);
    let _ = std::fs::create_dir_all(&dsh);
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: mkdir(2) with a valid C string.
    unsafe {
        libc::mkdir(c.as_ptr(), 0o700);
    }
    let fd = crate::nofollow::open_dir(&path).ok()?;
    let st = crate::nofollow::fstat(fd.as_raw_fd()).ok()?;
    // SAFETY: geteuid(2) has no preconditions.
    let ours = st.st_uid == unsafe { libc::geteuid() } && st.st_mode & 0o077 == 0;
    // A directory fd to read and write in (the O_PATH one serves only to check).
    let dir = crate::nofollow::open_at(&fd, c".", libc::O_RDONLY | libc::O_DIRECTORY).ok()?;
    ours.then_some(dir)
}
