//! [`ShellExecutor`]: the shell seam on this machine, for any shell [`Dialect`].
//!
//! Each call spawns the dialect's argv (`bash -c COMMAND`, `pwsh … -Command COMMAND`)
//! through the subprocess seam with the executor's defaults: a timeout (default
//! 120 000 ms, capped at 600 000 ms), a per-stream memory budget (64 000 bytes), a spill cap
//! (64 MiB per stream) and a TERM→KILL grace (3000 ms). The child environment is layered,
//! last wins: the scrubbed host environment, then the dialect's overrides (no colours, no
//! pager), then the request's `env`, then its `dsh_env`, then what the sandbox requires
//! (`TMPDIR`). Providers differ only in their dialect; everything else is here, once.
//!
//! With [`ShellExecutor::with_sandbox`] each call in a confined mode is wrapped by the
//! sandbox under the request's own policy (see the [crate docs](crate#sandbox)); without
//! one, a confined mode is `SANDBOX_UNAVAILABLE`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::ErrorCode;
use dsh_core::{clamp_timeout, CancelToken, Cause, Deadline, HarnessError, MAX_TIMER_DELAY_MS};
use dsh_process::{CaptureLimits, EnvOverlay, OutputMode, SpawnSpec, StdinMode, Subprocess};
use dsh_sandbox::{
    classify_denial, classify_runner_failure, sandbox_unavailable, Confinement, Sandbox,
    SandboxFacts, SandboxMode,
};

use crate::{RunResult, Shell, ShellProcess, ShellRequest, ShellSpec};

/// What makes one shell different from another: how a command line becomes an argv, and
/// which variables every command gets.
pub trait Dialect: Send + Sync + 'static {
    /// The shell's name, used in messages (`bash`, `pwsh`).
    fn name(&self) -> &str;
    /// The argv that runs `command`, the command as one element (no quoting layer).
    fn argv(&self, command: &str) -> Vec<OsString>;
    /// Variables every command gets unless the request overrides them.
    fn env_overrides(&self) -> &[(&str, &str)];
}

/// Configuration of a shell executor. Every number must be > 0; `grace_ms` and
/// `max_timeout_ms` must be ≤ 2147483647 (so a run can never fail later on its timer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellConfig {
    /// Working directory when a request names none. Default: the host's current directory.
    pub cwd: Option<PathBuf>,
    /// Timeout when a request names none, in ms. Default: 120 000.
    pub timeout_ms: u64,
    /// Cap on any timeout, in ms. Default: 600 000.
    pub max_timeout_ms: u64,
    /// The most bytes of each stream a result shows (its tail); the rest is in the spill
    /// file. Default: 16 000, so a result with both streams, escaped as JSON, stays within
    /// what agent clients pass to the model inline (measured: Claude Code 50 000
    /// characters, Codex CLI 48 000 bytes with its default models, Gemini CLI 40 000
    /// characters).
    pub max_output_bytes: usize,
    /// Spill file cap per stream, in bytes. Default: 67 108 864 (64 MiB).
    pub max_spill_bytes: u64,
    /// SIGTERM→SIGKILL grace, and the bound on the pipe drain after exit, in ms.
    /// Default: 3000.
    pub grace_ms: u64,
}

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            cwd: None,
            timeout_ms: 120_000,
            max_timeout_ms: 600_000,
            max_output_bytes: 16_000,
            max_spill_bytes: 64 * 1024 * 1024,
            grace_ms: 3000,
        }
    }
}

impl ShellConfig {
    /// The spec `request` runs as under this configuration, for the shell named `shell`
    /// (in messages): the timeout defaulted and capped, the stdout budget defaulted, the
    /// working directory defaulted to `cwd`, else the host's current directory. Every
    /// provider of the seam fills its specs here, so the defaults and caps are one rule.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a non-positive or non-finite timeout or a zero budget;
    /// `PROCESS_CWD_INVALID` when no workdir is given and the host's current directory is
    /// unusable.
    pub fn spec_for(&self, shell: &str, request: ShellRequest) -> Result<ShellSpec, HarnessError> {
        let timeout_ms = clamp_timeout(
            request.timeout_ms,
            self.timeout_ms,
            self.max_timeout_ms,
            &format!("{shell}: request.timeout_ms"),
        )?;
        let stdout_max_bytes = request.stdout_max_bytes.unwrap_or(self.max_output_bytes);
        if stdout_max_bytes == 0 {
            return Err(HarnessError::invalid_argument(format!(
                "{shell}: request.stdout_max_bytes must be a positive finite number"
            )));
        }
        let workdir = match request.workdir.or_else(|| self.cwd.clone()) {
            Some(w) => w,
            None => std::env::current_dir().map_err(|e| {
                HarnessError::new(
                    dsh_core::ErrorCode::ProcessCwdInvalid,
                    "the host's current directory is unusable; pass a workdir",
                )
                .with_source(e)
            })?,
        };
        Ok(ShellSpec {
            command: request.command,
            workdir,
            timeout_ms,
            stdout_max_bytes,
            cancel: request.cancel,
            stdin: request.stdin,
            env: request.env,
            dsh_env: request.dsh_env,
            sandbox: request.sandbox,
        })
    }

    /// Checks every field; `shell` (`bash`, `pwsh`) prefixes the messages.
    ///
    /// # Errors
    /// `CONFIG_INVALID` naming the first bad field (`<shell>: <field> must be a positive
    /// finite number`, or `<shell>: <field> must be no greater than 2147483647`).
    pub fn validate(&self, shell: &str) -> Result<(), HarnessError> {
        let fields: [(&str, u64); 5] = [
            ("timeout_ms", self.timeout_ms),
            ("max_timeout_ms", self.max_timeout_ms),
            ("max_output_bytes", self.max_output_bytes as u64),
            ("max_spill_bytes", self.max_spill_bytes),
            ("grace_ms", self.grace_ms),
        ];
        for (name, value) in fields {
            if value == 0 {
                return Err(HarnessError::config_invalid(format!(
                    "{shell}: {name} must be a positive finite number"
                )));
            }
        }
        for (name, value) in [
            ("grace_ms", self.grace_ms),
            ("max_timeout_ms", self.max_timeout_ms),
        ] {
            if value > MAX_TIMER_DELAY_MS {
                return Err(HarnessError::config_invalid(format!(
                    "{shell}: {name} must be no greater than {MAX_TIMER_DELAY_MS}"
                )));
            }
        }
        Ok(())
    }
}

/// The shell seam on this machine, unconfined, for the shell dialect `D`
/// ([`LocalBash`](crate::bash::LocalBash), [`LocalPwsh`](crate::pwsh::LocalPwsh)). See
/// the [module docs](self).
pub struct ShellExecutor<D> {
    subprocess: Arc<dyn Subprocess>,
    config: RwLock<ShellConfig>,
    dialect: D,
    sandbox: Option<Arc<dyn Sandbox>>,
}

impl<D: Dialect> std::fmt::Debug for ShellExecutor<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(self.dialect.name())
            .field("config", &self.config())
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> ShellExecutor<D> {
    /// An executor over `subprocess` with the default configuration and dialect.
    pub fn new(subprocess: Arc<dyn Subprocess>) -> Self
    where
        D: Default,
    {
        ShellExecutor {
            subprocess,
            config: RwLock::new(ShellConfig::default()),
            dialect: D::default(),
            sandbox: None,
        }
    }

    /// The same executor confining its commands with `sandbox`, under each request's own
    /// policy. Without one, a request in a confined mode is refused.
    pub fn with_sandbox(mut self, sandbox: Arc<dyn Sandbox>) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// An executor over `subprocess` with `dialect` and `config`.
    ///
    /// # Errors
    /// `CONFIG_INVALID` as [`ShellConfig::validate`].
    pub fn with_dialect(
        subprocess: Arc<dyn Subprocess>,
        dialect: D,
        config: ShellConfig,
    ) -> Result<Self, HarnessError> {
        config.validate(dialect.name())?;
        Ok(ShellExecutor {
            subprocess,
            config: RwLock::new(config),
            dialect,
            sandbox: None,
        })
    }

    /// An executor over `subprocess` with `config` and the default dialect.
    ///
    /// # Errors
    /// `CONFIG_INVALID` as [`ShellConfig::validate`].
    pub fn with_config(
        subprocess: Arc<dyn Subprocess>,
        config: ShellConfig,
    ) -> Result<Self, HarnessError>
    where
        D: Default,
    {
        Self::with_dialect(subprocess, D::default(), config)
    }

    /// The configuration in force (read anew by every call).
    pub fn config(&self) -> ShellConfig {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the configuration. A refused configuration leaves the last good one in
    /// force.
    ///
    /// # Errors
    /// `CONFIG_INVALID` as [`ShellConfig::validate`].
    pub fn set_config(&self, config: ShellConfig) -> Result<(), HarnessError> {
        config.validate(self.dialect.name())?;
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }

    /// Wraps the call in its sandbox policy: `None` for an unconfined call.
    ///
    /// # Errors
    /// `SANDBOX_UNAVAILABLE` when the mode is confined and this executor has no sandbox or
    /// the sandbox cannot enforce it.
    fn confine(&self, spec: &ShellSpec) -> Result<Option<Wrapped>, HarnessError> {
        let policy = &spec.sandbox;
        if !policy.mode.is_confined() {
            return Ok(None);
        }
        let Some(sandbox) = &self.sandbox else {
            return Err(sandbox_unavailable(
                policy.mode,
                &format!(
                    "this {} executor has no sandbox configured",
                    self.dialect.name()
                ),
                None,
            ));
        };
        let plain = self.dialect.argv(&spec.command);
        let confinement = sandbox.confine(&plain, policy)?;
        Ok(Some(Wrapped {
            mode: policy.mode,
            own_runner: confinement.argv.first() != plain.first(),
            confinement,
        }))
    }

    fn spawn_spec(
        &self,
        spec: &ShellSpec,
        stdout_max: usize,
        cancel: Option<CancelToken>,
        wrapped: Option<&Wrapped>,
    ) -> SpawnSpec {
        let cfg = self.config();
        let argv = match wrapped {
            Some(w) => w.confinement.argv.clone(),
            None => self.dialect.argv(&spec.command),
        };
        let mut s = SpawnSpec::new(argv, spec.workdir.clone());
        s.stdin = match &spec.stdin {
            Some(data) => StdinMode::Data(data.clone()),
            None => StdinMode::Ignore,
        };
        s.stdout = OutputMode::Collect(CaptureLimits {
            max_bytes: stdout_max,
            max_spill_bytes: Some(cfg.max_spill_bytes),
        });
        s.stderr = OutputMode::Collect(CaptureLimits {
            max_bytes: cfg.max_output_bytes,
            max_spill_bytes: Some(cfg.max_spill_bytes),
        });
        s.env = layered_env(self.dialect.env_overrides(), spec);
        if let Some(w) = wrapped {
            s = s.confined_by(&w.confinement);
        }
        s.grace = Duration::from_millis(cfg.grace_ms);
        s.cancel = cancel;
        s
    }
}

/// A call wrapped by the sandbox, kept until the command's tree is gone (it holds the
/// placeholders of missing protected paths).
pub(crate) struct Wrapped {
    pub(crate) mode: SandboxMode,
    /// Whether the spawned program is a runner (bwrap, sandbox-exec) rather than the shell.
    own_runner: bool,
    pub(crate) confinement: Confinement,
}

impl Wrapped {
    /// A spawn error that means the runner could not start, as `SANDBOX_UNAVAILABLE`;
    /// any other error unchanged (a bad workdir stays a bad workdir).
    fn spawn_error(&self, e: HarnessError, workdir: &std::path::Path) -> HarnessError {
        let runner_missing = matches!(
            e.code(),
            ErrorCode::ProcessNotFound | ErrorCode::ProcessNotExecutable
        );
        if self.own_runner && runner_missing && workdir.is_dir() {
            let detail = e.message().to_owned();
            return sandbox_unavailable(self.mode, "", Some(&detail));
        }
        e
    }

    /// The facts of a finished run; `Err` when the runner itself failed.
    pub(crate) fn facts(
        &self,
        exit_code: Option<i32>,
        stderr: &str,
    ) -> Result<SandboxFacts, String> {
        let c = &self.confinement;
        if let Some(line) = classify_runner_failure(exit_code, stderr, &c.runner_failure_rules) {
            return Err(line);
        }
        Ok(SandboxFacts {
            mode: self.mode,
            denied: classify_denial(exit_code, stderr, c.denial_signatures),
            enforcement: Some(c.enforcement.clone()),
            runner: Some(c.runner),
            runner_failed: false,
        })
    }
}

/// The facts of an unconfined call (danger-full-access).
fn unconfined_facts(spec: &ShellSpec) -> Option<SandboxFacts> {
    Some(SandboxFacts {
        mode: spec.sandbox.mode,
        denied: false,
        enforcement: None,
        runner: None,
        runner_failed: false,
    })
}

/// dsh_env > request env > the dialect's overrides (the scrubbed host env is the base,
/// applied by the subprocess seam).
fn layered_env(overrides: &[(&str, &str)], spec: &ShellSpec) -> EnvOverlay {
    let mut env: EnvOverlay = overrides
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Some((*v).to_owned())))
        .collect();
    if let Some(extra) = &spec.env {
        env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    if let Some(dsh) = &spec.dsh_env {
        env.extend(dsh.iter().map(|(k, v)| (k.clone(), Some(v.clone()))));
    }
    env
}

#[async_trait]
impl<D: Dialect> Shell for ShellExecutor<D> {
    fn spec_for(&self, request: ShellRequest) -> Result<ShellSpec, HarnessError> {
        self.config().spec_for(self.dialect.name(), request)
    }

    async fn run(&self, spec: ShellSpec) -> Result<RunResult, HarnessError> {
        if let Some(reason) = spec.cancel.as_ref().and_then(CancelToken::reason) {
            return Err(HarnessError::aborted_before_start("spawn", reason));
        }
        let wrapped = self.confine(&spec)?;
        let process = self
            .subprocess
            .spawn(self.spawn_spec(&spec, spec.stdout_max_bytes, None, wrapped.as_ref()))
            .map_err(|e| match &wrapped {
                Some(w) => w.spawn_error(e, &spec.workdir),
                None => e,
            })?;
        // Armed once the command runs, so a short timeout is always a result, never an
        // error of the spawn.
        let deadline = Deadline::new(
            Some(Duration::from_millis(spec.timeout_ms)),
            spec.cancel.as_ref(),
        );
        let (outcome, cause) = tokio::select! {
            outcome = process.done() => (outcome, None),
            () = deadline.token().cancelled() => {
                // Whoever would read what a graceful end prints is gone: no grace.
                match deadline.token().reason() {
                    Some(dsh_core::CancelReason::ClientGone) => process.signal_kill(),
                    _ => process.terminate(),
                }
                (process.done().await, deadline.cause())
            }
        };
        let (stdout, stderr) = process.collected();
        // What the command left running dies now, and `run` returns only once it is gone.
        process.signal_kill();
        process.wait_for_exit().await;
        let sandbox = match &wrapped {
            Some(w) => match w.facts(outcome.exit_code(), &stderr.text) {
                Ok(facts) => Some(facts),
                // The runner failed before the command ran: that outranks any denial.
                Err(line) => return Err(sandbox_unavailable(w.mode, "", Some(&line))),
            },
            None => unconfined_facts(&spec),
        };
        Ok(RunResult {
            exit_code: outcome.exit_code(),
            signal: outcome.signal(),
            timed_out: cause == Some(Cause::TimedOut),
            aborted: cause == Some(Cause::Cancelled),
            timeout_ms: spec.timeout_ms,
            stdout,
            stderr,
            sandbox,
            persistent: None,
        })
        // `wrapped` drops here: its placeholders go once no other command uses them.
    }

    fn start(&self, spec: ShellSpec) -> Result<ShellProcess, HarnessError> {
        let cfg = self.config();
        // Background output uses the per-stream budget; `stdout_max_bytes` is for
        // foreground callers only.
        let wrapped = self.confine(&spec)?;
        let sub_spec = self.spawn_spec(
            &spec,
            cfg.max_output_bytes,
            spec.cancel.clone(),
            wrapped.as_ref(),
        );
        let process = self
            .subprocess
            .spawn(sub_spec)
            .map_err(|e| match &wrapped {
                Some(w) => w.spawn_error(e, &spec.workdir),
                None => e,
            })?;
        Ok(ShellProcess::new(process, spec.cancel, wrapped))
    }
}
