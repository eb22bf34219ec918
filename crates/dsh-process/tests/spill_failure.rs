//! A spill file that cannot be written is not advertised; the in-memory tail stays.
//! Its own test binary: it limits the file size of the whole process (`RLIMIT_FSIZE`).

use dsh_process::{CaptureLimits, LocalSubprocess, OutputMode, SpawnSpec, Subprocess};

#[tokio::test]
async fn a_spill_file_that_cannot_be_written_is_dropped_and_the_tail_kept() {
    // SAFETY: setrlimit(2) and signal(2) on this test process; SIGXFSZ ignored so that a
    // write past the limit fails with EFBIG instead of killing the process.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        let lim = libc::rlimit {
            rlim_cur: 1000,
            rlim_max: 1000,
        };
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
    }
    let sub = LocalSubprocess::new();
    let mut spec = SpawnSpec::new(
        [
            "bash",
            "-c",
            "for i in $(seq 1 2000); do echo line-$i; done",
        ],
        "/tmp",
    );
    spec.stdout = OutputMode::Collect(CaptureLimits {
        max_bytes: 100,
        max_spill_bytes: Some(1 << 20),
    });
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    let (out, _) = p.collected();
    assert!(out.truncated);
    assert!(out.text.ends_with("line-2000\n"));
    assert_eq!(
        out.spill, None,
        "a spill file that failed to write was advertised"
    );
}
