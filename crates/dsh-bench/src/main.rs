//! `cargo run --release -p dsh-bench`: dsh's figures, each beside a baseline measured in
//! the same run, printed as a ratio. Timing lives here, never in tests.
//!
//! Figures:
//! - spawn latency (median of N runs each, interleaved so both sides see the same machine
//!   state): `dsh exec --mode danger-full-access -- true` against `bash -c true`, and
//!   against `timeout 1000 true`, which also execs twice, for context; the Landlock runner
//!   (`--runner landlock --mode read-only`) against `bash -c true`; the bubblewrap runner
//!   against the same bwrap argv run raw; and, as the floor under these, `dsh-spawn-floor`
//!   (this package's launcher that only spawns and waits, built with the same profile)
//!   running `true` against `bash -c true` and the raw bwrap argv against itself run raw:
//!   no launcher in front of a program can do better on the machine;
//! - capture throughput: `LocalBash::run` of a command printing 1 GiB against a raw pipe
//!   drain of the same command, and the bench process's peak RSS while capturing 64 MiB
//!   and 1 GiB (it must not grow with output size);
//! - the tools pipeline: a `bash` tool call of `true` with the session log in SQLite
//!   against the bare confined `LocalBash::run` of `true` under the same policy;
//! - MCP: the p50 and p95 latency of a `bash` call of `echo hi` over one `dsh mcp`
//!   connection (read-only sandbox), beside `dsh exec -- echo hi`, and what the MCP layer
//!   adds at p50 over the same call made in process through the pipeline; and the
//!   server's memory after 20 000 `read` calls beside after 1 000 (the growth per call);
//! - files at scale: the `grep` tool over a generated 1 GiB tree against the `rg` binary on
//!   the same tree (skipped, saying so, without `rg`), and the `edit` tool on a 100 MiB
//!   file against `cp` of that file (median of 5 each, interleaved, caches warm);
//! - protection: a workspace-write `bash` call of `true` through a long-lived World in a
//!   git repository of 100 000 files against the same in an empty one (the walk for nested
//!   repositories is made at the first call and kept current by inotify), and the same
//!   pair through `dsh exec`, which walks afresh every time.
//!
//! Environment: `DSH_BIN` names the `dsh` binary to time (default: build it with cargo;
//! when it is set, `dsh-spawn-floor` is taken from beside the bench binary if it is there);
//! `DSH_BENCH_RUNS` sets N (default 300); `DSH_BENCH_ONLY` runs only the named groups
//! (comma-separated: `spawn`, `capture`, `tool`, `mcp`, `files`, `protect`).
#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_process::LocalSubprocess;
use dsh_sandbox::{bwrap, LocalSandbox, Runner, SandboxMode, SandboxPolicy};
use dsh_shell::bash::LocalBash;
use dsh_shell::{Shell, ShellRequest};

const GIB: u64 = 1 << 30;

struct Figure {
    name: &'static str,
    dsh: String,
    baseline: String,
    ratio: f64,
    target: &'static str,
    ok: bool,
}

fn main() {
    let runs: usize = std::env::var("DSH_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dsh = match dsh_binary() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("dsh-bench: {e}");
            std::process::exit(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dsh-bench: cannot start the runtime: {e}");
            std::process::exit(2);
        }
    };
    let only = std::env::var("DSH_BENCH_ONLY").unwrap_or_default();
    let wanted = |group: &str| only.is_empty() || only.split(',').any(|g| g.trim() == group);
    let mut figures = Vec::new();
    if wanted("spawn") {
        figures.extend(spawn_latency(&dsh, runs));
    }
    if wanted("capture") {
        figures.extend(rt.block_on(capture_throughput()));
    }
    if wanted("tool") {
        figures.extend(rt.block_on(tool_pipeline(runs)));
    }
    if wanted("mcp") {
        figures.extend(rt.block_on(mcp_latency(&dsh, runs)));
    }
    if wanted("files") {
        figures.extend(rt.block_on(files_at_scale()));
    }
    if wanted("protect") {
        figures.extend(rt.block_on(protection_walk(&dsh, runs)));
    }

    println!(
        "{:<34} {:>16} {:>16} {:>8}  {:<18} verdict",
        "figure", "dsh", "baseline", "ratio", "target"
    );
    for f in &figures {
        println!(
            "{:<34} {:>16} {:>16} {:>8.3}  {:<18} {}",
            f.name,
            f.dsh,
            f.baseline,
            f.ratio,
            f.target,
            if f.ok { "ok" } else { "MISSED" }
        );
    }
}

/// The `dsh` binary: `$DSH_BIN`, else built now in release mode with the cargo that runs us.
fn dsh_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("DSH_BIN") {
        return Ok(PathBuf::from(p));
    }
    release_binary("dsh", &["-p", "dsh"])
        .map_err(|e| format!("{e}; set DSH_BIN to an existing dsh binary"))
}

/// The `dsh-spawn-floor` launcher beside this bench binary: taken as it is when `DSH_BIN`
/// is set (the caller built the binaries, e.g. statically with `--target`), else built now
/// in release mode.
fn floor_binary() -> Result<PathBuf, String> {
    if std::env::var_os("DSH_BIN").is_some() {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let beside = exe.with_file_name("dsh-spawn-floor");
        if beside.is_file() {
            return Ok(beside);
        }
    }
    release_binary(
        "dsh-spawn-floor",
        &["-p", "dsh-bench", "--bin", "dsh-spawn-floor"],
    )
}

/// Builds `what` (cargo arguments) in release mode with the cargo that runs us and returns
/// `name` in this bench binary's directory.
fn release_binary(name: &str, what: &[&str]) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--quiet"])
        .args(what)
        .status()
        .map_err(|e| format!("cannot run cargo to build {name}: {e}"))?;
    if !status.success() {
        return Err(format!("building {name} failed"));
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().ok_or("no directory for the bench binary")?;
    Ok(dir.join(name))
}

fn time_once(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let status = cmd.status();
    let took = start.elapsed();
    match status {
        Ok(s) if s.success() => took,
        other => {
            eprintln!("dsh-bench: {cmd:?} failed: {other:?}");
            std::process::exit(2);
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Times `a` and `b` `runs` times each, interleaved so both see the same machine state,
/// after a warm-up; returns the two medians.
fn compare(runs: usize, a: &[OsString], b: &[OsString]) -> (Duration, Duration) {
    let cmd = |argv: &[OsString]| {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    };
    for _ in 0..10 {
        time_once(&mut cmd(a));
        time_once(&mut cmd(b));
    }
    let (mut ta, mut tb) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        ta.push(time_once(&mut cmd(a)));
        tb.push(time_once(&mut cmd(b)));
    }
    (median(ta), median(tb))
}

fn argv(items: &[&str]) -> Vec<OsString> {
    items.iter().map(OsString::from).collect()
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn ratio_figure(
    name: &'static str,
    ours: Duration,
    base: Duration,
    target: &'static str,
    max: Option<f64>,
) -> Figure {
    let ratio = ours.as_secs_f64() / base.as_secs_f64();
    Figure {
        name,
        dsh: ms(ours),
        baseline: ms(base),
        ratio,
        target,
        ok: max.is_none_or(|m| ratio <= m),
    }
}

/// Spawn latency: the process layer alone (`--mode danger-full-access`) against
/// `bash -c true` and, for context, `timeout 1000 true` (which also execs twice); then
/// each sandbox runner in read-only mode, Landlock against `bash -c true` and bubblewrap
/// against the same bwrap argv run raw; and the floor under each baseline (`dsh-spawn-floor`
/// in front of the same program).
fn spawn_latency(dsh: &Path, runs: usize) -> Vec<Figure> {
    let dsh = dsh.as_os_str().to_owned();
    let exec = |extra: &[&str]| {
        let mut v = vec![dsh.clone(), "exec".into()];
        v.extend(extra.iter().map(OsString::from));
        v.extend(argv(&["--", "true"]));
        v
    };
    let bash = argv(&["bash", "-c", "true"]);
    let mut out = Vec::new();
    let plain = exec(&["--mode", "danger-full-access"]);
    let (o, b) = compare(runs, &plain, &bash);
    out.push(ratio_figure(
        "spawn: dsh exec (no sandbox)",
        o,
        b,
        "<= 1.3x bash -c",
        Some(1.3),
    ));
    let (o, t) = compare(runs, &plain, &argv(&["timeout", "1000", "true"]));
    out.push(ratio_figure(
        "spawn: same, vs timeout 1000 true",
        o,
        t,
        "(context)",
        None,
    ));
    // The floor under every spawn figure: a launcher that only spawns and waits.
    let floor = match floor_binary() {
        Ok(f) => Some(f.into_os_string()),
        Err(e) => {
            eprintln!("dsh-bench: {e}; the spawn floors are skipped");
            None
        }
    };
    let floored = |inner: &[OsString]| {
        floor.as_ref().map(|f| {
            let mut v = vec![f.clone()];
            v.extend_from_slice(inner);
            v
        })
    };
    if let Some(launcher) = floored(&argv(&["true"])) {
        let (f, b) = compare(runs, &launcher, &bash);
        out.push(ratio_figure(
            "spawn: floor, launcher",
            f,
            b,
            "(floor) bash -c",
            None,
        ));
    }

    let sandbox = LocalSandbox::new();
    let usable = |r: Runner| {
        sandbox
            .runners()
            .iter()
            .any(|s| s.runner == r && s.available.is_ok())
    };
    if usable(Runner::Landlock) {
        let ours = exec(&["--runner", "landlock", "--mode", "read-only"]);
        let (o, b) = compare(runs, &ours, &bash);
        out.push(ratio_figure(
            "spawn: landlock read-only",
            o,
            b,
            "<= 1.3x bash -c",
            Some(1.3),
        ));
    } else {
        eprintln!("dsh-bench: Landlock unusable here; its figure is skipped");
    }
    if usable(Runner::Bwrap) {
        let ours = exec(&["--runner", "bwrap", "--mode", "read-only"]);
        // The argv dsh runs, minus `--seccomp FD` (the raw baseline has no fd to pass).
        let policy = SandboxPolicy::bare(SandboxMode::ReadOnly, Path::new("/"));
        let raw = bwrap::argv(
            Path::new("bwrap"),
            &policy,
            &bwrap::Layout::default(),
            &argv(&["true"]),
        );
        let (o, b) = compare(runs, &ours, &raw);
        out.push(ratio_figure(
            "spawn: bwrap read-only",
            o,
            b,
            "<= 1.15x raw bwrap",
            Some(1.15),
        ));
        if let Some(launcher) = floored(&raw) {
            let (f, b) = compare(runs, &launcher, &raw);
            out.push(ratio_figure(
                "spawn: floor, launcher + bwrap",
                f,
                b,
                "(floor) raw bwrap",
                None,
            ));
        }
    } else {
        eprintln!("dsh-bench: bubblewrap unusable here; its figure is skipped");
    }
    out
}

fn print_cmd(bytes: u64) -> String {
    format!("head -c {bytes} /dev/zero")
}

/// Drains the command's stdout through a plain pipe with a 64 KiB buffer.
fn raw_drain(bytes: u64) -> Duration {
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

async fn dsh_capture(sh: &LocalBash, bytes: u64) -> (Duration, u64) {
    reset_peak_rss();
    let start = Instant::now();
    let mut req = ShellRequest::unconfined(print_cmd(bytes));
    req.timeout_ms = Some(600_000.0);
    let spec = sh.resolve(req).expect("resolve");
    let r = sh.run(spec).await.expect("run");
    let took = start.elapsed();
    assert_eq!(r.stdout.total_bytes, bytes, "capture lost bytes");
    (took, peak_rss_kib())
}

async fn capture_throughput() -> Vec<Figure> {
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

/// Resets this process's peak RSS (`VmHWM`) by writing 5 to `/proc/self/clear_refs`.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// A `bash` tool call of `true` through the whole pipeline (session log in SQLite, policy,
/// sandbox) against the bare confined `LocalBash::run` of the same command under the same
/// policy, interleaved, in this process.
/// A World with the `bash`, `read`, `edit` and `grep` tools in sandbox `mode`, the session
/// log in SQLite, and an open turn; the temp dir holding its workspace goes with it.
async fn bench_world(
    mode: SandboxMode,
) -> Option<(
    tempfile::TempDir,
    PathBuf,
    dsh_tools::World,
    Arc<dsh_store::session::Session>,
    Arc<dyn Shell>,
)> {
    use dsh_store::session::SessionLog;
    use dsh_store::SqliteStorage;
    use dsh_tools::{Preset, WorldBuilder, WorldConfig};

    let Ok(dir) = tempfile::tempdir() else {
        eprintln!("dsh-bench: no temp dir; the tool figures are skipped");
        return None;
    };
    let ws = dsh_core::path::canonical_path(dir.path());
    let built = async {
        let storage = Arc::new(SqliteStorage::open(ws.join("dsh.db"))?);
        let sessions = Arc::new(SessionLog::new(storage).await?);
        let session = sessions.create(&ws).await?;
        session.begin_turn().await?;
        let config = WorldConfig::new(&ws).with_mode(mode);
        let world = WorldBuilder::new()
            .preset(Preset::Sandboxed, &config, sessions)?
            .build()?;
        let shell = world.shell().clone();
        Ok::<_, dsh_core::HarnessError>((world, session, shell))
    };
    match built.await {
        Ok((world, session, shell)) => Some((dir, ws, world, session, shell)),
        Err(e) => {
            eprintln!("dsh-bench: cannot build the World ({e}); its figures are skipped");
            None
        }
    }
}

/// Sends one JSON-RPC request line and reads lines until its response.
fn rpc(
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

fn percentile(mut v: Vec<Duration>, p: usize) -> Duration {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

/// MCP: `bash` `echo hi` over one `dsh mcp` connection (read-only), interleaved with
/// `dsh exec -- echo hi` and with the same call made in process through the pipeline.
async fn mcp_latency(dsh: &Path, runs: usize) -> Vec<Figure> {
    let Some((_dir, ws, world, session, _shell)) = bench_world(SandboxMode::ReadOnly).await else {
        return Vec::new();
    };
    let mut child = match Command::new(dsh)
        .arg("mcp")
        .arg("-C")
        .arg(&ws)
        .arg("--state")
        .arg(ws.join("state"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dsh-bench: cannot start dsh mcp ({e}); the MCP figures are skipped");
            return Vec::new();
        }
    };
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Vec::new();
    };
    let mut stdout = std::io::BufReader::new(stdout);
    let init = serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "dsh-bench", "version": "0"}});
    rpc(&mut stdin, &mut stdout, 0, "initialize", init);
    {
        use std::io::Write;
        writeln!(
            stdin,
            r#"{{"jsonrpc":"2.0","method":"notifications/initialized"}}"#
        )
        .expect("write");
    }
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

/// The resident set of process `pid` in KiB (`VmRSS`), where `/proc` says.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// One `bash` tool call of `command` through the pipeline, timed; it must succeed.
async fn timed_call(
    world: &dsh_tools::World,
    session: &Arc<dsh_store::session::Session>,
    call_id: String,
    command: &str,
) -> Duration {
    let args = serde_json::json!({"command": command, "description": "bench"});
    timed_tool(world, session, call_id, "bash", args).await
}

/// One call of tool `name` through the pipeline, timed; it must succeed.
async fn timed_tool(
    world: &dsh_tools::World,
    session: &Arc<dsh_store::session::Session>,
    call_id: String,
    name: &str,
    args: serde_json::Value,
) -> Duration {
    let call = dsh_tools::ToolCall {
        call_id: dsh_core::CallId::new(call_id),
        name: name.into(),
        arguments: args,
    };
    let start = Instant::now();
    let r = world
        .call(Some(session), call, dsh_core::CancelToken::new())
        .await;
    assert!(!r.is_error, "{}", r.text);
    start.elapsed()
}

async fn tool_pipeline(runs: usize) -> Vec<Figure> {
    let Some((_dir, ws, world, session, shell)) = bench_world(SandboxMode::ReadOnly).await else {
        return Vec::new();
    };
    let policy = SandboxPolicy::for_workspace(SandboxMode::ReadOnly, &ws);
    let bare = || async {
        let mut req = ShellRequest::new("true", policy.clone());
        req.workdir = Some(ws.clone());
        let start = Instant::now();
        let r = shell
            .run(shell.resolve(req).expect("resolve"))
            .await
            .expect("run");
        assert_eq!(r.exit_code, Some(0));
        start.elapsed()
    };
    let piped = |i: usize| timed_call(&world, &session, format!("b{i}"), "true");
    for i in 0..10 {
        bare().await;
        piped(i).await;
    }
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for i in 0..runs {
        ours.push(piped(i + 10).await);
        base.push(bare().await);
    }
    let (o, b) = (median(ours), median(base));
    vec![ratio_figure(
        "tool: bash true, full pipeline",
        o,
        b,
        "<= 1.5x bare run()",
        Some(1.5),
    )]
}

/// Files in the large repository of the protection figures: the issue's 100 000.
const BIG_REPO_FILES: usize = 100_000;

/// A git repository at `root` holding `files` small files in directories of 50 (about
/// 2 000 directories for 100 000 files, as a source tree has), each in its index (about
/// 9 MiB for 100 000 files: the check after a command reads the index for submodules).
fn write_repo(root: &Path, files: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(root.join(".git/objects"))?;
    std::fs::create_dir_all(root.join(".git/refs"))?;
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n")?;
    let mut names = Vec::with_capacity(files);
    for i in 0..files {
        let rel = format!("src/m{}/s{}", i / 2_000, (i / 50) % 40);
        let dir = root.join(&rel);
        if i % 50 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(dir.join(format!("f{i}.txt")), "x\n")?;
        names.push(format!("{rel}/f{i}.txt"));
    }
    names.sort();
    std::fs::write(root.join(".git/index"), index_v2(&names))
}

/// A version 2 git index naming `names` (sorted) as regular files, with zeroed stat data
/// and object ids.
fn index_v2(names: &[String]) -> Vec<u8> {
    let mut out = b"DIRC".to_vec();
    out.extend(2u32.to_be_bytes());
    out.extend(u32::try_from(names.len()).unwrap_or(u32::MAX).to_be_bytes());
    for name in names {
        let start = out.len();
        out.extend([0u8; 24]);
        out.extend(0o100644u32.to_be_bytes());
        out.extend([0u8; 12 + 20]);
        out.extend(
            u16::try_from(name.len().min(0xfff))
                .unwrap_or(0xfff)
                .to_be_bytes(),
        );
        out.extend(name.as_bytes());
        // One to eight NULs, to a multiple of eight bytes.
        let size = (out.len() - start + 8) & !7;
        out.resize(start + size, 0);
    }
    out.extend([0u8; 20]);
    out
}

/// What the walk for nested repositories costs a workspace-write command: a `bash` call
/// of `true` through a long-lived World (the walk is made once, then kept current by
/// inotify) in a repository of 100 000 files against the same in an empty repository,
/// interleaved; and `dsh exec --mode workspace-write -- true`, which walks afresh every
/// time, in the same two.
async fn protection_walk(dsh: &Path, runs: usize) -> Vec<Figure> {
    let (
        Some((_big_dir, big_ws, big, big_session, _)),
        Some((_small_dir, small_ws, small, small_session, _)),
    ) = (
        bench_world(SandboxMode::WorkspaceWrite).await,
        bench_world(SandboxMode::WorkspaceWrite).await,
    )
    else {
        return Vec::new();
    };
    if let Err(e) = write_repo(&big_ws, BIG_REPO_FILES).and_then(|()| write_repo(&small_ws, 0)) {
        eprintln!(
            "dsh-bench: cannot write the repositories ({e}); the protection figures are skipped"
        );
        return Vec::new();
    }
    // The first call of each World walks its workspace.
    let first = timed_call(&big, &big_session, "w0".into(), "true").await;
    timed_call(&small, &small_session, "w0".into(), "true").await;
    eprintln!(
        "dsh-bench: first workspace-write call in the {BIG_REPO_FILES}-file repository (the walk): {}",
        ms(first)
    );
    for i in 0..10 {
        timed_call(&big, &big_session, format!("x{i}"), "true").await;
        timed_call(&small, &small_session, format!("x{i}"), "true").await;
    }
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for i in 0..runs {
        ours.push(timed_call(&big, &big_session, format!("b{i}"), "true").await);
        base.push(timed_call(&small, &small_session, format!("b{i}"), "true").await);
    }
    let mut out = vec![ratio_figure(
        "protect: ww bash, 100k repo (World)",
        median(ours),
        median(base),
        "<= 1.1x empty repo",
        Some(1.1),
    )];
    let exec = |ws: &Path| {
        let mut v = vec![dsh.as_os_str().to_owned(), "exec".into(), "-C".into()];
        v.push(ws.as_os_str().to_owned());
        v.extend(argv(&["--mode", "workspace-write", "--", "true"]));
        v
    };
    let (o, b) = compare(runs.min(100), &exec(&big_ws), &exec(&small_ws));
    out.push(ratio_figure(
        "protect: ww dsh exec, 100k repo",
        o,
        b,
        "(walks every time)",
        None,
    ));
    out
}

/// Writes `files` files of `size` bytes of text lines under `root` (16 directories); every
/// 97th file has one `NEEDLE<n>` line in its middle.
fn write_tree(root: &Path, files: usize, size: usize) -> std::io::Result<()> {
    use std::io::Write;
    let line = b"the quick brown fox jumps over the lazy dog, again and again and again\n";
    let mut block = Vec::with_capacity(size);
    while block.len() + line.len() <= size {
        block.extend_from_slice(line);
    }
    for i in 0..files {
        let dir = root.join(format!("d{:02}", i % 16));
        std::fs::create_dir_all(&dir)?;
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(dir.join(format!("f{i:04}.txt")))?);
        let half = block.len() / 2 / line.len() * line.len();
        f.write_all(&block[..half])?;
        if i % 97 == 0 {
            writeln!(f, "NEEDLE{i}")?;
        }
        f.write_all(&block[half..])?;
        f.flush()?;
    }
    Ok(())
}

/// `grep` over 1 GiB against `rg`, and `edit` of 100 MiB against `cp`.
async fn files_at_scale() -> Vec<Figure> {
    let Some((_dir, ws, world, session, _shell)) = bench_world(SandboxMode::WorkspaceWrite).await
    else {
        return Vec::new();
    };
    let mut figures = Vec::new();
    const RUNS: usize = 5;
    let tree = ws.join("tree");
    if let Err(e) = write_tree(&tree, 1024, 1 << 20) {
        eprintln!("dsh-bench: cannot write the 1 GiB tree ({e}); the grep figure is skipped");
    } else if Command::new("rg")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        eprintln!(
            "dsh-bench: no `rg` binary (apt-get install ripgrep); the grep figure is skipped"
        );
    } else {
        let grep_args = serde_json::json!({"pattern": "NEEDLE[0-9]+", "path": "tree"});
        let rg = || {
            let mut c = Command::new("rg");
            c.args(["NEEDLE[0-9]+", "tree"])
                .current_dir(&ws)
                .stdout(Stdio::null());
            time_once(&mut c)
        };
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        for i in 0..=RUNS {
            let o = timed_tool(&world, &session, format!("g{i}"), "grep", grep_args.clone()).await;
            let b = rg();
            // The first round warms the page cache for both.
            if i > 0 {
                ours.push(o);
                base.push(b);
            }
        }
        let (o, b) = (median(ours), median(base));
        figures.push(ratio_figure(
            "grep: 1 GiB tree",
            o,
            b,
            "<= 1.5x rg",
            Some(1.5),
        ));
    }
    let _ = std::fs::remove_dir_all(&tree);
    let big = ws.join("big.txt");
    let written = {
        let mut content = vec![b'x'; 100 << 20];
        for i in (99..content.len()).step_by(100) {
            content[i] = b'\n';
        }
        let mid = content.len() / 2;
        content[mid..mid + 8].copy_from_slice(b"MARK_A_\n");
        std::fs::write(&big, &content)
    };
    if let Err(e) = written {
        eprintln!("dsh-bench: cannot write the 100 MiB file ({e}); the edit figure is skipped");
        return figures;
    }
    let cp = || {
        let mut c = Command::new("cp");
        c.args(["big.txt", "big.copy"]).current_dir(&ws);
        time_once(&mut c)
    };
    // For context: a copy that, like the edit, makes its file durable before it returns.
    let dd = || {
        let mut c = Command::new("dd");
        c.args([
            "if=big.txt",
            "of=big.copy",
            "bs=1M",
            "conv=fsync",
            "status=none",
        ])
        .current_dir(&ws);
        time_once(&mut c)
    };
    let (mut ours, mut base, mut durable) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..=RUNS {
        // The edit tool edits only what this session has read.
        let read = serde_json::json!({"file_path": "big.txt", "limit": 1});
        timed_tool(&world, &session, format!("r{i}"), "read", read).await;
        let (from, to) = if i % 2 == 0 {
            ("MARK_A_", "MARK_B_")
        } else {
            ("MARK_B_", "MARK_A_")
        };
        let edit =
            serde_json::json!({"file_path": "big.txt", "old_string": from, "new_string": to});
        let o = timed_tool(&world, &session, format!("e{i}"), "edit", edit).await;
        let b = cp();
        let d = dd();
        if i > 0 {
            ours.push(o);
            base.push(b);
            durable.push(d);
        }
    }
    let (o, b, d) = (median(ours), median(base), median(durable));
    figures.push(ratio_figure(
        "edit: 100 MiB file",
        o,
        b,
        "<= 2x cp",
        Some(2.0),
    ));
    figures.push(ratio_figure(
        "edit: same, vs copy + fsync",
        o,
        d,
        "(context)",
        None,
    ));
    figures
}
