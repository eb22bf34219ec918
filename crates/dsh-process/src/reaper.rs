//! The per-command reaper: the process that owns one command's whole tree.
//!
//! # Mechanism
//! `spawn` forks once (through `std::process::Command`); in the child, before `exec`, the
//! `pre_exec` hook [`enter`] runs and makes that child the **reaper** of the command:
//!
//! 1. `setsid()`, so the reaper has no controlling terminal and is alone in its group;
//!    `prctl(PR_SET_CHILD_SUBREAPER)`, so every orphan of the command's tree (a `setsid`
//!    daemon, a double-forked grandchild) is re-parented to the reaper, not to init;
//! 2. its pipes to the owner are moved above fd 10, and the owner's signal handlers are
//!    reset to the default, before anything starts (a failure is an error of `spawn`);
//! 3. `clone(CLONE_VM | CLONE_VFORK)` (what `posix_spawn` does) starts the command
//!    **leader**, born in the command's cgroup if there is one (`clone3` with
//!    `CLONE_INTO_CGROUP`, see the `clone3` module; where that is unavailable the leader
//!    joins the cgroup itself before `execve`), asks for SIGKILL if
//!    the reaper dies (`PR_SET_PDEATHSIG`), takes its own process group (or, on a
//!    terminal, its own session with the terminal as controlling terminal), resets every
//!    signal disposition and the signal mask, and `execve`s the
//!    program prepared in the [`ExecPlan`]. An `execve` failure comes back as the errno
//!    of `spawn`;
//!    The leader itself writes its pid (and, if `execve` fails, the errno) on the status
//!    pipe, before any of the command's code runs;
//! 4. the reaper closed every fd above 2 that it does not need (std's exec-error pipe
//!    among them) before the clone, so std's `spawn` never waits on anything the command
//!    can delay; after the clone it also gives up the command's stdio. It reports a successful `execve`, blocks every
//!    signal, gives back its copy of dsh's heap and threads (the `reaper_memory`
//!    module), and serves until its tree is empty, then `_exit`s. It never returns to std.
//!
//! The reaper reports the leader's wait status the moment the leader exits, and exits
//! itself only when it has no child left: its exit is the exact "whole tree gone" event.
//! The owner drives it through the control pipe: `T` sends SIGTERM to the tree and, after
//! the grace, SIGKILL; `K`, or end-of-file (every owner handle dropped, or dsh gone, even
//! by SIGKILL), SIGKILLs the tree until it is empty. With a command cgroup, every kill
//! starts with a write to its `cgroup.kill`.
//!
//! # Exactness
//! The reaper signals only processes whose pid cannot have been reused: its own unreaped
//! children (a child's pid stays allocated until its parent reaps it) and the leader's
//! process group while the leader is unreaped (it keeps the leader as a zombie, read with
//! `WNOWAIT`, until the tree is otherwise empty). A descendant whose parent is still alive
//! is reached through the group kill, or once its parent dies and it is re-parented here.
//! Nothing outside the tree is ever signalled.
//!
//! # Limits
//! The command runs as the same user as its reaper and can SIGKILL or SIGSTOP it. The
//! owner then notices (the status pipe closes, or the tree is not gone a grace after a
//! kill) and kills the reaper and the command's cgroup; without a cgroup, descendants the
//! command started before killing its reaper escape to init (the leader itself dies by
//! `PR_SET_PDEATHSIG`).
//!
//! # Async-signal safety
//! Everything here runs in the child of a multi-threaded process, between `fork` and
//! `exec` (or instead of `exec`). It is limited to these async-signal-safe calls:
//! `clone`, `clone3`, `execve`, `setsid`, `setpgid`, `ioctl` (`TIOCSCTTY`), `prctl`, `sigaction`
//! (also as the raw `rt_sigaction`), `signal`, `sigprocmask`,
//! `sigemptyset`/`sigaddset`/`sigfillset`, `signalfd`, `dup2`, `fcntl`, `close`, `close_range`,
//! `getrlimit`, `open`, `read`, `pread`, `write`, `poll`, `waitid`, `kill`, `chdir`,
//! `getpid`, `getppid`, `getpgid`, `clock_gettime`, `madvise`, `pthread_self`, `arch_prctl`, `_exit`. It allocates nothing: buffers live on
//! the stack, paths are static C strings and everything else was prepared before the fork. (libc is used here rather than
//! rustix because the async-signal-safe list is written in terms of these libc calls.)
//!
//! # Panics
//! Nothing here panics on any input: slices are indexed within lengths fixed before the
//! fork (the spawner refuses more than `MAX_CARRIED_FDS` carried fds), clock arithmetic is
//! on `i128` nanoseconds, pid parsing saturates, and failures are errnos. Should a bug
//! panic anyway, it cannot unwind into the owner's frames, of which the child has a copy
//! (dsh is built with `panic = "unwind"`, so that a panicking tool call ends alone): std
//! calls `std::panic::always_abort()` in the child right after `fork`, before the
//! `pre_exec` hook, so a panic in [`enter`] or [`Reaper::serve`] aborts the child without
//! running the panic hook or a destructor (the owner sees its reaper die). The leader
//! shares the reaper's memory, that flag included, and [`leader_main`] is `extern "C"`,
//! which cannot unwind. `tests/fork_child_panic.rs` pins the std behaviour.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

use crate::exec_plan::ExecPlan;

/// Control byte: SIGTERM to the tree, SIGKILL after the grace.
pub(crate) const CONTROL_TERM: u8 = b'T';
/// Control byte: SIGKILL the tree until it is empty.
pub(crate) const CONTROL_KILL: u8 = b'K';

/// The leader exited normally: the payload is its exit code.
pub(crate) const STATUS_EXITED: u8 = 1;
/// The leader was killed by a signal: the payload is the signal number.
pub(crate) const STATUS_SIGNALED: u8 = 2;
/// The leader is about to `execve`: the payload is its pid. Always the first record,
/// written by the leader itself before any of the command's code runs.
pub(crate) const STATUS_STARTED: u8 = 3;
/// The leader's `execve` failed: the payload is the errno. Written by the leader.
pub(crate) const STATUS_EXEC_FAILED: u8 = 4;
/// The leader's `execve` succeeded. Written by the reaper; the command can delay it (by
/// stopping the reaper), so the owner waits for it only briefly.
pub(crate) const STATUS_EXEC_OK: u8 = 5;
/// The leader could not apply its sandbox restrictions and did not `execve`: the payload
/// is `step << 16 | errno` ([`dsh_sandbox::ConfineStep`]). Written by the leader, first.
pub(crate) const STATUS_CONFINE_FAILED: u8 = 6;
/// Length of one status record: a tag byte and an `i32` in native byte order.
pub(crate) const STATUS_LEN: usize = 5;

/// The fds the reaper keeps: it writes records to `status_w` and reads owner commands
/// from `control_r`; `cgroup_kill` is the command cgroup's `cgroup.kill` (-1 if none).
#[derive(Clone, Copy)]
pub(crate) struct ReaperFds {
    pub status_w: RawFd,
    pub control_r: RawFd,
    pub cgroup_kill: RawFd,
}

/// Runs in the forked child before `exec`. It never returns `Ok`: the child becomes the
/// reaper and `_exit`s when its tree is empty. It returns `Err` (which std reports to the
/// parent's `spawn`) when the reaper could not be set up or the leader's `execve` failed.
///
/// # Safety
/// Must only be called from a `pre_exec` hook: in a freshly forked, single-threaded child.
pub(crate) unsafe fn enter(fds: ReaperFds, plan: &mut ExecPlan) -> io::Result<()> {
    // SAFETY (whole function): we are the only thread of a freshly forked child; every call
    // is async-signal-safe (see the module docs) and touches only our own fds and memory
    // prepared before the fork.
    unsafe {
        if libc::setsid() < 0 || libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
        let status = high_dup(fds.status_w)?;
        let control = high_dup(fds.control_r)?;
        let cgroup_kill = if fds.cgroup_kill >= 0 {
            high_dup(fds.cgroup_kill)?
        } else {
            -1
        };
        if plan.cgroup_procs >= 0 {
            plan.cgroup_procs = high_dup(plan.cgroup_procs)?;
        }
        if plan.cgroup_dir >= 0 {
            plan.cgroup_dir = high_dup(plan.cgroup_dir)?;
        }
        if plan.pids_tasks >= 0 {
            plan.pids_tasks = high_dup(plan.pids_tasks)?;
        }
        for fd in plan.carried.iter_mut() {
            *fd = high_dup(*fd)?;
        }
        plan.status_fd = status;
        plan.reaper_pid = libc::getpid();
        // Our own children list, opened once: re-read with pread, it keeps working even if
        // the command later exhausts our fd limit or hides /proc.
        let children = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if children < 0 {
            return Err(io::Error::last_os_error());
        }
        let children = high_dup(children)?;
        reset_handlers();
        // SIGCHLD must be the default, whatever dsh inherited: with SIG_IGN (or
        // SA_NOCLDWAIT) the kernel would reap the leader behind our back, and its status
        // and its pinned group id with it.
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGCHLD, &dfl, std::ptr::null_mut());
        // Block SIGCHLD before the leader starts so a leader that exits at once is not
        // missed: it stays pending until the signalfd reads it.
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
        // Close everything else now, std's exec-error pipe included, so std's `spawn`
        // returns before any of the command's code can run (the command could stop us):
        // from here on we talk to the owner only through the status pipe.
        let mut keep = [-1; 7 + crate::exec_plan::MAX_CARRIED_FDS];
        keep[..7].copy_from_slice(&[
            status,
            control,
            cgroup_kill,
            plan.cgroup_procs,
            plan.cgroup_dir,
            plan.pids_tasks,
            children,
        ]);
        keep[7..7 + plan.carried.len()].copy_from_slice(&plan.carried);
        close_all_except(&mut keep);

        let pid = match start_leader(plan) {
            Ok(pid) => pid,
            Err(errno) => {
                write_record(status, STATUS_EXEC_FAILED, errno);
                libc::_exit(0);
            }
        };
        if plan.exec_errno.load(Ordering::SeqCst) != 0 {
            // The leader reported the errno itself; reap it and go.
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED);
            libc::_exit(0);
        }
        // The command runs from here on: first make us deaf to its signals (and to SIGPIPE,
        // should the owner be gone already).
        ignore_signals();
        write_record(status, STATUS_EXEC_OK, pid);
        // Also make the group from this side, so it exists before we could ever signal it
        // (whichever of the two setpgid calls runs first wins; the other is harmless).
        libc::setpgid(pid, pid);
        for &fd in [plan.cgroup_procs, plan.cgroup_dir, plan.pids_tasks]
            .iter()
            .chain(plan.carried.iter())
        {
            if fd >= 0 {
                libc::close(fd);
            }
        }
        // Give up the command's stdio (their end-of-file must depend on the command alone)
        // and its working directory (so it can be removed or unmounted).
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..3 {
            if null >= 0 {
                libc::dup2(null, fd);
            } else {
                libc::close(fd);
            }
        }
        if null > 2 {
            libc::close(null);
        }
        libc::chdir(c"/".as_ptr());
        let sigfd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        let mut reaper = Reaper {
            leader: pid,
            leader_reported: false,
            killing: false,
            term_deadline_ns: None,
            grace_ns: i128::from(plan.grace_ms) * 1_000_000,
            status,
            control,
            control_open: true,
            cgroup_kill,
            sigfd,
            children,
        };
        // The leader runs its own program now: give back our copy of dsh's heap and
        // threads, which we never read again (an idle terminal's reaper would otherwise
        // come to own most of it).
        crate::reaper_memory::release();
        reaper.serve()
    }
}

/// Starts the leader: born in the command cgroup where `clone3` allows, else `clone`d and
/// joining the cgroup itself. Either way it shares our memory and we sleep until it has
/// exec'd (no copy of the page tables); it runs on its own stack, so it cannot clobber
/// ours. Returns its pid or the clone's errno.
///
/// # Safety
/// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in, where
/// every call must be async-signal-safe and nothing may allocate or unwind. `plan` must
/// hold the leader's prepared exec (its argv and env as C strings) and stack.
unsafe fn start_leader(plan: &mut ExecPlan) -> Result<libc::pid_t, i32> {
    let arg: *mut ExecPlan = plan;
    // SAFETY: single-threaded child; the stack belongs to the plan, which outlives the
    // leader's life before exec; `leader_main` makes async-signal-safe calls only.
    unsafe {
        if plan.cgroup_dir >= 0 {
            plan.leader_joins = false;
            let stack: *mut [u8] = plan.stack.as_mut_slice();
            match crate::clone3::spawn_into_cgroup(
                leader_main,
                arg.cast(),
                &mut *stack,
                plan.cgroup_dir,
            ) {
                Ok(pid) => return Ok(pid),
                // No clone3 here (old kernel, seccomp, other architecture): join by hand.
                Err(libc::ENOSYS) | Err(libc::E2BIG) => {}
                Err(errno) => return Err(errno),
            }
        }
        plan.leader_joins = plan.cgroup_procs >= 0;
        let top = plan.stack.as_mut_ptr().add(plan.stack.len());
        let top = top.sub(top as usize % 16);
        let pid = libc::clone(
            leader_main,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg.cast(),
        );
        if pid < 0 {
            Err(*libc::__errno_location())
        } else {
            Ok(pid)
        }
    }
}

/// `fcntl(fd, F_DUPFD_CLOEXEC, 10)`: a copy above the low fd numbers that the command's
/// stdio and std's own pipes use.
///
/// # Safety
/// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in, where
/// every call must be async-signal-safe and nothing may allocate or unwind. `fd` must be an
/// open fd of this process.
unsafe fn high_dup(fd: RawFd) -> io::Result<RawFd> {
    // SAFETY: fcntl(2) on an fd we own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 10) };
    if new < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(new)
    }
}

/// Resets every signal the owner handles to the default, so neither the reaper nor the
/// leader ever runs the owner's handlers (which write to the owner's fds). The leader
/// then resets every disposition, ignored ones too (see [`leader_main`]).
///
/// # Safety
/// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in, where
/// every call must be async-signal-safe and nothing may allocate or unwind.
unsafe fn reset_handlers() {
    // SAFETY: sigaction(2) with stack values.
    unsafe {
        for sig in 1..=libc::SIGRTMAX() {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction != libc::SIG_DFL
                && old.sa_sigaction != libc::SIG_IGN
            {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
    }
}

/// The reaper blocks every signal (SIGCHLD it reads through the signalfd): a signal meant
/// for the tree, or sent by it, stays pending and never runs or stops anything. One
/// `sigprocmask` instead of a `sigaction` per signal.
///
/// # Safety
/// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in, where
/// every call must be async-signal-safe and nothing may allocate or unwind.
unsafe fn ignore_signals() {
    // SAFETY: sigprocmask(2) with a stack set.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// Closes every fd from 3 up except `keep` (-1 entries are ignored), with `close_range`,
/// or one by one up to the fd limit where `close_range` is missing (Linux < 5.9) or
/// filtered.
///
/// # Safety
/// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in, where
/// every call must be async-signal-safe and nothing may allocate or unwind. No fd outside
/// `keep` may be in use by the caller afterwards.
unsafe fn close_all_except(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let sorted = &*keep;
    let mut from: RawFd = 3;
    for &k in sorted.iter().filter(|k| **k >= 3) {
        // SAFETY: closing fds in this child only.
        unsafe { close_range(from, k - 1) };
        from = k + 1;
    }
    // SAFETY: as above.
    unsafe { close_range(from, RawFd::MAX) };
}

/// # Safety
/// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in, where
/// every call must be async-signal-safe and nothing may allocate or unwind. No fd in
/// `first..=last` may be in use by the caller afterwards.
unsafe fn close_range(first: RawFd, last: RawFd) {
    if first > last {
        return;
    }
    // SAFETY: close_range(2), else close(2), on this child's own fds.
    unsafe {
        if libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            last as libc::c_uint,
            0,
        ) == 0
        {
            return;
        }
        let mut lim: libc::rlimit = std::mem::zeroed();
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(1 << 20) as RawFd
        } else {
            1 << 16
        };
        for fd in first..=last.min(max) {
            libc::close(fd);
        }
    }
}

/// The leader between `clone` and `execve`.
extern "C" fn leader_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the reaper's `ExecPlan`, alive while the reaper sleeps in clone;
    // only async-signal-safe calls; errno is read through the shared TLS pointer, which is
    // the (suspended) reaper's errno slot.
    unsafe {
        let plan = &*(arg as *const ExecPlan);
        // Not born in the command's cgroup: join it before exec, so every descendant is
        // born in it. A refusal leaves the subreaper as the (still exact) boundary, unless
        // the cgroup holds the process limit. The v1 pids cgroup always does.
        let joined =
            !plan.leader_joins || libc::write(plan.cgroup_procs, b"0".as_ptr().cast(), 1) == 1;
        if (!joined && plan.join_required)
            || (plan.pids_tasks >= 0 && libc::write(plan.pids_tasks, b"0".as_ptr().cast(), 1) != 1)
        {
            // The process limit is promised: a leader that cannot join its pids cgroup
            // does not run.
            let errno = *libc::__errno_location();
            write_record(plan.status_fd, STATUS_EXEC_FAILED, errno);
            plan.exec_errno.store(errno.max(1), Ordering::SeqCst);
            libc::_exit(127);
        }
        // If the reaper is killed (by the command itself, say), the leader goes too; if it
        // died before this call, go now. (A set-user-ID program clears this at exec.)
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != plan.reaper_pid {
            libc::_exit(127);
        }
        if plan.terminal {
            // A new session whose controlling terminal is its stdio: the terminal's
            // foreground group, job control and hangup work as in a login. Its group is
            // its own, as below.
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                let errno = *libc::__errno_location();
                write_record(plan.status_fd, STATUS_EXEC_FAILED, errno);
                plan.exec_errno.store(errno.max(1), Ordering::SeqCst);
                libc::_exit(127);
            }
        } else {
            // Its own group, so one kill(-leader) reaches every member that stays in it.
            libc::setpgid(0, 0);
        }
        // Default dispositions and an empty mask, whatever dsh inherited: a dsh started
        // with SIGINT ignored (by `nohup`, or a shell's `&`) must not pass that on, or
        // every interrupt of the command would silently do nothing. The handler table is
        // the leader's own (no CLONE_SIGHAND). The raw system call, because the C
        // library refuses its own real-time signals (32, 33), which an ignoring parent
        // passes on like any other; SIGKILL and SIGSTOP refuse it, harmlessly. The
        // kernel's `struct sigaction` with SIG_DFL, no flags, no restorer and an empty
        // mask is all zeros on every architecture.
        let dfl = [0u64; 4];
        for sig in 1..=64 {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                dfl.as_ptr(),
                std::ptr::null_mut::<u64>(),
                8usize,
            );
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        if let Some(restrictions) = &plan.restrictions {
            // Last, so nothing after it needs more than the command may do.
            if let Err((step, errno)) = restrictions.apply(&plan.carried) {
                write_record(
                    plan.status_fd,
                    STATUS_CONFINE_FAILED,
                    (i32::from(step as u8) << 16) | (errno & 0xffff),
                );
                plan.exec_errno.store(errno.max(1), Ordering::SeqCst);
                libc::_exit(127);
            }
        }
        write_record(plan.status_fd, STATUS_STARTED, libc::getpid());
        libc::execve(
            plan.program.as_ptr(),
            plan.argv_ptrs.as_ptr(),
            plan.envp_ptrs.as_ptr(),
        );
        let errno = match *libc::__errno_location() {
            0 => libc::ENOEXEC,
            e => e,
        };
        write_record(plan.status_fd, STATUS_EXEC_FAILED, errno);
        plan.exec_errno.store(errno, Ordering::SeqCst);
        libc::_exit(127)
    }
}

struct Reaper {
    leader: libc::pid_t,
    leader_reported: bool,
    killing: bool,
    /// CLOCK_MONOTONIC time at which a terminate turns into a kill.
    term_deadline_ns: Option<i128>,
    grace_ns: i128,
    status: RawFd,
    control: RawFd,
    control_open: bool,
    cgroup_kill: RawFd,
    sigfd: RawFd,
    /// `/proc/thread-self/children`, opened before the clone.
    children: RawFd,
}

impl Reaper {
    /// # Safety
    /// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in,
    /// where every call must be async-signal-safe and nothing may allocate or unwind. The
    /// fds of `self` must be open, and the leader started.
    unsafe fn serve(&mut self) -> ! {
        loop {
            // SAFETY (loop body): async-signal-safe calls on our own fds and children.
            unsafe {
                let others = self.reap();
                if self.leader_reported && others == 0 {
                    // Only the leader's zombie is left: release it, then report "tree gone"
                    // by exiting.
                    let mut info: libc::siginfo_t = std::mem::zeroed();
                    libc::waitid(
                        libc::P_PID,
                        self.leader as libc::id_t,
                        &mut info,
                        libc::WEXITED,
                    );
                    libc::_exit(0);
                }
                let now = monotonic_ns();
                if !self.killing && self.term_deadline_ns.is_some_and(|d| now >= d) {
                    self.killing = true;
                }
                if self.killing {
                    if self.cgroup_kill >= 0 {
                        // Every member at once, whatever group or session it moved to.
                        libc::write(self.cgroup_kill, b"1".as_ptr().cast(), 1);
                    }
                    self.signal_tree(libc::SIGKILL);
                }
                // While killing, re-scan every 10 ms: an orphan re-parented to us after a
                // deeper death brings no SIGCHLD. While terminating, wake at the deadline.
                let timeout = if self.killing || self.sigfd < 0 {
                    10
                } else {
                    match self.term_deadline_ns {
                        Some(d) => ((d - now) / 1_000_000).clamp(1, i128::from(i32::MAX)) as i32,
                        None => -1,
                    }
                };
                let mut pfds = [
                    libc::pollfd {
                        fd: self.sigfd,
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: if self.control_open { self.control } else { -1 },
                        events: libc::POLLIN,
                        revents: 0,
                    },
                ];
                libc::poll(pfds.as_mut_ptr(), 2, timeout);
                if pfds[0].revents != 0 {
                    let mut buf = [0u8; 128 * 4];
                    while libc::read(self.sigfd, buf.as_mut_ptr().cast(), buf.len()) > 0 {}
                }
                if pfds[1].revents != 0 {
                    self.read_control();
                }
            }
        }
    }

    /// Reaps every exited child except the leader, whose status is only peeked (`WNOWAIT`)
    /// and reported once. Returns the number of children other than the leader still
    /// present (alive or not yet reaped).
    ///
    /// # Safety
    /// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in,
    /// where every call must be async-signal-safe and nothing may allocate or unwind. The
    /// fds of `self` must be open.
    unsafe fn reap(&mut self) -> usize {
        loop {
            let mut others = 0usize;
            let mut reaped_any = false;
            let leader = self.leader;
            let status = self.status;
            let mut reported = self.leader_reported;
            // SAFETY: waitid(2) on our own children only.
            let listed = unsafe {
                for_each_child(self.children, |pid| {
                    let mut info: libc::siginfo_t = std::mem::zeroed();
                    if pid == leader {
                        if !reported
                            && libc::waitid(
                                libc::P_PID,
                                pid as libc::id_t,
                                &mut info,
                                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                            ) == 0
                            && info.si_pid() == pid
                        {
                            report_exit(status, &info);
                            reported = true;
                        }
                    } else if libc::waitid(
                        libc::P_PID,
                        pid as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOHANG,
                    ) == 0
                        && info.si_pid() == pid
                    {
                        reaped_any = true;
                    } else {
                        others += 1;
                    }
                })
            };
            self.leader_reported = reported;
            if !listed {
                // Unknown: never conclude the tree is empty from a list we could not read.
                return others.max(1);
            }
            // Reaping while the list was being read may have shifted it; read it again
            // until a pass changes nothing, so no exited child is left unnoticed.
            if !reaped_any {
                return others;
            }
        }
    }

    /// Sends `sig` to the leader's group (safe while the leader is unreaped: its pid, and
    /// so its group id, cannot be reused) and to each direct child and the group it leads
    /// (unreaped children: same argument). Each process gets `sig` once: a child that
    /// leads its own group (the leader, a `setsid` daemon) only through its group, so a
    /// program trapping SIGTERM runs its trap once per terminate.
    ///
    /// # Safety
    /// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in,
    /// where every call must be async-signal-safe and nothing may allocate or unwind. The
    /// leader must not have been reaped (its pid and group id cannot be reused until then).
    unsafe fn signal_tree(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on pids pinned as described above.
        unsafe {
            libc::kill(-self.leader, sig);
            for_each_child(self.children, |pid| {
                if libc::getpgid(pid) == pid {
                    if pid != self.leader {
                        libc::kill(-pid, sig);
                    }
                } else {
                    // It left the group it led, if any; members left there get it too
                    // (the leader's were signalled above).
                    libc::kill(pid, sig);
                    if pid != self.leader {
                        libc::kill(-pid, sig);
                    }
                }
            });
        }
    }

    /// # Safety
    /// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in,
    /// where every call must be async-signal-safe and nothing may allocate or unwind.
    /// `self.control_r` must be an open, non-blocking fd.
    unsafe fn read_control(&mut self) {
        let mut buf = [0u8; 16];
        // SAFETY: read(2) into a stack buffer.
        let n = unsafe { libc::read(self.control, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            // End of file: the owner closed the pipe or died. Nothing may outlive it.
            if n == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                self.control_open = false;
                self.killing = true;
            }
            return;
        }
        for &b in &buf[..n as usize] {
            match b {
                CONTROL_TERM if !self.killing && self.term_deadline_ns.is_none() => {
                    // SIGCONT too, as timeout(1) does: a stopped process would hold
                    // the SIGTERM pending and get no chance to shut down cleanly.
                    // SAFETY: as in signal_tree.
                    unsafe {
                        self.signal_tree(libc::SIGTERM);
                        self.signal_tree(libc::SIGCONT);
                    }
                    // SAFETY: clock_gettime(2).
                    self.term_deadline_ns = Some(unsafe { monotonic_ns() } + self.grace_ns);
                }
                CONTROL_KILL => self.killing = true,
                _ => {}
            }
        }
    }
}

/// # Safety
/// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in, where
/// every call must be async-signal-safe and nothing may allocate or unwind.
unsafe fn monotonic_ns() -> i128 {
    // SAFETY: clock_gettime(2) into a stack value.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    }
}

/// Writes one status record.
///
/// # Safety
/// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in, where
/// every call must be async-signal-safe and nothing may allocate or unwind. `fd` must be an
/// open fd of this process.
unsafe fn write_record(fd: RawFd, tag: u8, value: i32) {
    let mut rec = [0u8; STATUS_LEN];
    rec[0] = tag;
    rec[1..].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: write(2) of a stack buffer; a record is smaller than PIPE_BUF, so atomic.
    unsafe { libc::write(fd, rec.as_ptr().cast(), STATUS_LEN) };
}

/// Writes the leader's exit record from `waitid`'s siginfo.
///
/// # Safety
/// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in, where
/// every call must be async-signal-safe and nothing may allocate or unwind. `fd` must be an
/// open fd of this process; `info` filled in by `waitid`.
unsafe fn report_exit(fd: RawFd, info: &libc::siginfo_t) {
    // SAFETY: reading the siginfo fields waitid filled.
    let (tag, value) = unsafe {
        match info.si_code {
            libc::CLD_EXITED => (STATUS_EXITED, info.si_status()),
            _ => (STATUS_SIGNALED, info.si_status()),
        }
    };
    // SAFETY: as in write_record.
    unsafe { write_record(fd, tag, value) };
}

/// Calls `f` with each pid listed in our `/proc/thread-self/children` (`fd`; our children,
/// zombies included), parsing in a fixed stack buffer. Returns false if the list could not
/// be read to its end (the pids seen so far were still passed to `f`).
///
/// # Safety
/// Only in the reaper: the freshly forked, single-threaded child [`enter`] runs in, where
/// every call must be async-signal-safe and nothing may allocate or unwind. `fd` must be an
/// open fd of `/proc/thread-self/children`; `f` may only make async-signal-safe calls.
unsafe fn for_each_child(fd: RawFd, mut f: impl FnMut(libc::pid_t)) -> bool {
    let mut buf = [0u8; 1024];
    let mut parser = PidParser::default();
    let mut offset: libc::off_t = 0;
    loop {
        // SAFETY: pread(2) into a stack buffer.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset) };
        if n < 0 {
            return false;
        }
        if n == 0 {
            break;
        }
        parser.feed(&buf[..n as usize], &mut f);
        offset += n as libc::off_t;
    }
    parser.finish(&mut f);
    true
}

/// Parses space-separated decimal pids that may be split across reads.
#[derive(Default)]
struct PidParser {
    current: Option<i64>,
}

impl PidParser {
    fn feed(&mut self, bytes: &[u8], f: &mut impl FnMut(libc::pid_t)) {
        for &b in bytes {
            if b.is_ascii_digit() {
                let v = self
                    .current
                    .unwrap_or(0)
                    .saturating_mul(10)
                    .saturating_add(i64::from(b - b'0'));
                self.current = Some(v);
            } else {
                self.finish(f);
            }
        }
    }

    fn finish(&mut self, f: &mut impl FnMut(libc::pid_t)) {
        if let Some(v) = self.current.take() {
            if let Ok(pid) = libc::pid_t::try_from(v) {
                f(pid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_split_across_reads_are_parsed_whole() {
        let mut got = Vec::new();
        let mut p = PidParser::default();
        for chunk in [&b"12 3"[..], b"45 6", b"7 "] {
            p.feed(chunk, &mut |pid| got.push(pid));
        }
        p.finish(&mut |pid| got.push(pid));
        assert_eq!(got, vec![12, 345, 67]);
    }

    #[test]
    fn an_absurd_number_is_skipped_not_wrapped() {
        let mut got = Vec::new();
        let mut p = PidParser::default();
        p.feed(b"99999999999999999999 5", &mut |pid| got.push(pid));
        p.finish(&mut |pid| got.push(pid));
        assert_eq!(got, vec![5]);
    }
}
