//! What the command leader needs to `execve`, prepared before any fork.
//!
//! Between `fork` and `exec` nothing may allocate, so the program path, argv and
//! environment are turned into C strings and null-terminated pointer arrays here, in the
//! parent, together with the stack the leader runs on and the reaper's settings.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::AtomicI32;
use std::time::Duration;

/// Stack for the leader between `clone` and `execve` (it only makes a few syscalls).
const LEADER_STACK: usize = 64 * 1024;

/// Everything the reaper and the leader need after the fork. See the [module docs](self).
pub(crate) struct ExecPlan {
    pub(crate) program: CString,
    _argv: Vec<CString>,
    pub(crate) argv_ptrs: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    pub(crate) envp_ptrs: Vec<*const libc::c_char>,
    pub(crate) stack: Vec<u8>,
    /// The command cgroup's directory, which the leader is born in where `clone3` allows;
    /// -1 without a cgroup.
    pub(crate) cgroup_dir: RawFd,
    /// The command cgroup's `cgroup.procs`, which the leader joins when it could not be
    /// born in the cgroup; -1 without a cgroup.
    pub(crate) cgroup_procs: RawFd,
    /// Whether the leader must write `cgroup.procs` itself; set before the clone.
    pub(crate) leader_joins: bool,
    /// Whether a leader that joins by hand and fails must not run (the cgroup holds the
    /// process limit).
    pub(crate) join_required: bool,
    /// `tasks` of the command's cgroup v1 `pids` cgroup, which the leader (one thread) joins
    /// before `execve` (or fails); -1 without one.
    pub(crate) pids_tasks: RawFd,
    /// The status pipe's write end, where the leader reports its pid or its exec errno;
    /// set by the reaper before the clone.
    pub(crate) status_fd: RawFd,
    /// The reaper's pid, which the leader checks is its parent; set before the clone.
    pub(crate) reaper_pid: libc::pid_t,
    /// SIGTERM→SIGKILL grace, applied by the reaper itself.
    pub(crate) grace_ms: u64,
    /// Written by the leader (which shares the reaper's memory) when `execve` fails, or
    /// when the sandbox restrictions could not be applied.
    pub(crate) exec_errno: AtomicI32,
    /// Sandbox restrictions the leader applies before `execve`.
    pub(crate) restrictions: Option<std::sync::Arc<dsh_sandbox::ChildRestrictions>>,
    /// The fds the restrictions need, renumbered by the reaper (at most
    /// [`MAX_CARRIED_FDS`]).
    pub(crate) carried: Vec<RawFd>,
    /// Whether the leader's stdio is a terminal it must make its controlling terminal, as
    /// the leader of a new session.
    pub(crate) terminal: bool,
}

/// The most fds a command's sandbox restrictions may carry into the child.
pub(crate) const MAX_CARRIED_FDS: usize = 8;

// SAFETY: the raw pointers point into the CStrings this struct owns, whose heap buffers
// never move or change; they are only read (by the forked reaper and its leader).
unsafe impl Send for ExecPlan {}
// SAFETY: as above; after construction only `exec_errno` (an atomic) and `stack` (used
// only in the forked child) are written.
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
        grace: Duration,
    ) -> io::Result<ExecPlan> {
        let program = c_string(program.as_bytes(), || {
            "the program path contains a NUL byte".into()
        })?;
        let argv: Vec<CString> = argv
            .iter()
            .enumerate()
            .map(|(i, a)| c_string(a.as_bytes(), || format!("argv[{i}] contains a NUL byte")))
            .collect::<io::Result<_>>()?;
        let envp: Vec<CString> = env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                c_string(&kv, || {
                    format!(
                        "environment variable {} contains a NUL byte",
                        k.to_string_lossy()
                    )
                })
            })
            .collect::<io::Result<_>>()?;
        let argv_ptrs = null_terminated(&argv);
        let envp_ptrs = null_terminated(&envp);
        Ok(ExecPlan {
            program,
            _argv: argv,
            argv_ptrs,
            _envp: envp,
            envp_ptrs,
            stack: vec![0u8; LEADER_STACK],
            cgroup_dir: -1,
            cgroup_procs: -1,
            leader_joins: false,
            join_required: false,
            pids_tasks: -1,
            status_fd: -1,
            reaper_pid: 0,
            grace_ms: u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            exec_errno: AtomicI32::new(0),
            restrictions: None,
            carried: Vec::new(),
            terminal: false,
        })
    }
}

fn c_string(bytes: &[u8], what: impl FnOnce() -> String) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, what()))
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_arrays_are_null_terminated_and_point_at_the_strings() {
        let env = vec![(OsString::from("A"), OsString::from("1"))];
        let plan = ExecPlan::new(
            OsStr::new("/bin/echo"),
            &[OsString::from("echo"), OsString::from("hi")],
            &env,
            Duration::from_millis(3000),
        )
        .expect("plan");
        assert_eq!(plan.argv_ptrs.len(), 3);
        assert!(plan.argv_ptrs[2].is_null());
        // SAFETY: the pointers point into CStrings the plan owns.
        let first = unsafe { std::ffi::CStr::from_ptr(plan.argv_ptrs[1]) };
        assert_eq!(first.to_bytes(), b"hi");
        let env0 = unsafe { std::ffi::CStr::from_ptr(plan.envp_ptrs[0]) };
        assert_eq!(env0.to_bytes(), b"A=1");
        assert_eq!(plan.grace_ms, 3000);
    }

    #[test]
    fn nul_bytes_are_refused_by_name() {
        let e = ExecPlan::new(
            OsStr::new("/bin/x"),
            &[OsString::from("a\0")],
            &[],
            Duration::from_secs(1),
        )
        .err()
        .map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("argv[0] contains a NUL byte"));
    }
}
