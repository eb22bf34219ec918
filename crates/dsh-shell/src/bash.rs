//! [`LocalBash`]: the shell seam as an unconfined `bash -c` on this machine.
//!
//! Each call spawns `bash -c COMMAND` through the subprocess seam with the executor's
//! defaults: a timeout (default 120 000 ms, capped at 600 000 ms), a per-stream memory
//! budget (64 000 bytes), a spill cap (64 MiB per stream) and a TERM→KILL grace
//! (3000 ms). The child environment is layered, last wins: the scrubbed host environment,
//! then `NO_COLOR=1 TERM=dumb PAGER=cat GIT_PAGER=cat`, then the request's `env`, then its
//! `dsh_env`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{clamp_timeout, CancelToken, Cause, Deadline, HarnessError, MAX_TIMER_DELAY_MS};
use dsh_process::{
    CaptureLimits, EnvOverlay, OutputMode, Process, ProcessControl, Signal, SpawnSpec, StdinMode,
    Subprocess,
};
use tokio::sync::watch;

use crate::{process_read, ProcessRead, ProcessStatus, RunResult, Shell, ShellRequest, ShellSpec};

/// Variables every command gets unless the request overrides them: no colour codes, a
/// dumb terminal, and no pager waiting for a keypress.
pub const ENV_OVERRIDES: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// Configuration of [`LocalBash`]. Every number must be > 0; `grace_ms` and
/// `max_timeout_ms` must be ≤ 2147483647 (so a run can never fail later on its timer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BashConfig {
    /// Working directory when a request names none. Default: the host's current directory.
    pub cwd: Option<PathBuf>,
    /// Timeout when a request names none, in ms. Default: 120 000.
    pub timeout_ms: u64,
    /// Cap on any timeout, in ms. Default: 600 000.
    pub max_timeout_ms: u64,
    /// In-memory budget per stream, in bytes. Default: 64 000.
    pub max_output_bytes: usize,
    /// Spill file cap per stream, in bytes. Default: 67 108 864 (64 MiB).
    pub max_spill_bytes: u64,
    /// SIGTERM→SIGKILL grace, and the bound on the pipe drain after exit, in ms.
    /// Default: 3000.
    pub grace_ms: u64,
}

impl Default for BashConfig {
    fn default() -> Self {
        BashConfig {
            cwd: None,
            timeout_ms: 120_000,
            max_timeout_ms: 600_000,
            max_output_bytes: 64_000,
            max_spill_bytes: 64 * 1024 * 1024,
            grace_ms: 3000,
        }
    }
}

impl BashConfig {
    /// Checks every field.
    ///
    /// # Errors
    /// `CONFIG_INVALID` naming the first bad field (`bash: <field> must be a positive
    /// finite number`, or `bash: <field> must be no greater than 2147483647`).
    pub fn validate(&self) -> Result<(), HarnessError> {
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
                    "bash: {name} must be a positive finite number"
                )));
            }
        }
        for (name, value) in [
            ("grace_ms", self.grace_ms),
            ("max_timeout_ms", self.max_timeout_ms),
        ] {
            if value > MAX_TIMER_DELAY_MS {
                return Err(HarnessError::config_invalid(format!(
                    "bash: {name} must be no greater than {MAX_TIMER_DELAY_MS}"
                )));
            }
        }
        Ok(())
    }
}

/// The shell seam as unconfined `bash -c` on this machine. See the [module docs](self).
///
/// # Requires
/// `bash` on the `PATH` of the child environment.
pub struct LocalBash {
    subprocess: Arc<dyn Subprocess>,
    config: RwLock<BashConfig>,
}

impl std::fmt::Debug for LocalBash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBash")
            .field("config", &self.config())
            .finish_non_exhaustive()
    }
}

impl LocalBash {
    /// An executor over `subprocess` with the default configuration.
    pub fn new(subprocess: Arc<dyn Subprocess>) -> LocalBash {
        LocalBash {
            subprocess,
            config: RwLock::new(BashConfig::default()),
        }
    }

    /// An executor over `subprocess` with `config`.
    ///
    /// # Errors
    /// `CONFIG_INVALID` as [`BashConfig::validate`].
    pub fn with_config(
        subprocess: Arc<dyn Subprocess>,
        config: BashConfig,
    ) -> Result<LocalBash, HarnessError> {
        config.validate()?;
        Ok(LocalBash {
            subprocess,
            config: RwLock::new(config),
        })
    }

    /// The configuration in force (read anew by every call).
    pub fn config(&self) -> BashConfig {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the configuration. A refused configuration leaves the last good one in
    /// force.
    ///
    /// # Errors
    /// `CONFIG_INVALID` as [`BashConfig::validate`].
    pub fn set_config(&self, config: BashConfig) -> Result<(), HarnessError> {
        config.validate()?;
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }

    fn spawn_spec(
        &self,
        spec: &ShellSpec,
        stdout_max: usize,
        cancel: Option<CancelToken>,
    ) -> SpawnSpec {
        let cfg = self.config();
        let argv: [OsString; 3] = ["bash".into(), "-c".into(), spec.command.clone().into()];
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
        s.env = layered_env(spec);
        s.grace = Duration::from_millis(cfg.grace_ms);
        s.cancel = cancel;
        s
    }
}

/// dsh_env > request env > [`ENV_OVERRIDES`] (the scrubbed host env is the base, applied by
/// the subprocess seam).
fn layered_env(spec: &ShellSpec) -> EnvOverlay {
    let mut env: EnvOverlay = ENV_OVERRIDES
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
impl Shell for LocalBash {
    fn resolve(&self, request: ShellRequest) -> Result<ShellSpec, HarnessError> {
        let cfg = self.config();
        let timeout_ms = clamp_timeout(
            request.timeout_ms,
            cfg.timeout_ms,
            cfg.max_timeout_ms,
            "bash: request.timeout_ms",
        )?;
        let stdout_max_bytes = request.stdout_max_bytes.unwrap_or(cfg.max_output_bytes);
        if stdout_max_bytes == 0 {
            return Err(HarnessError::invalid_argument(
                "bash: request.stdout_max_bytes must be a positive finite number",
            ));
        }
        let workdir = match request.workdir.or(cfg.cwd) {
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
        })
    }

    async fn run(&self, spec: ShellSpec) -> Result<RunResult, HarnessError> {
        if let Some(reason) = spec.cancel.as_ref().and_then(CancelToken::reason) {
            return Err(HarnessError::aborted_before_start("spawn", reason));
        }
        let process = self
            .subprocess
            .spawn(self.spawn_spec(&spec, spec.stdout_max_bytes, None))?;
        // Armed once the command runs, so a short timeout is always a result, never an
        // error of the spawn.
        let deadline = Deadline::new(
            Some(Duration::from_millis(spec.timeout_ms)),
            spec.cancel.as_ref(),
        );
        let (outcome, cause) = tokio::select! {
            outcome = process.done() => (outcome, None),
            () = deadline.token().cancelled() => {
                process.terminate();
                (process.done().await, deadline.cause())
            }
        };
        let (stdout, stderr) = process.collected();
        Ok(RunResult {
            exit_code: outcome.exit_code(),
            signal: outcome.signal(),
            timed_out: cause == Some(Cause::TimedOut),
            aborted: cause == Some(Cause::Cancelled),
            timeout_ms: spec.timeout_ms,
            stdout,
            stderr,
        })
        // `process` drops here: anything the command left running is killed.
    }

    fn start(&self, spec: ShellSpec) -> Result<ShellProcess, HarnessError> {
        let cfg = self.config();
        // Background output uses the per-stream budget; `stdout_max_bytes` is for
        // foreground callers only.
        let sub_spec = self.spawn_spec(&spec, cfg.max_output_bytes, spec.cancel.clone());
        let process = self.subprocess.spawn(sub_spec)?;
        Ok(ShellProcess::new(process, spec.cancel))
    }
}

/// A background shell command. Dropping it kills the whole process tree.
pub struct ShellProcess {
    inner: Arc<Background>,
    process: Process,
}

struct Background {
    state: Mutex<BackgroundState>,
    stamped: watch::Receiver<bool>,
}

struct BackgroundState {
    status: ProcessStatus,
    exit_code: Option<i32>,
    signal: Option<Signal>,
    stdout_offset: u64,
    stderr_offset: u64,
}

impl ShellProcess {
    fn new(process: Process, cancel: Option<CancelToken>) -> ShellProcess {
        let (stamp_tx, stamp_rx) = watch::channel(false);
        let inner = Arc::new(Background {
            state: Mutex::new(BackgroundState {
                status: ProcessStatus::Running,
                exit_code: None,
                signal: None,
                stdout_offset: 0,
                stderr_offset: 0,
            }),
            stamped: stamp_rx,
        });
        let control: Arc<dyn ProcessControl> = process.control();
        let watcher = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let outcome = control.done().await;
            if let Some(bg) = watcher.upgrade() {
                let mut st = bg.lock();
                if st.status == ProcessStatus::Running {
                    let cancelled = cancel.as_ref().is_some_and(CancelToken::is_cancelled);
                    // A lost status (the command killed its own reaper) is no completion.
                    st.status = if cancelled || outcome.exit_code().is_none() {
                        ProcessStatus::Killed
                    } else {
                        ProcessStatus::Completed
                    };
                }
                st.exit_code = outcome.exit_code();
                st.signal = outcome.signal();
            }
            let _ = stamp_tx.send(true);
        });
        ShellProcess { inner, process }
    }

    /// The leader's pid.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The current status; it leaves `Running` once.
    pub fn status(&self) -> ProcessStatus {
        self.inner.lock().status
    }

    /// The exit code, once the process exited by itself.
    pub fn exit_code(&self) -> Option<i32> {
        self.inner.lock().exit_code
    }

    /// The signal that killed the process, once settled.
    pub fn signal(&self) -> Option<Signal> {
        self.inner.lock().signal
    }

    /// Completes once the process settled and its status, exit code and signal are
    /// stamped. Never fails.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn done(&self) {
        let mut rx = self.inner.stamped.clone();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Output since the previous call (consuming: a byte is delivered once), formatted as
    /// stdout then a `[stderr]` section.
    pub fn read_output(&self) -> ProcessRead {
        let mut st = self.inner.lock();
        let empty = |offset| dsh_process::OutputRead {
            text: String::new(),
            next_offset: offset,
            lossy: false,
            spill: None,
        };
        let out = self.process.stdout_capture().map_or_else(
            || empty(st.stdout_offset),
            |c| c.read_from(st.stdout_offset),
        );
        let err = self.process.stderr_capture().map_or_else(
            || empty(st.stderr_offset),
            |c| c.read_from(st.stderr_offset),
        );
        st.stdout_offset = out.next_offset;
        st.stderr_offset = err.next_offset;
        process_read(&out, &err)
    }

    /// Terminates the process: the status becomes `Killed` at once, then the tree gets
    /// SIGTERM and SIGKILL after the grace. Returns false (and does nothing) when it is no
    /// longer running. Does not wait (see [`done`](Self::done)).
    pub fn terminate(&self) -> bool {
        let mut st = self.inner.lock();
        if st.status != ProcessStatus::Running {
            return false;
        }
        st.status = ProcessStatus::Killed;
        drop(st);
        self.process.terminate();
        true
    }
}

impl Background {
    fn lock(&self) -> std::sync::MutexGuard<'_, BackgroundState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for ShellProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellProcess")
            .field("pid", &self.pid())
            .field("status", &self.status())
            .finish()
    }
}
