//! Paths that stay read-only inside a writable workspace, and the git entries that stay
//! writable so `git add` and `git commit` still work.
//!
//! A command that may write the workspace could otherwise plant code that runs later,
//! outside the sandbox: a git hook, a `core.fsmonitor` line in `.git/config`, a shell rc
//! file, an editor task, an agent or MCP configuration. Under workspace-write these stay
//! read-only, and one that does not exist cannot be created (a runner that cannot promise
//! that reports [`Enforcement::Partial`](crate::Enforcement::Partial)).
//!
//! | workspace | protected | extra writable |
//! |---|---|---|
//! | any | [`PROTECTED_NAMES`] under the root | — |
//! | `.git` is a directory | `.git/hooks`, `.git/config`, `.git/commondir`; each linked worktree's `commondir` and `config.worktree` under `.git/worktrees`; each submodule git dir's `hooks`, `config`, `commondir` under `.git/modules` | — (inside the root) |
//! | `.git` is a pointer file (linked worktree, submodule) | the pointer file; the git dir's `hooks`, `config`, `config.worktree`, `commondir`; for a worktree the common dir's `hooks` and `config` | the git dir; for a worktree the common dir's `objects`, `refs`, `logs` |
//!
//! A `commondir` file redirects git to another directory's `config` and `hooks`, so one
//! that does not exist must not be created either. Its placeholder is not empty (git
//! refuses to run with an empty one) but holds [`COMMONDIR_PLACEHOLDER`], `.`: the git
//! dir itself, what git assumes without the file.

use std::path::{Path, PathBuf};

/// Names under the workspace root that are protected whatever the repository layout.
pub const PROTECTED_NAMES: &[&str] = &[
    ".git/hooks",
    ".git/config",
    ".git/commondir",
    ".dsh",
    ".bashrc",
    ".bash_profile",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".gitmodules",
    ".vscode",
    ".idea",
    ".mcp.json",
    ".claude",
];

/// The content of a placeholder `commondir`: the git dir itself.
pub const COMMONDIR_PLACEHOLDER: &str = ".\n";

/// How deep submodule git dirs are looked for under `.git/modules` (`modules/a/modules/b`
/// is depth 2).
const MODULE_DEPTH: usize = 3;

/// Names that are directories when they exist (a placeholder for a missing one is an empty
/// directory, so tools that look for a file of that name are not confused).
pub(crate) const DIRECTORY_NAMES: &[&str] =
    &[".git", "hooks", ".dsh", ".vscode", ".idea", ".claude"];

/// The protected paths and extra writable roots of one workspace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkspaceLayout {
    /// Absolute paths that stay read-only (and uncreatable) under workspace-write.
    pub protected: Vec<PathBuf>,
    /// Directories outside the root that must be writable for commits (a linked
    /// worktree's git dir and its common dir's objects, refs and logs).
    pub writable: Vec<PathBuf>,
}

/// The layout of the workspace at `root` (canonical): see the [module docs](self).
pub fn for_workspace(root: &Path) -> WorkspaceLayout {
    let mut layout = WorkspaceLayout {
        protected: PROTECTED_NAMES.iter().map(|n| root.join(n)).collect(),
        writable: Vec::new(),
    };
    let dot_git = root.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
        return layout;
    };
    if meta.is_dir() {
        protect_linked_git_dirs(&dot_git, &mut layout.protected);
        return layout;
    }
    if !meta.is_file() {
        return layout;
    }
    // A pointer file: `gitdir: <path>`, relative to the root.
    layout.protected.retain(|p| !p.starts_with(&dot_git));
    layout.protected.push(dot_git.clone());
    let Some(git_dir) = read_pointer(&dot_git).map(|p| crate::canonical_path(&root.join(p))) else {
        return layout;
    };
    for name in ["hooks", "config", "config.worktree", "commondir"] {
        layout.protected.push(git_dir.join(name));
    }
    layout.writable.push(git_dir.clone());
    if let Ok(common) = std::fs::read_to_string(git_dir.join("commondir")) {
        let common = crate::canonical_path(&git_dir.join(common.trim()));
        for name in ["hooks", "config"] {
            layout.protected.push(common.join(name));
        }
        for name in ["objects", "refs", "logs"] {
            let dir = common.join(name);
            if dir.is_dir() {
                layout.writable.push(dir);
            }
        }
    }
    layout
}

/// The git dirs a repository's `.git` directory holds for others: each linked worktree's
/// (`worktrees/NAME`: its `commondir` and `config.worktree`) and each submodule's
/// (`modules/NAME`, nested ones too: `hooks`, `config`, `commondir`).
fn protect_linked_git_dirs(dot_git: &Path, protected: &mut Vec<PathBuf>) {
    for wt in subdirs(&dot_git.join("worktrees")) {
        protected.push(wt.join("commondir"));
        protected.push(wt.join("config.worktree"));
    }
    let mut level = vec![dot_git.to_path_buf()];
    for _ in 0..MODULE_DEPTH {
        let mut next = Vec::new();
        for dir in &level {
            for module in subdirs(&dir.join("modules")) {
                // A submodule's name may contain `/`: its git dir is where `HEAD` is.
                if module.join("HEAD").is_file() {
                    for name in ["hooks", "config", "commondir"] {
                        protected.push(module.join(name));
                    }
                }
                next.push(module);
            }
        }
        level = next;
    }
}

/// The real (not symlinked) directories directly in `dir`.
fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// The target of a `gitdir: PATH` pointer file.
fn read_pointer(file: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(file).ok()?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    (!target.is_empty()).then(|| PathBuf::from(target))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_gets_the_default_names() {
        let dir = tempfile::tempdir().expect("must succeed");
        let root = dir.path();
        let layout = for_workspace(root);
        assert!(layout.protected.contains(&root.join(".git/hooks")));
        assert!(layout.protected.contains(&root.join(".mcp.json")));
        assert!(layout.writable.is_empty());
    }

    #[test]
    fn worktree_and_submodule_git_dirs_inside_dot_git_are_protected() {
        let dir = tempfile::tempdir().expect("must succeed");
        let root = crate::canonical_path(dir.path());
        let git = root.join(".git");
        std::fs::create_dir_all(git.join("worktrees/wt")).expect("must succeed");
        std::fs::create_dir_all(git.join("modules/lib/modules/inner")).expect("must succeed");
        std::fs::write(git.join("modules/lib/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::write(git.join("modules/lib/modules/inner/HEAD"), "x\n").expect("HEAD");
        let layout = for_workspace(&root);
        for p in [
            ".git/commondir",
            ".git/worktrees/wt/commondir",
            ".git/worktrees/wt/config.worktree",
            ".git/modules/lib/hooks",
            ".git/modules/lib/config",
            ".git/modules/lib/commondir",
            ".git/modules/lib/modules/inner/hooks",
        ] {
            assert!(layout.protected.contains(&root.join(p)), "{p}");
        }
    }

    #[test]
    fn a_linked_worktree_protects_its_pointer_and_the_common_dir() {
        let dir = tempfile::tempdir().expect("must succeed");
        let base = crate::canonical_path(dir.path());
        let common = base.join("main/.git");
        let wt_git = common.join("worktrees/wt");
        std::fs::create_dir_all(&wt_git).expect("must succeed");
        std::fs::create_dir_all(common.join("objects")).expect("must succeed");
        std::fs::create_dir_all(common.join("refs")).expect("must succeed");
        std::fs::write(wt_git.join("commondir"), "../..\n").expect("must succeed");
        let root = base.join("wt");
        std::fs::create_dir_all(&root).expect("must succeed");
        std::fs::write(root.join(".git"), format!("gitdir: {}\n", wt_git.display()))
            .expect("must succeed");

        let layout = for_workspace(&root);
        assert!(layout.protected.contains(&root.join(".git")));
        assert!(!layout.protected.contains(&root.join(".git/hooks")));
        assert!(layout.protected.contains(&common.join("hooks")));
        assert!(layout.protected.contains(&common.join("config")));
        assert!(layout.protected.contains(&wt_git.join("config.worktree")));
        assert_eq!(
            layout.writable,
            vec![wt_git, common.join("objects"), common.join("refs")]
        );
    }
}
