//! Terminals: a send at the prompt against a one-shot `bash` call, a REPL's answer
//! against the silence tier, and the memory of 100 idle sessions.

use std::time::{Duration, Instant};

use crate::measure::{bench_world_with, median, ms, percentile, timed_tool};
use crate::Figure;
use dsh_sandbox::SandboxMode;
use serde_json::json;

/// The silence tier a kernel-tier answer must beat by 10x.
const SILENCE: Duration = Duration::from_millis(3000);

pub(crate) async fn terminal_figures(runs: usize) -> Vec<Figure> {
    // Room for the 100 idle sessions (the default allows 64 per connection).
    let more = |c: &mut dsh_tools::WorldConfig| c.terminal.max_terminals = 128;
    let Some((_dir, _ws, world, session, _shell)) =
        bench_world_with(SandboxMode::ReadOnly, more).await
    else {
        return Vec::new();
    };
    let call = |name: &'static str, args: serde_json::Value| {
        let (world, session) = (&world, session.clone());
        async move {
            let id = format!("t{}", dsh_core::spill::random_hex(6));
            timed_tool(world, &session, id, name, args).await
        }
    };
    call("terminal_open", json!({"type": "shell"})).await;
    let echo = || {
        call(
            "terminal_send",
            json!({"sessionId": "pty-1", "text": "echo hi"}),
        )
    };
    let one_shot = || {
        call(
            "bash",
            json!({"command": "echo hi", "description": "bench"}),
        )
    };
    for _ in 0..10 {
        echo().await;
        one_shot().await;
    }
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        ours.push(echo().await);
        base.push(one_shot().await);
    }
    let mut figures = vec![crate::measure::ratio_figure(
        "terminal: send echo hi",
        median(ours),
        median(base),
        "<= 3x one-shot bash",
        Some(3.0),
    )];

    // A REPL answering: the kernel tier, against the 3 s silence tier.
    call(
        "terminal_send",
        json!({"sessionId": "pty-1", "text": "python3 -q"}),
    )
    .await;
    let mut answers = Vec::new();
    for i in 0..runs.min(100) {
        let d = call(
            "terminal_send",
            json!({"sessionId": "pty-1", "text": format!("x = {i}")}),
        )
        .await;
        answers.push(d);
    }
    let p50 = percentile(answers, 50);
    figures.push(Figure {
        name: "terminal: python3 x = 41 p50",
        dsh: ms(p50),
        baseline: ms(SILENCE),
        ratio: p50.as_secs_f64() / SILENCE.as_secs_f64(),
        target: "< 0.1x silence tier",
        ok: p50 < SILENCE / 10,
    });
    call("terminal_close", json!({"sessionId": "pty-1"})).await;

    // 100 idle sessions: the proportional memory of this process and everything it
    // started (reapers, runners, shells).
    let before = tree_pss_kib();
    let start = Instant::now();
    for _ in 0..100 {
        call("terminal_open", json!({"type": "shell"})).await;
    }
    let opened = start.elapsed();
    let total = tree_pss_kib();
    eprintln!(
        "dsh-bench: 100 terminals opened in {}; PSS {} KiB before, {} KiB after",
        ms(opened),
        before,
        total
    );
    let limit = 100 * 1024;
    figures.push(Figure {
        name: "terminal: 100 idle sessions PSS",
        dsh: format!("{:.1} MiB", total as f64 / 1024.0),
        baseline: "100 MiB".into(),
        ratio: total as f64 / limit as f64,
        target: "< 100 MiB total",
        ok: total < limit,
    });
    let _ = world.end_terminals().await;
    figures
}

/// The proportional set size (`Pss`) of this process and every descendant, in KiB.
fn tree_pss_kib() -> u64 {
    let me = std::process::id();
    let mut parents = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let ppid = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(ppid) = ppid {
                parents.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![me];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree.iter().map(|p| pss_kib(*p)).sum()
}

fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
