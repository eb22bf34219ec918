//! What a confined command's first process applies to itself between `fork` and `exec`.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::seccomp::Instruction;

/// The steps of [`ChildRestrictions::apply`], named in its errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ConfineStep {
    /// Moving an inherited fd to the number the runner expects.
    InheritFd = 1,
    /// Dropping every capability (bounding, ambient, effective, permitted, inheritable).
    DropCapabilities = 2,
    /// `prctl(PR_SET_NO_NEW_PRIVS)`.
    NoNewPrivs = 3,
    /// `landlock_restrict_self`.
    Landlock = 4,
    /// Installing the seccomp filter.
    Seccomp = 5,
}

impl ConfineStep {
    /// The step with this code, as carried in a status record.
    pub fn from_code(code: u8) -> Option<ConfineStep> {
        [
            ConfineStep::InheritFd,
            ConfineStep::DropCapabilities,
            ConfineStep::NoNewPrivs,
            ConfineStep::Landlock,
            ConfineStep::Seccomp,
        ]
        .into_iter()
        .find(|s| *s as u8 == code)
    }

    /// What the step does, for error messages.
    pub const fn describe(self) -> &'static str {
        match self {
            ConfineStep::InheritFd => "passing the sandbox's file descriptor",
            ConfineStep::DropCapabilities => "dropping capabilities",
            ConfineStep::NoNewPrivs => "setting no_new_privs",
            ConfineStep::Landlock => "applying the Landlock ruleset",
            ConfineStep::Seccomp => "installing the seccomp filter",
        }
    }
}

/// Restrictions a spawner applies in the child, after `fork` and before `exec`, with
/// async-signal-safe syscalls only (see [`apply`](Self::apply)). Built by a
/// [`Sandbox`](crate::Sandbox); everything that allocates happened then.
#[derive(Debug)]
pub struct ChildRestrictions {
    pub(crate) drop_capabilities: bool,
    pub(crate) no_new_privs: bool,
    pub(crate) landlock: Option<OwnedFd>,
    pub(crate) seccomp: Option<Box<[Instruction]>>,
    /// Fds the runner expects at fixed numbers: (source, number in the command).
    pub(crate) inherit: Vec<(OwnedFd, RawFd)>,
}

impl ChildRestrictions {
    /// The fds the spawner must carry into the child (they may be renumbered there; pass
    /// the new numbers to [`apply`](Self::apply) in this order).
    pub fn carried_fds(&self) -> Vec<RawFd> {
        self.landlock
            .iter()
            .map(AsRawFd::as_raw_fd)
            .chain(self.inherit.iter().map(|(fd, _)| fd.as_raw_fd()))
            .collect()
    }

    /// Whether anything must happen in the child at all.
    pub fn is_empty(&self) -> bool {
        !self.drop_capabilities
            && !self.no_new_privs
            && self.landlock.is_none()
            && self.seccomp.is_none()
            && self.inherit.is_empty()
    }

    /// Applies the restrictions to the calling process: inherited fds to their numbers,
    /// then capabilities dropped, `no_new_privs`, the Landlock ruleset, the seccomp filter
    /// (last, so it cannot get in the way of the steps before it). `carried` are the
    /// current numbers of [`carried_fds`](Self::carried_fds), in order.
    ///
    /// # Errors
    /// The step that failed and its errno; the caller must then `_exit` without `exec`.
    ///
    /// # Safety
    /// Call only in a child between `fork`/`clone` and `exec`: it changes this process
    /// irrevocably. It allocates nothing and makes only async-signal-safe syscalls.
    pub unsafe fn apply(&self, carried: &[RawFd]) -> Result<(), (ConfineStep, i32)> {
        let errno = || {
            // SAFETY: reading this thread's errno.
            unsafe { *libc::__errno_location() }
        };
        let skip = usize::from(self.landlock.is_some());
        for (i, (_, target)) in self.inherit.iter().enumerate() {
            let Some(&from) = carried.get(skip + i) else {
                return Err((ConfineStep::InheritFd, libc::EBADF));
            };
            // SAFETY: plain fd syscalls on our own fds; dup2 leaves the copy inheritable.
            if unsafe { libc::dup2(from, *target) } < 0 {
                return Err((ConfineStep::InheritFd, errno()));
            }
        }
        if self.drop_capabilities {
            // SAFETY: syscalls on this process only.
            unsafe { drop_capabilities() }.map_err(|e| (ConfineStep::DropCapabilities, e))?;
        }
        if self.no_new_privs {
            // SAFETY: as above.
            if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
                return Err((ConfineStep::NoNewPrivs, errno()));
            }
        }
        if self.landlock.is_some() {
            let Some(&fd) = carried.first() else {
                return Err((ConfineStep::Landlock, libc::EBADF));
            };
            // SAFETY: the ruleset fd built by the parent; flags 0.
            if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) } != 0 {
                return Err((ConfineStep::Landlock, errno()));
            }
            // SAFETY: ours; the command has no use for it.
            unsafe { libc::close(fd) };
        }
        if let Some(program) = &self.seccomp {
            let prog = libc::sock_fprog {
                len: u16::try_from(program.len()).unwrap_or(u16::MAX),
                filter: program.as_ptr().cast_mut(),
            };
            // SAFETY: a valid program that outlives the call (the kernel copies it).
            let r = unsafe {
                libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &prog as *const libc::sock_fprog,
                    0,
                    0,
                )
            };
            if r != 0 {
                return Err((ConfineStep::Seccomp, errno()));
            }
        }
        Ok(())
    }
}

/// Drops every capability for good: the bounding set (needs CAP_SETPCAP, which only a
/// privileged process has and only it needs), the ambient set, then effective, permitted
/// and inheritable. After this even a root command gains none at `exec`.
///
/// # Safety
/// Only in a freshly forked, single-threaded child before `exec` (the confinement steps):
/// it changes this process's capabilities for good and may only make async-signal-safe
/// calls.
unsafe fn drop_capabilities() -> Result<(), i32> {
    // SAFETY (whole function): prctl/capset on this process, no memory but the stack.
    unsafe {
        let mut header = CapHeader {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        if libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        ) != 0
        {
            return Err(*libc::__errno_location());
        }
        let has_setpcap = data[0].effective & (1 << CAP_SETPCAP) != 0;
        if has_setpcap {
            for cap in 0..64 {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                    && *libc::__errno_location() != libc::EINVAL
                {
                    return Err(*libc::__errno_location());
                }
            }
        }
        // Unknown on kernels before 4.3: nothing ambient can exist there.
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let empty = [CapData::default(); 2];
        if libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            empty.as_ptr(),
        ) != 0
        {
            return Err(*libc::__errno_location());
        }
        Ok(())
    }
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `CAP_SETPCAP`: needed to drop from the bounding set.
const CAP_SETPCAP: u32 = 8;
