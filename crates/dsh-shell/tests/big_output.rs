//! Memory stays bounded whatever a command prints. This is its own test binary so the
//! peak RSS it reads (`VmHWM`) belongs to this one test.

use std::io::Read;
use std::sync::Arc;

use dsh_process::LocalSubprocess;
use dsh_shell::bash::LocalBash;
use dsh_shell::{Shell, ShellRequest};

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gib_of_output_runs_in_bounded_memory_with_tail_and_capped_spill() {
    let spill_parent = tempfile::tempdir().expect("tempdir");
    let sub = Arc::new(LocalSubprocess::new().with_spill_parent(spill_parent.path()));
    let sh = LocalBash::new(sub.clone());
    let mut req = ShellRequest::unconfined("head -c 2147483648 /dev/zero; echo; echo tail-marker");
    req.timeout_ms = Some(600_000.0);
    let r = sh
        .run(sh.spec_for(req).expect("resolve"))
        .await
        .expect("run");
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.stdout.total_bytes, 2_147_483_648 + 1 + 12);
    assert!(r.stdout.truncated);
    assert_eq!(r.stdout.text.len(), 16_000);
    assert!(r.stdout.text.ends_with("\0\ntail-marker\n"));

    let spill = r.stdout.spill.expect("spill file");
    assert_eq!((spill.bytes, spill.complete), (64 * 1024 * 1024, false));
    let mut f = std::fs::File::open(&spill.path).expect("open spill");
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).expect("read");
        if n == 0 {
            break;
        }
        assert!(
            buf[..n].iter().all(|b| *b == 0),
            "spill content differs from the stream"
        );
        total += n as u64;
    }
    assert_eq!(total, 64 * 1024 * 1024);

    let peak = peak_rss_kib();
    assert!(peak < 64 * 1024, "peak RSS {peak} KiB is not under 64 MiB");
}
