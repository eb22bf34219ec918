//! A spill file that cannot be written is not advertised; the in-memory tail stays.
//! Its own test binary: it limits the file size of the whole process (`RLIMIT_FSIZE`).

use dsh_process::{CaptureLimits, LocalSubprocess, OutputMode, SpawnSpec, Subprocess};

/// The size of stdout or stderr when they are regular files (a CI log), whose later
/// writes the limit must still allow.
fn largest_output_file() -> u64 {
    [1, 2]
        .iter()
        .filter_map(|fd| std::fs::metadata(format!("/proc/self/fd/{fd}")).ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_spill_file_that_cannot_be_written_is_dropped_and_the_tail_kept() {
    let limit = largest_output_file() + (1 << 20);
    // SAFETY: setrlimit(2) and signal(2) on this test process; SIGXFSZ ignored so that a
    // write past the limit fails with EFBIG instead of killing the process.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let lim = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
    let sub = LocalSubprocess::new();
    let script = format!(
        "head -c {} /dev/zero | tr '\\0' x; echo; echo tail-marker",
        limit + (256 << 10)
    );
    let mut spec = SpawnSpec::new(["bash", "-c", script.as_str()], "/tmp");
    spec.stdout = OutputMode::Collect(CaptureLimits {
        max_bytes: 100,
        max_spill_bytes: Some(limit + (1 << 20)),
    });
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    let (out, _) = p.collected();
    assert!(out.truncated);
    assert!(out.text.ends_with("x\ntail-marker\n"), "{:?}", out.text);
    assert_eq!(
        out.spill, None,
        "a spill file that failed to write was advertised"
    );
}
