//! [`LocalSubprocess`]: the subprocess seam on this machine.
//!
//! # Mechanism
//! Each spawn forks a per-command reaper (see the `reaper` module) that starts the
//! command leader and owns its whole tree, inside a cgroup v2 of its own where this
//! process may create cgroups (the `cgroup` module). Two pipes connect the owner and the
//! reaper: the status pipe carries the leader's pid and then its exit status; the control
//! pipe carries terminate and kill, and its end-of-file (every owner handle dropped, or
//! dsh gone) makes the reaper SIGKILL the tree. The reaper's own exit is the "whole tree
//! gone" event (the `control` module turns these into `done` and `wait_for_exit`).
//! The process limit is the `pids.max` of the command's cgroup v2 where the subtree has
//! the `pids` controller, else of a cgroup in the v1 `pids` hierarchy (the `pids_v1`
//! module), where this process may create one.
//!
//! # Limits
//! Linux only (see the crate docs). Each live reaper is a fork of the host process: pages
//! the host writes after the fork are copied for it, so a host with a large, busy heap
//! pays that per running command.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use async_trait::async_trait;
use dsh_core::spill::SpillDir;
use dsh_core::{CancelToken, ErrorCode, HarnessError, MAX_TIMER_DELAY_MS};
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

use crate::capture::{self, Capture, CaptureLimits, StreamName};
use crate::cgroup::CgroupRoot;
use crate::control::{self, LocalControl, Monitor, Watchdog};
use crate::exec_plan::ExecPlan;
use crate::pids_v1::PidsRoot;
use crate::pty::{Pty, PtyPair};
use crate::reaper::{self, ReaperFds};
use crate::{
    env, program, EnvAllow, EnvOverlay, OutputMode, Process, ProcessControl, SpawnSpec, StdinMode,
    Subprocess, TreeMechanism,
};

/// The default process limit: at most this many processes and threads per command.
pub const DEFAULT_PROCESS_LIMIT: u32 = 4096;

/// A process limit in force (see [`LocalSubprocess::process_limit_status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessLimit {
    /// At most this many processes and threads per command, all descendants counted; a
    /// `fork` or `clone` past it fails with `EAGAIN`.
    pub max: u32,
    /// The cgroup hierarchy whose `pids` controller holds it: `cgroup v2` or `cgroup v1`.
    pub hierarchy: &'static str,
}

/// The limit on all the commands of one provider together: twice the per-command limit,
/// at most a quarter of the machine's pids (`kernel.pid_max`), never below the
/// per-command limit.
fn subtree_limit(per_command: u32) -> u32 {
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(32_768);
    per_command
        .saturating_mul(2)
        .min(pid_max / 4)
        .max(per_command)
}

/// A command that cannot be held to the process limit in force.
fn limit_failed(e: io::Error) -> HarnessError {
    HarnessError::new(
        ErrorCode::ProcessSpawnFailed,
        format!(
            "cannot hold the command to the process limit (its pids cgroup could not be \
             made: {e}); nothing ran. `dsh doctor` shows the limit's state"
        ),
    )
    .with_source(e)
}

type SpillFactory = Arc<dyn Fn() -> Option<Arc<SpillDir>> + Send + Sync>;
type LiveSet = Arc<Mutex<HashMap<u64, LiveEntry>>>;

/// The subprocess seam on this machine (Linux).
///
/// # Requires
/// Linux with `/proc` mounted (`PR_SET_CHILD_SUBREAPER`, `/proc/thread-self/children`,
/// `signalfd`), and a tokio runtime with IO and time enabled. Cgroups v2 with
/// `cgroup.kill` (Linux 5.14) and a writable own cgroup are used when present.
pub struct LocalSubprocess {
    proc_children: Result<(), String>,
    /// Probed at first use, so a provider that never spawns (or opts out) creates nothing.
    cgroups: OnceLock<Result<Arc<CgroupRoot>, String>>,
    /// The v1 `pids` subtree, probed at the first command the v2 subtree cannot limit.
    pids_v1: OnceLock<Result<Arc<PidsRoot>, String>>,
    process_limit: Option<u32>,
    spill_parent: Option<PathBuf>,
    keep_spill: bool,
    /// The cap on every spill file of this provider together (see
    /// [`SpillDir::charge`](dsh_core::spill::SpillDir::charge)).
    spill_total_cap: u64,
    spill_dir: Arc<OnceLock<Option<Arc<SpillDir>>>>,
    live: LiveSet,
    next_id: AtomicU64,
    env_allow: EnvAllow,
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

impl std::fmt::Debug for LocalSubprocess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSubprocess")
            .field("tree_mechanism", &self.tree_mechanism())
            .field("env_allow", &self.env_allow)
            .finish_non_exhaustive()
    }
}

impl LocalSubprocess {
    /// A provider whose spill directory is made lazily, at the first spill, in the system
    /// temp directory, and removed when the provider is dropped. It puts each command in
    /// its own cgroup when this process may create cgroups (see
    /// [`tree_mechanism`](Subprocess::tree_mechanism) and
    /// [`cgroup_status`](Self::cgroup_status)).
    pub fn new() -> LocalSubprocess {
        let proc_children = proc_is_usable();
        LocalSubprocess {
            proc_children,
            cgroups: OnceLock::new(),
            pids_v1: OnceLock::new(),
            process_limit: Some(DEFAULT_PROCESS_LIMIT),
            spill_parent: None,
            keep_spill: false,
            spill_total_cap: dsh_core::spill::DEFAULT_TOTAL_CAP,
            spill_dir: Arc::new(OnceLock::new()),
            live: Arc::new(Mutex::new(HashMap::new())),
            next_id: AtomicU64::new(0),
            env_allow: EnvAllow::default(),
        }
    }

    /// Uses the per-command subreaper alone, even where cgroups could be created (for
    /// tests of that mechanism, and for hosts that manage cgroups themselves); with no
    /// cgroup there is no process limit either. Default: cgroups when available.
    pub fn without_cgroups(mut self) -> Self {
        const DISABLED: &str = "cgroups disabled by configuration";
        self.cgroups = OnceLock::from(Err(DISABLED.to_owned()));
        self.pids_v1 = OnceLock::from(Err(DISABLED.to_owned()));
        self
    }

    /// Holds every command to at most `limit` processes and threads, descendants
    /// included, where this process may create cgroups with the `pids` controller (see
    /// [`process_limit_status`](Self::process_limit_status)); a fork bomb then stops at
    /// the limit instead of exhausting the machine's pids. `None`: no limit.
    /// Default: [`DEFAULT_PROCESS_LIMIT`].
    ///
    /// # Panics
    /// If `limit` is `Some(0)` (no command could start).
    pub fn with_process_limit(mut self, limit: Option<u32>) -> Self {
        assert_ne!(
            limit,
            Some(0),
            "a process limit of 0 would stop every command"
        );
        self.process_limit = limit;
        self
    }

    /// The process limit each command is held to, or why there is none: no limit set,
    /// or no cgroup with the `pids` controller that this process may create.
    pub fn process_limit_status(&self) -> Result<ProcessLimit, String> {
        let max = self.process_limit.ok_or("no process limit is set")?;
        let v2 = match self.cgroup_root() {
            Ok(root) => match root.pids_missing() {
                None => {
                    return Ok(ProcessLimit {
                        max,
                        hierarchy: "cgroup v2",
                    })
                }
                Some(why) => why,
            },
            Err(why) => why.clone(),
        };
        match self.pids_v1_root() {
            Ok(_) => Ok(ProcessLimit {
                max,
                hierarchy: "cgroup v1",
            }),
            Err(v1) => Err(format!("{v2}; {v1}")),
        }
    }

    /// The v1 `pids` subtree, created at the first call.
    fn pids_v1_root(&self) -> &Result<Arc<PidsRoot>, String> {
        let total = self.process_limit.map(subtree_limit);
        self.pids_v1
            .get_or_init(|| PidsRoot::probe(total).map(Arc::new))
    }

    /// Whether commands get their own cgroup, and if not, why not.
    pub fn cgroup_status(&self) -> Result<(), &str> {
        match self.cgroup_root() {
            Ok(_) => Ok(()),
            Err(why) => Err(why),
        }
    }

    /// Registers the `started` command as live and hands its reaper, pumps and groups to a
    /// monitor task that settles it; its control.
    fn watch(
        &self,
        started: Started,
        spec: &SpawnSpec,
        stop: CancelToken,
        wired: &mut Wired,
    ) -> Arc<LocalControl> {
        let Started {
            child,
            pid,
            control_w,
            status_r,
            cgroup,
            pids,
        } = started;
        let (done_tx, done_rx) = watch::channel(None);
        let (gone_tx, gone_rx) = watch::channel(false);
        let watchdog = Arc::new(Watchdog::default());
        let control = Arc::new(LocalControl::new(
            pid,
            spec.grace,
            control_w,
            done_rx,
            gone_rx.clone(),
            watchdog.clone(),
        ));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.live_lock().insert(
            id,
            LiveEntry {
                control: Arc::downgrade(&control),
                gone: gone_rx,
            },
        );
        let live = Arc::downgrade(&self.live);
        let monitor = Monitor {
            control: Arc::downgrade(&control),
            status_r: Some(status_r),
            grace: spec.grace,
            cancel: spec.cancel.clone(),
            stop,
            pumps: std::mem::take(&mut wired.pumps),
            done_tx,
            gone_tx,
            watchdog,
            cgroup,
            pids,
            on_gone: Box::new(move || {
                if let Some(live) = live.upgrade() {
                    live.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                }
            }),
        };
        tokio::spawn(monitor.run(child));
        control
    }

    /// What the reaper of `spec` runs: the program `spec` names and its exec plan (argv,
    /// the child's environment, the sandbox restrictions and the fds they carry).
    ///
    /// # Errors
    /// `spec`'s own (see [`validate`]), `PROCESS_SPAWN_FAILED` where children cannot be
    /// tracked, the program's lookup, `INVALID_ARGUMENT` for a plan that cannot be made.
    fn plan_for(&self, spec: &SpawnSpec) -> Result<(PathBuf, ExecPlan), HarnessError> {
        validate(spec)?;
        if let Err(why) = &self.proc_children {
            return Err(HarnessError::new(
                ErrorCode::ProcessSpawnFailed,
                why.clone(),
            ));
        }
        let program = program::find_program(
            &spec.argv[0],
            path_of(&spec.env).as_deref(),
            &spec.cwd,
            true,
        )?;
        let mut plan = ExecPlan::new(
            program.as_os_str(),
            &spec.argv,
            &env::child_env(&spec.env, &self.env_allow),
            spec.grace,
        )
        .map_err(|e| HarnessError::invalid_argument(e.to_string()))?;
        if let Some(r) = &spec.restrictions {
            let carried = r.carried_fds();
            if carried.len() > crate::exec_plan::MAX_CARRIED_FDS {
                return Err(HarnessError::invalid_argument(format!(
                    "the sandbox restrictions carry {} file descriptors; at most {} are supported",
                    carried.len(),
                    crate::exec_plan::MAX_CARRIED_FDS
                )));
            }
            plan.carried = carried;
            plan.restrictions = Some(r.clone());
        }
        Ok((program, plan))
    }

    /// The cgroup v2 of the command `spec` starts and its cgroup v1 pids group, where it
    /// gets them: one where it asks for its own or the process limit lives in it; the v1
    /// pids group where the limit is in force and cgroup v2 cannot hold it.
    ///
    /// # Errors
    /// `PROCESS_SPAWN_FAILED` when the process limit is in force and cannot be held.
    fn groups_for(
        &self,
        spec: &SpawnSpec,
    ) -> Result<
        (
            Option<crate::cgroup::CommandCgroup>,
            Option<crate::pids_v1::PidsCgroup>,
        ),
        HarnessError,
    > {
        // A command whose cgroup cannot be made still runs: its subreaper alone keeps the
        // tree exact. One that does without a cgroup still gets one where the process
        // limit lives in it; and where the limit is in force, a command that cannot be
        // held to it does not run.
        let root = self.cgroup_root().as_ref().ok();
        let limit = self.process_limit;
        let v2_limits = limit.is_some() && root.is_some_and(|r| r.pids);
        let cgroup = match root {
            Some(r) if spec.own_cgroup || v2_limits => match r.command(limit) {
                Ok(c) => Some(c),
                Err(e) if v2_limits => return Err(limit_failed(e)),
                Err(_) => None,
            },
            _ => None,
        };
        // Where cgroup v2 cannot hold the limit, the v1 pids hierarchy does.
        let pids = match (limit, self.pids_v1_root()) {
            (Some(max), Ok(r)) if !cgroup.as_ref().is_some_and(|c| c.limited) => {
                match r.command(max) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        if let Some(cg) = cgroup {
                            let _ = std::fs::remove_dir(&cg.dir);
                        }
                        return Err(limit_failed(e));
                    }
                }
            }
            _ => None,
        };
        Ok((cgroup, pids))
    }

    /// The private cgroup subtree, created at the first call.
    fn cgroup_root(&self) -> &Result<Arc<CgroupRoot>, String> {
        self.cgroups
            .get_or_init(|| CgroupRoot::probe(self.process_limit.map(subtree_limit)).map(Arc::new))
    }

    /// Makes the spill directory under `parent` instead of the user's private directory.
    /// Default: [`private_parent`](dsh_core::spill::private_parent).
    pub fn with_spill_parent(mut self, parent: impl Into<PathBuf>) -> Self {
        self.spill_parent = Some(parent.into());
        self
    }

    /// Caps every spill file this provider makes, together, at `bytes`: past it the
    /// oldest are deleted to make room, and a result whose spill cost one says so.
    /// Default: [`DEFAULT_TOTAL_CAP`](dsh_core::spill::DEFAULT_TOTAL_CAP) (1 GiB).
    pub fn with_spill_total_cap(mut self, bytes: u64) -> Self {
        self.spill_total_cap = bytes;
        self
    }

    /// Keeps the spill directory when the provider is dropped (so printed spill paths stay
    /// valid after dsh exits). Default: removed.
    pub fn keep_spill_files(mut self, keep: bool) -> Self {
        self.keep_spill = keep;
        self
    }

    /// Lets the host variables named in `allow` through the environment scrub: each
    /// reaches every command this provider spawns with its value unchecked, unless the
    /// spawn's overlay sets or removes it. Names are matched exactly and
    /// case-sensitively; `DSH_*` names cannot be entries (see [`EnvAllow`] and the
    /// precedence in the [`env`](mod@crate::env) module). Replaces any earlier
    /// allow-list. Default: empty (the scrub applies to every name).
    pub fn with_env_allow(mut self, allow: EnvAllow) -> Self {
        self.env_allow = allow;
        self
    }

    /// The host variables let through the environment scrub (see
    /// [`with_env_allow`](Self::with_env_allow)).
    pub fn env_allow(&self) -> &EnvAllow {
        &self.env_allow
    }

    /// The spill directory, if one was made.
    pub fn spill_dir(&self) -> Option<Arc<SpillDir>> {
        self.spill_dir.get().cloned().flatten()
    }

    fn spill_dir_factory(&self) -> SpillFactory {
        let cell = self.spill_dir.clone();
        let parent = self.spill_parent.clone();
        let keep = self.keep_spill;
        let cap = self.spill_total_cap;
        Arc::new(move || {
            cell.get_or_init(|| {
                SpillDir::create(parent.as_deref())
                    .ok()
                    .map(|d| d.with_caps(cap, dsh_core::spill::DISK_FLOOR))
                    .map(|d| Arc::new(if keep { d.keep() } else { d }))
            })
            .clone()
        })
    }

    fn live_lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, LiveEntry>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One output pipe: a capture with its pump for [`OutputMode::Collect`], else the raw
    /// pipe for the caller.
    fn wire_stream<R>(
        &self,
        pipe: R,
        name: StreamName,
        mode: &OutputMode,
        stop: &CancelToken,
        pumps: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> (Option<Arc<Capture>>, Option<RawReader>)
    where
        R: tokio::io::AsyncRead + std::os::fd::AsFd + Send + Sync + Unpin + 'static,
    {
        match mode {
            OutputMode::Collect(limits) => {
                let cap = Capture::new(name, limits, self.spill_dir_factory());
                widen_pipe(&pipe, limits);
                pumps.push(tokio::spawn(capture::pump(cap.clone(), pipe, stop.clone())));
                (Some(cap), None)
            }
            _ => (None, Some(Box::new(pipe))),
        }
    }

    /// Starts the capture pumps for the collected streams; hands back raw pipes otherwise.
    fn wire_output(
        &self,
        child: &mut tokio::process::Child,
        spec: &SpawnSpec,
        stop: &CancelToken,
    ) -> Wired {
        let mut w = Wired::default();
        if let Some(out) = child.stdout.take() {
            (w.out_cap, w.raw_out) =
                self.wire_stream(out, StreamName::Stdout, &spec.stdout, stop, &mut w.pumps);
        }
        if let Some(err) = child.stderr.take() {
            (w.err_cap, w.raw_err) =
                self.wire_stream(err, StreamName::Stderr, &spec.stderr, stop, &mut w.pumps);
        }
        match (&spec.stdin, child.stdin.take()) {
            (StdinMode::Data(data), Some(mut pipe)) => {
                let data = data.clone();
                // EPIPE from a child that never reads is not an error: the exit status and
                // the output stay authoritative.
                tokio::spawn(async move {
                    let _ = pipe.write_all(&data).await;
                    let _ = pipe.shutdown().await;
                });
            }
            (StdinMode::Pipe, Some(pipe)) => w.stdin = Some(Box::new(pipe)),
            _ => {}
        }
        w
    }
}

type RawReader = Box<dyn tokio::io::AsyncRead + Send + Sync + Unpin>;

/// A command its reaper started: what watching it until it settles takes.
struct Started {
    /// The reaper.
    child: tokio::process::Child,
    /// The command's leader.
    pid: u32,
    /// dsh's end of the reaper's control pipe.
    control_w: OwnedFd,
    /// The reaper's status pipe.
    status_r: tokio::net::unix::pipe::Receiver,
    /// The command's cgroup v2, if it has one.
    cgroup: Option<crate::cgroup::CommandCgroup>,
    /// The command's cgroup v1 pids group, if it has one.
    pids: Option<crate::pids_v1::PidsCgroup>,
}

#[derive(Default)]
struct Wired {
    stdin: Option<Box<dyn tokio::io::AsyncWrite + Send + Sync + Unpin>>,
    raw_out: Option<RawReader>,
    raw_err: Option<RawReader>,
    out_cap: Option<Arc<Capture>>,
    err_cap: Option<Arc<Capture>>,
    pumps: Vec<tokio::task::JoinHandle<()>>,
}

#[async_trait]
impl Subprocess for LocalSubprocess {
    fn find_program(&self, command: &OsStr, env: &EnvOverlay) -> Result<PathBuf, HarnessError> {
        let path = path_of(env);
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        program::find_program(command, path.as_deref(), &cwd, false)
    }

    fn spawn(&self, spec: SpawnSpec) -> Result<Process, HarnessError> {
        let (program, mut plan) = self.plan_for(&spec)?;
        let (status_r, status_w) = cloexec_pipe()?;
        let (control_r, control_w) = cloexec_pipe()?;
        rustix::io::ioctl_fionbio(&control_w, true).map_err(pipe_failed)?;
        let pty = match spec.terminal {
            Some(size) => Some(PtyPair::open(size).map_err(pty_failed)?),
            None => None,
        };
        // Made before the groups: a failure here leaves none behind.
        let mut cmd = reaper_command(&program, &spec, pty.as_ref())?;
        let (cgroup, pids) = self.groups_for(&spec)?;
        plan.terminal = pty.is_some();
        plan.cgroup_procs = cgroup.as_ref().map_or(-1, |c| c.procs.as_raw_fd());
        plan.join_required = cgroup.as_ref().is_some_and(|c| c.limited);
        plan.cgroup_dir = cgroup.as_ref().map_or(-1, |c| c.dir_fd.as_raw_fd());
        plan.pids_tasks = pids.as_ref().map_or(-1, |p| p.tasks.as_raw_fd());
        let fds = ReaperFds {
            status_w: status_w.as_raw_fd(),
            control_r: control_r.as_raw_fd(),
            cgroup_kill: cgroup.as_ref().map_or(-1, |c| c.kill.as_raw_fd()),
        };
        // SAFETY: `reaper::enter` runs in the forked child before exec and uses only
        // async-signal-safe calls on fds that are open in the child (we keep them open in
        // the parent until spawn returns) and on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || reaper::enter(fds, &mut plan));
        }
        let spawned = cmd.spawn();
        drop((status_w, control_r));
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if let Some(cg) = cgroup {
                    let _ = std::fs::remove_dir(&cg.dir);
                }
                if let Some(p) = pids {
                    tokio::spawn(p.remove());
                }
                return Err(spawn_error(e, &spec));
            }
        };
        let pid = match control::read_start(&status_r) {
            Ok(pid) => pid,
            Err(e) => {
                abandon(child, cgroup, pids);
                return Err(spawn_error(e, &spec));
            }
        };
        // From here on a failure stops what started and removes its groups.
        let status_r = match tokio::net::unix::pipe::Receiver::from_owned_fd(status_r) {
            Ok(r) => r,
            Err(e) => {
                abandon(child, cgroup, pids);
                return Err(HarnessError::new(
                    ErrorCode::ProcessSpawnFailed,
                    "cannot watch the process reaper",
                )
                .with_source(e));
            }
        };
        // The command holds the terminal side now; dsh keeps only its own.
        let terminal = match pty.map(|pair| Pty::from_pair(pair, pid)) {
            // The leader started a session of its own: its pid is the session id.
            Some(Ok(t)) => Some(t),
            Some(Err(e)) => {
                abandon(child, cgroup, pids);
                return Err(pty_failed(e));
            }
            None => None,
        };
        let stop = CancelToken::new();
        let mut wired = self.wire_output(&mut child, &spec, &stop);
        let started = Started {
            child,
            pid,
            control_w,
            status_r,
            cgroup,
            pids,
        };
        let control = self.watch(started, &spec, stop, &mut wired);
        let process = Process::from_parts(
            control,
            wired.stdin,
            wired.raw_out,
            wired.raw_err,
            wired.out_cap,
            wired.err_cap,
        );
        Ok(match terminal {
            Some(t) => process.with_terminal(t),
            None => process,
        })
    }

    fn tree_mechanism(&self) -> TreeMechanism {
        match self.cgroup_root() {
            Ok(_) => TreeMechanism::Cgroup,
            Err(_) => TreeMechanism::Subreaper,
        }
    }

    async fn shutdown(&self) {
        self.end_all(LocalControl::terminate).await;
    }

    async fn kill_all(&self) {
        self.end_all(LocalControl::signal_kill).await;
    }
}

impl LocalSubprocess {
    /// Ends every live tree with `end` and waits until each is gone.
    async fn end_all(&self, end: fn(&LocalControl)) {
        let entries: Vec<(Option<Arc<LocalControl>>, watch::Receiver<bool>)> = self
            .live_lock()
            .values()
            .map(|e| (e.control.upgrade(), e.gone.clone()))
            .collect();
        for (control, _) in &entries {
            if let Some(c) = control {
                end(c);
            }
        }
        // Bounded: each monitor's watchdog kills a reaper that does not finish in time.
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
                c.signal_kill();
            }
        }
    }
}

/// The reaper lists its children in `/proc/thread-self/children`; that `/proc` must be
/// this pid namespace's, or the pids it lists would name other processes.
fn proc_is_usable() -> Result<(), String> {
    let own = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str().and_then(|s| s.parse::<u32>().ok()));
    if own != Some(std::process::id()) {
        return Err(
            "/proc does not belong to this process's pid namespace (or is not mounted); \
             mount a procfs for it"
                .into(),
        );
    }
    std::fs::File::open("/proc/thread-self/children")
        .map(drop)
        .map_err(|e| {
            format!(
                "/proc/thread-self/children is unreadable ({e}); Linux 3.17 or newer with \
             CONFIG_PROC_CHILDREN is needed"
            )
        })
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

/// Stops a reaper whose command did not start (it exits by itself after an exec failure),
/// and anything that did start, then removes the command's groups once it is gone.
fn abandon(
    mut child: tokio::process::Child,
    cgroup: Option<crate::cgroup::CommandCgroup>,
    pids: Option<crate::pids_v1::PidsCgroup>,
) {
    let _ = child.start_kill();
    if cgroup.is_some() || pids.is_some() {
        if let Some(cg) = &cgroup {
            let _ = rustix::io::write(&cg.kill, b"1");
        }
        tokio::spawn(async move {
            let _ = child.wait().await;
            if let Some(cg) = cgroup {
                cg.remove().await;
            }
            if let Some(p) = pids {
                p.remove().await;
            }
        });
    }
}

/// The command that forks the reaper of `spec` (running `program`), with its stdio: the
/// terminal side of `pty`, else the pipes `spec` asks for. std forks the reaper and sets
/// up its stdio and cwd; the reaper never returns to std (it starts the program itself),
/// so std's own program, args and env are unused.
fn reaper_command(
    program: &std::path::Path,
    spec: &SpawnSpec,
    pty: Option<&PtyPair>,
) -> Result<tokio::process::Command, HarnessError> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.current_dir(&spec.cwd).env_clear();
    match pty {
        Some(pair) => {
            let copy = || {
                pair.terminal
                    .try_clone()
                    .map(Stdio::from)
                    .map_err(pty_failed)
            };
            cmd.stdin(copy()?).stdout(copy()?).stderr(copy()?);
        }
        None => {
            cmd.stdin(match spec.stdin {
                StdinMode::Ignore => Stdio::null(),
                StdinMode::Inherit => Stdio::inherit(),
                StdinMode::Data(_) | StdinMode::Pipe => Stdio::piped(),
            })
            .stdout(stdio_for(&spec.stdout))
            .stderr(stdio_for(&spec.stderr));
        }
    }
    Ok(cmd)
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
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(pipe_failed)
}

fn pipe_failed(e: rustix::io::Errno) -> HarnessError {
    HarnessError::new(
        ErrorCode::ProcessSpawnFailed,
        "cannot create the pipes for a new process",
    )
    .with_source(io::Error::from(e))
}

fn pty_failed(e: io::Error) -> HarnessError {
    HarnessError::new(
        ErrorCode::ProcessSpawnFailed,
        "cannot open a pseudo-terminal for the command; check that /dev/pts is mounted and \
         /dev/ptmx is usable",
    )
    .with_source(e)
}

fn spawn_error(e: io::Error, spec: &SpawnSpec) -> HarnessError {
    let shown = program::quoted(&spec.argv[0]);
    if let Some(failed) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<control::ConfineFailed>())
    {
        return HarnessError::new(
            ErrorCode::SandboxUnavailable,
            format!(
                "the sandbox could not be applied to {shown} ({failed}); it did not run. \
                 `dsh doctor` shows what this machine supports"
            ),
        );
    }
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
        Some(libc::E2BIG) => (
            ErrorCode::InvalidArgument,
            format!(
                "the arguments and environment of {shown} are too large to execute (each \
                 argument at most 128 KiB, all together a quarter of the stack limit); pass \
                 large data on stdin or in a file"
            ),
        ),
        Some(libc::EMFILE) | Some(libc::ENFILE) => (
            ErrorCode::ProcessSpawnFailed,
            format!(
                "cannot start {shown}: too many open files ({e}); run fewer commands at \
                 once, or raise the open-file limit (`ulimit -n`)"
            ),
        ),
        Some(libc::EAGAIN) | Some(libc::ENOMEM) => (
            ErrorCode::ProcessSpawnFailed,
            format!("cannot start {shown}: out of processes or memory ({e}); retry when fewer commands run"),
        ),
        _ => (
            ErrorCode::ProcessSpawnFailed,
            format!("cannot start {shown}: {e}"),
        ),
    };
    HarnessError::new(code, what).with_source(e)
}
