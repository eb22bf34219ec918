//! `dsh exec` as a subreaper of last resort.
//!
//! Each command already has its own reaper (see `dsh-process`). If the command kills that
//! reaper, its remaining descendants would re-parent to init; with `dsh exec` itself a
//! child subreaper they come here instead, and since `dsh exec` runs exactly one command,
//! every process adopted this way belongs to it. [`sweep`] kills and reaps them before
//! dsh exits. Children dsh already had when it started (a shell that `exec`s dsh hands
//! over its background jobs) are not the command's: [`become_subreaper`] names them, and
//! the sweep spares them.

use rustix::process::{kill_process, set_child_subreaper, waitpid, Pid, Signal, WaitOptions};

/// `prctl(PR_SET_CHILD_SUBREAPER, 1)` on this process, and the children it already had
/// (to spare in [`sweep`]). Failure only loses the last resort.
pub fn become_subreaper() -> Vec<Pid> {
    let before = children();
    let _ = set_child_subreaper(Some(Pid::INIT));
    before
}

/// SIGKILLs and reaps every remaining child of this process but those in `spared`: call
/// it once the command's own reaper is gone, when any other child left is an orphan
/// adopted from the command's tree. Each is an unreaped child of ours, so its pid cannot
/// have been reused (a spared one is never reaped here, so its pid stays ours too).
pub fn sweep(spared: &[Pid]) {
    // Bounded (about 2 s): each round kills every child present and reaps those that have
    // died; their own children re-parent here and are taken in a later round. A child
    // stuck in uninterruptible sleep is given up on rather than waited for.
    for _ in 0..200 {
        let mut children = children();
        children.retain(|c| !spared.contains(c));
        if children.is_empty() {
            return;
        }
        for pid in &children {
            let _ = kill_process(*pid, Signal::KILL);
            let _ = waitpid(Some(*pid), WaitOptions::NOHANG);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The children of every thread of this process, from `/proc/self/task/*/children`.
fn children() -> Vec<Pid> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(list) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .filter_map(Pid::from_raw),
            );
        }
    }
    out
}
