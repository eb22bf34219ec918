//! The sandbox policy service: which [`SandboxPolicy`] a call gets.
//!
//! Precedence for the mode: an explicit (approved) mode for this call, else the session's
//! last `sandbox/mode` event, else the deployment default (`read-only` unless configured).
//! The workspace root is the session's working directory, canonicalised first (so
//! `link/..` follows the link) and only then made absolute; without a session, the
//! service's fallback root. [`PolicyService::set_mode`] is the only way to change a
//! session's mode, and it leaves an event.
//!
//! The protected paths come from a walk of the root for nested repositories, made once
//! per root and then kept current with inotify (a [`TreeWatch`]), so a call costs the
//! walk only the first time. After a confined command, the check
//! says what it made that the host's tools would run or read (a new git dir, a hooks
//! folder, a tool's settings), sets aside the programs in it, and the next policy protects
//! it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_core::journal::{EventKind, Journal, Record};
use dsh_core::{ErrorCode, HarnessError};
use serde_json::Value;

use dsh_protect::protected;
pub use dsh_protect::quarantine::CheckOutcome;
use dsh_protect::watch::TreeWatch;
use dsh_sandbox::{deny_read, Network, OnPartial, SandboxMode, SandboxPolicy, WorkspaceLayout};

/// See the [module docs](self).
#[derive(Clone, Debug)]
pub struct PolicyService {
    default_mode: SandboxMode,
    network: Network,
    fallback_root: PathBuf,
    on_partial: OnPartial,
    /// Directories writable besides the workspace under workspace-write (canonical).
    writable_roots: Vec<PathBuf>,
    /// More protected paths; a relative one is taken in the call's workspace root.
    protect: Vec<PathBuf>,
    /// Every read-denial pattern (the defaults and the configured ones).
    deny_read: Vec<PathBuf>,
    /// What stays readable in the closed homes besides the roots (the defaults and the
    /// configured ones).
    read_allow: Vec<PathBuf>,
    watches: Arc<Mutex<HashMap<PathBuf, TreeWatch>>>,
    /// Who is told, besides the model, when the check after a call leaves something the
    /// host would run.
    unsettled: UnsettledListeners,
    /// What checks of this service (and its clones) found already: a check under an
    /// older policy (a shell's, a terminal's, a job's) finds it again, and it is not news.
    reported: Arc<Mutex<std::collections::HashSet<PathBuf>>>,
}

/// At most this many paths are remembered as reported; past it, repeats are reported
/// again rather than memory growing.
const MAX_REPORTED: usize = 10_000;

/// A listener told the text of each unsettled finding ([`PolicyService::on_unsettled`]).
pub type UnsettledListener = Arc<dyn Fn(&str) + Send + Sync>;

/// The listeners of a service and its clones.
#[derive(Clone, Default)]
struct UnsettledListeners(Arc<Mutex<Vec<UnsettledListener>>>);

impl std::fmt::Debug for UnsettledListeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UnsettledListeners")
    }
}

impl PolicyService {
    /// A service defaulting to `mode` and `network`, with `fallback_root` for calls
    /// without a session, the default read denials, and partial enforcement refused.
    pub fn new(mode: SandboxMode, network: Network, fallback_root: &Path) -> PolicyService {
        PolicyService {
            default_mode: mode,
            network,
            fallback_root: dsh_core::path::root_of(fallback_root),
            on_partial: OnPartial::Refuse,
            writable_roots: Vec::new(),
            protect: Vec::new(),
            deny_read: deny_read::defaults(),
            read_allow: deny_read::read_allow_defaults(),
            watches: Arc::new(Mutex::new(HashMap::new())),
            unsettled: UnsettledListeners::default(),
            reported: Arc::default(),
        }
    }

    /// Runs every call's command even where the runners enforce its policy only in part
    /// (the user's choice). Default: refused.
    pub fn with_on_partial(mut self, on_partial: OnPartial) -> PolicyService {
        self.on_partial = on_partial;
        self
    }

    /// Makes `dirs` writable too under workspace-write, each protected as the workspace is
    /// (its own watched walk) and checked after each command as the workspace is. Default:
    /// none.
    pub fn with_writable_roots(mut self, dirs: impl IntoIterator<Item = PathBuf>) -> PolicyService {
        for d in dirs {
            let d = dsh_core::path::root_of(&d);
            if !self.writable_roots.contains(&d) {
                self.writable_roots.push(d);
            }
        }
        self
    }

    /// The directories writable besides the workspace under workspace-write.
    pub fn writable_roots(&self) -> &[PathBuf] {
        &self.writable_roots
    }

    /// Protects `paths` too (relative ones in each call's workspace root). Default: none
    /// beyond [`protected`]'s.
    pub fn with_protected(mut self, paths: impl IntoIterator<Item = PathBuf>) -> PolicyService {
        self.protect.extend(paths);
        self
    }

    /// Denies reading `patterns` too (absolute; see [`deny_read`]). Default:
    /// [`deny_read::defaults`] only.
    pub fn with_deny_read(mut self, patterns: impl IntoIterator<Item = PathBuf>) -> PolicyService {
        for p in patterns {
            if !self.deny_read.contains(&p) {
                self.deny_read.push(p);
            }
        }
        self
    }

    /// Keeps `patterns` readable in the closed homes too (absolute; see [`deny_read`]).
    /// Default: [`deny_read::read_allow_defaults`] only.
    pub fn with_read_allow(mut self, patterns: impl IntoIterator<Item = PathBuf>) -> PolicyService {
        for p in patterns {
            if !self.read_allow.contains(&p) {
                self.read_allow.push(p);
            }
        }
        self
    }

    /// What stays readable in the closed homes besides the roots.
    pub fn read_allow(&self) -> &[PathBuf] {
        &self.read_allow
    }

    /// Tells `listener` the text of every finding the check after a call could not set
    /// aside, as the user should read it: the process's stderr, a client's log. The model
    /// hears of it in the call's result; the user must not depend on the model to pass it
    /// on.
    pub fn on_unsettled(&self, listener: UnsettledListener) {
        self.unsettled
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(listener);
    }

    /// Tells every listener `text` (see [`on_unsettled`](Self::on_unsettled)).
    pub(crate) fn tell_unsettled(&self, text: &str) {
        let listeners = self
            .unsettled
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for l in listeners {
            l(text);
        }
    }

    /// Every read-denial pattern in force (the defaults and the configured ones).
    pub fn deny_read(&self) -> &[PathBuf] {
        &self.deny_read
    }

    /// The deployment default mode.
    pub fn default_mode(&self) -> SandboxMode {
        self.default_mode
    }

    /// The session's own mode (its last `sandbox/mode` event), if it set one.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn override_of(&self, session: &dyn Journal) -> Option<SandboxMode> {
        let e = session.last_of(EventKind::SandboxMode).await?;
        match e.record() {
            Ok(Record::SandboxMode { mode }) => mode.whole()?.parse().ok(),
            _ => None,
        }
    }

    /// The workspace root of a call whose session works in `cwd`, or of a call without a
    /// session (`None`): the one rule every tool and every policy uses. A session's `cwd`
    /// as its log recorded it (resolved through its links when the session was created),
    /// taken as it is and never through a link again: [`check_root`](Self::check_root)
    /// refuses a call once it leads elsewhere, and a link swapped in later (while the call
    /// waits for an approval, say) moves neither the policy nor the tools' paths. Else
    /// the service's fallback root.
    pub fn workspace_root(&self, cwd: Option<&Path>) -> PathBuf {
        cwd.map_or_else(|| self.fallback_root.clone(), dsh_core::path::fold_dots)
    }

    /// `SANDBOX_UNAVAILABLE` when a session's recorded working directory `cwd` (resolved
    /// through its links when the session was created) no longer leads to itself: the
    /// directory was moved, or a link on its path replaced (by a command of the session,
    /// say), and following it would move what the session's commands and file tools may
    /// read and write. It holds across processes: the record is the session log's.
    ///
    /// # Errors
    /// As above; nothing of the call runs.
    pub fn check_root(&self, cwd: &Path) -> Result<(), HarnessError> {
        let now = dsh_core::path::root_of(cwd);
        if now == cwd {
            return Ok(());
        }
        Err(HarnessError::new(
            ErrorCode::SandboxUnavailable,
            format!(
                "the session's workspace root {} now leads to {}: the directory was moved, \
                 or a link on its path replaced. dsh will not follow it, so nothing ran. Put \
                 the directory back, or start dsh again in the directory you mean.",
                cwd.display(),
                now.display()
            ),
        ))
    }

    /// The policy a call's reads are fenced by: the session's mode (else the default), its
    /// workspace root ([`workspace_root`](Self::workspace_root) of `session` = (journal,
    /// its cwd)), the read denials, and under workspace-write the writable roots. Never
    /// decided (nothing is walked): it confines no command and lets the file tools write
    /// nothing under workspace-write (fail closed); it is for reading.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn read_policy(&self, session: Option<(&dyn Journal, &Path)>) -> SandboxPolicy {
        let session_mode = match session {
            Some((j, _)) => self.override_of(j).await,
            None => None,
        };
        let mode = session_mode.unwrap_or(self.default_mode);
        let root = self.workspace_root(session.map(|(_, cwd)| cwd));
        let policy = SandboxPolicy::bare(mode, &root)
            .with_deny_read(self.deny_read.iter().cloned())
            .with_homes_closed(self.read_allow.iter().cloned())
            .with_on_partial(self.on_partial)
            .with_network(self.network);
        if mode == SandboxMode::WorkspaceWrite {
            policy.with_writable_roots(self.writable_roots.iter().cloned())
        } else {
            policy
        }
    }

    /// The policy of a command run outside the tools' pipeline (`dsh exec`), with the check
    /// after it armed: `explicit` mode, else the session's, else the default, decided as
    /// for a tool's call; its workspace root is [`workspace_root`](Self::workspace_root)
    /// of `session` = (journal, its cwd). The check runs when the [`ArmedPolicy`] is
    /// closed, or when it is dropped unclosed, so a caller cannot forget it.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is armed until it returns. A walk of a root, or the recheck of
    /// what earlier checks left, already on a blocking thread runs to its end (the recheck
    /// may still set files aside).
    pub async fn armed_policy(
        &self,
        session: Option<(&dyn Journal, &Path)>,
        explicit: Option<SandboxMode>,
    ) -> ArmedPolicy<'_> {
        ArmedPolicy {
            service: self,
            policy: self.policy_for(session, explicit).await,
            extra_roots: Vec::new(),
            closed: false,
        }
    }

    /// The policy of a call: `explicit` mode, else the session's, else the default; its
    /// workspace root is [`workspace_root`](Self::workspace_root) of `session` = (journal,
    /// its cwd). Unarmed: the caller arms the check after the call (the tools' write
    /// scope, [`ArmedPolicy`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it logs nothing. A walk of a root, or the recheck of what earlier
    /// checks left, already on a blocking thread runs to its end (the recheck may still set
    /// files aside).
    pub(crate) async fn policy_for(
        &self,
        session: Option<(&dyn Journal, &Path)>,
        explicit: Option<SandboxMode>,
    ) -> SandboxPolicy {
        let session_mode = match session {
            Some((j, _)) => self.override_of(j).await,
            None => None,
        };
        let mode = explicit.or(session_mode).unwrap_or(self.default_mode);
        let root = self.workspace_root(session.map(|(_, cwd)| cwd));
        // Protected paths matter only where something is writable.
        if mode != SandboxMode::WorkspaceWrite {
            let layout = WorkspaceLayout {
                complete: true,
                ..WorkspaceLayout::default()
            };
            return self.policy_with(mode, &root, layout);
        }
        let layout = self.layout_of(&root).await;
        let mut policy = self.policy_with(mode, &root, layout);
        for dir in &self.writable_roots {
            let layout = self.layout_of(dir).await;
            policy = policy.with_writable_root_layout(dir, layout);
        }
        // What earlier checks could not set aside is tried again here, where the policy is
        // decided (it may move files: a blocking thread).
        match tokio::runtime::Handle::try_current() {
            Ok(_) => {
                let again = policy.clone();
                match tokio::task::spawn_blocking(move || dsh_protect::decide(again)).await {
                    Ok(rechecked) => rechecked,
                    // Not known to be settled: refused, as what could not be set aside is.
                    Err(_) => {
                        let root = policy.workspace_root.clone();
                        policy.settled(vec![dsh_sandbox::Quarantined {
                            path: root,
                            moved_to: None,
                            what: "what earlier checks left here (the recheck failed)".into(),
                            set_aside: false,
                        }])
                    }
                }
            }
            Err(_) => dsh_protect::decide(policy),
        }
    }

    /// The check after a command under `policy` (workspace-write), in its workspace root
    /// and each configured writable root: what it made that the host's tools would run or
    /// read ([`protected::new_since`]), with the programs in it
    /// set aside ([`quarantine`](dsh_protect::quarantine::quarantine)); the next policy for that
    /// root protects what is left. `extra_roots`: other directories the command could
    /// write (the sandbox's temp dir). What could not be set aside makes later
    /// workspace-write commands in that root refused (a gap) until it is gone (see
    /// [`recheck`](dsh_protect::quarantine::recheck)).
    ///
    /// # Cancel safety
    /// Not cancel safe: once the check is on its blocking thread it runs to its end,
    /// setting aside what it finds, but the outcome is lost with the future; dropped before
    /// that (while the roots' layouts are taken), nothing is checked.
    pub(crate) async fn check(
        &self,
        policy: &SandboxPolicy,
        extra_roots: &[PathBuf],
    ) -> CheckOutcome {
        let mut layouts = Vec::new();
        for root in self.checked_roots(policy) {
            layouts.push((root.clone(), self.layout_of(root).await));
        }
        let work = {
            let (policy, extra_roots) = (policy.clone(), extra_roots.to_vec());
            move || dsh_protect::quarantine::check(&policy, layouts, &extra_roots)
        };
        let outcome = match tokio::runtime::Handle::try_current() {
            Ok(_) => tokio::task::spawn_blocking(work).await.unwrap_or_default(),
            Err(_) => work(),
        };
        self.news(outcome)
    }

    /// `outcome` less what an earlier check reported already, unless something in it
    /// was set aside now (that is news whatever the path).
    fn news(&self, mut outcome: CheckOutcome) -> CheckOutcome {
        let mut reported = self
            .reported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let quarantined = &outcome.quarantined;
        outcome.found.retain(|path| {
            let set_aside_now = quarantined.iter().any(|q| q.path.starts_with(path));
            let new = !reported.contains(path);
            if new && reported.len() < MAX_REPORTED {
                reported.insert(path.clone());
            }
            new || set_aside_now
        });
        outcome
    }

    /// [`check`](Self::check) on this thread, for a check that cannot wait for a runtime
    /// (an [`ArmedPolicy`] dropped unclosed).
    fn check_here(&self, policy: &SandboxPolicy, extra_roots: &[PathBuf]) -> CheckOutcome {
        let layouts = self
            .checked_roots(policy)
            .map(|root| (root.clone(), self.layout_now(root)))
            .collect();
        self.news(dsh_protect::quarantine::check(policy, layouts, extra_roots))
    }

    /// The roots the check after a command under `policy` looks at: its workspace root
    /// and the configured writable roots the policy holds.
    fn checked_roots<'p>(&'p self, policy: &'p SandboxPolicy) -> impl Iterator<Item = &'p PathBuf> {
        std::iter::once(&policy.workspace_root).chain(
            self.writable_roots
                .iter()
                .filter(|d| policy.writable_roots.contains(d)),
        )
    }

    /// The policy of `mode` for `root` (canonical) with `layout`.
    fn policy_with(
        &self,
        mode: SandboxMode,
        root: &Path,
        layout: WorkspaceLayout,
    ) -> SandboxPolicy {
        SandboxPolicy::bare(mode, root)
            .with_layout(root, layout)
            .with_protected(self.protect.iter().map(|p| root.join(p)))
            .with_deny_read(self.deny_read.iter().cloned())
            .with_homes_closed(self.read_allow.iter().cloned())
            .with_on_partial(self.on_partial)
            .with_network(self.network)
    }

    /// The layout of `root` from its watched walk, made on a blocking thread (the first
    /// one walks the whole root).
    async fn layout_of(&self, root: &Path) -> WorkspaceLayout {
        let (watches, root) = (self.watches.clone(), root.to_path_buf());
        let work = move || layout_in(&watches, &root);
        match tokio::runtime::Handle::try_current() {
            Ok(_) => match tokio::task::spawn_blocking(work).await {
                Ok(layout) => layout,
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // The runtime is shutting down: a layout that says it is incomplete, so
                // nothing runs on it unless the user accepts partial enforcement.
                Err(_) => WorkspaceLayout::default(),
            },
            Err(_) => work(),
        }
    }

    /// The layout of `root` on this thread (see [`layout_of`](Self::layout_of)).
    fn layout_now(&self, root: &Path) -> WorkspaceLayout {
        layout_in(&self.watches, root)
    }

    /// Sets the session's mode: appends one `sandbox/mode {mode}` event.
    ///
    /// # Errors
    /// The journal's errors.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped during the append, the `sandbox/mode` event may or may not
    /// be logged (see [`Journal::append`]).
    pub async fn set_mode(
        &self,
        session: &dyn Journal,
        mode: SandboxMode,
    ) -> Result<(), HarnessError> {
        session
            .append(Record::SandboxMode {
                mode: mode.as_str().into(),
            })
            .await
            .map(|_| ())
    }

    /// What a model is told of its sandbox at the start of a session (MCP's server
    /// instructions): the mode and what it allows, the workspace root, the writable roots,
    /// the network, what stays protected and unreadable, and how to ask for more. `root`
    /// is `None` where the workspace is not known yet (the client's roots decide it).
    pub fn brief(
        mode: SandboxMode,
        network: Network,
        root: Option<&Path>,
        writable_roots: &[PathBuf],
    ) -> String {
        let quoted = |p: &Path| Value::String(p.to_string_lossy().into_owned()).to_string();
        let mut lines = vec![format!(
            "dsh runs your commands and file operations in a sandbox the kernel enforces. This \
             session's sandbox mode is {mode}: {}.",
            mode.meaning()
        )];
        lines.push(match root {
            Some(r) => format!("Workspace root: {}.", quoted(r)),
            None => "Workspace root: the client's first root, else the directory dsh was \
                     started in."
                .to_owned(),
        });
        if mode == SandboxMode::WorkspaceWrite {
            let mut writable = vec!["the workspace root".to_owned()];
            writable.extend(writable_roots.iter().map(|p| quoted(p)));
            writable.push("a private temporary directory ($TMPDIR)".to_owned());
            lines.push(format!(
                "Writable: {}. Protected (read-only even there): git hooks and config, \
                 editor, agent and tool settings (.vscode/, .claude/, .cargo/, .npmrc, …), \
                 .dsh/ and shell rc files; a repository or hooks a command makes is set \
                 aside after the call.",
                writable.join(", ")
            ));
        }
        if mode.is_confined() {
            lines.push(format!(
                "Network: {}. Credential stores (~/.ssh, ~/.aws, tokens, …) are unreadable.",
                match network {
                    Network::Deny => "denied (no socket reaches outside the sandbox)",
                    Network::Allow => "allowed",
                }
            ));
        }
        lines.push(
            "Check the `[exit code: N]` marker of every bash result. A sandbox denial shows as \
             `[sandbox: file access denied under <mode> mode]`; do not work around it. The \
             line after a denial says how to get a wider mode: with `sandbox_permissions` and \
             a `justification` where the user can be asked, else by asking the user to restart \
             dsh with a wider `--mode`. Results say when the session's mode changes."
                .to_owned(),
        );
        lines.join("\n")
    }

    /// The paragraph a system prompt carries about the policy. Byte-stable: host temp
    /// paths are never named.
    pub fn context_text(policy: &SandboxPolicy) -> String {
        let mode = policy.mode;
        match mode {
            SandboxMode::ReadOnly => format!(
                "Current DSH file policy: {mode}. Sandbox-enforced operations cannot modify \
                 files in this mode. Do not refuse in advance: try the tool, and follow its \
                 denial and escalation guidance if it is refused."
            ),
            SandboxMode::WorkspaceWrite => format!(
                "Current DSH file policy: {mode}. Sandbox-enforced operations may modify files \
                 under the session workspace {}. A private temporary directory ($TMPDIR) is \
                 writable too.",
                Value::String(policy.workspace_root.to_string_lossy().into_owned())
            ),
            SandboxMode::DangerFullAccess => format!(
                "Current DSH file policy: {mode}. The file sandbox does not restrict modifications."
            ),
        }
    }
}

/// The layout of `root` from its watched walk in `watches` (the first one walks the whole
/// root). Blocking.
fn layout_in(watches: &Mutex<HashMap<PathBuf, TreeWatch>>, root: &Path) -> WorkspaceLayout {
    let mut map = watches
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let watch = map
        .entry(root.to_path_buf())
        .or_insert_with(|| TreeWatch::new(root));
    protected::for_root(root, watch.walk())
}

/// A command's policy with the check after it armed
/// ([`PolicyService::armed_policy`]): [`close`](Self::close) runs the check once the
/// command's whole tree is gone; dropped unclosed, it runs the check as it drops (blocking
/// that thread), so no path out of the caller leaves a command's writes unchecked. Under
/// a mode that cannot write there is nothing to check.
#[must_use = "the check after the command runs when the armed policy is closed or dropped"]
#[derive(Debug)]
pub struct ArmedPolicy<'s> {
    service: &'s PolicyService,
    policy: SandboxPolicy,
    extra_roots: Vec<PathBuf>,
    closed: bool,
}

impl ArmedPolicy<'_> {
    /// The policy the command runs under.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    /// Adds `roots`, other directories the command could write (the sandbox's temp dir),
    /// to what the check looks at.
    pub fn also_check(&mut self, roots: impl IntoIterator<Item = PathBuf>) {
        self.extra_roots.extend(roots);
    }

    /// Runs the check after the command: what it made that the host's tools would run or
    /// read, with the programs in it set aside ([`CheckOutcome`]); empty when the policy
    /// cannot write.
    ///
    /// # Cancel safety
    /// Cancel safe in that the check runs: dropped before the check began, the drop runs
    /// it; once on its blocking thread it runs to its end (and the drop runs it again).
    /// The outcome is lost with the future.
    pub async fn close(mut self) -> CheckOutcome {
        if self.policy.mode != SandboxMode::WorkspaceWrite {
            self.closed = true;
            return CheckOutcome::default();
        }
        let outcome = self.service.check(&self.policy, &self.extra_roots).await;
        // Closed only once the check ran: dropped before, the drop runs it.
        self.closed = true;
        outcome
    }
}

impl Drop for ArmedPolicy<'_> {
    fn drop(&mut self) {
        if !self.closed && self.policy.mode == SandboxMode::WorkspaceWrite {
            self.closed = true;
            let _ = self.service.check_here(&self.policy, &self.extra_roots);
        }
    }
}
