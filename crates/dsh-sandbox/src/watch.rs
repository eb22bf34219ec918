//! [`TreeWatch`]: one writable root's [walk](crate::walk), kept current with inotify, so
//! a long-lived World walks a large workspace once and then pays only for what changed.
//!
//! Every directory the walk reads gets an inotify watch for entries created, moved in or
//! out, and deleted. [`TreeWatch::walk`] first drains the events that arrived since it was
//! last asked: a new `.git` entry is added, a directory that now has git's shape (`HEAD`,
//! `objects/`, `refs/`) is added, a new or moved-in directory is walked (and watched), and
//! entries that are gone are dropped. What cannot be followed exactly (the event queue
//! overflowed, a watched directory was moved, a directory moved away) makes the next call
//! walk the root again from scratch.
//!
//! The kernel reports events of every process, the sandboxed ones included: watches are on
//! inodes, not on a mount namespace's view of them.
//!
//! # Limits
//! Where inotify is unavailable (no instance or watch left: `fs.inotify.max_user_*`), or
//! the root holds more than [`MAX_WATCHED_DIRS`] directories, every call walks the root
//! again, which is exact but costs a walk.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::walk::{self, Walk};

/// Directories one watch follows at most before it falls back to walking every time
/// (each watch costs the kernel about a kilobyte).
pub const MAX_WATCHED_DIRS: usize = 200_000;

const MASK: u32 = libc::IN_CREATE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_DELETE
    | libc::IN_MOVE_SELF
    | libc::IN_DELETE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW
    | libc::IN_EXCL_UNLINK;

/// The walk of one root, kept current. See the [module docs](self).
pub struct TreeWatch {
    root: PathBuf,
    inotify: Option<OwnedFd>,
    dirs: HashMap<i32, PathBuf>,
    current: Walk,
    /// A full walk is due before the next answer.
    stale: bool,
}

impl std::fmt::Debug for TreeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeWatch")
            .field("root", &self.root)
            .field("watched_dirs", &self.dirs.len())
            .field("following", &self.inotify.is_some())
            .finish_non_exhaustive()
    }
}

impl TreeWatch {
    /// Walks `root` (canonical) and starts watching it.
    pub fn new(root: &Path) -> TreeWatch {
        let mut w = TreeWatch {
            root: root.to_path_buf(),
            inotify: None,
            dirs: HashMap::new(),
            current: Walk::default(),
            stale: true,
        };
        w.rewalk();
        w
    }

    /// The root watched.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether changes are followed by inotify (else every call walks).
    pub fn is_following(&self) -> bool {
        self.inotify.is_some()
    }

    /// The walk of the root as it is now: the last one, brought up to date with what
    /// changed since (see the [module docs](self)).
    pub fn walk(&mut self) -> &Walk {
        if self.inotify.is_none() {
            self.stale = true;
        } else {
            self.drain();
        }
        if self.stale {
            self.rewalk();
        } else {
            self.current.git_entries.retain(|e| still_there(e));
        }
        &self.current
    }

    fn rewalk(&mut self) {
        self.dirs.clear();
        // SAFETY: inotify_init1(2) with valid flags; the fd is ours.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        // SAFETY: a fresh fd the kernel returned.
        self.inotify = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) });
        let mut failed = false;
        let root = self.root.clone();
        let walk = walk::walk(&root, |dir| {
            if !failed && !self.add_watch(dir) {
                failed = true;
            }
        });
        if failed {
            self.inotify = None;
            self.dirs.clear();
        }
        self.current = walk;
        self.stale = false;
    }

    /// Watches `dir`; false when no more watches can be added.
    fn add_watch(&mut self, dir: &Path) -> bool {
        let Some(fd) = &self.inotify else {
            return false;
        };
        if self.dirs.len() >= MAX_WATCHED_DIRS {
            return false;
        }
        let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
            return true;
        };
        // SAFETY: inotify_add_watch(2) on our inotify fd with a valid C string.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), c.as_ptr(), MASK) };
        if wd < 0 {
            // A directory gone or replaced meanwhile is not a reason to stop following.
            let e = std::io::Error::last_os_error().raw_os_error();
            return !matches!(e, Some(libc::ENOSPC) | Some(libc::ENOMEM));
        }
        self.dirs.insert(wd, dir.to_path_buf());
        true
    }

    /// Reads every pending event and applies it.
    fn drain(&mut self) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let Some(fd) = &self.inotify else {
                return;
            };
            // SAFETY: read(2) into a live buffer of the size given.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            let Ok(n) = usize::try_from(n) else {
                let e = std::io::Error::last_os_error().raw_os_error();
                if e == Some(libc::EINTR) {
                    continue;
                }
                if e != Some(libc::EAGAIN) {
                    self.stale = true;
                }
                return;
            };
            if n == 0 {
                return;
            }
            let mut at = 0;
            let header = std::mem::size_of::<libc::inotify_event>();
            while at + header <= n {
                // SAFETY: the kernel wrote whole events; the header is read unaligned.
                let ev: libc::inotify_event = unsafe {
                    std::ptr::read_unaligned(buf[at..].as_ptr().cast::<libc::inotify_event>())
                };
                let len = ev.len as usize;
                let name_bytes = &buf[at + header..(at + header + len).min(n)];
                let name_end = name_bytes
                    .iter()
                    .position(|b| *b == 0)
                    .unwrap_or(name_bytes.len());
                let name = OsStr::from_bytes(&name_bytes[..name_end]).to_os_string();
                self.apply(ev.wd, ev.mask, &name);
                at += header + len;
            }
        }
    }

    fn apply(&mut self, wd: i32, mask: u32, name: &OsStr) {
        if mask & libc::IN_Q_OVERFLOW != 0 || mask & libc::IN_MOVE_SELF != 0 {
            self.stale = true;
            return;
        }
        if mask & libc::IN_IGNORED != 0 {
            self.dirs.remove(&wd);
            return;
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return;
        };
        let is_dir = mask & libc::IN_ISDIR != 0;
        if mask & libc::IN_MOVED_FROM != 0 && is_dir && name != ".git" {
            // A subtree moved away: its watches and entries now have stale paths.
            self.stale = true;
            return;
        }
        if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) == 0 {
            return;
        }
        let path = dir.join(name);
        if name == ".git" {
            self.note(path);
        } else if name == "HEAD" || name == "objects" || name == "refs" {
            if walk::is_git_dir(&dir) {
                self.note(dir);
            }
        } else if is_dir && !walk::is_skipped(name) {
            let mut full = false;
            let found = walk::walk(&path, |d| {
                if !full && !self.add_watch(d) {
                    full = true;
                }
            });
            if full {
                self.inotify = None;
                self.stale = true;
                return;
            }
            if !found.complete {
                self.current.complete = false;
            }
            for e in found.git_entries {
                self.note(e);
            }
        }
    }

    fn note(&mut self, entry: PathBuf) {
        if let Err(i) = self.current.git_entries.binary_search(&entry) {
            self.current.git_entries.insert(i, entry);
        }
    }
}

/// Whether a recorded entry still exists as what it was recorded as.
fn still_there(entry: &Path) -> bool {
    if entry.file_name().is_some_and(|n| n == ".git") {
        std::fs::symlink_metadata(entry).is_ok()
    } else {
        walk::is_git_dir(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_repositories_are_followed_without_a_new_walk() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = crate::canonical_path(d.path());
        std::fs::create_dir_all(r.join("a/b")).expect("dirs");
        let mut w = TreeWatch::new(&r);
        assert!(w.is_following());
        assert!(w.walk().git_entries.is_empty());
        // A nested repository in an existing directory, in a new one, and a bare one.
        std::fs::create_dir(r.join("a/b/.git")).expect("git");
        std::fs::create_dir_all(r.join("new/deep/.git")).expect("new");
        for x in ["srv/objects", "srv/refs"] {
            std::fs::create_dir_all(r.join(x)).expect("bare");
        }
        std::fs::write(r.join("srv/HEAD"), "x").expect("HEAD");
        std::fs::write(r.join("a/.git"), "gitdir: ../x").expect("pointer");
        assert_eq!(
            w.walk().git_entries,
            vec![
                r.join("a/.git"),
                r.join("a/b/.git"),
                r.join("new/deep/.git"),
                r.join("srv")
            ]
        );
        assert!(!w.stale);
        std::fs::remove_dir(r.join("a/b/.git")).expect("rm");
        std::fs::remove_file(r.join("a/.git")).expect("rm");
        assert_eq!(
            w.walk().git_entries,
            vec![r.join("new/deep/.git"), r.join("srv")]
        );
    }

    #[test]
    fn a_moved_directory_is_walked_again() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = crate::canonical_path(d.path());
        std::fs::create_dir_all(r.join("a/.git")).expect("dirs");
        let mut w = TreeWatch::new(&r);
        std::fs::rename(r.join("a"), r.join("b")).expect("mv");
        assert_eq!(w.walk().git_entries, vec![r.join("b/.git")]);
    }
}
