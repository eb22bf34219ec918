//! Background jobs: a background `bash` of `true` collected with `job_output` (`wait`)
//! against a foreground `bash` of `true`, and `dsh mcp`'s peak memory and disk while ten
//! jobs print 1 GiB each.

use std::path::Path;
use std::time::Instant;

use crate::mcp::{rpc, start_mcp};
use crate::measure::{bench_world, median, ratio_figure, timed_call, timed_tool};
use crate::Figure;
use dsh_sandbox::SandboxMode;
use serde_json::json;

pub(crate) async fn job_figures(dsh: &Path, runs: usize) -> Vec<Figure> {
    let mut figures = Vec::new();
    if let Some((_dir, _ws, world, session, _shell)) = bench_world(SandboxMode::ReadOnly).await {
        let id = || format!("j{}", dsh_core::spill::random_hex(6));
        let mut n = 0;
        let mut background = || {
            n += 1;
            let job = format!("bash-{n}");
            let (world, session, id) = (&world, session.clone(), id());
            async move {
                let args =
                    json!({"command": "true", "description": "bench", "run_in_background": true});
                let start = Instant::now();
                timed_tool(world, &session, id.clone(), "bash", args).await;
                let wait = json!({"job_id": job, "wait": true});
                timed_tool(world, &session, format!("{id}w"), "job_output", wait).await;
                start.elapsed()
            }
        };
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        for i in 0..runs + 10 {
            let b = background().await;
            let f = timed_call(&world, &session, id(), "true").await;
            if i >= 10 {
                ours.push(b);
                base.push(f);
            }
        }
        figures.push(ratio_figure(
            "jobs: background true + job_output",
            median(ours),
            median(base),
            "<= 2x foreground bash",
            Some(2.0),
        ));
    }
    figures.extend(ten_gigabytes(dsh));
    figures
}

/// Ten jobs printing 1 GiB each at once through one `dsh mcp`: its peak RSS (`VmHWM`)
/// against 128 MiB, and the spill files' total against their caps.
fn ten_gigabytes(dsh: &Path) -> Vec<Figure> {
    let Ok(dir) = tempfile::tempdir() else {
        return Vec::new();
    };
    let ws = dsh_core::path::canonical_path(dir.path());
    let Some((mut child, mut stdin, mut stdout)) = start_mcp(dsh, &ws, "the job memory figures")
    else {
        return Vec::new();
    };
    let start = Instant::now();
    for id in 1..=10u64 {
        let args = json!({"name": "bash", "arguments": {"command": "head -c 1073741824 /dev/zero",
            "description": "bench", "run_in_background": true}});
        let r = rpc(&mut stdin, &mut stdout, id, "tools/call", args);
        assert_eq!(
            r["result"]["content"][0]["text"],
            format!("started background job bash-{id}"),
            "{r}"
        );
    }
    let mut spilled = 0u64;
    for id in 1..=10u64 {
        let args = json!({"name": "job_output", "arguments": {"job_id": format!("bash-{id}"),
            "wait": true, "timeout_ms": 600000}});
        let r = rpc(&mut stdin, &mut stdout, 100 + id, "tools/call", args);
        let text = r["result"]["content"][0]["text"].as_str().unwrap_or("");
        assert!(
            text.ends_with("[status: completed, exit code: 0]"),
            "{}",
            &text[text.len().saturating_sub(300)..]
        );
        if let Some(path) = text
            .split("kept: ")
            .nth(1)
            .and_then(|rest| rest.split(" (first ").next())
        {
            spilled += std::fs::metadata(path).map_or(0, |m| m.len());
        }
    }
    let took = start.elapsed();
    let peak = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    drop(stdin);
    let _ = child.wait();
    eprintln!(
        "dsh-bench: 10 jobs printed 10 GiB in {:.1} s; dsh mcp peak RSS {peak} KiB; spill files {spilled} bytes",
        took.as_secs_f64()
    );
    let limit = 128 * 1024;
    let cap = 10 * 64 * 1024 * 1024u64;
    vec![
        Figure {
            name: "jobs: 10 x 1 GiB, dsh mcp peak RSS",
            dsh: format!("{:.1} MiB", peak as f64 / 1024.0),
            baseline: "128 MiB".into(),
            ratio: peak as f64 / limit as f64,
            target: "< 128 MiB",
            ok: peak > 0 && peak < limit,
        },
        Figure {
            name: "jobs: 10 x 1 GiB, spill on disk",
            dsh: format!("{:.0} MiB", spilled as f64 / (1024.0 * 1024.0)),
            baseline: format!("{} MiB", cap / (1024 * 1024)),
            ratio: spilled as f64 / cap as f64,
            target: "<= the spill caps",
            ok: spilled <= cap,
        },
    ]
}
