//! Placeholders: empty, read-only stand-ins for protected paths that do not exist, shared
//! by every dsh process on the host.
//!
//! bubblewrap can only keep a missing path uncreatable by mounting something there, and a
//! mount needs a mount point on the host: an empty directory or file at that path. While
//! any confined command relies on it, nobody may remove it (the kernel would detach the
//! command's mount, and the command could then create the path). Two dsh processes on one
//! workspace (two agent sessions, two `dsh tool` calls) must therefore share each
//! placeholder.
//!
//! The share is a shared `flock` on the placeholder itself, held by every confinement
//! that uses it until its command's tree is gone. The kernel drops a lock when its holder
//! dies, even by `SIGKILL`, so a count can never stick. A placeholder is made under a
//! temporary name, locked, made read-only and only then renamed into place
//! (`RENAME_NOREPLACE`), so it is never visible unlocked; then it is recorded in the
//! user's registry of placeholders (`$XDG_STATE_HOME/dsh/placeholders`, one entry per
//! `(device, inode)` holding its birth time), a directory no confined command can write. A
//! path that exists and could be a placeholder (an empty file, a `commondir` reading `.`, a
//! directory) is locked too, whoever made it. Removal: a holder drops its shared lock, then
//! takes the exclusive one without waiting; only the one that gets it (no other holder
//! left) removes the path, and only if the registry says it is a placeholder (the same
//! inode, born when recorded) and it is still empty (two holders releasing at once: the
//! kernel orders their attempts, and the later one finds the name gone). A holder that
//! locked a path just as it was removed sees the name no longer leads to its inode, and
//! starts over. Nothing a command can set on a file (an attribute, a mode) makes dsh take
//! it for a placeholder.
//!
//! Every step goes through a directory fd opened with `openat2(RESOLVE_NO_SYMLINKS)`, so a
//! command that swapped a parent for a symlink cannot make dsh create or remove anything
//! elsewhere.
//!
//! # Limits
//! A placeholder that is not empty when its last holder is done (only someone outside
//! every sandbox can put something in one: the user, an editor, a root process) is left
//! with what is in it, writable to its owner again and no longer a placeholder.
//! A dsh killed while holding placeholders leaves them behind, empty and recorded; the
//! next confinement of the same user that meets one adopts it and removes it when done. A
//! placeholder another user's dsh made (a root dsh in a user's workspace) is shared but
//! only removed by a dsh of that user. Without a registry (no home or state directory) a
//! placeholder is removed only by the process that made it.
//! Where `openat2` is missing (Linux < 5.6) placeholders are not shared: the caller falls
//! back to letting bubblewrap make the mount point.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::nofollow::{cstring, fstat, open_dir, owned};

/// The content of a placeholder `commondir`: the git dir itself.
pub const COMMONDIR_PLACEHOLDER: &str = ".\n";

/// Names that are directories when they exist (a placeholder for a missing one is an empty
/// directory, so tools that look for a file of that name are not confused).
pub const DIRECTORY_NAMES: &[&str] = &[
    ".git",
    "hooks",
    "remotes",
    "branches",
    ".husky",
    ".lefthook",
    ".dsh",
    ".vscode",
    ".idea",
    ".zed",
    ".devcontainer",
    ".claude",
    ".cursor",
    ".codex",
    ".gemini",
    ".windsurf",
    ".amazonq",
    ".kiro",
    ".roo",
    ".continue",
    ".opencode",
    ".cargo",
];

/// Modes of placeholders.
const FILE_MODE: u32 = 0o444;
const DIR_MODE: u32 = 0o555;
/// Attempts to make or join one placeholder before giving up (each lost race with a
/// concurrent removal costs one).
const ATTEMPTS: usize = 16;

/// What stands in for a missing path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An empty directory.
    Dir,
    /// An empty file.
    File,
    /// A file holding [`COMMONDIR_PLACEHOLDER`].
    Commondir,
}

/// One placeholder (or a path that may be one) this confinement holds a lock on.
struct Held {
    path: PathBuf,
    fd: OwnedFd,
    /// Whether this holder may remove it when it is the last one (a marked placeholder);
    /// never for a path that was there unmarked (someone's real, empty file).
    removable: bool,
}

/// The placeholders one confinement holds. Keep it until the command's whole tree is
/// gone; dropping it releases each, removing those no other holder on the host uses.
#[derive(Default)]
pub struct Placeholders {
    held: Vec<Held>,
    /// Files of the confinement's own (a generated `info/exclude`), removed on drop.
    scratch: Vec<PathBuf>,
}

impl std::fmt::Debug for Placeholders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.held.iter().map(|h| &h.path))
            .finish()
    }
}

impl Placeholders {
    /// An empty set.
    pub(crate) fn new() -> Placeholders {
        Placeholders::default()
    }

    /// The paths held (made, adopted or shared).
    pub fn paths(&self) -> Vec<PathBuf> {
        self.held.iter().map(|h| h.path.clone()).collect()
    }

    /// The paths held that were made as placeholders (not someone's real empty file).
    pub(crate) fn made(&self) -> Vec<PathBuf> {
        self.held
            .iter()
            .filter(|h| h.removable)
            .map(|h| h.path.clone())
            .collect()
    }

    /// Removes `path` (a file of this confinement's own) when the placeholders go.
    pub(crate) fn remove_on_drop(&mut self, path: PathBuf) {
        self.scratch.push(path);
    }

    /// Makes sure `at` (whose parent exists) is there for a read-only mount: a placeholder
    /// of `kind` made now or shared with its maker, or an existing path, locked if it
    /// could be a placeholder.
    ///
    /// # Errors
    /// Why it could not (no `openat2`, a symlink on the way, an I/O error): the caller
    /// then lets bubblewrap make the mount point, unshared.
    pub(crate) fn ensure(&mut self, at: &Path, kind: Kind) -> Result<(), String> {
        let (Some(parent), Some(name)) = (at.parent(), at.file_name()) else {
            return Err(format!("{}: no parent directory", at.display()));
        };
        if !at.components().all(|c| {
            matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        }) {
            return Err(format!("{}: not a plain absolute path", at.display()));
        }
        let dir = open_dir(parent)
            .map_err(|e| format!("cannot open {} without symlinks: {e}", parent.display()))?;
        for _ in 0..ATTEMPTS {
            match stat_at(&dir, name) {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    match make(&dir, name, kind) {
                        Ok(fd) => {
                            self.held.push(Held {
                                path: at.to_path_buf(),
                                fd,
                                removable: true,
                            });
                            return Ok(());
                        }
                        // Someone made it first: join theirs.
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                        Err(e) => return Err(format!("cannot make {}: {e}", at.display())),
                    }
                }
                Err(e) => return Err(format!("cannot stat {}: {e}", at.display())),
                Ok(st) => {
                    if !could_be_placeholder(&st) {
                        return Ok(());
                    }
                    match join(&dir, name, &st) {
                        Ok(Some((fd, removable))) => {
                            self.held.push(Held {
                                path: at.to_path_buf(),
                                fd,
                                removable,
                            });
                            return Ok(());
                        }
                        // Removed (or replaced) while we locked it: look again.
                        Ok(None) => continue,
                        Err(e) => return Err(format!("cannot lock {}: {e}", at.display())),
                    }
                }
            }
        }
        Err(format!(
            "{}: kept changing while it was being locked",
            at.display()
        ))
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        // Innermost first, so a placeholder directory made inside another one is gone
        // before its parent is looked at.
        self.held
            .sort_by_key(|h| std::cmp::Reverse(h.path.components().count()));
        for h in self.held.drain(..) {
            release(h);
        }
        for p in self.scratch.drain(..) {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Drops `h`'s share; removes the placeholder if `h` was its last holder.
fn release(h: Held) {
    let fd = h.fd.as_raw_fd();
    let _ = lock(fd, libc::LOCK_UN);
    if !h.removable || lock(fd, libc::LOCK_EX | libc::LOCK_NB).is_err() {
        // Another holder remains (or it was never ours to remove).
        return;
    }
    let (Some(parent), Some(name)) = (h.path.parent(), h.path.file_name()) else {
        return;
    };
    let Ok(dir) = open_dir(parent) else {
        return;
    };
    let (Ok(now), Ok(mine)) = (stat_at(&dir, name), fstat(fd)) else {
        return;
    };
    if (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino) || !registry::has(fd) {
        return;
    }
    let Ok(name_c) = CString::new(name.as_bytes()) else {
        return;
    };
    let is_dir = mine.st_mode & libc::S_IFMT == libc::S_IFDIR;
    // Only a placeholder that is still empty goes: no confined command can put anything
    // in one (it is read-only in every sandbox), so what is there now was put there from
    // outside (the user, an editor, a root process) and is someone's data.
    let unlink = |flags: i32| {
        // SAFETY: unlinkat(2) on our directory fd with a valid C string; rmdir refuses a
        // directory that is not empty.
        if unsafe { libc::unlinkat(dir.as_raw_fd(), name_c.as_ptr(), flags) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    let outcome = if is_dir {
        unlink(libc::AT_REMOVEDIR)
    } else if holds_placeholder_content(fd, &mine) {
        unlink(0)
    } else {
        Err(io::Error::from_raw_os_error(libc::ENOTEMPTY))
    };
    match outcome {
        Ok(()) => registry::forget(&mine),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY | libc::EEXIST)) => {
            // Left as someone's: no longer a placeholder, and writable to its owner again.
            registry::forget(&mine);
            // SAFETY: fchmod(2) on our fd.
            unsafe {
                libc::fchmod(fd, if is_dir { 0o755 } else { 0o644 });
            }
        }
        // Kept in the registry: the next dsh that meets it tries again.
        Err(_) => {}
    }
    // The exclusive lock goes with `h.fd` after the name is gone: a joiner waiting for it
    // then finds its inode unlinked and starts over.
}

/// Makes the placeholder `name` in `dir`: under a temporary name, locked and marked, then
/// renamed into place without replacing anything. `EEXIST` when the name was taken.
fn make(dir: &OwnedFd, name: &OsStr, kind: Kind) -> io::Result<OwnedFd> {
    let mut tmp = OsString::from(".");
    tmp.push(name);
    tmp.push(format!(
        ".dsh-placeholder-{}-{}",
        std::process::id(),
        dsh_core::spill::random_hex(8)
    ));
    let tmp_c = cstring(&tmp)?;
    let d = dir.as_raw_fd();
    let fd = match kind {
        Kind::Dir => {
            // SAFETY: mkdirat(2)/openat(2) on our directory fd with a valid C string.
            // Writable by its owner until marked: setting a user attribute needs write
            // permission on the inode.
            let made = unsafe { libc::mkdirat(d, tmp_c.as_ptr(), 0o700) };
            if made != 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = unsafe {
                libc::openat(
                    d,
                    tmp_c.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                )
            };
            owned(fd)?
        }
        Kind::File | Kind::Commondir => {
            // SAFETY: openat(2) on our directory fd with a valid C string; the mode is
            // applied to the new file, while this fd may still write it.
            let fd = unsafe {
                libc::openat(
                    d,
                    tmp_c.as_ptr(),
                    libc::O_RDWR
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o600,
                )
            };
            let fd = owned(fd)?;
            if kind == Kind::Commondir {
                let bytes = COMMONDIR_PLACEHOLDER.as_bytes();
                // SAFETY: write(2) of a live buffer to our fd.
                let n = unsafe { libc::write(fd.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
                if usize::try_from(n).ok() != Some(bytes.len()) {
                    let e = io::Error::last_os_error();
                    unlink_tmp(d, &tmp_c, false);
                    return Err(e);
                }
            }
            fd
        }
    };
    let is_dir = kind == Kind::Dir;
    let mode = if is_dir { DIR_MODE } else { FILE_MODE };
    // SAFETY: fchmod(2) on our fd.
    unsafe {
        libc::fchmod(fd.as_raw_fd(), mode);
    }
    if let Err(e) = lock_within(fd.as_raw_fd(), libc::LOCK_SH) {
        unlink_tmp(d, &tmp_c, is_dir);
        return Err(e);
    }
    let name_c = cstring(name)?;
    // SAFETY: renameat2(2) within our directory fd, valid C strings.
    let r = unsafe {
        libc::renameat2(
            d,
            tmp_c.as_ptr(),
            d,
            name_c.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        unlink_tmp(d, &tmp_c, is_dir);
        return Err(e);
    }
    registry::record(fd.as_raw_fd());
    Ok(fd)
}

fn unlink_tmp(dir: i32, name: &CString, is_dir: bool) {
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: unlinkat(2) on our directory fd with a valid C string.
    unsafe {
        libc::unlinkat(dir, name.as_ptr(), flags);
    }
}

/// Locks the existing `name` in `dir` (stat `st`) for reading. `Some((fd, removable))`
/// when the name still leads to the locked inode; `None` when it was removed or replaced
/// meanwhile.
fn join(dir: &OwnedFd, name: &OsStr, st: &libc::stat) -> io::Result<Option<(OwnedFd, bool)>> {
    let name_c = cstring(name)?;
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let flags = libc::O_RDONLY
        | libc::O_NOFOLLOW
        | libc::O_CLOEXEC
        | libc::O_NONBLOCK
        | if is_dir { libc::O_DIRECTORY } else { 0 };
    // SAFETY: openat(2) on our directory fd with a valid C string.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name_c.as_ptr(), flags) };
    let fd = match owned(fd) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
        Err(e) => return Err(e),
    };
    // Waits while a remover holds the exclusive lock (briefly); a lock held longer is not
    // a dsh's: then the path is bound as it is, unheld (nobody can remove it meanwhile
    // either, as no dsh gets the exclusive lock).
    if lock_within(fd.as_raw_fd(), libc::LOCK_SH).is_err() {
        return Ok(Some((fd, false)));
    }
    let mine = fstat(fd.as_raw_fd())?;
    match stat_at(dir, name) {
        Ok(now) if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino) => {
            let removable = registry::has(fd.as_raw_fd());
            Ok(Some((fd, removable)))
        }
        _ => Ok(None),
    }
}

/// Whether `path` is a placeholder directory (made by some dsh process, marked): a
/// protected path beneath it is covered by its mount already, so nothing is made in it.
pub(crate) fn is_placeholder_dir(path: &Path) -> bool {
    let Ok(c) = cstring(path.as_os_str()) else {
        return false;
    };
    // SAFETY: open(2) with a valid C string; O_NOFOLLOW | O_DIRECTORY: a real directory.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    owned(fd).is_ok_and(|fd| registry::has(fd.as_raw_fd()))
}

/// Whether a path with this stat could be a placeholder: an empty file, a `commondir`
/// placeholder (two bytes), or a directory. Anything else is someone's real file.
fn could_be_placeholder(st: &libc::stat) -> bool {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => st.st_size <= COMMONDIR_PLACEHOLDER.len() as libc::off_t,
        libc::S_IFDIR => true,
        _ => false,
    }
}

/// Whether the file behind `fd` is still empty or holds exactly the `commondir`
/// placeholder.
fn holds_placeholder_content(fd: i32, st: &libc::stat) -> bool {
    if st.st_size == 0 {
        return true;
    }
    let want = COMMONDIR_PLACEHOLDER.as_bytes();
    if st.st_size != want.len() as libc::off_t {
        return false;
    }
    let mut buf = [0u8; 8];
    // SAFETY: pread(2) on our fd into a live buffer of the size given.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    usize::try_from(n).ok() == Some(want.len()) && &buf[..want.len()] == want
}

/// How long a shared lock is waited for: a dsh that removes a placeholder holds the
/// exclusive lock for a few system calls.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `flock(fd, op | LOCK_NB)`, retried for at most [`LOCK_WAIT`]: a confined command that
/// holds a lock on a path it can open must not stall dsh.
fn lock_within(fd: i32, op: i32) -> io::Result<()> {
    let start = std::time::Instant::now();
    loop {
        match lock(fd, op | libc::LOCK_NB) {
            Err(e)
                if e.raw_os_error() == Some(libc::EWOULDBLOCK) && start.elapsed() < LOCK_WAIT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            other => return other,
        }
    }
}

/// `flock(fd, op)`, retried on `EINTR`.
fn lock(fd: i32, op: i32) -> io::Result<()> {
    loop {
        // SAFETY: flock(2) on an fd we own.
        if unsafe { libc::flock(fd, op) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

fn stat_at(dir: &OwnedFd, name: &OsStr) -> io::Result<libc::stat> {
    let c = cstring(name)?;
    // SAFETY: a zeroed stat is a valid out-buffer for fstatat(2).
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat(2) on our directory fd, a valid C string and a live buffer.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r == 0 {
        Ok(st)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The user's record of the placeholders dsh made: `STATE/dsh/placeholders/<dev>-<ino>`
/// holding the inode's birth time. It lives where no confined command can write (a
/// writable root that holds the home directory is refused), so only dsh decides what is a
/// placeholder.
mod registry {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::sync::OnceLock;

    /// The registry's directory fd, opened once per process; `None` where it cannot be
    /// had.
    fn dir() -> Option<&'static OwnedFd> {
        static DIR: OnceLock<Option<OwnedFd>> = OnceLock::new();
        DIR.get_or_init(|| crate::state_dir::open("placeholders"))
            .as_ref()
    }

    /// `(name, birth)` of the inode behind `fd`: `<dev>-<ino>` and its birth time (the
    /// change time where the filesystem keeps no birth time).
    fn identity(fd: i32) -> Option<(CString, String)> {
        // SAFETY: a zeroed statx is a valid out-buffer for statx(2).
        let mut stx: libc::statx = unsafe { std::mem::zeroed() };
        let empty = b"\0";
        // SAFETY: statx(2) on our fd with AT_EMPTY_PATH and a live buffer.
        let r = unsafe {
            libc::statx(
                fd,
                empty.as_ptr().cast(),
                libc::AT_EMPTY_PATH,
                libc::STATX_INO | libc::STATX_BTIME | libc::STATX_CTIME,
                &mut stx,
            )
        };
        if r != 0 {
            return None;
        }
        let dev = (u64::from(stx.stx_dev_major) << 32) | u64::from(stx.stx_dev_minor);
        let name = CString::new(format!("{dev:x}-{:x}", stx.stx_ino)).ok()?;
        let born = if stx.stx_mask & libc::STATX_BTIME != 0 {
            format!("b{}.{}", stx.stx_btime.tv_sec, stx.stx_btime.tv_nsec)
        } else {
            format!("c{}.{}", stx.stx_ctime.tv_sec, stx.stx_ctime.tv_nsec)
        };
        Some((name, born))
    }

    /// Records the inode behind `fd` as a placeholder.
    pub(super) fn record(fd: i32) {
        let (Some(dir), Some((name, born))) = (dir(), identity(fd)) else {
            return;
        };
        // SAFETY: openat(2) relative to our directory fd with a valid C string.
        let f = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                0o600,
            )
        };
        if f >= 0 {
            // SAFETY: a fresh fd the kernel returned.
            let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(f) });
            let _ = std::io::Write::write_all(&mut &f, born.as_bytes());
        }
    }

    /// Whether the inode behind `fd` is a recorded placeholder (same inode, same birth).
    pub(super) fn has(fd: i32) -> bool {
        let (Some(dir), Some((name, born))) = (dir(), identity(fd)) else {
            return false;
        };
        // SAFETY: openat(2) relative to our directory fd with a valid C string.
        let f = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if f < 0 {
            return false;
        }
        // SAFETY: a fresh fd the kernel returned.
        let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(f) });
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::Read::take(&f, 64), &mut text);
        text == born
    }

    /// Drops the record of the (removed) inode `st` described.
    pub(super) fn forget(st: &libc::stat) {
        let Some(dir) = dir() else {
            return;
        };
        let dev = (u64::from(libc::major(st.st_dev)) << 32) | u64::from(libc::minor(st.st_dev));
        let Ok(name) = CString::new(format!("{dev:x}-{:x}", st.st_ino)) else {
            return;
        };
        // SAFETY: unlinkat(2) relative to our directory fd with a valid C string.
        unsafe {
            libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().expect("tempdir");
        let p = dsh_core::path::canonical_path(d.path());
        (d, p)
    }

    #[test]
    fn a_placeholder_lives_while_any_holder_does() {
        let (_d, r) = root();
        let at = r.join(".mcp.json");
        let mut a = Placeholders::new();
        a.ensure(&at, Kind::File).expect("a");
        assert!(at.is_file());
        let mut b = Placeholders::new();
        b.ensure(&at, Kind::File).expect("b");
        assert_eq!(b.made(), vec![at.clone()], "a marked placeholder is shared");
        drop(a);
        assert!(at.exists(), "removed while b still holds it");
        drop(b);
        assert!(!at.exists(), "the last holder removes it");
    }

    #[test]
    fn a_real_empty_file_is_held_but_never_removed() {
        let (_d, r) = root();
        let at = r.join(".npmrc");
        std::fs::write(&at, "").expect("user file");
        let mut a = Placeholders::new();
        a.ensure(&at, Kind::File).expect("a");
        assert!(a.made().is_empty());
        drop(a);
        assert!(at.exists());
    }

    #[test]
    fn a_commondir_placeholder_reads_dot_and_a_left_one_is_adopted() {
        let (_d, r) = root();
        let at = r.join("commondir");
        let mut a = Placeholders::new();
        a.ensure(&at, Kind::Commondir).expect("a");
        assert_eq!(std::fs::read_to_string(&at).expect("read"), ".\n");
        // As if its maker was killed: its fds close (the lock goes), nothing is removed.
        drop(std::mem::take(&mut a.held));
        assert!(at.exists());
        let mut b = Placeholders::new();
        b.ensure(&at, Kind::Commondir).expect("b");
        assert_eq!(b.made(), vec![at.clone()]);
        drop(b);
        assert!(!at.exists());
    }

    // Files put in a placeholder directory while its command runs (as the user's editor
    // or a root process can: only a sandbox cannot) are left there: the release must not
    // delete them.
    #[test]
    fn a_placeholder_someone_put_files_in_is_left_with_them() {
        use std::os::unix::fs::PermissionsExt;
        let (_d, r) = root();
        let at = r.join(".vscode");
        let mut a = Placeholders::new();
        a.ensure(&at, Kind::Dir).expect("a");
        std::fs::set_permissions(&at, PermissionsExt::from_mode(0o755)).expect("chmod");
        std::fs::create_dir(at.join("deep")).expect("deep");
        std::fs::write(at.join("deep/settings.json"), "{}").expect("write");
        drop(a);
        assert_eq!(
            std::fs::read(at.join("deep/settings.json")).expect("kept"),
            b"{}"
        );
        assert!(!is_placeholder_dir(&at), "still taken for a placeholder");
        let mode = std::fs::metadata(&at).expect("meta").permissions().mode();
        assert_eq!(mode & 0o700, 0o700, "not writable to its owner again");
        // The next confinement holds it as the user's directory, and leaves it.
        let mut b = Placeholders::new();
        b.ensure(&at, Kind::Dir).expect("b");
        assert!(b.made().is_empty());
        drop(b);
        assert!(at.join("deep/settings.json").exists());
    }

    // The old placeholder mark (an extended attribute) set on a user's `.git` must not
    // make the next call take it for a placeholder and empty it.
    #[test]
    fn nothing_a_command_can_set_makes_a_real_directory_a_placeholder() {
        let (_d, r) = root();
        let at = r.join(".git");
        std::fs::create_dir_all(at.join("objects")).expect("git");
        std::fs::write(at.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        let c = CString::new(at.as_os_str().as_bytes()).expect("c");
        // SAFETY: setxattr(2) with valid C strings and a live value.
        unsafe {
            libc::setxattr(
                c.as_ptr(),
                c"user.dsh.placeholder".as_ptr(),
                b"1".as_ptr().cast(),
                1,
                0,
            );
        }
        std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(0o555))
            .expect("chmod");
        assert!(!is_placeholder_dir(&at));
        let mut a = Placeholders::new();
        a.ensure(&at, Kind::Dir).expect("a");
        assert!(a.made().is_empty());
        drop(a);
        assert!(at.join("HEAD").exists() && at.join("objects").is_dir());
        std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod back");
    }

    #[test]
    fn nothing_is_made_through_a_symlinked_parent() {
        let (_d, r) = root();
        let elsewhere = r.join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("dir");
        std::os::unix::fs::symlink(&elsewhere, r.join(".git")).expect("link");
        let mut a = Placeholders::new();
        assert!(a.ensure(&r.join(".git/hooks"), Kind::Dir).is_err());
        assert!(!elsewhere.join("hooks").exists());
    }
}
