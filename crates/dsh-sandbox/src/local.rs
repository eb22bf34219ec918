//! [`LocalSandbox`]: the runners of this machine, probed once, chosen per call.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dsh_core::{ErrorCode, HarnessError};

use crate::bwrap::{self, Carve};
use crate::child::ChildRestrictions;
use crate::landlock::{self, Ruleset, RulesetSpec};
use crate::placeholder::{Kind, Placeholders};
use crate::protected::DIRECTORY_NAMES;
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
        resolve_program(program).ok_or_else(|| {
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
    ) -> Result<(Vec<OsString>, ChildRestrictions), HarnessError> {
        let program = if self.forced == Some(Runner::Bwrap) {
            self.bwrap_program_path()
        } else {
            self.bwrap_path()
        }
        .map_err(|why| sandbox_unavailable(policy.mode, &format!("bwrap: {why}"), None))?;
        self.bwrap_shape(&program, argv, policy, area)
    }

    /// bubblewrap's argv for `program` (without carve-outs) and the child's part: the
    /// seccomp program on its fd.
    fn bwrap_shape(
        &self,
        program: &Path,
        argv: &[OsString],
        policy: &SandboxPolicy,
        area: Option<&Area>,
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
        };
        if let Some(program) = seccomp::program(denials) {
            inherit.push((
                program_pipe(&seccomp::to_bytes(&program))?,
                BWRAP_SECCOMP_FD,
            ));
            seccomp_fd = Some(BWRAP_SECCOMP_FD);
        }
        let layout = bwrap::Layout {
            temp: area.map(|a| a.temp.clone()),
            seccomp_fd,
            carves: Vec::new(),
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
    ) -> Result<(Vec<OsString>, ChildRestrictions), HarnessError> {
        let Some((command, _)) = &self.operator else {
            return Err(sandbox_unavailable(
                policy.mode,
                "no operator runner is configured",
                None,
            ));
        };
        let (bwrap_argv, restrictions) = self.bwrap_shape(Path::new(""), argv, policy, area)?;
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
        let ruleset = Ruleset::build(
            abi,
            &RulesetSpec {
                writable,
                deny_network,
                deny_read: denied.iter().map(PathBuf::as_path).collect(),
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
        let (runner, enforcement) = self.choose_with(policy, &denied)?;
        if let (Enforcement::Partial(why), OnPartial::Refuse) = (&enforcement, policy.on_partial) {
            return Err(partial_refused(policy.mode, why));
        }
        if policy.mode == SandboxMode::WorkspaceWrite {
            // What earlier checks could not set aside, tried again: what remains is a
            // program the host would run, whatever partial enforcement the user accepts.
            let left = crate::quarantine::recheck(policy);
            if !left.is_empty() {
                return Err(unsettled_refused(&left));
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
                Some(self.confine_landlock(policy, temp_area, &denied)?),
                None,
            ),
            Runner::Bwrap | Runner::Operator => {
                let (mut a, r) = if runner == Runner::Bwrap {
                    self.confine_bwrap(argv, policy, temp_area)?
                } else {
                    self.confine_operator(argv, policy, temp_area)?
                };
                let mut held = None;
                if let Some(area) = temp_area {
                    let (mut carves, mut anchors, mut guard) = self.carves(policy, area);
                    for (root, carve) in exclude_placeholders(policy, &mut guard, area) {
                        // Regression: a review moved `.git/info` aside and made a fresh
                        // `exclude` that hid planted files from the host's `git status`.
                        add_anchors(&carve.at, &root, &mut anchors);
                        carves.push(carve);
                    }
                    // Regression: a third review renamed a folder above a denied path
                    // (`mv gh gh2`): the next command read the file under its new name.
                    let roots = policy.writable_dirs();
                    for d in &denied {
                        for root in &roots {
                            if strictly_beneath(d, root) {
                                add_anchors(d, root, &mut anchors);
                            }
                        }
                    }
                    // Regression (review of the config files): a root nested in another
                    // (the workspace in a configured root, one configured root in another)
                    // was carried away by renaming a directory above it in the outer one,
                    // and a trusted workspace's config, or a link, planted in its place.
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
                    a = with_denied(a, &denied, area);
                }
                (a, Some(r), held)
            }
            Runner::Seatbelt => (
                seatbelt::argv(policy, temp_area.map(|a| a.temp.as_path()), &denied, argv),
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

    fn temp_dir(&self) -> Option<PathBuf> {
        self.area
            .get()
            .and_then(|a| a.as_ref().ok())
            .map(|a| a.temp.clone())
    }
}

/// Where bwrap commands find the private temp dir: `/tmp` itself when the dir lies under
/// `/tmp` (the mount of it at `/tmp` hides its own path) and no writable root does;
/// else its own path.
fn bwrap_temp_inside<'a>(policy: &SandboxPolicy, area: &'a Area) -> &'a Path {
    let roots_under_tmp = policy.writable_dirs().iter().any(|d| d.starts_with("/tmp"));
    if area.temp.starts_with("/tmp") && !roots_under_tmp {
        Path::new("/tmp")
    } else {
        &area.temp
    }
}

/// Inserts the protected carve-outs before the `--` of a bwrap argv (after every
/// writable bind, so they win).
fn with_carves(mut argv: Vec<OsString>, anchors: &[PathBuf], carves: Vec<Carve>) -> Vec<OsString> {
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    let anchored = anchors.iter().flat_map(|a| {
        [
            "--bind".into(),
            a.clone().into_os_string(),
            a.clone().into_os_string(),
        ]
    });
    let binds = carves.into_iter().flat_map(|c| {
        // A protected name that is a dangling link (`.vscode -> /gone`) has nothing to
        // bind: skipped rather than failing every call (it is reported partial).
        let dangling = std::fs::symlink_metadata(&c.at).is_ok_and(|m| m.file_type().is_symlink())
            && !c.at.exists();
        [
            if dangling {
                "--ro-bind-try"
            } else {
                "--ro-bind"
            }
            .into(),
            c.source.into_os_string(),
            c.at.into_os_string(),
        ]
    });
    let all: Vec<OsString> = anchored.chain(binds).collect();
    argv.splice(at..at, all);
    argv
}

/// Appends a read-only mount of an unreadable (mode 000) directory or file over each
/// denied path (after every writable bind, so it wins): reading it fails with "Permission
/// denied", for a root command too (it has no capability left to override the mode).
fn with_denied(mut argv: Vec<OsString>, denied: &[PathBuf], area: &Area) -> Vec<OsString> {
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    let binds = denied.iter().flat_map(|d| {
        let source = if d.is_dir() {
            &area.denied_dir
        } else {
            &area.denied_file
        };
        [
            OsString::from("--ro-bind"),
            source.clone().into_os_string(),
            d.clone().into_os_string(),
        ]
    });
    let binds: Vec<OsString> = binds.collect();
    argv.splice(at..at, binds);
    argv
}

/// For each writable root whose `.git` is a directory with an `info/exclude`, a
/// read-only stand-in for that file holding its lines plus one per placeholder file made in
/// the root's worktree, so that `git status` and `git add -A` in the sandbox do not see the
/// empty `.bashrc`, `.mcp.json`, … the command's mounts need (empty directories git does
/// not list anyway). The host's `info/exclude` is unchanged.
fn exclude_placeholders(
    policy: &SandboxPolicy,
    held: &mut Placeholders,
    area: &Area,
) -> Vec<(PathBuf, Carve)> {
    let made = held.made();
    let mut out = Vec::new();
    for root in policy.writable_dirs() {
        let exclude = root.join(".git/info/exclude");
        let lines: Vec<String> = made
            .iter()
            .filter_map(|p| p.strip_prefix(&root).ok())
            .filter(|rel| !rel.components().any(|c| c.as_os_str() == ".git"))
            .filter(|rel| std::fs::symlink_metadata(root.join(rel)).is_ok_and(|m| m.is_file()))
            .map(|rel| format!("/{}", gitignore_escape(&rel.to_string_lossy())))
            .collect();
        if lines.is_empty() || !std::fs::symlink_metadata(&exclude).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Some(mut text) = crate::small_file::read(&exclude, crate::gitconfig::MAX_CONFIG_BYTES)
        else {
            continue;
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("# dsh: empty placeholders of protected paths, for this command only\n");
        for l in lines {
            text.push_str(&l);
            text.push('\n');
        }
        let generated = area
            .root
            .join(format!("exclude-{}", dsh_core::spill::random_hex(12)));
        if std::fs::write(&generated, text).is_ok() {
            held.remove_on_drop(generated.clone());
            out.push((
                root.clone(),
                Carve {
                    at: exclude,
                    source: generated,
                },
            ));
        }
    }
    out
}

/// `name` as a gitignore pattern that matches only itself.
fn gitignore_escape(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if matches!(c, '*' | '?' | '[' | '\\') || (i == 0 && matches!(c, '!' | '#')) {
            out.push('\\');
        }
        out.push(c);
    }
    if let Some(stripped) = out.strip_suffix(' ') {
        out = format!("{stripped}\\ ");
    }
    out
}

/// For a protected git `config` that sets `core.worktree` (a submodule's, under
/// `.git/modules`), a read-only copy without that line, to mount in its place: `git
/// submodule update` rewrites `core.worktree` whenever it is set (even to the same value),
/// which a read-only config refuses; without it git finds the worktree from the `.git`
/// file, as it does for every command run in the submodule. The host's file is unchanged.
fn config_without_worktree(p: &Path, area: &Area, held: &mut Placeholders) -> Option<PathBuf> {
    if p.file_name()? != "config" {
        return None;
    }
    let meta = std::fs::symlink_metadata(p).ok()?;
    if !meta.is_file() || meta.len() > crate::gitconfig::MAX_CONFIG_BYTES {
        return None;
    }
    let text = crate::small_file::read(p, crate::gitconfig::MAX_CONFIG_BYTES)?;
    let sets_worktree = crate::gitconfig::entries(&text)
        .iter()
        .any(|e| e.section == "core" && e.subsection.is_none() && e.key == "worktree");
    if !sets_worktree {
        return None;
    }
    let mut out = String::new();
    let mut in_core = false;
    let mut continued = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if continued {
            continued = line.trim_end().ends_with('\\');
            continue;
        }
        if trimmed.starts_with('[') {
            let header = trimmed
                .split(']')
                .next()
                .unwrap_or("")
                .trim_start_matches('[');
            in_core = header.trim().eq_ignore_ascii_case("core");
        } else if in_core {
            let key = trimmed
                .split(|c: char| c == '=' || c.is_whitespace())
                .next()
                .unwrap_or("");
            if key.eq_ignore_ascii_case("worktree") {
                continued = line.trim_end().ends_with('\\');
                continue;
            }
        }
        out.push_str(line);
    }
    let copy = area
        .root
        .join(format!("config-{}", dsh_core::spill::random_hex(12)));
    std::fs::write(&copy, out).ok()?;
    held.remove_on_drop(copy.clone());
    Some(copy)
}

/// What stands in for the missing `at` on the way to (or at) the protected path `p`.
fn placeholder_kind(at: &Path, p: &Path) -> Kind {
    let name = at.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if at != p || DIRECTORY_NAMES.contains(&name) {
        Kind::Dir
    } else if name == "commondir" {
        Kind::Commondir
    } else {
        Kind::File
    }
}

/// The fail-closed answer to a policy the runners here enforce only in part: what is
/// missing, how to get it, and how to accept the gap on purpose.
fn partial_refused(mode: SandboxMode, why: &str) -> HarnessError {
    let fix = if why.contains("is a symlink") {
        "replace that symlink with the directory or file it points to"
    } else if why.contains("contains the home directory") {
        "use a workspace below your home directory, not the home directory itself"
    } else if why.contains("could not be walked") {
        "use a smaller workspace, or trim the git config named"
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

/// `SANDBOX_UNAVAILABLE`: what earlier checks could not set aside is still there.
fn unsettled_refused(left: &[crate::quarantine::Quarantined]) -> HarnessError {
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

/// Removes `--bind T T` (T under /tmp would be hidden by `--bind T /tmp` anyway).
fn drop_self_bind(argv: &mut Vec<OsString>, temp: &Path) {
    if let Some(i) = argv
        .windows(3)
        .position(|w| w[0] == "--bind" && w[1] == temp.as_os_str() && w[2] == temp.as_os_str())
    {
        argv.drain(i..i + 3);
    }
}

/// What no runner can enforce of `policy` on this filesystem: a writable root that holds
/// the home directory (its startup files, autostart entries and user units cannot all be
/// listed) or dsh's state directory, a denied path that holds a writable root, and roots
/// whose walk for nested repositories stopped short.
fn policy_gaps(policy: &SandboxPolicy, denied: &[PathBuf]) -> Vec<String> {
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
            "{} could not be walked whole for nested git repositories, or a git config \
             there names too many includes or hooks paths to follow: one there keeps \
             writable hooks and config",
            root.display()
        ));
    }
    gaps
}

/// The writable roots of `policy` that are, hold or lie in a place where programs keep
/// what they run (`~/.config`, `~/.local`, a toolchain's home, a directory on `PATH`),
/// each with that place: no list of names can cover what is there.
fn startup_places(policy: &SandboxPolicy) -> Vec<(PathBuf, PathBuf)> {
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
fn symlinked_protected_path(policy: &SandboxPolicy) -> Option<PathBuf> {
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

/// Adds every real directory between `root` (exclusive) and `at` (exclusive) to
/// `anchors`: bound onto itself, each is a mount point that cannot be renamed or removed,
/// so the read-only binds beneath it cannot be carried away.
fn add_anchors(at: &Path, root: &Path, anchors: &mut Vec<PathBuf>) {
    for anchor in at
        .ancestors()
        .skip(1)
        .take_while(|a| a.starts_with(root) && *a != root)
    {
        // Only a real directory reached by no link: a bind of a path through a link would
        // bind the link's target, writable, wherever it is (a review found
        // `protected = ["link/sub/x"]` with `link -> ../victim` made `victim/sub` writable).
        let real_dir = std::fs::symlink_metadata(anchor).is_ok_and(|m| m.is_dir())
            && dsh_core::path::canonical_path(anchor) == anchor;
        if real_dir && !anchors.iter().any(|a| a == anchor) {
            anchors.push(anchor.to_path_buf());
        }
    }
}

/// Whether `p` lies strictly beneath `root` by plain names only (no `.` or `..`): the only
/// paths a carve, an anchor or a placeholder may be made for.
fn strictly_beneath(p: &Path, root: &Path) -> bool {
    use std::path::Component;
    p.strip_prefix(root).is_ok_and(|rel| {
        rel.components().next().is_some()
            && rel.components().all(|c| matches!(c, Component::Normal(_)))
    })
}

/// The first component of `path` below `root` that does not exist or is a placeholder
/// directory (its mount covers everything beneath it); `None` when the whole path exists.
fn first_missing(root: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(root).ok()?;
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Err(_) => return Some(at),
            Ok(m) if m.is_dir() && crate::placeholder::is_placeholder_dir(&at) => return Some(at),
            Ok(_) => {}
        }
    }
    None
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

/// Runs the bwrap probe; the resolved program, or why it fails and how to fix it.
fn probe_bwrap(program: &Path, timeout: Duration) -> Result<PathBuf, String> {
    let path = resolve_program(program).ok_or_else(|| {
        format!(
            "{} not found (install it: apt-get install bubblewrap)",
            program.display()
        )
    })?;
    let argv = bwrap::probe_argv(&path);
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        // Its own group, so a timeout kills whatever it started too.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    // SAFETY: the group of our own unreaped child: its id cannot be reused.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                }
                let _ = child.wait();
                return Err(format!(
                    "its probe did not finish within {} ms",
                    timeout.as_millis()
                ));
            }
            Err(e) => return Err(format!("cannot wait for its probe: {e}")),
        }
    };
    if status.success() {
        return Ok(path);
    }
    let mut err = String::new();
    if let Some(mut s) = child.stderr.take() {
        let _ = s.by_ref().take(4096).read_to_string(&mut err);
    }
    let line = err.lines().next().unwrap_or("").trim().to_owned();
    let hint = if line.contains("setting up uid map")
        || line.contains("No permissions to create new namespace")
        || line.contains("Operation not permitted")
    {
        " (unprivileged user namespaces are disabled: allow them, e.g. on Ubuntu 24.04 \
         `sysctl kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for bwrap)"
    } else {
        ""
    };
    Err(format!("its probe failed ({status}): {line}{hint}"))
}

/// `program` if it has a slash, else its first executable match on `PATH`.
fn resolve_program(program: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if program.as_os_str().as_bytes().contains(&b'/') {
        return is_executable(program).then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The provider's private directory. See [`LocalSandbox`].
struct Area {
    root: PathBuf,
    temp: PathBuf,
    empty_dir: PathBuf,
    empty_file: PathBuf,
    /// Mounted over denied paths: mode 000, so a read fails (a command has no capability
    /// that could override it, root's included) instead of finding an empty file.
    denied_dir: PathBuf,
    denied_file: PathBuf,
}

impl Area {
    fn create(parent: Option<&Path>) -> Result<Area, String> {
        let parent = match parent {
            Some(p) => p.to_path_buf(),
            None if Path::new("/var/tmp").is_dir() => PathBuf::from("/var/tmp"),
            None => std::env::temp_dir(),
        };
        let parent = dsh_core::path::canonical_path(&parent);
        remove_stale_areas(&parent);
        let mut root = None;
        for _ in 0..8 {
            let candidate = parent.join(format!(
                "dsh-sandbox-{}-{}",
                std::process::id(),
                dsh_core::spill::random_hex(12)
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&candidate) {
                Ok(()) => {
                    root = Some(candidate);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(format!(
                        "cannot create the sandbox's private directory under {}: {e}",
                        parent.display()
                    ))
                }
            }
        }
        let root = root
            .ok_or_else(|| format!("cannot create a fresh directory under {}", parent.display()))?;
        let area = Area {
            temp: root.join("tmp"),
            empty_dir: root.join("empty-dir"),
            empty_file: root.join("empty-file"),
            denied_dir: root.join("denied-dir"),
            denied_file: root.join("denied-file"),
            root,
        };
        let made = (|| -> std::io::Result<()> {
            std::fs::DirBuilder::new().mode(0o700).create(&area.temp)?;
            std::fs::DirBuilder::new()
                .mode(0o500)
                .create(&area.empty_dir)?;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o400)
                .open(&area.empty_file)?;
            std::fs::DirBuilder::new()
                .mode(0o000)
                .create(&area.denied_dir)?;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o000)
                .open(&area.denied_file)?;
            // The umask cannot add bits, but be exact about the mode that denies.
            std::fs::set_permissions(&area.denied_dir, std::fs::Permissions::from_mode(0o000))?;
            std::fs::set_permissions(&area.denied_file, std::fs::Permissions::from_mode(0o000))?;
            Ok(())
        })();
        made.map_err(|e| format!("cannot prepare {}: {e}", area.root.display()))?;
        Ok(area)
    }
}

/// Removes the private directories of dsh processes that died without cleaning up (by
/// SIGKILL, say): `dsh-sandbox-<pid>-*` of a pid that no longer exists, owned by us.
fn remove_stale_areas(parent: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    for e in entries.flatten() {
        let ours = e.metadata().is_ok_and(|m| m.uid() == uid && m.is_dir());
        if ours && dsh_core::spill::is_stale_name(&e.file_name(), "dsh-sandbox-") {
            remove_area(&e.path());
        }
    }
}

/// Removes a private directory whole. Every directory in it is given its owner's bits
/// first (its mode-000 stand-in, and whatever a command did to its `TMPDIR` with
/// `chmod`), or a user without root's override could not empty it.
fn remove_area(root: &Path) {
    fn open_up(dir: &Path, depth: usize) {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        if depth > 64 {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            // The entry's own type: a link is never followed.
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                open_up(&e.path(), depth + 1);
            }
        }
    }
    open_up(root, 0);
    let _ = std::fs::remove_dir_all(root);
}

impl Drop for Area {
    fn drop(&mut self) {
        remove_area(&self.root);
    }
}
