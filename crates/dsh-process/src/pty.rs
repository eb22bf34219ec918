//! A command on a terminal of its own: the pseudo-terminal's dsh side ([`Pty`]).
//!
//! A spawn with [`SpawnSpec::terminal`](crate::SpawnSpec::terminal) set gets a new PTY
//! pair. The command's leader starts a session of its own with the PTY's terminal side as
//! its stdin, stdout, stderr and controlling terminal, so job control, the foreground
//! process group and hangup work as they do for a person at a terminal. dsh keeps the
//! other side: what the command writes is read from it, what dsh writes there is the
//! command's keyboard input, and the kernel tells it which process group is in the
//! foreground ([`Pty::foreground`]).
//!
//! Closing the `Pty` (dropping it) is what a terminal window closing is: the kernel
//! hangs up the terminal, and the session's processes get SIGHUP.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::fs::{fstat, major, minor};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::foreground::{self, Foreground, TerminalDevice};

/// A terminal's size in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminalSize {
    /// Rows (lines).
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// The dsh side of a command's pseudo-terminal. See the [module docs](self).
#[derive(Debug)]
pub struct Pty {
    master: AsyncFd<OwnedFd>,
    device: TerminalDevice,
    /// The terminal's session: the leader's pid, which its reaper keeps allocated until
    /// the whole tree is gone.
    session: u32,
    /// A pidfd of the leader: while it is unreaped, the session id is ours. `None` when
    /// the leader was gone before dsh could open one (or without pidfds, before Linux
    /// 5.3): then no signal but the keyboard's three is sent.
    leader: Option<OwnedFd>,
}

/// A new PTY pair: dsh's side, and the terminal side the command gets as its stdio.
pub(crate) struct PtyPair {
    pub(crate) master: OwnedFd,
    pub(crate) terminal: OwnedFd,
}

impl PtyPair {
    /// Opens a pair sized `size`. Both fds are close-on-exec; neither becomes anybody's
    /// controlling terminal by being opened.
    pub(crate) fn open(size: TerminalSize) -> io::Result<PtyPair> {
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let master = rustix::pty::openpt(flags)?;
        rustix::pty::grantpt(&master)?;
        rustix::pty::unlockpt(&master)?;
        // The terminal side through the master itself: no path to look up or race.
        let terminal = rustix::pty::ioctl_tiocgptpeer(&master, flags)?;
        rustix::termios::tcsetwinsize(&master, winsize(size))?;
        Ok(PtyPair { master, terminal })
    }
}

impl Pty {
    /// dsh's side of `pair`, made non-blocking and registered with the runtime; dsh's
    /// copy of the terminal side is closed (the command holds its own).
    pub(crate) fn from_pair(pair: PtyPair, session: u32) -> io::Result<Pty> {
        let st = fstat(&pair.terminal)?;
        let device = TerminalDevice {
            major: major(st.st_rdev),
            minor: minor(st.st_rdev),
        };
        drop(pair.terminal);
        // The leader is unreaped now (its reaper keeps it so until the tree is gone).
        let leader = foreground::pidfd(session).ok();
        rustix::io::ioctl_fionbio(&pair.master, true)?;
        // SAFETY: an OwnedFd is open and keeps its number until the AsyncFd drops it.
        let master = unsafe {
            AsyncFd::register_with_interest(pair.master, Interest::READABLE | Interest::WRITABLE)
        }?;
        Ok(Pty {
            master,
            device,
            session,
            leader,
        })
    }

    /// Reads what the command wrote; `Ok(0)` once every process has closed the terminal
    /// (the kernel then reports `EIO`, which this turns into end-of-file).
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is read unless it returns.
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.master.readable().await?;
            match guard.try_io(|fd| rustix::io::read(fd.get_ref(), &mut *buf).map_err(Into::into)) {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes some of `data` as keyboard input; returns how much. Waits while the
    /// terminal's input queue is full (a program that does not read).
    ///
    /// # Cancel safety
    /// Cancel safe: what was written is reported only by a returning call, and a dropped
    /// call wrote nothing.
    pub async fn write(&self, data: &[u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.master.writable().await?;
            match guard.try_io(|fd| rustix::io::write(fd.get_ref(), data).map_err(Into::into)) {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes all of `data`.
    ///
    /// # Cancel safety
    /// Not cancel safe: a dropped call may have written a prefix.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = self.write(data).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            data = &data[n..];
        }
        Ok(())
    }

    /// Resizes the terminal; the foreground group gets SIGWINCH.
    ///
    /// # Errors
    /// The `ioctl`'s.
    pub fn resize(&self, size: TerminalSize) -> io::Result<()> {
        rustix::termios::tcsetwinsize(self.master.get_ref(), winsize(size))?;
        Ok(())
    }

    /// The terminal's size.
    ///
    /// # Errors
    /// The `ioctl`'s.
    pub fn size(&self) -> io::Result<TerminalSize> {
        let w = rustix::termios::tcgetwinsize(self.master.get_ref())?;
        Ok(TerminalSize {
            rows: w.ws_row,
            cols: w.ws_col,
        })
    }

    /// The terminal's foreground process group as dsh sees it (pids of the host, also
    /// when the command runs in a PID namespace), or `None` when it has none (the
    /// session ended) or it cannot be learnt.
    pub fn foreground_group(&self) -> Option<u32> {
        let pgid = rustix::termios::tcgetpgrp(self.master.get_ref()).ok()?;
        u32::try_from(pgid.as_raw_nonzero().get())
            .ok()
            .filter(|p| *p > 0)
    }

    /// The foreground group and what the kernel says it is doing: whether one of its
    /// threads is blocked reading this terminal, and how many reads its processes have
    /// made (see [`Foreground`]). `None` when the group is unknown. The look is bounded
    /// (see the [`foreground`](mod@crate::foreground) module) but blocking: call it off the
    /// async threads.
    pub fn foreground(&self) -> Option<Foreground> {
        let pgid = self.foreground_group()?;
        Some(foreground::inspect(pgid, self.session, self.device))
    }

    /// The terminal's session id (its leader's pid).
    pub fn session(&self) -> u32 {
        self.session
    }

    /// Sends `signal` to the foreground process group; returns the group.
    ///
    /// SIGINT, SIGQUIT and SIGTSTP go as the keyboard sends them: unread input is
    /// discarded ([`flush_input`](Self::flush_input)) and the kernel signals the group the
    /// terminal holds (`TIOCSIG`), never a number that may meanwhile name another group. Any other signal goes to each process of that group in this
    /// terminal's session, each one pinned by a pidfd and checked again before it is
    /// signalled, so nothing outside the session is ever reached.
    ///
    /// # Errors
    /// `NotFound` when there is no foreground group; else the `ioctl`'s or the
    /// signal's.
    pub fn signal_foreground(&self, signal: i32) -> io::Result<u32> {
        let pgid = self
            .foreground_group()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no foreground group"))?;
        if matches!(signal, libc::SIGINT | libc::SIGQUIT | libc::SIGTSTP) {
            // As the keyboard's interrupt does: typed input nobody read yet is discarded,
            // or the shell would run it once the interrupted program is gone. (Best
            // effort: a terminal that cannot be flushed is still signalled.)
            let _ = self.flush_input();
            let sig = signal as libc::c_int;
            // SAFETY: ioctl(2) on our own master fd; TIOCSIG takes the signal number.
            let r = unsafe {
                libc::ioctl(
                    self.master.get_ref().as_raw_fd(),
                    libc::TIOCSIG,
                    sig as libc::c_ulong,
                )
            };
            if r != 0 {
                return Err(io::Error::last_os_error());
            }
            return Ok(pgid);
        }
        if let Some(leader) = &self.leader {
            foreground::signal_in_session(self.session, leader, |m| m.pgrp == pgid, signal)?;
        }
        Ok(pgid)
    }

    /// Every process of this terminal's session now, or `None` when the walk could not
    /// see them all (a read failed, a bound was reached) or the session leader is gone.
    /// The walk reads `/proc` for every process of the session: call it off the async
    /// threads.
    pub fn members(&self) -> Option<Vec<foreground::Member>> {
        self.leader.as_ref()?;
        foreground::all_members(self.session)
    }

    /// Sends `signal` to the processes of this terminal's session for which `pick` holds
    /// (each pinned by a pidfd and checked again before it is signalled, while the session
    /// leader lives; nothing otherwise). Returns how many; signal 0 counts them. The walk
    /// reads `/proc` for every process of the session: call it off the async threads.
    ///
    /// # Errors
    /// `Unsupported` without pidfds (Linux before 5.3).
    pub fn signal_members(
        &self,
        pick: impl Fn(&foreground::Member) -> bool,
        signal: i32,
    ) -> io::Result<usize> {
        match &self.leader {
            Some(leader) => foreground::signal_in_session(self.session, leader, pick, signal),
            None => Ok(0),
        }
    }

    /// Discards input typed but not read yet: what the terminal holds for the program,
    /// and what dsh wrote that the terminal has not taken in.
    ///
    /// # Errors
    /// The `ioctl`s'.
    pub fn flush_input(&self) -> io::Result<()> {
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let terminal = rustix::pty::ioctl_tiocgptpeer(self.master.get_ref(), flags)?;
        rustix::termios::tcflush(&terminal, rustix::termios::QueueSelector::IFlush)?;
        rustix::termios::tcflush(
            self.master.get_ref(),
            rustix::termios::QueueSelector::OFlush,
        )?;
        Ok(())
    }

    /// What a terminal hanging up sends: SIGHUP to the session's leader and to its
    /// foreground group (each process pinned and checked as in
    /// [`signal_foreground`](Self::signal_foreground)). Dropping the `Pty` is the
    /// kernel's own hangup.
    ///
    /// # Errors
    /// The signals'.
    pub fn hang_up(&self) -> io::Result<()> {
        let Some(leader) = &self.leader else {
            return Ok(());
        };
        let fg = self.foreground_group();
        let session = self.session;
        foreground::signal_in_session(
            session,
            leader,
            |m| m.pid == session || Some(m.pgrp) == fg,
            libc::SIGHUP,
        )?;
        Ok(())
    }
}

fn winsize(size: TerminalSize) -> Winsize {
    Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}
