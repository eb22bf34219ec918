//! A window of a 2 GiB file costs memory for the window, not the file. Its own test
//! binary, so the peak RSS it reads (`VmHWM`) is this test's.

use std::io::Write;

use dsh_core::CancelToken;
use dsh_fs::{FileSystem, LineLimits, LocalFs, TotalLines};

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_lines_of_two_gib_stay_small() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("big.txt");
    {
        // 2 GiB of 64-byte lines: a 1 MiB block of numbered lines, 2048 times.
        let block: String = (0..16_384).map(|i| format!("{i:0>63}\n")).collect();
        let mut f = std::fs::File::create(&path).expect("create");
        for _ in 0..2048 {
            f.write_all(block.as_bytes()).expect("write");
        }
    }
    let fs = LocalFs::new(dir.path());
    let t = fs.target_of("big.txt", None).await.expect("resolve");
    let w = fs
        .read_lines(
            &t,
            LineLimits {
                offset: 1_000_000,
                limit: 100,
                max_line_chars: 2000,
                max_bytes: 51_200,
            },
            &dsh_sandbox::SandboxPolicy::danger_full_access(dir.path()),
            &CancelToken::new(),
        )
        .await
        .expect("window");
    // Counted about COUNT_AHEAD bytes past the window, not to the end.
    let counted = w.total_lines.count();
    assert_eq!(w.total_lines, TotalLines::AtLeast(counted));
    assert!(
        counted > 1_000_099 && counted < (2u64 << 30) / 64,
        "{counted}"
    );
    assert_eq!(w.lines.len(), 100);
    assert_eq!(
        w.lines[0],
        (1_000_000, format!("{:0>63}", 999_999 % 16_384))
    );
    let peak = peak_rss_kib();
    assert!(
        peak < 64 * 1024,
        "peak RSS {peak} KiB for a 100-line window"
    );
}
