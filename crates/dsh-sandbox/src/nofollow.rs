//! File system steps dsh takes on the host in places a confined command can write, none of
//! which follows a symlink: a command may swap any component for a link at any moment,
//! and a step that followed it would act on a file of the attacker's choosing (a `chmod`
//! of `/etc/shadow`, a rewrite of another user's file).
//!
//! Directories are opened with `openat2(RESOLVE_NO_SYMLINKS)` (every component a real
//! directory), names inside them with `O_NOFOLLOW`, and modes are changed through a
//! descriptor of the inode that was checked, never by name.
//!
//! # Limits
//! `openat2` needs Linux 5.6; before it every open here fails (`ENOSYS`), and callers
//! treat that as "could not", never as "done".

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// `openat2(dirfd, path, flags | O_CLOEXEC, resolve)`.
fn openat2(dirfd: i32, path: &CStr, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve,
    };
    // SAFETY: openat2(2) with a valid C string and an open_how of the size given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    owned(i32::try_from(fd).unwrap_or(-1))
}

/// The directory `dir` (absolute) as an `O_PATH` descriptor: `dir` itself and every
/// component on the way must be real directories.
pub fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let c = cstring(dir.as_os_str())?;
    openat2(
        libc::AT_FDCWD,
        &c,
        libc::O_PATH | libc::O_DIRECTORY,
        RESOLVE_NO_SYMLINKS,
    )
}

/// `path` (absolute), a file or a directory, opened `O_PATH` with no symlink anywhere on
/// the way (`RESOLVE_NO_SYMLINKS`): what a canonical path names now, or an error (`ELOOP`)
/// where a link has been put on its way since.
pub fn open_path_no_symlinks(path: &Path) -> io::Result<OwnedFd> {
    let c = cstring(path.as_os_str())?;
    openat2(libc::AT_FDCWD, &c, libc::O_PATH, RESOLVE_NO_SYMLINKS).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot open {} without following a link: {e}",
                path.display()
            ),
        )
    })
}

/// The directory `dir`, which lies beneath `root` (or is it), opened with `flags` without
/// a symlink on the way and without leaving `root`.
pub fn open_beneath(root: &Path, dir: &Path, flags: i32) -> io::Result<OwnedFd> {
    let rel = dir
        .strip_prefix(root)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "not beneath the root"))?;
    let root_fd = open_dir(root)?;
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let c = cstring(rel.as_os_str())?;
    openat2(
        root_fd.as_raw_fd(),
        &c,
        flags | libc::O_DIRECTORY,
        RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH,
    )
}

/// `name` in the directory `dir`, opened with `flags | O_NOFOLLOW`.
pub fn open_at(dir: &OwnedFd, name: &CStr, flags: i32) -> io::Result<OwnedFd> {
    // SAFETY: openat(2) relative to our directory fd with a valid C string; the mode is
    // only used with O_CREAT.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        )
    };
    owned(fd)
}

/// What [`open_as_owner`] found instead of a file to open.
#[derive(Debug)]
pub enum Refused {
    /// A symlink, or a file with another name (a hard link) whose mode would have to
    /// change: not to be opened or changed, only moved aside whole.
    Aside,
    /// Anything else: the error to report.
    Io(io::Error),
}

/// `name` in `dir` opened with `flags` (never through a symlink). When its mode forbids
/// that, and it is this user's own file of the kind asked (`S_IFREG` or `S_IFDIR`) with
/// no other name, the owner's `bits` are added to its mode (through a descriptor of the
/// inode checked) and it is opened again.
pub fn open_as_owner(
    dir: &OwnedFd,
    name: &CStr,
    flags: i32,
    kind: u32,
    bits: u32,
) -> Result<OwnedFd, Refused> {
    match open_at(dir, name, flags) {
        Ok(fd) => return Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(Refused::Aside),
        Err(e) if e.raw_os_error() != Some(libc::EACCES) => return Err(Refused::Io(e)),
        Err(_) => {}
    }
    let path = open_at(dir, name, libc::O_PATH).map_err(Refused::Io)?;
    let st = fstat(path.as_raw_fd()).map_err(Refused::Io)?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFLNK => return Err(Refused::Aside),
        // Its mode is that of every other name too (one outside the root, say).
        libc::S_IFREG if st.st_nlink > 1 => return Err(Refused::Aside),
        k if k != kind => {
            return Err(Refused::Io(io::Error::other(
                "not a regular file or directory",
            )))
        }
        _ => {}
    }
    add_owner_bits(&path, bits).map_err(Refused::Io)?;
    match open_at(dir, name, flags) {
        Ok(fd) => Ok(fd),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => Err(Refused::Aside),
        Err(e) => Err(Refused::Io(e)),
    }
}

/// Adds `bits` (of `0o700`) to the mode of the inode behind `fd` (any descriptor, `O_PATH`
/// included) when this user owns it; no other bit changes.
///
/// # Errors
/// `PermissionDenied` for another user's inode or a symlink; the `chmod`'s own errors.
pub fn add_owner_bits(fd: &OwnedFd, bits: u32) -> io::Result<()> {
    let st = fstat(fd.as_raw_fd())?;
    // SAFETY: geteuid(2) has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if st.st_uid != euid || st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(io::Error::from(io::ErrorKind::PermissionDenied));
    }
    let want = (st.st_mode & 0o7777) | (bits & 0o700);
    if want == st.st_mode & 0o7777 {
        return Ok(());
    }
    // The inode behind the descriptor itself: /proc's link to it is followed to that
    // inode, whatever its name leads to now (fchmod refuses an O_PATH descriptor).
    let proc = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: chmod(2) with a valid C string.
    if unsafe { libc::chmod(proc.as_ptr(), want) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `fstat(fd)`.
pub(crate) fn fstat(fd: i32) -> io::Result<libc::stat> {
    // SAFETY: a zeroed stat is a valid out-buffer for fstat(2).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat(2) on an fd the caller holds and a live buffer.
    if unsafe { libc::fstat(fd, &mut st) } == 0 {
        Ok(st)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The descriptor the kernel returned, or its error.
pub(crate) fn owned(fd: i32) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd the kernel just returned to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `s` as a C string; a NUL byte in it is `InvalidInput`.
pub(crate) fn cstring(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a path"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    // A directory the walk cannot list, swapped for a link to a host file between the
    // check and a chmod by name, must not give the file the directory's mode (1777).
    #[test]
    fn modes_change_only_on_the_inode_checked_and_only_by_the_owner_bits() {
        let d = tempfile::tempdir().expect("tempdir");
        let victim = d.path().join("victim");
        std::fs::write(&victim, "x").expect("victim");
        std::fs::set_permissions(&victim, PermissionsExt::from_mode(0o600)).expect("chmod");
        let dir = d.path().join("dir");
        std::fs::create_dir(&dir).expect("dir");
        std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o1070)).expect("chmod");
        let fd = open_dir(&dir).expect("open");
        // The name now leads elsewhere: the descriptor's inode is still the one changed.
        std::fs::rename(&dir, d.path().join("gone")).expect("mv");
        std::os::unix::fs::symlink(&victim, &dir).expect("link");
        add_owner_bits(&fd, 0o500).expect("chmod");
        let mode = |p: &Path| {
            std::fs::symlink_metadata(p)
                .expect("meta")
                .permissions()
                .mode()
        };
        assert_eq!(mode(&d.path().join("gone")) & 0o7777, 0o1570);
        assert_eq!(mode(&victim) & 0o7777, 0o600);
        // And a link on the way is never passed.
        assert!(open_dir(&dir).is_err());
        assert!(open_beneath(d.path(), &dir.join("x"), libc::O_RDONLY).is_err());
    }
}
