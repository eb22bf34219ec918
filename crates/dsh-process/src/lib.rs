//! Run a program as a managed process tree: no shell, a scrubbed environment, bounded
//! output, and nothing left running afterwards.
//!
//! [`Subprocess`] is the seam; [`LocalSubprocess`] provides it on this machine; the shell
//! executors (`dsh-shell`) and the CLI consume it through `Arc<dyn Subprocess>`.
//!
//! A [`SpawnSpec`] names the argv (never shell-interpreted), the working directory, what
//! to do with each stdio stream ([`StdinMode`], [`OutputMode`]), the TERM→KILL grace and
//! an optional [`CancelToken`]. [`Subprocess::spawn`] returns a [`Process`] at once: its
//! [`done`](Process::done) settles with the leader's [`Outcome`]; its captured streams
//! ([`Capture`]) can be read from any offset while it runs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), dsh_core::HarnessError> {
//! use dsh_process::{LocalSubprocess, OutputMode, SpawnSpec, Subprocess, CaptureLimits};
//! let sub = LocalSubprocess::new();
//! let mut spec = SpawnSpec::new(["printf", "%s", "$HOME"], "/");
//! spec.stdout = OutputMode::Collect(CaptureLimits { max_bytes: 64_000, max_spill_bytes: None });
//! let p = sub.spawn(spec)?;
//! let outcome = p.done().await;
//! assert_eq!(outcome.exit_code(), Some(0));
//! assert_eq!(p.stdout_capture().map(|c| c.collected().text), Some("$HOME".to_string()));
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//! - Every descendant of a command (a `setsid` daemon, a double-forked grandchild) is
//!   attributed to that command exactly, by a cgroup v2 per command where this process
//!   may create cgroups, and always by a per-command child subreaper
//!   ([`TreeMechanism`]); [`Process::terminate`] reaches all of them and signals nothing
//!   else.
//! - Nothing started survives its owner: dropping the last handle of a [`Process`], or the
//!   dsh process dying by any means (even SIGKILL), SIGKILLs the whole tree.
//! - [`Process::done`] settles at most `grace` after the leader exits, even if a
//!   descendant still holds the output pipes.
//! - Where this process may create cgroups with the `pids` controller, a command and all
//!   its descendants are at most [`DEFAULT_PROCESS_LIMIT`] processes and threads (see
//!   [`LocalSubprocess::with_process_limit`]): a fork bomb stops there.
//! - Captured output costs at most `max_bytes` of memory per stream, whatever the
//!   command prints; the spill file holds at most `max_spill_bytes`.
//! - A command's environment is the host's without `DSH_*` names, credential-shaped
//!   names and values holding a URL with a password (the [`env`](mod@env) module lists
//!   the rules), except the names the host program lets through ([`EnvAllow`]), plus
//!   the spec's overlay, which wins over every rule.
//!
//! # Limits
//! - Linux only: the subreaper, `/proc/thread-self/children` and `signalfd` are Linux
//!   facilities.
//! - The graceful SIGTERM reaches the leader's process group and the processes already
//!   re-parented to the reaper; a descendant that left the group while its parent is
//!   still alive gets only the SIGKILL after the grace.
//! - The environment scrub judges the shape of names and values: a credential under a
//!   plain name in a plain value reaches the command. The sandbox, not the scrub, is
//!   what confines it.
//!
//! # Errors
//! `INVALID_ARGUMENT` (empty argv, bad grace), `ABORTED` (cancelled before spawn),
//! `PROCESS_CWD_INVALID`, `PROCESS_NOT_FOUND`, `PROCESS_NOT_EXECUTABLE`,
//! `PROCESS_SPAWN_FAILED`. A non-zero exit or a signal death is an [`Outcome`], not an
//! error. `CONFIG_INVALID` from [`EnvAllow::new`] for a name that cannot be let through.

pub mod capture;
mod cgroup;
mod clone3;
mod control;
pub mod env;
mod exec_plan;
pub mod foreground;
mod local;
mod pids_v1;
mod program;
pub mod pty;
mod reaper;
mod reaper_memory;

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{CancelToken, HarnessError};
use tokio::io::{AsyncRead, AsyncWrite};

pub use capture::{Capture, CaptureLimits, CollectedOutput, OutputRead, SpillInfo, StreamName};
pub use env::{EnvAllow, EnvOverlay};
pub use foreground::Foreground;
pub use local::{LocalSubprocess, ProcessLimit, DEFAULT_PROCESS_LIMIT};
pub use pty::{Pty, TerminalSize};

/// The process seam: executable lookup and managed spawns of whole process trees.
///
/// # For implementors
/// Every method is required. A provider must: apply no defaults of its own (everything
/// arrives on the [`SpawnSpec`]); never interpret argv through a shell; own each spawned
/// tree so that [`Process::terminate`] and dropping the last handle reach every
/// descendant and nothing else; keep capture memory within the spec's limits; and make
/// [`shutdown`](Subprocess::shutdown) reach quiescence, not merely request it.
#[async_trait]
pub trait Subprocess: Send + Sync {
    /// The executable `command` names, searching `PATH` from the child
    /// environment (`env` applied) for a bare name.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` (`executable must be non-empty`, or `command "<c>" is a relative
    /// path; use an absolute path or a bare PATH name`), `PROCESS_NOT_EXECUTABLE`
    /// (`command "<c>" is not an executable file`), `PROCESS_NOT_FOUND` (`command "<c>" was
    /// not found on PATH`).
    fn find_program(&self, command: &OsStr, env: &EnvOverlay) -> Result<PathBuf, HarnessError>;

    /// Starts `spec` and returns at once.
    ///
    /// # Errors
    /// Checked before anything runs, in this order: `INVALID_ARGUMENT` for a grace outside
    /// `(0, 2147483647]` ms; `ABORTED` when the cancel token already fired
    /// (`aborted before spawn: <reason>`); `INVALID_ARGUMENT` for an empty argv or
    /// `argv[0]`; `PROCESS_CWD_INVALID`; then `PROCESS_NOT_FOUND` /
    /// `PROCESS_NOT_EXECUTABLE` / `PROCESS_SPAWN_FAILED`. A NUL byte in argv or the
    /// environment is `INVALID_ARGUMENT`.
    ///
    /// # Panics
    /// Outside a tokio runtime with IO and time enabled (the tree is watched by a task).
    fn spawn(&self, spec: SpawnSpec) -> Result<Process, HarnessError>;

    /// How this provider attributes descendants to their command.
    fn tree_mechanism(&self) -> TreeMechanism;

    /// Terminates every live tree (TERM, then KILL after its grace) and waits until each
    /// is gone.
    ///
    /// # Cancel safety
    /// Dropping the future stops the waiting; the terminations already sent proceed.
    async fn shutdown(&self);

    /// Kills every live tree at once (KILL, no grace: what owned them is gone) and waits
    /// until each is gone.
    ///
    /// # Cancel safety
    /// Dropping the future stops the waiting; the kills are sent already.
    async fn kill_all(&self);
}

/// How a provider finds every descendant of a command.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeMechanism {
    /// A per-command child subreaper: orphans re-parent to a small reaper process that
    /// belongs to the command alone, which kills them on request and exits when its tree
    /// is empty.
    Subreaper,
    /// A cgroup v2 per command, killed at once through `cgroup.kill`, with the
    /// per-command subreaper still reporting the leader's status and quiescence.
    Cgroup,
}

impl TreeMechanism {
    /// A short name for reports (`subreaper`, `cgroup`).
    pub fn as_str(self) -> &'static str {
        match self {
            TreeMechanism::Subreaper => "subreaper",
            TreeMechanism::Cgroup => "cgroup",
        }
    }
}

/// What a child reads on standard input.
#[derive(Clone, Debug, Default)]
pub enum StdinMode {
    /// `/dev/null`: a reader sees end-of-file at once. Default.
    #[default]
    Ignore,
    /// The parent's own standard input (e.g. the terminal, or a pipe into `dsh exec`).
    Inherit,
    /// These bytes, then end-of-file. A child that never reads them is not an error.
    Data(Vec<u8>),
    /// A pipe the caller writes through [`Process::take_stdin`].
    Pipe,
}

/// Where a child's stdout or stderr goes.
#[derive(Clone, Debug)]
pub enum OutputMode {
    /// A raw pipe the caller reads through [`Process::take_stdout`] / `take_stderr`.
    Pipe,
    /// The parent's own descriptor (e.g. the terminal).
    Inherit,
    /// Bounded capture into a [`Capture`].
    Collect(CaptureLimits),
}

/// Everything a spawn needs. Build with [`SpawnSpec::new`], then set fields.
#[derive(Clone, Debug)]
pub struct SpawnSpec {
    /// The program and its arguments, passed verbatim (no shell).
    pub argv: Vec<OsString>,
    /// The working directory; it must exist.
    pub cwd: PathBuf,
    /// Standard input. Default: [`StdinMode::Ignore`].
    pub stdin: StdinMode,
    /// Standard output. Default: [`OutputMode::Inherit`].
    pub stdout: OutputMode,
    /// Standard error. Default: [`OutputMode::Inherit`].
    pub stderr: OutputMode,
    /// Overlay on the scrubbed host environment. Default: empty.
    pub env: EnvOverlay,
    /// SIGTERM→SIGKILL grace; also bounds the wait for pipes to drain after the leader
    /// exits. Default: 3 s.
    pub grace: Duration,
    /// Cancelling it terminates the tree (TERM, then KILL after `grace`). Default: none.
    pub cancel: Option<CancelToken>,
    /// Sandbox restrictions the command's first process applies to itself before `exec`
    /// (a [`Confinement`](dsh_sandbox::Confinement)'s). If they cannot be applied the
    /// command does not run and the spawn fails with `SANDBOX_UNAVAILABLE`; a provider
    /// that cannot apply them at all refuses the spawn the same way. Default: none.
    pub restrictions: Option<Arc<dsh_sandbox::ChildRestrictions>>,
    /// Whether the command gets a cgroup of its own where the provider can make one. A
    /// command whose tree is already bounded exactly (bubblewrap's PID namespace, which
    /// the kernel kills whole when its first process dies) can do without, and start
    /// faster; it still gets one where its provider's process limit lives in it.
    /// Default: true.
    pub own_cgroup: bool,
    /// Runs the command on a terminal of its own of this size: a new PTY whose terminal
    /// side is its stdin, stdout, stderr and controlling terminal, in a session the
    /// leader starts (see the [`pty`] module). `stdin`, `stdout` and `stderr` are then
    /// not used; [`Process::take_terminal`] gives dsh's side. Default: none.
    pub terminal: Option<TerminalSize>,
}

impl SpawnSpec {
    /// A spec for `argv` in `cwd` with the defaults listed on each field.
    pub fn new<I, S>(argv: I, cwd: impl Into<PathBuf>) -> SpawnSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        SpawnSpec {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: cwd.into(),
            stdin: StdinMode::Ignore,
            stdout: OutputMode::Inherit,
            stderr: OutputMode::Inherit,
            env: EnvOverlay::new(),
            grace: Duration::from_millis(3000),
            cancel: None,
            restrictions: None,
            own_cgroup: true,
            terminal: None,
        }
    }

    /// The spec run inside `confinement`: its argv (the runner's, around the command), its
    /// variables over the spec's own, its restrictions for the child, and who bounds the
    /// tree (a runner with a PID namespace of its own does; else dsh's per-command cgroup).
    /// The one place a confinement becomes a spawn.
    pub fn confined_by(mut self, confinement: &dsh_sandbox::Confinement) -> SpawnSpec {
        self.argv = confinement.argv.clone();
        for (k, v) in &confinement.env {
            self.env.insert(
                k.to_string_lossy().into_owned(),
                Some(v.to_string_lossy().into_owned()),
            );
        }
        self.restrictions = confinement.restrictions.clone();
        self.own_cgroup = !confinement.bounds_tree;
        self
    }
}

/// A signal number, printed by name (`SIGTERM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Signal(pub i32);

impl Signal {
    /// The signal's name, `SIGTERM`, or `SIG<n>` for a number without one.
    pub fn name(self) -> String {
        signal_name(self.0).map_or_else(|| format!("SIG{}", self.0), str::to_owned)
    }
}

fn signal_name(n: i32) -> Option<&'static str> {
    Some(match n {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGTTIN => "SIGTTIN",
        libc::SIGTTOU => "SIGTTOU",
        libc::SIGURG => "SIGURG",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGWINCH => "SIGWINCH",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        libc::SIGSYS => "SIGSYS",
        _ => return None,
    })
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// How the command's leader ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It exited with this code.
    Exited(i32),
    /// It was killed by this signal.
    Signaled(Signal),
    /// Its status could not be learnt: the reaper itself was killed from outside dsh
    /// before reporting it.
    Lost,
}

impl Outcome {
    /// The exit code, when it exited.
    pub fn exit_code(self) -> Option<i32> {
        match self {
            Outcome::Exited(c) => Some(c),
            _ => None,
        }
    }

    /// The signal, when one killed it.
    pub fn signal(self) -> Option<Signal> {
        match self {
            Outcome::Signaled(s) => Some(s),
            _ => None,
        }
    }
}

/// What a provider does for one spawned tree; [`Process`] wraps it.
///
/// # For implementors
/// All methods are required. `terminate` and `kill` never block and are idempotent; once
/// the tree is gone they send nothing (a guard against pid reuse). [`Process`] calls
/// `kill` when it is dropped; a provider should also kill the tree when its host process
/// dies.
#[async_trait]
pub trait ProcessControl: Send + Sync {
    /// The leader's pid.
    fn pid(&self) -> u32;
    /// Settles with the leader's outcome, at most `grace` after the leader exits.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future stops only the waiting.
    async fn done(&self) -> Outcome;
    /// The outcome if `done` has settled, without waiting.
    fn outcome(&self) -> Option<Outcome>;
    /// True once the leader has exited, which may be before `done` settles (while a
    /// descendant still holds the output pipes).
    fn leader_exited(&self) -> bool;
    /// SIGTERM to the tree now, SIGKILL after the grace if anything is left. Does not
    /// wait.
    fn terminate(&self);
    /// SIGKILL to the whole tree now. Does not wait.
    fn signal_kill(&self);
    /// True once every process of the tree is gone.
    fn is_tree_gone(&self) -> bool;
    /// Completes when every process of the tree is gone.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future stops only the waiting.
    async fn wait_for_exit(&self);
}

/// One spawned process tree, and its owner: dropping the `Process` SIGKILLs the whole
/// tree (a no-op once it is gone). [`Process::control`] hands out non-owning controls for
/// observers and terminators.
pub struct Process {
    control: Arc<dyn ProcessControl>,
    stdin: Option<Box<dyn AsyncWrite + Send + Sync + Unpin>>,
    stdout: Option<Box<dyn AsyncRead + Send + Sync + Unpin>>,
    stderr: Option<Box<dyn AsyncRead + Send + Sync + Unpin>>,
    stdout_capture: Option<Arc<Capture>>,
    stderr_capture: Option<Arc<Capture>>,
    terminal: Option<Pty>,
}

impl Process {
    /// Assembles a process from a provider's parts.
    pub fn from_parts(
        control: Arc<dyn ProcessControl>,
        stdin: Option<Box<dyn AsyncWrite + Send + Sync + Unpin>>,
        stdout: Option<Box<dyn AsyncRead + Send + Sync + Unpin>>,
        stderr: Option<Box<dyn AsyncRead + Send + Sync + Unpin>>,
        stdout_capture: Option<Arc<Capture>>,
        stderr_capture: Option<Arc<Capture>>,
    ) -> Process {
        Process {
            control,
            stdin,
            stdout,
            stderr,
            stdout_capture,
            stderr_capture,
            terminal: None,
        }
    }

    /// The process with dsh's side of its terminal (for a provider's spawn with
    /// [`SpawnSpec::terminal`]).
    pub fn with_terminal(mut self, terminal: Pty) -> Process {
        self.terminal = Some(terminal);
        self
    }

    /// dsh's side of the command's terminal, for [`SpawnSpec::terminal`] (once).
    /// Dropping it hangs the terminal up.
    pub fn take_terminal(&mut self) -> Option<Pty> {
        self.terminal.take()
    }

    /// The pid of the command's leader (the program `argv[0]` names).
    pub fn pid(&self) -> u32 {
        self.control.pid()
    }

    /// A shared handle to control and observe the tree (terminate, wait) from elsewhere.
    /// It does not own the tree: dropping the `Process` still kills it.
    pub fn control(&self) -> Arc<dyn ProcessControl> {
        self.control.clone()
    }

    /// Settles with the leader's outcome, at most `grace` after the leader exits, even if
    /// a descendant still holds the output pipes. Captures are sealed by then.
    ///
    /// # Cancel safety
    /// Cancel safe: the process is unaffected.
    pub async fn done(&self) -> Outcome {
        self.control.done().await
    }

    /// SIGTERM to the whole tree, then SIGKILL after the grace to whatever is left, even
    /// after the leader has settled. Idempotent; a no-op once the tree is gone. Does not
    /// wait.
    pub fn terminate(&self) {
        self.control.terminate();
    }

    /// SIGKILL to the whole tree now. Does not wait (see
    /// [`wait_for_exit`](Self::wait_for_exit)).
    pub fn signal_kill(&self) {
        self.control.signal_kill();
    }

    /// True once every process of the tree is gone.
    pub fn is_tree_gone(&self) -> bool {
        self.control.is_tree_gone()
    }

    /// True once the leader has exited, which may be before [`done`](Self::done) settles
    /// (while a descendant still holds the output pipes).
    pub fn leader_exited(&self) -> bool {
        self.control.leader_exited()
    }

    /// Completes when every process of the tree is gone.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn wait_for_exit(&self) {
        self.control.wait_for_exit().await;
    }

    /// The stdin pipe, for [`StdinMode::Pipe`] (once).
    pub fn take_stdin(&mut self) -> Option<Box<dyn AsyncWrite + Send + Sync + Unpin>> {
        self.stdin.take()
    }

    /// The raw stdout pipe, for [`OutputMode::Pipe`] (once).
    pub fn take_stdout(&mut self) -> Option<Box<dyn AsyncRead + Send + Sync + Unpin>> {
        self.stdout.take()
    }

    /// The raw stderr pipe, for [`OutputMode::Pipe`] (once).
    pub fn take_stderr(&mut self) -> Option<Box<dyn AsyncRead + Send + Sync + Unpin>> {
        self.stderr.take()
    }

    /// The final stdout and stderr captures (empty for streams that were not collected).
    pub fn collected(&self) -> (CollectedOutput, CollectedOutput) {
        let get = |c: Option<&Arc<Capture>>| c.map(|c| c.collected()).unwrap_or_default();
        (
            get(self.stdout_capture.as_ref()),
            get(self.stderr_capture.as_ref()),
        )
    }

    /// The stdout capture, for [`OutputMode::Collect`].
    pub fn stdout_capture(&self) -> Option<&Arc<Capture>> {
        self.stdout_capture.as_ref()
    }

    /// The stderr capture, for [`OutputMode::Collect`].
    pub fn stderr_capture(&self) -> Option<&Arc<Capture>> {
        self.stderr_capture.as_ref()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.control.signal_kill();
    }
}

impl fmt::Debug for Process {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}
