//! Run a command line in a shell; get back a bounded result, and render it for a model.
//!
//! [`Shell`] is the seam; [`bash::LocalBash`] and [`pwsh::LocalPwsh`] provide it, both a
//! [`ShellExecutor`] that differs only in its [`Dialect`]. Every request carries its
//! sandbox policy, resolved by the caller (there is no default): a confined mode is
//! enforced by the [`dsh_sandbox::Sandbox`] the executor was given
//! ([`ShellExecutor::with_sandbox`]), and refused without one; danger-full-access, said
//! explicitly ([`ShellRequest::unconfined`]), runs unconfined. The `bash` tool and `dsh`
//! consume it through
//! `Arc<dyn Shell>`. [`Shell::spec_for`] turns a loose [`ShellRequest`] into a checked
//! [`ShellSpec`] (defaults filled, timeout capped); [`Shell::run`] runs it in the
//! foreground under a timeout; [`Shell::start`] starts it in the background as a
//! [`ShellProcess`].
//!
//! [`render`] turns results into the model-visible text with its pinned markers
//! (`[exit code: N]`, `[timed out after Nms]`, …) and parses them back
//! ([`render::parse_exit_status`]). [`shell_env::ShellEnv`] is the registry of the
//! managed `DSH_*` facts each command receives.
//!
//! ```no_run
//! # async fn demo() -> Result<(), dsh_core::HarnessError> {
//! use std::sync::Arc;
//! use dsh_process::LocalSubprocess;
//! use dsh_shell::{bash::LocalBash, Shell, ShellRequest};
//! let shell = LocalBash::new(Arc::new(LocalSubprocess::new()));
//! let spec = shell.spec_for(ShellRequest::unconfined("echo hi; exit 3"))?;
//! let result = shell.run(spec).await?;
//! assert_eq!(dsh_shell::render::render_result(&result), "hi\n[exit code: 3]");
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//! - A non-zero exit, a timeout and a cancel are ordinary results; `timed_out` and
//!   `aborted` are never both true (the first cause wins).
//! - Memory per stream is bounded by the configured budget; the rest goes to a spill file.
//! - When `run` returns, nothing it started is still running.
//!
//! # Limits
//! - Each call is a fresh non-login, non-interactive `bash -c`: no rc files (bash still
//!   honours an ambient `BASH_ENV`).
//!
//! # Sandbox
//! A confining executor wraps each call in the request's [`SandboxPolicy`] (there is no
//! default): the sandbox's [`Confinement`](dsh_sandbox::Confinement) is spawned
//! instead of the plain `bash -c`. A runner that failed before the command ran is a
//! `SANDBOX_UNAVAILABLE` error ending in `Runner failure: <its line>`, which outranks a
//! denial; a write the sandbox refused is an ordinary result with
//! [`SandboxFacts::denied`]. danger-full-access never reaches the sandbox.
//!
//! # Errors
//! `INVALID_ARGUMENT` (a bad timeout or budget hint), `CONFIG_INVALID` (a bad
//! configuration), `ABORTED` (cancelled before start), `SANDBOX_UNAVAILABLE` (a confined
//! mode this machine cannot enforce; nothing ran), and the spawn errors of `dsh-process`
//! (`PROCESS_CWD_INVALID`, `PROCESS_NOT_FOUND`, …).
#![forbid(unsafe_code)]

pub mod bash;
pub mod conformance;
pub mod executor;
mod process;
pub mod pwsh;
pub mod render;
pub mod shell_env;

use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;
use dsh_core::{CancelToken, HarnessError};
use dsh_process::{CollectedOutput, EnvOverlay, OutputRead, Signal, SpillInfo};
use dsh_sandbox::{SandboxFacts, SandboxPolicy};

/// A command as callers ask for it: `command` and its sandbox policy are required; the
/// executor fills and checks the rest in [`Shell::spec_for`].
#[derive(Clone, Debug)]
pub struct ShellRequest {
    /// Shell source, run as `bash -c command`.
    pub command: String,
    /// Working directory. Default: the executor's configured cwd, else the host cwd.
    pub workdir: Option<PathBuf>,
    /// Timeout hint in milliseconds; capped by the executor. Default: its configured
    /// default.
    pub timeout_ms: Option<f64>,
    /// In-memory stdout budget for a foreground run (trusted callers only; never taken
    /// from a model). Default: the executor's per-stream budget.
    pub stdout_max_bytes: Option<usize>,
    /// Cancels the run. Default: none.
    pub cancel: Option<CancelToken>,
    /// Bytes written to stdin, then end-of-file. Default: none (`/dev/null`).
    pub stdin: Option<Vec<u8>>,
    /// Ordinary environment overlay (after the scrub). Default: none.
    pub env: Option<EnvOverlay>,
    /// The managed `DSH_*` facts, applied last. Default: none.
    pub dsh_env: Option<BTreeMap<String, String>>,
    /// The sandbox policy of this call, resolved by the caller (the World's policy
    /// service): there is no default. A confined mode on an executor without a sandbox
    /// ([`ShellExecutor::with_sandbox`]) is `SANDBOX_UNAVAILABLE`; danger-full-access
    /// ([`SandboxPolicy::danger_full_access`]) runs unconfined.
    pub sandbox: SandboxPolicy,
}

impl ShellRequest {
    /// A request for `command` run unconfined (danger-full-access, said here rather than
    /// assumed), with every other field at its default.
    pub fn unconfined(command: impl Into<String>) -> ShellRequest {
        ShellRequest::new(
            command,
            SandboxPolicy::danger_full_access(std::path::Path::new("/")),
        )
    }

    /// A request for `command` under `sandbox`, with every other field at its default.
    pub fn new(command: impl Into<String>, sandbox: SandboxPolicy) -> ShellRequest {
        ShellRequest {
            command: command.into(),
            workdir: None,
            timeout_ms: None,
            stdout_max_bytes: None,
            cancel: None,
            stdin: None,
            env: None,
            dsh_env: None,
            sandbox,
        }
    }
}

/// A request after [`Shell::spec_for`]: defaults applied, hints checked and capped.
#[derive(Clone, Debug)]
pub struct ShellSpec {
    /// Shell source.
    pub command: String,
    /// Working directory.
    pub workdir: PathBuf,
    /// Effective timeout in milliseconds (after default and cap).
    pub timeout_ms: u64,
    /// In-memory stdout budget for a foreground run.
    pub stdout_max_bytes: usize,
    /// Cancels the run.
    pub cancel: Option<CancelToken>,
    /// Bytes for stdin.
    pub stdin: Option<Vec<u8>>,
    /// Environment overlay.
    pub env: Option<EnvOverlay>,
    /// Managed `DSH_*` facts.
    pub dsh_env: Option<BTreeMap<String, String>>,
    /// The sandbox policy.
    pub sandbox: SandboxPolicy,
}

/// The result of a foreground run. A non-zero exit, a timeout or a cancel is a normal
/// result that says so.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct RunResult {
    /// The exit code, when the shell exited.
    pub exit_code: Option<i32>,
    /// The signal, when one killed the shell.
    pub signal: Option<Signal>,
    /// The executor's own timeout was the first cause of the stop.
    pub timed_out: bool,
    /// The caller's cancel was the first cause of the stop. Never true with `timed_out`.
    pub aborted: bool,
    /// The effective timeout in milliseconds.
    pub timeout_ms: u64,
    /// Captured stdout (the tail when truncated).
    pub stdout: CollectedOutput,
    /// Captured stderr (the tail when truncated).
    pub stderr: CollectedOutput,
    /// How the sandbox treated the run; `None` when the call had no policy.
    pub sandbox: Option<SandboxFacts>,
    /// What a run in a persistent shell adds; `None` for a fresh shell per run.
    pub persistent: Option<PersistentRun>,
}

impl RunResult {
    /// The result of a command run in a persistent shell: `output` is what the command
    /// printed (both streams, as the shell's terminal merged them), already within the
    /// caller's budget ([`render::clipped_tail`]); `exit_code` is the command's status
    /// when it finished; `run.reset` says why the shell was reset when it did not.
    pub fn in_persistent_shell(
        output: String,
        exit_code: Option<i32>,
        timeout_ms: u64,
        sandbox: Option<SandboxFacts>,
        run: PersistentRun,
    ) -> RunResult {
        let total_bytes = output.len() as u64;
        RunResult {
            exit_code,
            signal: None,
            timed_out: run.reset == Some(ShellReset::TimedOut),
            aborted: run.reset == Some(ShellReset::Aborted),
            timeout_ms,
            stdout: CollectedOutput {
                text: output,
                truncated: false,
                total_bytes,
                spill: None,
            },
            stderr: CollectedOutput::default(),
            sandbox,
            persistent: Some(run),
        }
    }
}

/// What a run in a persistent shell adds to its [`RunResult`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistentRun {
    /// The id of the shell the command ran in (its terminal's).
    pub shell_id: String,
    /// Why the shell was reset (closed; the next run starts a fresh one), if it was.
    pub reset: Option<ShellReset>,
    /// Why the run had a fresh shell where the last run left one, if it did: its working
    /// directory and variables were lost.
    pub fresh: Option<FreshShell>,
}

/// Why a run in a persistent shell had a fresh shell where the last run left one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreshShell {
    /// The run's sandbox policy differs from the one the shell was opened under.
    PolicyChanged,
    /// The last run was cancelled (or given up on), which closed its shell, and nobody was
    /// told.
    AfterCancel,
}

/// Why a persistent shell was reset after a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShellReset {
    /// The command ran past its timeout.
    TimedOut,
    /// The caller cancelled the run.
    Aborted,
    /// The shell itself ended (`exit`, a signal).
    Exited {
        /// Its exit code, when it exited.
        code: Option<i32>,
        /// The signal's name, when one killed it.
        signal: Option<String>,
    },
    /// A program waited for input the shell cannot give (what the next run typed would
    /// go to it).
    WaitsForInput,
}

/// The state of a background process; it leaves `Running` once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessStatus {
    /// Still running.
    Running,
    /// Exited by itself (any exit code).
    Completed,
    /// Killed: by [`ShellProcess::terminate`], by its cancel token, or by any signal
    /// (including one it sent itself).
    Killed,
}

/// One consuming read of a background process's output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessRead {
    /// New output since the last read: stdout, then `[stderr]\n` and stderr when there is
    /// any (with a `\n` before it if stdout did not end with one).
    pub delta: String,
    /// True when some output slid out of memory before it was read.
    pub lossy: bool,
    /// The stdout spill file, if one exists.
    pub stdout_spill: Option<SpillInfo>,
    /// The stderr spill file, if one exists.
    pub stderr_spill: Option<SpillInfo>,
}

/// The shell seam: a request's spec, run in the foreground, started in the background.
///
/// # For implementors
/// All three methods are required. A provider owns the defaults and caps, classifies why a
/// run stopped (`timed_out` vs `aborted`, first cause wins), keeps output memory within
/// its budgets, and leaves nothing running when `run` returns. It must not hold a sandbox
/// policy of its own: policy arrives with each call.
#[async_trait]
pub trait Shell: Send + Sync {
    /// The spec `request` runs as: defaults filled, hints checked.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a non-positive or non-finite timeout or a zero budget;
    /// `PROCESS_CWD_INVALID` when no workdir is given and the host's current directory is
    /// unusable.
    fn spec_for(&self, request: ShellRequest) -> Result<ShellSpec, HarnessError>;

    /// Runs `spec` in the foreground under its timeout. A non-zero exit, a timeout and a
    /// cancel are reported in `Ok`.
    ///
    /// # Errors
    /// Only infrastructure failures: `ABORTED` (cancelled before start),
    /// `INVALID_ARGUMENT` (a NUL byte in the command or environment),
    /// `PROCESS_CWD_INVALID`, `PROCESS_NOT_FOUND` (no shell), `PROCESS_NOT_EXECUTABLE`,
    /// `PROCESS_SPAWN_FAILED`.
    ///
    /// # Cancel safety
    /// Dropping the future kills the whole process tree.
    async fn run(&self, spec: ShellSpec) -> Result<RunResult, HarnessError>;

    /// Starts `spec` in the background, with no timeout, and returns at once.
    ///
    /// # Errors
    /// As [`run`](Shell::run): a command that cannot start is an error here, never a
    /// background process that failed.
    ///
    /// # Panics
    /// Outside a tokio runtime (the process is watched by a task).
    fn start(&self, spec: ShellSpec) -> Result<ShellProcess, HarnessError>;
}

pub use executor::{Dialect, ShellConfig, ShellExecutor};
pub use process::ShellProcess;

/// Formats a stdout/stderr pair as one delta: stdout, then `[stderr]\n` + stderr when
/// stderr is non-empty, with a `\n` between them when stdout is non-empty and lacks one.
pub fn join_streams(stdout: &str, stderr: &str) -> String {
    let mut out = String::with_capacity(stdout.len() + stderr.len() + 10);
    out.push_str(stdout);
    if !stderr.is_empty() {
        if !stdout.is_empty() && !stdout.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("[stderr]\n");
        out.push_str(stderr);
    }
    out
}

/// Combines two stream reads into one [`ProcessRead`].
pub fn process_read(stdout: &OutputRead, stderr: &OutputRead) -> ProcessRead {
    ProcessRead {
        delta: join_streams(&stdout.text, &stderr.text),
        lossy: stdout.lossy || stderr.lossy,
        stdout_spill: stdout.spill.clone(),
        stderr_spill: stderr.spill.clone(),
    }
}
