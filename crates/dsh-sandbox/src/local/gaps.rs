//! What a policy cannot be enforced for, in words: the gaps that make enforcement partial
//! and the refusals that say so.

use std::path::{Path, PathBuf};

use dsh_core::{ErrorCode, HarnessError};

use super::carve::strictly_beneath;
use crate::{SandboxMode, SandboxPolicy};

/// The fail-closed answer to a policy the runners here enforce only in part: what is
/// missing, how to get it, and how to accept the gap on purpose.
pub(super) fn partial_refused(mode: SandboxMode, why: &str) -> HarnessError {
    let fix = if why.contains("is a symlink") {
        "replace that symlink with the directory or file it points to"
    } else if why.contains("contains the home directory") {
        "use a workspace below your home directory, not the home directory itself"
    } else if why.contains("could not be walked") {
        "use a smaller workspace, let git rewrite a malformed index (`git status` on the host, \
         once you have checked nothing there is armed: `dsh doctor` lists what was left), or \
         trim the git config named"
    } else if why.contains("relative or empty entry") {
        "remove the relative and empty entries from PATH (write ./bin or node_modules/.bin \
         as absolute paths outside the writable roots, or run them by path)"
    } else if why.contains("where programs keep what they run") {
        "use a workspace that neither is nor holds a directory on PATH or one where programs \
         keep their settings, or take that directory off PATH"
    } else if why.contains("has another name (a hard link)") {
        "remove the other name of that file (the command named finds it)"
    } else if why.contains("dsh's state directory") {
        "use writable roots outside dsh's state directory"
    } else if why.contains("Landlock ABI") {
        "run a newer kernel (Linux 6.12+ has Landlock ABI 6) or install bubblewrap"
    } else {
        "install bubblewrap (apt-get install bubblewrap) with unprivileged user namespaces \
         allowed (on Ubuntu 24.04: sysctl kernel.apparmor_restrict_unprivileged_userns=0)"
    };
    HarnessError::new(
        ErrorCode::SandboxUnavailable,
        format!(
            "sandbox mode \"{mode}\" can only be enforced in part here, and dsh will not run \
             the command in a weaker sandbox than asked: {why}. To fix: {fix}; `dsh doctor` \
             shows what this machine lacks. To run with the gap on purpose, pass \
             --allow-partial or set allow_partial = true in ~/.config/dsh/config.toml; every \
             result then says what is not enforced."
        ),
    )
}

/// `INTERNAL`: a workspace-write policy that was never decided (its protected paths not
/// found, the check's records not read) reached the sandbox: a caller's bug, refused.
pub(super) fn undecided_refused() -> HarnessError {
    HarnessError::new(
        ErrorCode::Internal,
        "a workspace-write policy reached the sandbox before it was decided (its protected \
         paths were never found), so nothing ran. This is a bug in dsh: please report it \
         with the command that hit it; read-only commands still run.",
    )
}

/// `SANDBOX_UNAVAILABLE`: what earlier checks could not set aside is still there.
pub(super) fn unsettled_refused(left: &[crate::Quarantined]) -> HarnessError {
    let list: Vec<String> = left
        .iter()
        .map(|q| format!("{} ({})", q.path.display(), q.what))
        .collect();
    HarnessError::new(
        ErrorCode::SandboxUnavailable,
        format!(
            "workspace-write is refused here until this is dealt with: an earlier command \
             made what the host's own tools would run, and dsh could not set it aside: {}. \
             Look at it, then move or remove it (or give it back to this user), and run \
             again; read-only commands still run.",
            list.join("; ")
        ),
    )
}

/// What no runner can enforce of `policy` on this filesystem: a writable root that holds
/// the home directory (its startup files, autostart entries and user units cannot all be
/// listed) or dsh's state directory, a denied path that holds a writable root, and roots
/// whose walk for nested repositories stopped short.
pub(super) fn policy_gaps(policy: &SandboxPolicy, denied: &[PathBuf]) -> Vec<String> {
    let mut gaps = Vec::new();
    for d in denied {
        use std::os::unix::fs::MetadataExt;
        // Another name for a denied file (a hard link made before the secret was written
        // into it) is readable where that name is.
        if std::fs::symlink_metadata(d).is_ok_and(|m| m.is_file() && m.nlink() > 1) {
            gaps.push(format!(
                "{} is denied for reading but has another name (a hard link) the sandbox \
                 cannot hide; find it (find / -samefile {}) and remove it",
                d.display(),
                d.display()
            ));
        }
    }
    if policy.mode != SandboxMode::WorkspaceWrite {
        return gaps;
    }
    {
        use std::os::unix::fs::MetadataExt;
        // A protected file is held read-only by a mount of its path; another name for it
        // (`ln .git/config notes.txt`) would stay writable.
        let writable = policy.writable_dirs();
        if let Some(p) = policy.protected.iter().find(|p| {
            writable.iter().any(|w| p.starts_with(w))
                && std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file() && m.nlink() > 1)
        }) {
            gaps.push(format!(
                "{} is protected but has another name (a hard link) the sandbox cannot hold \
                 read-only: a command could change it through that name; find it (find / \
                 -xdev -samefile {}) and remove it",
                p.display(),
                p.display()
            ));
        }
    }
    if let Some(home) = crate::home_dir().map(|h| dsh_core::path::canonical_path(&h)) {
        if let Some(root) = policy.writable_dirs().iter().find(|w| home.starts_with(w)) {
            gaps.push(format!(
                "the writable root {} contains the home directory {}: what runs at login or \
                 on a schedule (shell startup files, ~/.config/autostart, user units, \
                 ~/.local/bin) cannot all be protected",
                root.display(),
                home.display()
            ));
        }
    }
    for d in denied {
        if let Some(root) = policy.writable_dirs().iter().find(|w| w.starts_with(d)) {
            gaps.push(format!(
                "{} is denied for reading and holds the writable root {}: the command could \
                 not see its own files (a link at a denied name can lead there; remove it)",
                d.display(),
                root.display()
            ));
        }
    }
    for (root, dir) in startup_places(policy) {
        gaps.push(format!(
            "the writable root {} is, holds or lies in {}, where programs keep what they run \
             (settings and scripts read at start, commands found on PATH): they cannot all \
             be protected",
            root.display(),
            dir.display()
        ));
    }
    if let Some(entry) = relative_path_entry() {
        if let Some(root) = policy.writable_dirs().first() {
            gaps.push(format!(
                "PATH holds the relative or empty entry {entry:?}, which the host's shell \
                 resolves in whatever folder the user stands in: a program a command plants \
                 there ({}/{}/ls, say) runs in place of the real one",
                root.display(),
                if entry.is_empty() {
                    "."
                } else {
                    entry.trim_start_matches("./")
                }
            ));
        }
    }
    if let Some(state) = crate::state_dir::path() {
        if let Some(root) = policy
            .writable_dirs()
            .iter()
            .find(|w| state.starts_with(w) || w.starts_with(&state))
        {
            gaps.push(format!(
                "the writable root {} holds or lies inside dsh's state directory {}, where \
                 dsh records the placeholders it made and what it could not set aside: a \
                 command could forge those records",
                root.display(),
                state.display()
            ));
        }
    }
    for root in &policy.incomplete_roots {
        gaps.push(format!(
            "{} could not be walked whole for nested git repositories, its git index could \
             not be read (over {} MiB, or not as git writes it), or a git config there names \
             too many includes or hooks paths to follow: one there keeps writable hooks and \
             config",
            root.display(),
            crate::MAX_INDEX_BYTES >> 20
        ));
    }
    gaps
}

/// The first entry of `PATH` that is relative (`./bin`, `node_modules/.bin`) or empty (the
/// current directory), if any.
fn relative_path_entry() -> Option<String> {
    let path = std::env::var_os("PATH")?;
    let path = path.to_string_lossy().into_owned();
    path.split(':')
        .find(|e| !e.starts_with('/'))
        .map(str::to_owned)
}

/// The writable roots of `policy` that are, hold or lie in a place where programs keep
/// what they run (`~/.config`, `~/.local`, a toolchain's home, a directory on `PATH`),
/// each with that place: no list of names can cover what is there.
pub(super) fn startup_places(policy: &SandboxPolicy) -> Vec<(PathBuf, PathBuf)> {
    let roots = policy.writable_dirs();
    if roots.is_empty() {
        return Vec::new();
    }
    let mut places: Vec<PathBuf> = Vec::new();
    if let Some(home) = crate::home_dir().map(|h| dsh_core::path::canonical_path(&h)) {
        // A relative value is to be ignored (the XDG spec).
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .filter(|v| Path::new(v).is_absolute())
            .map_or_else(|| home.join(".config"), PathBuf::from);
        places.push(dsh_core::path::canonical_path(&config));
        for name in [".local", ".cargo", ".rustup", "go", "bin"] {
            places.push(home.join(name));
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        places.extend(
            std::env::split_paths(&path)
                .filter(|p| p.is_absolute())
                .map(|p| dsh_core::path::canonical_path(&p)),
        );
    }
    let mut out = Vec::new();
    for root in roots {
        if let Some(dir) = places
            .iter()
            .find(|d| d.starts_with(&root) || root.starts_with(d))
        {
            out.push((root.clone(), dir.clone()));
        }
    }
    out
}

/// Under workspace-write, the first symlink on the way from a writable root to one of its
/// protected paths: a read-only mount lands on the link's target, and the link can be
/// swapped for a real, writable directory.
pub(super) fn symlinked_protected_path(policy: &SandboxPolicy) -> Option<PathBuf> {
    if policy.mode != SandboxMode::WorkspaceWrite {
        return None;
    }
    let writable = policy.writable_dirs();
    for p in &policy.protected {
        let Some(root) = writable.iter().find(|w| strictly_beneath(p, w)) else {
            continue;
        };
        let Ok(rel) = p.strip_prefix(root) else {
            continue;
        };
        let mut at = root.clone();
        for part in rel.components() {
            at.push(part);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => return Some(at),
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
    None
}
