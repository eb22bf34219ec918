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
//! | `.git` is a directory | `.git/hooks`, `.git/config` | — (inside the root) |
//! | `.git` is a pointer file (linked worktree, submodule) | the pointer file; the git dir's `hooks`, `config`, `config.worktree`; for a worktree the common dir's `hooks` and `config` | the git dir; for a worktree the common dir's `objects`, `refs`, `logs` |

use std::path::{Path, PathBuf};

/// Names under the workspace root that are protected whatever the repository layout.
pub const PROTECTED_NAMES: &[&str] = &[
    ".git/hooks",
    ".git/config",
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
    if !meta.is_file() {
        return layout;
    }
    // A pointer file: `gitdir: <path>`, relative to the root.
    layout.protected.retain(|p| !p.starts_with(&dot_git));
    layout.protected.push(dot_git.clone());
    let Some(git_dir) = read_pointer(&dot_git).map(|p| crate::canonical_path(&root.join(p))) else {
        return layout;
    };
    for name in ["hooks", "config", "config.worktree"] {
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
