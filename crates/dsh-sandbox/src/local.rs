//! [`LocalSandbox`]: the runners of this machine, probed once, chosen per call.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use dsh_core::{ErrorCode, HarnessError};

mod area;
mod carve;
mod gaps;
mod probe;

use area::Area;
use carve::{
    add_anchors, bwrap_temp_inside, config_without_worktree, drop_self_bind, exclude_placeholders,
    first_missing, placeholder_kind, strictly_beneath, with_carves, with_denied,
};
use gaps::{
    partial_refused, policy_gaps, symlinked_protected_path, undecided_refused, unsettled_refused,
};
use probe::{find_program, probe_bwrap};

use crate::bwrap::{self, Carve};
use crate::child::ChildRestrictions;
use crate::landlock::{self, Ruleset, RulesetSpec};
use crate::placeholder::{Kind, Placeholders};
use crate::{
    deny_read, sandbox_unavailable, seatbelt, seccomp, Confinement, Enforcement, Network,
    OnPartial, Runner, Sandbox, SandboxMode, SandboxPolicy,
};

/// Default bound on one runner probe.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_millis(5000);

/// The fd number bubblewrap reads the seccomp program from.
const BWRAP_SECCOMP_FD: i32 = 3;

/// The sandbox seam on this machine.
///
/// Runners are probed at the first call that needs them, once per provider (the verdict,
/// "unavailable" included, is kept for the provider's life): bubblewrap by running it on
/// `true` with every feature a call uses (bounded by the probe timeout), Landlock by asking
/// the kernel for its ABI. A forced bubblewrap ([`force_runner`](Self::force_runner)) is
/// not probed: if it cannot work, its own failure at run time is the fail-closed answer. Each call then gets the fastest runner that enforces its policy
/// in full, Landlock before bubblewrap; failing that, the first that enforces it in part;
/// failing that, `SANDBOX_UNAVAILABLE`.
///
/// The provider owns a private directory (0700, removed on drop): the temp directory
/// confined commands get as `TMPDIR` (writable under workspace-write, and mounted at
/// `/tmp` by bubblewrap), and the empty read-only placeholders bubblewrap mounts over
/// missing protected paths. Placeholders are removed again when the last command using
/// them ends.
///
/// # Blocking
/// The first `confine` may block for up to the probe timeout (bubblewrap's probe).
pub struct LocalSandbox {
    bwrap_program: Option<PathBuf>,
    landlock_enabled: bool,
    forced: Option<Runner>,
    probe_timeout: Duration,
    area_parent: Option<PathBuf>,
    /// The operator's runner command and its failure signatures.
    operator: Option<(Vec<OsString>, Vec<String>)>,
    bwrap: OnceLock<Result<PathBuf, String>>,
    landlock: OnceLock<Result<u32, String>>,
    area: OnceLock<Result<Area, String>>,
}

/// A runner and whether it works here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerStatus {
    /// The runner.
    pub runner: Runner,
    /// What was found (`/usr/bin/bwrap`, `ABI 7`), or why it cannot be used and how to
    /// fix that.
    pub available: Result<String, String>,
}

impl Default for LocalSandbox {
    fn default() -> Self {
        LocalSandbox::new()
    }
}

impl std::fmt::Debug for LocalSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSandbox")
            .field("forced", &self.forced)
            .finish_non_exhaustive()
    }
}

impl LocalSandbox {
    /// A provider with every runner of this platform enabled, `bwrap` looked up on `PATH`,
    /// the default probe timeout, and its private directory under `/var/tmp` (else the
    /// system temp directory).
    pub fn new() -> LocalSandbox {
        LocalSandbox {
            bwrap_program: Some(PathBuf::from("bwrap")),
            landlock_enabled: true,
            forced: None,
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
            area_parent: None,
            operator: None,
            bwrap: OnceLock::new(),
            landlock: OnceLock::new(),
            area: OnceLock::new(),
        }
    }

    /// Uses this bubblewrap program (a path, or a name looked up on `PATH`).
    pub fn bwrap_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.bwrap_program = Some(program.into());
        self
    }

    /// Never uses bubblewrap.
    pub fn without_bwrap(mut self) -> Self {
        self.bwrap_program = None;
        self
    }

    /// Never uses Landlock.
    pub fn without_landlock(mut self) -> Self {
        self.landlock_enabled = false;
        self
    }

    /// Uses only `runner`; a call it cannot serve is `SANDBOX_UNAVAILABLE`.
    pub fn force_runner(mut self, runner: Runner) -> Self {
        self.forced = Some(runner);
        self
    }

    /// Bounds each runner probe. Default: 5000 ms.
    ///
    /// # Errors
    /// `CONFIG_INVALID` for zero.
    pub fn probe_timeout(mut self, timeout: Duration) -> Result<Self, HarnessError> {
        if timeout.is_zero() {
            return Err(HarnessError::config_invalid(
                "sandbox: probe_timeout must be a positive duration",
            ));
        }
        self.probe_timeout = timeout;
        Ok(self)
    }

    /// Confines every call with `command` instead of the platform's runners: it is run as
    /// `COMMAND... BWRAP-ARGS... -- ARGV...` with bubblewrap's arguments for the policy
    /// (a wrapper that adds its own, or runs bwrap elsewhere). It is never probed and is
    /// asserted to enforce fully; a stderr line containing one of `failure_signatures`
    /// (case-insensitively) after a non-zero exit means the runner itself failed.
    ///
    /// # Errors
    /// `CONFIG_INVALID`: a command without signatures, signatures without a command, or a
    /// blank or multi-line signature.
    pub fn operator_runner(
        mut self,
        command: Vec<OsString>,
        failure_signatures: Vec<String>,
    ) -> Result<Self, HarnessError> {
        match (command.is_empty(), failure_signatures.is_empty()) {
            (true, false) => {
                return Err(HarnessError::config_invalid(
                    "sandbox: runner failure signatures require a runner command",
                ))
            }
            (false, true) => {
                return Err(HarnessError::config_invalid(
                    "sandbox: a runner command requires at least one runner failure signature",
                ))
            }
            (true, true) => {
                self.operator = None;
                return Ok(self);
            }
            (false, false) => {}
        }
        if failure_signatures
            .iter()
            .any(|s| s.trim().is_empty() || s.contains('\n') || s.contains('\r'))
        {
            return Err(HarnessError::config_invalid(
                "sandbox: runner failure signatures must be non-empty single-line strings",
            ));
        }
        self.operator = Some((command, failure_signatures));
        Ok(self)
    }

    /// Makes the private directory under `parent`.
    pub fn area_parent(mut self, parent: impl Into<PathBuf>) -> Self {
        self.area_parent = Some(parent.into());
        self
    }

    /// The private temp directory confined commands get as `TMPDIR` under
    /// workspace-write, made now if it is not yet (for the file tools, which allow it too).
    ///
    /// # Errors
    /// `IO_FAILED` when it cannot be made.
    pub fn private_temp_dir(&self) -> Result<PathBuf, HarnessError> {
        Ok(self.area()?.temp.clone())
    }

    /// Every runner of this platform and whether it works here (probing what was not yet).
    pub fn runners(&self) -> Vec<RunnerStatus> {
        let mut out = Vec::new();
        if cfg!(target_os = "linux") {
            out.push(RunnerStatus {
                runner: Runner::Landlock,
                available: self.landlock_abi().map(|abi| format!("ABI {abi}")),
            });
            out.push(RunnerStatus {
                runner: Runner::Bwrap,
                available: self.bwrap_path().map(|p| p.display().to_string()),
            });
        } else if cfg!(target_os = "macos") {
            out.push(RunnerStatus {
                runner: Runner::Seatbelt,
                available: Ok("/usr/bin/sandbox-exec".into()),
            });
        }
        out
    }

    /// The runner a call with `policy` would get, and how completely it enforces it.
    ///
    /// # Errors
    /// `SANDBOX_UNAVAILABLE` when no runner works (or the forced one does not).
    pub fn choose(&self, policy: &SandboxPolicy) -> Result<(Runner, Enforcement), HarnessError> {
        self.choose_with(policy, &deny_read::expand(&policy.deny_read))
    }

    /// [`choose`](Self::choose) with the paths `policy` denies for reading, expanded.
    fn choose_with(
        &self,
        policy: &SandboxPolicy,
        denied: &[PathBuf],
    ) -> Result<(Runner, Enforcement), HarnessError> {
        let mut why_not = Vec::new();
        // What no runner enforces, looked at once.
        let common = policy_gaps(policy, denied);
        // Among runners that enforce only in part, the one with the fewest gaps (the
        // earlier, faster one on a tie).
        let mut partial: Option<(Runner, Vec<String>)> = None;
        for runner in self.candidates() {
            match self.gaps(runner, policy, &common, denied) {
                Ok(gaps) if gaps.is_empty() => return Ok((runner, Enforcement::Full)),
                Ok(gaps) => {
                    if partial
                        .as_ref()
                        .is_none_or(|(_, best)| gaps.len() < best.len())
                    {
                        partial = Some((runner, gaps));
                    }
                }
                Err(why) => why_not.push(format!("{runner}: {why}")),
            }
        }
        partial
            .map(|(runner, gaps)| (runner, Enforcement::Partial(gaps.join("; "))))
            .ok_or_else(|| sandbox_unavailable(policy.mode, &why_not.join("; "), None))
    }

    fn candidates(&self) -> Vec<Runner> {
        if self.operator.is_some() {
            return vec![Runner::Operator];
        }
        if let Some(forced) = self.forced {
            return vec![forced];
        }
        if cfg!(target_os = "macos") {
            vec![Runner::Seatbelt]
        } else if cfg!(target_os = "linux") {
            vec![Runner::Landlock, Runner::Bwrap]
        } else {
            Vec::new()
        }
    }

    /// What `runner` would leave unenforced of `policy` (nothing: full enforcement), or
    /// why it cannot run at all; `denied` as [`choose_with`](Self::choose_with).
    fn gaps(
        &self,
        runner: Runner,
        policy: &SandboxPolicy,
        common: &[String],
        denied: &[PathBuf],
    ) -> Result<Vec<String>, String> {
        let mut gaps = common.to_vec();
        match runner {
            Runner::Landlock => {
                let abi = self.landlock_abi()?;
                if let Some(gap) = landlock::gaps(abi) {
                    gaps.push(gap);
                }
                if policy.mode == SandboxMode::WorkspaceWrite {
                    if !policy.protected.is_empty() {
                        gaps.push(
                            "Landlock cannot keep protected paths (.git/hooks, .git/config, rc files…) \
                             read-only or uncreatable inside a writable root (bubblewrap can)"
                                .into(),
                        );
                    }
                    gaps.push(
                        "Landlock cannot stop chmod, chown, utime or xattr changes to files \
                         outside the writable roots (bubblewrap's read-only mounts can)"
                            .into(),
                    );
                    let writable = policy.writable_dirs();
                    if let Some(d) = denied
                        .iter()
                        .find(|d| writable.iter().any(|w| d.starts_with(w)))
                    {
                        gaps.push(format!(
                            "Landlock cannot deny reading {} inside a writable root (bubblewrap can)",
                            d.display()
                        ));
                    }
                }
                if !seccomp::supported() {
                    gaps.push(
                        "no seccomp filter for this architecture: the network (when denied), \
                         file metadata, the user's keyrings and host IPC stay reachable"
                            .into(),
                    );
                }
            }
            Runner::Bwrap => {
                if self.forced == Some(Runner::Bwrap) {
                    // The sole candidate is not probed: its own refusal at run time is
                    // the fail-closed end (a runner failure, SANDBOX_UNAVAILABLE).
                    self.bwrap_program_path()?;
                } else {
                    self.bwrap_path()?;
                }
                if !seccomp::supported() {
                    gaps.push(
                        "no seccomp filter for this architecture: host Unix socket paths (when \
                         the network is denied) and the user's keyrings stay reachable"
                            .into(),
                    );
                }
                if let Some(link) = symlinked_protected_path(policy) {
                    gaps.push(format!(
                        "{} is a symlink: what it points to stays read-only, but the link \
                         itself can be replaced",
                        link.display()
                    ));
                }
            }
            Runner::Seatbelt => {
                if !cfg!(target_os = "macos") {
                    return Err("Seatbelt exists only on macOS".into());
                }
            }
            Runner::Operator => {
                if self.operator.is_none() {
                    return Err("no operator runner is configured".into());
                }
            }
        }
        Ok(gaps)
    }

    fn landlock_abi(&self) -> Result<u32, String> {
        if !self.landlock_enabled {
            return Err("disabled by configuration".into());
        }
        self.landlock
            .get_or_init(|| {
                if cfg!(target_os = "linux") {
                    landlock::abi()
                } else {
                    Err("Landlock exists only on Linux".into())
                }
            })
            .clone()
    }

    fn bwrap_path(&self) -> Result<PathBuf, String> {
        let Some(program) = &self.bwrap_program else {
            return Err("disabled by configuration".into());
        };
        self.bwrap
            .get_or_init(|| probe_bwrap(program, self.probe_timeout))
            .clone()
    }

    /// The bwrap program, resolved but not probed.
    fn bwrap_program_path(&self) -> Result<PathBuf, String> {
        if let Some(Ok(p)) = self.bwrap.get() {
            return Ok(p.clone());
        }
        let Some(program) = &self.bwrap_program else {
            return Err("disabled by configuration".into());
        };
        find_program(program).ok_or_else(|| {
            format!(
                "{} not found (install it: apt-get install bubblewrap)",
                program.display()
            )
        })
    }

    fn area(&self) -> Result<&Area, HarnessError> {
        self.area
            .get_or_init(|| Area::create(self.area_parent.as_deref()))
            .as_ref()
            .map_err(|e| HarnessError::new(ErrorCode::IoFailed, e.clone()))
    }

    /// The bwrap argv (without protected carve-outs, see [`with_carves`]) and what the
    /// child applies; `area` is the private directory under workspace-write.
    fn confine_bwrap(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
        area: Option<&Area>,
        home: &deny_read::HomeRule,
    ) -> Result<(Vec<OsString>, ChildRestrictions), HarnessError> {
        let program = if self.forced == Some(Runner::Bwrap) {
            self.bwrap_program_path()
        } else {
            self.bwrap_path()
        }
        .map_err(|why| sandbox_unavailable(policy.mode, &format!("bwrap: {why}"), None))?;
        self.bwrap_shape(&program, argv, policy, area, home)
    }

    /// bubblewrap's argv for `program` (without carve-outs) and the child's part: the
    /// seccomp program on its fd.
    fn bwrap_shape(
        &self,
        program: &Path,
        argv: &[OsString],
        policy: &SandboxPolicy,
        area: Option<&Area>,
        home: &deny_read::HomeRule,
    ) -> Result<(Vec<OsString>, ChildRestrictions), HarnessError> {
        let mut inherit = Vec::new();
        let mut seccomp_fd = None;
        // Read-only mounts govern metadata, and bubblewrap unshares IPC; the network and
        // the keyrings are left to the filter.
        let denials = seccomp::Denials {
            network: policy.network == Network::Deny,
            metadata: false,
            keyrings: true,
            host_ipc: false,
            set_id_and_leases: true,
            terminal_ioctls: true,
            cgroup_moves: true,
        };
        if let Some(program) = seccomp::program(denials) {
            inherit.push((
                program_pipe(&seccomp::to_bytes(&program))?,
                BWRAP_SECCOMP_FD,
            ));
            seccomp_fd = Some(BWRAP_SECCOMP_FD);
        }
        // What a closed home shows: each allowed path at its own name, but what a
        // writable root binds anyway.
        let writable = policy.writable_dirs();
        let layout = bwrap::Layout {
            temp: area.map(|a| a.temp.clone()),
            seccomp_fd,
            carves: Vec::new(),
            homes: home.homes.clone(),
            home_dirs: deny_read::user_home_dirs()
                .into_iter()
                .filter(|d| home.homes.iter().any(|h| d.starts_with(h) && d != h))
                .collect(),
            home_binds: home
                .allowed
                .iter()
                .map(|(w, _)| w.clone())
                .filter(|w| !writable.iter().any(|d| w.starts_with(d)))
                .collect(),
        };
        let mut out = bwrap::argv(program, policy, &layout, argv);
        if let Some(area) = area {
            if bwrap_temp_inside(policy, area) != area.temp.as_path() {
                drop_self_bind(&mut out, &area.temp);
            }
        }
        let restrictions = ChildRestrictions {
            drop_capabilities: false,
            no_new_privs: true,
            landlock: None,
            seccomp: None,
            inherit,
        };
        Ok((out, restrictions))
    }

    /// The operator runner's argv: its command, bubblewrap's arguments, `--`, `argv`.
    fn confine_operator(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
        area: Option<&Area>,
        home: &deny_read::HomeRule,
    ) -> Result<(Vec<OsString>, ChildRestrictions), HarnessError> {
        let Some((command, _)) = &self.operator else {
            return Err(sandbox_unavailable(
                policy.mode,
                "no operator runner is configured",
                None,
            ));
        };
        let (bwrap_argv, restrictions) =
            self.bwrap_shape(Path::new(""), argv, policy, area, home)?;
        let mut out = command.clone();
        out.extend(bwrap_argv.into_iter().skip(1));
        Ok((out, restrictions))
    }

    /// The rules that say the runner failed: the operator's configured signatures, else
    /// the runner's own.
    fn failure_rules(&self, runner: Runner) -> Vec<crate::RunnerFailureRule> {
        match (&self.operator, runner) {
            (Some((_, signatures)), Runner::Operator) => vec![crate::RunnerFailureRule {
                allowed_exit_codes: None,
                fatal_signatures: signatures.clone(),
                informational_lines: Vec::new(),
            }],
            _ => runner.runner_failure_rules(),
        }
    }

    /// The read-only carve-outs for the protected paths under the writable dirs, with the
    /// placeholders they need held (see the `placeholder` module), and the anchors: every
    /// directory between a writable root and a carve-out, bound onto itself so it is a
    /// mount point that cannot be renamed or removed (which would carry the carve-outs
    /// away: `mv .git .git-old; mkdir .git` would otherwise make fresh, writable hooks).
    fn carves(
        &self,
        policy: &SandboxPolicy,
        area: &Area,
    ) -> (Vec<Carve>, Vec<PathBuf>, Placeholders) {
        let writable = policy.writable_dirs();
        let mut held = Placeholders::new();
        let mut carves: Vec<Carve> = Vec::new();
        let mut anchors: Vec<PathBuf> = Vec::new();
        for p in &policy.protected {
            let Some(root) = writable.iter().find(|w| strictly_beneath(p, w)) else {
                continue;
            };
            let at = first_missing(root, p).unwrap_or_else(|| p.clone());
            if carves.iter().any(|c| c.at == at) {
                continue;
            }
            add_anchors(&at, root, &mut anchors);
            if at == *p {
                if let Some(copy) = config_without_worktree(p, area, &mut held) {
                    carves.push(Carve { at, source: copy });
                    continue;
                }
            }
            let missing = std::fs::symlink_metadata(&at).is_err();
            let kind = placeholder_kind(&at, p);
            // Made (or joined) and locked for as long as the command runs, so that no
            // other dsh process removes it meanwhile; where that cannot be done safely
            // (a symlink on the way, no openat2), bubblewrap makes the mount point.
            let source = match held.ensure(&at, kind) {
                Ok(()) => at.clone(),
                Err(_) if !missing => at.clone(),
                Err(_) if kind == Kind::Dir => area.empty_dir.clone(),
                Err(_) => area.empty_file.clone(),
            };
            carves.push(Carve { at, source });
        }
        // Outer directories first, so each bind lands on the one before it.
        anchors.sort_by_key(|a| a.components().count());
        (carves, anchors, held)
    }

    fn confine_landlock(
        &self,
        policy: &SandboxPolicy,
        area: Option<&Area>,
        denied: &[PathBuf],
        home: &deny_read::HomeRule,
    ) -> Result<ChildRestrictions, HarnessError> {
        let abi = self
            .landlock_abi()
            .map_err(|why| sandbox_unavailable(policy.mode, &format!("landlock: {why}"), None))?;
        let dirs = policy.writable_dirs();
        let mut writable: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        if let Some(area) = area {
            writable.push(&area.temp);
        }
        // A root that does not exist grants nothing (rather than failing the call).
        writable.retain(|p| p.exists());
        let deny_network = policy.network == Network::Deny;
        // The homes, and `/dev` but for the devices every program uses: no other terminal.
        let mut closed = home.homes.clone();
        closed.push(PathBuf::from("/dev"));
        let mut open: Vec<PathBuf> = home.allowed.iter().map(|(_, c)| c.clone()).collect();
        open.extend(
            crate::landlock::DEVICES
                .iter()
                .map(PathBuf::from)
                .filter(|d| d.exists()),
        );
        let ruleset = Ruleset::build(
            abi,
            &RulesetSpec {
                writable,
                deny_network,
                // A denied path a closed home hides is not granted anyway: no grants need
                // to go around it.
                deny_read: denied
                    .iter()
                    .filter(|d| !home.hides(d))
                    .map(PathBuf::as_path)
                    .collect(),
                deny_identities_only: denied
                    .iter()
                    .filter(|d| home.hides(d))
                    .map(PathBuf::as_path)
                    .collect(),
                closed: closed.iter().map(PathBuf::as_path).collect(),
                open: open.iter().map(PathBuf::as_path).collect(),
            },
        )
        .map_err(|e| {
            sandbox_unavailable(
                policy.mode,
                &format!("landlock: cannot build the ruleset: {e}"),
                None,
            )
        })?;
        Ok(ChildRestrictions {
            drop_capabilities: true,
            no_new_privs: true,
            landlock: Some(ruleset.into_fd()),
            // Landlock governs neither metadata, nor keyrings, nor IPC (see `seccomp`).
            // Under workspace-write metadata changes stay allowed (the workspace needs
            // them), which `enforcement` reports.
            seccomp: seccomp::program(seccomp::Denials {
                network: deny_network,
                metadata: policy.mode == SandboxMode::ReadOnly,
                keyrings: true,
                host_ipc: true,
                set_id_and_leases: true,
                terminal_ioctls: true,
                cgroup_moves: true,
            })
            .map(Vec::into_boxed_slice),
            inherit: Vec::new(),
        })
    }
}

impl Sandbox for LocalSandbox {
    fn confine(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, HarnessError> {
        self.confine_for(argv, policy)
    }

    fn confine_on_terminal(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, HarnessError> {
        // The terminal is the command's controlling terminal: the filter (as for every
        // command) refuses the ioctls that reach past its own input (TIOCSTI, line
        // disciplines, the console), as bubblewrap's manual asks of anyone dropping
        // `--new-session`.
        let mut c = self.confine_for(argv, policy)?;
        if matches!(c.runner, Runner::Bwrap | Runner::Operator) {
            crate::bwrap::keep_session(&mut c.argv);
        }
        Ok(c)
    }

    fn temp_dir(&self) -> Option<PathBuf> {
        self.area
            .get()
            .and_then(|a| a.as_ref().ok())
            .map(|a| a.temp.clone())
    }
}

impl LocalSandbox {
    /// [`Sandbox::confine`].
    fn confine_for(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, HarnessError> {
        if !policy.mode.is_confined() {
            return Err(HarnessError::invalid_argument(
                "danger-full-access is never confined: spawn the command directly",
            ));
        }
        if argv.is_empty() {
            return Err(HarnessError::invalid_argument(
                "the argv to confine is empty",
            ));
        }
        // A workspace-write policy nobody decided has protected nothing yet.
        if policy.mode == SandboxMode::WorkspaceWrite && policy.unsettled.is_none() {
            return Err(undecided_refused());
        }
        let mut places = policy.writable_dirs();
        places.push(policy.workspace_root.clone());
        let denied = match deny_read::expand_unless_planted(&policy.deny_read, &places) {
            Ok(denied) => denied,
            Err((link, target)) => {
                return Err(HarnessError::new(
                    ErrorCode::SandboxUnavailable,
                    format!(
                        "{} is denied for reading and is (or lies behind) a link to {}, in a \
                     directory a command can write: dsh will not hide {} on the word of a \
                     link a command could have made. Remove the link, or, if it is yours, \
                     deny {} itself (deny_read in ~/.config/dsh/config.toml).",
                        link.display(),
                        target.display(),
                        target.display(),
                        target.display()
                    ),
                ))
            }
        };
        let home = deny_read::HomeRule::new(
            &policy.closed_dirs,
            &policy.read_allow,
            &policy.readable_roots(),
            &denied,
        );
        let (runner, enforcement) = self.choose_with(policy, &denied)?;
        if let (Enforcement::Partial(why), OnPartial::Refuse) = (&enforcement, policy.on_partial) {
            return Err(partial_refused(policy.mode, why));
        }
        if policy.mode == SandboxMode::WorkspaceWrite {
            // What earlier checks could not set aside, as found when the policy was
            // decided: a program the host would run, whatever partial enforcement the user
            // accepts.
            if let Some(left) = policy.unsettled.as_ref().filter(|l| !l.is_empty()) {
                return Err(unsettled_refused(left));
            }
        }
        // The private directory: the temp dir under workspace-write; under read-only only
        // the empty stand-ins bubblewrap mounts over denied paths need it.
        let area = match policy.mode {
            SandboxMode::WorkspaceWrite => Some(self.area()?),
            _ if !denied.is_empty() && matches!(runner, Runner::Bwrap | Runner::Operator) => {
                Some(self.area()?)
            }
            _ => None,
        };
        let temp_area = area.filter(|_| policy.mode == SandboxMode::WorkspaceWrite);
        let (argv, restrictions, placeholders) = match runner {
            Runner::Landlock => (
                argv.to_vec(),
                Some(self.confine_landlock(policy, temp_area, &denied, &home)?),
                None,
            ),
            Runner::Bwrap | Runner::Operator => {
                let (mut a, r) = if runner == Runner::Bwrap {
                    self.confine_bwrap(argv, policy, temp_area, &home)?
                } else {
                    self.confine_operator(argv, policy, temp_area, &home)?
                };
                let mut held = None;
                if let Some(area) = temp_area {
                    let (mut carves, mut anchors, mut guard) = self.carves(policy, area);
                    for (root, carve) in exclude_placeholders(policy, &mut guard, area) {
                        // `.git/info` moved aside and a fresh `exclude` made in its place
                        // must not hide planted files from the host's `git status`.
                        add_anchors(&carve.at, &root, &mut anchors);
                        carves.push(carve);
                    }
                    // A folder above a denied path renamed (`mv gh gh2`) must not let the
                    // next command read the file under its new name.
                    let roots = policy.writable_dirs();
                    for d in &denied {
                        for root in &roots {
                            if strictly_beneath(d, root) {
                                add_anchors(d, root, &mut anchors);
                            }
                        }
                    }
                    // A root nested in another (the workspace in a configured root, one
                    // configured root in another) must not be carried away by renaming a
                    // directory above it in the outer one, with a trusted workspace's config,
                    // or a link, planted in its place.
                    for inner in &roots {
                        for outer in &roots {
                            if strictly_beneath(inner, outer) {
                                add_anchors(&inner.join("x"), outer, &mut anchors);
                            }
                        }
                    }
                    anchors.sort_by_key(|a| a.components().count());
                    a = with_carves(a, &anchors, carves);
                    held = Some(guard);
                }
                if let Some(area) = area {
                    // A denied path in a closed home, or in the host's `/tmp` where the
                    // private temp directory is mounted over it, is not there to cover.
                    let private_tmp = temp_area
                        .is_some_and(|t| bwrap_temp_inside(policy, t) == Path::new("/tmp"));
                    let visible: Vec<PathBuf> = denied
                        .iter()
                        .filter(|d| !(home.hides(d) || private_tmp && d.starts_with("/tmp")))
                        .cloned()
                        .collect();
                    a = with_denied(a, &visible, area);
                }
                (a, Some(r), held)
            }
            Runner::Seatbelt => (
                seatbelt::argv(
                    policy,
                    temp_area.map(|a| a.temp.as_path()),
                    &denied,
                    &home,
                    argv,
                ),
                None,
                None,
            ),
        };
        let area = temp_area;
        let env = area
            .map(|area| {
                let inside = match runner {
                    Runner::Bwrap | Runner::Operator => bwrap_temp_inside(policy, area),
                    _ => area.temp.as_path(),
                };
                vec![("TMPDIR".into(), inside.as_os_str().to_owned())]
            })
            .unwrap_or_default();
        Ok(Confinement {
            argv,
            env,
            restrictions: restrictions.map(Arc::new),
            enforcement,
            runner,
            denial_signatures: runner.denial_signatures(),
            bounds_tree: runner == Runner::Bwrap,
            runner_failure_rules: self.failure_rules(runner),
            placeholders,
        })
    }
}

/// A pipe holding `bytes`, its write end closed: the read end yields them, then EOF.
fn program_pipe(bytes: &[u8]) -> Result<OwnedFd, HarnessError> {
    let mut fds = [0; 2];
    // SAFETY: a two-int array for pipe2.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(HarnessError::new(
            ErrorCode::IoFailed,
            "cannot make a pipe for the seccomp program",
        )
        .with_source(std::io::Error::last_os_error()));
    }
    // SAFETY: both fds were just made and are ours.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut w = std::fs::File::from(w);
    // The program is a few hundred bytes: far below the pipe's capacity.
    w.write_all(bytes).map_err(|e| {
        HarnessError::new(ErrorCode::IoFailed, "cannot write the seccomp program").with_source(e)
    })?;
    Ok(r)
}
