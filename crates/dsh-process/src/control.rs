//! The owner's side of one spawned tree: [`LocalControl`] (terminate, kill, observe) and
//! the monitor task that turns the reaper's reports into `done` and "tree gone".
//!
//! # Mechanism
//! The reaper writes the leader's exit status on the status pipe the moment the leader
//! exits; the monitor then gives the captured pipes at most the grace to drain, seals the
//! captures and settles `done`. The reaper's own exit (seen through tokio's child reaping)
//! is the "whole tree gone" event. A watchdog covers a reaper that cannot act (the command
//! SIGSTOPped or SIGKILLed it): when the tree is not gone a grace after a kill was asked
//! for, the monitor SIGKILLs the reaper (its own unreaped child, so the pid is exact) and
//! writes the command cgroup's `cgroup.kill` itself.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::CancelToken;
use tokio::io::AsyncReadExt;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::cgroup::CommandCgroup;
use crate::pids_v1::PidsCgroup;
use crate::reaper::{self, CONTROL_KILL, CONTROL_TERM};
use crate::{Outcome, ProcessControl, Signal};

/// The owner's side of one tree. Dropping it closes the control pipe, which makes the
/// reaper SIGKILL the tree (as does dsh's own death, which closes it too).
pub(crate) struct LocalControl {
    pub(crate) pid: u32,
    pub(crate) grace: Duration,
    control_w: Mutex<Option<OwnedFd>>,
    done: watch::Receiver<Option<Outcome>>,
    gone: watch::Receiver<bool>,
    watchdog: Arc<Watchdog>,
    /// Set by the monitor the moment the leader's exit is reported (before the drain).
    pub(crate) leader_exited: std::sync::atomic::AtomicBool,
}

/// When the monitor should stop trusting the reaper.
#[derive(Default)]
pub(crate) struct Watchdog {
    deadline: Mutex<Option<Instant>>,
    armed: Notify,
}

impl Watchdog {
    fn arm(&self, after: Duration) {
        let at = Instant::now() + after;
        let mut d = self.deadline.lock().unwrap_or_else(|p| p.into_inner());
        if d.is_none_or(|cur| at < cur) {
            *d = Some(at);
            self.armed.notify_one();
        }
    }

    /// Completes when an armed deadline passes.
    async fn fired(&self) {
        loop {
            let armed = self.armed.notified();
            let at = *self.deadline.lock().unwrap_or_else(|p| p.into_inner());
            match at {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {
                            // Disarm: firing again needs a new `arm`.
                            *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = None;
                            return;
                        }
                        () = armed => {}
                    }
                }
                None => armed.await,
            }
        }
    }
}

impl LocalControl {
    pub(crate) fn new(
        pid: u32,
        grace: Duration,
        control_w: OwnedFd,
        done: watch::Receiver<Option<Outcome>>,
        gone: watch::Receiver<bool>,
        watchdog: Arc<Watchdog>,
    ) -> LocalControl {
        LocalControl {
            pid,
            grace,
            control_w: Mutex::new(Some(control_w)),
            done,
            gone,
            watchdog,
            leader_exited: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn send(&self, byte: u8) {
        let guard = self.control_w.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(fd) = guard.as_ref() {
            // Non-blocking and tiny: the pipe never holds more than a few bytes.
            let _ = rustix::io::write(fd, &[byte]);
        }
    }
}

#[async_trait]
impl ProcessControl for LocalControl {
    fn pid(&self) -> u32 {
        self.pid
    }

    async fn done(&self) -> Outcome {
        let mut rx = self.done.clone();
        let settled = rx.wait_for(Option::is_some).await.ok().and_then(|v| *v);
        settled.unwrap_or(Outcome::Lost)
    }

    fn outcome(&self) -> Option<Outcome> {
        *self.done.borrow()
    }

    fn leader_exited(&self) -> bool {
        self.leader_exited
            .load(std::sync::atomic::Ordering::Acquire)
    }

    fn terminate(&self) {
        if self.is_tree_gone() {
            return;
        }
        // The reaper ignores a second `T`, and escalates to SIGKILL after the grace by
        // itself, even after the leader settled.
        self.send(CONTROL_TERM);
        self.watchdog.arm(self.grace * 2 + WATCHDOG_SLACK);
    }

    fn signal_kill(&self) {
        if self.is_tree_gone() {
            return;
        }
        self.send(CONTROL_KILL);
        self.watchdog.arm(self.grace + WATCHDOG_SLACK);
    }

    fn is_tree_gone(&self) -> bool {
        *self.gone.borrow()
    }

    async fn wait_for_exit(&self) {
        let mut rx = self.gone.clone();
        let _ = rx.wait_for(|g| *g).await;
    }
}

impl Drop for LocalControl {
    fn drop(&mut self) {
        // Closing the control pipe is the kill; the monitor's watchdog backs it up.
        self.control_w
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.watchdog.arm(self.grace + WATCHDOG_SLACK);
    }
}

/// Rounds of [`Monitor::nudge`] before the reaper itself is killed. A guess: enough for a
/// reaper that was merely stopped, or slowed by a large tree.
const MAX_NUDGES: u32 = 3;

/// Time the reaper gets beyond the grace before the watchdog steps in. A guess: the
/// reaper needs a few scheduling rounds to kill and reap a large tree.
const WATCHDOG_SLACK: Duration = Duration::from_millis(500);

/// Drives one tree from spawn to "gone".
pub(crate) struct Monitor {
    pub(crate) control: Weak<LocalControl>,
    pub(crate) status_r: Option<tokio::net::unix::pipe::Receiver>,
    pub(crate) grace: Duration,
    pub(crate) cancel: Option<CancelToken>,
    pub(crate) stop: CancelToken,
    pub(crate) pumps: Vec<tokio::task::JoinHandle<()>>,
    pub(crate) done_tx: watch::Sender<Option<Outcome>>,
    pub(crate) gone_tx: watch::Sender<bool>,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) cgroup: Option<CommandCgroup>,
    pub(crate) pids: Option<PidsCgroup>,
    pub(crate) on_gone: Box<dyn FnOnce() + Send + Sync>,
}

impl Monitor {
    pub(crate) async fn run(mut self, mut reaper_child: tokio::process::Child) {
        let mut reaper_exited = false;
        let outcome = self
            .leader_outcome(&mut reaper_child, &mut reaper_exited)
            .await;
        if let Some(control) = self.control.upgrade() {
            control
                .leader_exited
                .store(true, std::sync::atomic::Ordering::Release);
        }
        // The leader exited: give descendants that still hold the pipes at most `grace` to
        // let go, then stop reading. Output written after that is not captured.
        let mut pumps = std::mem::take(&mut self.pumps);
        let drained = async {
            for p in pumps.iter_mut() {
                let _ = p.await;
            }
        };
        if tokio::time::timeout(self.grace, drained).await.is_err() {
            self.stop.cancel("pipe drain grace elapsed");
            for p in pumps.iter_mut() {
                let _ = p.await;
            }
        }
        let _ = self.done_tx.send(Some(outcome));
        let mut nudges = 0;
        while !reaper_exited {
            tokio::select! {
                _ = reaper_child.wait() => reaper_exited = true,
                () = self.watchdog.fired() => {
                    reaper_exited = self.nudge(&mut reaper_child, &mut nudges).await;
                }
            }
        }
        if outcome == Outcome::Lost {
            // The reaper died without reporting (killed from inside the tree, or from
            // outside): whatever is left in the cgroup goes now.
            self.kill_cgroup();
        }
        if let Some(cg) = self.cgroup.take() {
            cg.remove().await;
        }
        if let Some(p) = self.pids.take() {
            // Not awaited: a v1 cgroup's removal waits on the kernel (milliseconds) and
            // nothing depends on it; one a quick exit leaves behind is removed by the
            // next dsh's probe.
            tokio::spawn(p.remove());
        }
        let _ = self.gone_tx.send(true);
        (self.on_gone)();
    }

    /// Reads the leader's exit record, terminating on cancel; `Lost` if the reaper exits
    /// (or is killed by the watchdog) without writing one.
    async fn leader_outcome(
        &mut self,
        reaper_child: &mut tokio::process::Child,
        exited: &mut bool,
    ) -> Outcome {
        let Some(mut status_r) = self.status_r.take() else {
            return Outcome::Lost;
        };
        // One read future for the whole wait, so no partial record is lost when another
        // branch wins a round.
        let read = async move {
            let mut rec = [0u8; reaper::STATUS_LEN];
            loop {
                if status_r.read_exact(&mut rec).await.is_err() {
                    return Outcome::Lost;
                }
                // A confirmation the owner stopped waiting for at spawn may come late.
                if rec[0] != reaper::STATUS_EXEC_OK {
                    return decode_exit(&rec);
                }
            }
        };
        tokio::pin!(read);
        let mut cancel_seen = false;
        let mut nudges = 0;
        // The command can SIGSTOP its reaper (same user, no sandbox) and then exit: the
        // record would never come. A stopped reaper is continued.
        let mut stop_check = tokio::time::interval(STOP_CHECK);
        stop_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let cancelled = async {
                match &self.cancel {
                    Some(c) if !cancel_seen => c.cancelled().await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                outcome = &mut read => return outcome,
                _ = reaper_child.wait(), if !*exited => {
                    // The record, if the reaper wrote one, is still in the pipe: the read
                    // gets it, or end-of-file.
                    *exited = true;
                }
                () = cancelled => {
                    cancel_seen = true;
                    if let Some(c) = self.control.upgrade() {
                        c.terminate();
                    }
                }
                () = self.watchdog.fired(), if !*exited => {
                    *exited = self.nudge(reaper_child, &mut nudges).await;
                }
                _ = stop_check.tick(), if !*exited => continue_if_stopped(reaper_child),
            }
        }
    }

    /// A kill did not finish in time. A stopped reaper (the command can SIGSTOP it) gets
    /// SIGCONT; the cgroup, if any, is killed from here; a reaper still not done after
    /// [`MAX_NUDGES`] rounds is SIGKILLed (an unreaped child of ours, so the pid is exact).
    /// Returns true once the reaper is gone.
    async fn nudge(&self, reaper_child: &mut tokio::process::Child, nudges: &mut u32) -> bool {
        *nudges += 1;
        self.kill_cgroup();
        if let Some(pid) = reaper_child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            if *nudges < MAX_NUDGES {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
                self.watchdog.arm(self.grace + WATCHDOG_SLACK);
                return false;
            }
        }
        let _ = reaper_child.start_kill();
        let _ = reaper_child.wait().await;
        self.kill_cgroup();
        true
    }

    fn kill_cgroup(&self) {
        if let Some(cg) = &self.cgroup {
            let _ = rustix::io::write(&cg.kill, b"1");
        }
    }
}

/// How often the owner checks, while it waits for the leader's exit, that the reaper is
/// not stopped.
const STOP_CHECK: Duration = Duration::from_secs(1);

/// SIGCONT to the reaper if it is stopped (an unreaped child of ours: the pid is exact).
fn continue_if_stopped(reaper_child: &tokio::process::Child) {
    let Some(pid) = reaper_child.id() else {
        return;
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, Some('T' | 't')) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
        }
    }
}

/// How long the owner waits for the leader's first record. Only something outside the
/// command (the leader has run none of its code yet) can delay it; a guess at "stuck".
const STARTED_WAIT: Duration = Duration::from_secs(30);
/// How long the owner waits for the reaper to confirm the `execve`. The command can delay
/// the confirmation by stopping its reaper; then it is running, so waiting longer gains
/// nothing. A guess.
const EXEC_OK_WAIT: Duration = Duration::from_secs(2);

/// Reads the start of the status protocol: the leader's pid, then either the reaper's
/// confirmation of the `execve` or the leader's errno.
///
/// # Errors
/// The `execve` errno, or `TimedOut` / `UnexpectedEof` when the reaper vanished.
pub(crate) fn read_start(status_r: &OwnedFd) -> io::Result<u32> {
    let started = read_record(status_r, STARTED_WAIT)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "the process reaper did not start the command",
        )
    })?;
    let pid = match started {
        (reaper::STATUS_STARTED, pid) => u32::try_from(pid).map_err(|_| bad_record())?,
        (reaper::STATUS_EXEC_FAILED, errno) => return Err(io::Error::from_raw_os_error(errno)),
        (reaper::STATUS_CONFINE_FAILED, value) => {
            return Err(io::Error::other(ConfineFailed {
                step: u8::try_from(value >> 16).unwrap_or(0),
                errno: value & 0xffff,
            }))
        }
        _ => return Err(bad_record()),
    };
    // The leader writes the errno before it exits when `execve` fails; so a confirmation,
    // silence, or end-of-file (the command already killed its reaper) all mean the
    // command is running.
    match read_record(status_r, EXEC_OK_WAIT) {
        Ok(Some((reaper::STATUS_EXEC_FAILED, errno))) => Err(io::Error::from_raw_os_error(errno)),
        Ok(Some((reaper::STATUS_EXEC_OK, _)) | None) => Ok(pid),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(pid),
        Err(e) => Err(e),
        Ok(Some(_)) => Err(bad_record()),
    }
}

/// The leader could not apply its sandbox restrictions (carried in an `io::Error`).
#[derive(Debug)]
pub(crate) struct ConfineFailed {
    pub step: u8,
    pub errno: i32,
}

impl std::fmt::Display for ConfineFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let step = dsh_sandbox::ConfineStep::from_code(self.step)
            .map_or("confining the command", |s| s.describe());
        write!(
            f,
            "{step} failed: {}",
            io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for ConfineFailed {}

fn bad_record() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "the process reaper sent an unexpected record",
    )
}

/// One record, or `None` when none arrived within `wait`.
fn read_record(fd: &OwnedFd, wait: Duration) -> io::Result<Option<(u8, i32)>> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let until = std::time::Instant::now() + wait;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let timeout = Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => return Ok(None),
            Ok(_) => break,
            // A signal for this process (tokio's SIGCHLD, say) is not our business.
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let mut rec = [0u8; reaper::STATUS_LEN];
    let mut got = 0;
    while got < rec.len() {
        match rustix::io::read(fd, &mut rec[got..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the process reaper exited early",
                ))
            }
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some((
        rec[0],
        i32::from_ne_bytes([rec[1], rec[2], rec[3], rec[4]]),
    )))
}

fn decode_exit(rec: &[u8; reaper::STATUS_LEN]) -> Outcome {
    let value = i32::from_ne_bytes([rec[1], rec[2], rec[3], rec[4]]);
    match rec[0] {
        reaper::STATUS_EXITED => Outcome::Exited(value),
        reaper::STATUS_SIGNALED => Outcome::Signaled(Signal(value)),
        // An `execve` that failed after `spawn` stopped waiting for it (a very slow
        // filesystem): report it as a shell would, 127 for a missing file, else 126.
        reaper::STATUS_EXEC_FAILED if value == libc::ENOENT => Outcome::Exited(127),
        reaper::STATUS_EXEC_FAILED => Outcome::Exited(126),
        _ => Outcome::Lost,
    }
}
