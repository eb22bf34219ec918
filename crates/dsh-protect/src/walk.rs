//! The walk that finds every git dir below a writable root: nested repositories, the
//! `.git` pointer files of submodules and linked worktrees, and bare repositories.
//!
//! A git dir inside a writable root is a way out of the sandbox: its hooks run, and its
//! config (`core.fsmonitor`) is read, by the host's git in that directory, which a shell
//! prompt or an editor's git panel starts without asking. The walk reads directories only
//! (no `stat` per file: the kind comes from the directory entry), never follows a symlink,
//! and does not enter [`SKIPPED_DIRS`] or a `.git` directory. A git dir under another name
//! (a bare repository, or a directory a command gave git's shape) is entered: a repository
//! nested anywhere in it is one git finds.
//!
//! # Limits
//! A tree of more than [`MAX_WALK_ENTRIES`] entries is walked only that far, which leaves
//! the walk incomplete (the runners report it as partial enforcement). A directory dsh
//! cannot list is not searched: one this user could make something in is protected whole
//! instead ([`Walk::unlistable`]).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::names::NESTED_TOOL_NAMES;

/// Directory names the walk does not enter beyond their own entries: dependency trees that
/// hold tens of thousands of files and no repository a host tool opens by itself (editors
/// skip them too). What is right in one (a `.git`, git's shape, tool settings) is found.
pub const SKIPPED_DIRS: &[&str] = &["node_modules"];

/// Directory entries one walk reads at most.
pub const MAX_WALK_ENTRIES: usize = 4_000_000;

/// What a walk found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    /// Every `.git` entry (directory, pointer file or symlink) and every bare repository
    /// directory, sorted.
    pub git_entries: Vec<PathBuf>,
    /// Every entry that [`is_tool_setting`] names, in any directory, sorted.
    pub tool_configs: Vec<PathBuf>,
    /// Directories this user owns but cannot list (it could change their mode and make
    /// something in them): protected whole, so nothing is made there unseen.
    pub unlistable: Vec<PathBuf>,
    /// Whether every directory was read (see the [module docs](self)).
    pub complete: bool,
}

/// Whether the entry `name` of the directory `dir` is a tool setting: [`is_tool_setting`],
/// Jujutsu's repository config ([`JJ_REPO_CONFIG`](crate::names::JJ_REPO_CONFIG)), or a Mercurial repository's
/// `requires` and `sharedpath` (with `shared` required, `sharedpath` names the folder
/// whose `hgrc` hg reads).
pub fn is_tool_setting_in(dir: &Path, name: &OsStr) -> bool {
    is_tool_setting(name)
        || (name == "config.toml" && dir.ends_with(".jj/repo"))
        || (dir.file_name().is_some_and(|n| n == ".hg")
            && (name == "requires" || name == "sharedpath"))
}

/// Walks `root`, calling `on_dir` with each directory it reads (the root first).
pub fn walk(root: &Path, on_dir: impl FnMut(&Path)) -> Walk {
    walk_from(root, true, on_dir)
}

/// Walks `dir`, a directory that appeared inside a walked root, as [`walk`] would have
/// reached it: a skipped one (`node_modules`) is read but not entered.
pub fn walk_appeared(dir: &Path, on_dir: impl FnMut(&Path)) -> Walk {
    let enter = dir.file_name().is_none_or(|n| !is_skipped(n));
    walk_from(dir, enter, on_dir)
}

fn walk_from(root: &Path, enter_root: bool, mut on_dir: impl FnMut(&Path)) -> Walk {
    let mut out = Walk {
        complete: true,
        ..Walk::default()
    };
    let mut budget = MAX_WALK_ENTRIES;
    // (directory, whether its subdirectories are walked): a skipped directory is read (a
    // `.git`, git's shape or tool settings right in it count, as git and tools look there
    // from any package beneath it) but not entered further.
    let mut stack = vec![(root.to_path_buf(), enter_root)];
    while let Some((dir, enter)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            // This user's own directory that it cannot list (a command may have taken the
            // bits away to hide something in it): its owner may list it again.
            Err(_) if make_listable(&dir) => match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(_) => {
                    out.unlistable.push(dir);
                    continue;
                }
            },
            Err(_) => {
                // Gone since it was listed is not a gap. One this user could make
                // something in is protected whole; another user's that we may not write
                // holds nothing of ours.
                if std::fs::symlink_metadata(&dir).is_ok() && could_write_in(&dir) {
                    out.unlistable.push(dir);
                }
                continue;
            }
        };
        on_dir(&dir);
        let mut subdirs = Vec::new();
        let mut shape = GitShape::default();
        for entry in entries.flatten() {
            if budget == 0 {
                out.complete = false;
                break;
            }
            budget -= 1;
            let name = entry.file_name();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            shape.note(&name, kind);
            if name == ".git" {
                out.git_entries.push(entry.path());
            } else if is_tool_setting_in(&dir, &name) {
                out.tool_configs.push(entry.path());
            }
            if enter && kind.is_dir() && name != ".git" {
                subdirs.push((entry.path(), !is_skipped(&name)));
            }
        }
        if shape.is_git_dir() {
            // A bare repository (or a git dir under another name): its parts are
            // protected as a git dir's. It is entered all the same: git finds a repository
            // nested in any of its subdirectories.
            out.git_entries.push(dir.clone());
        }
        stack.extend(subdirs);
        if budget == 0 {
            out.complete = false;
            break;
        }
    }
    out.git_entries.sort();
    out.git_entries.dedup();
    out.tool_configs.sort();
    out.unlistable.sort();
    out
}

/// Whether a directory entry named `name` is one of [`NESTED_TOOL_NAMES`] or matches a
/// protected pattern (`*.code-workspace`).
pub fn is_tool_setting(name: &OsStr) -> bool {
    let n = name.to_string_lossy();
    // The name compared first: the walk asks this of every entry.
    let whole_entry = |p: &&str| **p == *n && !p.contains('/') && *p != ".dsh";
    NESTED_TOOL_NAMES.contains(&n.as_ref())
        || crate::names::PROTECTED_NAMES.iter().any(whole_entry)
        || crate::names::PROTECTED_PATTERNS
            .iter()
            .any(|p| dsh_sandbox::deny_read::name_matches(p, &n))
}

/// Gives `dir`, when this user owns it, its owner's read and search bits back; whether it
/// did. The directory is opened without a symlink anywhere on the way and changed through
/// that descriptor, so a command that swaps it for a link meanwhile changes nothing else;
/// no bit but those two is ever set.
fn make_listable(dir: &Path) -> bool {
    dsh_sandbox::nofollow::open_dir(dir)
        .is_ok_and(|fd| dsh_sandbox::nofollow::add_owner_bits(&fd, 0o500).is_ok())
}

/// Whether a command of this user could create an entry in `dir`: it may write there, or
/// it owns `dir` (and so could change its mode).
fn could_write_in(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return true;
    };
    // SAFETY: geteuid(2) has no preconditions; access(2) with a valid C string.
    let (uid, writable) = unsafe { (libc::geteuid(), libc::access(c.as_ptr(), libc::W_OK) == 0) };
    writable || std::fs::symlink_metadata(dir).map_or(true, |m| m.uid() == uid)
}

/// Whether the walk skips a directory of this name.
pub fn is_skipped(name: &OsStr) -> bool {
    SKIPPED_DIRS.iter().any(|s| name == *s)
}

/// What git looks for to call a directory a git dir (`is_git_directory`): a `HEAD`, and
/// `objects` and `refs` or a `commondir` that supplies them. Git only asks that it may
/// search `objects` and `refs` (`access(X_OK)`), which an executable file passes too, so
/// an entry of either name counts whatever it is.
#[derive(Default)]
struct GitShape {
    head: bool,
    objects: bool,
    refs: bool,
    commondir: bool,
}

impl GitShape {
    fn note(&mut self, name: &OsStr, kind: std::fs::FileType) {
        if name == "HEAD" && !kind.is_dir() {
            self.head = true;
        } else if name == "objects" {
            self.objects = true;
        } else if name == "refs" {
            self.refs = true;
        } else if name == "commondir" && !kind.is_dir() {
            self.commondir = true;
        }
    }

    fn is_git_dir(&self) -> bool {
        self.head && (self.objects && self.refs || self.commondir)
    }
}

/// Whether `dir` has git's shape of a git dir (see [`walk`]).
pub fn is_git_dir(dir: &Path) -> bool {
    let there = |name: &str| std::fs::symlink_metadata(dir.join(name));
    let head = there("HEAD").is_ok_and(|m| !m.is_dir());
    head && (there("objects").is_ok() && there("refs").is_ok()
        || there("commondir").is_ok_and(|m| !m.is_dir()))
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
        assert!(w.unlistable.is_empty());
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
        // root, sub, sub/deep, sub/deep/er, vendor, vendor/foo, bare.git and its two, and
        // node_modules (read, not entered).
        assert_eq!(dirs, 10);
    }

    // A bare repository whose objects and refs are symlinks is a git dir to git, and so
    // to the walk.
    #[test]
    fn git_dirs_are_found_by_git_own_rule_links_and_commondir_included() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = dir.path();
        std::fs::create_dir_all(r.join("a/.o")).expect("o");
        std::fs::create_dir_all(r.join("a/.r")).expect("r");
        std::os::unix::fs::symlink(".o", r.join("a/objects")).expect("link");
        std::os::unix::fs::symlink(".r", r.join("a/refs")).expect("link");
        std::fs::write(r.join("a/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::create_dir_all(r.join("b")).expect("b");
        std::fs::write(r.join("b/HEAD"), "x\n").expect("HEAD");
        std::fs::write(r.join("b/commondir"), "../a\n").expect("commondir");
        std::fs::create_dir_all(r.join("crates/x/.cargo")).expect("cargo");
        let w = walk(r, |_| {});
        assert_eq!(w.git_entries, vec![r.join("a"), r.join("b")]);
        assert_eq!(w.tool_configs, vec![r.join("crates/x/.cargo")]);
        assert!(is_git_dir(&r.join("a")) && is_git_dir(&r.join("b")));
    }

    // `pkg/.zed/settings.json` and `pkg/opencode.json` are looked for: every setting the
    // root protects is looked for in subdirectories too.
    #[test]
    fn every_setting_protected_at_a_root_is_looked_for_in_subdirectories() {
        for name in [
            ".zed",
            "opencode.json",
            ".cargo",
            ".vscode",
            ".envrc",
            "x.code-workspace",
        ] {
            assert!(is_tool_setting(OsStr::new(name)), "{name}");
        }
        for name in [".git", ".dsh", "src", "hooks"] {
            assert!(!is_tool_setting(OsStr::new(name)), "{name}");
        }
    }

    // `objects` and `refs` as executable files, which git accepts in a git dir, make a
    // git dir to the walk too.
    #[test]
    fn objects_and_refs_of_any_kind_make_a_git_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        let r = dir.path().join("src");
        std::fs::create_dir_all(&r).expect("src");
        std::fs::write(r.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::write(r.join("objects"), "").expect("objects");
        std::fs::write(r.join("refs"), "").expect("refs");
        assert!(is_git_dir(&r));
        assert_eq!(walk(dir.path(), |_| {}).git_entries, vec![r]);
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
