//! [`LocalSubprocess`]: the subprocess seam on this machine.
//!
//! # Mechanism
//! Each spawn forks a per-command reaper that forks the command leader (see the
//! `reaper` module). Two pipes connect the owner and the reaper: the status pipe carries
//! the leader's wait status the moment it exits; the control pipe carries `T` (terminate)
//! and `K` (kill), and its end-of-file (every owner handle dropped, or dsh gone) makes the
//! reaper SIGKILL the tree. The reaper's own exit, seen through tokio's child reaping, is
//! the "whole tree gone" event: no polling of process groups.
//!
//! One monitor task per process reads the status, bounds the pipe drain by the grace,
//! settles `done`, and then waits for the reaper's exit.
//!
//! # Limits
//! Linux only (see the crate docs).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::spill::SpillDir;
use dsh_core::{CancelToken, ErrorCode, HarnessError, MAX_TIMER_DELAY_MS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::capture::{self, Capture, CaptureLimits, StreamName};
use crate::cgroup::{CgroupRoot, CommandCgroup};
use crate::reaper::{self, ExecPlan, ReaperFds};
use crate::{
    env, resolve, EnvOverlay, Outcome, OutputMode, Process, ProcessControl, Signal, SpawnSpec,
    StdinMode, Subprocess, TreeMechanism,
};

/// The subprocess seam on this machine (Linux).
///
/// # Requires
/// Linux with `/proc` mounted (`PR_SET_CHILD_SUBREAPER`, `/proc/thread-self/children`,
/// `signalfd`), and a tokio runtime with IO and time enabled.
pub struct LocalSubprocess {
    cgroups: Result<Arc<CgroupRoot>, String>,
    spill_parent: Option<PathBuf>,
    keep_spill: bool,
    spill_dir: Arc<OnceLock<Option<Arc<SpillDir>>>>,
    live: Arc<Mutex<HashMap<u64, LiveEntry>>>,
    next_id: std::sync::atomic::AtomicU64,
}

struct LiveEntry {
    control: Weak<LocalControl>,
    gone: watch::Receiver<bool>,
}

impl Default for LocalSubprocess {
    fn default() -> Self {
        LocalSubprocess::new()
    }
}

impl LocalSubprocess {
    /// A provider whose spill directory is made lazily, at the first spill, in the system
    /// temp directory, and removed when the provider is dropped. It puts each command in
    /// its own cgroup when this process may create cgroups (see
    /// [`tree_mechanism`](Subprocess::tree_mechanism) and [`cgroup_status`](Self::cgroup_status)).
    pub fn new() -> LocalSubprocess {
        LocalSubprocess {
            cgroups: CgroupRoot::probe().map(Arc::new),
            spill_parent: None,
            keep_spill: false,
            spill_dir: Arc::new(OnceLock::new()),
            live: Arc::new(Mutex::new(HashMap::new())),
            next_id: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Uses the per-command subreaper alone, even where cgroups could be created (for
    /// tests of that mechanism, and for hosts that manage cgroups themselves).
    /// Default: cgroups when available.
    pub fn without_cgroups(mut self) -> Self {
        self.cgroups = Err("cgroups disabled by configuration".into());
        self
    }

    /// Whether commands get their own cgroup, and if not, why not.
    pub fn cgroup_status(&self) -> Result<(), &str> {
        match &self.cgroups {
            Ok(_) => Ok(()),
            Err(why) => Err(why),
        }
    }

    /// Makes the spill directory under `parent` instead of the system temp directory.
    /// Default: `$TMPDIR` or `/tmp`.
    pub fn with_spill_parent(mut self, parent: impl Into<PathBuf>) -> Self {
        self.spill_parent = Some(parent.into());
        self
    }

    /// Keeps the spill directory when the provider is dropped (so printed spill paths stay
    /// valid after dsh exits). Default: removed.
    pub fn keep_spill_files(mut self, keep: bool) -> Self {
        self.keep_spill = keep;
        self
    }

    /// The spill directory, if one was made.
    pub fn spill_dir(&self) -> Option<Arc<SpillDir>> {
        self.spill_dir.get().cloned().flatten()
    }

    fn spill_dir_factory(&self) -> Arc<dyn Fn() -> Option<Arc<SpillDir>> + Send + Sync> {
        let cell = self.spill_dir.clone();
        let parent = self.spill_parent.clone();
        let keep = self.keep_spill;
        Arc::new(move || {
            cell.get_or_init(|| {
                SpillDir::create(parent.as_deref())
                    .ok()
                    .map(|d| Arc::new(if keep { d.keep() } else { d }))
            })
            .clone()
        })
    }

    fn live_lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, LiveEntry>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Subprocess for LocalSubprocess {
    fn resolve_executable(
        &self,
        command: &OsStr,
        env: &EnvOverlay,
    ) -> Result<PathBuf, HarnessError> {
        let path = path_of(env);
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        resolve::resolve(command, path.as_deref(), &cwd, false)
    }

    fn spawn(&self, spec: SpawnSpec) -> Result<Process, HarnessError> {
        validate(&spec)?;
        let program = resolve::resolve(
            &spec.argv[0],
            path_of(&spec.env).as_deref(),
            &spec.cwd,
            true,
        )?;
        let (status_r, status_w) = cloexec_pipe()?;
        let (control_r, control_w) = cloexec_pipe()?;
        rustix::io::ioctl_fionbio(&control_w, true).map_err(spawn_failed)?;

        // A command whose cgroup cannot be made still runs: its subreaper alone keeps the
        // tree exact.
        let cgroup = self
            .cgroups
            .as_ref()
            .ok()
            .and_then(|root| root.command().ok());
        let mut plan = ExecPlan::new(
            program.as_os_str(),
            &spec.argv,
            &env::child_env(&spec.env),
            cgroup.as_ref().map(|c| c.procs.as_raw_fd()),
        )
        .map_err(|e| HarnessError::invalid_argument(e.to_string()))?;
        // std forks the reaper and sets up its stdio and cwd; the reaper never returns to
        // std (it starts the program itself), so std's own program, args and env are unused.
        let mut cmd = tokio::process::Command::new(&program);
        cmd.current_dir(&spec.cwd)
            .env_clear()
            .stdin(match spec.stdin {
                StdinMode::Ignore => Stdio::null(),
                StdinMode::Data(_) | StdinMode::Pipe => Stdio::piped(),
            })
            .stdout(stdio_for(&spec.stdout))
            .stderr(stdio_for(&spec.stderr));
        let fds = ReaperFds {
            status_w: status_w.as_raw_fd(),
            control_r: control_r.as_raw_fd(),
            cgroup_kill: cgroup.as_ref().map_or(-1, |c| c.kill.as_raw_fd()),
        };
        // SAFETY: `reaper::enter` runs in the forked child before exec and uses only
        // async-signal-safe calls on fds that are open in the child (we keep them open in
        // the parent until spawn returns).
        unsafe {
            cmd.pre_exec(move || reaper::enter(fds, &mut plan));
        }
        let spawned = cmd.spawn();
        let cgroup_dir = cgroup.map(|c| c.dir);
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some(dir) = cgroup_dir {
                    let _ = std::fs::remove_dir(dir);
                }
                return Err(spawn_error(e, &spec));
            }
        };
        drop((status_w, control_r));
        let pid = child.id().unwrap_or(0);

        let stdin_pipe = child.stdin.take();
        let mut stdin_out: Option<Box<dyn tokio::io::AsyncWrite + Send + Sync + Unpin>> = None;
        match (&spec.stdin, stdin_pipe) {
            (StdinMode::Data(data), Some(mut w)) => {
                let data = data.clone();
                // EPIPE from a child that never reads is not an error: the exit status and
                // the output stay authoritative.
                tokio::spawn(async move {
                    let _ = w.write_all(&data).await;
                    let _ = w.shutdown().await;
                });
            }
            (StdinMode::Pipe, Some(w)) => stdin_out = Some(Box::new(w)),
            _ => {}
        }

        let stop = CancelToken::new();
        let mut pumps = Vec::new();
        let mut raw_out: Option<Box<dyn tokio::io::AsyncRead + Send + Sync + Unpin>> = None;
        let mut raw_err: Option<Box<dyn tokio::io::AsyncRead + Send + Sync + Unpin>> = None;
        let mut out_cap = None;
        let mut err_cap = None;
        if let Some(out) = child.stdout.take() {
            match &spec.stdout {
                OutputMode::Collect(limits) => {
                    let cap = Capture::new(StreamName::Stdout, limits, self.spill_dir_factory());
                    widen_pipe(&out, limits);
                    pumps.push(tokio::spawn(capture::pump(cap.clone(), out, stop.clone())));
                    out_cap = Some(cap);
                }
                _ => raw_out = Some(Box::new(out)),
            }
        }
        if let Some(err) = child.stderr.take() {
            match &spec.stderr {
                OutputMode::Collect(limits) => {
                    let cap = Capture::new(StreamName::Stderr, limits, self.spill_dir_factory());
                    widen_pipe(&err, limits);
                    pumps.push(tokio::spawn(capture::pump(cap.clone(), err, stop.clone())));
                    err_cap = Some(cap);
                }
                _ => raw_err = Some(Box::new(err)),
            }
        }

        let (done_tx, done_rx) = watch::channel(None);
        let (gone_tx, gone_rx) = watch::channel(false);
        let control = Arc::new(LocalControl {
            pid,
            grace: spec.grace,
            control_w: Mutex::new(Some(control_w)),
            terminating: std::sync::atomic::AtomicBool::new(false),
            done: done_rx,
            gone: gone_rx.clone(),
        });
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.live_lock().insert(
            id,
            LiveEntry {
                control: Arc::downgrade(&control),
                gone: gone_rx,
            },
        );
        let monitor = Monitor {
            control: Arc::downgrade(&control),
            status_r,
            grace: spec.grace,
            cancel: spec.cancel.clone(),
            stop,
            pumps,
            done_tx,
            gone_tx,
            live: Arc::downgrade(&self.live),
            id,
            cgroup_dir,
        };
        tokio::spawn(monitor.run(child));
        Ok(Process::from_parts(
            control, stdin_out, raw_out, raw_err, out_cap, err_cap,
        ))
    }

    fn tree_mechanism(&self) -> TreeMechanism {
        match self.cgroups {
            Ok(_) => TreeMechanism::Cgroup,
            Err(_) => TreeMechanism::Subreaper,
        }
    }

    async fn shutdown(&self) {
        let entries: Vec<(Option<Arc<LocalControl>>, watch::Receiver<bool>)> = self
            .live_lock()
            .values()
            .map(|e| (e.control.upgrade(), e.gone.clone()))
            .collect();
        for (control, _) in &entries {
            if let Some(c) = control {
                c.terminate();
            }
        }
        for (control, mut gone) in entries {
            let _ = gone.wait_for(|g| *g).await;
            drop(control);
        }
    }
}

impl Drop for LocalSubprocess {
    fn drop(&mut self) {
        // No waiting in drop: SIGKILL what is left; each reaper exits once its tree is empty.
        for e in self.live_lock().values() {
            if let Some(c) = e.control.upgrade() {
                c.kill();
            }
        }
    }
}

fn validate(spec: &SpawnSpec) -> Result<(), HarnessError> {
    let grace_ms = spec.grace.as_secs_f64() * 1000.0;
    if spec.grace.is_zero() || grace_ms > MAX_TIMER_DELAY_MS as f64 {
        return Err(HarnessError::invalid_argument(
            "subprocess grace_ms must be a positive finite number no greater than 2147483647",
        ));
    }
    if let Some(reason) = spec.cancel.as_ref().and_then(CancelToken::reason) {
        return Err(HarnessError::aborted_before_start("spawn", reason));
    }
    if spec.argv.first().is_none_or(|a| a.is_empty()) {
        return Err(HarnessError::invalid_argument(
            "invalid argv: expected a non-empty program name at argv[0]",
        ));
    }
    match std::fs::metadata(&spec.cwd) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(HarnessError::new(
            ErrorCode::ProcessCwdInvalid,
            format!(
                "working directory {} is not a directory",
                spec.cwd.display()
            ),
        )),
        Err(e) => Err(HarnessError::new(
            ErrorCode::ProcessCwdInvalid,
            format!(
                "working directory {} cannot be used; pass an existing directory",
                spec.cwd.display()
            ),
        )
        .with_source(e)),
    }
}

fn path_of(env: &EnvOverlay) -> Option<std::ffi::OsString> {
    match env.get("PATH") {
        Some(Some(p)) => Some(p.into()),
        Some(None) => None,
        None => std::env::var_os("PATH"),
    }
}

fn stdio_for(mode: &OutputMode) -> Stdio {
    match mode {
        OutputMode::Inherit => Stdio::inherit(),
        OutputMode::Pipe | OutputMode::Collect(_) => Stdio::piped(),
    }
}

/// A larger pipe means fewer wake-ups for a chatty command. The kernel caps unprivileged
/// sizes at `/proc/sys/fs/pipe-max-size` (1 MiB by default); failure just keeps 64 KiB.
fn widen_pipe(fd: &impl std::os::fd::AsFd, limits: &CaptureLimits) {
    if limits.max_bytes > 64 * 1024 {
        let _ = rustix::pipe::fcntl_setpipe_size(fd, 1 << 20);
    }
}

fn cloexec_pipe() -> Result<(OwnedFd, OwnedFd), HarnessError> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(spawn_failed)
}

fn spawn_failed(e: rustix::io::Errno) -> HarnessError {
    HarnessError::new(
        ErrorCode::ProcessSpawnFailed,
        "cannot create the pipes for a new process",
    )
    .with_source(io::Error::from(e))
}

fn spawn_error(e: io::Error, spec: &SpawnSpec) -> HarnessError {
    let shown = resolve::quoted(&spec.argv[0]);
    let (code, what) = match e.raw_os_error() {
        // The program was checked just before, so ENOENT here means its interpreter (the
        // `#!` line) or loader is missing.
        Some(libc::ENOENT) => (
            ErrorCode::ProcessNotExecutable,
            format!("cannot execute {shown}: its interpreter or loader was not found"),
        ),
        Some(libc::EACCES) | Some(libc::ENOEXEC) | Some(libc::ETXTBSY) | Some(libc::EISDIR) => (
            ErrorCode::ProcessNotExecutable,
            format!("cannot execute {shown}"),
        ),
        _ => (
            ErrorCode::ProcessSpawnFailed,
            format!("cannot start {shown}"),
        ),
    };
    HarnessError::new(code, what).with_source(e)
}

/// The owner's side of one tree. Dropping it closes the control pipe, which makes the
/// reaper SIGKILL the tree (as does dsh's own death, which closes it too).
struct LocalControl {
    pid: u32,
    grace: Duration,
    control_w: Mutex<Option<OwnedFd>>,
    terminating: std::sync::atomic::AtomicBool,
    done: watch::Receiver<Option<Outcome>>,
    gone: watch::Receiver<bool>,
}

impl LocalControl {
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

    fn terminate(&self) {
        if self.is_tree_gone()
            || self
                .terminating
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        self.send(reaper::CONTROL_TERM);
        let grace = self.grace;
        let mut gone = self.gone.clone();
        // The escalation outlives settlement on purpose: a TERM-ignoring survivor in the
        // tree must still be killed after the leader settles.
        let w = self
            .control_w
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|fd| fd.try_clone().ok());
        if let Some(w) = w {
            tokio::spawn(async move {
                if tokio::time::timeout(grace, gone.wait_for(|g| *g))
                    .await
                    .is_err()
                {
                    let _ = rustix::io::write(&w, &[reaper::CONTROL_KILL]);
                }
            });
        }
    }

    fn kill(&self) {
        if !self.is_tree_gone() {
            self.send(reaper::CONTROL_KILL);
        }
    }

    fn is_tree_gone(&self) -> bool {
        *self.gone.borrow()
    }

    async fn wait_for_exit(&self) {
        let mut rx = self.gone.clone();
        let _ = rx.wait_for(|g| *g).await;
    }
}

struct Monitor {
    control: Weak<LocalControl>,
    status_r: OwnedFd,
    grace: Duration,
    cancel: Option<CancelToken>,
    stop: CancelToken,
    pumps: Vec<tokio::task::JoinHandle<()>>,
    done_tx: watch::Sender<Option<Outcome>>,
    gone_tx: watch::Sender<bool>,
    live: Weak<Mutex<HashMap<u64, LiveEntry>>>,
    id: u64,
    cgroup_dir: Option<PathBuf>,
}

impl Monitor {
    async fn run(self, mut reaper_child: tokio::process::Child) {
        let outcome = self.leader_outcome().await;
        // The leader exited: give descendants that still hold the pipes at most `grace` to
        // let go, then stop reading. Output written after that is not captured.
        let mut pumps = self.pumps;
        let all = futures_join(&mut pumps);
        if tokio::time::timeout(self.grace, all).await.is_err() {
            self.stop.cancel("pipe drain grace elapsed");
            for p in pumps.iter_mut() {
                let _ = p.await;
            }
        }
        let _ = self.done_tx.send(Some(outcome));
        // The reaper exits only when its tree is empty: that is the quiescence event.
        let _ = reaper_child.wait().await;
        if let Some(dir) = self.cgroup_dir {
            CommandCgroup::remove(dir).await;
        }
        let _ = self.gone_tx.send(true);
        if let Some(live) = self.live.upgrade() {
            live.lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.id);
        }
    }

    async fn leader_outcome(&self) -> Outcome {
        let file = std::fs::File::from(match self.status_r.try_clone() {
            Ok(fd) => fd,
            Err(_) => return Outcome::Lost,
        });
        let mut status = match tokio::net::unix::pipe::Receiver::from_file(file) {
            Ok(r) => r,
            Err(_) => return Outcome::Lost,
        };
        let mut rec = [0u8; reaper::STATUS_LEN];
        let read = status.read_exact(&mut rec);
        tokio::pin!(read);
        let mut cancel_seen = false;
        loop {
            let cancelled = async {
                match &self.cancel {
                    Some(c) if !cancel_seen => c.cancelled().await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                r = &mut read => {
                    return match r {
                        Ok(_) => decode_status(&rec),
                        Err(_) => Outcome::Lost,
                    };
                }
                () = cancelled => {
                    cancel_seen = true;
                    if let Some(c) = self.control.upgrade() {
                        c.terminate();
                    }
                }
            }
        }
    }
}

async fn futures_join(pumps: &mut [tokio::task::JoinHandle<()>]) {
    for p in pumps.iter_mut() {
        let _ = p.await;
    }
}

fn decode_status(rec: &[u8; reaper::STATUS_LEN]) -> Outcome {
    let mut v = [0u8; 4];
    v.copy_from_slice(&rec[1..]);
    let value = i32::from_ne_bytes(v);
    match rec[0] {
        reaper::STATUS_EXITED => Outcome::Exited(value),
        reaper::STATUS_SIGNALED => Outcome::Signaled(Signal(value)),
        _ => Outcome::Lost,
    }
}
