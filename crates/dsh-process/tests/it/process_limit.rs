//! The process limit: a command and its descendants stop at `pids.max`, through cgroup v2
//! or the v1 `pids` hierarchy, whichever this host lets dsh write.

use dsh_process::{LocalSubprocess, Outcome, SpawnSpec, Subprocess};

use crate::support::{collect, wait_for_text};

/// The limit in force here, or None (the test is skipped) where this host offers none
/// and `DSH_REQUIRE_PROCESS_LIMIT` does not demand one.
fn limited(max: u32) -> Option<LocalSubprocess> {
    let sub = LocalSubprocess::new().with_process_limit(Some(max));
    match sub.process_limit_status() {
        Ok(limit) => {
            assert_eq!(limit.max, max);
            println!("process limit through {}", limit.hierarchy);
            Some(sub)
        }
        Err(why) if std::env::var_os("DSH_REQUIRE_PROCESS_LIMIT").is_some() => {
            panic!("DSH_REQUIRE_PROCESS_LIMIT is set but there is no process limit: {why}")
        }
        Err(why) => {
            println!("skipped: no process limit here ({why})");
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
    let mut spec = SpawnSpec::new(["python3", "-c", FORK_UNTIL_REFUSED], "/");
    spec.stdout = collect(4096, None);
    spec.own_cgroup = own_cgroup;
    let p = sub.spawn(spec).expect("spawn");
    let cap = p.stdout_capture().expect("capture").clone();
    wait_for_text(&cap, " .").await;
    let text = cap.collected().text;
    p.signal_kill();
    assert_eq!(
        p.done().await,
        Outcome::Signaled(dsh_process::Signal(libc::SIGKILL))
    );
    p.wait_for_exit().await;
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
