//! What a confined command made that the host's tools would run by themselves, set aside
//! before they can.
//!
//! The check after a command ([`protected::appeared`](crate::protected::appeared)) finds the
//! git dirs and tool settings it made. Protecting them from the next command on is not
//! enough: the user's shell prompt runs `git status` in a new repository as soon as they
//! enter it, and `cargo` reads a new `.cargo/config.toml` on its next run. So, before dsh
//! returns the command's result, [`quarantine`]:
//! - rewrites a new git dir's `config` and `config.worktree` to the settings of
//!   [`SAFE_GIT_KEYS`] (what `git init`, `git clone`, `git remote add` and `git branch`
//!   write), keeping the whole file beside it as `<name>.dsh-quarantine` when anything else
//!   was set (`core.fsmonitor`, `core.hooksPath`, a pager, an alias, a filter…);
//! - moves aside a new git dir's `hooks` when it holds anything but git's `*.sample` files;
//! - moves aside a new tool setting ([`NESTED_TOOL_NAMES`](crate::walk::NESTED_TOOL_NAMES),
//!   a new `*.code-workspace`) whole.
//!
//! Nothing is deleted: each original is renamed to `<name>.dsh-quarantine[-N]` next to it,
//! where the user can read it and put it back. A repository made with ordinary git commands
//! is left exactly as it is. Every step goes through directory fds opened without following
//! a symlink, beneath the writable root the path lies in.
//!
//! # Limits
//! A repository or setting made by a command that is still running elsewhere (a
//! concurrent call) is found by the next check, not this one.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::gitconfig::{self, Entry};

/// The git settings a new repository may keep: data, never a program to run.
/// `(section, key)`; a section with a subsection (`remote "origin"`) is matched by its
/// name; `*` is any key.
pub const SAFE_GIT_KEYS: &[(&str, &str)] = &[
    ("core", "repositoryformatversion"),
    ("core", "filemode"),
    ("core", "bare"),
    ("core", "logallrefupdates"),
    ("core", "ignorecase"),
    ("core", "precomposeunicode"),
    ("core", "symlinks"),
    ("core", "autocrlf"),
    ("core", "eol"),
    ("core", "safecrlf"),
    ("core", "quotepath"),
    ("core", "sparsecheckout"),
    ("core", "sparsecheckoutcone"),
    ("core", "worktree"),
    ("core", "untrackedcache"),
    ("core", "splitindex"),
    ("core", "checkstat"),
    ("core", "trustctime"),
    ("core", "compression"),
    ("core", "bigfilethreshold"),
    ("core", "abbrev"),
    ("extensions", "*"),
    ("remote", "url"),
    ("remote", "pushurl"),
    ("remote", "fetch"),
    ("remote", "push"),
    ("remote", "tagopt"),
    ("remote", "prune"),
    ("remote", "mirror"),
    ("branch", "remote"),
    ("branch", "merge"),
    ("branch", "rebase"),
    ("branch", "pushremote"),
    ("branch", "description"),
    ("user", "name"),
    ("user", "email"),
    ("init", "defaultbranch"),
    ("submodule", "url"),
    ("submodule", "active"),
    ("submodule", "branch"),
    ("submodule", "shallow"),
    ("submodule", "ignore"),
    ("pull", "rebase"),
    ("pull", "ff"),
    ("push", "default"),
    ("push", "autosetupremote"),
    ("fetch", "prune"),
    ("index", "version"),
];

/// One thing set aside: what, where it went, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// The path as the command left it.
    pub path: PathBuf,
    /// Where the original is now.
    pub moved_to: PathBuf,
    /// What it was (`git config with core.fsmonitor`, `git hooks`, `tool settings`).
    pub what: String,
}

/// Sets aside what of `appeared` (paths the check after a command found, each beneath one
/// of `roots`) the host's tools would run: see the [module docs](self).
pub fn quarantine(appeared: &[PathBuf], roots: &[PathBuf]) -> Vec<Quarantined> {
    let mut out = Vec::new();
    for p in appeared {
        let Some(root) = roots.iter().find(|r| p.starts_with(r) && p != *r) else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            continue;
        };
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if meta.is_dir() && (name == ".git" || crate::walk::is_git_dir(p)) {
            for config in ["config", "config.worktree"] {
                if let Some(q) = quarantine_config(root, &p.join(config)) {
                    out.push(q);
                }
            }
            if let Some(q) = quarantine_hooks(root, &p.join("hooks")) {
                out.push(q);
            }
        } else if crate::walk::NESTED_TOOL_NAMES.iter().any(|n| *n == name)
            || crate::protected::PROTECTED_PATTERNS
                .iter()
                .any(|pat| crate::protected::name_matches(pat, &name))
        {
            if let Some(moved_to) = set_aside(root, p) {
                out.push(Quarantined {
                    path: p.clone(),
                    moved_to,
                    what: "tool settings".into(),
                });
            }
        }
    }
    out
}

/// A git config with anything outside [`SAFE_GIT_KEYS`]: the original set aside, the safe
/// settings written in its place.
fn quarantine_config(root: &Path, config: &Path) -> Option<Quarantined> {
    let text = crate::small_file::read(config, gitconfig::MAX_CONFIG_BYTES)?;
    let entries = gitconfig::entries(&text);
    let unsafe_keys: Vec<String> = entries
        .iter()
        .filter(|e| !is_safe(e))
        .map(|e| match &e.subsection {
            Some(sub) => format!("{}.{sub}.{}", e.section, e.key),
            None => format!("{}.{}", e.section, e.key),
        })
        .collect();
    // (A line the parser skips is one git refuses too: it does not run with that config.)
    if unsafe_keys.is_empty() {
        return None;
    }
    let moved_to = set_aside(root, config)?;
    let safe: Vec<&Entry> = entries.iter().filter(|e| is_safe(e)).collect();
    write_new(root, config, &render(&safe));
    let mut keys = unsafe_keys;
    keys.dedup();
    Some(Quarantined {
        path: config.to_path_buf(),
        moved_to,
        what: format!("git config setting {}", keys.join(", ")),
    })
}

/// A hooks directory holding anything but git's samples: set aside whole, an empty one
/// made in its place.
fn quarantine_hooks(root: &Path, hooks: &Path) -> Option<Quarantined> {
    let meta = std::fs::symlink_metadata(hooks).ok()?;
    // A link leads hooks elsewhere (and a dangling one would make every later policy
    // partial): set aside whatever it names.
    let live = meta.file_type().is_symlink()
        || std::fs::read_dir(hooks).ok()?.flatten().any(|e| {
            !e.file_name().to_string_lossy().ends_with(".sample")
        });
    if !live {
        return None;
    }
    let moved_to = set_aside(root, hooks)?;
    let _ = std::fs::create_dir(hooks);
    Some(Quarantined {
        path: hooks.to_path_buf(),
        moved_to,
        what: "git hooks".into(),
    })
}

fn is_safe(e: &Entry) -> bool {
    SAFE_GIT_KEYS
        .iter()
        .any(|(s, k)| *s == e.section && (*k == "*" || *k == e.key))
}

/// `entries` as a git config file, values quoted.
fn render(entries: &[&Entry]) -> String {
    let mut out = String::new();
    let mut current: Option<(String, Option<String>)> = None;
    for e in entries {
        let section = (e.section.clone(), e.subsection.clone());
        if current.as_ref() != Some(&section) {
            match &e.subsection {
                Some(sub) => out.push_str(&format!("[{} \"{}\"]\n", e.section, escape(sub))),
                None => out.push_str(&format!("[{}]\n", e.section)),
            }
            current = Some(section);
        }
        match &e.value {
            Some(v) => out.push_str(&format!("\t{} = \"{}\"\n", e.key, escape(v))),
            None => out.push_str(&format!("\t{}\n", e.key)),
        }
    }
    out
}

fn escape(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out
}

/// Renames `p` (beneath `root`) to `<name>.dsh-quarantine[-N]` beside it, through its
/// parent opened from `root` without following a symlink; the new path, if renamed.
fn set_aside(root: &Path, p: &Path) -> Option<PathBuf> {
    let (parent, name) = (p.parent()?, p.file_name()?);
    let dir = open_beneath(root, parent)?;
    let from = std::ffi::CString::new(name.as_bytes()).ok()?;
    for n in 0..100 {
        let mut to_name = OsString::from(name);
        to_name.push(if n == 0 {
            ".dsh-quarantine".to_owned()
        } else {
            format!(".dsh-quarantine-{n}")
        });
        let to = std::ffi::CString::new(to_name.as_bytes()).ok()?;
        // SAFETY: renameat2(2) within our directory fd, valid C strings.
        let r = unsafe {
            libc::renameat2(
                dir.as_raw_fd(),
                from.as_ptr(),
                dir.as_raw_fd(),
                to.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if r == 0 {
            return Some(parent.join(to_name));
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
            return None;
        }
    }
    None
}

/// Writes `text` as a new file at `p` (beneath `root`), never through a symlink.
fn write_new(root: &Path, p: &Path, text: &str) {
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return;
    };
    let Some(dir) = open_beneath(root, parent) else {
        return;
    };
    let Ok(c) = std::ffi::CString::new(name.as_bytes()) else {
        return;
    };
    // SAFETY: openat(2) relative to our directory fd with a valid C string; O_EXCL and
    // O_NOFOLLOW make it a new file, never an existing one or a link's target.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o644,
        )
    };
    if fd < 0 {
        return;
    }
    // SAFETY: a fresh fd the kernel returned.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let _ = std::io::Write::write_all(&mut &file, text.as_bytes());
}

/// `openat2(root, dir, O_PATH | O_DIRECTORY, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`.
fn open_beneath(root: &Path, dir: &Path) -> Option<OwnedFd> {
    let rel = dir.strip_prefix(root).ok()?;
    let root_fd = crate::placeholder::open_dir_no_symlinks(root).ok()?;
    if rel.as_os_str().is_empty() {
        return Some(root_fd);
    }
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    const RESOLVE_BENEATH: u64 = 0x08;
    let c = std::ffi::CString::new(rel.as_os_str().as_bytes()).ok()?;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH,
    };
    // SAFETY: openat2(2) relative to our fd with a valid C string and an open_how of the
    // size given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root_fd.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: a fresh fd the kernel returned.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(dir: &Path, config: &str) {
        for d in ["objects", "refs", "hooks"] {
            std::fs::create_dir_all(dir.join(d)).expect("dir");
        }
        std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::write(dir.join("config"), config).expect("config");
        std::fs::write(dir.join("hooks/pre-commit.sample"), "#!/bin/sh\n").expect("sample");
    }

    #[test]
    fn a_plain_new_repository_is_left_as_it_is() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = crate::canonical_path(d.path());
        let g = root.join("sub/.git");
        let config = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote \"origin\"]\n\turl = https://example.com/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n";
        repo(&g, config);
        assert!(quarantine(std::slice::from_ref(&g), &[root]).is_empty());
        assert_eq!(
            std::fs::read_to_string(g.join("config")).expect("config"),
            config
        );
    }

    #[test]
    fn programs_in_a_new_repository_are_set_aside_and_its_data_kept() {
        let d = tempfile::tempdir().expect("tempdir");
        let root = crate::canonical_path(d.path());
        let g = root.join("sub/.git");
        repo(
            &g,
            "[core]\n\tbare = false\n\tfsmonitor = \"touch /tmp/x\"\n[alias]\n\tx = !sh\n[remote \"origin\"]\n\turl = u\n",
        );
        std::fs::write(g.join("hooks/pre-commit"), "#!/bin/sh\ntouch /tmp/x\n").expect("hook");
        let q = quarantine(std::slice::from_ref(&g), std::slice::from_ref(&root));
        assert_eq!(q.len(), 2, "{q:?}");
        assert!(
            q[0].what.contains("core.fsmonitor") && q[0].what.contains("alias.x"),
            "{q:?}"
        );
        let now = std::fs::read_to_string(g.join("config")).expect("config");
        assert_eq!(
            now,
            "[core]\n\tbare = \"false\"\n[remote \"origin\"]\n\turl = \"u\"\n"
        );
        assert!(std::fs::read_to_string(g.join("config.dsh-quarantine"))
            .expect("kept")
            .contains("fsmonitor"));
        assert!(g.join("hooks.dsh-quarantine/pre-commit").exists());
        assert!(g.join("hooks").is_dir() && !g.join("hooks/pre-commit").exists());
        // A new nested tool setting is set aside whole.
        std::fs::create_dir_all(root.join("crates/x/.cargo")).expect("cargo");
        std::fs::write(root.join("crates/x/.cargo/config.toml"), "x").expect("cfg");
        let q = quarantine(&[root.join("crates/x/.cargo")], std::slice::from_ref(&root));
        assert_eq!(q[0].moved_to, root.join("crates/x/.cargo.dsh-quarantine"));
        assert!(!root.join("crates/x/.cargo").exists());
    }
}
