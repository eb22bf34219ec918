//! `clone3(CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP)`: start the leader directly inside
//! its command cgroup.
//!
//! Moving a running process into a cgroup (a write to `cgroup.procs`) takes the kernel's
//! global thread-group lock for writing, which waits for an RCU grace period: hundreds of
//! microseconds per command, far more under load. A process *born* in the cgroup
//! (`CLONE_INTO_CGROUP`, Linux 5.7) never migrates, and a refusal is an error of the clone
//! itself instead of a write the leader can only ignore.
//!
//! Neither glibc nor musl wraps `clone3`, and with `CLONE_VM` the child must start on its
//! own stack, which only a few instructions of assembly can do: the child calls the entry
//! function on the new stack and exits with its return value. Only x86_64 has the
//! trampoline (the architecture CI runs); elsewhere [`spawn_into_cgroup`] returns `ENOSYS`
//! and the caller falls back to `clone` plus a `cgroup.procs` write, as it does when a
//! seccomp filter (Docker's default one, for instance) answers `clone3` with `ENOSYS`.

use std::os::fd::RawFd;

/// `CLONE_INTO_CGROUP` (Linux 5.7): `clone_args.cgroup` is a cgroup directory fd.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` as of Linux 5.7 (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Starts `entry(arg)` as a child that shares our memory, runs on `stack`, is born in the
/// cgroup whose directory is `cgroup_dir`, and suspends us until it execs or exits (the
/// `posix_spawn` pattern). Returns the child's pid, or the errno: `ENOSYS` when `clone3` is
/// unavailable (old kernel, seccomp, or an architecture without the trampoline).
///
/// # Safety
/// `stack` must stay valid and unused by anyone else until the child has exec'd or exited;
/// `entry` must never unwind and may only make async-signal-safe calls.
pub(crate) unsafe fn spawn_into_cgroup(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    stack: &mut [u8],
    cgroup_dir: RawFd,
) -> Result<libc::pid_t, i32> {
    let base = stack.as_mut_ptr() as u64;
    // The kernel starts the child at base + size, which must be 16-byte aligned.
    let size = (stack.len() as u64) - ((base + stack.len() as u64) % 16);
    let args = CloneArgs {
        flags: libc::CLONE_VM as u64 | libc::CLONE_VFORK as u64 | CLONE_INTO_CGROUP,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: base,
        stack_size: size,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: u64::try_from(cgroup_dir).map_err(|_| libc::EBADF)?,
    };
    // SAFETY: forwarded to the caller's contract.
    let ret = unsafe { raw_clone3(&args, entry, arg) };
    if ret < 0 {
        Err(i32::try_from(-ret).unwrap_or(libc::EINVAL))
    } else {
        libc::pid_t::try_from(ret).map_err(|_| libc::EINVAL)
    }
}

/// The `clone3` syscall; in the child: `exit(entry(arg))` on the new stack.
///
/// # Safety
/// `args` must describe a valid `clone3` request whose stack stays valid and unused until
/// the child has exec'd or exited; the child runs `entry`, which must never unwind and may
/// only make async-signal-safe calls (see [`spawn_into_cgroup`]).
#[cfg(target_arch = "x86_64")]
unsafe fn raw_clone3(
    args: &CloneArgs,
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> i64 {
    let ret: i64;
    // SAFETY: the parent sees an ordinary syscall (rcx and r11 clobbered, rax the result).
    // The child (rax 0) starts with the kernel-set stack pointer at the 16-byte aligned top
    // of its stack, clears the frame pointer, calls `entry` with the System V convention and
    // exits with its result; it never returns into this function's frame. r12 and r13 are
    // preserved across `syscall`, so the child still has `arg` and `entry` in them.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "mov edi, eax",
            "mov eax, 60", // SYS_exit
            "syscall",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") std::ptr::from_ref(args),
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// Where the trampoline is not written: always `ENOSYS`, so the caller falls back.
///
/// # Safety
/// None beyond the signature's: it makes no call.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn raw_clone3(
    _args: &CloneArgs,
    _entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    _arg: *mut libc::c_void,
) -> i64 {
    -i64::from(libc::ENOSYS)
}
