//! Confine a command so the kernel, not the model's good will, decides what it may write.
//!
//! A [`SandboxPolicy`] travels with each call: a [`SandboxMode`] (what may be written), a
//! [`Network`] axis (denied by default), the writable roots and the protected paths
//! that stay read-only inside them. A [`Sandbox`] provider turns a command's argv and a
//! policy into a [`Confinement`]: the argv to spawn instead, the environment it needs
//! (`TMPDIR`), and the [`ChildRestrictions`] the spawner applies in the child between
//! `fork` and `exec`. The provider here is [`LocalSandbox`]:
//!
//! | runner | how | used for |
//! |---|---|---|
//! | [`Runner::Landlock`] | Landlock ruleset + seccomp, applied by the child itself | read-only (fastest; no helper binary) |
//! | [`Runner::Bwrap`] | bubblewrap: read-only bind of `/`, namespaces, protected re-binds | workspace-write (protected carve-outs), or when Landlock is missing |
//! | [`Runner::Seatbelt`] | `sandbox-exec` with a generated profile | macOS |
//!
//! Per call the provider picks the fastest runner that enforces the policy in
//! [full](Enforcement::Full). If none can, the call fails with `SANDBOX_UNAVAILABLE`
//! naming what is missing, unless the policy accepts partial enforcement
//! ([`OnPartial::Accept`], the user's choice): then the runner with the fewest gaps runs
//! it and the [`Confinement`] says which part is missing. If no runner works at all, the
//! call fails with `SANDBOX_UNAVAILABLE` ([`sandbox_unavailable`]); nothing runs
//! unconfined.
//!
//! What stays read-only inside a writable root is the policy's `protected` set, found by
//! `dsh-protect` (the git dirs of every repository in it, the settings editors, agents
//! and toolchains act on by themselves) when it decides a policy; missing ones are held
//! by [`Placeholders`] shared by every dsh process on the host. What no confined command
//! may read is [`deny_read`]. Confining never moves or changes a file: it is a function of
//! the argv, the policy and what the probes found.
//!
//! ```no_run
//! use dsh_sandbox::{LocalSandbox, Sandbox, SandboxMode, SandboxPolicy};
//! let sandbox = LocalSandbox::new();
//! let policy = SandboxPolicy::new(SandboxMode::ReadOnly, "/work/project");
//! let confined = sandbox.confine(&["bash".into(), "-c".into(), "make".into()], &policy)?;
//! // Spawn `confined.argv` with `confined.env`, applying `confined.restrictions` in the
//! // child (dsh-process does this when `SpawnSpec::restrictions` is set).
//! # Ok::<(), dsh_core::HarnessError>(())
//! ```
//!
//! After the command ran, [`classify_runner_failure`] tells a runner that failed before the
//! command started (`SANDBOX_UNAVAILABLE`, with its line) from a command that ran, and
//! [`classify_denial`] tells a write the sandbox refused from an ordinary failure.
//!
//! # Guarantees
//! - Never a silent downgrade: a policy no runner can enforce in full is an error unless
//!   the policy accepts the gap, and then it is reported as partial with the reason, never
//!   as full.
//! - No path a writable root's protected set names can be written or created by a
//!   confined command under a runner that enforces it in full (bubblewrap), whatever it
//!   renames; a configured path outside the roots never becomes a writable mount.
//! - A denied path cannot be read by a confined command in any mode (bubblewrap: an
//!   unreadable mount over it; Landlock: no read grant reaches it).
//! - Confined commands run with `no_new_privs` and no capabilities, even when dsh is root.
//! - With [`Network::Deny`], no socket reaches anything outside the sandbox: no IP socket
//!   at all, no connect to a host Unix socket (pathname or abstract), no io_uring; a
//!   `socketpair` made inside still works.
//!
//! # Platform
//! Linux (Landlock ABI 1+, bubblewrap) and macOS (Seatbelt). Elsewhere every confined
//! call is `SANDBOX_UNAVAILABLE`.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use dsh_core::{ErrorCode, HarnessError};

pub mod bwrap;
mod child;
pub mod deny_read;
pub mod landlock;
mod local;
pub mod nofollow;
mod placeholder;
pub mod seatbelt;
pub mod seccomp;
pub mod small_file;
pub mod state_dir;

pub use child::{ChildRestrictions, ConfineStep};
pub use local::{LocalSandbox, RunnerStatus};
pub use placeholder::{Placeholders, COMMONDIR_PLACEHOLDER, DIRECTORY_NAMES};

/// What a confined command may write. Strictly ordered: each mode allows everything the
/// one before it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SandboxMode {
    /// No writes anywhere but `/dev/null`. `as_str()`: `read-only`.
    ReadOnly,
    /// Writes under the workspace root, the extra writable roots and the private temp
    /// directory, except the protected paths. `as_str()`: `workspace-write`.
    WorkspaceWrite,
    /// No confinement at all; never reaches a [`Sandbox`]. `as_str()`:
    /// `danger-full-access`.
    DangerFullAccess,
}

impl SandboxMode {
    /// Every mode, narrowest first.
    pub const ALL: [SandboxMode; 3] = [
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::DangerFullAccess,
    ];

    /// The stable kebab-case name (`read-only`, `workspace-write`, `danger-full-access`).
    pub const fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::DangerFullAccess => "danger-full-access",
        }
    }

    /// Whether commands in this mode go through a [`Sandbox`].
    pub const fn is_confined(self) -> bool {
        !matches!(self, SandboxMode::DangerFullAccess)
    }

    /// What the mode lets a command do, in one sentence for a person deciding on it or a
    /// model working in it.
    pub const fn meaning(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => {
                "commands and file tools can read files (secrets excepted) but write nothing"
            }
            SandboxMode::WorkspaceWrite => {
                "commands and file tools can write in the workspace and the configured writable \
                 roots, except protected paths (git hooks and config, editor, agent and tool \
                 settings, .dsh/); everything else stays read-only"
            }
            SandboxMode::DangerFullAccess => {
                "no sandbox at all: commands run with all of your user's rights, can read and \
                 change any file you can, and reach the network"
            }
        }
    }
}

impl fmt::Display for SandboxMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SandboxMode {
    type Err = HarnessError;

    /// Parses the kebab-case name; anything else is `INVALID_ARGUMENT` listing the modes.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SandboxMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                HarnessError::invalid_argument(format!(
                    "unknown sandbox mode \"{s}\"; expected read-only, workspace-write or danger-full-access"
                ))
            })
    }
}

/// Whether a confined command may use the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Network {
    /// No socket reaches outside the sandbox (the default in confined modes).
    /// `as_str()`: `deny`.
    #[default]
    Deny,
    /// The network is shared with the host. `as_str()`: `allow`.
    Allow,
}

impl Network {
    /// `deny` or `allow`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Network::Deny => "deny",
            Network::Allow => "allow",
        }
    }
}

impl FromStr for Network {
    type Err = HarnessError;

    /// Parses `deny` or `allow`; anything else is `INVALID_ARGUMENT`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "deny" => Ok(Network::Deny),
            "allow" => Ok(Network::Allow),
            _ => Err(HarnessError::invalid_argument(format!(
                "unknown network policy \"{s}\"; expected deny or allow"
            ))),
        }
    }
}

/// What a confinement does when the runners here can enforce its policy only in part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum OnPartial {
    /// Refuse with `SANDBOX_UNAVAILABLE`, naming what is missing and how to get it (the
    /// default). `as_str()`: `refuse`.
    #[default]
    Refuse,
    /// Run with what can be enforced; every result says which part is missing (the
    /// user's choice: `allow_partial = true`, `--allow-partial`). `as_str()`: `accept`.
    Accept,
}

impl OnPartial {
    /// `refuse` or `accept`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnPartial::Refuse => "refuse",
            OnPartial::Accept => "accept",
        }
    }
}

/// The boundary of one call. [`SandboxPolicy::new`] gives the defaults every confined
/// policy starts from (network denied, the credential stores denied for reading, the homes
/// closed, partial enforcement refused); under workspace-write a policy is confined only
/// once it is *decided* (`dsh_protect::decide`: the protected paths of every git dir and
/// tool setting in its writable roots, [`unsettled`](Self::unsettled) known).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// What may be written.
    pub mode: SandboxMode,
    /// Whether the network is reachable.
    pub network: Network,
    /// The workspace root, canonical (symlinks resolved).
    pub workspace_root: PathBuf,
    /// More writable directories (canonical), under workspace-write only.
    pub writable_roots: Vec<PathBuf>,
    /// Paths that stay read-only (and cannot be created) inside the writable roots, under
    /// workspace-write. Absolute.
    pub protected: Vec<PathBuf>,
    /// Paths no confined command may read, in every confined mode: absolute, with `*`
    /// and `?` allowed in the last component (see [`deny_read`]).
    pub deny_read: Vec<PathBuf>,
    /// Directories readable only through `read_allow`, the workspace and the writable
    /// roots, in every confined mode ([`deny_read::closed_dirs`]: every home, and dsh's
    /// private directories); none in a bare policy.
    pub closed_dirs: Vec<PathBuf>,
    /// What stays readable in the homes besides the roots: absolute patterns as
    /// `deny_read`'s ([`deny_read::read_allow_defaults`] and the configured ones).
    pub read_allow: Vec<PathBuf>,
    /// What to do when the runners can enforce this policy only in part.
    pub on_partial: OnPartial,
    /// The git dirs and hooks folders the protected paths were found from: the check after
    /// a command compares against them.
    pub git_dirs: Vec<PathBuf>,
    /// The roots whose layout the policy holds ([`with_layout`](Self::with_layout)):
    /// deciding the policy walks every writable root not among them.
    pub laid_out: Vec<PathBuf>,
    /// Writable roots whose walk for nested repositories stopped short, or whose git
    /// configs name too many includes or hooks paths to follow: their protection is
    /// incomplete, a gap of every runner.
    pub incomplete_roots: Vec<PathBuf>,
    /// What earlier checks could not set aside in the writable roots, as tried again
    /// when the policy was decided ([`settled`](Self::settled)); `None` while it is not
    /// decided for the roots and mode it has now (a builder that adds a root or changes the
    /// mode forgets it). A workspace-write policy that is not decided, or that has anything
    /// left here, is refused by every runner.
    pub unsettled: Option<Vec<Quarantined>>,
}

impl SandboxPolicy {
    /// Danger-full-access for the workspace at `root` (used as given): nothing confined,
    /// the network reachable. What a caller passes, explicitly, where no sandbox applies;
    /// no provider assumes it.
    pub fn danger_full_access(root: &Path) -> SandboxPolicy {
        SandboxPolicy::bare(SandboxMode::DangerFullAccess, root).with_network(Network::Allow)
    }

    /// The policy of `mode` for the workspace at `root` with the defaults every confined
    /// policy starts from: network denied, [`deny_read::defaults`], the homes closed but
    /// for [`deny_read::read_allow_defaults`], partial enforcement refused. `root` goes
    /// through [`root_of`](dsh_core::path::root_of); a root that does not exist then
    /// matches nothing rather than inventing a grant. Nothing protected yet: under
    /// workspace-write, decide it (`dsh_protect::decide`) before confining it.
    pub fn new(mode: SandboxMode, root: impl AsRef<Path>) -> SandboxPolicy {
        let root = dsh_core::path::root_of(root.as_ref());
        SandboxPolicy::bare(mode, &root)
            .with_deny_read(deny_read::defaults())
            .with_homes_closed(deny_read::read_allow_defaults())
    }

    /// The policy of `mode` for `root` (used as given) with nothing protected and nothing
    /// denied: the base [`new`](Self::new) adds to, and what probes use.
    pub fn bare(mode: SandboxMode, root: &Path) -> SandboxPolicy {
        SandboxPolicy {
            mode,
            network: Network::Deny,
            workspace_root: root.to_path_buf(),
            writable_roots: Vec::new(),
            protected: Vec::new(),
            deny_read: Vec::new(),
            closed_dirs: Vec::new(),
            read_allow: Vec::new(),
            on_partial: OnPartial::Refuse,
            git_dirs: Vec::new(),
            incomplete_roots: Vec::new(),
            laid_out: Vec::new(),
            unsettled: None,
        }
    }

    /// The same policy, decided: [`unsettled`](Self::unsettled) is `left`, what the
    /// check's records still hold in its writable roots as the disk is now (empty but in
    /// workspace-write). Only the code that decides a policy (`dsh_protect::decide`) calls
    /// it.
    pub fn settled(mut self, left: Vec<Quarantined>) -> SandboxPolicy {
        self.unsettled = Some(left);
        self
    }

    /// The same policy with the protected paths, commit roots and git dirs of `root`'s
    /// layout added.
    pub fn with_layout(mut self, root: &Path, layout: WorkspaceLayout) -> SandboxPolicy {
        // A root it was not decided for.
        self.unsettled = None;
        self = self.with_protected(layout.protected);
        for w in layout.writable {
            if !self.writable_roots.contains(&w) && w != self.workspace_root {
                self.writable_roots.push(w);
            }
        }
        for g in layout.git_dirs {
            if !self.git_dirs.contains(&g) {
                self.git_dirs.push(g);
            }
        }
        if !layout.complete && !self.incomplete_roots.iter().any(|r| r == root) {
            self.incomplete_roots.push(root.to_path_buf());
        }
        if !self.laid_out.iter().any(|r| r == root) {
            self.laid_out.push(root.to_path_buf());
        }
        self
    }

    /// The same policy with `network`.
    pub fn with_network(mut self, network: Network) -> SandboxPolicy {
        self.network = network;
        self
    }

    /// The same policy with one more writable directory (canonical) and its layout.
    pub fn with_writable_root_layout(
        mut self,
        dir: &Path,
        layout: WorkspaceLayout,
    ) -> SandboxPolicy {
        if !self.writable_roots.iter().any(|w| w == dir) && dir != self.workspace_root {
            self.writable_roots.push(dir.to_path_buf());
        }
        self.with_layout(dir, layout)
    }

    /// The same policy with more writable directories (canonical) whose layouts it does not
    /// hold: deciding it walks them ([`laid_out`](Self::laid_out) does not list them). A
    /// policy given a root is no longer decided.
    pub fn with_writable_roots(mut self, dirs: impl IntoIterator<Item = PathBuf>) -> SandboxPolicy {
        for dir in dirs {
            if !self.writable_roots.contains(&dir) && dir != self.workspace_root {
                self.writable_roots.push(dir);
                self.unsettled = None;
            }
        }
        self
    }

    /// The same policy with more protected paths (absolute; only ever added).
    pub fn with_protected(mut self, paths: impl IntoIterator<Item = PathBuf>) -> SandboxPolicy {
        let mut seen: std::collections::HashSet<PathBuf> = self.protected.iter().cloned().collect();
        for p in paths {
            // Lexically folded: `ROOT/../x` is `x` outside the root, never a path "inside"
            // it whose carve would bind the root's parent.
            let p = dsh_core::path::fold_dots(&p);
            if seen.insert(p.clone()) {
                self.protected.push(p);
            }
        }
        self
    }

    /// The same policy with more paths denied for reading (absolute patterns; only ever
    /// added).
    pub fn with_deny_read(mut self, paths: impl IntoIterator<Item = PathBuf>) -> SandboxPolicy {
        add_unique(&mut self.deny_read, paths);
        self
    }

    /// The same policy with every home (and dsh's private directories) closed
    /// ([`deny_read::closed_dirs`]) but for `allow` (absolute patterns; only ever added)
    /// and the roots.
    pub fn with_homes_closed(mut self, allow: impl IntoIterator<Item = PathBuf>) -> SandboxPolicy {
        self.closed_dirs = deny_read::closed_dirs();
        add_unique(&mut self.read_allow, allow);
        self
    }

    /// Every root this policy lets a command read in a home besides `read_allow`: the
    /// workspace and the extra writable roots, whatever the mode.
    pub fn readable_roots(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.workspace_root.clone()];
        dirs.extend(self.writable_roots.iter().cloned());
        dirs
    }

    /// The same policy with `on_partial`.
    pub fn with_on_partial(mut self, on_partial: OnPartial) -> SandboxPolicy {
        self.on_partial = on_partial;
        self
    }

    /// The same policy in another mode (an approved escalation, say). A policy whose mode
    /// changes is no longer decided ([`unsettled`](Self::unsettled) is `None`): widened
    /// to workspace-write, it must be decided again (`dsh_protect::decide`, which adds the
    /// workspace's protected paths) before it is confined.
    pub fn with_mode(mut self, mode: SandboxMode) -> SandboxPolicy {
        if mode != self.mode {
            self.unsettled = None;
            // A layout taken for another mode may be a stand-in (read-only protects
            // nothing): deciding walks every root again.
            self.laid_out.clear();
        }
        self.mode = mode;
        self
    }

    /// Every writable root of this policy besides the sandbox's temp directory: the
    /// workspace and the extra roots under workspace-write, none otherwise.
    pub fn writable_dirs(&self) -> Vec<PathBuf> {
        if self.mode != SandboxMode::WorkspaceWrite {
            return Vec::new();
        }
        let mut dirs = vec![self.workspace_root.clone()];
        dirs.extend(self.writable_roots.iter().cloned());
        dirs
    }

    /// Whether a confined command under this policy may not read `path` (absolute): a
    /// denied path, or one a closed home hides.
    pub fn denies_read(&self, path: &Path) -> bool {
        self.mode.is_confined() && self.read_fence(&[], &[]).refusal(path).is_some()
    }

    /// This policy's read denial as the disk is now: its denied paths and `also_denied`,
    /// and its closed homes but for `read_allow`, its [`readable_roots`](Self::readable_roots)
    /// and `also_readable`. What confined commands may not read, and what the file tools
    /// never read in any mode.
    pub fn read_fence(
        &self,
        also_denied: &[PathBuf],
        also_readable: &[PathBuf],
    ) -> deny_read::Matcher {
        let mut denied = self.deny_read.clone();
        add_unique(&mut denied, also_denied.iter().cloned());
        let mut roots = self.readable_roots();
        add_unique(&mut roots, also_readable.iter().cloned());
        deny_read::Matcher::new(&denied).with_homes(&self.closed_dirs, &self.read_allow, &roots)
    }
}

/// Bytes read at most, when a root's protected paths are found, of one repository's index and the shared indexes it links to,
/// together: a 100 000-file repository's index is about 10 MiB.
pub const MAX_INDEX_BYTES: u64 = 256 << 20;

/// What one writable root holds that a policy must protect, as `dsh-protect` found it:
/// the protected paths and the extra writable roots commits need.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkspaceLayout {
    /// Absolute paths that stay read-only (and uncreatable) under workspace-write.
    pub protected: Vec<PathBuf>,
    /// Directories outside the root that must be writable for commits (a linked
    /// worktree's git dir and its common dir's objects, refs and logs).
    pub writable: Vec<PathBuf>,
    /// Every git dir and hooks folder found: what the check after a command compares
    /// against to find the ones the command made.
    pub git_dirs: Vec<PathBuf>,
    /// The hooks folders among them (named by a `core.hooksPath`).
    pub hooks_dirs: Vec<PathBuf>,
    /// Whether the walk read the whole root .
    pub complete: bool,
}

/// One thing the check after a command found that host tools would run, and whether it
/// was set aside: what a decided policy's [`unsettled`](SandboxPolicy::unsettled) lists
/// when it was not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// The path as the command left it.
    pub path: PathBuf,
    /// Where the original is now (a copy, or a directory of its entries).
    pub moved_to: Option<PathBuf>,
    /// What it was (`git config setting core.fsmonitor`, `git hooks`, `tool settings`).
    pub what: String,
    /// Whether it was set aside; `false`: it is still there as the command left it (the
    /// caller must say so, and not trust that root again until it is gone).
    pub set_aside: bool,
}

/// Appends each of `more` not in `list` yet, in order (a set for the lookups: lists of a
/// few hundred patterns are merged at every call).
fn add_unique(list: &mut Vec<PathBuf>, more: impl IntoIterator<Item = PathBuf>) {
    let mut seen: std::collections::HashSet<PathBuf> = list.iter().cloned().collect();
    for p in more {
        if seen.insert(p.clone()) {
            list.push(p);
        }
    }
}

/// The home directory of the user dsh runs as: `$HOME` when it is absolute, else the
/// password database's entry.
pub fn home_dir() -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("HOME").map(PathBuf::from) {
        if h.is_absolute() {
            return Some(h);
        }
    }
    passwd_home()
}

/// The home directory the password database gives the user dsh runs as (which `$HOME`
/// may differ from: toolchains installed there are still this user's).
pub fn passwd_home() -> Option<PathBuf> {
    // Looked up once: the user a process runs as does not change, and every confinement
    // asks (each lookup reads the whole database).
    static HOME: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        // SAFETY: getuid(2) has no preconditions.
        let uid = unsafe { libc::getuid() };
        // `/etc/passwd` read directly when the name service asks it first (then its entry
        // is the one the service would give, and the service's set-up costs more than
        // the lookup); otherwise, or for a user it does not list, the name service.
        files_first()
            .then(|| std::fs::read("/etc/passwd").ok())
            .flatten()
            .and_then(|text| home_in_passwd(&text, uid))
            .or_else(passwd_home_by_nss)
    })
    .clone()
}

/// Whether the name service looks users up in `/etc/passwd` first (`passwd: files …` in
/// `/etc/nsswitch.conf`; `compat` reads NIS entries from it, so it is left to the service).
fn files_first() -> bool {
    let Ok(conf) = std::fs::read_to_string("/etc/nsswitch.conf") else {
        return false;
    };
    conf.lines()
        .map(|l| l.split('#').next().unwrap_or_default())
        .find_map(|l| l.trim_start().strip_prefix("passwd:"))
        .and_then(|sources| sources.split_whitespace().next())
        .is_some_and(|first| first == "files")
}

/// The home of the first entry for `uid` in the text of a passwd file, as the name
/// service's `files` source reads it (comments and `+`/`-` entries are not users); `None`
/// when there is none or it is not absolute.
fn home_in_passwd(text: &[u8], uid: libc::uid_t) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let uid = uid.to_string();
    let entry = text.split(|b| *b == b'\n').find(|line| {
        let line = line.trim_ascii_start();
        let fields: Vec<&[u8]> = line.split(|b| *b == b':').collect();
        !matches!(line.first(), None | Some(b'#' | b'+' | b'-'))
            && fields.len() >= 7
            && fields[2] == uid.as_bytes()
    })?;
    let home = entry.trim_ascii_start().split(|b| *b == b':').nth(5)?;
    let home = PathBuf::from(std::ffi::OsStr::from_bytes(home));
    home.is_absolute().then_some(home)
}

fn passwd_home_by_nss() -> Option<PathBuf> {
    // SAFETY: getpwuid_r(3) with a live passwd struct and buffer of the sizes given; the
    // returned pointers point into `buf`, read before it goes.
    unsafe {
        let mut pw: libc::passwd = std::mem::zeroed();
        let mut buf = vec![0 as libc::c_char; 4096];
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let r = libc::getpwuid_r(
            libc::getuid(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut out,
        );
        if r != 0 || out.is_null() || pw.pw_dir.is_null() {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr(pw.pw_dir);
        use std::os::unix::ffi::OsStrExt;
        let p = PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes()));
        p.is_absolute().then_some(p)
    }
}

/// How completely a runner enforces a policy.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Enforcement {
    /// Every file effect and network rule the policy promises is enforced by the kernel.
    Full,
    /// Enforced in part; the text says which part is not. Never treat as [`Full`](Self::Full).
    Partial(String),
}

impl Enforcement {
    /// `full` or `partial`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Enforcement::Full => "full",
            Enforcement::Partial(_) => "partial",
        }
    }

    /// Whether this is [`Enforcement::Full`].
    pub fn is_full(&self) -> bool {
        matches!(self, Enforcement::Full)
    }
}

/// A way of confining a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Runner {
    /// bubblewrap (`bwrap`): mount and pid/net namespaces. `as_str()`: `bwrap`.
    Bwrap,
    /// Landlock + seccomp applied in the child, no helper binary. `as_str()`: `landlock`.
    Landlock,
    /// macOS `sandbox-exec`. `as_str()`: `seatbelt`.
    Seatbelt,
    /// An operator-configured command that takes bubblewrap's arguments (a wrapper around
    /// bwrap, say; [`LocalSandbox::operator_runner`]). Asserted to enforce fully, never
    /// probed. `as_str()`: `operator`.
    Operator,
}

impl Runner {
    /// The stable name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Runner::Bwrap => "bwrap",
            Runner::Landlock => "landlock",
            Runner::Seatbelt => "seatbelt",
            Runner::Operator => "operator",
        }
    }

    /// The words in a command's stderr that mean this runner refused a write
    /// (lower case; matched case-insensitively).
    pub const fn denial_signatures(self) -> &'static [&'static str] {
        match self {
            Runner::Bwrap => &["read-only file system"],
            Runner::Landlock => &["permission denied"],
            Runner::Seatbelt => &["operation not permitted"],
            Runner::Operator => &["read-only file system", "permission denied"],
        }
    }

    /// Evidence in stderr that the runner itself failed before the command ran.
    pub fn runner_failure_rules(self) -> Vec<RunnerFailureRule> {
        match self {
            Runner::Bwrap => vec![RunnerFailureRule::fatal(&["bwrap: "])],
            // Applied by the child itself: a failure is an error of the spawn, never text.
            Runner::Landlock => Vec::new(),
            Runner::Seatbelt => vec![RunnerFailureRule::fatal(&["sandbox-exec: "])],
            // Configured with the runner: see `LocalSandbox::operator_runner`.
            Runner::Operator => Vec::new(),
        }
    }
}

impl fmt::Display for Runner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Runner {
    type Err = HarnessError;

    /// Parses `bwrap`, `landlock` or `seatbelt`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "bwrap" => Ok(Runner::Bwrap),
            "landlock" => Ok(Runner::Landlock),
            "seatbelt" => Ok(Runner::Seatbelt),
            _ => Err(HarnessError::invalid_argument(format!(
                "unknown sandbox runner \"{s}\"; expected bwrap or landlock (seatbelt on macOS)"
            ))),
        }
    }
}

/// Evidence that a runner failed before running the command (see
/// [`classify_runner_failure`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerFailureRule {
    /// The rule applies only to these exit codes; `None`: any non-zero exit.
    pub allowed_exit_codes: Option<Vec<i32>>,
    /// A stderr line containing one of these (case-insensitively) is the runner's.
    pub fatal_signatures: Vec<String>,
    /// Whole lines (case-insensitive) that are notices, never failures.
    pub informational_lines: Vec<String>,
}

impl RunnerFailureRule {
    /// A rule with these fatal signatures, any exit code, no informational lines.
    pub fn fatal(signatures: &[&str]) -> RunnerFailureRule {
        RunnerFailureRule {
            allowed_exit_codes: None,
            fatal_signatures: signatures.iter().map(|s| (*s).to_owned()).collect(),
            informational_lines: Vec::new(),
        }
    }
}

/// A command ready to spawn under a policy. See the [crate docs](crate).
#[derive(Debug)]
pub struct Confinement {
    /// The argv to spawn instead of the caller's (runner, profile, `--`, caller's argv; or
    /// the caller's argv unchanged when the child confines itself).
    pub argv: Vec<OsString>,
    /// Environment the command must get on top of the caller's (`TMPDIR`).
    pub env: Vec<(OsString, OsString)>,
    /// What the child applies to itself before `exec`; `None` for a pure-argv runner.
    pub restrictions: Option<std::sync::Arc<ChildRestrictions>>,
    /// How completely the policy is enforced.
    pub enforcement: Enforcement,
    /// The runner in use.
    pub runner: Runner,
    /// Lower-case stderr words that mean a write was refused.
    pub denial_signatures: &'static [&'static str],
    /// Whether the runner bounds the command's process tree exactly by itself
    /// (bubblewrap's PID namespace dies whole with its first process), so a spawner need
    /// not add a cgroup of its own.
    pub bounds_tree: bool,
    /// Evidence that the runner failed before the command ran.
    pub runner_failure_rules: Vec<RunnerFailureRule>,
    /// Placeholders bubblewrap mounts over missing protected paths: keep this until the
    /// command's whole tree is gone; dropping it removes the ones no other command uses.
    pub placeholders: Option<Placeholders>,
}

/// The sandbox seam: turns an argv and a policy into a [`Confinement`].
pub trait Sandbox: Send + Sync {
    /// Confines `argv` under `policy` (a confined mode).
    ///
    /// # Errors
    /// `SANDBOX_UNAVAILABLE` when no runner can enforce the policy here (the message says
    /// what is missing and how to fix it); `INVALID_ARGUMENT` for `danger-full-access`,
    /// which is never confined; `IO_FAILED` when the private temp directory cannot be made.
    fn confine(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, HarnessError>;

    /// Confines `argv` under `policy` for a command on a private terminal dsh holds the
    /// other side of (a PTY from `dsh-process`): as [`confine`](Self::confine), except
    /// that the command stays in the session whose controlling terminal that PTY is, so
    /// job control and the foreground group work. (A runner that starts a new session to
    /// keep a command from pushing keystrokes into the caller's terminal need not: the
    /// only terminal in reach is the command's own.)
    ///
    /// # Errors
    /// As [`confine`](Self::confine).
    fn confine_on_terminal(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, HarnessError>;

    /// The private temp directory confined commands get as `TMPDIR` (writable under
    /// workspace-write), if one exists yet.
    fn temp_dir(&self) -> Option<PathBuf>;
}

/// What a confined run looked like, for the result of the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxFacts {
    /// The mode the command ran in.
    pub mode: SandboxMode,
    /// Whether the command failed because the sandbox refused a write.
    pub denied: bool,
    /// How completely the mode was enforced; `None` under danger-full-access.
    pub enforcement: Option<Enforcement>,
    /// The runner used; `None` under danger-full-access.
    pub runner: Option<Runner>,
    /// Whether the runner failed before the command ran (background jobs only; a
    /// foreground run reports it as a `SANDBOX_UNAVAILABLE` error).
    pub runner_failed: bool,
}

/// The fail-closed error: `mode` was asked for, nothing here can enforce it. `why` says
/// what is missing (may be empty); `detail`, a runner's own failure line, ends the message
/// as ` Runner failure: <detail>`.
pub fn sandbox_unavailable(mode: SandboxMode, why: &str, detail: Option<&str>) -> HarnessError {
    let mut message = format!(
        "sandbox mode \"{mode}\" is requested but no sandbox backend is usable on this host; \
         dsh will not run the command unconfined."
    );
    if !why.is_empty() {
        message.push(' ');
        message.push_str(why.trim_end_matches('.'));
        message.push('.');
    }
    message.push_str(
        " To fix: on Linux install bubblewrap (apt-get install bubblewrap) with unprivileged \
         user namespaces allowed, or use a kernel with Landlock enabled (lsm=landlock); on \
         macOS sandbox-exec must be usable. `dsh doctor` shows what this machine lacks. The \
         confined modes \"read-only\" and \"workspace-write\" both need a backend; to run \
         without any sandbox on purpose, choose \"danger-full-access\".",
    );
    if let Some(detail) = detail {
        message.push_str(" Runner failure: ");
        message.push_str(detail);
    }
    HarnessError::new(ErrorCode::SandboxUnavailable, message)
}

/// The runner's own failure line, if `stderr` shows the runner failed before the command
/// ran: a non-zero exit allowed by a rule, and a stderr line (not an exact informational
/// line) containing one of its fatal signatures, case-insensitively. First match wins.
/// A signal death or exit 0 is never a runner failure.
pub fn classify_runner_failure(
    exit_code: Option<i32>,
    stderr: &str,
    rules: &[RunnerFailureRule],
) -> Option<String> {
    let exit = exit_code.filter(|c| *c != 0)?;
    for rule in rules {
        if let Some(allowed) = &rule.allowed_exit_codes {
            if !allowed.contains(&exit) {
                continue;
            }
        }
        let informational: Vec<String> = rule
            .informational_lines
            .iter()
            .map(|l| l.to_lowercase())
            .collect();
        let fatal: Vec<String> = rule
            .fatal_signatures
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.to_lowercase())
            .collect();
        for line in stderr
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
        {
            let lower = line.to_lowercase();
            if informational.contains(&lower) {
                continue;
            }
            if fatal.iter().any(|s| lower.contains(s.as_str())) {
                return Some(line.to_owned());
            }
        }
    }
    None
}

/// Whether a command's failure was the sandbox refusing a write: a non-zero exit (not a
/// signal) and one of `signatures` in its (retained) stderr, case-insensitively.
pub fn classify_denial(exit_code: Option<i32>, stderr: &str, signatures: &[&str]) -> bool {
    if !matches!(exit_code, Some(c) if c != 0) {
        return false;
    }
    let lower = stderr.to_lowercase();
    signatures
        .iter()
        .any(|s| !s.is_empty() && lower.contains(&s.to_lowercase()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_passwd_file_gives_the_first_absolute_home_of_the_uid() {
        let text = b"#root:x:0:0:old:/decoy:/bin/sh\n+nis:x:0:0::/decoy:/bin/sh\n-nis:x:0:0::/decoy:/bin/sh\nroot:x:0:0:root:/root:/bin/bash\nbad:x:1001\nci:x:1001:1001::/home/ci:/bin/sh\nci2:x:1001:1001::/other:/bin/sh\nrel:x:1002:1002::home/rel:/bin/sh\nrel2:x:1002:1002::/abs:/bin/sh\n";
        assert_eq!(super::home_in_passwd(text, 0), Some("/root".into()));
        assert_eq!(super::home_in_passwd(text, 1001), Some("/home/ci".into()));
        // The first entry counts, as the name service answers it: a relative home is none.
        assert_eq!(super::home_in_passwd(text, 1002), None);
        assert_eq!(super::home_in_passwd(text, 1003), None);
    }

    use super::*;

    #[test]
    fn modes_are_strictly_ordered_and_round_trip() {
        assert!(SandboxMode::ReadOnly < SandboxMode::WorkspaceWrite);
        assert!(SandboxMode::WorkspaceWrite < SandboxMode::DangerFullAccess);
        for m in SandboxMode::ALL {
            assert_eq!(m.as_str().parse::<SandboxMode>().ok(), Some(m));
        }
        let e = "full".parse::<SandboxMode>().expect_err("must fail");
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
    }

    #[test]
    fn unavailable_names_the_mode_and_the_way_out() {
        let e = sandbox_unavailable(SandboxMode::ReadOnly, "", None);
        assert_eq!(e.code().as_str(), "SANDBOX_UNAVAILABLE");
        assert!(e.message().contains("\"read-only\""));
        assert!(e.message().contains("\"workspace-write\""));
        assert!(e.message().contains("danger-full-access"));
        assert!(!e.message().contains("Runner failure"));
        let e = sandbox_unavailable(
            SandboxMode::WorkspaceWrite,
            "bwrap: missing",
            Some("bwrap: x"),
        );
        assert!(e.message().ends_with(" Runner failure: bwrap: x"));
    }

    #[test]
    fn runner_failure_needs_a_nonzero_allowed_exit_and_a_fatal_line() {
        let rule = RunnerFailureRule {
            allowed_exit_codes: Some(vec![125]),
            fatal_signatures: vec!["landlock-run: ".into(), "  ".into()],
            informational_lines: vec![
                "landlock-run: partial enforcement (older Landlock ABI)".into()
            ],
        };
        let rules = [rule];
        let notice = "LANDLOCK-RUN: partial enforcement (older Landlock ABI)";
        for code in [1, 2, 125] {
            assert_eq!(classify_runner_failure(Some(code), notice, &rules), None);
        }
        let text = format!("{notice}\r\nlandlock-run: exec failed: x\n");
        assert_eq!(classify_runner_failure(Some(1), &text, &rules), None);
        assert_eq!(
            classify_runner_failure(Some(125), &text, &rules).as_deref(),
            Some("landlock-run: exec failed: x")
        );
        let extra = format!("{notice} and more");
        assert!(classify_runner_failure(Some(125), &extra, &rules).is_some());
        assert_eq!(classify_runner_failure(Some(0), &text, &rules), None);
        assert_eq!(classify_runner_failure(None, &text, &rules), None);
        // Blank signatures are ignored while valid ones beside them still work.
        let blank = [RunnerFailureRule::fatal(&[" ", "bwrap: "])];
        assert_eq!(classify_runner_failure(Some(1), "ok\n", &blank), None);
        assert!(classify_runner_failure(Some(1), "bwrap: no", &blank).is_some());
    }

    #[test]
    fn denial_needs_a_nonzero_exit_and_the_dialect() {
        let sigs = Runner::Bwrap.denial_signatures();
        assert!(classify_denial(Some(1), "x: Read-only file system", sigs));
        assert!(!classify_denial(Some(0), "Read-only file system", sigs));
        assert!(!classify_denial(None, "Read-only file system", sigs));
        assert!(!classify_denial(Some(1), "Operation not permitted", sigs));
        assert!(classify_denial(
            Some(1),
            "touch: Permission denied",
            Runner::Landlock.denial_signatures()
        ));
    }
}
