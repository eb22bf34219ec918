//! The walk that finds every git dir below a writable root: nested repositories, the
//! `.git` pointer files of submodules and linked worktrees, and bare repositories.
//!
//! A git dir inside a writable root is a way out of the sandbox: its hooks run, and its
//! config (`core.fsmonitor`) is read, by the host's git in that directory, which a shell
//! prompt or an editor's git panel starts without asking. The walk reads directories only
//! (no `stat` per file: the kind comes from the directory entry), never follows a symlink,
//! and does not enter [`SKIPPED_DIRS`] or a git dir.
//!
//! # Limits
//! A tree of more than [`MAX_WALK_ENTRIES`] entries is walked only that far, and a
//! directory dsh cannot list is not searched: both leave the walk incomplete, which the
//! runners report as partial enforcement.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Directory names the walk does not enter: dependency trees that hold tens of thousands
/// of files and no repository a host tool opens by itself (editors skip them too).
pub const SKIPPED_DIRS: &[&str] = &["node_modules"];

/// Directory entries one walk reads at most.
pub const MAX_WALK_ENTRIES: usize = 4_000_000;

/// What a walk found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    /// Every `.git` entry (directory, pointer file or symlink) and every bare repository
    /// directory, sorted.
    pub git_entries: Vec<PathBuf>,
    /// Whether every directory was read (see the [module docs](self)).
    pub complete: bool,
}

/// Walks `root`, calling `on_dir` with each directory it reads (the root first).
pub fn walk(root: &Path, mut on_dir: impl FnMut(&Path)) -> Walk {
    let mut found = Vec::new();
    let mut complete = true;
    let mut budget = MAX_WALK_ENTRIES;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            // Gone since it was listed is not a gap; unreadable is.
            if std::fs::symlink_metadata(&dir).is_ok() {
                complete = false;
            }
            continue;
        };
        on_dir(&dir);
        let mut subdirs = Vec::new();
        let mut shape = BareShape::default();
        for entry in entries.flatten() {
            if budget == 0 {
                complete = false;
                break;
            }
            budget -= 1;
            let name = entry.file_name();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            shape.note(&name, kind.is_dir(), kind.is_file() || kind.is_symlink());
            if name == ".git" {
                found.push(entry.path());
            } else if kind.is_dir() && !is_skipped(&name) {
                subdirs.push(entry.path());
            }
        }
        if shape.is_git_dir() {
            // A bare repository (or a git dir under another name): its parts are
            // protected as a git dir's; nothing in it is a nested repository.
            found.push(dir);
            continue;
        }
        stack.extend(subdirs);
        if budget == 0 {
            complete = false;
            break;
        }
    }
    found.sort();
    found.dedup();
    Walk {
        git_entries: found,
        complete,
    }
}

/// Whether the walk skips a directory of this name.
pub fn is_skipped(name: &OsStr) -> bool {
    SKIPPED_DIRS.iter().any(|s| name == *s)
}

/// What git looks for to call a directory a git dir: `HEAD`, `objects/` and `refs/`.
#[derive(Default)]
struct BareShape {
    head: bool,
    objects: bool,
    refs: bool,
}

impl BareShape {
    fn note(&mut self, name: &OsStr, is_dir: bool, is_file: bool) {
        if name == "HEAD" && is_file {
            self.head = true;
        } else if name == "objects" && is_dir {
            self.objects = true;
        } else if name == "refs" && is_dir {
            self.refs = true;
        }
    }

    fn is_git_dir(&self) -> bool {
        self.head && self.objects && self.refs
    }
}

/// Whether `dir` has git's shape of a git dir (see [`walk`]).
pub fn is_git_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join("HEAD")).is_ok_and(|m| !m.is_dir())
        && std::fs::symlink_metadata(dir.join("objects")).is_ok_and(|m| m.is_dir())
        && std::fs::symlink_metadata(dir.join("refs")).is_ok_and(|m| m.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_pointer_bare_and_linked_git_entries_are_found_and_skipped_trees_are_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = dir.path();
        for d in [
            ".git/objects",
            "vendor/foo/.git/hooks",
            "sub/deep/er",
            "node_modules/x/.git",
            "bare.git/objects",
            "bare.git/refs",
        ] {
            std::fs::create_dir_all(r.join(d)).expect("mkdir");
        }
        std::fs::write(r.join("sub/deep/.git"), "gitdir: ../../.git/modules/x\n").expect("ptr");
        std::fs::write(r.join("bare.git/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::os::unix::fs::symlink("/elsewhere", r.join("sub/deep/er/.git")).expect("link");
        let mut dirs = 0;
        let w = walk(r, |_| dirs += 1);
        assert!(w.complete);
        assert_eq!(
            w.git_entries,
            vec![
                r.join(".git"),
                r.join("bare.git"),
                r.join("sub/deep/.git"),
                r.join("sub/deep/er/.git"),
                r.join("vendor/foo/.git"),
            ]
        );
        // root, sub, sub/deep, sub/deep/er, vendor, vendor/foo, bare.git (read, not entered).
        assert_eq!(dirs, 7);
    }

    #[test]
    fn symlinked_directories_are_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(out.path().join("repo/.git")).expect("mkdir");
        std::os::unix::fs::symlink(out.path(), dir.path().join("link")).expect("link");
        assert!(walk(dir.path(), |_| {}).git_entries.is_empty());
    }
}
