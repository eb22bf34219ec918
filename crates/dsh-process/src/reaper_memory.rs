//! The reaper gives back its copy of dsh's memory.
//!
//! A reaper is a fork of dsh: it starts with every page of dsh's, shared copy-on-write.
//! Each page dsh writes afterwards (heap churn, other threads' stacks) is copied for dsh,
//! which leaves the old page to the reaper alone: over a long command (an idle terminal)
//! the reaper comes to own a private copy of much of dsh's writable memory, about
//! 0.9 MiB per reaper in `dsh mcp`, for data it never reads.
//!
//! Once the leader runs, the reaper needs only its own stack, its thread's control block
//! (TLS, stack canary, rseq area) and the data of the loaded objects; it allocates
//! nothing. [`release`] reads `/proc/self/maps` and drops (`MADV_DONTNEED`) every other
//! private writable anonymous mapping: the heap, malloc arenas, other threads' stacks,
//! large allocations. A mapping that directly follows a file mapping (an object's
//! `.bss`) is kept, as are the pseudo-mappings (`[stack]`, `[vvar]`, …); of the reaper's
//! own stack, only the part well below the stack pointer (pages the thread used for
//! deeper calls before the fork) goes.
//!
//! A thread with a hardware shadow stack (x86 CET, arm64 GCS) releases nothing: its
//! shadow stack is an anonymous writable mapping too, and zeroing it would crash the
//! reaper at its next return.
//!
//! # Safety
//! After [`release`] the reaper must not touch the heap or any memory of other threads:
//! the memory reads as zeros. The reaper's loop uses only its stack and syscalls.

/// The most mappings released; more are left as they are.
const MAX_RANGES: usize = 512;
/// A multiple of every page size Linux uses (4, 16, 64 KiB), so addresses rounded to it
/// are page-aligned anywhere.
const ALIGN: usize = 64 * 1024;
/// The bytes of a maps line that are looked at: address range, permissions, offset,
/// device, inode (padded) and the first bytes of the path.
const LINE_PREFIX: usize = 160;

/// Drops every private writable anonymous mapping the reaper does not use (see the
/// [module docs](self)). Failures leave memory as it is.
///
/// # Safety
/// Only in the reaper, after the leader has exec'd, from the thread that will run the
/// reaper's loop; afterwards nothing may read the heap or other threads' memory.
pub(crate) unsafe fn release() {
    // SAFETY (whole function): open/read/close/madvise on our own memory, into stack
    // buffers; no allocation.
    unsafe {
        if shadow_stack() {
            return;
        }
        let fd = libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        let here = &fd as *const libc::c_int as usize;
        let tcb = libc::pthread_self() as usize;
        let keep =
            |start: usize, end: usize| (start..end).contains(&here) || (start..end).contains(&tcb);
        let mut ranges = [(0usize, 0usize); MAX_RANGES];
        let mut count = 0;
        let mut line = [0u8; LINE_PREFIX];
        let mut len = 0;
        let mut previous_end_of_file_mapping = 0usize;
        let mut buf = [0u8; 4096];
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            for &b in &buf[..n as usize] {
                if b != b'\n' {
                    if len < LINE_PREFIX {
                        line[len] = b;
                        len += 1;
                    }
                    continue;
                }
                if let Some(m) = parse(&line[..len]) {
                    let after_file = m.start == previous_end_of_file_mapping;
                    if m.kind == Kind::File {
                        previous_end_of_file_mapping = m.end;
                    }
                    let range = if m.writable_private && (m.start..m.end).contains(&here) {
                        // Our stack: what lies well below us, unless our control block
                        // does (it lies above the stack on the architectures dsh runs on).
                        let below = (here & !(ALIGN - 1)).saturating_sub(ALIGN);
                        (below > m.start && !(m.start..here).contains(&tcb))
                            .then_some((m.start, below))
                    } else {
                        (m.releasable() && !after_file && !keep(m.start, m.end))
                            .then_some((m.start, m.end))
                    };
                    if let Some(range) = range.filter(|_| count < MAX_RANGES) {
                        ranges[count] = range;
                        count += 1;
                    }
                }
                len = 0;
            }
        }
        libc::close(fd);
        for &(start, end) in &ranges[..count] {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// Whether this thread runs with a hardware shadow stack (unknown counts as no: the
/// query fails only on kernels without shadow stacks).
///
/// # Safety
/// As [`release`]: an async-signal-safe syscall into a stack value.
unsafe fn shadow_stack() -> bool {
    let mut status: libc::c_ulong = 0;
    // SAFETY: arch_prctl(ARCH_SHSTK_STATUS) / prctl(PR_GET_SHADOW_STACK_STATUS) write one
    // word to `status`.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        let r = libc::syscall(
            libc::SYS_arch_prctl,
            0x5005,
            &mut status as *mut libc::c_ulong,
        );
        #[cfg(target_arch = "aarch64")]
        let r = libc::prctl(74, &mut status as *mut libc::c_ulong, 0, 0, 0);
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        let r = -1;
        r == 0 && status & 1 != 0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// No path, `[heap]` or a named anonymous mapping (`[anon:…]`).
    Anonymous,
    /// A path: a mapped file.
    File,
    /// `[stack]`, `[vvar]`, `[vdso]` and the like.
    Special,
}

#[derive(Debug, PartialEq, Eq)]
struct Mapping {
    start: usize,
    end: usize,
    writable_private: bool,
    kind: Kind,
}

impl Mapping {
    fn releasable(&self) -> bool {
        self.writable_private && self.kind == Kind::Anonymous
    }
}

/// One line of `/proc/self/maps` (at most its first [`LINE_PREFIX`] bytes):
/// `start-end perms offset dev inode [path]`.
fn parse(line: &[u8]) -> Option<Mapping> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = hex(&range[..dash])?;
    let end = hex(&range[dash + 1..])?;
    let perms = fields.next()?;
    let (_offset, _dev, _inode) = (fields.next()?, fields.next()?, fields.next()?);
    let kind = match fields.next() {
        None => Kind::Anonymous,
        Some(path) if path.starts_with(b"/") => Kind::File,
        Some(path) if path.starts_with(b"[heap]") || path.starts_with(b"[anon:") => Kind::Anonymous,
        // `[stack]`, `[vvar]`, `[vdso]`, `[vsyscall]`, a deleted file's odd name: kept.
        Some(_) => Kind::Special,
    };
    Some(Mapping {
        start,
        end,
        writable_private: perms.len() == 4 && perms[1] == b'w' && perms[3] == b'p',
        kind,
    })
}

fn hex(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    digits.iter().try_fold(0usize, |acc, &d| {
        let v = (d as char).to_digit(16)?;
        Some(acc << 4 | v as usize)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_are_classified() {
        let heap = parse(
            b"55a4dca56000-55a4dca96000 rw-p 00000000 00:00 0                          [heap]",
        )
        .expect("a maps line");
        assert_eq!((heap.start, heap.end), (0x55a4dca56000, 0x55a4dca96000));
        assert!(heap.releasable());
        let anon = parse(b"7f7f10000000-7f7f1002e000 rw-p 00000000 00:00 0 ").expect("a maps line");
        assert!(anon.releasable());
        let data = parse(b"7f7f170b6000-7f7f170b8000 rw-p 001d3000 fe:00 326279   /usr/lib/x86_64-linux-gnu/libc.so.6").expect("a maps line");
        assert_eq!(data.kind, Kind::File);
        assert!(!data.releasable());
        let stack =
            parse(b"7ffc1000-7ffc2000 rw-p 00000000 00:00 0   [stack]").expect("a maps line");
        assert!(!stack.releasable());
        let guard = parse(b"7f7f16ae0000-7f7f16ae1000 ---p 00000000 00:00 0").expect("a maps line");
        assert!(!guard.releasable());
        let shared = parse(b"7f7f16ae0000-7f7f16ae1000 rw-s 00000000 00:05 12 /dev/zero")
            .expect("a maps line");
        assert!(!shared.releasable());
        assert_eq!(parse(b"garbage"), None);
        assert_eq!(parse(b""), None);
    }
}
