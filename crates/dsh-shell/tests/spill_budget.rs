//! A session's spill files stay under their cap together: the oldest go to make room, and
//! the result that cost one says so.

use std::sync::Arc;

use dsh_process::LocalSubprocess;
use dsh_shell::bash::LocalBash;
use dsh_shell::{Shell, ShellRequest};

/// Bytes in the spill directory `dir`, every file.
fn on_disk(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).expect("parent").flatten() {
        for f in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
            total += f.metadata().map_or(0, |m| m.len());
        }
    }
    total
}

// Regression: issue 23: spill files grew without limit in a session (1.1 GB after eight
// calls, read-only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_spill_goes_when_the_sessions_spill_files_reach_their_cap() {
    let parent = tempfile::tempdir().expect("tempdir");
    let cap = 1_000_000;
    let sub = Arc::new(
        LocalSubprocess::new()
            .with_spill_parent(parent.path())
            .with_spill_total_cap(cap),
    );
    let sh = LocalBash::new(sub.clone());
    let mut first = None;
    for i in 0..4 {
        let req = ShellRequest::unconfined(format!("head -c 400000 /dev/zero | tr '\\0' {i}"));
        let r = sh
            .run(sh.spec_for(req).expect("resolve"))
            .await
            .expect("run");
        let spill = r.stdout.spill.clone().expect("a spill file");
        assert!(on_disk(parent.path()) <= cap, "after call {i}");
        let notice = dsh_shell::render::truncation_notice(&r.stdout, &r.stderr).expect("cut");
        if i == 0 {
            first = Some(spill.path.clone());
            assert!(spill.complete);
        }
        if i == 2 {
            // The third does not fit beside two: the first went, and the notice says so.
            let first = first.clone().expect("first");
            assert!(!first.exists());
            assert_eq!(spill.dropped, vec![first.clone()]);
            assert!(notice.contains("older ones were deleted"), "{notice}");
            assert!(notice.contains(&first.display().to_string()), "{notice}");
            assert!(spill.complete, "{spill:?}");
        }
    }
}
