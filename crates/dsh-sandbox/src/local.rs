//! [`LocalSandbox`]: the runners of this machine, probed once, chosen per call.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use dsh_core::{ErrorCode, HarnessError};

use crate::bwrap::{self, Carve};
use crate::child::ChildRestrictions;
use crate::landlock::{self, Ruleset, RulesetSpec};
use crate::protected::{COMMONDIR_PLACEHOLDER, DIRECTORY_NAMES};
use crate::{
    sandbox_unavailable, seatbelt, seccomp, Confinement, Enforcement, Network, Runner, Sandbox,
    SandboxMode, SandboxPolicy,
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
    placeholders: Arc<Mutex<HashMap<PathBuf, usize>>>,
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
            placeholders: Arc::new(Mutex::new(HashMap::new())),
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
        let mut why_not = Vec::new();
        // Among runners that enforce only in part, the one with the fewest gaps (the
        // earlier, faster one on a tie).
        let mut partial: Option<(Runner, Vec<String>)> = None;
        for runner in self.candidates() {
            match self.gaps(runner, policy) {
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
    /// why it cannot run at all.
    fn gaps(&self, runner: Runner, policy: &SandboxPolicy) -> Result<Vec<String>, String> {
        let mut gaps = Vec::new();
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
    /// placeholders they need registered, and the anchors: every directory between a
    /// writable root and a carve-out, bound onto itself so it is a mount point that cannot
    /// be renamed or removed (which would carry the carve-outs away: `mv .git .git-old;
    /// mkdir .git` would otherwise make fresh, writable hooks).
    fn carves(
        &self,
        policy: &SandboxPolicy,
        area: &Area,
    ) -> (Vec<Carve>, Vec<PathBuf>, Placeholders) {
        let writable = policy.writable_dirs();
        let mut guard = Placeholders {
            paths: Vec::new(),
            registry: self.placeholders.clone(),
        };
        let mut carves: Vec<Carve> = Vec::new();
        let mut anchors: Vec<PathBuf> = Vec::new();
        let mut registry = lock(&self.placeholders);
        for p in &policy.protected {
            let Some(root) = writable.iter().find(|w| p.starts_with(w)) else {
                continue;
            };
            let at = first_missing(root, p).unwrap_or_else(|| p.clone());
            if carves.iter().any(|c| c.at == at) {
                continue;
            }
            for anchor in at
                .ancestors()
                .skip(1)
                .take_while(|a| a.starts_with(root) && *a != root.as_path())
            {
                let real_dir = std::fs::symlink_metadata(anchor).is_ok_and(|m| m.is_dir());
                if real_dir && !anchors.iter().any(|a| a == anchor) {
                    anchors.push(anchor.to_path_buf());
                }
            }
            let placeholder = registry.contains_key(&at) || std::fs::symlink_metadata(&at).is_err();
            let source = if !placeholder {
                at.clone()
            } else {
                *registry.entry(at.clone()).or_insert(0) += 1;
                guard.paths.push(at.clone());
                let is_commondir = at == *p && at.file_name().is_some_and(|n| n == "commondir");
                let dir_like = at != *p
                    || at
                        .file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| DIRECTORY_NAMES.contains(&n));
                if is_commondir && make_commondir_placeholder(&at) {
                    at.clone()
                } else if dir_like {
                    area.empty_dir.clone()
                } else {
                    area.empty_file.clone()
                }
            };
            carves.push(Carve { at, source });
        }
        // Outer directories first, so each bind lands on the one before it.
        anchors.sort_by_key(|a| a.components().count());
        (carves, anchors, guard)
    }

    fn confine_landlock(
        &self,
        policy: &SandboxPolicy,
        area: Option<&Area>,
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
        let (runner, enforcement) = self.choose(policy)?;
        // Under read-only nothing is writable, the temp dir neither: no private directory.
        let area = match policy.mode {
            SandboxMode::WorkspaceWrite => Some(self.area()?),
            _ => None,
        };
        let (argv, restrictions, placeholders) = match runner {
            Runner::Landlock => (
                argv.to_vec(),
                Some(self.confine_landlock(policy, area)?),
                None,
            ),
            Runner::Bwrap | Runner::Operator => {
                let (a, r) = if runner == Runner::Bwrap {
                    self.confine_bwrap(argv, policy, area)?
                } else {
                    self.confine_operator(argv, policy, area)?
                };
                match area {
                    Some(area) => {
                        let (carves, anchors, guard) = self.carves(policy, area);
                        (with_carves(a, &anchors, carves), Some(r), Some(guard))
                    }
                    None => (a, Some(r), None),
                }
            }
            Runner::Seatbelt => (
                seatbelt::argv(policy, area.map(|a| a.temp.as_path()), argv),
                None,
                None,
            ),
        };
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

/// Removes the placeholder at `p` if it is still an empty directory, an empty file or a
/// `commondir` placeholder, without following a symlink anywhere on the way: the command
/// may have swapped a parent for a link to elsewhere (`.git -> /some/dir`), where an
/// empty `hooks` or `config` is not ours. Where `openat2` is missing it is left in place.
fn remove_placeholder(p: &Path) {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let (Some(parent), Some(name)) = (p.parent(), p.file_name()) else {
        return;
    };
    let (Ok(parent_c), Ok(name_c)) = (
        CString::new(parent.as_os_str().as_bytes()),
        CString::new(name.as_bytes()),
    ) else {
        return;
    };
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS,
    };
    // SAFETY: openat2(2) with a valid C string and an open_how of the size given.
    let dir = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            parent_c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let Ok(dir) = i32::try_from(dir) else {
        return;
    };
    if dir < 0 {
        return;
    }
    // SAFETY: an fd openat2 just returned, owned here.
    let dir = unsafe { OwnedFd::from_raw_fd(dir) };
    // Through the directory fd, so the name is resolved where it was checked.
    let in_dir = Path::new("/proc/self/fd")
        .join(dir.as_raw_fd().to_string())
        .join(name);
    let flags = match std::fs::symlink_metadata(&in_dir) {
        Ok(m) if m.is_dir() => libc::AT_REMOVEDIR,
        Ok(m) if m.is_file() && (m.len() == 0 || is_commondir_placeholder(&in_dir)) => 0,
        _ => return,
    };
    // SAFETY: unlinkat(2) on our fd with a valid C string; rmdir refuses a non-empty one.
    unsafe {
        libc::unlinkat(dir.as_raw_fd(), name_c.as_ptr(), flags);
    }
}

/// Creates the missing `commondir` at `at` holding [`COMMONDIR_PLACEHOLDER`] (see the
/// `protected` module), so that git, on the host and in the sandbox, reads the git dir
/// itself from it. True when the file at `at` now holds exactly that (made here, or by a
/// concurrent confinement).
fn make_commondir_placeholder(at: &Path) -> bool {
    use std::io::Write;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o644)
        .open(at)
    {
        Ok(mut f) => f.write_all(COMMONDIR_PLACEHOLDER.as_bytes()).is_ok(),
        Err(_) => is_commondir_placeholder(at),
    }
}

/// Whether `p` is a regular file holding exactly [`COMMONDIR_PLACEHOLDER`].
fn is_commondir_placeholder(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())
        && std::fs::read(p).is_ok_and(|b| b == COMMONDIR_PLACEHOLDER.as_bytes())
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

/// Under workspace-write, the first symlink on the way from a writable root to one of its
/// protected paths: a read-only mount lands on the link's target, and the link can be
/// swapped for a real, writable directory.
fn symlinked_protected_path(policy: &SandboxPolicy) -> Option<PathBuf> {
    if policy.mode != SandboxMode::WorkspaceWrite {
        return None;
    }
    let writable = policy.writable_dirs();
    for p in &policy.protected {
        let Some(root) = writable.iter().find(|w| p.starts_with(w)) else {
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

/// The first component of `path` below `root` that does not exist; `None` when the whole
/// path exists.
fn first_missing(root: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(root).ok()?;
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_err() {
            return Some(at);
        }
    }
    None
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
}

impl Area {
    fn create(parent: Option<&Path>) -> Result<Area, String> {
        let parent = match parent {
            Some(p) => p.to_path_buf(),
            None if Path::new("/var/tmp").is_dir() => PathBuf::from("/var/tmp"),
            None => std::env::temp_dir(),
        };
        let parent = crate::canonical_path(&parent);
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
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Drop for Area {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Placeholders a confinement registered; on drop, each one no other live confinement of
/// this provider uses is removed if it is still an empty directory or an empty file.
pub struct Placeholders {
    paths: Vec<PathBuf>,
    registry: Arc<Mutex<HashMap<PathBuf, usize>>>,
}

impl std::fmt::Debug for Placeholders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.paths).finish()
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        let mut registry = lock(&self.registry);
        for p in &self.paths {
            let Some(count) = registry.get_mut(p) else {
                continue;
            };
            *count -= 1;
            if *count > 0 {
                continue;
            }
            registry.remove(p);
            remove_placeholder(p);
        }
    }
}
