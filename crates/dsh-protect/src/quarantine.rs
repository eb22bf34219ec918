//! What a confined command made that the host's tools would run by themselves, set aside
//! before they can.
//!
//! The check after a command ([`protected::new_since`](crate::protected::new_since)) finds the
//! git dirs and tool settings it made. Protecting them from the next command on is not
//! enough: the user's shell prompt runs `git status` in a new repository as soon as they
//! enter it, and `cargo` reads a new `.cargo/config.toml` on its next run. So, before dsh
//! returns the command's result, [`quarantine`] acts on each:
//! - a new git dir (whatever its shape: a `commondir` redirect, a directory that is not a
//!   repository yet): its `config` and `config.worktree` keep only [`SAFE_GIT_KEYS`] (what
//!   `git init`, `git clone`, `git remote add` and `git branch` write), and are rewritten
//!   whenever anything else is set or dsh cannot read all of the file as git would; its
//!   `hooks` keeps only git's `*.sample` files; a `commondir` that leads to a directory no
//!   earlier policy protected is made `.`;
//! - a new `.git` pointer file that leads out of the workspace, and a new `.git` symlink:
//!   moved aside;
//! - new tool settings ([`is_tool_setting`](crate::walk::is_tool_setting), a new
//!   `*.code-workspace`): emptied (a directory's entries moved out).
//!
//! Nothing is deleted: the original is copied, or its entries moved, to
//! `<name>.dsh-quarantine-<random>` beside it, where the user can read it and put it back.
//! Files and directories are changed in place, never replaced, so a read-only mount of the
//! same path in a concurrent call's sandbox stays attached (a rename would detach it and let
//! that call write the path again). A repository made with ordinary git commands is left
//! exactly as it is. Every step goes through directory fds opened beneath the writable
//! root without following a symlink (`openat2`, `O_NOFOLLOW`); what is owned by this user
//! but not readable or writable to it gets its owner's bits, through a descriptor of the
//! inode checked. A file that is not this user's, has another name (a hard link) or is larger
//! than a copy takes whole is moved aside instead of rewritten.
//!
//! # Limits
//! A repository or setting made by a command that is still running elsewhere (a
//! concurrent call) is found by the next check, not this one. What fails to be set aside
//! is reported with `set_aside: false` and remembered in the user's state directory: every
//! dsh process of this user tries it again before a workspace-write command in that root
//! ([`recheck`]), and refuses the command (a gap) while it still cannot.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::gitconfig::{self, Entry};
use crate::unsettled::{self, Kind};
use dsh_sandbox::nofollow::{self, Refused};
use dsh_sandbox::WorkspaceLayout;
use dsh_sandbox::{Quarantined, SandboxPolicy};

/// The git settings a new repository may keep: data, never a program to run or a place
/// elsewhere to act on. `(section, key)`; a section with a subsection (`remote "origin"`)
/// is matched by its name; `*` is any key.
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

/// The largest file a rewrite copies aside; a larger one is moved aside whole.
const MAX_COPY_BYTES: u64 = 4 * gitconfig::MAX_CONFIG_BYTES;

/// What the check after a command found, and what of it was set aside.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckOutcome {
    /// New git dirs, hooks folders, `.git` entries and tool settings (and roots that could
    /// not be read whole), sorted.
    pub found: Vec<PathBuf>,
    /// What of them would have run a program, and where it went.
    pub quarantined: Vec<Quarantined>,
}

/// The check after a command that ran under `policy` (workspace-write): each writable
/// root's layout as it is now (`layouts`, `(root, layout)`) compared with the policy
/// ([`protected::new_since`](crate::protected::new_since)), and what of it the host's tools
/// would run set aside ([`quarantine`]). A root not read whole that was whole before is
/// reported at once ([`walked_short`]). `extra_roots`: other directories the command
/// could write (the sandbox's temp dir).
pub fn check(
    policy: &SandboxPolicy,
    layouts: Vec<(PathBuf, WorkspaceLayout)>,
    extra_roots: &[PathBuf],
) -> CheckOutcome {
    // What one root's layout protects is not new in the next root.
    let mut after = std::borrow::Cow::Borrowed(policy);
    let mut appeared = Vec::new();
    let mut short = Vec::new();
    let mut found = WorkspaceLayout::default();
    let count = layouts.len();
    for (i, (root, layout)) in layouts.into_iter().enumerate() {
        if !layout.complete && !policy.incomplete_roots.contains(&root) {
            short.push(walked_short(&root, policy));
            appeared.push(root.clone());
        }
        appeared.extend(crate::protected::new_since(&after, &layout));
        found.git_dirs.extend(layout.git_dirs.iter().cloned());
        found.hooks_dirs.extend(layout.hooks_dirs.iter().cloned());
        if i + 1 < count {
            after = std::borrow::Cow::Owned(after.into_owned().with_layout(&root, layout));
        }
    }
    if appeared.is_empty() {
        return CheckOutcome::default();
    }
    appeared.sort();
    appeared.dedup();
    // Every directory the command could write: a git dir made in one of them and named by
    // a pointer in the workspace is one git runs too.
    let mut roots = policy.writable_dirs();
    roots.extend(extra_roots.iter().cloned());
    let mut quarantined = quarantine(&appeared, policy, &found, &roots);
    quarantined.extend(short);
    CheckOutcome {
        found: appeared,
        quarantined,
    }
}

/// Sets aside what of `appeared` (what the check found: `after` is the layout it found it
/// in, `before` the policy the command ran under) the host's tools would run: see the
/// [module docs](self). `roots` are every directory the command could write.
pub fn quarantine(
    appeared: &[PathBuf],
    before: &SandboxPolicy,
    after: &WorkspaceLayout,
    roots: &[PathBuf],
) -> Vec<Quarantined> {
    let mut out = Vec::new();
    let denied = dsh_sandbox::deny_read::expand_within(&before.deny_read, roots);
    for p in appeared {
        let Some(root) = roots.iter().find(|r| p.starts_with(r)) else {
            continue;
        };
        if was_protected(p, before) {
            // The user's as it was; a record of it (from `recheck`) is kept.
            continue;
        }
        let start = out.len();
        let hooks = after.hooks_dirs.contains(p);
        let site = Site {
            root,
            denied: &denied,
        };
        act_on(p, &site, before, after, &mut out);
        // Remembered across processes while it stays (see `recheck`).
        if out[start..].iter().any(|q| !q.set_aside) {
            let kind = if hooks { Kind::HooksDir } else { Kind::Entry };
            unsettled::remember(p, kind);
        } else {
            unsettled::forget_kind(p, Kind::Entry);
            unsettled::forget_kind(p, Kind::HooksDir);
        }
    }
    out
}

/// The walk of `root` after a command under `before` stopped short (more entries than a
/// walk reads): what the command made there cannot be told from what was there. What was
/// there before (from `before`) is remembered with the root; every later workspace-write
/// command there is refused until a walk reads the root whole again, and then what
/// appeared since is set aside ([`recheck`]).
pub fn walked_short(root: &Path, before: &SandboxPolicy) -> Quarantined {
    let mut baseline: Vec<PathBuf> = before
        .git_dirs
        .iter()
        .chain(before.protected.iter())
        .filter(|p| p.starts_with(root))
        .cloned()
        .collect();
    baseline.sort();
    baseline.dedup();
    unsettled::remember_baseline(root, &baseline);
    Quarantined {
        path: root.to_path_buf(),
        moved_to: None,
        what: short_walk_what(),
        set_aside: false,
    }
}

/// What is said of a root walked short after a command.
fn short_walk_what() -> String {
    format!(
        "a root the check after a command could not read whole (more than {} entries, a git \
         config naming more than {} includes or hooks paths, or a git index not as git writes \
         it or over {} MiB): what the command made there cannot be told from what was there \
         before, and a repository it made may be armed (NOT set aside); remove what is too \
         large or malformed (`git status` rewrites a malformed index) until it can be read",
        crate::walk::MAX_WALK_ENTRIES,
        crate::gitconfig::MAX_NAMED,
        crate::gitlinks::MAX_INDEX_BYTES >> 20
    )
}

/// What a check after a command could not set aside at `root` or beneath it, in any dsh
/// process of this user, that is still there: what workspace-write is refused for until
/// the user deals with it (`dsh doctor` lists it). A root whose walk stopped short is
/// listed as `a root dsh could not walk whole`.
pub fn unsettled_beneath(root: &Path) -> Vec<(PathBuf, &'static str)> {
    crate::unsettled::beneath(root)
        .into_iter()
        .map(|(p, k)| {
            let what = match k {
                crate::unsettled::Kind::HooksDir => "a git hooks folder a config names",
                crate::unsettled::Kind::Entry => "a git dir, .git entry or tool setting",
                crate::unsettled::Kind::Baseline => "a root dsh could not walk whole",
            };
            (p, what)
        })
        .collect()
}

/// Before a workspace-write command under `policy`: what an earlier check could not set
/// aside in one of its writable roots (in any dsh process of this user) is tried again;
/// what still cannot be is returned, and is a gap of every runner until it is gone.
pub fn recheck(policy: &SandboxPolicy) -> Vec<Quarantined> {
    let roots = policy.writable_dirs();
    let mut out = Vec::new();
    for root in &roots {
        if let Some(baseline) = unsettled::baseline(root) {
            if policy.incomplete_roots.iter().any(|r| r == root) {
                out.push(Quarantined {
                    path: root.clone(),
                    moved_to: None,
                    what: short_walk_what(),
                    set_aside: false,
                });
                continue;
            }
            // Whole again: what appeared since the baseline is set aside now.
            let mut then = SandboxPolicy::bare(policy.mode, root)
                .with_deny_read(policy.deny_read.iter().cloned())
                .with_protected(baseline.iter().cloned());
            then.git_dirs = baseline;
            let now = WorkspaceLayout {
                protected: policy.protected.clone(),
                git_dirs: policy.git_dirs.clone(),
                complete: true,
                ..WorkspaceLayout::default()
            };
            let appeared: Vec<PathBuf> = crate::protected::new_since(&then, &now)
                .into_iter()
                .filter(|p| p.starts_with(root))
                .collect();
            out.extend(
                quarantine(&appeared, &then, &now, &roots)
                    .into_iter()
                    .filter(|q| !q.set_aside),
            );
            unsettled::forget_kind(root, Kind::Baseline);
        }
        let mut remembered = unsettled::beneath(root);
        remembered.retain(|(_, kind)| *kind != Kind::Baseline);
        // A hooks folder no config names any more (the one that did was rewritten) is
        // an ordinary folder again.
        remembered.retain(|(p, kind)| {
            let named = *kind != Kind::HooksDir || policy.git_dirs.contains(p);
            if !named {
                unsettled::forget(p);
            }
            named
        });
        if remembered.is_empty() {
            continue;
        }
        // Tried again as after the command that made them: the protection the next
        // policy gives them (their parts, themselves) is what this check is for, so it
        // does not count as "the user's as it was" here; everything else still does.
        let derived = |q: &PathBuf| {
            remembered
                .iter()
                .any(|(p, _)| q == p || crate::names::GIT_DIR_PARTS.iter().any(|n| *q == p.join(n)))
        };
        let mut before = policy.clone();
        before.protected.retain(|q| !derived(q));
        before
            .git_dirs
            .retain(|g| !remembered.iter().any(|(p, _)| g.starts_with(p)));
        let after = WorkspaceLayout {
            git_dirs: policy.git_dirs.clone(),
            hooks_dirs: remembered
                .iter()
                .filter(|(_, k)| *k == Kind::HooksDir)
                .map(|(p, _)| p.clone())
                .collect(),
            ..WorkspaceLayout::default()
        };
        let (held, paths): (Vec<PathBuf>, Vec<PathBuf>) = remembered
            .into_iter()
            .map(|(p, _)| p)
            .partition(|p| was_protected(p, &before));
        // Inside a path protected for another reason: not to be acted on, nor let go.
        out.extend(held.into_iter().map(|p| Quarantined {
            path: p,
            moved_to: None,
            what: "made by an earlier command, inside a protected path now (NOT set aside)".into(),
            set_aside: false,
        }));
        out.extend(
            quarantine(&paths, &before, &after, &roots)
                .into_iter()
                .filter(|q| !q.set_aside),
        );
    }
    out
}

/// Whether `p` was protected while the command ran (it is, or lies beneath, a protected
/// path): the command could not change it, so it is the user's as it was. A config or
/// pointer the command wrote can name such a path (a hooks folder, a git dir); that config
/// or pointer is what is dealt with, never the path it names.
fn was_protected(p: &Path, before: &SandboxPolicy) -> bool {
    before.protected.iter().any(|q| p.starts_with(q))
}

/// Where one thing is acted on: the writable root it lies in (nothing is opened outside
/// it), and the paths denied for reading now.
struct Site<'a> {
    root: &'a Path,
    denied: &'a [PathBuf],
}

impl Site<'_> {
    /// Whether `p` is, holds or lies beneath a path denied for reading. Its content is
    /// not dsh's to move: a copy or a move beside it would hand it over under a name the
    /// sandbox does not deny, and what lies there may be the user's secret that the
    /// command could not even read. It is reported as not set aside instead, so that the
    /// user looks at it.
    fn touches_denied(&self, p: &Path) -> bool {
        self.denied
            .iter()
            .any(|d| d.starts_with(p) || p.starts_with(d))
    }

    /// `Err` when `p` may not be moved or copied aside (see [`Site::touches_denied`]).
    fn may_move(&self, p: &Path) -> Result<(), String> {
        if self.touches_denied(p) {
            return Err(DENIED.into());
        }
        Ok(())
    }
}

/// Why something denied for reading is left where it is.
const DENIED: &str = "it is, holds or lies in a path denied for reading, which dsh does not \
                      move; look at it yourself";

/// Acts on one thing the check found (see [`quarantine`]), adding what it did to `out`.
fn act_on(
    p: &Path,
    site: &Site,
    before: &SandboxPolicy,
    after: &WorkspaceLayout,
    out: &mut Vec<Quarantined>,
) {
    let root = site.root;
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return;
    };
    if p == root {
        // A root a command gave git's shape: git takes it (and every directory beneath it
        // without a `.git` of its own) for a repository whenever its own `.git` does not
        // pass git's checks, which a command can arrange too. Its `HEAD` goes aside, which
        // ends the shape; the root's `config`, `hooks` (the user's folders, perhaps) stay.
        if meta.is_dir() && crate::walk::is_git_dir(p) {
            let head = p.join("HEAD");
            let r = if was_protected(&head, before) {
                Err("its HEAD is protected".into())
            } else {
                rename_aside(site, &head).map(Some)
            };
            out.extend(report(&head, "a HEAD giving the root git's shape", r));
        }
        return;
    }
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut act = |what: &str, r: Result<Option<PathBuf>, String>| match r {
        Ok(None) => {}
        Ok(Some(to)) => out.push(Quarantined {
            path: p.to_path_buf(),
            moved_to: Some(to),
            what: what.to_owned(),
            set_aside: true,
        }),
        Err(why) => out.push(Quarantined {
            path: p.to_path_buf(),
            moved_to: None,
            what: format!("{what} (NOT set aside: {why})"),
            set_aside: false,
        }),
    };
    if meta.file_type().is_symlink() {
        if name == ".git" {
            act("a .git symlink", rename_aside(site, p).map(Some));
        } else if is_tool_setting(p, &name) {
            act("tool settings (a symlink)", rename_aside(site, p).map(Some));
        }
        return;
    }
    if name == ".git" && meta.is_file() {
        // One leading to what dsh does not act on (out of the workspace, a protected
        // path, a path denied for reading) goes aside itself, so that nothing is named.
        let leads_to_untouched = crate::protected::pointer_target(p).is_none_or(|t| {
            !t.starts_with(&before.workspace_root)
                || was_protected(&t, before)
                || site.touches_denied(&t)
        });
        if leads_to_untouched {
            act(
                "a .git file leading out of the workspace or to a protected or denied path",
                rename_aside(site, p).map(Some),
            );
        } else if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
            // Another name would stay writable while the pointer is mounted read-only.
            let r =
                read_nofollow(site.root, p, crate::small_file::POINTER_MAX).and_then(|t| match t {
                    Some(t) => fresh_aside(site, p, &t),
                    None => rename_aside(site, p).map(Some),
                });
            act("a .git file with another name (a hard link)", r);
        }
        return;
    }
    // A folder holding what was protected (a repository, a folder of settings) is not
    // dsh's to empty; a config naming it as a hooks folder is rewritten on its own.
    let holds_protected = before.protected.iter().any(|q| q.starts_with(p));
    if meta.is_dir() && after.hooks_dirs.iter().any(|h| h == p) {
        if holds_protected {
            act(
                "a git hooks folder holding protected paths",
                Err("not moved".into()),
            );
            return;
        }
        out.extend(report(p, "a git hooks folder", quarantine_hooks(site, p)));
        return;
    }
    if meta.is_dir() && (after.git_dirs.iter().any(|g| g == p) || crate::walk::is_git_dir(p)) {
        git_dir_parts(p, site, before, out);
        return;
    }
    if is_tool_setting(p, &name) {
        if holds_protected {
            act(
                "tool settings holding protected paths",
                Err("not moved".into()),
            );
            return;
        }
        let r = if meta.is_dir() {
            empty_dir_aside(site, p, |_| true)
        } else {
            rewrite_aside(site, p, b"")
        };
        act("tool settings", r);
    }
}

/// Sets aside the programs of the git dir `g`: its configs' unsafe settings, its hooks,
/// a `commondir` leading elsewhere. A part that was protected is the user's as it was.
fn git_dir_parts(g: &Path, site: &Site, before: &SandboxPolicy, out: &mut Vec<Quarantined>) {
    let mut part = |name: &str| {
        let p = g.join(name);
        if was_protected(&p, before) {
            return None;
        }
        // What holds a protected path is the user's in part: not dsh's to move.
        if before
            .protected
            .iter()
            .any(|q| q.starts_with(&p) && *q != p)
        {
            out.push(Quarantined {
                path: p,
                moved_to: None,
                what: "a git dir's part holding a protected path (NOT set aside)".into(),
                set_aside: false,
            });
            return None;
        }
        Some(p)
    };
    let parts: Vec<PathBuf> = [
        "config",
        "config.worktree",
        "hooks",
        "commondir",
        "remotes",
        "branches",
    ]
    .into_iter()
    .filter_map(&mut part)
    .collect();
    let part = |name: &str| parts.iter().find(|p| p.ends_with(name)).cloned();
    for config in ["config", "config.worktree"].into_iter().filter_map(part) {
        let mut what = String::new();
        let r = quarantine_config(site, &config, &mut what);
        out.extend(report(&config, &what, r));
    }
    if let Some(hooks) = part("hooks") {
        out.extend(report(&hooks, "git hooks", quarantine_hooks(site, &hooks)));
    }
    // The older places a remote is named: one leading to a repository on this disk would
    // run that repository's hooks on the user's `git push`.
    for named in ["remotes", "branches"].into_iter().filter_map(part) {
        if std::fs::symlink_metadata(&named).is_ok_and(|m| m.is_dir()) {
            out.extend(report(
                &named,
                "git remotes named outside the config",
                empty_dir_aside(site, &named, |_| true),
            ));
        }
    }
    if let Some(commondir) = part("commondir") {
        out.extend(report(
            &commondir,
            "a commondir leading to an unprotected directory",
            quarantine_commondir(site, &commondir, before),
        ));
    }
}

fn report(path: &Path, what: &str, r: Result<Option<PathBuf>, String>) -> Option<Quarantined> {
    match r {
        Ok(None) => None,
        Ok(Some(to)) => Some(Quarantined {
            path: path.to_path_buf(),
            moved_to: Some(to),
            what: what.to_owned(),
            set_aside: true,
        }),
        Err(why) => Some(Quarantined {
            path: path.to_path_buf(),
            moved_to: None,
            what: format!("{what} (NOT set aside: {why})"),
            set_aside: false,
        }),
    }
}

fn is_tool_setting(p: &Path, name: &str) -> bool {
    crate::walk::is_tool_setting_in(p.parent().unwrap_or(p), OsStr::new(name))
}

/// A git config with anything outside [`SAFE_GIT_KEYS`], or that dsh cannot read whole
/// as git would: a copy of the original set aside, the safe settings written in its place.
fn quarantine_config(
    site: &Site,
    config: &Path,
    what: &mut String,
) -> Result<Option<PathBuf>, String> {
    *what = "git config".into();
    let Ok(meta) = std::fs::symlink_metadata(config) else {
        return Ok(None);
    };
    if meta.file_type().is_symlink() || !meta.is_file() {
        *what = "git config (not a plain file)".into();
        return rename_aside(site, config).map(Some);
    }
    let Some(bytes) = read_nofollow(site.root, config, gitconfig::MAX_CONFIG_BYTES + 1)? else {
        *what = "git config (a link, or another name of a file)".into();
        return rename_aside(site, config).map(Some);
    };
    let whole = (bytes.len() as u64) <= gitconfig::MAX_CONFIG_BYTES;
    let text = String::from_utf8_lossy(&bytes);
    let (entries, clean) = gitconfig::parse(&text);
    {
        use std::os::unix::fs::MetadataExt;
        // Another name for the config (`ln .git/config notes.txt`) would stay writable
        // while the config's own path is mounted read-only: the file goes aside with
        // every other name it has, and a fresh one of one name takes its place.
        if meta.nlink() > 1 {
            *what = "git config with another name (a hard link)".into();
            let safe: Vec<&Entry> = entries.iter().filter(|e| is_safe(e)).collect();
            return fresh_aside(site, config, render(&safe).as_bytes());
        }
    }
    let mut unsafe_keys: Vec<String> = entries
        .iter()
        .filter(|e| !is_safe(e))
        .map(|e| match &e.subsection {
            Some(sub) => format!("{}.{sub}.{}", e.section, e.key),
            None => format!("{}.{}", e.section, e.key),
        })
        .collect();
    unsafe_keys.dedup();
    if unsafe_keys.is_empty() && clean && whole {
        return Ok(None);
    }
    *what = if unsafe_keys.is_empty() {
        "git config dsh cannot read whole".into()
    } else {
        format!("git config setting {}", unsafe_keys.join(", "))
    };
    let safe: Vec<&Entry> = entries.iter().filter(|e| is_safe(e)).collect();
    rewrite_aside(site, config, render(&safe).as_bytes())
}

/// A hooks directory holding anything but git's samples: those entries moved aside.
fn quarantine_hooks(site: &Site, hooks: &Path) -> Result<Option<PathBuf>, String> {
    let Ok(meta) = std::fs::symlink_metadata(hooks) else {
        return Ok(None);
    };
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return rename_aside(site, hooks).map(Some);
    }
    empty_dir_aside(site, hooks, |n| !n.to_string_lossy().ends_with(".sample"))
}

/// A `commondir` that leads somewhere no earlier policy protected: a copy set aside, the
/// file made to lead to the git dir itself.
fn quarantine_commondir(
    site: &Site,
    commondir: &Path,
    before: &SandboxPolicy,
) -> Result<Option<PathBuf>, String> {
    let Ok(meta) = std::fs::symlink_metadata(commondir) else {
        return Ok(None);
    };
    if meta.file_type().is_symlink() || !meta.is_file() {
        return rename_aside(site, commondir).map(Some);
    }
    let Some(text) = read_nofollow(site.root, commondir, crate::small_file::POINTER_MAX)? else {
        return rename_aside(site, commondir).map(Some);
    };
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        // Another name would stay writable (see `quarantine_config`).
        return fresh_aside(site, commondir, &text);
    }
    let Some(rel) = crate::small_file::parse_git_path(&text, "") else {
        return Ok(None);
    };
    let g = commondir.parent().unwrap_or(site.root);
    let target = dsh_core::path::resolved(&g.join(OsStr::from_bytes(rel)));
    if rel == b"." || target == g || before.git_dirs.contains(&target) {
        return Ok(None);
    }
    rewrite_aside(
        site,
        commondir,
        dsh_sandbox::COMMONDIR_PLACEHOLDER.as_bytes(),
    )
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
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// `<name>.dsh-quarantine-<random>`: unguessable, so a command cannot take the name first.
/// A name too long for the suffix is cut (a name is at most 255 bytes).
fn aside_name(name: &OsStr) -> OsString {
    let bytes = name.as_bytes();
    let mut n = OsString::from(OsStr::from_bytes(&bytes[..bytes.len().min(200)]));
    n.push(format!(
        ".dsh-quarantine-{}",
        dsh_core::spill::random_hex(12)
    ));
    n
}

/// The parent of `p` opened beneath `root` (no symlink on the way), made writable to its
/// owner, and `p`'s name.
fn parent_of(root: &Path, p: &Path) -> Result<(OwnedFd, CString), String> {
    let (parent, name) = (
        p.parent().ok_or("no parent")?,
        p.file_name().ok_or("no name")?,
    );
    let dir = nofollow::open_beneath(root, parent, libc::O_PATH).map_err(|e| {
        format!(
            "cannot open {} beneath {} without symlinks: {e}",
            parent.display(),
            root.display()
        )
    })?;
    // A command of this user may have taken the bits away to stop dsh.
    let _ = nofollow::add_owner_bits(&dir, 0o700);
    let name = CString::new(name.as_bytes()).map_err(|_| "a NUL in a name")?;
    Ok((dir, name))
}

/// Renames `p` to a fresh `<name>.dsh-quarantine-<random>` beside it.
/// The file at `p` moved aside whole (with every other name it has), and a new file of one
/// name holding `content` made in its place (0644, this user's).
fn fresh_aside(site: &Site, p: &Path, content: &[u8]) -> Result<Option<PathBuf>, String> {
    let aside = rename_aside(site, p)?;
    let (dir, name) = parent_of(site.root, p)?;
    let fd = nofollow::open_at(&dir, &name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL)
        .map_err(|e| format!("set aside, but no fresh copy made: {e}"))?;
    let mut file = std::fs::File::from(fd);
    std::io::Write::write_all(&mut file, content).map_err(|e| e.to_string())?;
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = file.set_permissions(std::fs::Permissions::from_mode(0o644));
    }
    Ok(Some(aside))
}

fn rename_aside(site: &Site, p: &Path) -> Result<PathBuf, String> {
    site.may_move(p)?;
    let (dir, from) = parent_of(site.root, p)?;
    let to_name = aside_name(p.file_name().ok_or("no name")?);
    let to = CString::new(to_name.as_bytes()).map_err(|_| "a NUL in a name")?;
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
    if r != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(p.with_file_name(to_name))
}

/// Copies the file `p` to a fresh `<name>.dsh-quarantine-<random>` beside it, then
/// rewrites `p` in place (same inode) with `content`.
fn rewrite_aside(site: &Site, p: &Path, content: &[u8]) -> Result<Option<PathBuf>, String> {
    site.may_move(p)?;
    let (dir, name) = parent_of(site.root, p)?;
    let file = match nofollow::open_as_owner(
        &dir,
        &name,
        libc::O_RDWR | libc::O_NONBLOCK,
        libc::S_IFREG,
        0o600,
    ) {
        Ok(fd) => std::fs::File::from(fd),
        // Swapped for a link since it was looked at: the link goes aside whole.
        Err(Refused::Aside) => return rename_aside(site, p).map(Some),
        Err(Refused::Io(e)) => return Err(e.to_string()),
    };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid(2) has no preconditions.
        let euid = unsafe { libc::geteuid() };
        // Another name for the same file (a hard link the command moved here), another
        // user's file (under a root dsh), or more than the copy takes whole: not rewritten,
        // which would change that other name too, truncate what is not ours, or lose data,
        // but moved aside.
        if meta.nlink() != 1 || meta.uid() != euid || meta.len() > MAX_COPY_BYTES {
            drop(file);
            return rename_aside(site, p).map(Some);
        }
    }
    let mut original = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(&file, MAX_COPY_BYTES + 1),
        &mut original,
    )
    .map_err(|e| e.to_string())?;
    if original.len() as u64 > MAX_COPY_BYTES {
        // Grew while it was read: moved aside whole instead.
        drop(file);
        return rename_aside(site, p).map(Some);
    }
    let to_name = aside_name(p.file_name().ok_or("no name")?);
    let to = CString::new(to_name.as_bytes()).map_err(|_| "a NUL in a name")?;
    // A new file, never an existing one or a link's target.
    let copy = nofollow::open_at(&dir, &to, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL)
        .map(std::fs::File::from)
        .map_err(|e| e.to_string())?;
    std::io::Write::write_all(&mut &copy, &original).map_err(|e| e.to_string())?;
    file.set_len(0).map_err(|e| e.to_string())?;
    std::os::unix::fs::FileExt::write_all_at(&file, content, 0).map_err(|e| e.to_string())?;
    Ok(Some(p.with_file_name(to_name)))
}

/// Moves the entries of the directory `p` that `pick` chooses into a fresh
/// `<name>.dsh-quarantine-<random>` beside it; `p` itself stays (same inode). `None` when
/// there is nothing to move. An entry that is or holds a path denied for reading stays,
/// and makes the result an `Err` naming it.
fn empty_dir_aside(
    site: &Site,
    p: &Path,
    pick: impl Fn(&OsStr) -> bool,
) -> Result<Option<PathBuf>, String> {
    if site.denied.iter().any(|d| p.starts_with(d)) {
        return Err(DENIED.into());
    }
    let (parent, name) = parent_of(site.root, p)?;
    let dir = match nofollow::open_as_owner(
        &parent,
        &name,
        libc::O_RDONLY | libc::O_DIRECTORY,
        libc::S_IFDIR,
        0o700,
    ) {
        Ok(fd) => fd,
        Err(Refused::Aside) => return rename_aside(site, p).map(Some),
        Err(Refused::Io(e)) => return Err(e.to_string()),
    };
    let _ = nofollow::add_owner_bits(&dir, 0o700);
    let (entries, denied): (Vec<OsString>, Vec<OsString>) =
        std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            .map_err(|e| e.to_string())?
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| pick(n))
            .partition(|n| !site.touches_denied(&p.join(n)));
    if entries.is_empty() && !denied.is_empty() {
        return Err(DENIED.into());
    }
    if entries.is_empty() {
        return Ok(None);
    }
    let to_name = aside_name(p.file_name().ok_or("no name")?);
    let to = CString::new(to_name.as_bytes()).map_err(|_| "a NUL in a name")?;
    // SAFETY: mkdirat(2) relative to our directory fd with a valid C string.
    if unsafe { libc::mkdirat(parent.as_raw_fd(), to.as_ptr(), 0o700) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    let aside = nofollow::open_at(&parent, &to, libc::O_RDONLY | libc::O_DIRECTORY)
        .map_err(|e| e.to_string())?;
    for n in entries {
        let Ok(c) = CString::new(n.as_bytes()) else {
            continue;
        };
        // SAFETY: renameat2(2) between our two directory fds; names, never followed.
        let r = unsafe {
            libc::renameat2(
                dir.as_raw_fd(),
                c.as_ptr(),
                aside.as_raw_fd(),
                c.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
    }
    if !denied.is_empty() {
        let names: Vec<String> = denied
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        return Err(format!(
            "the rest went to {}, but not {}: {DENIED}",
            p.with_file_name(&to_name).display(),
            names.join(", ")
        ));
    }
    Ok(Some(p.with_file_name(to_name)))
}

/// Up to `max` bytes of the regular file `p` (beneath `root`), never through a symlink;
/// `None` when it is to be moved aside whole instead (a symlink now, or unreadable with a
/// second name).
fn read_nofollow(root: &Path, p: &Path, max: u64) -> Result<Option<Vec<u8>>, String> {
    let (dir, name) = parent_of(root, p)?;
    let file = match nofollow::open_as_owner(
        &dir,
        &name,
        libc::O_RDONLY | libc::O_NONBLOCK,
        libc::S_IFREG,
        0o600,
    ) {
        Ok(fd) => std::fs::File::from(fd),
        Err(Refused::Aside) => return Ok(None),
        Err(Refused::Io(e)) => return Err(e.to_string()),
    };
    if !file.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err("not a regular file".into());
    }
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(&file, max), &mut out)
        .map_err(|e| e.to_string())?;
    Ok(Some(out))
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

    fn setup() -> (tempfile::TempDir, PathBuf, SandboxPolicy) {
        let d = tempfile::tempdir().expect("tempdir");
        let root = dsh_core::path::canonical_path(d.path());
        let policy = SandboxPolicy::bare(dsh_sandbox::SandboxMode::WorkspaceWrite, &root);
        (d, root, policy)
    }

    /// The check's layout with `dirs` as the git dirs it found.
    fn found(dirs: &[&PathBuf]) -> WorkspaceLayout {
        WorkspaceLayout {
            git_dirs: dirs.iter().map(|d| (*d).clone()).collect(),
            ..WorkspaceLayout::default()
        }
    }

    /// The check on `p` alone, with `git_dirs` as the git dirs it found, in `root`.
    fn check_one(
        p: &Path,
        policy: &SandboxPolicy,
        git_dirs: &[&PathBuf],
        root: &Path,
    ) -> Vec<Quarantined> {
        quarantine(
            &[p.to_path_buf()],
            policy,
            &found(git_dirs),
            &[root.to_path_buf()],
        )
    }

    fn aside_of(q: &[Quarantined], suffix: &str) -> PathBuf {
        q.iter()
            .find(|x| x.path.ends_with(suffix))
            .and_then(|x| x.moved_to.clone())
            .unwrap_or_else(|| panic!("{suffix} not set aside: {q:?}"))
    }

    #[test]
    fn a_plain_new_repository_is_left_as_it_is() {
        let (_d, root, policy) = setup();
        let g = root.join("sub/.git");
        let config = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote \"origin\"]\n\turl = https://example.com/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n";
        repo(&g, config);
        assert!(check_one(&g, &policy, &[&g], &root).is_empty());
        assert_eq!(
            std::fs::read_to_string(g.join("config")).expect("config"),
            config
        );
    }

    #[test]
    fn programs_in_a_new_repository_are_set_aside_in_place_and_its_data_kept() {
        let (_d, root, policy) = setup();
        let g = root.join("sub/.git");
        repo(
            &g,
            "[core]\n\tbare = false\n\tfsmonitor = \"touch /tmp/x\"\n\tworktree = /elsewhere\n[alias]\n\tx = !sh\n[remote \"origin\"]\n\turl = u\n",
        );
        std::fs::write(g.join("hooks/pre-commit"), "#!/bin/sh\ntouch /tmp/x\n").expect("hook");
        let config_ino = std::fs::metadata(g.join("config")).expect("meta");
        let q = check_one(&g, &policy, &[&g], &root);
        assert!(q.iter().all(|x| x.set_aside), "{q:?}");
        let cfg = q
            .iter()
            .find(|x| x.path.ends_with("config"))
            .expect("config");
        assert!(
            cfg.what.contains("core.fsmonitor") && cfg.what.contains("alias.x"),
            "{q:?}"
        );
        let now = std::fs::read_to_string(g.join("config")).expect("config");
        assert_eq!(
            now,
            "[core]\n\tbare = \"false\"\n[remote \"origin\"]\n\turl = \"u\"\n"
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(g.join("config")).expect("meta").ino(),
            config_ino.ino(),
            "rewritten in place"
        );
        assert!(std::fs::read_to_string(aside_of(&q, "config"))
            .expect("kept")
            .contains("fsmonitor"));
        assert!(aside_of(&q, "hooks").join("pre-commit").exists());
        assert!(g.join("hooks/pre-commit.sample").exists() && !g.join("hooks/pre-commit").exists());
        // A new nested tool setting is emptied, its entries kept aside.
        std::fs::create_dir_all(root.join("crates/x/.cargo")).expect("cargo");
        std::fs::write(root.join("crates/x/.cargo/config.toml"), "x").expect("cfg");
        let q = check_one(&root.join("crates/x/.cargo"), &policy, &[], &root);
        assert!(aside_of(&q, ".cargo").join("config.toml").exists());
        assert!(root.join("crates/x/.cargo").is_dir());
        assert!(!root.join("crates/x/.cargo/config.toml").exists());
    }

    // Every `config.dsh-quarantine*` name taken first, an include hidden behind a carriage
    // return, or a config padded past what dsh reads must not leave a config armed.
    #[test]
    fn names_cannot_be_taken_first_and_what_dsh_cannot_read_whole_is_rewritten() {
        let (_d, root, policy) = setup();
        let g = root.join("sub/.git");
        repo(&g, "[includeIf\r\"gitdir:/\"]\n\tpath = ../inc.cfg\n");
        for n in 0..100 {
            std::fs::write(g.join(format!("config.dsh-quarantine-{n}")), "").expect("taken");
        }
        let q = check_one(&g, &policy, &[&g], &root);
        assert!(q.iter().all(|x| x.set_aside), "{q:?}");
        assert_eq!(
            std::fs::read_to_string(g.join("config")).expect("config"),
            ""
        );
        let big = root.join("big/.git");
        let mut text = "#".repeat((gitconfig::MAX_CONFIG_BYTES + 10) as usize);
        text.push_str("\n[core]\n\tfsmonitor = x\n");
        repo(&big, &text);
        let q = check_one(&big, &policy, &[&big], &root);
        assert!(q[0].what.contains("cannot read whole"), "{q:?}");
        assert!(!std::fs::read_to_string(big.join("config"))
            .expect("c")
            .contains("fsmonitor"));
    }

    // Regression: a new git dir's config that is another name of a user's file (a hard
    // link) was rewritten in place, which rewrote the user's file as well; and (issue 23)
    // one left with two names kept a writable second name.
    #[test]
    fn a_config_with_another_name_is_moved_aside_and_the_other_name_kept() {
        let (_d, root, policy) = setup();
        let g = root.join("sub/.git");
        repo(&g, "");
        let notes = root.join("notes.txt");
        let text = "[core]\n\tfsmonitor = x\nthe user's notes\n";
        std::fs::write(&notes, text).expect("notes");
        std::fs::remove_file(g.join("config")).expect("rm");
        std::fs::hard_link(&notes, g.join("config")).expect("link");
        let q = check_one(&g, &policy, &[&g], &root);
        assert!(q.iter().all(|x| x.set_aside), "{q:?}");
        assert_eq!(std::fs::read_to_string(&notes).expect("notes"), text);
        // Issue 23: a fresh copy of one name takes its place, without the unsafe setting,
        // so the protected path holds the config and no other name reaches it.
        let fresh = std::fs::symlink_metadata(g.join("config")).expect("a fresh config");
        assert_eq!(std::os::unix::fs::MetadataExt::nlink(&fresh), 1, "{q:?}");
        let fresh_text = std::fs::read_to_string(g.join("config")).expect("fresh");
        assert!(!fresh_text.contains("fsmonitor"), "{fresh_text}");
        assert_eq!(
            std::fs::read_to_string(aside_of(&q, "config")).expect("aside"),
            text
        );
    }

    // A new git dir's `commondir` pointed at a directory holding the config and hooks,
    // which git reads instead, is made to lead home.
    #[test]
    fn a_commondir_leading_to_an_unprotected_directory_is_made_to_lead_home() {
        let (_d, root, policy) = setup();
        let g = root.join("sub/.git");
        std::fs::create_dir_all(&g).expect("g");
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::write(g.join("commondir"), "../../c\n").expect("commondir");
        let q = check_one(&g, &policy, &[&g], &root);
        assert_eq!(
            std::fs::read_to_string(g.join("commondir")).expect("c"),
            ".\n"
        );
        assert!(
            q.iter()
                .any(|x| x.path.ends_with("commondir") && x.set_aside),
            "{q:?}"
        );
    }

    // What cannot be set aside is refused in every process, not only the one that found
    // it: the next `dsh tool` or `dsh exec` must not run on.
    #[test]
    fn what_cannot_be_set_aside_is_remembered_and_refused_until_it_is_gone() {
        let (_d, root, policy) = setup();
        let g = root.join("real/.git");
        repo(&g, "[core]\n\tfsmonitor = x\n");
        // Found through a symlinked directory, which no step passes: it cannot be acted on.
        std::os::unix::fs::symlink(root.join("real"), root.join("l")).expect("link");
        let through = root.join("l/.git");
        let q = check_one(&through, &policy, &[&through], &root);
        assert!(q.iter().any(|x| !x.set_aside), "{q:?}");
        // What every dsh process of this user consults (the state directory).
        assert_eq!(
            unsettled::beneath(&root),
            vec![(through.clone(), Kind::Entry)]
        );
        let left = recheck(&policy);
        assert!(
            left.iter().any(|x| x.path.starts_with(&through)),
            "{left:?}"
        );
        // The next policy protects what it found there: that does not settle it.
        let next = policy.clone().with_protected(
            crate::names::GIT_DIR_PARTS
                .iter()
                .map(|n| through.join(n))
                .chain([through.clone()]),
        );
        let left = recheck(&next);
        assert!(
            left.iter().any(|x| x.path.starts_with(&through)),
            "{left:?}"
        );
        // Refused whatever partial enforcement is accepted.
        let policy = policy.with_on_partial(dsh_sandbox::OnPartial::Accept);
        let gap = |p: &SandboxPolicy| {
            use dsh_sandbox::Sandbox;
            match dsh_sandbox::LocalSandbox::new().confine(&["true".into()], p) {
                Ok(_) => String::new(),
                Err(e) => e.message().to_owned(),
            }
        };
        // Decided, it carries what is left and is refused.
        let decided = crate::decide(policy.clone());
        assert!(decided.unsettled.as_ref().is_some_and(|u| !u.is_empty()));
        assert!(gap(&decided).contains(&through.display().to_string()));
        // A root added afterwards forgets the decision: refused until decided again, which
        // finds it again.
        let a = dsh_core::path::canonical_path(&root.join("a"));
        let widened = decided.with_writable_root_layout(&a, crate::protected::for_workspace(&a));
        assert!(widened.unsettled.is_none());
        assert!(gap(&widened).contains("before it was decided"));
        assert!(gap(&crate::decide(widened)).contains(&through.display().to_string()));
        // Read-only calls are not held up by it.
        let ro = SandboxPolicy::bare(dsh_sandbox::SandboxMode::ReadOnly, &root)
            .with_on_partial(dsh_sandbox::OnPartial::Accept);
        assert!(!gap(&ro).contains(&through.display().to_string()));
        // Gone: forgotten, and workspace-write runs again.
        std::fs::remove_file(root.join("l")).expect("rm");
        assert!(recheck(&policy).is_empty());
        assert!(unsettled::beneath(&root).is_empty());
        assert!(!gap(&crate::decide(policy)).contains(&through.display().to_string()));
    }

    // A root dsh must not truncate another user's file that a command hard-linked or
    // moved into a new repository, nor lose the end of a file larger than the copy kept.
    #[test]
    fn a_file_too_large_to_copy_or_not_ours_is_moved_aside_whole() {
        let (_d, root, policy) = setup();
        let big = root.join("a/.npmrc");
        std::fs::create_dir_all(root.join("a")).expect("a");
        let size = MAX_COPY_BYTES + 10;
        std::fs::File::create(&big)
            .and_then(|f| f.set_len(size))
            .expect("big");
        let q = check_one(&big, &policy, &[], &root);
        assert!(!big.exists(), "{q:?}");
        assert_eq!(
            std::fs::metadata(aside_of(&q, ".npmrc"))
                .expect("aside")
                .len(),
            size
        );
        // SAFETY: geteuid(2) has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // Only root can hand a file to another user; the rest is a root dsh's case.
            return;
        }
        let theirs = root.join("b/.npmrc");
        std::fs::create_dir_all(root.join("b")).expect("b");
        std::fs::write(&theirs, "registry=x\n").expect("theirs");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
        let q = check_one(&theirs, &policy, &[], &root);
        let aside = aside_of(&q, ".npmrc");
        assert!(!theirs.exists());
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&aside).expect("aside");
        assert_eq!((meta.uid(), meta.len()), (65534, 11), "changed, not moved");
    }

    // A chmod by name would follow a symlink swapped in: the owner's bits are added
    // through the inode checked, and a link is moved aside whole.
    #[test]
    fn files_without_their_owner_bits_are_opened_through_the_inode_checked() {
        use std::os::unix::fs::PermissionsExt;
        let (_d, root, policy) = setup();
        let npmrc = root.join("a/.npmrc");
        std::fs::create_dir_all(root.join("a")).expect("a");
        std::fs::write(&npmrc, "script-shell=/tmp/x\n").expect("npmrc");
        std::fs::set_permissions(&npmrc, PermissionsExt::from_mode(0o000)).expect("chmod");
        let q = check_one(&npmrc, &policy, &[], &root);
        assert!(q.iter().all(|x| x.set_aside), "{q:?}");
        assert_eq!(std::fs::read(&npmrc).expect("emptied"), b"");
        assert_eq!(
            std::fs::read(aside_of(&q, ".npmrc")).expect("kept"),
            b"script-shell=/tmp/x\n"
        );
        // A hooks folder that is a symlink now: the link goes aside, its target is left.
        let outside = tempfile::tempdir().expect("outside");
        std::fs::write(outside.path().join("keep"), "x").expect("keep");
        std::fs::set_permissions(outside.path(), PermissionsExt::from_mode(0o500)).expect("ro");
        let g = root.join("sub/.git");
        repo(&g, "");
        std::fs::remove_dir_all(g.join("hooks")).expect("rm");
        std::os::unix::fs::symlink(outside.path(), g.join("hooks")).expect("link");
        let q = check_one(&g, &policy, &[&g], &root);
        assert!(q.iter().all(|x| x.set_aside), "{q:?}");
        assert!(outside.path().join("keep").exists());
        let mode = std::fs::metadata(outside.path())
            .expect("m")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o500, "the link's target was changed");
        std::fs::set_permissions(outside.path(), PermissionsExt::from_mode(0o700)).expect("rw");
    }

    // More entries than a walk reads (hard links), then an armed repository: a root walked
    // short is refused, or the check after the command would not see the repository, and
    // once the entries were gone would take it for one that was always there.
    #[test]
    fn a_root_walked_short_is_refused_and_then_checked_against_what_was_there() {
        let (_d, root, before) = setup();
        let g = root.join("x/.git");
        repo(&g, "[core]\n\tfsmonitor = x\n");
        walked_short(&root, &before);
        let short = before.clone().with_layout(
            &root,
            WorkspaceLayout {
                complete: false,
                ..WorkspaceLayout::default()
            },
        );
        let left = recheck(&short);
        assert!(left.iter().any(|q| q.path == root), "{left:?}");
        // Whole again: the repository made meanwhile is set aside, and the record goes.
        let whole = before
            .clone()
            .with_layout(&root, crate::protected::for_workspace(&root));
        assert!(recheck(&whole).is_empty());
        assert!(!std::fs::read_to_string(g.join("config"))
            .expect("config")
            .contains("fsmonitor"));
        assert!(recheck(&short).iter().all(|q| q.path != root));
    }
}
