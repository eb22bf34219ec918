//! What a terminal's foreground process group is doing, as the kernel shows it in `/proc`.
//!
//! A program waiting for a person to type is blocked in a system call that reads the
//! terminal: `read` on it, or `select`/`poll`/`epoll` with it among the descriptors to
//! read. `/proc/<pid>/task/<tid>/syscall` names the call a blocked thread is in and its
//! arguments; the descriptor sets they point at are read from `/proc/<pid>/mem`, an epoll
//! instance's targets from `/proc/<pid>/fdinfo`. A descriptor "is the terminal" when it
//! is the PTY's terminal side or `/dev/tty` (which, for a process of the terminal's
//! session, is that same terminal), so a program that reads keys from `/dev/tty`, as
//! `less` and `vim` do, counts as well as one reading stdin.
//!
//! The same pass sums the read system calls the group's processes have made
//! (`/proc/<pid>/io`, `syscr`): a program that read its input and went back to waiting
//! between two looks shows a larger count, which tells "answered and waits again" from
//! "still waiting for the same input".
//!
//! The programs looked at may be hostile, so a look is bounded: at most
//! [`MAX_MEMBERS`] processes, [`MAX_THREADS`] threads each, [`MAX_FDINFO_BYTES`] of an
//! epoll's target list and [`MAX_FD_CHECKS`] descriptor checks; a descriptor is checked
//! only when its link names something under `/dev/` (a device: never a FUSE file, whose
//! `stat` could block). Only processes of the terminal's own session are looked at.
//!
//! # Limits
//! Linux on x86_64 and aarch64 (elsewhere nothing is ever reported waiting). A process
//! dsh may not trace (another user's, or one that made itself undumpable) shows nothing;
//! a race with a process exiting mid-look counts as not waiting. Reading a process's
//! memory can still wait on a mapping of a stalled FUSE file: callers bound the look in
//! time as well.

use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};

/// What [`Pty::foreground`](crate::Pty::foreground) found about a foreground process group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Foreground {
    /// The group, as dsh sees it.
    pub pgid: u32,
    /// Whether a thread of the group is blocked reading the terminal.
    pub input_waiting: bool,
    /// The read system calls the group's processes have made so far (a count that only
    /// grows while the same processes live).
    pub reads: u64,
}

/// The PTY terminal side's device numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TerminalDevice {
    pub(crate) major: u32,
    pub(crate) minor: u32,
}

/// `/dev/tty`: the controlling terminal of whoever opened it.
const DEV_TTY: (u32, u32) = (5, 0);

/// The most descriptors looked at in one `select` set or `poll` array.
const MAX_FDS: u64 = 1024;
/// The most processes of a group one look examines.
pub const MAX_MEMBERS: usize = 256;
/// The most threads of a process one look examines.
pub const MAX_THREADS: usize = 64;
/// The most bytes of an epoll instance's `fdinfo` one look reads.
pub const MAX_FDINFO_BYTES: u64 = 64 << 10;
/// The most descriptors one look checks for being the terminal.
pub const MAX_FD_CHECKS: usize = 256;

/// Looks at the processes of group `pgid` in session `session`. See the [module
/// docs](self).
pub(crate) fn inspect(pgid: u32, session: u32, device: TerminalDevice) -> Foreground {
    let mut found = Foreground {
        pgid,
        input_waiting: false,
        reads: 0,
    };
    let look = Look {
        device,
        checks: std::cell::Cell::new(0),
    };
    let group = members(session, |m| m.pgrp == pgid);
    for pid in group.into_iter().take(MAX_MEMBERS).map(|m| m.pid) {
        found.reads = found.reads.saturating_add(reads(pid).unwrap_or(0));
        if !found.input_waiting {
            found.input_waiting = waits_for_input(pid, &look);
        }
    }
    found
}

/// One look's budget of descriptor checks.
struct Look {
    device: TerminalDevice,
    checks: std::cell::Cell<usize>,
}

/// The most processes of a terminal's tree one walk visits.
const MAX_TREE: usize = 4096;

/// The processes of session `session` for which `pick` holds. Every process of
/// the session descends from the session's leader or was re-parented to the leader's
/// parent (its reaper, the tree's subreaper), so the walk visits that tree alone
/// (`/proc/<pid>/task/<tid>/children`), not all of `/proc`; where the leader is gone it
/// falls back to scanning `/proc`.
pub(crate) fn members(session: u32, pick: impl Fn(&Member) -> bool) -> Vec<Member> {
    let mut out = walk(session, false).unwrap_or_default();
    out.retain(|m| pick(m));
    out
}

/// Every process of session `session`, or `None` unless the walk saw them all: no read
/// failed but for a process that ended meanwhile. It scans all of `/proc`, so no bound
/// on a process's threads or children can hide one.
pub(crate) fn all_members(session: u32) -> Option<Vec<Member>> {
    walk(session, true)
}

/// The walk of [`members`]; `strict`: `None` at the first read that failed for another
/// reason than a process ending, or at a bound.
fn walk(session: u32, strict: bool) -> Option<Vec<Member>> {
    let mut buf = Vec::with_capacity(512);
    let mut out = Vec::new();
    // A process that ended meanwhile is no failure.
    let vanished = |e: &std::io::Error| {
        e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
    };
    let mut complete = true;
    let mut keep = |pid: u32, buf: &mut Vec<u8>, complete: &mut bool| {
        buf.clear();
        let read = fs::File::open(format!("/proc/{pid}/stat")).and_then(|mut f| f.read_to_end(buf));
        match read {
            Ok(_) => match stat_fields(buf) {
                Some((state, pgrp, sid, ppid, started)) if sid == session => out.push(Member {
                    pid,
                    ppid,
                    pgrp,
                    started: StartMark(started),
                    exited: matches!(state, 'Z' | 'X' | 'x'),
                }),
                Some(_) => {}
                None => *complete = false,
            },
            Err(e) if vanished(&e) => {}
            Err(_) => *complete = false,
        }
    };
    match parent_of(session, &mut buf).filter(|_| !strict) {
        Some(root) => {
            let mut tree = vec![root];
            let mut i = 0;
            while i < tree.len() && tree.len() < MAX_TREE {
                let pid = tree[i];
                i += 1;
                match fs::read_dir(format!("/proc/{pid}/task")) {
                    Ok(tasks) => {
                        for (n, t) in tasks.enumerate() {
                            let Ok(t) = t else {
                                complete = false;
                                continue;
                            };
                            if n >= MAX_THREADS {
                                complete = false;
                                break;
                            }
                            match fs::read_to_string(t.path().join("children")) {
                                Ok(children) => tree.extend(
                                    children
                                        .split_ascii_whitespace()
                                        .filter_map(|c| c.parse::<u32>().ok()),
                                ),
                                Err(e) if vanished(&e) => {}
                                Err(_) => complete = false,
                            }
                        }
                    }
                    Err(e) if vanished(&e) => {}
                    Err(_) => complete = false,
                }
            }
            if tree.len() >= MAX_TREE {
                complete = false;
            }
            for pid in tree.into_iter().skip(1).take(MAX_TREE) {
                keep(pid, &mut buf, &mut complete);
            }
        }
        None => {
            let dir = match fs::read_dir("/proc") {
                Ok(dir) => dir,
                Err(_) => return (!strict).then_some(out),
            };
            for entry in dir {
                let Ok(entry) = entry else {
                    complete = false;
                    continue;
                };
                let name = entry.file_name();
                if let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) {
                    keep(pid, &mut buf, &mut complete);
                }
            }
        }
    }
    (complete || !strict).then_some(out)
}

/// The parent of `pid`, from `/proc/<pid>/stat`.
fn parent_of(pid: u32, buf: &mut Vec<u8>) -> Option<u32> {
    buf.clear();
    fs::File::open(format!("/proc/{pid}/stat"))
        .and_then(|mut f| f.read_to_end(buf))
        .ok()?;
    let close = buf.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(&buf[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// One process of a terminal's session, as a walk of the session sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its pid (the host's).
    pub pid: u32,
    /// Its parent.
    pub ppid: u32,
    /// Its process group.
    pub pgrp: u32,
    /// When it started.
    pub started: StartMark,
    /// It has exited and waits to be reaped (a zombie): nothing left to signal.
    pub exited: bool,
}

/// A moment as the kernel counts process start times: clock ticks since boot (usually
/// 10 ms each). A process whose [`Member::started`] is at or after a mark taken before it
/// started compares so; one started in the same tick just before the mark does too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StartMark(u64);

impl StartMark {
    /// The current tick.
    pub fn now() -> StartMark {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime(2) writes the timespec we own; CLOCK_BOOTTIME exists
        // since Linux 2.6.39. sysconf(3) has no preconditions.
        let (hz, _) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now),
            )
        };
        let hz = u64::try_from(hz).ok().filter(|h| *h > 0).unwrap_or(100);
        let secs = u64::try_from(now.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
        StartMark(secs * hz + nanos * hz / 1_000_000_000)
    }
}

/// `pid` as a [`Member`], and its session, from `/proc/<pid>/stat` (read into `buf`).
fn member_of(pid: u32, buf: &mut Vec<u8>) -> Option<(Member, u32)> {
    buf.clear();
    fs::File::open(format!("/proc/{pid}/stat"))
        .and_then(|mut f| f.read_to_end(buf))
        .ok()?;
    let (state, pgrp, session, ppid, started) = stat_fields(buf)?;
    Some((
        Member {
            pid,
            ppid,
            pgrp,
            started: StartMark(started),
            exited: matches!(state, 'Z' | 'X' | 'x'),
        },
        session,
    ))
}

/// The state, process group, session, parent and start time in a `/proc/<pid>/stat`
/// line: the first, third, fourth, second and twentieth fields after the command name's
/// closing parenthesis (the name may itself hold spaces and parentheses).
fn stat_fields(stat: &[u8]) -> Option<(char, u32, u32, u32, u64)> {
    let close = stat.iter().rposition(|b| *b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // state, ppid, pgrp, session, …, starttime (field 22 of the line)
    let mut it = rest.split_ascii_whitespace();
    let state = it.next()?.chars().next()?;
    let ppid = it.next()?.parse().ok()?;
    let pgrp = it.next()?.parse().ok()?;
    let session = it.next()?.parse().ok()?;
    let started = it.nth(15)?.parse().ok()?;
    Some((state, pgrp, session, ppid, started))
}

/// Sends `signal` to every process of session `session` for which `pick` holds; returns
/// how many (signal 0 counts them). `leader` is a pidfd of the session's leader, whose pid is the
/// session id: while the leader is unreaped (its reaper keeps it so until the whole tree
/// is gone), no other process can have that session. Each process is pinned with a
/// pidfd, its session read again, and only then, if the leader is still unreaped,
/// signalled: a pid that died and was reused meanwhile is never reached, nor is anything
/// outside the session.
///
/// # Errors
/// `Unsupported` without `pidfd_open` (Linux before 5.3).
pub(crate) fn signal_in_session(
    session: u32,
    leader: &std::os::fd::OwnedFd,
    pick: impl Fn(&Member) -> bool,
    signal: i32,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let unreaped = || {
        // SAFETY: pidfd_send_signal(2) of signal 0 (a check) on our own pidfd.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                leader.as_raw_fd(),
                0,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        r == 0
    };
    let mut buf = Vec::with_capacity(512);
    let mut sent = 0;
    for pid in members(session, &pick).into_iter().map(|m| m.pid) {
        // SAFETY: pidfd_open(2) with no flags; the result is an fd we own, or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
        if fd < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "pidfd_open needs Linux 5.3",
                ));
            }
            // Gone meanwhile.
            continue;
        }
        let fd = fd as libc::c_int;
        let still = member_of(pid, &mut buf).is_some_and(|(m, sid)| sid == session && pick(&m));
        if still && unreaped() {
            // SAFETY: pidfd_send_signal(2) on the pidfd just opened; no siginfo.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd,
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            };
            if r == 0 {
                sent += 1;
            }
        }
        // SAFETY: closing the pidfd opened above.
        unsafe { libc::close(fd) };
    }
    Ok(sent)
}

/// `syscr` of `/proc/<pid>/io`.
fn reads(pid: u32) -> Option<u64> {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("syscr:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether a thread of `pid` is blocked reading the terminal.
fn waits_for_input(pid: u32, look: &Look) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().take(MAX_THREADS).any(|t| {
        let path = t.path().join("syscall");
        fs::read_to_string(path)
            .ok()
            .and_then(|s| BlockedCall::parse(&s))
            .is_some_and(|call| call.reads_terminal(pid, look))
    })
}

/// A thread's blocked system call: its number and first arguments.
#[derive(Debug, PartialEq, Eq)]
struct BlockedCall {
    nr: u64,
    args: [u64; 3],
}

impl BlockedCall {
    /// `nr arg0 … arg5 sp pc` (numbers decimal, the rest hex); `running` or `-1 sp pc`
    /// (not in a system call) is `None`.
    fn parse(s: &str) -> Option<BlockedCall> {
        let mut it = s.split_ascii_whitespace();
        let nr = it.next()?.parse::<u64>().ok()?;
        let mut args = [0u64; 3];
        for a in &mut args {
            *a = u64::from_str_radix(it.next()?.trim_start_matches("0x"), 16).ok()?;
        }
        Some(BlockedCall { nr, args })
    }

    fn reads_terminal(&self, pid: u32, look: &Look) -> bool {
        let [a0, a1, a2] = self.args;
        let is_terminal = |fd: u64| fd_is_terminal(pid, fd, look);
        match arch::call(self.nr) {
            Some(Call::Read) => is_terminal(a0),
            Some(Call::Select) => select_reads_terminal(pid, a0, a1, &is_terminal),
            Some(Call::Poll) => poll_reads_terminal(pid, a0, a1, &is_terminal),
            Some(Call::EpollWait) => a2 >= 1 && epoll_reads_terminal(pid, a0, &is_terminal),
            None => false,
        }
    }
}

/// The calls that wait for input, whatever their number on this architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    /// `read`/`readv(fd, …)`.
    Read,
    /// `select`/`pselect6(nfds, readfds, …)`.
    Select,
    /// `poll`/`ppoll(fds, nfds, …)`.
    Poll,
    /// `epoll_wait`/`epoll_pwait`/`epoll_pwait2(epfd, events, maxevents, …)`.
    EpollWait,
}

#[cfg(target_arch = "x86_64")]
mod arch {
    use super::Call;

    pub(super) fn call(nr: u64) -> Option<Call> {
        Some(match nr {
            0 | 19 => Call::Read,
            23 | 270 => Call::Select,
            7 | 271 => Call::Poll,
            232 | 281 | 441 => Call::EpollWait,
            _ => return None,
        })
    }
}

#[cfg(target_arch = "aarch64")]
mod arch {
    use super::Call;

    pub(super) fn call(nr: u64) -> Option<Call> {
        Some(match nr {
            63 | 65 => Call::Read,
            72 => Call::Select,
            73 => Call::Poll,
            22 | 441 => Call::EpollWait,
            _ => return None,
        })
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod arch {
    use super::Call;

    pub(super) fn call(_nr: u64) -> Option<Call> {
        None
    }
}

/// Whether `pid`'s descriptor `fd` is the terminal (or `/dev/tty`), within the look's
/// budget of checks.
fn fd_is_terminal(pid: u32, fd: u64, look: &Look) -> bool {
    if fd > i32::MAX as u64 || look.checks.get() >= MAX_FD_CHECKS {
        return false;
    }
    look.checks.set(look.checks.get() + 1);
    let link = format!("/proc/{pid}/fd/{fd}");
    // Only a device is stat'ed: a file on a stalled FUSE mount could hold the stat.
    match fs::read_link(&link) {
        Ok(target) if target.starts_with("/dev/") => {}
        _ => return false,
    }
    let device = look.device;
    let Ok(md) = fs::metadata(&link) else {
        return false;
    };
    let rdev = md.rdev();
    let (maj, min) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    (maj, min) == (device.major, device.minor) || (maj, min) == DEV_TTY
}

/// Reads `len` bytes of `pid`'s memory at `addr`.
fn peek(pid: u32, addr: u64, len: usize) -> Option<Vec<u8>> {
    let f = fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, addr).ok()?;
    Some(buf)
}

fn select_reads_terminal(
    pid: u32,
    nfds: u64,
    readfds: u64,
    is_terminal: &dyn Fn(u64) -> bool,
) -> bool {
    let nfds = nfds.min(MAX_FDS);
    if nfds == 0 || readfds == 0 {
        return false;
    }
    let Some(set) = peek(pid, readfds, nfds.div_ceil(8) as usize) else {
        return false;
    };
    (0..nfds).any(|fd| set[(fd / 8) as usize] & (1 << (fd % 8)) != 0 && is_terminal(fd))
}

fn poll_reads_terminal(pid: u32, fds: u64, nfds: u64, is_terminal: &dyn Fn(u64) -> bool) -> bool {
    let nfds = nfds.min(MAX_FDS);
    if nfds == 0 || fds == 0 {
        return false;
    }
    // struct pollfd { int fd; short events; short revents; }
    let Some(raw) = peek(pid, fds, nfds as usize * 8) else {
        return false;
    };
    raw.chunks_exact(8).any(|p| {
        let fd = i32::from_ne_bytes([p[0], p[1], p[2], p[3]]);
        let events = i16::from_ne_bytes([p[4], p[5]]);
        fd >= 0 && events & libc::POLLIN != 0 && is_terminal(fd as u64)
    })
}

fn epoll_reads_terminal(pid: u32, epfd: u64, is_terminal: &dyn Fn(u64) -> bool) -> bool {
    let mut info = String::new();
    let read = fs::File::open(format!("/proc/{pid}/fdinfo/{epfd}"))
        .and_then(|f| f.take(MAX_FDINFO_BYTES).read_to_string(&mut info));
    if read.is_err() {
        return false;
    }
    // `tfd:        0 events:       19 data: …`
    info.lines().any(|l| {
        let mut it = l.split_ascii_whitespace();
        if it.next() != Some("tfd:") {
            return false;
        }
        let fd = it.next().and_then(|v| v.parse::<u64>().ok());
        let events = match (it.next(), it.next()) {
            (Some("events:"), Some(v)) => u32::from_str_radix(v, 16).ok(),
            _ => None,
        };
        matches!((fd, events), (Some(fd), Some(ev)) if ev & libc::EPOLLIN as u32 != 0 && is_terminal(fd))
    })
}

/// A pidfd of `pid`.
///
/// # Errors
/// `pidfd_open`'s (`Unsupported` for Linux before 5.3).
pub(crate) fn pidfd(pid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open(2) with no flags; the result is an fd we own, or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd, owned by nobody else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as libc::c_int) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_session_and_start_are_read_after_the_command_name() {
        let line = b"12 (a) b) c) S 1 77 70 34816 77 4194304 97 0 0 0 0 0 0 0 20 0 1 0 \
                     5179203 2580480 244 18446744073709551615";
        assert_eq!(stat_fields(line), Some(('S', 77, 70, 1, 5_179_203)));
        assert_eq!(stat_fields(b"12 (sh) R 1 5"), None);
    }

    #[test]
    fn this_process_started_before_now() {
        let mut buf = Vec::new();
        let (me, _) = member_of(std::process::id(), &mut buf).expect("own stat");
        assert!(me.started <= StartMark::now(), "{me:?}");
        assert!(me.started > StartMark(0));
    }

    #[test]
    fn a_blocked_call_is_parsed_and_running_is_not() {
        assert_eq!(
            BlockedCall::parse("0 0x0 0x7ffd1 0x1 0x0 0x0 0x0 0x7ffd0 0x7f00"),
            Some(BlockedCall {
                nr: 0,
                args: [0, 0x7ffd1, 1]
            })
        );
        assert_eq!(BlockedCall::parse("running"), None);
        assert_eq!(BlockedCall::parse("-1 0x7ffd0 0x7f00"), None);
    }
}
