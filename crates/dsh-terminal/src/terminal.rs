//! One terminal: a program on a PTY, its output, and sends that know when the
//! program is waiting for input.
//!
//! # Readiness
//! A send writes its text and then looks at the terminal (after 2 ms, then 4, 8, … up to
//! the poll interval: the reference waits a whole interval first, which made every
//! answer cost at least 50 ms) until one of these holds (the first wins):
//! 1. `session_exit`: the program that leads the terminal has exited, or the terminal is
//!    being closed.
//! 2. `stdin_read`, prompt tier: the shell printed its prompt marker after the write,
//!    then exactly its prompt (`dsh> `), nothing followed for one look's pause, and the
//!    shell's own group holds the terminal again.
//! 3. `stdin_read`, kernel tier: from `exact_probe_after` on, the foreground group is
//!    blocked reading the terminal, and that is news since the write: another group than
//!    before, or the same one after it was seen not waiting, or after it made more read
//!    system calls than before the write (it read the input and waits again: a REPL
//!    answering `x = 41` within one poll interval).
//! 4. `inferred_idle`: no output for `idle_silence` (plus `handoff_grace` once a marker
//!    was seen while a child held the terminal).
//! 5. `timeout`: the send's deadline passed, whatever the output.
//!
//! A cancelled send gets a real SIGINT sent to the foreground group (never a `\x03`
//! byte), and then settles as above, usually on the prompt coming back. Cancelling a
//! background send is a kill: what the send started (see `Kill`) and still runs 2 s after the
//! interrupt gets SIGTERM, then SIGKILL 2 s later (never what ran before the send), and
//! meanwhile only the prompt settles the send, or the kill's own deadline.
//!
//! # Memory
//! The scrollback, a send's output and the screen are each bounded (see
//! [`TerminalConfig`]); a program printing without end costs CPU, not memory.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_core::{CancelToken, ErrorCode, HarnessError};
use std::collections::{HashMap, HashSet};

use dsh_process::foreground::{Member, StartMark};
use dsh_process::{Foreground, Outcome, Process, ProcessControl, Pty};
use tokio::time::Instant;

use crate::background_send::{BackgroundSend, SendDelta, SendOutput, SendReader};
use crate::sanitizer::Sanitizer;
use crate::screen::Screen;
use crate::scrollback::{floor_boundary, ReadPage, Scrollback};
use crate::{SendRequest, SendResult, TerminalConfig, TerminalStatus, WaitReason};

/// The first pause between a send's looks at the terminal; each next one doubles, up to
/// the poll interval.
const FIRST_STEP: Duration = Duration::from_millis(2);

/// The longest a send waits for one look at the foreground group.
const INSPECT_LIMIT: Duration = Duration::from_millis(500);

/// How often a killed background send looks again at what it started (each look walks
/// every process on the terminal).
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// How long what a killed background send started may run after each signal (SIGINT,
/// then SIGTERM) before it gets the next (SIGTERM, then SIGKILL).
const KILL_GRACE: Duration = Duration::from_secs(2);

/// How long a send waits for the slot of a cancelled send still settling.
const INTERRUPT_WAIT: Duration = Duration::from_secs(2);

/// Clears a flag when dropped (a send's end, however it ends).
struct ClearOnDrop<'a>(&'a AtomicBool);

impl Drop for ClearOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// The prompt the bash backend sets, which the prompt tier waits for.
pub const PROMPT: &str = "dsh> ";

/// The state the reader task and the sends share.
struct State {
    scrollback: Scrollback,
    sanitizer: Sanitizer,
    screen: Screen,
    /// An incomplete UTF-8 sequence from the end of the last read.
    carry: Vec<u8>,
    /// The active send's view of the output, if a send is active.
    op: Option<OpOutput>,
    last_output: Instant,
    /// The first failure reading the terminal.
    transport_error: Option<String>,
}

/// What the active send has seen since its evidence was last reset.
#[derive(Default)]
struct OpOutput {
    text: String,
    dropped: bool,
    /// A prompt marker arrived since the write.
    marker: bool,
    /// The text since the latest marker (its first few bytes).
    tail: String,
    /// Any output at all since the write.
    any: bool,
    /// The background send this output belongs to (its number); 0 for a foreground
    /// send, or between sends.
    send: u64,
}

impl OpOutput {
    fn push(&mut self, text: &str, marker_at: Option<usize>, max: usize) {
        if !text.is_empty() {
            self.any = true;
        }
        let mut rest = text;
        while let Some(p) = rest.find('\r') {
            self.text.push_str(&rest[..p]);
            let line_start = self.text.rfind('\n').map_or(0, |n| n + 1);
            self.text.truncate(line_start);
            rest = &rest[p + 1..];
        }
        self.text.push_str(rest);
        if self.text.len() > max {
            let cut = crate::scrollback::ceil_boundary(&self.text, self.text.len() - max);
            self.text.drain(..cut);
            self.dropped = true;
        }
        match marker_at {
            Some(at) => {
                self.marker = true;
                self.tail.clear();
                push_capped(&mut self.tail, &text[at..]);
            }
            None if self.marker => push_capped(&mut self.tail, text),
            None => {}
        }
    }
}

/// A killed background send (`job_kill`). What the send started is ended in steps, each
/// [`KILL_GRACE`] after the last: the interrupt (SIGINT to the foreground group, as any
/// cancel); then SIGINT to the shell (a loop it runs itself stops at its next command)
/// unless a program that ran before the send holds the terminal, and SIGTERM to what the
/// send started; then SIGKILL to that, again at each look while any is left.
///
/// What the send started: a process that was not on the terminal just before
/// the write and whose parent is what read the text (the shell, or the program holding
/// the terminal then: a REPL, a nested shell) or something the send started. An orphan
/// (its parent gone, or re-parented to the shell's own parent, a PID namespace's init)
/// counts when its process group is new and not its own making, and it was not seen
/// before with a parent that is not the send's. So what ran before the send (the shell, the terminal's leader, the
/// REPL itself, a program resumed with `fg`, a job an earlier send started, and the
/// children those jobs make meanwhile, in whatever group) gets the interrupt only.
struct Kill {
    /// The terminal just before the write.
    before: Arc<Before>,
    /// What the send started, as found so far (by pid and start).
    theirs: HashSet<(u32, StartMark)>,
    /// New processes found not to be the send's (their parent was not), by pid and
    /// start: they stay so when they are orphaned later.
    passed: HashSet<(u32, StartMark)>,
    /// When the interrupt went out.
    at: Instant,
    /// Signalling steps taken after the interrupt.
    steps: u8,
    /// Processes the send started may still run (as of the last look).
    left: bool,
    /// When the last look was.
    looked: Option<Instant>,
}

impl Kill {
    fn new(before: Arc<Before>) -> Kill {
        Kill {
            before,
            theirs: HashSet::new(),
            passed: HashSet::new(),
            at: Instant::now(),
            steps: 0,
            left: true,
            looked: None,
        }
    }
}

/// A terminal's processes just before a background send's write: a complete look, with
/// the shell in it.
struct Before {
    /// Its processes, by pid and start (a pid reused since is another process).
    processes: HashSet<(u32, StartMark)>,
    /// Their process groups.
    groups: HashSet<u32>,
    /// The shell's pid (its process group).
    shell: u32,
    /// What reads the text: the shell and the processes of the group holding the
    /// terminal at the write.
    readers: HashSet<u32>,
    /// The shell's ancestors in the terminal (a PID namespace's init, the sandbox's
    /// runner): a process they adopted is an orphan.
    ancestors: HashSet<u32>,
}

impl Before {
    fn new(members: &[Member], shell: u32, holder: Option<u32>) -> Option<Before> {
        let by_pid: HashMap<u32, &Member> = members.iter().map(|m| (m.pid, m)).collect();
        let mut ancestors = HashSet::new();
        let mut at = by_pid.get(&shell)?.ppid;
        while let Some(m) = by_pid.get(&at) {
            if !ancestors.insert(m.pid) {
                break;
            }
            at = m.ppid;
        }
        // At the prompt the shell alone reads (its group may hold earlier jobs, `set +m`).
        let mut readers: HashSet<u32> = members
            .iter()
            .filter(|m| Some(m.pgrp) == holder && holder != Some(shell))
            .map(|m| m.pid)
            .collect();
        readers.insert(shell);
        Some(Before {
            processes: members.iter().map(|m| (m.pid, m.started)).collect(),
            groups: members.iter().map(|m| m.pgrp).collect(),
            shell,
            readers,
            ancestors,
        })
    }

    /// Adds to `theirs` what in `members` (the terminal now) the send started (see
    /// [`Kill`]). Parents start before their children, so one pass in start order finds
    /// whole trees.
    fn find_theirs(
        &self,
        mut members: Vec<Member>,
        theirs: &mut HashSet<(u32, StartMark)>,
        passed: &mut HashSet<(u32, StartMark)>,
    ) {
        members.sort_by_key(|m| (m.started, m.pid));
        let present: HashMap<u32, StartMark> = members.iter().map(|m| (m.pid, m.started)).collect();
        for m in &members {
            let me = (m.pid, m.started);
            if self.processes.contains(&me) || m.pid == self.shell || passed.contains(&me) {
                continue;
            }
            let parent = present
                .get(&m.ppid)
                .map(|started| (m.ppid, *started))
                .filter(|_| !self.ancestors.contains(&m.ppid));
            match parent {
                Some(_) if self.readers.contains(&m.ppid) => {
                    theirs.insert(me);
                }
                Some(parent) if theirs.contains(&parent) => {
                    theirs.insert(me);
                }
                Some(_) => {
                    passed.insert(me);
                }
                // Its parent left the terminal or ended: an orphan. The send's when it is
                // in a new group it did not make itself (the shell made it for the
                // send's job); one that made its own group (`timeout`, a daemon) may be
                // an earlier job's and is spared.
                None if !self.groups.contains(&m.pgrp) && m.pgrp != m.pid => {
                    theirs.insert(me);
                }
                None => {
                    passed.insert(me);
                }
            }
        }
    }
}

/// A terminal's send slot, held for one send. A background send's slot also ends the
/// send's claim on the collected output when it is released, first, so the send's reader
/// can never take a later send's output.
struct SendSlot {
    _guard: tokio::sync::OwnedMutexGuard<()>,
    /// The terminal's state and the background send's number.
    background: Option<(Arc<Mutex<State>>, u64)>,
}

impl Drop for SendSlot {
    fn drop(&mut self) {
        // Runs before `_guard` is dropped: the slot is still held.
        if let Some((state, send)) = &self.background {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(op) = st.op.as_mut().filter(|op| op.send == *send) {
                op.send = 0;
            }
        }
    }
}

/// Appends to a prompt tail, keeping only enough to tell whether it is exactly the
/// prompt.
fn push_capped(tail: &mut String, s: &str) {
    const KEEP: usize = 64;
    if tail.len() < KEEP {
        let take = floor_boundary(s, KEEP - tail.len());
        tail.push_str(&s[..take]);
    }
}

/// One terminal. See the [module docs](self).
pub struct Terminal {
    pty: Arc<Pty>,
    control: Arc<dyn ProcessControl>,
    /// Owns the tree: dropping the terminal kills it.
    _process: Process,
    state: Arc<Mutex<State>>,
    send_slot: Arc<tokio::sync::Mutex<()>>,
    /// Background sends started so far (each gets the next number).
    background_sends: AtomicU64,
    /// The active send was cancelled and waits for the interrupted program.
    interrupting: AtomicBool,
    /// A look at the foreground group is running.
    inspecting: Arc<AtomicBool>,
    closing: AtomicBool,
    closed: tokio::sync::OnceCell<Result<(), String>>,
    shell_pgid: Mutex<Option<u32>>,
    config: TerminalConfig,
    reader: tokio::task::JoinHandle<()>,
    /// What the sandbox needs kept until the tree is gone (placeholders of missing
    /// protected paths).
    _confinement: Option<dsh_sandbox::Confinement>,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal")
            .field("pid", &self.control.pid())
            .finish_non_exhaustive()
    }
}

impl Terminal {
    /// A terminal for `process`, which was spawned on a terminal (its
    /// [`take_terminal`](Process::take_terminal) must still hold it).
    ///
    /// # Errors
    /// `INTERNAL` when the process has no terminal.
    ///
    /// # Panics
    /// Outside a tokio runtime (the output is read by a task).
    pub fn start(mut process: Process, config: TerminalConfig) -> Result<Terminal, HarnessError> {
        let pty = Arc::new(process.take_terminal().ok_or_else(|| {
            HarnessError::internal("a terminal session needs a process on a terminal")
        })?);
        let state = Arc::new(Mutex::new(State {
            scrollback: Scrollback::new(config.scrollback_lines, config.scrollback_max_bytes),
            sanitizer: Sanitizer::new(config.max_read_bytes),
            screen: Screen::new(config.rows, config.cols),
            carry: Vec::new(),
            // The startup send's output: everything from the first byte.
            op: Some(OpOutput::default()),
            last_output: Instant::now(),
            transport_error: None,
        }));
        let reader = tokio::spawn(read_output(
            pty.clone(),
            state.clone(),
            config.max_read_bytes,
        ));
        Ok(Terminal {
            control: process.control(),
            pty,
            _process: process,
            state,
            send_slot: Arc::new(tokio::sync::Mutex::new(())),
            background_sends: AtomicU64::new(0),
            interrupting: AtomicBool::new(false),
            inspecting: Arc::new(AtomicBool::new(false)),
            closing: AtomicBool::new(false),
            closed: tokio::sync::OnceCell::new(),
            shell_pgid: Mutex::new(None),
            config,
            reader,
            _confinement: None,
        })
    }

    /// The terminal, keeping `confinement` (the sandbox's wrapping of its shell) alive as
    /// long as itself.
    pub fn holding(mut self, confinement: Option<dsh_sandbox::Confinement>) -> Terminal {
        self._confinement = confinement;
        self
    }

    /// The pid of the program that leads the terminal (as dsh sees it).
    pub fn pid(&self) -> u32 {
        self.control.pid()
    }

    /// Running, or how the terminal's leader ended.
    pub fn status(&self) -> TerminalStatus {
        status_of(
            self.control.outcome(),
            self.lock().transport_error.is_some(),
        )
    }

    /// Whether the terminal is closing or closed.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Types `request.text` and waits until the program is ready for more (see the
    /// [module docs](self)). Cancelling `cancel` interrupts the foreground program with
    /// SIGINT; the send then settles as usual.
    ///
    /// `startup` is for the first send of a backend's startup: it sees everything the
    /// shell printed since it started, and silence counts only once some output arrived.
    ///
    /// # Errors
    /// `TERMINAL_CLOSING`, `TERMINAL_EXITED`, `SEND_ACTIVE` (another send is active),
    /// `ABORTED` (cancelled before anything was written), `TERMINAL_FAILED` (the terminal
    /// could not be written or signalled).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped once the write began, the text (or part of it) stays typed
    /// and what it started runs on, uninterrupted (cancelling `cancel` instead interrupts
    /// it); the send slot is released.
    pub async fn send(
        &self,
        request: SendRequest,
        cancel: &CancelToken,
        startup: bool,
    ) -> Result<SendResult, HarnessError> {
        self.check_open()?;
        let slot = match self.send_slot.clone().try_lock_owned() {
            Ok(slot) => Some(slot),
            // A cancelled send is only waiting for its program to come back from the
            // interrupt: its successor waits a moment instead of being refused.
            Err(_) if self.interrupting.load(Ordering::SeqCst) => {
                tokio::time::timeout(INTERRUPT_WAIT, self.send_slot.clone().lock_owned())
                    .await
                    .ok()
            }
            Err(_) => None,
        };
        let slot = SendSlot {
            _guard: slot.ok_or_else(send_active)?,
            background: None,
        };
        self.send_holding(slot, request, cancel, startup).await
    }

    /// [`send`](Self::send) in two steps: the checks and the send slot now (so
    /// `TERMINAL_CLOSING`, `TERMINAL_EXITED` and `SEND_ACTIVE` come at once, without
    /// waiting), the send itself in the returned [`BackgroundSend`], which holds the slot
    /// until it settles and whose reader takes its output as it comes.
    ///
    /// # Errors
    /// `TERMINAL_CLOSING`, `TERMINAL_EXITED`, `SEND_ACTIVE`; the future, as `send`.
    pub fn start_send(
        self: &Arc<Self>,
        request: SendRequest,
        cancel: CancelToken,
    ) -> Result<BackgroundSend, HarnessError> {
        self.check_open()?;
        let slot = self
            .send_slot
            .clone()
            .try_lock_owned()
            .map_err(|_| send_active())?;
        // The slot is held: what the op collects from now until it settles is this send's.
        // The slot lets go of that however the send ends (an error, or its future dropped
        // unpolled), before another send can start.
        let send = self.background_sends.fetch_add(1, Ordering::Relaxed) + 1;
        self.lock().op.get_or_insert_with(OpOutput::default).send = send;
        let slot = SendSlot {
            _guard: slot,
            background: Some((self.state.clone(), send)),
        };
        let terminal = self.clone();
        let output: std::sync::Weak<dyn SendOutput> =
            Arc::downgrade(self) as std::sync::Weak<Terminal>;
        let reader = SendReader { output, send };
        Ok(BackgroundSend::new(
            async move { terminal.send_holding(slot, request, &cancel, false).await },
            reader,
        ))
    }

    fn check_open(&self) -> Result<(), HarnessError> {
        if self.is_closing() {
            return Err(closing_error());
        }
        if self.control.outcome().is_some() {
            return Err(HarnessError::new(
                ErrorCode::TerminalExited,
                "the terminal session has exited; open a new one with terminal_open",
            ));
        }
        Ok(())
    }

    /// The send, its slot held.
    async fn send_holding(
        &self,
        slot: SendSlot,
        request: SendRequest,
        cancel: &CancelToken,
        startup: bool,
    ) -> Result<SendResult, HarnessError> {
        let _interrupting = ClearOnDrop(&self.interrupting);
        if cancel.is_cancelled() {
            return Err(aborted_before_write());
        }
        let start = Instant::now();
        let mut deadline = start + request.timeout;
        // The startup send counts everything the shell printed since it started; a later
        // send only what follows its write.
        if !startup {
            self.reset_evidence();
        }
        let initial = self.inspect().await;
        if cancel.is_cancelled() {
            return Err(aborted_before_write());
        }
        // Evidence from before the write boundary never counts.
        if !startup {
            self.reset_evidence();
        }
        let mut bytes = request.text.into_bytes();
        if request.submit {
            bytes.push(b'\r');
        }
        let mut interrupted = false;
        // Cancelling a background send is a kill (`job_kill`, see `Kill`): what the send
        // started is ended, what ran before it is only interrupted.
        let kills = slot.background.is_some();
        // Without a complete look at the terminal before the write (with the shell in
        // it), a kill is the interrupt alone.
        let before = if kills {
            self.look_before().await
        } else {
            None
        };
        let mut kill: Option<Kill> = None;
        if !bytes.is_empty() {
            if !self.type_input(&bytes, deadline, cancel).await? {
                // The program did not take the input before the deadline.
                return Ok(self.settle(WaitReason::Timeout));
            }
            if cancel.is_cancelled() {
                interrupted = true;
                if let Some((k, until)) = self.begin_interrupt(before.as_ref())? {
                    (kill, deadline) = (Some(k), until);
                }
            }
        }
        let mut watch = Watch {
            start,
            startup,
            initial,
            left_wait: initial.is_none_or(|f| !f.input_waiting),
            kill,
        };
        // The first looks come quickly (2, 4, 8, … ms), then every poll interval: a
        // command that answers at once is seen at once.
        let poll = self.config.poll_interval;
        let mut step = FIRST_STEP.min(poll);
        let mut next = Instant::now() + step;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next.min(deadline)) => {}
                _ = cancel.cancelled(), if !interrupted => {
                    interrupted = true;
                    if let Some((k, until)) = self.begin_interrupt(before.as_ref())? {
                        (watch.kill, deadline) = (Some(k), until);
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(self.settle(WaitReason::Timeout));
            }
            if now < next {
                continue;
            }
            let quiet = step;
            step = (step * 2).min(poll);
            next = now + step;
            if let Some(reason) = self.look(&mut watch, now, quiet).await {
                return Ok(self.settle(reason));
            }
        }
    }

    /// One look after a send's write: why the send settles now, if it does (the tiers of
    /// the module docs, in order); `quiet`: how long output must have been still.
    async fn look(&self, w: &mut Watch, now: Instant, quiet: Duration) -> Option<WaitReason> {
        if self.is_closing() || self.control.outcome().is_some() {
            return Some(WaitReason::SessionExit);
        }
        let (marker, tail_is_prompt, idle, any) = self.output_view(now);
        // The prompt tier needs only the foreground group (one ioctl).
        let holder = self.pty.foreground_group();
        let shell = self.shell_group(holder, marker);
        if marker && tail_is_prompt && idle >= quiet && holder.is_some() && holder == shell {
            return Some(WaitReason::StdinRead);
        }
        // While what a killed send started still runs, only the prompt (above), the
        // terminal's end or the kill's deadline settles it.
        let mut holding = false;
        if let Some(k) = w.kill.as_mut() {
            self.advance_kill(k, shell, holder).await;
            holding = k.left;
        }
        let fg = if holding { None } else { self.inspect().await };
        if let Some(f) = fg {
            let probed = now - w.start >= self.config.exact_probe_after;
            if reads_new_input(f, w.initial, &mut w.left_wait) && probed && (!w.startup || any) {
                return Some(WaitReason::StdinRead);
            }
        }
        let silence = self.silence_for(marker);
        // A killed send is not settled by silence before its first step: a quiet
        // moment (the shell between two commands) is not the end of what it runs.
        let first_grace = w.kill.as_ref().is_some_and(|k| k.steps == 0);
        if idle >= silence && (!w.startup || any) && !holding && !first_grace {
            return Some(WaitReason::InferredIdle);
        }
        None
    }

    /// A complete look at the terminal's processes before a background send's
    /// write, with the shell in it; `None` without one (a kill is then the interrupt
    /// alone).
    async fn look_before(&self) -> Option<Arc<Before>> {
        let shell = (*self.shell_pgid.lock().unwrap_or_else(|p| p.into_inner()))?;
        let holder = self.pty.foreground_group();
        self.members_now()
            .await
            .and_then(|m| Before::new(&m, shell, holder))
            .map(Arc::new)
    }

    /// Interrupts the foreground program for a cancelled send; for a background send with
    /// a look `before` its write, the kill of what it started and that kill's deadline
    /// (fixed from now, whatever the send's own deadline was).
    ///
    /// # Errors
    /// The interrupt's.
    fn begin_interrupt(
        &self,
        before: Option<&Arc<Before>>,
    ) -> Result<Option<(Kill, Instant)>, HarnessError> {
        self.interrupting.store(true, Ordering::SeqCst);
        self.interrupt()?;
        Ok(before.map(|b| (Kill::new(b.clone()), Instant::now() + self.kill_limit())))
    }

    /// Types `bytes`; `false` when the program did not take them before `deadline`. A
    /// program that does not read holds the write: the deadline or a cancel ends it (the
    /// rest of the text is then not typed).
    ///
    /// # Errors
    /// `TERMINAL_FAILED`: the terminal refused the write.
    async fn type_input(
        &self,
        bytes: &[u8],
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<bool, HarnessError> {
        let written = tokio::select! {
            w = tokio::time::timeout_at(deadline, self.pty.write_all(bytes)) => w,
            _ = cancel.cancelled() => Ok(Ok(())),
        };
        match written {
            Ok(Ok(())) => Ok(true),
            Ok(Err(e)) => Err(HarnessError::new(
                ErrorCode::TerminalFailed,
                "the input could not be written to the terminal",
            )
            .with_source(e)),
            Err(_) => Ok(false),
        }
    }

    /// What the active send's output says at `now`: whether the prompt marker came,
    /// whether the output ends in the prompt, how long it has been quiet, and whether
    /// anything came.
    fn output_view(&self, now: Instant) -> (bool, bool, Duration, bool) {
        let st = self.lock();
        let op = st.op.as_ref();
        (
            op.is_some_and(|o| o.marker),
            op.is_some_and(|o| o.tail == PROMPT),
            now.saturating_duration_since(st.last_output),
            op.is_some_and(|o| o.any),
        )
    }

    /// The shell's process group: learnt as the terminal's foreground group `holder` the
    /// first time the prompt `marker` shows, and kept.
    fn shell_group(&self, holder: Option<u32>, marker: bool) -> Option<u32> {
        let mut shell = self.shell_pgid.lock().unwrap_or_else(|p| p.into_inner());
        if shell.is_none() && marker {
            *shell = holder;
        }
        *shell
    }

    /// The silence that settles a send: the idle silence, and the hand-off grace once
    /// the prompt marker showed.
    fn silence_for(&self, marker: bool) -> Duration {
        self.config.idle_silence
            + if marker {
                self.config.handoff_grace
            } else {
                Duration::ZERO
            }
    }

    /// The foreground group and what it does, looked up off the async threads, within
    /// [`INSPECT_LIMIT`]. One look at a time: while a look is still running (a hostile
    /// program can make one slow), the group is unknown.
    async fn inspect(&self) -> Option<Foreground> {
        if self.inspecting.swap(true, Ordering::SeqCst) {
            return None;
        }
        let (pty, flag) = (self.pty.clone(), self.inspecting.clone());
        let look = tokio::task::spawn_blocking(move || {
            let found = pty.foreground();
            flag.store(false, Ordering::SeqCst);
            found
        });
        tokio::time::timeout(INSPECT_LIMIT, look)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
    }

    fn reset_evidence(&self) {
        let mut st = self.lock();
        st.last_output = Instant::now();
        match &mut st.op {
            Some(op) => {
                op.marker = false;
                op.tail.clear();
                op.any = false;
            }
            None => st.op = Some(OpOutput::default()),
        }
    }

    /// How long a killed background send may take to settle after its interrupt: the
    /// kill's three steps and the silence after them.
    fn kill_limit(&self) -> Duration {
        KILL_GRACE * 3 + self.config.idle_silence
    }

    /// Every process of the terminal now, looked up off the async threads within
    /// [`INSPECT_LIMIT`]; `None` when the look failed or was incomplete.
    async fn members_now(&self) -> Option<Vec<Member>> {
        let pty = self.pty.clone();
        let look = tokio::task::spawn_blocking(move || pty.members());
        tokio::time::timeout(INSPECT_LIMIT, look).await.ok()?.ok()?
    }

    /// Takes the kill's next step if its time has come (see [`Kill`]), and learns whether
    /// anything the send started is left. A look walks every process on the terminal, off the async
    /// threads: a due step looks at once, counting and repeated SIGKILLs every
    /// [`LOOK_EVERY`]; a look that takes longer than [`INSPECT_LIMIT`] counts as "left".
    async fn advance_kill(&self, k: &mut Kill, shell: Option<u32>, holder: Option<u32>) {
        let elapsed = k.at.elapsed();
        let (signal, due) = match k.steps {
            0 if elapsed >= KILL_GRACE => (libc::SIGTERM, true),
            1 if elapsed >= KILL_GRACE * 2 => (libc::SIGKILL, true),
            n if n >= 2 => (libc::SIGKILL, false),
            // Within a grace: only count.
            _ => (0, false),
        };
        if !due && k.looked.is_some_and(|t| t.elapsed() < LOOK_EVERY) {
            return;
        }
        // The shell is stopped only when it runs what holds the terminal: itself, or a
        // group the send made (never a REPL from before, whose end the shell waits for).
        let stop_shell = k.steps == 0
            && signal != 0
            && holder.is_some_and(|h| Some(h) == shell || !k.before.groups.contains(&h));
        let (pty, before, leader) = (self.pty.clone(), k.before.clone(), self.pid());
        let mut theirs = std::mem::take(&mut k.theirs);
        let mut passed = std::mem::take(&mut k.passed);
        let walk = tokio::task::spawn_blocking(move || {
            if let Some(now) = pty.members() {
                before.find_theirs(now, &mut theirs, &mut passed);
            }
            if stop_shell {
                let _ = pty.signal_members(|m| m.pid == before.shell, libc::SIGINT);
            }
            let sent = pty.signal_members(
                |m| {
                    !m.exited
                        && m.pid != before.shell
                        && m.pid != leader
                        && theirs.contains(&(m.pid, m.started))
                },
                signal,
            );
            (theirs, passed, sent)
        });
        match tokio::time::timeout(INSPECT_LIMIT, walk).await {
            Ok(Ok((theirs, passed, sent))) => {
                k.theirs = theirs;
                k.passed = passed;
                k.left = !matches!(sent, Ok(0));
            }
            // A look that did not finish: assume something is left (what it found so far
            // is found again next time).
            _ => k.left = true,
        }
        k.looked = Some(Instant::now());
        if signal != 0 {
            k.steps = k.steps.saturating_add(1);
        }
    }

    fn interrupt(&self) -> Result<(), HarnessError> {
        match self.pty.signal_foreground(libc::SIGINT) {
            Ok(_) => Ok(()),
            // Nobody holds the terminal: the terminal is ending; the send settles on that.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(HarnessError::new(
                ErrorCode::TerminalFailed,
                "the interrupt (SIGINT) could not be sent to the terminal's foreground group",
            )
            .with_source(e)),
        }
    }

    fn settle(&self, wait: WaitReason) -> SendResult {
        let mut st = self.lock();
        // What the next send will show starts collecting now: output that arrives
        // between two sends is not lost (an end marker printed then must not go missing).
        let op = std::mem::take(st.op.get_or_insert_with(OpOutput::default));
        let viewport = if st.screen.alternate() {
            st.screen.contents()
        } else {
            op.text
        };
        SendResult {
            viewport,
            wait,
            status: status_of(self.control.outcome(), st.transport_error.is_some()),
            // This send's own drop only: the scrollback's flag stays set once a long
            // terminal has filled it, and would mark every later send as cut.
            truncated: op.dropped,
        }
    }

    /// A page of the scrollback: `count` lines ending `offset` lines before the newest.
    pub fn read(&self, offset: u64, count: u64) -> ReadPage {
        self.lock()
            .scrollback
            .page(offset, count, self.config.max_read_bytes)
    }

    /// Sends `signal` to the foreground group; returns the group.
    ///
    /// # Errors
    /// `TERMINAL_CLOSING`; `INVALID_ARGUMENT` for SIGKILL aimed at the shell's own group
    /// (close the terminal instead); `TERMINAL_FAILED` when no foreground group can be
    /// found or the signal cannot be sent.
    pub fn signal(&self, signal: i32) -> Result<u32, HarnessError> {
        if self.is_closing() {
            return Err(closing_error());
        }
        let pgid = self.pty.foreground_group().ok_or_else(|| {
            HarnessError::new(
                ErrorCode::TerminalFailed,
                format!(
                    "cannot resolve the foreground process group of terminal {}",
                    self.pid()
                ),
            )
        })?;
        let shell = *self.shell_pgid.lock().unwrap_or_else(|p| p.into_inner());
        if signal == libc::SIGKILL && (shell == Some(pgid) || pgid == self.pid()) {
            return Err(HarnessError::invalid_argument(
                "SIGKILL would kill the terminal's shell itself; close the session with \
                 terminal_close instead",
            ));
        }
        if self.control.is_tree_gone() {
            return Err(HarnessError::new(
                ErrorCode::TerminalExited,
                "the terminal session has exited; open a new one with terminal_open",
            ));
        }
        self.pty.signal_foreground(signal).map_err(|e| {
            HarnessError::new(
                ErrorCode::TerminalFailed,
                format!("the signal could not be sent to process group {pgid}"),
            )
            .with_source(e)
        })
    }

    /// Closes the terminal: no more sends or signals; the terminal gets the hangup a
    /// vanished terminal gives, then SIGTERM and, after the grace, SIGKILL to its whole
    /// tree; returns once the tree is gone. A second call waits for the first.
    ///
    /// # Errors
    /// `TERMINAL_FAILED` when the tree could not be ended.
    ///
    /// # Cancel safety
    /// Dropping the future stops only the waiting: the terminal already refuses sends and
    /// signals, and its tree got the hangup and SIGTERM (SIGKILL follows after the grace);
    /// a later call waits again.
    pub async fn close(&self) -> Result<(), HarnessError> {
        self.closing.store(true, Ordering::SeqCst);
        let done = self
            .closed
            .get_or_init(|| async {
                // What a terminal window closing does: SIGHUP to the foreground group and
                // to the terminal's leader (never to a number that may have been reused).
                let _ = self.pty.hang_up();
                self.control.terminate();
                let bound = self.config.dispose_grace + Duration::from_secs(5);
                match tokio::time::timeout(bound, self.control.wait_for_exit()).await {
                    Ok(()) => {
                        self.reader.abort();
                        Ok(())
                    }
                    Err(_) => {
                        self.control.signal_kill();
                        Err("the process tree did not end".to_owned())
                    }
                }
            })
            .await;
        done.clone().map_err(|why| {
            HarnessError::new(
                ErrorCode::TerminalFailed,
                format!("PTY cleanup failed ({why})"),
            )
        })
    }

    /// The startup output: what a send of nothing shows once the shell is ready.
    ///
    /// # Errors
    /// As [`send`](Self::send); `TERMINAL_FAILED` when the shell exits during startup or
    /// does not become ready before `timeout`.
    ///
    /// # Cancel safety
    /// Cancel safe: it types nothing; dropping the future releases the send slot and leaves
    /// the shell running (close or drop the terminal to end it).
    pub async fn initialize(
        &self,
        timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<String, HarnessError> {
        // Startup is abandoned on cancel, not interrupted.
        let never = CancelToken::new();
        let first = self.send(
            SendRequest {
                text: String::new(),
                submit: false,
                timeout,
            },
            &never,
            true,
        );
        let r = tokio::select! {
            r = first => r?,
            _ = cancel.cancelled() => {
                let reason = cancel.reason().cloned().unwrap_or(dsh_core::CancelReason::ClientCancelled);
                return Err(HarnessError::aborted_before_start("terminal_open", &reason));
            }
        };
        match r.wait {
            WaitReason::SessionExit => Err(HarnessError::new(
                ErrorCode::TerminalFailed,
                format!(
                    "the terminal's shell exited during startup: {}",
                    r.viewport.trim()
                ),
            )),
            WaitReason::Timeout => Err(HarnessError::new(
                ErrorCode::TerminalFailed,
                "the terminal's shell did not reach readiness before the startup timeout",
            )),
            _ => Ok(r.viewport),
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.reader.abort();
        // The Process dropped with us SIGKILLs the tree.
    }
}

fn send_active() -> HarnessError {
    HarnessError::new(
        ErrorCode::SendActive,
        "another send to this terminal session is still active; wait for it to settle \
         (job_output with wait, for a background send), or end it (cancel the call, or \
         job_kill its job; terminal_signal reaches the program, terminal_close the whole \
         session), then send again",
    )
}

fn closing_error() -> HarnessError {
    HarnessError::new(
        ErrorCode::TerminalClosing,
        "the terminal session is closing; it takes no more input or signals",
    )
}

fn status_of(outcome: Option<Outcome>, failed: bool) -> TerminalStatus {
    match outcome {
        Some(Outcome::Exited(code)) => TerminalStatus::Exited {
            code: Some(code),
            signal: None,
        },
        Some(Outcome::Signaled(s)) => TerminalStatus::Exited {
            code: None,
            signal: Some(s.name()),
        },
        Some(Outcome::Lost) => TerminalStatus::Exited {
            code: None,
            signal: None,
        },
        None if failed => TerminalStatus::Exited {
            code: None,
            signal: None,
        },
        None => TerminalStatus::Running,
    }
}

/// The reader task: every byte the program prints goes to the screen, the scrollback and
/// the active send.
async fn read_output(pty: Arc<Pty>, state: Arc<Mutex<State>>, max_read: usize) {
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match pty.read(&mut buf).await {
            Ok(n) => n,
            Err(e) => {
                let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                st.transport_error.get_or_insert_with(|| e.to_string());
                0
            }
        };
        if n == 0 {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            let tail = std::mem::take(&mut st.carry);
            let mut s = st.sanitizer.push(&dsh_core::utf8::decode_lossy(&tail));
            s.text.push_str(&st.sanitizer.flush().text);
            st.scrollback.push(&s.text);
            if let Some(op) = &mut st.op {
                op.push(&s.text, None, max_read);
            }
            return;
        }
        take_output(&state, &buf[..n], max_read);
        // A program printing without pause must not starve the sends that watch it.
        tokio::task::yield_now().await;
    }
}

/// Adds `bytes` of output to the screen, the scrollback and the active send.
fn take_output(state: &Mutex<State>, bytes: &[u8], max_read: usize) {
    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
    st.screen.process(bytes);
    let mut whole = std::mem::take(&mut st.carry);
    whole.extend_from_slice(bytes);
    let complete = dsh_core::utf8::complete_prefix_len(&whole);
    st.carry = whole.split_off(complete);
    let text = dsh_core::utf8::decode_lossy(&whole);
    let s = st.sanitizer.push(&text);
    st.scrollback.push(&s.text);
    if let Some(op) = &mut st.op {
        op.push(&s.text, s.marker_at, max_read);
    }
    // Any bytes count as output (a spinner redrawn with escapes alone too).
    st.last_output = Instant::now();
}
/// `ABORTED`: a send cancelled before it typed anything.
fn aborted_before_write() -> HarnessError {
    HarnessError::new(
        ErrorCode::Aborted,
        "terminal send aborted before write: nothing was typed",
    )
}

/// What a send's looks after its write carry from one to the next.
struct Watch {
    /// When the send began.
    start: Instant,
    /// The terminal's first send (its startup), which counts output from before the write.
    startup: bool,
    /// The foreground as the send found it, before its write.
    initial: Option<Foreground>,
    /// Whether the foreground has left the read it was waiting in before the write.
    left_wait: bool,
    /// The kill of a cancelled background send, once begun.
    kill: Option<Kill>,
}

/// Whether the foreground group `f` waits for input the send caused (the exact tier):
/// another group than the `initial` one, or the same one after it left its wait (noted in
/// `left_wait`) or after more reads.
fn reads_new_input(f: Foreground, initial: Option<Foreground>, left_wait: &mut bool) -> bool {
    let same = initial.is_some_and(|i| i.pgid == f.pgid);
    if same && !f.input_waiting {
        *left_wait = true;
    }
    let news = !same || *left_wait || initial.is_some_and(|i| f.reads > i.reads);
    f.input_waiting && news
}

impl SendOutput for Terminal {
    /// Takes background send `send`'s complete lines, at most `max` bytes of them (see
    /// [`SendReader::take`]).
    fn take_send_output(&self, send: u64, max: usize) -> SendDelta {
        let mut st = self.lock();
        let st = &mut *st;
        if st.screen.alternate() {
            return SendDelta::default();
        }
        match st.op.as_mut() {
            Some(op) if op.send == send => {
                let complete = op.text.rfind('\n').map_or(0, |n| n + 1);
                // Whole lines up to `max`; a single line longer than that is split.
                let cut = if complete <= max {
                    complete
                } else {
                    let head = floor_boundary(&op.text, max);
                    match op.text[..head].rfind('\n') {
                        Some(n) => n + 1,
                        None => head,
                    }
                };
                SendDelta {
                    text: op.text.drain(..cut).collect(),
                    dropped: std::mem::take(&mut op.dropped),
                }
            }
            _ => SendDelta::default(),
        }
    }
}
