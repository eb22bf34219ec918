//! Terminals that survive across calls: a shell on a PTY a model can type into,
//! read from, interrupt and close, and that knows, from the kernel, when the program in
//! it is waiting for input.
//!
//! A model on a one-shot `bash` tool cannot drive a REPL, answer a prompt, keep a
//! debugger open, or keep `cd` and `export` between calls. A terminal can: the
//! shell lives on between sends, and each send returns when the program is ready for
//! more, not at a fixed deadline.
//!
//! - [`Terminals`] is the seam (`ctx.terminals`): the registry of terminals, each owned by
//!   one [`Owner`] (an MCP connection), with ids `pty-1`, `pty-2`, … per owner, names
//!   unique per owner, one send at a time per terminal, and a bounded number of terminals
//!   per owner. Another owner can neither see nor touch a terminal.
//! - [`Terminal`] is one terminal: the program's output (as lines in a bounded
//!   scrollback, and as a rendered screen for full-screen programs), and sends that
//!   settle with a [`WaitReason`].
//! - [`BashBackend`] starts terminals: `bash` on a PTY from the subprocess seam, with a
//!   controlled prompt and a marker the shell prints before each one, confined by the
//!   sandbox policy it is given.
//!
//! # Guarantees
//! - Readiness comes from the kernel first: the prompt tier (the shell's own marker and
//!   prompt, with the shell's group back in the foreground) and the kernel tier (the
//!   foreground group blocked reading the terminal, news since the write) settle
//!   `stdin_read`; silence settles `inferred_idle`; the deadline settles `timeout`.
//! - Cancelling a send sends a real SIGINT to the foreground group, never a `\x03` byte,
//!   so a program in raw mode is interrupted too.
//! - Closing a terminal, or disposing of its owner or of the service, ends its whole
//!   process tree (a `setsid` daemon and a TERM-ignoring child included) before it
//!   returns.
//! - Memory is bounded whatever a program prints: the scrollback by lines and bytes, a
//!   send's output and a read page by `max_read_bytes`, the screen by its size.
//!
//! # Limits
//! - Linux (PTYs from `dsh-process`; the kernel tier reads `/proc` on x86_64 and
//!   aarch64). Elsewhere only the prompt and silence tiers apply.
//! - `inferred_idle` and `timeout` do not prove the foreground command ended.

mod background_send;
mod bash;
mod config;
pub mod persistent;
mod registry;
pub mod sanitizer;
mod screen;
mod scrollback;
pub mod terminal;

pub use background_send::{BackgroundSend, SendDelta, SendReader};
pub use bash::BashBackend;
pub use config::{TerminalConfig, MAX_SIDE};
pub use dsh_core::Owner;
pub use persistent::PersistentBash;
pub use registry::{
    CloseOutcome, OpenRequest, Opened, Snapshot, SpawnRequest, TerminalBackend, Terminals,
};
pub use scrollback::{ReadPage, Scrollback};
pub use terminal::{Terminal, PROMPT};

use std::time::Duration;

use dsh_core::HarnessError;

/// What a send writes and how long it may take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendRequest {
    /// The text to type.
    pub text: String,
    /// Whether to press Enter after it (`\r`).
    pub submit: bool,
    /// The send's deadline, from its start.
    pub timeout: Duration,
}

/// How a send settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendResult {
    /// What the program printed since the last send settled (its tail, within
    /// `max_read_bytes`), or, while a full-screen program has the alternate screen, the
    /// screen as a person sees it.
    pub viewport: String,
    /// Why the send settled.
    pub wait: WaitReason,
    /// The terminal at that moment.
    pub status: TerminalStatus,
    /// Whether some of this send's output was dropped (more than `max_read_bytes` came).
    pub truncated: bool,
}

dsh_core::id_type! {
    /// Names one terminal (`pty-1`, …), unique within its owner.
    pub struct TerminalId;
}

/// Why a send settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitReason {
    /// The program is waiting for input: the shell's prompt came back, or the kernel
    /// shows the foreground group blocked reading the terminal since the write.
    StdinRead,
    /// Nothing was printed for the silence period; the program may still be working.
    InferredIdle,
    /// The send's deadline passed; the program may still be working.
    Timeout,
    /// The terminal's shell exited, or the terminal was closed.
    SessionExit,
}

impl WaitReason {
    /// `stdin_read`, `inferred_idle`, `timeout` or `session_exit`.
    pub const fn as_str(self) -> &'static str {
        match self {
            WaitReason::StdinRead => "stdin_read",
            WaitReason::InferredIdle => "inferred_idle",
            WaitReason::Timeout => "timeout",
            WaitReason::SessionExit => "session_exit",
        }
    }
}

/// A terminal's state: running, or how its shell ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TerminalStatus {
    /// The shell runs.
    Running,
    /// The shell ended: its exit code, or the signal that killed it (both `None` when
    /// the terminal failed).
    Exited {
        /// The exit code, if it exited.
        code: Option<i32>,
        /// The signal's name (`SIGKILL`), if one killed it.
        signal: Option<String>,
    },
}

impl std::fmt::Display for TerminalStatus {
    /// `running`, or `exited code=<code|null> signal=<signal|null>`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TerminalStatus::Running => f.write_str("running"),
            TerminalStatus::Exited { code, signal } => write!(
                f,
                "exited code={} signal={}",
                code.map_or_else(|| "null".to_owned(), |c| c.to_string()),
                signal.as_deref().unwrap_or("null")
            ),
        }
    }
}

/// The signals a model may send to a terminal's foreground group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TerminalSignal {
    /// Interrupt (Ctrl-C).
    Int,
    /// Polite termination.
    Term,
    /// Forced kill (refused for the shell's own group: close the terminal instead).
    Kill,
    /// Stop (Ctrl-Z).
    Tstp,
    /// Hangup.
    Hup,
}

impl TerminalSignal {
    /// Every signal, in the order of the tool's schema.
    pub const ALL: [TerminalSignal; 5] = [
        TerminalSignal::Int,
        TerminalSignal::Term,
        TerminalSignal::Kill,
        TerminalSignal::Tstp,
        TerminalSignal::Hup,
    ];

    /// `SIGINT`, `SIGTERM`, `SIGKILL`, `SIGTSTP` or `SIGHUP`.
    pub const fn as_str(self) -> &'static str {
        match self {
            TerminalSignal::Int => "SIGINT",
            TerminalSignal::Term => "SIGTERM",
            TerminalSignal::Kill => "SIGKILL",
            TerminalSignal::Tstp => "SIGTSTP",
            TerminalSignal::Hup => "SIGHUP",
        }
    }

    /// The signal's number.
    pub const fn number(self) -> i32 {
        match self {
            TerminalSignal::Int => libc::SIGINT,
            TerminalSignal::Term => libc::SIGTERM,
            TerminalSignal::Kill => libc::SIGKILL,
            TerminalSignal::Tstp => libc::SIGTSTP,
            TerminalSignal::Hup => libc::SIGHUP,
        }
    }

    /// The signal named `name`.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming the five accepted names.
    pub fn parse(name: &str) -> Result<TerminalSignal, HarnessError> {
        TerminalSignal::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| {
                HarnessError::invalid_argument(format!(
                    "unknown signal {:?}: use one of SIGINT, SIGTERM, SIGKILL, SIGTSTP, SIGHUP",
                    dsh_core::visible::visible(name)
                ))
            })
    }
}
