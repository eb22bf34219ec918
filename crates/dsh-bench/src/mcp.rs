//! MCP: the latency of a `bash` call over one `dsh mcp` connection and what the MCP layer
//! adds, and the server's memory over 20 000 calls.

use crate::measure::{bench_world, ms, percentile, ratio_figure, rss_kib, time_once, timed_call};
use crate::Figure;
use dsh_sandbox::SandboxMode;
use std::path::Path;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

/// Sends one JSON-RPC request line and reads lines until its response.
pub(crate) fn rpc(
    stdin: &mut std::process::ChildStdin,
    stdout: &mut std::io::BufReader<std::process::ChildStdout>,
    id: u64,
    method: &str,
    params: serde_json::Value,
) -> serde_json::Value {
    use std::io::{BufRead, Write};
    let req = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    writeln!(stdin, "{req}").expect("write to dsh mcp");
    loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).expect("read") > 0,
            "dsh mcp closed its stdout"
        );
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON-RPC");
        if v["id"] == id {
            return v;
        }
    }
}

/// A `dsh mcp` of workspace `ws`, initialized: the process, its stdin and its stdout.
/// None (saying which figures are skipped) when it cannot start.
pub(crate) fn start_mcp(
    dsh: &Path,
    ws: &Path,
    figures: &str,
) -> Option<(
    std::process::Child,
    std::process::ChildStdin,
    std::io::BufReader<std::process::ChildStdout>,
)> {
    use std::io::Write;
    let mut child = match Command::new(dsh)
        .arg("mcp")
        .arg("-C")
        .arg(ws)
        .arg("--state")
        .arg(ws.join("state"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dsh-bench: cannot start dsh mcp ({e}); {figures} are skipped");
            return None;
        }
    };
    let (mut stdin, stdout) = (child.stdin.take()?, child.stdout.take()?);
    let mut stdout = std::io::BufReader::new(stdout);
    let init = serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "dsh-bench", "version": "0"}});
    rpc(&mut stdin, &mut stdout, 0, "initialize", init);
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
    )
    .expect("write");
    Some((child, stdin, stdout))
}

/// MCP: `bash` `echo hi` over one `dsh mcp` connection (read-only), interleaved with
/// `dsh exec -- echo hi` and with the same call made in process through the pipeline.
pub(crate) async fn mcp_latency(dsh: &Path, runs: usize) -> Vec<Figure> {
    let Some((_dir, ws, world, session, _shell)) = bench_world(SandboxMode::ReadOnly).await else {
        return Vec::new();
    };
    let Some((mut child, mut stdin, mut stdout)) = start_mcp(dsh, &ws, "the MCP figures") else {
        return Vec::new();
    };
    let args = serde_json::json!({"name": "bash", "arguments": {"command": "echo hi", "description": "bench"}});
    let mut call = |id: u64| {
        let start = Instant::now();
        let r = rpc(&mut stdin, &mut stdout, id, "tools/call", args.clone());
        let took = start.elapsed();
        assert_eq!(r["result"]["content"][0]["text"], "hi\n", "{r}");
        took
    };
    let exec = [
        dsh.as_os_str().to_owned(),
        "exec".into(),
        "--".into(),
        "echo".into(),
        "hi".into(),
    ];
    let exec_once = || {
        let mut c = Command::new(&exec[0]);
        c.args(&exec[1..]).stdout(Stdio::null()).current_dir(&ws);
        time_once(&mut c)
    };
    let inproc = |i: usize| timed_call(&world, &session, format!("m{i}"), "echo hi");
    for i in 0..10 {
        call(1 + i as u64);
        exec_once();
        inproc(i).await;
    }
    let (mut m, mut e, mut p) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        m.push(call(100 + i as u64));
        e.push(exec_once());
        p.push(inproc(100 + i).await);
    }
    // Memory: read calls (no process) until 1 000 and then 20 000, the RSS after each.
    let memory = {
        let _ = std::fs::write(ws.join("bench-read.txt"), "hello\n");
        let read =
            serde_json::json!({"name": "read", "arguments": {"file_path": "bench-read.txt"}});
        let mut rss_after = Vec::new();
        let mut id = 1_000_000u64;
        for until in [1_000u64, 20_000] {
            while id < 1_000_000 + until {
                let r = rpc(&mut stdin, &mut stdout, id, "tools/call", read.clone());
                assert!(r["result"]["isError"] != true, "{r}");
                id += 1;
            }
            rss_after.push(rss_kib(child.id()));
        }
        rss_after
    };
    drop(stdin);
    let _ = child.wait();
    let (m50, m95) = (percentile(m.clone(), 50), percentile(m, 95));
    let (e50, e95) = (percentile(e.clone(), 50), percentile(e, 95));
    let p50 = percentile(p, 50);
    let added = m50.saturating_sub(p50);
    vec![
        ratio_figure("mcp: bash echo hi, p50", m50, e50, "vs dsh exec p50", None),
        ratio_figure("mcp: bash echo hi, p95", m95, e95, "vs dsh exec p95", None),
        Figure {
            name: "mcp layer over in-process call",
            dsh: ms(m50),
            baseline: ms(p50),
            ratio: m50.as_secs_f64() / p50.as_secs_f64(),
            target: "adds < 1 ms (p50)",
            ok: added < Duration::from_millis(1),
        },
        match memory[..] {
            [Some(at_1k), Some(at_20k)] => {
                let grown = at_20k.saturating_sub(at_1k);
                Figure {
                    name: "mcp: RSS after 20 000 read calls",
                    dsh: format!(
                        "{at_20k} KiB ({:.0} B/call)",
                        grown as f64 * 1024.0 / 19_000.0
                    ),
                    baseline: format!("{at_1k} KiB after 1 000"),
                    ratio: at_20k as f64 / at_1k as f64,
                    target: "within 4 MiB of 1 000 calls'",
                    ok: grown <= 4 * 1024,
                }
            }
            _ => Figure {
                name: "mcp: RSS after 20 000 read calls",
                dsh: "unknown".into(),
                baseline: "no /proc".into(),
                ratio: f64::NAN,
                target: "within 4 MiB of 1 000 calls'",
                ok: false,
            },
        },
    ]
}

/// MCP: how long `dsh mcp` takes to exit once its client's input ends while a call runs a
/// command that ignores SIGTERM, beside an idle `dsh mcp`'s exit (issue 12: the busy one
/// took 5 s; nobody is left to read what a grace would let the command print).
pub(crate) async fn mcp_exit(dsh: &Path) -> Vec<Figure> {
    let Ok(dir) = tempfile::tempdir() else {
        eprintln!("dsh-bench: no temp dir; the MCP exit figure is skipped");
        return Vec::new();
    };
    let Ok(ws) = std::fs::canonicalize(dir.path()) else {
        return Vec::new();
    };
    let exit_after_eof = |busy: bool, n: usize| -> Option<Duration> {
        use std::io::Write;
        let (mut child, mut stdin, _stdout) = start_mcp(dsh, &ws, "the MCP exit figure")?;
        if busy {
            let marker = format!("1000.{}{n}", std::process::id());
            let call = serde_json::json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                "params": {"name": "bash", "arguments": {
                    "command": format!("trap '' TERM; sleep {marker}"),
                    "description": "bench"}}});
            writeln!(stdin, "{call}").ok()?;
            // Measured once the command runs.
            let started = Instant::now();
            while !crate::measure::running(&format!("sleep {marker}")) {
                if started.elapsed() > Duration::from_secs(30) {
                    let _ = child.kill();
                    return None;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let start = Instant::now();
        drop(stdin);
        let _ = child.wait();
        Some(start.elapsed())
    };
    let (mut busy, mut idle) = (Vec::new(), Vec::new());
    for n in 0..5 {
        busy.extend(exit_after_eof(true, n));
        idle.extend(exit_after_eof(false, n));
    }
    if busy.is_empty() || idle.is_empty() {
        eprintln!("dsh-bench: dsh mcp did not run the call; the MCP exit figure is skipped");
        return Vec::new();
    }
    let (b, i) = (percentile(busy, 50), percentile(idle, 50));
    vec![Figure {
        name: "mcp: exit after EOF, call in flight",
        dsh: ms(b),
        baseline: ms(i),
        ratio: b.as_secs_f64() / i.as_secs_f64(),
        target: "adds < 1 s (idle exit)",
        ok: b.saturating_sub(i) < Duration::from_secs(1),
    }]
}
