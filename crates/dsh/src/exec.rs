//! `dsh exec`: run one argv through the subprocess seam, the way `timeout(1)` would.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use dsh_core::{CancelReason, CancelToken, Deadline, ErrorCode, HarnessError, MAX_TIMER_DELAY_MS};
use dsh_process::{
    CaptureLimits, CollectedOutput, Outcome, OutputMode, Process, SpawnSpec, StdinMode, Subprocess,
};
use dsh_sandbox::{
    classify_denial, classify_runner_failure, sandbox_unavailable, Confinement, LocalSandbox,
    Network, Quarantined, Runner, Sandbox, SandboxMode, SandboxPolicy,
};
use dsh_tools::{ArmedPolicy, CheckOutcome, PolicyService, WorldConfig};

use crate::config::Flags;

/// Exit status when `--timeout` passed.
pub const EXIT_TIMED_OUT: u8 = 124;
/// Exit status when dsh itself failed and nothing ran.
pub const EXIT_DSH_FAILED: u8 = 125;
/// Exit status when the program exists but cannot be executed.
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
/// Exit status when the program was not found.
pub const EXIT_NOT_FOUND: u8 = 127;

/// Captured bytes kept in memory per stream with `--json`.
const JSON_MAX_BYTES: usize = 64_000;
/// Spill cap per stream with `--json`.
const JSON_MAX_SPILL_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Run in DIR, which is also the workspace root of the sandbox (default: the current
    /// directory).
    #[arg(short = 'C', value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Sandbox mode: read-only (no writes but /dev/null), workspace-write (the workspace,
    /// the --writable dirs and a private TMPDIR, minus protected paths such as .git/hooks),
    /// or danger-full-access (no sandbox).
    /// Default: the config's `mode`, else read-only.
    #[arg(long, value_name = "MODE", value_parser = crate::tool::parse_flag::<SandboxMode>)]
    mode: Option<SandboxMode>,
    /// Network in a confined mode: deny (no socket reaches outside the sandbox) or allow.
    /// Default: the config's `network`, else deny.
    #[arg(long, value_name = "deny|allow", value_parser = crate::tool::parse_flag::<Network>)]
    network: Option<Network>,
    /// One more writable directory (workspace-write only); repeatable.
    #[arg(long, value_name = "DIR")]
    writable: Vec<PathBuf>,
    /// Run even where the sandbox can be enforced only in part (default: refused with
    /// SANDBOX_UNAVAILABLE); what is missing is said on stderr and in --json.
    #[arg(long)]
    allow_partial: bool,
    /// One more protected path (read-only and uncreatable under workspace-write; relative:
    /// in the workspace); repeatable. Adds to the defaults and the config's.
    #[arg(long, value_name = "PATH")]
    protect: Vec<PathBuf>,
    /// Use this sandbox runner only (bwrap or landlock); default: the fastest that fully
    /// enforces the mode (see `dsh doctor`).
    #[arg(long, value_name = "RUNNER", value_parser = crate::tool::parse_flag::<Runner>)]
    runner: Option<Runner>,
    /// Terminate the whole process tree after MS milliseconds (SIGTERM, then SIGKILL after
    /// the grace) and exit 124.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=MAX_TIMER_DELAY_MS))]
    timeout: Option<u64>,
    /// SIGTERM→SIGKILL grace in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMER_DELAY_MS))]
    grace: u64,
    /// Use the per-command subreaper alone, even where a cgroup per command could be made.
    #[arg(long)]
    no_cgroup: bool,
    /// Capture output instead of streaming it and print one JSON object: exit_code,
    /// signal, timed_out, stdout, stderr, truncated, spill, sandbox. Spill files are kept.
    #[arg(long)]
    json: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    argv: Vec<OsString>,
}

/// A confined command: the provider (which owns the private temp directory, so it must
/// outlive the command) and the confinement.
struct Confined {
    /// Held, never read: dropping it removes the temp directory.
    _sandbox: LocalSandbox,
    confinement: Confinement,
}

impl ExecArgs {
    /// The flags that override the config files.
    fn flags(&self) -> Flags {
        Flags {
            mode: self.mode,
            network: self.network,
            writable_roots: self.writable.clone(),
            runner: self.runner,
            allow_partial: self.allow_partial,
            protected: self.protect.clone(),
            bash: None,
        }
    }
}

/// The command's policy, from the policy service of its configuration (the same one the
/// tools' World resolves with), and its confinement when the mode confines.
///
/// # Errors
/// `INVALID_ARGUMENT` for `--writable` outside workspace-write; `SANDBOX_UNAVAILABLE`.
async fn confine<'s>(
    args: &ExecArgs,
    config: &WorldConfig,
    service: &'s PolicyService,
) -> Result<(ArmedPolicy<'s>, Option<Confined>), HarnessError> {
    if !args.writable.is_empty() && config.mode != SandboxMode::WorkspaceWrite {
        return Err(HarnessError::invalid_argument(format!(
            "--writable needs --mode workspace-write (the mode is {})",
            config.mode
        )));
    }
    // Under workspace-write each root is walked once and watched while the command runs,
    // so the check after it reads what changed instead of walking again.
    // The check after the command is armed here: it runs when `policy` is closed, or on
    // any way out of `run` that drops it.
    let mut policy = service.armed_policy(None, None).await;
    if !policy.policy().mode.is_confined() {
        return Ok((policy, None));
    }
    let sandbox = config.sandbox();
    policy.also_check(sandbox.temp_dir());
    let confinement = sandbox.confine(&args.argv, policy.policy())?;
    Ok((
        policy,
        Some(Confined {
            _sandbox: sandbox,
            confinement,
        }),
    ))
}

pub fn main(args: ExecArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let e = HarnessError::internal("cannot start the async runtime").with_source(e);
            return ExitCode::from(fail(&args, &e));
        }
    };
    let code = runtime.block_on(run(&args));
    ExitCode::from(code)
}

async fn run(args: &ExecArgs) -> u8 {
    let cwd = match &args.dir {
        Some(d) => d.clone(),
        None => match std::env::current_dir() {
            Ok(d) => d,
            Err(e) => {
                let err = HarnessError::new(
                    ErrorCode::ProcessCwdInvalid,
                    "the current directory is unusable; pass -C DIR",
                )
                .with_source(e);
                return fail(args, &err);
            }
        },
    };
    let config = match crate::config::load(&cwd, &args.flags()) {
        Ok(c) => c.world_config(None),
        Err(e) => return fail(args, &e),
    };
    let mut sub = match config.subprocess() {
        Ok(s) => s.keep_spill_files(args.json),
        Err(e) => return fail(args, &e),
    };
    if args.no_cgroup {
        sub = sub.without_cgroups();
    }
    let spared = crate::orphans::become_subreaper();
    let service = config.policy_service();
    let (armed, confined) = match confine(args, &config, &service).await {
        Ok(c) => c,
        Err(e) => return fail(args, &e),
    };
    let policy = armed.policy().clone();
    let mode = policy.mode;
    let confinement = confined.as_ref().map(|c| &c.confinement);
    if let Some(c) = confinement {
        if let dsh_sandbox::Enforcement::Partial(why) = &c.enforcement {
            if !args.json {
                eprintln!("dsh exec: the {mode} sandbox is enforced only in part: {why}");
            }
        }
    }
    let spec = spawn_spec(args, cwd, confinement);
    // Ctrl-C, SIGTERM and SIGHUP stop the whole tree, like a timeout does. Watched before
    // spawning, so a signal that arrives while the command starts is not lost.
    let interrupt = CancelToken::new();
    let signals = watch_signals(interrupt.clone());
    let process = match sub.spawn(spec) {
        Ok(p) => p,
        Err(e) => return fail(args, &e),
    };
    let (outcome, timed_out) = wait(&process, args.timeout, &interrupt).await;
    signals.abort();
    let code = exit_status(outcome, timed_out, interrupt.reason());
    let (stdout, stderr) = process.collected();
    let runner_failed = confinement.and_then(|c| {
        classify_runner_failure(outcome.exit_code(), &stderr.text, &c.runner_failure_rules)
    });
    drop(process);
    sub.shutdown().await;
    // Anything still our child now was adopted from the command's tree after it killed
    // its own reaper.
    crate::orphans::sweep(&spared);
    // Checked once the whole tree is gone, so nothing it left running adds to it later.
    let CheckOutcome {
        found: appeared,
        quarantined,
    } = armed.close().await;
    if let (Some(line), true) = (runner_failed, args.json) {
        return fail(args, &sandbox_unavailable(mode, "", Some(&line)));
    }
    if !appeared.is_empty() && !args.json {
        eprintln!("{}", found_line(&appeared, &quarantined));
    }
    if args.json {
        let sandbox = confinement
            .map(|c| sandbox_json(&policy, c, outcome, &stderr.text, &appeared, &quarantined));
        print_json(outcome, timed_out, &stdout, &stderr, sandbox);
    }
    code
}

/// The spec `args` runs as: in `cwd`, confined by `confinement` when there is one, the
/// terminal's stdin, the output collected (bounded) for `--json`.
fn spawn_spec(args: &ExecArgs, cwd: PathBuf, confinement: Option<&Confinement>) -> SpawnSpec {
    let mut spec = SpawnSpec::new(args.argv.clone(), cwd);
    if let Some(c) = confinement {
        spec = spec.confined_by(c);
    }
    spec.stdin = StdinMode::Inherit;
    spec.grace = Duration::from_millis(args.grace);
    if args.json {
        let limits = CaptureLimits {
            max_bytes: JSON_MAX_BYTES,
            max_spill_bytes: Some(JSON_MAX_SPILL_BYTES),
        };
        spec.stdout = OutputMode::Collect(limits.clone());
        spec.stderr = OutputMode::Collect(limits);
    }
    spec
}

/// Waits for `process` until it ends, `timeout_ms` passes (then its tree is killed) or
/// `interrupt` fires; the outcome, and whether it timed out.
async fn wait(
    process: &Process,
    timeout_ms: Option<u64>,
    interrupt: &CancelToken,
) -> (Outcome, bool) {
    // Armed once the command runs, so even a 1 ms timeout is a timeout, not a failure.
    let deadline = Deadline::new(timeout_ms.map(Duration::from_millis), Some(interrupt));
    // A timeout that passes once the program has exited, while its output drains, is not
    // one: timeout(1) also answers with the program's own status as soon as it exits.
    let mut exited_in_time = false;
    let outcome = tokio::select! {
        outcome = process.done() => outcome,
        () = deadline.token().cancelled() => {
            exited_in_time = deadline.is_timed_out() && process.leader_exited();
            if !exited_in_time {
                process.terminate();
            }
            process.done().await
        }
    };
    (outcome, deadline.is_timed_out() && !exited_in_time)
}

/// What the check after the command found, as a person reads it on stderr.
fn found_line(appeared: &[PathBuf], quarantined: &[Quarantined]) -> String {
    format!(
        "dsh exec: the command made git repositories, hooks or tool settings, which the \
             host's git and editors run or read by themselves: {}.{} Later commands get them \
             protected.",
        appeared
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        quarantined
            .iter()
            .map(|q| match &q.moved_to {
                Some(to) if q.set_aside => format!(
                    " Set aside {} ({}) as {}.",
                    q.path.display(),
                    q.what,
                    to.display()
                ),
                _ => format!(
                    " COULD NOT set aside {} ({}): do not run git or tools there before \
                         you have looked at it.",
                    q.path.display(),
                    q.what
                ),
            })
            .collect::<String>()
    )
}

/// The `sandbox` object of `--json`'s output.
fn sandbox_json(
    policy: &SandboxPolicy,
    c: &Confinement,
    outcome: Outcome,
    stderr: &str,
    appeared: &[PathBuf],
    quarantined: &[Quarantined],
) -> serde_json::Value {
    serde_json::json!({
        "mode": policy.mode.as_str(),
        "network": policy.network.as_str(),
        "runner": c.runner.as_str(),
        "enforcement": c.enforcement.as_str(),
        "partial_reason": match &c.enforcement {
            dsh_sandbox::Enforcement::Partial(why) => Some(why.as_str()),
            dsh_sandbox::Enforcement::Full => None,
        },
        "denied": classify_denial(outcome.exit_code(), stderr, c.denial_signatures),
        "appeared": appeared,
        "quarantined": quarantined.iter().map(|q| serde_json::json!({
            "path": q.path, "moved_to": q.moved_to, "what": q.what,
            "set_aside": q.set_aside,
        })).collect::<Vec<_>>(),
    })
}

/// The exit status `timeout(1)` would give.
fn exit_status(outcome: Outcome, timed_out: bool, interrupted_by: Option<&CancelReason>) -> u8 {
    if timed_out {
        return EXIT_TIMED_OUT;
    }
    if let Some(CancelReason::Signal(sig)) = interrupted_by {
        return 128u8.saturating_add(u8::try_from(*sig).unwrap_or(0));
    }
    match outcome {
        Outcome::Exited(c) => (c & 0xff) as u8,
        Outcome::Signaled(s) => 128u8.saturating_add(s.0 as u8),
        Outcome::Lost => EXIT_DSH_FAILED,
    }
}

/// Cancels `interrupt` on SIGINT, SIGTERM or SIGHUP. The handlers are installed before
/// this returns (not when the task first runs), so a signal that arrives while the
/// command starts is caught rather than killing dsh.
fn watch_signals(interrupt: CancelToken) -> tokio::task::JoinHandle<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let streams = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    );
    tokio::spawn(async move {
        let (Ok(mut int), Ok(mut term), Ok(mut hup)) = streams else {
            return;
        };
        let n = tokio::select! {
            _ = int.recv() => 2,
            _ = term.recv() => 15,
            _ = hup.recv() => 1,
        };
        interrupt.cancel(CancelReason::Signal(n));
    })
}

fn fail(args: &ExecArgs, e: &HarnessError) -> u8 {
    let code = match e.code() {
        ErrorCode::ProcessNotFound => EXIT_NOT_FOUND,
        ErrorCode::ProcessNotExecutable => EXIT_CANNOT_EXECUTE,
        _ => EXIT_DSH_FAILED,
    };
    let mut msg = format!("dsh exec: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    eprintln!("{msg}");
    if args.json {
        let v = serde_json::json!({
            "error": { "code": e.code().as_str(), "message": e.message() },
            "exit_code": null,
            "signal": null,
            "timed_out": false,
        });
        let _ = writeln!(std::io::stdout(), "{v}");
    }
    code
}

fn print_json(
    outcome: Outcome,
    timed_out: bool,
    stdout: &CollectedOutput,
    stderr: &CollectedOutput,
    sandbox: Option<serde_json::Value>,
) {
    let spill = |c: &CollectedOutput| match &c.spill {
        Some(s) => serde_json::json!({ "path": s.path, "bytes": s.bytes, "complete": s.complete }),
        None => serde_json::Value::Null,
    };
    let v = serde_json::json!({
        "exit_code": outcome.exit_code(),
        "signal": outcome.signal().map(|s| s.name()),
        "timed_out": timed_out,
        "stdout": stdout.text,
        "stderr": stderr.text,
        "truncated": { "stdout": stdout.truncated, "stderr": stderr.truncated },
        "total_bytes": { "stdout": stdout.total_bytes, "stderr": stderr.total_bytes },
        "spill": { "stdout": spill(stdout), "stderr": spill(stderr) },
        "sandbox": sandbox,
    });
    let _ = writeln!(std::io::stdout(), "{v}");
}
