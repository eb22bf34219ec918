//! [`TreeWatch`]: one writable root's walk ([`crate::walk`]), kept current with inotify, so
//! a long-lived World walks a large workspace once and then pays only for what changed.
//!
//! Every directory the walk reads gets an inotify watch for entries created, moved in or
//! out, and deleted. [`TreeWatch::walk`] first drains the events that arrived since it was
//! last asked, in order: a new `.git` entry is added, a directory that now has git's shape
//! (`HEAD`, `objects/`, `refs/`) is added, a directory made or moved in is walked (and
//! watched) as it is when the event is read, a directory moved away takes what was known
//! beneath it along (at once, before a later event can make something new at that path),
//! and entries that are gone are dropped.
//!
//! Events are read after a command, so a directory may have been made, filled and moved
//! before its watch exists: nothing made in it has an event of its own. It is found all
//! the same, as every directory that is not watched arrived where it is now by an event
//! still in the queue (its own creation or move, or an ancestor's), and each such event's
//! directory is walked when it is read; one whose path is gone by then is walked where its
//! later move put it, or is out of the tree. What cannot be followed exactly (the event
//! queue overflowed, the root itself moved) makes the next call walk the root again from
//! scratch.
//!
//! The kernel reports events of every process, the sandboxed ones included: watches are on
//! inodes, not on a mount namespace's view of them.
//!
//! # Limits
//! Where inotify is unavailable (no instance or watch left: `fs.inotify.max_user_*`), or
//! the root holds more than [`MAX_WATCHED_DIRS`] directories, every call walks the root
//! again, which is exact but costs a walk.

use std::collections::{BTreeMap, HashMap};
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
    /// The same watches by path, so the ones beneath a moved directory are found without
    /// looking at every watch.
    paths: BTreeMap<PathBuf, i32>,
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
            paths: BTreeMap::new(),
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
            self.current
                .tool_configs
                .retain(|e| std::fs::symlink_metadata(e).is_ok());
            self.current
                .unlistable
                .retain(|e| std::fs::read_dir(e).is_err() && std::fs::symlink_metadata(e).is_ok());
        }
        &self.current
    }

    fn rewalk(&mut self) {
        self.dirs.clear();
        self.paths.clear();
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
            self.paths.clear();
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
        if let Some(old) = self.dirs.insert(wd, dir.to_path_buf()) {
            // The same inode watched again under a new path.
            if old != dir && self.paths.get(&old) == Some(&wd) {
                self.paths.remove(&old);
            }
        }
        if let Some(replaced) = self.paths.insert(dir.to_path_buf(), wd) {
            // Another inode was watched at this path (replaced by a rename onto it): its
            // events would be read as this path's.
            if replaced != wd {
                self.dirs.remove(&replaced);
            }
        }
        true
    }

    /// Reads every pending event and applies it, in order.
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
                break;
            };
            if n == 0 {
                break;
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
        if mask & libc::IN_Q_OVERFLOW != 0 {
            self.stale = true;
            return;
        }
        if mask & libc::IN_IGNORED != 0 {
            // A watch gone (its directory removed): its path may lead to a newer one.
            if let Some(p) = self.dirs.remove(&wd) {
                if self.paths.get(&p) == Some(&wd) {
                    self.paths.remove(&p);
                }
            }
            return;
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return;
        };
        if mask & (libc::IN_MOVE_SELF | libc::IN_DELETE_SELF) != 0 {
            // A directory's own move is followed through its parent's events; the root's
            // is not (its parent is not watched).
            if dir == self.root {
                self.stale = true;
            }
            return;
        }
        let path = dir.join(name);
        let is_dir = mask & libc::IN_ISDIR != 0;
        if mask & libc::IN_MOVED_FROM != 0 {
            // Gone from here: what was known beneath it goes now, before a later event
            // makes something new at this path. Where it went (inside the tree) is walked
            // afresh on its arrival.
            if is_dir {
                self.forget(&path);
            }
            return;
        }
        if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) == 0 {
            return;
        }
        if name == ".git" {
            self.note(path);
            return;
        }
        if walk::is_tool_setting_in(&dir, name) {
            insert_sorted(&mut self.current.tool_configs, path.clone());
        }
        if walk::is_git_dir(&dir) {
            self.note(dir.clone());
        }
        // A directory made or moved in is walked as it is now, whatever happened to it
        // since (events are read after the command: one made and then moved is walked
        // where its move's event says it went).
        // Nothing beneath a skipped directory (`node_modules`) is walked: its own entries
        // are watched and read (a `.git` or git's shape there counts), not its packages.
        let in_skipped = dir.file_name().is_some_and(walk::is_skipped);
        if is_dir && !in_skipped {
            let mut full = false;
            let found = walk::walk_appeared(&path, |d| {
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
            for t in found.tool_configs {
                insert_sorted(&mut self.current.tool_configs, t);
            }
            for u in found.unlistable {
                insert_sorted(&mut self.current.unlistable, u);
            }
        }
    }

    /// The watches at `dir` and beneath it.
    fn beneath(&self, dir: &Path) -> Vec<(PathBuf, i32)> {
        self.paths
            .range(dir.to_path_buf()..)
            .take_while(|(p, _)| p.starts_with(dir))
            .map(|(p, wd)| (p.clone(), *wd))
            .collect()
    }

    /// A directory moved away from `old`: its watches go, and so do its entries.
    fn forget(&mut self, old: &Path) {
        for (p, wd) in self.beneath(old) {
            if let Some(fd) = &self.inotify {
                // SAFETY: inotify_rm_watch(2) on our inotify fd.
                unsafe {
                    libc::inotify_rm_watch(fd.as_raw_fd(), wd);
                }
            }
            self.paths.remove(&p);
            self.dirs.remove(&wd);
        }
        self.current.git_entries.retain(|e| !e.starts_with(old));
        self.current.tool_configs.retain(|e| !e.starts_with(old));
        self.current.unlistable.retain(|e| !e.starts_with(old));
    }

    fn note(&mut self, entry: PathBuf) {
        insert_sorted(&mut self.current.git_entries, entry);
    }
}

/// Inserts `p` into the sorted `list` unless it is there.
fn insert_sorted(list: &mut Vec<PathBuf>, p: PathBuf) {
    if let Err(i) = list.binary_search(&p) {
        list.insert(i, p);
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
        let r = dsh_core::path::canonical_path(d.path());
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

    // `a/objects` a link to a directory that does not exist yet, made later, would turn
    // `a` into a git dir with no event in it. Git's shape is its names alone (whatever
    // they lead to), so it is one from the start.
    #[test]
    fn a_directory_with_git_names_is_a_git_dir_whatever_they_lead_to() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = dsh_core::path::canonical_path(d.path());
        std::fs::create_dir_all(r.join("a/refs")).expect("refs");
        std::fs::write(r.join("a/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        let mut w = TreeWatch::new(&r);
        assert!(w.walk().git_entries.is_empty());
        std::os::unix::fs::symlink("/nonexistent-dsh-target", r.join("a/objects")).expect("link");
        assert_eq!(w.walk().git_entries, vec![r.join("a")]);
    }

    // A directory made, a repository made in it, and the directory moved, all in one
    // command (events are read after it): renaming only what was known of the directory,
    // which is nothing, would leave the repository unseen. It is walked where it went.
    #[test]
    fn a_directory_made_filled_and_moved_in_one_go_is_walked_where_it_went() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = dsh_core::path::canonical_path(d.path());
        std::fs::create_dir_all(r.join("old/keep")).expect("dirs");
        std::fs::create_dir_all(r.join("objects")).expect("dirs");
        let mut w = TreeWatch::new(&r);
        assert!(w.walk().git_entries.is_empty());
        // Made, filled and moved before the watch reads a thing.
        std::fs::create_dir_all(r.join("x/sub/.git")).expect("x");
        std::fs::create_dir_all(r.join("x/sub/.cargo")).expect("cargo");
        std::fs::rename(r.join("x"), r.join("y")).expect("mv");
        // A known directory, filled and moved.
        std::fs::create_dir_all(r.join("old/keep/inner/.git")).expect("inner");
        std::fs::rename(r.join("old"), r.join("new")).expect("mv");
        // A directory git would call a part of a repository, outside any.
        std::fs::create_dir_all(r.join("objects/deep/.git")).expect("objects");
        let walk = w.walk().clone();
        assert_eq!(
            walk.git_entries,
            vec![
                r.join("new/keep/inner/.git"),
                r.join("objects/deep/.git"),
                r.join("y/sub/.git"),
            ]
        );
        assert_eq!(walk.tool_configs, vec![r.join("y/sub/.cargo")]);
        assert!(!w.stale, "followed without a new walk");
        // The watches are where the directories went.
        std::fs::create_dir_all(r.join("y/sub/later/.git")).expect("later");
        assert!(w.walk().git_entries.contains(&r.join("y/sub/later/.git")));
    }

    // A directory moved away and a new one made at its path in the same command: what is
    // known beneath the old path must not be forgotten after the new one has been walked,
    // which would lose the new one's repository.
    #[test]
    fn a_directory_made_where_one_was_moved_away_is_kept() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = dsh_core::path::canonical_path(d.path());
        for x in ["z", "e", "a", "node_modules"] {
            std::fs::create_dir_all(r.join(x)).expect("dirs");
        }
        let mut w = TreeWatch::new(&r);
        std::fs::rename(r.join("e"), r.join("z/e")).expect("mv");
        std::fs::create_dir_all(r.join("e/r/.git")).expect("again");
        std::fs::create_dir_all(r.join("e/.cargo")).expect("cargo");
        std::fs::rename(r.join("a"), r.join("node_modules/a")).expect("mv skipped");
        std::fs::create_dir_all(r.join("a/sub/.git")).expect("again");
        let walk = w.walk().clone();
        assert_eq!(
            walk.git_entries,
            vec![r.join("a/sub/.git"), r.join("e/r/.git")]
        );
        assert_eq!(walk.tool_configs, vec![r.join("e/.cargo")]);
        // And the moved one is still followed where it went.
        std::fs::create_dir_all(r.join("z/e/later/.git")).expect("later");
        assert!(w.walk().git_entries.contains(&r.join("z/e/later/.git")));
    }

    // A directory (or the root itself) given git's shape must not end the walk there: a
    // repository hidden beneath it is found.
    #[test]
    fn repositories_beneath_a_directory_of_git_shape_are_found() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = dsh_core::path::canonical_path(d.path());
        let mut w = TreeWatch::new(&r);
        std::fs::create_dir_all(r.join("p/q/.git")).expect("q");
        for x in ["p/objects", "p/refs", "objects", "refs", "x/.git"] {
            std::fs::create_dir_all(r.join(x)).expect("shape");
        }
        std::fs::write(r.join("p/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::write(r.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        let want = vec![r.clone(), r.join("p"), r.join("p/q/.git"), r.join("x/.git")];
        assert_eq!(w.walk().git_entries, want);
        assert_eq!(
            crate::walk::walk(&r, |_| {}).git_entries,
            want,
            "the full walk"
        );
    }

    // `node_modules` itself given git's shape, with a pager in its config (git in any
    // package beneath takes it for the repository), is read by the walk.
    #[test]
    fn what_is_right_in_node_modules_counts_and_nothing_deeper_is_walked() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = dsh_core::path::canonical_path(d.path());
        let mut w = TreeWatch::new(&r);
        for x in [
            "node_modules/objects",
            "node_modules/refs",
            "node_modules/pkg/sub/.git",
        ] {
            std::fs::create_dir_all(r.join(x)).expect("dirs");
        }
        std::fs::write(r.join("node_modules/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::create_dir_all(r.join("node_modules/.cargo")).expect("cargo");
        let walk = w.walk().clone();
        assert_eq!(walk.git_entries, vec![r.join("node_modules")]);
        assert_eq!(walk.tool_configs, vec![r.join("node_modules/.cargo")]);
        assert_eq!(crate::walk::walk(&r, |_| {}).git_entries, walk.git_entries);
        // Its own entries are followed.
        std::fs::create_dir_all(r.join("node_modules/.git")).expect("git");
        assert!(w.walk().git_entries.contains(&r.join("node_modules/.git")));
    }

    #[test]
    fn a_moved_directory_takes_its_watches_and_entries_along() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = dsh_core::path::canonical_path(d.path());
        let out = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(r.join("a/.git")).expect("dirs");
        std::fs::create_dir_all(r.join("c/d")).expect("dirs");
        let mut w = TreeWatch::new(&r);
        std::fs::rename(r.join("a"), r.join("b")).expect("mv");
        std::fs::rename(r.join("c"), out.path().join("c")).expect("mv out");
        assert_eq!(w.walk().git_entries, vec![r.join("b/.git")]);
        assert!(!w.stale, "a move inside the tree needs no new walk");
        // Watches moved with their directory: a repository made in it now is seen.
        std::fs::create_dir_all(r.join("b/inner/.git")).expect("inner");
        assert_eq!(
            w.walk().git_entries,
            vec![r.join("b/.git"), r.join("b/inner/.git")]
        );
        // And nothing is watched any more where the moved-out directory went.
        std::fs::create_dir_all(out.path().join("c/d/.git")).expect("outside");
        assert_eq!(
            w.walk().git_entries,
            vec![r.join("b/.git"), r.join("b/inner/.git")]
        );
    }
}
