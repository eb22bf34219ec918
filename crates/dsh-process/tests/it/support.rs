//! Shared helpers for the subprocess tests.

use std::path::Path;
use std::time::Duration;

use dsh_process::{Capture, CaptureLimits, OutputMode, SpawnSpec};

/// A spec running `bash -c script` in `/tmp` with both streams collected.
pub fn bash(script: &str) -> SpawnSpec {
    let mut spec = SpawnSpec::new(["bash", "-c", script], "/tmp");
    spec.stdout = collect(64_000, None);
    spec.stderr = collect(64_000, None);
    spec.grace = Duration::from_millis(500);
    spec
}

/// Collect mode with `max_bytes` in memory and an optional spill cap.
pub fn collect(max_bytes: usize, spill: Option<u64>) -> OutputMode {
    OutputMode::Collect(CaptureLimits {
        max_bytes,
        max_spill_bytes: spill,
    })
}

/// True while `pid` names a live (non-zombie) process.
pub fn is_alive(pid: i32) -> bool {
    dsh_testkit::alive(pid)
}

/// Waits (up to 10 s, only to stop a hang) until `pid` is gone.
pub async fn wait_gone(pid: i32) -> bool {
    dsh_testkit::gone_within(pid, Duration::from_secs(10)).await
}

/// Reads pids, one per line, that a test command wrote to `file`, waiting (bounded) until
/// `n` are there.
pub async fn read_pids(file: &Path, n: usize) -> Vec<i32> {
    for _ in 0..1000 {
        if let Ok(s) = std::fs::read_to_string(file) {
            let pids: Vec<i32> = s.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() >= n {
                return pids;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the command did not write {n} pids to {}", file.display());
}

/// Waits until the capture's text contains `needle` (or it is sealed without it: panic).
pub async fn wait_for_text(cap: &Capture, needle: &str) {
    loop {
        // Registered before the check, so a change in between is not missed.
        let changed = cap.changed();
        if cap.read_from(0).text.contains(needle) {
            return;
        }
        assert!(!cap.is_sealed(), "the stream ended without {needle:?}");
        changed.await;
    }
}

/// Waits until the capture has received at least `n` bytes.
pub async fn wait_for_total(cap: &Capture, n: u64) {
    loop {
        let changed = cap.changed();
        if cap.total() >= n {
            return;
        }
        assert!(!cap.is_sealed(), "the stream ended before {n} bytes");
        changed.await;
    }
}

/// Points `$PIDS` of the command at `file`, where test scripts append the pids they start.
pub fn record_pids_in(spec: &mut SpawnSpec, file: &Path) {
    spec.env
        .insert("PIDS".into(), Some(file.to_string_lossy().into_owned()));
}
