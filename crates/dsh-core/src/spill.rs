//! Spill files: where output too large for memory goes, privately.
//!
//! A [`SpillDir`] is one private directory (mode 0700, made with an unpredictable name)
//! per World. Each [`SpillDir::create_file`] opens a new file in it with
//! `O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC` and mode 0600, under an unpredictable name,
//! so a file or symlink planted in advance makes the open fail instead of being written
//! through. The directory and everything in it are removed when the last `Arc<SpillDir>`
//! is dropped, unless it was made with [`SpillDir::keep`]. A directory is named for its
//! process (`dsh-spill-<pid>-<random>`), so one left by a dsh that was killed is removed by
//! the next [`SpillDir::create`] in the same place; a kept one is named
//! `dsh-spill-kept-<random>` and never removed by dsh.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};

use crate::{ErrorCode, HarnessError};

/// A private directory for spill files. See the [module docs](self).
#[derive(Debug)]
pub struct SpillDir {
    path: PathBuf,
    keep: bool,
    counter: AtomicU64,
    /// The most bytes all its files may hold together ([`DEFAULT_TOTAL_CAP`]).
    total_cap: u64,
    /// The free space every write leaves on the filesystem ([`DISK_FLOOR`]).
    disk_floor: u64,
    ledger: std::sync::Mutex<Ledger>,
}

/// The files of a [`SpillDir`], oldest first, with the bytes granted to each.
#[derive(Debug, Default)]
struct Ledger {
    files: std::collections::VecDeque<(PathBuf, u64)>,
    total: u64,
}

/// The default cap on all the spill files of one directory (one World: a session) together:
/// 1 GiB. Past it the oldest files are deleted to make room ([`SpillDir::charge`]).
pub const DEFAULT_TOTAL_CAP: u64 = 1 << 30;

/// The free space a spill file never takes the filesystem below: 512 MiB.
pub const DISK_FLOOR: u64 = 512 << 20;

/// What [`SpillDir::charge`] granted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Charge {
    /// How many of the bytes asked for may be written (fewer when the cap or the disk's
    /// floor is reached even after deleting every older file).
    pub granted: u64,
    /// Older spill files deleted to make room.
    pub dropped: Vec<PathBuf>,
}

impl SpillDir {
    /// Creates a fresh private directory `dsh-spill-<pid>-<random>` under `parent`
    /// (default: [`private_parent`], else the system temp directory), first removing the
    /// ones there of dsh processes that died without removing theirs. It is removed on
    /// drop.
    ///
    /// # Errors
    /// `IO_FAILED` when the directory cannot be created.
    pub fn create(parent: Option<&Path>) -> Result<SpillDir, HarnessError> {
        let parent = match parent {
            Some(p) => p.to_path_buf(),
            None => {
                // Where spill directories were kept before they moved into the private
                // parent.
                remove_stale(&std::env::temp_dir());
                ensure_private_parent().unwrap_or_else(|_| std::env::temp_dir())
            }
        };
        remove_stale(&parent);
        for _ in 0..8 {
            let path = parent.join(format!(
                "{DIR_PREFIX}{}-{}",
                std::process::id(),
                random_hex(12)
            ));
            match rustix::fs::mkdir(&path, Mode::RWXU) {
                Ok(()) => {
                    // mkdir honours the umask; a umask can only narrow 0700, never widen it.
                    return Ok(SpillDir {
                        path,
                        keep: false,
                        counter: AtomicU64::new(0),
                        total_cap: DEFAULT_TOTAL_CAP,
                        disk_floor: DISK_FLOOR,
                        ledger: std::sync::Mutex::new(Ledger::default()),
                    });
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(e) => {
                    return Err(HarnessError::new(
                        ErrorCode::IoFailed,
                        format!(
                            "cannot create the spill directory under {}",
                            parent.display()
                        ),
                    )
                    .with_source(io::Error::from(e)))
                }
            }
        }
        Err(HarnessError::new(
            ErrorCode::IoFailed,
            format!(
                "cannot create a fresh spill directory under {}",
                parent.display()
            ),
        ))
    }

    /// The same directory with its files capped at `bytes` together (and the disk's floor
    /// at `floor`). Default: [`DEFAULT_TOTAL_CAP`], [`DISK_FLOOR`].
    pub fn with_caps(mut self, bytes: u64, floor: u64) -> Self {
        self.total_cap = bytes;
        self.disk_floor = floor;
        self
    }

    /// Asks to write `n` more bytes to the file at `path` (one of this directory's): the
    /// oldest other files are deleted while the directory's files would pass its cap
    /// together, or the write would leave the filesystem below its floor; what is granted
    /// is what then fits. A file deleted while its command still writes it frees its space
    /// once that command's capture closes it.
    pub fn charge(&self, path: &Path, n: u64) -> Charge {
        let mut ledger = self.ledger.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Charge::default();
        let free = || -> u64 {
            rustix::fs::statvfs(&self.path)
                .map(|st| st.f_bavail.saturating_mul(st.f_frsize))
                .unwrap_or(u64::MAX)
        };
        loop {
            let over_cap = ledger.total.saturating_add(n) > self.total_cap;
            let over_floor = free() < self.disk_floor.saturating_add(n);
            if !over_cap && !over_floor {
                break;
            }
            let Some(i) = ledger.files.iter().position(|(p, _)| p != path) else {
                break;
            };
            let Some((old, bytes)) = ledger.files.remove(i) else {
                break;
            };
            ledger.total = ledger.total.saturating_sub(bytes);
            let _ = std::fs::remove_file(&old);
            out.dropped.push(old);
        }
        let room = self.total_cap.saturating_sub(ledger.total);
        let disk = free().saturating_sub(self.disk_floor);
        out.granted = n.min(room).min(disk);
        ledger.total += out.granted;
        match ledger.files.iter_mut().find(|(p, _)| p == path) {
            Some((_, b)) => *b += out.granted,
            None => ledger.files.push_back((path.to_path_buf(), out.granted)),
        }
        out
    }

    /// Keeps the directory and its files after drop (so printed spill paths stay valid),
    /// renamed `dsh-spill-kept-<random>` so no later dsh takes it for a dead one's. Call it
    /// before making files in it. Default: removed on drop.
    pub fn keep(mut self) -> Self {
        self.keep = true;
        if let Some(parent) = self.path.parent() {
            let kept = parent.join(format!("dsh-spill-kept-{}", random_hex(12)));
            if std::fs::rename(&self.path, &kept).is_ok() {
                self.path = kept;
            }
        }
        self
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates a new spill file `<label>-<n>-<random>.log`, exclusively, mode 0600.
    ///
    /// # Errors
    /// `IO_FAILED` when the file cannot be created (the directory vanished, the disk is
    /// full, a name collided with something planted there).
    pub fn create_file(&self, label: &str) -> Result<(File, PathBuf), HarnessError> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let name = format!("{label}-{n}-{}.log", random_hex(12));
        let path = self.path.join(name);
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::open(&path, flags, Mode::RUSR | Mode::WUSR) {
            Ok(fd) => Ok((File::from(fd), path)),
            Err(e) => Err(HarnessError::new(
                ErrorCode::IoFailed,
                format!("cannot create spill file {}", path.display()),
            )
            .with_source(io::Error::from(e))),
        }
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        if !self.keep {
            // The directory is ours and private (0700): nothing else can have planted a
            // link in it, and remove_dir_all does not follow symlinks.
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The one directory where this user's dsh processes keep their private directories (spill
/// directories, sandbox areas): `dsh-<uid>` in `/var/tmp` (on disk, and shared by every
/// process of the user whatever its `TMPDIR`), else in the temp directory. Confined
/// commands cannot read it (it is closed as a home is: see `dsh_sandbox::deny_read`).
pub fn private_parent() -> PathBuf {
    let base = if Path::new("/var/tmp").is_dir() {
        PathBuf::from("/var/tmp")
    } else {
        std::env::temp_dir()
    };
    base.join(format!("dsh-{}", rustix::process::getuid().as_raw()))
}

/// [`private_parent`], made (0700) if it is not there yet.
///
/// # Errors
/// When it cannot be made, or what is there is not a directory of this user's that nobody
/// else may enter (a link or a directory someone else made in a shared `/var/tmp`).
pub fn ensure_private_parent() -> io::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let p = private_parent();
    match rustix::fs::mkdir(&p, Mode::RWXU) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(io::Error::from(e)),
    }
    let st = std::fs::symlink_metadata(&p)?;
    let ours =
        st.is_dir() && st.uid() == rustix::process::getuid().as_raw() && st.mode() & 0o077 == 0;
    if !ours {
        return Err(io::Error::other(format!(
            "{} is not a private directory of this user's",
            p.display()
        )));
    }
    Ok(p)
}

/// The name prefix of a spill directory (`dsh-spill-<pid>-<random>`), removed with its
/// process.
pub const DIR_PREFIX: &str = "dsh-spill-";

/// Removes the spill directories in `parent` of dsh processes that no longer exist (killed
/// before they could remove their own): `dsh-spill-<pid>-*` directories of ours whose pid
/// is gone. A link of that name is never followed.
fn remove_stale(parent: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let uid = rustix::process::getuid().as_raw();
    for e in entries.flatten() {
        // The entry's own metadata: a link is a link here, not its target.
        let ours = e.metadata().is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if ours && is_stale_name(&e.file_name(), DIR_PREFIX) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Whether `name` is `<prefix><pid>-…` for a pid that no longer exists: the private
/// directory (or cgroup) of a dsh process that died without cleaning up. Names of another
/// shape are never stale.
pub fn is_stale_name(name: &std::ffi::OsStr, prefix: &str) -> bool {
    name.to_str()
        .and_then(|n| n.strip_prefix(prefix))
        .and_then(|rest| rest.split('-').next())
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// Whether `name` is `<prefix><pid>-…` for this process's own pid: a private directory
/// of this dsh process.
pub fn is_own_name(name: &std::ffi::OsStr, prefix: &str) -> bool {
    name.to_str()
        .and_then(|n| n.strip_prefix(prefix))
        .and_then(|rest| rest.split('-').next())
        .is_some_and(|p| p == std::process::id().to_string())
}

/// `n` random lowercase hex digits from the kernel's CSPRNG (`getrandom(2)`).
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n.div_ceil(2)];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(k) => filled += k,
            Err(rustix::io::Errno::INTR) => continue,
            // getrandom only fails on ancient kernels; fall back to time and address entropy.
            Err(_) => {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                for (i, b) in bytes[filled..].iter_mut().enumerate() {
                    *b = (t >> ((i % 16) * 8)) as u8 ^ (std::process::id() as u8);
                }
                filled = bytes.len();
            }
        }
    }
    let mut s: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    s.truncate(n);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn directory_is_private_and_files_are_exclusive_0600() {
        let tmp = std::env::temp_dir();
        let dir = SpillDir::create(Some(&tmp)).expect("create");
        let mode = std::fs::metadata(dir.path())
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let (mut f, p) = dir.create_file("stdout").expect("file");
        f.write_all(b"x").expect("write");
        let mode = std::fs::metadata(&p).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let name = p
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        assert!(
            name.starts_with("stdout-0-") && name.ends_with(".log"),
            "{name}"
        );
        let (_, p2) = dir.create_file("stdout").expect("file");
        assert_ne!(p, p2);
    }

    #[test]
    fn directory_is_removed_on_drop_unless_kept() {
        let dir = SpillDir::create(None).expect("create");
        let path = dir.path().to_path_buf();
        dir.create_file("x").expect("file");
        drop(dir);
        assert!(!path.exists());
        let kept = SpillDir::create(None).expect("create").keep();
        let path = kept.path().to_path_buf();
        drop(kept);
        assert!(path.exists());
        std::fs::remove_dir_all(path).expect("cleanup");
    }

    #[test]
    fn a_dead_processs_directory_is_removed_by_the_next_and_a_kept_one_never() {
        let parent = tempfile::tempdir().expect("tempdir");
        let dead = parent.path().join("dsh-spill-4294967295-abc");
        std::fs::create_dir(&dead).expect("dead");
        std::fs::write(dead.join("stdout-0-x.log"), "old").expect("file");
        let kept = SpillDir::create(Some(parent.path())).expect("kept").keep();
        let kept_path = kept.path().to_path_buf();
        assert!(
            kept_path.starts_with(parent.path().join("")),
            "{kept_path:?}"
        );
        drop(kept);
        let elsewhere = tempfile::tempdir().expect("target");
        let link = parent.path().join("dsh-spill-4294967294-lnk");
        std::os::unix::fs::symlink(elsewhere.path(), &link).expect("link");
        std::fs::write(elsewhere.path().join("precious"), "x").expect("precious");
        let live = SpillDir::create(Some(parent.path())).expect("create");
        assert!(!dead.exists(), "the dead one's directory stays");
        assert!(kept_path.exists(), "a kept directory was removed");
        assert!(
            elsewhere.path().join("precious").exists(),
            "a link was followed"
        );
        let name = live
            .path()
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with(&format!("dsh-spill-{}-", std::process::id())),
            "{name}"
        );
    }

    #[test]
    fn only_names_of_dead_owners_are_stale() {
        use std::ffi::OsStr;
        let me = format!("dsh-{}-abc", std::process::id());
        assert!(!is_stale_name(OsStr::new(&me), "dsh-"));
        assert!(is_stale_name(OsStr::new("dsh-4294967295-abc"), "dsh-"));
        assert!(!is_stale_name(OsStr::new("dsh-x-abc"), "dsh-"));
        assert!(!is_stale_name(OsStr::new("other-4294967295"), "dsh-"));
    }

    #[test]
    fn random_names_differ() {
        assert_eq!(random_hex(12).len(), 12);
        assert_ne!(random_hex(12), random_hex(12));
    }
}
