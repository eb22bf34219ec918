//! The process limit through the cgroup v1 `pids` hierarchy, for hosts whose cgroup v2
//! has no `pids` controller (a hybrid layout: v2 mounted beside the v1 controllers).
//!
//! # Mechanism
//! [`PidsRoot::probe`] finds this process's cgroup in the v1 hierarchy that carries `pids`
//! (its `/proc/self/cgroup` line `N:…pids…:PATH`, under the mount whose super options
//! name `pids`) and creates a private subtree `dsh-<pid>-<random>` there. Each spawn
//! creates `cmd-<n>` with `pids.max` set, and the leader writes `0` to its `tasks`
//! before `execve` (v1 cgroups cannot be born into), so the leader and every descendant
//! count against the limit: a `fork` or `clone` past it fails with `EAGAIN`, threads
//! included.
//!
//! The leader is a single thread, so moving that thread (`tasks`) moves the whole
//! process, and the kernel (Linux 6.0, and stable kernels that took the change) moves
//! the calling thread alone without its global thread-group lock; elsewhere the write
//! takes the lock and still works. A write to `cgroup.procs` takes that lock, whose first use after an
//! idle moment waits an RCU grace period: about 14 ms on a 2-core VM against 0.04 ms.
//!
//! # Limits
//! Needs write access to that cgroup (in practice, root). It bounds; it does not kill:
//! the command's cgroup v2 or its subreaper still owns the tree.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

use crate::cgroup::{find_mount, make_command_dir, make_subtree, remove_subtree};

/// A private subtree of the v1 `pids` hierarchy for one
/// [`LocalSubprocess`](crate::LocalSubprocess).
#[derive(Debug)]
pub(crate) struct PidsRoot {
    dir: PathBuf,
    next: AtomicU64,
}

/// One command's v1 `pids` cgroup; it keeps the subtree alive.
pub(crate) struct PidsCgroup {
    _root: Arc<PidsRoot>,
    dir: PathBuf,
    /// `tasks`, which the leader writes to join before `execve`.
    pub tasks: OwnedFd,
}

impl PidsRoot {
    /// Creates a private subtree in this process's v1 `pids` cgroup, its `pids.max` set to
    /// `total` (all commands together), or says why it cannot.
    pub(crate) fn probe(total: Option<u32>) -> Result<PidsRoot, String> {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let own = cgroup
            .lines()
            .find_map(|l| {
                let mut fields = l.splitn(3, ':');
                let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
                controllers.split(',').any(|c| c == "pids").then_some(path)
            })
            .ok_or("this process is in no cgroup v1 pids hierarchy")?;
        let (root, mountpoint) = find_mount(|fstype, options| {
            fstype == "cgroup" && options.split(',').any(|o| o == "pids")
        })?
        .ok_or("the cgroup v1 pids hierarchy is not mounted")?;
        // The mount may show only part of the hierarchy (a container's own cgroup).
        let rel = Path::new(own).strip_prefix(&root).map_err(|_| {
            "this process's pids cgroup is outside the mounted part of the hierarchy"
        })?;
        let own = mountpoint.join(rel);
        let dir = make_subtree(&own)?;
        if let Some(total) = total {
            if let Err(e) = std::fs::write(dir.join("pids.max"), total.to_string()) {
                remove_subtree(&dir);
                return Err(format!(
                    "cannot limit the pids cgroup {}: {e}",
                    dir.display()
                ));
            }
        }
        Ok(PidsRoot {
            dir,
            next: AtomicU64::new(0),
        })
    }

    /// Creates one command's cgroup with `pids.max` = `limit` and opens its `tasks`.
    pub(crate) fn command(self: &Arc<Self>, limit: u32) -> io::Result<PidsCgroup> {
        let dir = make_command_dir(&self.dir, &self.next, Some(limit))?;
        match rustix::fs::open(
            dir.join("tasks"),
            OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(tasks) => Ok(PidsCgroup {
                _root: self.clone(),
                dir,
                tasks,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                Err(e.into())
            }
        }
    }
}

impl Drop for PidsRoot {
    fn drop(&mut self) {
        remove_subtree(&self.dir);
    }
}

impl PidsCgroup {
    /// Removes the cgroup once its tree is gone (see
    /// [`remove_when_empty`](crate::cgroup::remove_when_empty)).
    pub(crate) async fn remove(self) {
        let PidsCgroup { _root, dir, tasks } = self;
        drop(tasks);
        crate::cgroup::remove_when_empty(&dir).await;
    }
}
