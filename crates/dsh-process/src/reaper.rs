//! The per-command reaper: the process that owns one command's whole tree.
//!
//! # Mechanism
//! `spawn` forks once (through `std::process::Command`); in the child, before `exec`, the
//! `pre_exec` hook [`enter`] runs. It makes that child the **reaper** of the command:
//!
//! 1. `setsid()`, so the reaper has no controlling terminal and is alone in its group;
//! 2. `prctl(PR_SET_CHILD_SUBREAPER)`, so every orphan of the command's tree (a `setsid`
//!    daemon, a double-forked grandchild) is re-parented to the reaper, not to init;
//! 3. `clone(CLONE_VM | CLONE_VFORK)` (what `posix_spawn` does): the new process is the
//!    command **leader**. It takes its own process group (`setpgid(0, 0)`), restores the
//!    default signal mask and `execve`s the program with argv and environment prepared
//!    before the first fork ([`ExecPlan`]). An `execve` failure comes back as the errno of
//!    `spawn`. The reaper never returns: it runs [`reaper_loop`] and `_exit`s when its tree
//!    is empty.
//!
//! With a command cgroup (see the `cgroup` module), the leader joins it before `execve`
//! and the reaper writes `cgroup.kill` as the first step of every kill.
//!
//! The reaper reports the leader's wait status on the status pipe as soon as the leader
//! exits, and exits itself only when it has no child left: its exit is the exact "whole
//! tree gone" event. The owner drives it through the control pipe: `T` sends SIGTERM to the
//! tree, `K` (or end-of-file, when the owner closes the pipe or dies) SIGKILLs it until it
//! is empty. So nothing started by dsh survives dsh, even when dsh is SIGKILLed.
//!
//! # Exactness
//! The reaper signals only processes whose pid cannot have been reused: its own unreaped
//! children (a child's pid stays allocated until its parent reaps it) and the leader's
//! process group while the leader is unreaped (it keeps the leader as a zombie, read with
//! `WNOWAIT`, until the tree is otherwise empty). A descendant whose parent is still alive
//! is reached through the group kill, or once its parent dies and it is re-parented here.
//! Nothing outside the tree is ever signalled.
//!
//! # Async-signal safety
//! Everything here runs in the child of a multi-threaded process, between `fork` and
//! `exec` (or instead of `exec`). It is limited to these async-signal-safe calls: `clone`,
//! `execve`, `setsid`, `setpgid`, `prctl`, `sigprocmask`, `sigemptyset`/`sigaddset`, `signal`,
//! `signalfd`, `dup2`, `fcntl`, `close_range` (raw syscall), `open`, `read`, `write`,
//! `poll`, `waitid`, `kill`, `getpid`, `_exit`. It allocates nothing: buffers live on the
//! stack and paths are static C strings. (libc is used here rather than rustix because
//! the async-signal-safe list is written in terms of these libc calls and raw fds.)

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

/// Control byte: send SIGTERM to the tree.
pub(crate) const CONTROL_TERM: u8 = b'T';
/// Control byte: SIGKILL the tree until it is empty.
pub(crate) const CONTROL_KILL: u8 = b'K';

/// The leader exited normally: the payload is its exit code.
pub(crate) const STATUS_EXITED: u8 = 1;
/// The leader was killed by a signal: the payload is the signal number.
pub(crate) const STATUS_SIGNALED: u8 = 2;
/// Length of one status record: a tag byte and an `i32` in native byte order.
pub(crate) const STATUS_LEN: usize = 5;

/// The fds the reaper keeps: it writes the leader status to `status_w` and reads owner
/// commands from `control_r`. Both must be `O_CLOEXEC` so the leader's `exec` drops them.
#[derive(Clone, Copy)]
pub(crate) struct ReaperFds {
    pub status_w: RawFd,
    pub control_r: RawFd,
    /// The command cgroup's `cgroup.kill`, or -1 without a cgroup.
    pub cgroup_kill: RawFd,
}

// After `enter` moves them, the reaper's fds sit at fixed numbers.
const STATUS_FD: RawFd = 3;
const CONTROL_FD: RawFd = 4;
const CGROUP_KILL_FD: RawFd = 5;

/// Stack for the leader between `clone` and `execve` (it only makes a few syscalls).
const LEADER_STACK: usize = 64 * 1024;

/// Everything the leader needs to `execve`, prepared in the parent so that nothing is
/// allocated after the fork: C strings and the null-terminated pointer arrays into them,
/// and the stack the leader runs on.
pub(crate) struct ExecPlan {
    program: CString,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
    stack: Vec<u8>,
    /// The command cgroup's `cgroup.procs`, which the leader joins; -1 without a cgroup.
    cgroup_procs: RawFd,
    /// Written by the leader (which shares the reaper's memory) when `execve` fails.
    exec_errno: AtomicI32,
}

// SAFETY: the raw pointers point into the CStrings this struct owns, whose heap buffers
// never move or change; they are only read (by the forked reaper and its leader).
unsafe impl Send for ExecPlan {}
// SAFETY: as above; the only mutation after construction goes through `exec_errno`, an
// atomic, and through `stack`, used only in the forked child.
unsafe impl Sync for ExecPlan {}

impl ExecPlan {
    /// Prepares `program` (the resolved path), `argv` (as given, `argv[0]` included) and
    /// the complete environment `env`.
    ///
    /// # Errors
    /// `InvalidInput` naming the first string that contains a NUL byte.
    pub(crate) fn new(
        program: &OsStr,
        argv: &[OsString],
        env: &[(OsString, OsString)],
        cgroup_procs: Option<RawFd>,
    ) -> io::Result<ExecPlan> {
        let c = |s: &[u8], what: &dyn Fn() -> String| {
            CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, what()))
        };
        let program = c(program.as_bytes(), &|| {
            "the program path contains a NUL byte".into()
        })?;
        let argv: Vec<CString> = argv
            .iter()
            .enumerate()
            .map(|(i, a)| c(a.as_bytes(), &|| format!("argv[{i}] contains a NUL byte")))
            .collect::<io::Result<_>>()?;
        let envp: Vec<CString> = env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                c(&kv, &|| {
                    format!(
                        "environment variable {} contains a NUL byte",
                        k.to_string_lossy()
                    )
                })
            })
            .collect::<io::Result<_>>()?;
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|a| a.as_ptr()).collect();
        envp_ptrs.push(std::ptr::null());
        Ok(ExecPlan {
            program,
            _argv: argv,
            argv_ptrs,
            _envp: envp,
            envp_ptrs,
            stack: vec![0u8; LEADER_STACK],
            cgroup_procs: cgroup_procs.unwrap_or(-1),
            exec_errno: AtomicI32::new(0),
        })
    }
}

/// Runs in the forked child before `exec`. It never returns `Ok`: the child becomes the
/// reaper and `_exit`s when its tree is empty. It returns `Err` (which std reports to the
/// parent's `spawn`) when the leader's `execve` failed, with that errno.
///
/// # Safety
/// Must only be called from a `pre_exec` hook: in a freshly forked, single-threaded child.
pub(crate) unsafe fn enter(fds: ReaperFds, plan: &mut ExecPlan) -> io::Result<()> {
    // SAFETY (whole function): we are the only thread of a freshly forked child; every call
    // below is async-signal-safe (see the module docs) and touches only our own fds and
    // memory prepared before the fork.
    unsafe {
        if libc::setsid() < 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
        // Block SIGCHLD before the leader starts so a leader that exits at once is not
        // missed: it stays pending until the signalfd reads it.
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());

        // The leader shares our memory and we sleep until it has exec'd (CLONE_VM |
        // CLONE_VFORK, as posix_spawn does): no second copy of the page tables, which is
        // the largest fixed cost of a spawn. It runs on its own stack, so it cannot
        // clobber ours.
        let top = plan.stack.as_mut_ptr().add(plan.stack.len());
        let top = top.sub(top as usize % 16);
        let arg: *mut ExecPlan = plan;
        let pid = libc::clone(
            leader_main,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg.cast(),
        );
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        let errno = plan.exec_errno.load(Ordering::SeqCst);
        if errno != 0 {
            // Reap the failed leader so it does not linger, then let std report the errno.
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED);
            return Err(io::Error::from_raw_os_error(errno));
        }
        // Also make the group from this side, so it exists before we could ever signal it
        // (whichever of the two setpgid calls runs first wins; the other is harmless).
        libc::setpgid(pid, pid);
        become_reaper(fds, pid)
    }
}

/// The leader between `clone` and `execve`: its own process group (so one kill(-leader)
/// reaches every member that stays in it), the default signal mask, then the program.
extern "C" fn leader_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the reaper's `ExecPlan`, alive while the reaper sleeps in clone;
    // only async-signal-safe calls; errno is read through the shared TLS pointer, which is
    // the reaper's (suspended) errno slot.
    unsafe {
        let plan = &*(arg as *const ExecPlan);
        if plan.cgroup_procs >= 0 {
            // Join the command's cgroup before exec, so every descendant is born in it. A
            // refusal leaves the subreaper as the (still exact) boundary.
            libc::write(plan.cgroup_procs, b"0".as_ptr().cast(), 1);
        }
        libc::setpgid(0, 0);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        libc::execve(
            plan.program.as_ptr(),
            plan.argv_ptrs.as_ptr(),
            plan.envp_ptrs.as_ptr(),
        );
        let errno = *libc::__errno_location();
        plan.exec_errno.store(
            if errno == 0 { libc::ENOEXEC } else { errno },
            Ordering::SeqCst,
        );
        libc::_exit(127)
    }
}

/// The reaper side after the fork: isolate fds, then serve until the tree is empty.
unsafe fn become_reaper(fds: ReaperFds, leader: libc::pid_t) -> ! {
    // SAFETY: single-threaded forked child; async-signal-safe calls only.
    unsafe {
        // Park our fds high, put them at 3, 4 (and 5 for cgroup.kill), and close everything
        // else, so the reaper holds neither the command's stdio pipes (their EOF must
        // depend only on the command) nor std's exec-error pipe (the parent waits for its
        // EOF).
        let status_hi = libc::fcntl(fds.status_w, libc::F_DUPFD_CLOEXEC, 10);
        let control_hi = libc::fcntl(fds.control_r, libc::F_DUPFD_CLOEXEC, 10);
        let kill_hi = if fds.cgroup_kill >= 0 {
            libc::fcntl(fds.cgroup_kill, libc::F_DUPFD_CLOEXEC, 10)
        } else {
            -1
        };
        if status_hi < 0 || control_hi < 0 {
            libc::_exit(125);
        }
        libc::dup2(status_hi, STATUS_FD);
        libc::dup2(control_hi, CONTROL_FD);
        let has_cgroup = kill_hi >= 0 && libc::dup2(kill_hi, CGROUP_KILL_FD) == CGROUP_KILL_FD;
        let first_closed = if has_cgroup {
            CGROUP_KILL_FD + 1
        } else {
            CONTROL_FD + 1
        };
        libc::syscall(
            libc::SYS_close_range,
            first_closed as libc::c_uint,
            libc::c_uint::MAX,
            0 as libc::c_uint,
        );
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::dup2(null, 2);
            if null > 2 {
                libc::close(null);
            }
        }
        // A signal meant for the tree must never stop the reaper before it reaps.
        for sig in [
            libc::SIGTERM,
            libc::SIGINT,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
        ] {
            libc::signal(sig, libc::SIG_IGN);
        }
        let mut chld: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        let sigfd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        reaper_loop(leader, sigfd, has_cgroup)
    }
}

struct Reaper {
    leader: libc::pid_t,
    leader_reported: bool,
    leader_reaped: bool,
    killing: bool,
    control_open: bool,
    has_cgroup: bool,
}

unsafe fn reaper_loop(leader: libc::pid_t, sigfd: RawFd, has_cgroup: bool) -> ! {
    let mut r = Reaper {
        leader,
        leader_reported: false,
        leader_reaped: false,
        killing: false,
        control_open: true,
        has_cgroup,
    };
    loop {
        // SAFETY: as above.
        let others = unsafe { r.reap() };
        if r.leader_reported && others == 0 {
            unsafe {
                // Only the leader's zombie is left: release it and report "tree gone" by
                // exiting.
                if !r.leader_reaped {
                    let mut info: libc::siginfo_t = std::mem::zeroed();
                    libc::waitid(libc::P_PID, leader as libc::id_t, &mut info, libc::WEXITED);
                }
                libc::_exit(0);
            }
        }
        if r.killing {
            unsafe {
                if r.has_cgroup {
                    // Every member at once, whatever group or session it moved to.
                    libc::write(CGROUP_KILL_FD, b"1".as_ptr().cast(), 1);
                }
                r.signal_tree(libc::SIGKILL);
            }
        }
        let mut pfds = [
            libc::pollfd {
                fd: sigfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if r.control_open { CONTROL_FD } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // While killing, re-scan every 10 ms: an orphan re-parented to us after a deeper
        // death brings no SIGCHLD. Otherwise wait for an event (sigfd < 0 only if
        // signalfd failed; then poll every 50 ms instead).
        let timeout = if r.killing {
            10
        } else if sigfd < 0 {
            50
        } else {
            -1
        };
        unsafe {
            libc::poll(pfds.as_mut_ptr(), 2, timeout);
            if pfds[0].revents != 0 {
                let mut buf = [0u8; 128 * 4];
                while libc::read(sigfd, buf.as_mut_ptr().cast(), buf.len()) > 0 {}
            }
            if pfds[1].revents != 0 {
                r.read_control();
            }
        }
    }
}

impl Reaper {
    /// Reaps every exited child except the leader, whose status is only peeked (`WNOWAIT`)
    /// and reported once. Returns the number of children other than the leader still
    /// present (alive or not yet reaped).
    unsafe fn reap(&mut self) -> usize {
        loop {
            let mut others = 0usize;
            let mut reaped_any = false;
            let leader = self.leader;
            let leader_gone = self.leader_reaped;
            let mut report_now = false;
            // SAFETY: async-signal-safe calls on our own children only.
            let listed = unsafe {
                for_each_child(|pid| {
                    let mut info: libc::siginfo_t = std::mem::zeroed();
                    if pid == leader && !leader_gone {
                        report_now |= !self.leader_reported
                            && libc::waitid(
                                libc::P_PID,
                                pid as libc::id_t,
                                &mut info,
                                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                            ) == 0
                            && info.si_pid() == pid
                            && report(&info);
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
            self.leader_reported |= report_now;
            if !listed {
                // SAFETY: as above.
                return unsafe { self.reap_without_proc() };
            }
            // Reaping while the list was being read may have shifted it; read it again
            // until a pass changes nothing, so no exited child is left unnoticed.
            if !reaped_any {
                return others;
            }
        }
    }

    /// Fallback when `/proc` is unreadable: reap everything (the leader too, so its group
    /// is no longer signalled) and count the children as "unknown" until `ECHILD`.
    unsafe fn reap_without_proc(&mut self) -> usize {
        // SAFETY: waitid(2) on our own children.
        unsafe {
            loop {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let rc = libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOHANG);
                if rc < 0 {
                    // ECHILD: nothing left at all.
                    self.leader_reaped = true;
                    return 0;
                }
                let pid = info.si_pid();
                if pid == 0 {
                    return 1;
                }
                if pid == self.leader {
                    if !self.leader_reported {
                        self.leader_reported = report(&info);
                    }
                    self.leader_reaped = true;
                }
            }
        }
    }

    /// Sends `sig` to the leader's group (safe while the leader is unreaped: its pid, and
    /// so its group id, cannot be reused) and to each direct child and the group it leads
    /// (unreaped children: same argument).
    unsafe fn signal_tree(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on pids pinned as described above.
        unsafe {
            if !self.leader_reaped {
                libc::kill(-self.leader, sig);
            }
            for_each_child(|pid| {
                libc::kill(pid, sig);
                libc::kill(-pid, sig);
            });
        }
    }

    unsafe fn read_control(&mut self) {
        let mut buf = [0u8; 16];
        // SAFETY: read(2) into a stack buffer.
        let n = unsafe { libc::read(CONTROL_FD, buf.as_mut_ptr().cast(), buf.len()) };
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
                CONTROL_TERM if !self.killing => unsafe { self.signal_tree(libc::SIGTERM) },
                CONTROL_KILL => self.killing = true,
                _ => {}
            }
        }
    }
}

/// Writes the leader's status record to the status pipe. Returns true (so callers can
/// fold it into a condition).
unsafe fn report(info: &libc::siginfo_t) -> bool {
    // SAFETY: reading the siginfo union fields waitid filled; write(2) to our pipe.
    unsafe {
        let (tag, value) = match info.si_code {
            libc::CLD_EXITED => (STATUS_EXITED, info.si_status()),
            _ => (STATUS_SIGNALED, info.si_status()),
        };
        let mut rec = [0u8; STATUS_LEN];
        rec[0] = tag;
        rec[1..].copy_from_slice(&value.to_ne_bytes());
        libc::write(STATUS_FD, rec.as_ptr().cast(), STATUS_LEN);
    }
    true
}

/// Calls `f` with each pid listed in `/proc/thread-self/children` (our children, zombies
/// included), parsing in a fixed stack buffer. Returns false if the list is unreadable.
unsafe fn for_each_child(mut f: impl FnMut(libc::pid_t)) -> bool {
    // SAFETY: open/read/close of a proc file into a stack buffer.
    unsafe {
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let mut buf = [0u8; 1024];
        let mut current: i64 = -1;
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            for &b in &buf[..n as usize] {
                if b.is_ascii_digit() {
                    current = current.max(0) * 10 + i64::from(b - b'0');
                } else if current >= 0 {
                    f(current as libc::pid_t);
                    current = -1;
                }
            }
        }
        if current >= 0 {
            f(current as libc::pid_t);
        }
        libc::close(fd);
    }
    true
}
