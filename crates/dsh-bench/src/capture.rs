//! Capture throughput and memory: 1 GiB through `LocalBash::run` against a raw pipe drain,
//! and the peak RSS while capturing 64 MiB and 1 GiB.

use crate::measure::{median, peak_rss_kib, reset_peak_rss};
use crate::Figure;
use dsh_process::LocalSubprocess;
use dsh_shell::bash::LocalBash;
use dsh_shell::Shell;
use dsh_shell::ShellRequest;
use std::io::Read;
use std::process::Command;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

pub(crate) const GIB: u64 = 1 << 30;

pub(crate) fn print_cmd(bytes: u64) -> String {
    format!("head -c {bytes} /dev/zero")
}

/// Drains the command's stdout through a plain pipe with a 64 KiB buffer.
pub(crate) fn raw_drain(bytes: u64) -> Duration {
    let start = Instant::now();
    let mut child = match Command::new("bash")
        .args(["-c", &print_cmd(bytes)])
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dsh-bench: cannot spawn bash: {e}");
            std::process::exit(2);
        }
    };
    let mut out = child.stdout.take().expect("piped stdout");
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    while let Ok(n) = out.read(&mut buf) {
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    let _ = child.wait();
    assert_eq!(total, bytes, "raw drain lost bytes");
    start.elapsed()
}

pub(crate) async fn dsh_capture(sh: &LocalBash, bytes: u64) -> (Duration, u64) {
    reset_peak_rss();
    let start = Instant::now();
    let mut req = ShellRequest::unconfined(print_cmd(bytes));
    req.timeout_ms = Some(600_000.0);
    let spec = sh.spec_for(req).expect("spec");
    let r = sh.run(spec).await.expect("run");
    let took = start.elapsed();
    assert_eq!(r.stdout.total_bytes, bytes, "capture lost bytes");
    (took, peak_rss_kib())
}

pub(crate) async fn capture_throughput() -> Vec<Figure> {
    let sh = LocalBash::new(Arc::new(LocalSubprocess::new()));
    let mut ours = Vec::new();
    let mut base = Vec::new();
    let mut rss_gib = 0;
    for _ in 0..3 {
        let (t, rss) = dsh_capture(&sh, GIB).await;
        ours.push(t);
        rss_gib = rss_gib.max(rss);
        base.push(raw_drain(GIB));
    }
    let (_, rss_small) = dsh_capture(&sh, 64 << 20).await;
    let (o, b) = (median(ours), median(base));
    let gbps = |d: Duration| GIB as f64 / d.as_secs_f64() / 1e9;
    let ratio = b.as_secs_f64() / o.as_secs_f64();
    let growth = rss_gib as f64 / rss_small.max(1) as f64;
    vec![
        Figure {
            name: "capture: LocalBash::run of 1 GiB",
            dsh: format!("{:.2} GB/s", gbps(o)),
            baseline: format!("{:.2} GB/s", gbps(b)),
            ratio,
            target: ">= 0.7x raw drain",
            ok: ratio >= 0.7,
        },
        Figure {
            name: "peak RSS: 1 GiB vs 64 MiB output",
            dsh: format!("{} KiB", rss_gib),
            baseline: format!("{} KiB", rss_small),
            ratio: growth,
            target: "~1.0 (no growth)",
            ok: growth < 1.5,
        },
    ]
}
