//! What a workspace holds that the host's own tools trust, kept out of a confined
//! command's reach: the protected set of a workspace-write policy, and the check after a
//! call that sets aside what a command made anyway.
//!
//! A command that may write a root could plant code that runs later, outside the sandbox,
//! without anyone asking: a git hook, a `core.fsmonitor` line, an editor task, a toolchain
//! setting that names a program. This crate finds those places before a command runs
//! ([`protected`]: a [`walk`] of each writable root, kept current by a [`watch`], with git's
//! own configuration read as git reads it by [`gitconfig`] and [`gitlinks`]) and decides
//! the policy with them ([`decide`]); after the command, [`quarantine`] finds what it made
//! that the host would run or read and sets the programs in it aside.
//!
//! ```no_run
//! use dsh_sandbox::{LocalSandbox, Sandbox, SandboxMode};
//! let policy = dsh_protect::workspace_policy(SandboxMode::WorkspaceWrite, "/work/project");
//! let confined = LocalSandbox::new().confine(&["make".into()], &policy)?;
//! // … spawn `confined` (dsh-process), then the check: each root's layout as it is now,
//! // compared with the policy's.
//! let root = policy.workspace_root.clone();
//! let now = vec![(root.clone(), dsh_protect::protected::for_workspace(&root))];
//! let after = dsh_protect::quarantine::check(&policy, now, &[]);
//! for q in &after.quarantined {
//!     eprintln!("{} ({}): set aside: {}", q.path.display(), q.what, q.set_aside);
//! }
//! # Ok::<(), dsh_core::HarnessError>(())
//! ```
//!
//! # Guarantees
//! - A decided workspace-write policy protects every name of [`names`] in each writable
//!   root, and the hooks, config, `commondir`, `remotes` and `branches` of every git dir
//!   its repositories use (nested, bare, submodule, worktree), or says the root's
//!   protection is incomplete (a gap every runner reports).
//! - What an earlier check could not set aside is tried again whenever a policy is
//!   decided; while any is left, the policy's workspace-write confinements are refused.
//! - The check and the quarantine open nothing through a symlink a command could swap, and
//!   read every file with a bound.
//!
//! # Limits
//! - The walk reads at most [`walk::MAX_WALK_ENTRIES`] entries per root and does not enter
//!   [`walk::SKIPPED_DIRS`] beyond their own entries; past that a root is incomplete.
//! - What a process that keeps running after a call writes later is seen by the next check
//!   of that root, not at once.
//!
//! # Platform
//! Linux and macOS; the quarantine needs `openat`-style calls, and elsewhere nothing is
//! confined anyway.

use dsh_sandbox::{SandboxMode, SandboxPolicy};

pub mod gitconfig;
pub mod gitlinks;
pub mod names;
pub mod protected;
pub mod quarantine;
mod small_file;
mod unsettled;
pub mod walk;
pub mod watch;

/// The policy of `mode` for the workspace at `root`, decided: [`SandboxPolicy::new`]'s
/// defaults, and under workspace-write the protected paths of a walk of the root (now)
/// and what earlier checks left there ([`decide`]). It may move files (see
/// [`quarantine::recheck`]).
pub fn workspace_policy(mode: SandboxMode, root: impl AsRef<std::path::Path>) -> SandboxPolicy {
    decide(SandboxPolicy::new(mode, root))
}

/// `policy`, decided, as a runner confines it: under workspace-write, the layout of each
/// writable root it holds none of yet (a walk, now: see
/// [`laid_out`](SandboxPolicy::laid_out)), and
/// [`unsettled`](SandboxPolicy::unsettled) as the disk is now: what an earlier check (of
/// any dsh process of this user) could not set aside in a writable root is tried again,
/// and what still cannot be is kept. It may move files (see [`quarantine::recheck`]); call
/// it off the async runtime's workers.
pub fn decide(policy: SandboxPolicy) -> SandboxPolicy {
    if policy.mode != SandboxMode::WorkspaceWrite {
        return policy.settled(Vec::new());
    }
    let mut policy = policy;
    for root in policy.writable_dirs() {
        if !policy.laid_out.contains(&root) {
            let layout = protected::for_workspace(&root);
            policy = policy.with_layout(&root, layout);
        }
    }
    let left = quarantine::recheck(&policy);
    policy.settled(left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_sandbox::WorkspaceLayout;

    fn canonical_tempdir() -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().expect("tempdir");
        let root = dsh_core::path::canonical_path(d.path());
        (d, root)
    }

    // Deciding walks every writable root the policy holds no layout of, whatever paths
    // another root's layout protects inside it (a linked worktree's protects the main
    // repository's `.git/hooks`).
    #[test]
    fn deciding_walks_each_root_without_a_layout() {
        let (_d, base) = canonical_tempdir();
        let (repo, extra) = (base.join("repo"), base.join("extra"));
        std::fs::create_dir_all(&repo).expect("repo");
        std::fs::create_dir_all(&extra).expect("extra");
        let foreign = WorkspaceLayout {
            protected: vec![repo.join(".git/hooks")],
            complete: true,
            ..WorkspaceLayout::default()
        };
        let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &repo)
            .with_writable_root_layout(&extra, foreign);
        let decided = decide(policy);
        assert!(decided.protected.contains(&repo.join(".vscode")));
        assert!(decided.laid_out.contains(&repo));
        assert_eq!(decided.unsettled, Some(Vec::new()));
    }

    // A read-only policy's layout protects nothing; widened, the policy is walked again.
    #[test]
    fn a_widened_policy_is_walked_again() {
        let (_d, root) = canonical_tempdir();
        let read_only = SandboxPolicy::new(SandboxMode::ReadOnly, &root).with_layout(
            &root,
            WorkspaceLayout {
                complete: true,
                ..WorkspaceLayout::default()
            },
        );
        let widened = decide(read_only.with_mode(SandboxMode::WorkspaceWrite));
        assert!(widened.protected.contains(&root.join(".git/hooks")));
        assert!(widened.protected.contains(&root.join(".vscode")));
    }
}
