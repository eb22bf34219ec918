//! One cgroup v2 per command, when this process may create them.
//!
//! # Mechanism
//! At construction [`CgroupRoot::probe`] finds this process's own cgroup v2 directory
//! (`/proc/self/cgroup` line `0::PATH` under the `cgroup2` mount: `/sys/fs/cgroup` or
//! `/sys/fs/cgroup/unified` when one of them is, else the one `/proc/self/mountinfo`
//! names) and tries to create a private subtree `dsh-<pid>-<random>` in
//! it. Each spawn then creates `cmd-<n>` in that subtree; the command's leader is born in it
//! (`clone3` with `CLONE_INTO_CGROUP`), or, where `clone3` is unavailable, moves itself
//! into it (writes `0` to its `cgroup.procs`) before `execve`, so the leader and
//! every descendant it ever has, `setsid` daemons included, are members. Killing writes
//! `1` to `cgroup.kill` (Linux 5.14+): the kernel kills every member at once, so even a
//! fork bomb cannot outrun it. Where the subtree has the `pids` controller, each command
//! cgroup's `pids.max` is the provider's process limit.
//!
//! # Limits
//! Needs write access to this process's own cgroup (root, or a systemd-delegated
//! subtree). Otherwise the probe fails and the per-command subreaper alone provides the
//! guarantees (it is there in both cases: it reports the leader's status and kills the
//! tree when dsh dies).

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{Mode, OFlags};

/// A private cgroup subtree for one [`LocalSubprocess`](crate::LocalSubprocess).
#[derive(Debug)]
pub(crate) struct CgroupRoot {
    dir: PathBuf,
    next: AtomicU64,
    /// Whether command cgroups have the `pids` controller (`pids.max`).
    pub(crate) pids: bool,
}

/// The files of one command's cgroup, opened before the fork. It keeps the subtree alive,
/// so the subtree is removed only after its last command cgroup.
pub(crate) struct CommandCgroup {
    _root: std::sync::Arc<CgroupRoot>,
    pub dir: PathBuf,
    /// The cgroup directory itself, which the leader is born in (`CLONE_INTO_CGROUP`).
    pub dir_fd: OwnedFd,
    /// `cgroup.procs`, written by the leader to join when it cannot be born in it.
    pub procs: OwnedFd,
    /// `cgroup.kill`, written by the reaper to kill every member.
    pub kill: OwnedFd,
    /// Whether its `pids.max` holds the process limit.
    pub limited: bool,
}

impl CgroupRoot {
    /// Creates a private subtree in this process's own cgroup, or says why it cannot;
    /// where it has the `pids` controller, its `pids.max` is `total` (all commands
    /// together).
    pub(crate) fn probe(total: Option<u32>) -> Result<CgroupRoot, String> {
        let own = own_cgroup_dir()?;
        if !own.join("cgroup.procs").exists() {
            return Err(format!("{} is not a cgroup v2 directory", own.display()));
        }
        let dir = make_subtree(&own)?;
        let mut root = CgroupRoot {
            dir,
            next: AtomicU64::new(0),
            pids: false,
        };
        if !root.dir.join("cgroup.kill").exists() {
            return Err("cgroup.kill is missing (Linux 5.14 or newer is needed)".into());
        }
        // The subtree holds no process, so it may hand the controller on to its children.
        root.pids = has_controller(&root.dir, "pids")
            && std::fs::write(root.dir.join("cgroup.subtree_control"), "+pids").is_ok()
            && total
                .is_none_or(|t| std::fs::write(root.dir.join("pids.max"), t.to_string()).is_ok());
        Ok(root)
    }

    /// Why command cgroups have no `pids.max` (None when they have it).
    pub(crate) fn pids_missing(&self) -> Option<String> {
        (!self.pids).then(|| {
            format!(
                "the cgroup v2 subtree {} has no pids controller",
                self.dir.display()
            )
        })
    }

    /// Creates the cgroup of one command, with `pids.max` set to `limit` where the
    /// subtree has the `pids` controller, and opens its control files.
    pub(crate) fn command(
        self: &std::sync::Arc<Self>,
        limit: Option<u32>,
    ) -> io::Result<CommandCgroup> {
        let dir = make_command_dir(&self.dir, &self.next, limit.filter(|_| self.pids))?;
        let open = |name: &str| -> io::Result<OwnedFd> {
            Ok(rustix::fs::open(
                dir.join(name),
                OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )?)
        };
        let dir_fd = rustix::fs::open(
            &dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io::Error::from);
        match (dir_fd, open("cgroup.procs"), open("cgroup.kill")) {
            (Ok(dir_fd), Ok(procs), Ok(kill)) => Ok(CommandCgroup {
                _root: self.clone(),
                dir,
                dir_fd,
                procs,
                kill,
                limited: self.pids && limit.is_some(),
            }),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e)
            }
        }
    }
}

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        remove_subtree(&self.dir);
    }
}

/// Creates this process's private subtree `dsh-<pid>-<random>` in `own` (a cgroup
/// directory), first removing the empty subtrees of dsh processes that are gone.
pub(crate) fn make_subtree(own: &Path) -> Result<PathBuf, String> {
    remove_stale(own);
    let dir = own.join(format!(
        "dsh-{}-{}",
        std::process::id(),
        dsh_core::spill::random_hex(8)
    ));
    rustix::fs::mkdir(&dir, Mode::RWXU)
        .map_err(|e| format!("cannot create a cgroup in {}: {e}", own.display()))?;
    Ok(dir)
}

/// Creates `cmd-<n>` (the next `n`) in a private subtree, with `pids.max` set to `limit`
/// if given; the directory is removed again if the limit cannot be set.
pub(crate) fn make_command_dir(
    subtree: &Path,
    next: &AtomicU64,
    limit: Option<u32>,
) -> io::Result<PathBuf> {
    let n = next.fetch_add(1, Ordering::Relaxed);
    let dir = subtree.join(format!("cmd-{n}"));
    rustix::fs::mkdir(&dir, Mode::RWXU)?;
    if let Some(limit) = limit {
        if let Err(e) = std::fs::write(dir.join("pids.max"), limit.to_string()) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
    }
    Ok(dir)
}

/// Removes a private subtree and its command cgroups. Command cgroups are removed as
/// their trees end; one still populated (its tree is being killed) keeps the subtree,
/// which the kernel then reports as busy.
pub(crate) fn remove_subtree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Removes a command cgroup once its tree is gone, waiting (at most a second) for members
/// the kernel is still tearing down; a cgroup still busy then is left for its subtree's
/// drop or the next probe.
pub(crate) async fn remove_when_empty(dir: &Path) {
    for _ in 0..200 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            Err(_) => return,
        }
    }
}

/// Whether `controller` is among those `dir`'s children may enable.
fn has_controller(dir: &Path, controller: &str) -> bool {
    std::fs::read_to_string(dir.join("cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|name| name == controller))
}

impl CommandCgroup {
    /// Removes the cgroup once its tree is gone (see [`remove_when_empty`]).
    pub(crate) async fn remove(self) {
        let CommandCgroup {
            _root,
            dir,
            dir_fd,
            procs,
            kill,
            limited: _,
        } = self;
        drop((dir_fd, procs, kill));
        remove_when_empty(&dir).await;
    }
}

/// Removes the empty subtrees of dsh processes that no longer exist (killed before they
/// could clean up). `rmdir` refuses a populated cgroup, so nothing in use is touched.
fn remove_stale(own: &Path) {
    let Ok(entries) = std::fs::read_dir(own) else {
        return;
    };
    for e in entries.flatten() {
        if !dsh_core::spill::is_stale_name(&e.file_name(), "dsh-") {
            continue;
        }
        remove_subtree(&e.path());
    }
}

/// This process's cgroup v2 directory.
fn own_cgroup_dir() -> Result<PathBuf, String> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
    let rel = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("this process is in no cgroup v2 hierarchy")?;
    let mount = cgroup2_mount()?;
    Ok(mount.join(rel.trim_start_matches('/')))
}

/// The mount point of the cgroup2 filesystem: one of the two usual places when it is
/// there (one `statfs`), else found in `/proc/self/mountinfo`.
fn cgroup2_mount() -> Result<PathBuf, String> {
    const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;
    for usual in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        if rustix::fs::statfs(usual).is_ok_and(|fs| fs.f_type as u64 == CGROUP2_SUPER_MAGIC) {
            return Ok(PathBuf::from(usual));
        }
    }
    find_mount(|fstype, _| fstype == "cgroup2")?
        .map(|(_, mountpoint)| mountpoint)
        .ok_or_else(|| "no cgroup2 filesystem is mounted".into())
}

/// The first mount in `/proc/self/mountinfo` whose filesystem type and super options
/// `matches` accepts: the root of the filesystem it shows, and where; None if there is
/// none.
pub(crate) fn find_mount(
    matches: impl Fn(&str, &str) -> bool,
) -> Result<Option<(String, PathBuf)>, String> {
    let mut text = String::new();
    io::Read::read_to_string(
        &mut File::open("/proc/self/mountinfo")
            .map_err(|e| format!("/proc/self/mountinfo: {e}"))?,
        &mut text,
    )
    .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
    for line in text.lines() {
        // Fields: id parent major:minor root mountpoint options [optional...] - fstype
        // source super-options
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut right = right.split_whitespace();
        let (Some(fstype), Some(_), Some(options)) = (right.next(), right.next(), right.next())
        else {
            continue;
        };
        if matches(fstype, options) {
            let mut left = left.split_whitespace().skip(3);
            if let (Some(root), Some(mountpoint)) = (left.next(), left.next()) {
                return Ok(Some((
                    unescape_mount(root),
                    Path::new(&unescape_mount(mountpoint)).to_path_buf(),
                )));
            }
        }
    }
    Ok(None)
}

/// mountinfo escapes space, tab, newline and backslash as octal `\NNN`.
pub(crate) fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = u32::from(b[i + 1] - b'0') * 64
                + u32::from(b[i + 2] - b'0') * 8
                + u32::from(b[i + 3] - b'0');
            out.push(u8::try_from(v).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mount("/sys/fs/cgroup"), "/sys/fs/cgroup");
        assert_eq!(unescape_mount("/mnt/a\\040b"), "/mnt/a b");
    }
}
