//! The process limit: a command and its descendants stop at `pids.max`, through cgroup v2
//! or the v1 `pids` hierarchy, whichever this host lets dsh write.

use dsh_core::ErrorCode;
use dsh_process::{LocalSubprocess, Outcome, Process, SpawnSpec, Subprocess};

use crate::support::{collect, wait_for_text};

/// The limit in force here, or None (the test is skipped) where this host offers none
/// and may lack one (see `dsh_testkit`).
fn limited(max: u32) -> Option<LocalSubprocess> {
    let sub = LocalSubprocess::new().with_process_limit(Some(max));
    match sub.process_limit_status() {
        Ok(limit) => {
            assert_eq!(limit.max, max);
            println!("process limit through {}", limit.hierarchy);
            Some(sub)
        }
        Err(why) => {
            dsh_testkit::skip(dsh_testkit::Need::ProcessLimit, &why.to_string());
            None
        }
    }
}

/// Forks sleeping children until the kernel refuses, prints how many it made, then waits.
const FORK_UNTIL_REFUSED: &str = r#"
import os, time
n = 0
while n < 500:
    try:
        pid = os.fork()
    except BlockingIOError:
        break
    if pid == 0:
        time.sleep(100)
        os._exit(0)
    n += 1
print(f"made {n} .", flush=True)
time.sleep(100)
"#;

async fn forks_until_refused(sub: &LocalSubprocess, own_cgroup: bool) -> u32 {
    let p = start_forking(sub, own_cgroup);
    let made = children_made(&p).await;
    p.signal_kill();
    assert_eq!(
        p.done().await,
        Outcome::Signaled(dsh_process::Signal(libc::SIGKILL))
    );
    p.wait_for_exit().await;
    made
}

fn start_forking(sub: &LocalSubprocess, own_cgroup: bool) -> Process {
    let mut spec = SpawnSpec::new(["python3", "-c", FORK_UNTIL_REFUSED], "/");
    spec.stdout = collect(4096, None);
    spec.own_cgroup = own_cgroup;
    sub.spawn(spec).expect("spawn")
}

/// How many children the forker made before the kernel refused.
async fn children_made(p: &Process) -> u32 {
    let cap = p.stdout_capture().expect("capture").clone();
    wait_for_text(&cap, " .").await;
    let text = cap.collected().text;
    text.trim()
        .strip_prefix("made ")
        .and_then(|n| n.strip_suffix(" ."))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output {text:?}"))
}

#[tokio::test]
async fn a_fork_bomb_stops_at_the_process_limit() {
    let Some(sub) = limited(16) else { return };
    // The leader counts against the limit too, so at most 15 children; some fork must
    // have been refused well before the script's own stop at 500.
    let made = forks_until_refused(&sub, true).await;
    assert!(
        (1..16).contains(&made),
        "made {made} children under a limit of 16"
    );
    // A command that could do without a cgroup (bubblewrap bounds its tree) is limited
    // all the same.
    let made = forks_until_refused(&sub, false).await;
    assert!(
        (1..16).contains(&made),
        "made {made} children under a limit of 16"
    );
    // The limit is per command: the next one starts afresh.
    let made = forks_until_refused(&sub, true).await;
    assert!(
        (1..16).contains(&made),
        "made {made} children under a limit of 16"
    );
}

#[tokio::test]
async fn all_commands_together_stop_at_twice_the_limit() {
    let Some(sub) = limited(16) else { return };
    let forkers: Vec<Process> = (0..3).map(|_| start_forking(&sub, true)).collect();
    let mut total = 0;
    for p in &forkers {
        let made = children_made(p).await;
        assert!(made < 16, "made {made} children under a limit of 16");
        total += made;
    }
    // Three leaders and their children: at most 32 together.
    assert!(
        total + 3 <= 32,
        "{total} children and 3 leaders under a total of 32"
    );
    for p in &forkers {
        p.signal_kill();
        p.wait_for_exit().await;
    }
}

#[tokio::test]
async fn a_command_that_cannot_be_held_to_the_limit_does_not_run() {
    let Some(sub) = limited(16) else { return };
    let limit = sub.process_limit_status().expect("limit");
    // Where the limit lives for this command: its cgroup line in that hierarchy.
    let mut spec = SpawnSpec::new(["cat", "/proc/self/cgroup"], "/");
    spec.stdout = collect(4096, None);
    let p = sub.spawn(spec).expect("spawn");
    p.wait_for_exit().await;
    let lines = p.stdout_capture().expect("capture").collected().text;
    let v1 = limit.hierarchy == "cgroup v1";
    let line = lines
        .lines()
        .find(|l| {
            let controllers = l.split(':').nth(1).unwrap_or("");
            if v1 {
                controllers.split(',').any(|c| c == "pids")
            } else {
                l.starts_with("0::")
            }
        })
        .unwrap_or_else(|| panic!("no {} line in {lines}", limit.hierarchy));
    let path = line.splitn(3, ':').nth(2).expect("path");
    let mount = if v1 {
        "/sys/fs/cgroup/pids"
    } else if std::path::Path::new("/sys/fs/cgroup/unified/cgroup.procs").exists() {
        "/sys/fs/cgroup/unified"
    } else {
        "/sys/fs/cgroup"
    };
    let subtree = std::path::Path::new(mount)
        .join(path.trim_start_matches('/'))
        .parent()
        .expect("the command cgroup's subtree")
        .to_path_buf();
    // The command's own cgroup goes once the command is gone; then take the subtree away.
    for _ in 0..100 {
        if std::fs::remove_dir(&subtree).is_ok() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        !subtree.exists(),
        "{} could not be removed",
        subtree.display()
    );
    let e = sub
        .spawn(SpawnSpec::new(["true"], "/"))
        .expect_err("a command without its limit ran");
    assert_eq!(e.code(), ErrorCode::ProcessSpawnFailed);
    assert!(e.message().contains("process limit"), "{e}");
}

#[test]
fn without_cgroups_or_a_limit_nothing_is_promised() {
    let plain = LocalSubprocess::new().without_cgroups();
    let why = plain
        .process_limit_status()
        .expect_err("no cgroups, no limit");
    assert!(why.contains("cgroups disabled by configuration"), "{why}");
    let none = LocalSubprocess::new().with_process_limit(None);
    assert_eq!(
        none.process_limit_status(),
        Err("no process limit is set".to_owned())
    );
}
