//! The seccomp filter of a confined command: what the kernel's other mechanisms leave open.
//!
//! [`program`] returns a classic BPF program that answers `EPERM` to the syscalls of the
//! [`Denials`] asked for:
//! - **network**: `socket` and `socketpair` of any family but `AF_UNIX`, and of `AF_UNIX`
//!   datagram sockets (an unconnected datagram socket can `sendmsg` to any host socket
//!   path); `connect` (with only Unix stream and seqpacket sockets left, connecting is
//!   exactly how a command would reach a host daemon, by path or abstract name);
//!   `io_uring_setup`, `io_uring_enter`, `io_uring_register` (io_uring performs socket
//!   operations the filter never sees);
//! - **metadata**: `chmod`, `chown`, `utime` and the extended-attribute setters and
//!   removers, in every variant, the inode-flag ioctls (`chattr`) and `file_setattr`, and
//!   io_uring (its `SETXATTR` would set an ACL unseen). Landlock governs a file's contents
//!   and names, not its mode, owner, times or xattrs: without this a read-only command
//!   could `chmod 4755` a root-owned binary, or `chmod 777 ~/.ssh`;
//! - **keyrings**: `add_key`, `request_key`, `keyctl`. The kernel keyrings belong to the
//!   user, not to a namespace: a command could read or plant the host user's keys;
//! - **host IPC**: System V shared memory, semaphores and message queues, and POSIX
//!   message queues. They live in the IPC namespace, which the Landlock runner shares with
//!   the host (bubblewrap unshares it instead);
//! - **set-ID bits and leases**: a `chmod` (any variant) or an `open`/`creat` whose mode
//!   has `S_ISUID` or `S_ISGID`: a command of a root dsh is still uid 0 and would own a
//!   setuid-root binary it made; and `fcntl(F_SETLEASE)`, which stalls other writers of a
//!   file for up to 45 seconds;
//! - **cgroup moves**: `clone3` answers `ENOSYS` (so libc falls back to `clone`): its
//!   `CLONE_INTO_CGROUP` would start a child in any cgroup the command may write,
//!   outside its own cgroup, its kill and its process limit;
//! - always, every syscall of another architecture's ABI (i386 `int 0x80`, x32), which
//!   would otherwise bypass the numbers checked here.
//!
//! A `socketpair(AF_UNIX, SOCK_STREAM)` made inside still works, with `send`, `sendmsg` and
//! `recv` (Python's asyncio relies on it), and so does `bind`/`listen`/`accept` on a Unix
//! socket of the sandbox's own.
//!
//! The Landlock runner installs the program in the child; bubblewrap receives it on an fd
//! (`--seccomp FD`) and installs it just before `exec`.

/// One BPF instruction (`struct sock_filter`).
pub type Instruction = libc::sock_filter;

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
const BPF_JEQ_K: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_JGE_K: u16 = 0x05 | 0x30; // BPF_JMP | BPF_JGE | BPF_K
const BPF_AND_K: u16 = 0x04 | 0x50; // BPF_ALU | BPF_AND | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

/// Offsets in `struct seccomp_data`.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0_LO: u32 = 16;
const OFF_ARG1_LO: u32 = 24;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: Option<u32> = Some(0xC000_003E);
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: Option<u32> = Some(0xC000_00B7);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const AUDIT_ARCH: Option<u32> = None;

/// The x32 ABI marks its syscall numbers with this bit (x86_64 only).
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Whether this build has a seccomp filter for its architecture (x86_64, aarch64).
pub const fn supported() -> bool {
    AUDIT_ARCH.is_some()
}

/// What a [`program`] denies (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Denials {
    /// Every socket but a Unix stream or seqpacket one, `connect`, io_uring.
    pub network: bool,
    /// Mode, owner, time, extended-attribute and inode-flag changes on any file, and
    /// io_uring (its `SETXATTR` does what `setxattr` does, unseen by the filter).
    pub metadata: bool,
    /// The user's kernel keyrings.
    pub keyrings: bool,
    /// System V IPC and POSIX message queues.
    pub host_ipc: bool,
    /// Set-user-ID and set-group-ID bits: a `chmod` or a file creation whose mode has
    /// either (a command of a root dsh would plant a setuid-root binary), and file leases
    /// (`F_SETLEASE` lets a command stall the writers of a file it can open).
    pub set_id_and_leases: bool,
    /// The terminal ioctls that reach past a command's own input: `TIOCSTI` (push input),
    /// `TIOCSETD` (line disciplines, a long line of kernel bugs: a command without a
    /// terminal can still open one of its own and load one), `TIOCLINUX` and `TIOCCONS`
    /// (the console). No program a command runs needs them; every confinement denies them.
    pub terminal_ioctls: bool,
    /// `clone3`, answered `ENOSYS` rather than `EPERM` so libc falls back to `clone`: its
    /// `CLONE_INTO_CGROUP` starts a child in another cgroup (see the [module docs](self)).
    pub cgroup_moves: bool,
}

/// A syscall allowed only when its argument passes a test.
#[derive(Clone, Copy, Debug)]
enum ArgCheck {
    /// Denied when `arg & mask != 0`.
    NoBits { arg: u32, mask: u32 },
    /// Denied when `arg` is one of `values`.
    NotOneOf { arg: u32, values: &'static [u32] },
}

/// `S_ISUID | S_ISGID`.
const SET_ID_BITS: u32 = 0o6000;
/// `F_SETLEASE`.
const F_SETLEASE: u32 = 1024;
/// `FS_IOC_SETFLAGS`, `FS_IOC_FSSETXATTR` and `FS_IOC32_SETFLAGS` (`chattr`, `xfs_io`).
const INODE_FLAG_IOCTLS: &[u32] = &[0x4008_6602, 0x401c_5820, 0x4004_6602];
/// `TIOCSTI`, `TIOCSETD`, `TIOCLINUX`, `TIOCCONS` (the same numbers on x86_64 and
/// aarch64: asm-generic).
const TERMINAL_IOCTLS: &[u32] = &[0x5412, 0x5423, 0x541C, 0x541D];
/// Both lists, for a read-only command on a terminal.
const INODE_FLAG_AND_TERMINAL_IOCTLS: &[u32] = &[
    0x4008_6602,
    0x401c_5820,
    0x4004_6602,
    0x5412,
    0x5423,
    0x541C,
    0x541D,
];
/// `clone3` (Linux 5.3; the same number on x86_64 and aarch64).
const SYS_CLONE3: u32 = 435;
/// `file_setattr` (Linux 6.17): inode flags by path.
const SYS_FILE_SETATTR: u32 = 469;

/// The filter for `denials` (see the [module docs](self)), or `None` on an architecture it
/// is not written for.
pub fn program(denials: Denials) -> Option<Vec<Instruction>> {
    let arch = AUDIT_ARCH?;
    let mut p = Program::default();
    p.load(OFF_ARCH);
    p.jump_unless(arch, Label::Deny);
    p.load(OFF_NR);
    if cfg!(target_arch = "x86_64") {
        p.jump_if_at_least(X32_SYSCALL_BIT, Label::Deny);
    }
    let mut denied: Vec<u32> = Vec::new();
    let mut checks: Vec<(u32, ArgCheck)> = Vec::new();
    if denials.network {
        p.jump_if(nr(libc::SYS_socket), Label::CheckFamily);
        p.jump_if(nr(libc::SYS_socketpair), Label::CheckFamily);
        denied.extend(NETWORK);
        denied.extend(IO_URING);
    }
    if denials.metadata {
        denied.extend(METADATA);
        denied.extend(METADATA_PATH_ONLY);
        denied.extend(IO_URING);
        denied.push(SYS_FILE_SETATTR);
    }
    // One check per syscall (the first jump to a check wins): the ioctl lists combined.
    let ioctls = match (denials.metadata, denials.terminal_ioctls) {
        (true, true) => Some(INODE_FLAG_AND_TERMINAL_IOCTLS),
        (true, false) => Some(INODE_FLAG_IOCTLS),
        (false, true) => Some(TERMINAL_IOCTLS),
        (false, false) => None,
    };
    if let Some(values) = ioctls {
        checks.push((nr(libc::SYS_ioctl), ArgCheck::NotOneOf { arg: 1, values }));
    }
    if denials.keyrings {
        denied.extend(KEYRINGS);
    }
    if denials.host_ipc {
        denied.extend(HOST_IPC);
    }
    if denials.set_id_and_leases {
        checks.extend(SET_ID_MODES.iter().map(|&(n, arg)| {
            (
                n,
                ArgCheck::NoBits {
                    arg,
                    mask: SET_ID_BITS,
                },
            )
        }));
        checks.push((
            nr(libc::SYS_fcntl),
            ArgCheck::NotOneOf {
                arg: 1,
                values: &[F_SETLEASE],
            },
        ));
    }
    if denials.cgroup_moves {
        p.jump_if(SYS_CLONE3, Label::NoSys);
    }
    denied.sort_unstable();
    denied.dedup();
    for n in denied {
        p.jump_if(n, Label::Deny);
    }
    // A syscall both denied outright and checked is denied: its jump above comes first.
    for (i, (n, _)) in checks.iter().enumerate() {
        p.jump_if(*n, Label::Check(i));
    }
    p.ret(SECCOMP_RET_ALLOW);

    for (i, (_, check)) in checks.iter().enumerate() {
        p.mark(Label::Check(i));
        match *check {
            ArgCheck::NoBits { arg, mask } => {
                p.load(OFF_ARG0_LO + 8 * arg);
                p.and(mask);
                p.jump_if(0, Label::Allow);
                p.ret(SECCOMP_RET_ERRNO | libc::EPERM as u32);
            }
            ArgCheck::NotOneOf { arg, values } => {
                p.load(OFF_ARG0_LO + 8 * arg);
                for v in values {
                    p.jump_if(*v, Label::Deny);
                }
                p.ret(SECCOMP_RET_ALLOW);
            }
        }
    }

    if denials.network {
        p.mark(Label::CheckFamily);
        p.load(OFF_ARG0_LO);
        p.jump_unless(libc::AF_UNIX as u32, Label::Deny);
        p.load(OFF_ARG1_LO);
        // The low bits are the type; SOCK_CLOEXEC / SOCK_NONBLOCK sit above them.
        p.and(0xf);
        p.jump_if(libc::SOCK_STREAM as u32, Label::Allow);
        p.jump_if(libc::SOCK_SEQPACKET as u32, Label::Allow);
    }

    p.mark(Label::Deny);
    p.ret(SECCOMP_RET_ERRNO | libc::EPERM as u32);
    if denials.cgroup_moves {
        p.mark(Label::NoSys);
        p.ret(SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
    }
    p.mark(Label::Allow);
    p.ret(SECCOMP_RET_ALLOW);
    Some(p.finish())
}

/// Denied outright under [`Denials::network`], with [`IO_URING`] (sockets are checked by
/// family and type).
const NETWORK: [u32; 1] = [nr(libc::SYS_connect)];

/// io_uring, denied under [`Denials::network`] and [`Denials::metadata`].
const IO_URING: [u32; 3] = [
    nr(libc::SYS_io_uring_setup),
    nr(libc::SYS_io_uring_enter),
    nr(libc::SYS_io_uring_register),
];

/// The calls that set a mode, with the index of their mode argument, checked under
/// [`Denials::set_id_and_leases`]. (`open`, `creat` and `chmod` exist on x86_64 alone.)
#[cfg(target_arch = "x86_64")]
const SET_ID_MODES: [(u32, u32); 7] = [
    (nr(libc::SYS_chmod), 1),
    (nr(libc::SYS_fchmod), 1),
    (nr(libc::SYS_fchmodat), 2),
    (SYS_FCHMODAT2, 2),
    (nr(libc::SYS_open), 2),
    (nr(libc::SYS_openat), 3),
    (nr(libc::SYS_creat), 1),
];
#[cfg(not(target_arch = "x86_64"))]
const SET_ID_MODES: [(u32, u32); 4] = [
    (nr(libc::SYS_fchmod), 1),
    (nr(libc::SYS_fchmodat), 2),
    (SYS_FCHMODAT2, 2),
    (nr(libc::SYS_openat), 3),
];

/// `fchmodat2` (Linux 6.6), `setxattrat` and `removexattrat` (Linux 6.13): the same number
/// on every architecture, and newer than some libc crate releases.
const SYS_FCHMODAT2: u32 = 452;
const SYS_SETXATTRAT: u32 = 463;
const SYS_REMOVEXATTRAT: u32 = 466;

/// Under [`Denials::metadata`], with [`METADATA_PATH_ONLY`] on x86_64.
const METADATA: [u32; 14] = [
    nr(libc::SYS_fchmod),
    nr(libc::SYS_fchmodat),
    SYS_FCHMODAT2,
    nr(libc::SYS_fchown),
    nr(libc::SYS_fchownat),
    nr(libc::SYS_utimensat),
    nr(libc::SYS_setxattr),
    nr(libc::SYS_lsetxattr),
    nr(libc::SYS_fsetxattr),
    nr(libc::SYS_removexattr),
    nr(libc::SYS_lremovexattr),
    nr(libc::SYS_fremovexattr),
    SYS_SETXATTRAT,
    SYS_REMOVEXATTRAT,
];

/// The older path-only variants, which exist on x86_64 alone.
#[cfg(target_arch = "x86_64")]
const METADATA_PATH_ONLY: [u32; 6] = [
    nr(libc::SYS_chmod),
    nr(libc::SYS_chown),
    nr(libc::SYS_lchown),
    nr(libc::SYS_utime),
    nr(libc::SYS_utimes),
    nr(libc::SYS_futimesat),
];
#[cfg(not(target_arch = "x86_64"))]
const METADATA_PATH_ONLY: [u32; 0] = [];

/// Under [`Denials::keyrings`].
const KEYRINGS: [u32; 3] = [
    nr(libc::SYS_add_key),
    nr(libc::SYS_request_key),
    nr(libc::SYS_keyctl),
];

/// Under [`Denials::host_ipc`].
const HOST_IPC: [u32; 17] = [
    nr(libc::SYS_shmget),
    nr(libc::SYS_shmat),
    nr(libc::SYS_shmctl),
    nr(libc::SYS_shmdt),
    nr(libc::SYS_semget),
    nr(libc::SYS_semop),
    nr(libc::SYS_semtimedop),
    nr(libc::SYS_semctl),
    nr(libc::SYS_msgget),
    nr(libc::SYS_msgsnd),
    nr(libc::SYS_msgrcv),
    nr(libc::SYS_msgctl),
    nr(libc::SYS_mq_open),
    nr(libc::SYS_mq_unlink),
    nr(libc::SYS_mq_timedsend),
    nr(libc::SYS_mq_timedreceive),
    nr(libc::SYS_mq_notify),
];

/// The program as the bytes bubblewrap reads from `--seccomp FD`.
pub fn to_bytes(program: &[Instruction]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for i in program {
        out.extend_from_slice(&i.code.to_ne_bytes());
        out.push(i.jt);
        out.push(i.jf);
        out.extend_from_slice(&i.k.to_ne_bytes());
    }
    out
}

/// A syscall number as the filter compares it (every number in use fits in 31 bits).
const fn nr(n: libc::c_long) -> u32 {
    n as u32
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Label {
    CheckFamily,
    Check(usize),
    Deny,
    NoSys,
    Allow,
}

#[derive(Default)]
struct Program {
    insns: Vec<Instruction>,
    /// (instruction index, label, true branch?) to patch once labels are placed.
    fixups: Vec<(usize, Label, bool)>,
    labels: Vec<(Label, usize)>,
}

impl Program {
    fn push(&mut self, code: u16, k: u32) {
        self.insns.push(Instruction {
            code,
            jt: 0,
            jf: 0,
            k,
        });
    }
    fn load(&mut self, offset: u32) {
        self.push(BPF_LD_W_ABS, offset);
    }
    fn and(&mut self, mask: u32) {
        self.push(BPF_AND_K, mask);
    }
    fn ret(&mut self, value: u32) {
        self.push(BPF_RET_K, value);
    }
    /// Jump to `to` when A == k, else fall through.
    fn jump_if(&mut self, k: u32, to: Label) {
        self.fixups.push((self.insns.len(), to, true));
        self.push(BPF_JEQ_K, k);
    }
    /// Jump to `to` when A != k, else fall through.
    fn jump_unless(&mut self, k: u32, to: Label) {
        self.fixups.push((self.insns.len(), to, false));
        self.push(BPF_JEQ_K, k);
    }
    /// Jump to `to` when A >= k, else fall through.
    fn jump_if_at_least(&mut self, k: u32, to: Label) {
        self.fixups.push((self.insns.len(), to, true));
        self.push(BPF_JGE_K, k);
    }
    fn mark(&mut self, label: Label) {
        self.labels.push((label, self.insns.len()));
    }
    fn finish(mut self) -> Vec<Instruction> {
        for (at, label, on_true) in std::mem::take(&mut self.fixups) {
            let target = self
                .labels
                .iter()
                .find(|(l, _)| *l == label)
                .map(|(_, i)| *i)
                .expect("every label used is placed");
            // Jumps are relative to the next instruction and only go forward.
            let offset = u8::try_from(target - at - 1).expect("the program is short");
            if on_true {
                self.insns[at].jt = offset;
            } else {
                self.insns[at].jf = offset;
            }
        }
        self.insns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny interpreter for the instructions this module emits.
    fn run(program: &[Instruction], nr: u32, arch: u32, arg0: u32, arg1: u32) -> u32 {
        run_args(program, nr, arch, [arg0, arg1, 0, 0])
    }

    /// Runs `program` on a syscall with the low 32 bits of its first four arguments.
    fn run_args(program: &[Instruction], nr: u32, arch: u32, args: [u32; 4]) -> u32 {
        let mut pc = 0;
        let mut a: u32 = 0;
        loop {
            let i = program[pc];
            match i.code {
                BPF_LD_W_ABS => {
                    a = match i.k {
                        OFF_NR => nr,
                        OFF_ARCH => arch,
                        OFF_ARG0_LO => args[0],
                        OFF_ARG1_LO => args[1],
                        k if k == OFF_ARG0_LO + 16 => args[2],
                        k if k == OFF_ARG0_LO + 24 => args[3],
                        other => panic!("unexpected load at {other}"),
                    }
                }
                BPF_AND_K => a &= i.k,
                BPF_JEQ_K | BPF_JGE_K => {
                    let hit = if i.code == BPF_JEQ_K {
                        a == i.k
                    } else {
                        a >= i.k
                    };
                    pc += usize::from(if hit { i.jt } else { i.jf });
                }
                BPF_RET_K => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
            pc += 1;
        }
    }

    const NETWORK_ONLY: Denials = Denials {
        network: true,
        metadata: false,
        keyrings: false,
        host_ipc: false,
        set_id_and_leases: false,
        terminal_ioctls: false,
        cgroup_moves: false,
    };

    #[test]
    fn the_filter_allows_unix_streams_and_denies_the_rest() {
        let Some(p) = program(NETWORK_ONLY) else {
            return;
        };
        let arch = AUDIT_ARCH.expect("supported");
        let deny = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let socket = nr(libc::SYS_socket);
        let unix = libc::AF_UNIX as u32;
        let stream = libc::SOCK_STREAM as u32 | libc::SOCK_CLOEXEC as u32;
        assert_eq!(run(&p, socket, arch, unix, stream), SECCOMP_RET_ALLOW);
        assert_eq!(
            run(
                &p,
                nr(libc::SYS_socketpair),
                arch,
                unix,
                libc::SOCK_SEQPACKET as u32
            ),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(run(&p, socket, arch, unix, libc::SOCK_DGRAM as u32), deny);
        assert_eq!(run(&p, socket, arch, libc::AF_INET as u32, stream), deny);
        assert_eq!(run(&p, socket, arch, libc::AF_INET6 as u32, stream), deny);
        assert_eq!(run(&p, socket, arch, libc::AF_NETLINK as u32, 3), deny);
        assert_eq!(run(&p, nr(libc::SYS_connect), arch, 3, 0), deny);
        assert_eq!(run(&p, nr(libc::SYS_io_uring_setup), arch, 0, 0), deny);
        assert_eq!(run(&p, nr(libc::SYS_read), arch, 0, 0), SECCOMP_RET_ALLOW);
        assert_eq!(
            run(&p, nr(libc::SYS_sendmsg), arch, 0, 0),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(run(&p, nr(libc::SYS_read), 0x4000_0003, 0, 0), deny);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                run(&p, nr(libc::SYS_read) | X32_SYSCALL_BIT, arch, 0, 0),
                deny
            );
        }
    }

    #[test]
    fn each_denial_covers_its_syscalls_and_only_those() {
        let Some(all) = program(Denials {
            network: true,
            metadata: true,
            keyrings: true,
            host_ipc: true,
            set_id_and_leases: true,
            terminal_ioctls: true,
            cgroup_moves: true,
        }) else {
            return;
        };
        let Some(none) = program(Denials::default()) else {
            return;
        };
        let arch = AUDIT_ARCH.expect("supported");
        let deny = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        for n in METADATA
            .iter()
            .chain(&METADATA_PATH_ONLY)
            .chain(&KEYRINGS)
            .chain(&HOST_IPC)
        {
            assert_eq!(run(&all, *n, arch, 0, 0), deny, "syscall {n}");
            assert_eq!(run(&none, *n, arch, 0, 0), SECCOMP_RET_ALLOW, "syscall {n}");
            assert_eq!(
                run(&program(NETWORK_ONLY).expect("supported"), *n, arch, 0, 0),
                SECCOMP_RET_ALLOW,
                "syscall {n}"
            );
        }
        for n in [
            libc::SYS_read,
            libc::SYS_openat,
            libc::SYS_write,
            libc::SYS_fstat,
        ] {
            assert_eq!(run(&all, nr(n), arch, 0, 0), SECCOMP_RET_ALLOW);
        }
        // Without the network denial, sockets of every kind are left alone.
        let inet = libc::AF_INET as u32;
        assert_eq!(
            run(&none, nr(libc::SYS_socket), arch, inet, 1),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run(&none, nr(libc::SYS_connect), arch, 3, 0),
            SECCOMP_RET_ALLOW
        );
        // Another ABI is denied whatever was asked.
        assert_eq!(run(&none, nr(libc::SYS_read), 0x4000_0003, 0, 0), deny);
        // clone3 gets ENOSYS (libc then uses clone), and only when asked; clone stays.
        assert_eq!(
            run(&all, SYS_CLONE3, arch, 0, 0),
            SECCOMP_RET_ERRNO | libc::ENOSYS as u32
        );
        assert_eq!(run(&none, SYS_CLONE3, arch, 0, 0), SECCOMP_RET_ALLOW);
        assert_eq!(
            run(&all, nr(libc::SYS_clone), arch, 0, 0),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(SYS_CLONE3, nr(libc::SYS_clone3));
    }

    #[test]
    fn terminal_ioctls_are_denied_with_and_without_the_inode_flag_ones() {
        let arch = AUDIT_ARCH.expect("supported");
        let deny = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let ioctl = nr(libc::SYS_ioctl);
        for metadata in [false, true] {
            let Some(p) = program(Denials {
                metadata,
                terminal_ioctls: true,
                ..Denials::default()
            }) else {
                return;
            };
            for req in [
                libc::TIOCSTI,
                libc::TIOCSETD,
                libc::TIOCLINUX,
                libc::TIOCCONS,
            ] {
                assert_eq!(
                    run_args(&p, ioctl, arch, [0, req as u32, 0, 0]),
                    deny,
                    "{req:#x}"
                );
            }
            // Job control and sizes stay allowed.
            for req in [libc::TIOCSPGRP, libc::TIOCGWINSZ, libc::TCGETS] {
                assert_eq!(
                    run_args(&p, ioctl, arch, [0, req as u32, 0, 0]),
                    SECCOMP_RET_ALLOW,
                    "{req:#x}"
                );
            }
            assert_eq!(
                run_args(&p, ioctl, arch, [3, 0x4008_6602, 0, 0]),
                if metadata { deny } else { SECCOMP_RET_ALLOW }
            );
        }
    }

    #[test]
    fn set_id_modes_leases_and_inode_flags_are_checked_by_argument() {
        let Some(p) = program(Denials {
            metadata: true,
            set_id_and_leases: true,
            ..Denials::default()
        }) else {
            return;
        };
        let arch = AUDIT_ARCH.expect("supported");
        let deny = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        let openat = nr(libc::SYS_openat);
        let creat_flags = (libc::O_CREAT | libc::O_WRONLY) as u32;
        assert_eq!(
            run_args(&p, openat, arch, [0, 0, creat_flags, 0o644]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run_args(&p, openat, arch, [0, 0, creat_flags, 0o4755]),
            deny
        );
        assert_eq!(
            run_args(&p, openat, arch, [0, 0, creat_flags, 0o2755]),
            deny
        );
        let fchmod = nr(libc::SYS_fchmod);
        // Under `metadata` every chmod is denied; with set-ID alone only those bits.
        assert_eq!(run_args(&p, fchmod, arch, [3, 0o755, 0, 0]), deny);
        let only_set_id = program(Denials {
            set_id_and_leases: true,
            ..Denials::default()
        })
        .expect("supported");
        assert_eq!(
            run_args(&only_set_id, fchmod, arch, [3, 0o755, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run_args(&only_set_id, fchmod, arch, [3, 0o4755, 0, 0]),
            deny
        );
        let fchmodat = nr(libc::SYS_fchmodat);
        assert_eq!(
            run_args(&only_set_id, fchmodat, arch, [0, 0, 0o6755, 0]),
            deny
        );
        assert_eq!(
            run_args(&only_set_id, fchmodat, arch, [0, 0, 0o755, 0]),
            SECCOMP_RET_ALLOW
        );
        let fcntl = nr(libc::SYS_fcntl);
        assert_eq!(
            run_args(&only_set_id, fcntl, arch, [3, F_SETLEASE, 1, 0]),
            deny
        );
        assert_eq!(
            run_args(&only_set_id, fcntl, arch, [3, libc::F_GETFL as u32, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        let ioctl = nr(libc::SYS_ioctl);
        assert_eq!(run_args(&p, ioctl, arch, [3, 0x4008_6602, 0, 0]), deny);
        assert_eq!(
            run_args(&p, ioctl, arch, [3, libc::TCGETS as u32, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run_args(&only_set_id, ioctl, arch, [3, 0x4008_6602, 0, 0]),
            SECCOMP_RET_ALLOW
        );
        assert_eq!(
            run_args(&p, nr(libc::SYS_io_uring_setup), arch, [0; 4]),
            deny
        );
    }

    #[test]
    fn bytes_are_eight_per_instruction() {
        let Some(p) = program(NETWORK_ONLY) else {
            return;
        };
        assert_eq!(to_bytes(&p).len(), p.len() * 8);
    }
}
