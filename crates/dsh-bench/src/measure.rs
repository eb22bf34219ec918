//! What every figure uses: the binaries timed, timing and percentiles, memory readings,
//! and the World the in-process figures run in.

use crate::Figure;
use dsh_sandbox::SandboxMode;
use dsh_shell::Shell;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

/// The `dsh` binary: `$DSH_BIN`, else built now in release mode with the cargo that runs us.
pub(crate) fn dsh_binary() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("DSH_BIN") {
        return Ok(PathBuf::from(p));
    }
    release_binary("dsh", &["-p", "dsh"])
        .map_err(|e| format!("{e}; set DSH_BIN to an existing dsh binary"))
}

/// The `dsh-spawn-floor` launcher beside this bench binary: taken as it is when `DSH_BIN`
/// is set (the caller built the binaries, e.g. statically with `--target`), else built now
/// in release mode.
pub(crate) fn floor_binary() -> Result<PathBuf, String> {
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
pub(crate) fn release_binary(name: &str, what: &[&str]) -> Result<PathBuf, String> {
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

pub(crate) fn time_once(cmd: &mut Command) -> Duration {
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

pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Times `a` and `b` `runs` times each, interleaved so both see the same machine state,
/// after a warm-up; returns the two medians.
pub(crate) fn compare(runs: usize, a: &[OsString], b: &[OsString]) -> (Duration, Duration) {
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

pub(crate) fn argv(items: &[&str]) -> Vec<OsString> {
    items.iter().map(OsString::from).collect()
}

pub(crate) fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

pub(crate) fn ratio_figure(
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

pub(crate) fn percentile(mut v: Vec<Duration>, p: usize) -> Duration {
    v.sort();
    v[(v.len() * p / 100).min(v.len() - 1)]
}

/// Resets this process's peak RSS (`VmHWM`) by writing 5 to `/proc/self/clear_refs`.
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

pub(crate) fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// The resident set of process `pid` in KiB (`VmRSS`), where `/proc` says.
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A `bash` tool call of `true` through the whole pipeline (session log in SQLite, policy,
/// sandbox) against the bare confined `LocalBash::run` of the same command under the same
/// policy, interleaved, in this process.
/// A World with the `bash`, `read`, `edit` and `grep` tools in sandbox `mode`, the session
/// log in SQLite, and an open turn; the temp dir holding its workspace goes with it.
pub(crate) async fn bench_world(mode: SandboxMode) -> Option<BenchWorld> {
    bench_world_with(mode, |_| {}).await
}

/// A bench World: its temp dir, workspace, World, session and shell.
pub(crate) type BenchWorld = (
    tempfile::TempDir,
    PathBuf,
    dsh_tools::World,
    Arc<dsh_store::session::Session>,
    Arc<dyn Shell>,
);

/// As [`bench_world`], with `adjust` applied to the configuration first.
pub(crate) async fn bench_world_with(
    mode: SandboxMode,
    adjust: impl FnOnce(&mut dsh_tools::WorldConfig),
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
        let mut config = WorldConfig::new(&ws).with_mode(mode);
        adjust(&mut config);
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

/// One `bash` tool call of `command` through the pipeline, timed; it must succeed.
pub(crate) async fn timed_call(
    world: &dsh_tools::World,
    session: &Arc<dsh_store::session::Session>,
    call_id: String,
    command: &str,
) -> Duration {
    let args = serde_json::json!({"command": command, "description": "bench"});
    timed_tool(world, session, call_id, "bash", args).await
}

/// One call of tool `name` through the pipeline, timed; it must succeed.
pub(crate) async fn timed_tool(
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

/// Whether a live process (not a zombie) has `text` in its command line.
pub(crate) fn running(text: &str) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(p.path().join("stat")).unwrap_or_default();
        String::from_utf8_lossy(&cmd)
            .replace('\0', " ")
            .contains(text)
            && !stat.contains(") Z")
    })
}
