//! bubblewrap argv shapes.
//!
//! Every confined call:
//! `bwrap --ro-bind / / --dev /dev --remount-ro /dev --proc /proc --ro-bind /proc/sys
//! /proc/sys` and `--ro-bind-try P P` for each of [`PROC_READ_ONLY`], then
//! `--die-with-parent --new-session --unshare-pid --unshare-ipc --cap-drop ALL`, then
//! `--unshare-net` when the network is denied (the namespace cuts IP and abstract
//! sockets), and `--seccomp FD` (the filter cuts connecting to host Unix socket paths,
//! which a read-only bind does not, and the user's keyrings), then `--tmpfs D` for each
//! closed directory (every home: see [`deny_read`](crate::deny_read)) and `--ro-bind P P`
//! for each open path in one, and under workspace-write:
//! `--bind TMP TMP --bind TMP /tmp --bind ROOT ROOT ...` (the private temp directory, also
//! as `/tmp` unless a writable root lies under `/tmp`; the workspace; the extra roots), then
//! `--bind D D` for each directory between a writable root and a protected path (`.git`:
//! a mount point cannot be renamed or removed, so the read-only binds inside it cannot be
//! carried away), then one read-only bind per protected path,
//! after the writable binds so it wins: the path itself when it exists, else an empty
//! read-only placeholder over its first missing component, so it cannot be created (a
//! missing `commondir` gets one holding `.`, see the `protected` module).
//! Then `--remount-ro D` for each closed directory (its mount points are made by then),
//! and finally `-- ARGV`.
//!
//! `/dev` is bubblewrap's own minimal one, remounted read-only so that `/dev/shm` takes no
//! writes (device nodes such as `/dev/null` stay writable: a read-only mount does not
//! govern them). The fresh `/proc` keeps the kernel's settings read-only: without a user
//! namespace a command of a root dsh is still uid 0, and the sysctl files check only the
//! uid (`kernel.core_pattern` names a program the kernel runs as root on the host).
//! `--cap-drop ALL` matters when dsh runs as root. `--new-session` keeps a command from pushing keystrokes into the caller's terminal
//! (`TIOCSTI`); `--unshare-pid` hides and protects host processes; `--unshare-ipc` keeps
//! host shared memory and message queues out of reach; `--die-with-parent`
//! takes the sandbox down with its reaper.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::{Network, SandboxMode, SandboxPolicy};

/// The parts of the fresh `/proc`, besides `/proc/sys`, that a root command could write to
/// reach the host (`sysrq-trigger` reboots it), bound read-only where the kernel has them.
pub const PROC_READ_ONLY: [&str; 6] = [
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/proc/fs",
    "/proc/acpi",
    "/proc/scsi",
];

/// One read-only carve-out inside a writable root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Carve {
    /// Where it is mounted.
    pub at: PathBuf,
    /// What is mounted there read-only: the path itself, or an empty placeholder.
    pub source: PathBuf,
}

/// What the argv needs besides the policy.
#[derive(Clone, Debug, Default)]
pub struct Layout {
    /// The private temp directory (writable and mounted at `/tmp` under workspace-write).
    pub temp: Option<PathBuf>,
    /// The fd number the seccomp program will have in bwrap.
    pub seccomp_fd: Option<i32>,
    /// The protected carve-outs, in order.
    pub carves: Vec<Carve>,
    /// The homes, each covered by an empty tmpfs (read-only once the binds are in).
    pub homes: Vec<PathBuf>,
    /// The allowed paths in the homes, bound back read-only at their own names, outer ones
    /// first.
    pub home_binds: Vec<PathBuf>,
    /// The user's own home folders inside a closed one (`/home/me` in `/home`), made empty
    /// there: a write to one is refused as read-only, not as missing.
    pub home_dirs: Vec<PathBuf>,
}

/// Removes `--new-session` from a bwrap argv (before its `--`), for a command on a private
/// terminal (see [`Sandbox::confine_on_terminal`](crate::Sandbox::confine_on_terminal)).
pub fn keep_session(argv: &mut Vec<OsString>) {
    let end = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    if let Some(i) = argv[..end].iter().position(|a| a == "--new-session") {
        argv.remove(i);
    }
}

/// The bwrap argv for `argv` under `policy` (a confined mode).
pub fn argv(
    program: &Path,
    policy: &SandboxPolicy,
    layout: &Layout,
    argv: &[OsString],
) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec![program.into()];
    let mut push = |items: &[&str]| out.extend(items.iter().map(OsString::from));
    push(&[
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--remount-ro",
        "/dev",
        "--proc",
        "/proc",
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
    ]);
    for p in PROC_READ_ONLY {
        push(&["--ro-bind-try", p, p]);
    }
    push(&[
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--cap-drop",
        "ALL",
    ]);
    if policy.network == Network::Deny {
        push(&["--unshare-net"]);
    }
    if let Some(fd) = layout.seccomp_fd {
        out.push("--seccomp".into());
        out.push(fd.to_string().into());
    }
    for h in &layout.homes {
        out.push("--tmpfs".into());
        out.push(h.into());
    }
    for d in &layout.home_dirs {
        out.push("--dir".into());
        out.push(d.into());
    }
    for a in &layout.home_binds {
        out.push("--ro-bind".into());
        out.push(a.into());
        out.push(a.into());
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        let mut bind = |flag: &str, from: &Path, to: &Path| {
            out.push(flag.into());
            out.push(from.into());
            out.push(to.into());
        };
        let dirs = policy.writable_dirs();
        if let Some(temp) = &layout.temp {
            bind("--bind", temp, temp);
            // Not over a writable root under /tmp: that root's neighbours would then be
            // in the private temp dir, and the root itself a mount point inside it.
            if !dirs.iter().any(|d| d.starts_with("/tmp")) {
                bind("--bind", temp, Path::new("/tmp"));
            }
        }
        for dir in dirs {
            bind("--bind", &dir, &dir);
        }
        for carve in &layout.carves {
            bind("--ro-bind", &carve.source, &carve.at);
        }
    }
    // After every bind that needs a mount point made in a home's tmpfs.
    for h in &layout.homes {
        out.push("--remount-ro".into());
        out.push(h.into());
    }
    out.push("--".into());
    out.extend(argv.iter().cloned());
    out
}

/// The probe argv: every feature a call may use, on `true`.
pub fn probe_argv(program: &Path) -> Vec<OsString> {
    let policy = SandboxPolicy::bare(SandboxMode::ReadOnly, Path::new("/"));
    argv(program, &policy, &Layout::default(), &["true".into()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_session_drops_only_the_runner_flag() {
        let mut a: Vec<OsString> = [
            "bwrap",
            "--new-session",
            "--unshare-pid",
            "--",
            "x",
            "--new-session",
        ]
        .map(OsString::from)
        .to_vec();
        keep_session(&mut a);
        assert_eq!(
            a,
            ["bwrap", "--unshare-pid", "--", "x", "--new-session"].map(OsString::from)
        );
    }

    /// The start every argv shares: the root, `/dev`, and `/proc` with its read-only parts.
    const PROC: &str = "bwrap --ro-bind / / --dev /dev --remount-ro /dev --proc /proc \
        --ro-bind /proc/sys /proc/sys --ro-bind-try /proc/sysrq-trigger /proc/sysrq-trigger \
        --ro-bind-try /proc/irq /proc/irq --ro-bind-try /proc/bus /proc/bus \
        --ro-bind-try /proc/fs /proc/fs --ro-bind-try /proc/acpi /proc/acpi \
        --ro-bind-try /proc/scsi /proc/scsi";

    fn strs(v: &[OsString]) -> Vec<String> {
        v.iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    fn policy(mode: SandboxMode, network: Network) -> SandboxPolicy {
        SandboxPolicy::bare(mode, Path::new("/ws")).with_network(network)
    }

    #[test]
    fn read_only_is_the_reference_shape_plus_namespaces() {
        let a = argv(
            Path::new("bwrap"),
            &policy(SandboxMode::ReadOnly, Network::Allow),
            &Layout::default(),
            &["true".into()],
        );
        assert_eq!(
            strs(&a).join(" "),
            format!("{PROC} --die-with-parent --new-session --unshare-pid --unshare-ipc --cap-drop ALL -- true")
        );
    }

    #[test]
    fn workspace_write_binds_temp_root_then_carves() {
        let layout = Layout {
            temp: Some("/t".into()),
            seccomp_fd: Some(3),
            carves: vec![Carve {
                at: "/ws/.git/hooks".into(),
                source: "/ws/.git/hooks".into(),
            }],
            ..Layout::default()
        };
        let a = argv(
            Path::new("bwrap"),
            &policy(SandboxMode::WorkspaceWrite, Network::Deny),
            &layout,
            &["bash".into(), "-c".into(), "x".into()],
        );
        assert_eq!(
            strs(&a).join(" "),
            format!(
                "{PROC} --die-with-parent --new-session --unshare-pid --unshare-ipc --cap-drop ALL \
                 --unshare-net --seccomp 3 --bind /t /t --bind /t /tmp --bind /ws /ws \
                 --ro-bind /ws/.git/hooks /ws/.git/hooks -- bash -c x"
            )
        );
    }
}
