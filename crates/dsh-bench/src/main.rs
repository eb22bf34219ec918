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
//!   pair through `dsh exec`, which walks afresh every time;
//! - terminals: a send at the prompt against a one-shot `bash`, a REPL's answer against
//!   the silence tier, the memory of 100 idle sessions;
//! - jobs: a background `bash` of `true` collected with `job_output` against a foreground
//!   one, and `dsh mcp`'s peak memory and spill files while ten jobs print 1 GiB each.
//!
//! Environment: `DSH_BIN` names the `dsh` binary to time (default: build it with cargo;
//! when it is set, `dsh-spawn-floor` is taken from beside the bench binary if it is there);
//! `DSH_BENCH_RUNS` sets N (default 300); `DSH_BENCH_ONLY` runs only the named groups
//! (comma-separated: `spawn`, `capture`, `tool`, `mcp`, `files`, `protect`, `terminal`,
//! `jobs`).
#![forbid(unsafe_code)]

mod capture;
mod files;
mod jobs;
mod mcp;
mod measure;
mod protect;
mod spawn;
mod terminal;
mod tool;

/// One figure: what dsh measured beside its baseline, the ratio, and its target.
pub(crate) struct Figure {
    pub(crate) name: &'static str,
    pub(crate) dsh: String,
    pub(crate) baseline: String,
    pub(crate) ratio: f64,
    pub(crate) target: &'static str,
    pub(crate) ok: bool,
}

fn main() {
    let runs: usize = std::env::var("DSH_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dsh = match measure::dsh_binary() {
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
        figures.extend(spawn::spawn_latency(&dsh, runs));
    }
    if wanted("capture") {
        figures.extend(rt.block_on(capture::capture_throughput()));
    }
    if wanted("tool") {
        figures.extend(rt.block_on(tool::tool_pipeline(runs)));
    }
    if wanted("mcp") {
        figures.extend(rt.block_on(mcp::mcp_latency(&dsh, runs)));
        figures.extend(rt.block_on(mcp::mcp_exit(&dsh)));
    }
    if wanted("files") {
        figures.extend(rt.block_on(files::files_at_scale()));
    }
    if wanted("terminal") {
        figures.extend(rt.block_on(terminal::terminal_figures(runs)));
    }
    if wanted("jobs") {
        figures.extend(rt.block_on(jobs::job_figures(&dsh, runs)));
    }
    if wanted("protect") {
        figures.extend(rt.block_on(protect::protection_walk(&dsh, runs)));
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
