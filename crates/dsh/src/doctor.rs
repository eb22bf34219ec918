//! `dsh doctor`: what this machine can enforce, what it cannot, and how to fix it.
//!
//! It reports each sandbox runner (and why one is unusable), the Landlock ABI, seccomp,
//! unprivileged user namespaces, `openat2`, cgroup v2, and which runner each confined mode
//! gets, with how it enforces the protected paths and the read denials, and whether it
//! runs at all (partial enforcement is refused unless accepted). Its self-test proves
//! enforcement instead of inferring it: under each usable runner it attempts a write the
//! mode forbids, a connect to a listener it opened on 127.0.0.1 and a read of a denied
//! file, and under bubblewrap a write of a protected git hook, and reports what the kernel
//! did. Exit status 0 when at least one runner
//! works and every self-test was refused as it should be; 1 otherwise. With
//! `--world URL` the report is the far side's, made there by its `dsh serve --stdio`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use dsh_core::visible::visible;
use dsh_process::{LocalSubprocess, Subprocess, TreeMechanism};
use dsh_sandbox::{
    landlock, seccomp, Enforcement, LocalSandbox, Network, OnPartial, Runner, SandboxMode,
    SandboxPolicy,
};
use dsh_shell::bash::LocalBash;
use dsh_shell::{Shell, ShellRequest};
use serde_json::{json, Value};

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Print one JSON object instead of the report.
    #[arg(long)]
    json: bool,
    /// Report the far side of this remote world instead (`ssh://[user@]host[:port]/path`,
    /// `docker://container/path` or `cmd:COMMAND`): its runners, modes and self-test, run
    /// there by its `dsh serve --stdio`.
    #[arg(long, value_name = "URL")]
    world: Option<String>,
    /// The far side's dsh for ssh:// and docker:// worlds: a name on its PATH or a path
    /// (default: dsh). A cmd: world's command starts dsh serve itself.
    #[arg(long, value_name = "PATH")]
    remote_dsh: Option<String>,
}

/// One line of the report: a fact, whether it is good, and the fix when it is not.
struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
    fix: Option<String>,
}

pub fn main(args: DoctorArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dsh doctor: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run(&args))
}

async fn run(args: &DoctorArgs) -> ExitCode {
    let (report, place) = match &args.world {
        Some(url) => match far_report(url, args.remote_dsh.as_deref()).await {
            Ok(r) => (r, Some(url.clone())),
            Err(e) => {
                if args.json {
                    outln!(
                        "{}",
                        json!({"error": {"code": e.code().as_str(), "message": e.message()}})
                    );
                }
                eprintln!("dsh doctor: {e}");
                return ExitCode::from(1);
            }
        },
        None => {
            if args.remote_dsh.is_some() {
                eprintln!("dsh doctor: INVALID_ARGUMENT: --remote-dsh needs --world");
                return ExitCode::from(1);
            }
            let ws = std::env::current_dir().unwrap_or_else(|_| "/".into());
            (report(&ws).await, None)
        }
    };
    if args.json {
        outln!("{report}");
    } else {
        print_report(&report, place.as_deref());
    }
    ExitCode::from(if report["healthy"] == true { 0 } else { 1 })
}

/// The report of the far side `url` names, made there by its `dsh serve --stdio`.
///
/// # Errors
/// The channel's (`INVALID_ARGUMENT` for the URL, `REMOTE_DISCONNECTED`,
/// `REMOTE_INCOMPATIBLE`, `PROCESS_NOT_FOUND` for a missing transport).
async fn far_report(url: &str, remote_dsh: Option<&str>) -> Result<Value, dsh_core::HarnessError> {
    let world: dsh_remote::WorldUrl = url.parse()?;
    if let (dsh_remote::WorldUrl::Command(_), Some(_)) = (&world, remote_dsh) {
        return Err(dsh_core::HarnessError::invalid_argument(
            "--remote-dsh names the far dsh of ssh:// and docker:// worlds; a cmd: world's \
             command starts dsh serve --stdio itself",
        ));
    }
    let far = dsh_remote::Channel::connect(&world, remote_dsh.unwrap_or("dsh")).await?;
    let mut report = far.request("doctor", json!({})).await?;
    // Which dsh answered, from the handshake.
    let info = far.info();
    report["world"] = json!({
        "url": url,
        "version": info.version.clone(),
        "binary_sha256": info.binary_sha256.clone(),
        "os": info.os.clone(),
        "arch": info.arch.clone(),
        "same_binary": info.binary_sha256 == dsh_remote::ServerInfo::of_this_process().binary_sha256,
    });
    Ok(report)
}

/// What this machine can enforce for the workspace `ws`, as `dsh doctor --json` prints it
/// (and a far side's `dsh serve` answers `doctor`).
pub async fn report(ws: &Path) -> Value {
    let sandbox = LocalSandbox::new();
    let mut checks = Vec::new();
    let runners = sandbox.runners();
    for status in &runners {
        checks.push(match &status.available {
            Ok(found) => Check {
                name: status.runner.as_str(),
                ok: true,
                detail: format!("usable ({found})"),
                fix: None,
            },
            Err(why) => Check {
                name: status.runner.as_str(),
                ok: false,
                detail: format!("unusable: {why}"),
                fix: Some(runner_fix(status.runner, why)),
            },
        });
    }
    checks.push(match landlock::abi() {
        Ok(abi) => Check {
            name: "landlock-abi",
            ok: landlock::gaps(abi).is_none(),
            detail: format!(
                "ABI {abi}{}",
                landlock::gaps(abi)
                    .map(|g| format!(": {g}"))
                    .unwrap_or_default()
            ),
            fix: landlock::gaps(abi).map(|_| "a newer kernel (6.12+) closes the gap".into()),
        },
        Err(why) => Check {
            name: "landlock-abi",
            ok: false,
            detail: why,
            fix: Some("boot a kernel with CONFIG_SECURITY_LANDLOCK=y and landlock in lsm=".into()),
        },
    });
    checks.push(seccomp_check());
    checks.push(userns_check());
    checks.push(openat2_check());
    checks.push(cgroup_check());
    checks.push(process_limit_check());

    let config = crate::config::load(ws, &crate::config::Flags::default());
    checks.push(match &config {
        Ok(_) => Check {
            name: "config",
            ok: true,
            detail: config_files_detail(ws),
            fix: None,
        },
        Err(e) => Check {
            name: "config",
            ok: false,
            detail: e.message().to_owned(),
            fix: Some("correct the file and key named; nothing runs until then".into()),
        },
    });
    let (allow_partial, deny_read, read_allow): (bool, Vec<PathBuf>, Vec<PathBuf>) = match &config {
        Ok(c) => (
            c.allow_partial.value,
            c.deny_read.iter().map(|d| d.value.clone()).collect(),
            c.read_allow.iter().map(|d| d.value.clone()).collect(),
        ),
        Err(_) => (false, Vec::new(), Vec::new()),
    };
    let mut choices = Vec::new();
    for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        let on_partial = if allow_partial {
            OnPartial::Accept
        } else {
            OnPartial::Refuse
        };
        let policy = dsh_protect::workspace_policy(mode, ws)
            .with_deny_read(deny_read.iter().cloned())
            .with_homes_closed(read_allow.iter().cloned())
            .with_on_partial(on_partial);
        choices.push(mode_report(&sandbox, &policy));
    }

    let mut self_tests = Vec::new();
    for status in runners.iter().filter(|s| s.available.is_ok()) {
        self_tests.extend(self_test(status.runner).await);
    }
    let any_runner = runners.iter().any(|s| s.available.is_ok());
    let all_refused = self_tests.iter().all(|t| t.ok);
    let healthy = any_runner && all_refused;
    // What an earlier command left that the host would run, and dsh could not set aside.
    let unsettled = dsh_protect::quarantine::unsettled_beneath(ws);

    json!({
        "healthy": healthy,
        "any_runner": any_runner,
        "workspace": ws.display().to_string(),
        "unsettled": unsettled.iter().map(|(p, what)| json!({
            "path": p.display().to_string(), "what": what,
        })).collect::<Vec<Value>>(),
        "checks": checks.iter().map(|c| json!({
            "name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix,
        })).collect::<Vec<Value>>(),
        "modes": choices,
        "self_test": self_tests.iter().map(|c| json!({
            "name": c.name, "ok": c.ok, "detail": c.detail,
        })).collect::<Vec<Value>>(),
    })
}

/// Prints `report` (see [`report`]) for a person; `world` names the far side it was made
/// on, if not here.
fn print_report(report: &Value, world: Option<&str>) {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let list = |key: &str| report[key].as_array().cloned().unwrap_or_default();
    match world {
        Some(url) => {
            let w = &report["world"];
            let hash = text(&w["binary_sha256"]);
            outln!("dsh doctor: what {url} can enforce");
            outln!(
                "  far side: dsh {} ({}/{}, binary {}{})\n",
                text(&w["version"]),
                text(&w["os"]),
                text(&w["arch"]),
                hash.get(..12).unwrap_or(&hash),
                if w["same_binary"] == true {
                    ", the same as this one"
                } else {
                    ", NOT the same as this one"
                }
            );
        }
        None => outln!("dsh doctor: what this machine can enforce\n"),
    }
    let here = if world.is_some() { "there" } else { "here" };
    for c in list("checks") {
        let ok = c["ok"] == true;
        outln!(
            "  {} {:<16} {}",
            mark(ok),
            text(&c["name"]),
            text(&c["detail"])
        );
        if let Some(fix) = c["fix"].as_str() {
            outln!("      fix: {fix}");
        }
    }
    outln!(
        "\n  modes (network denied; workspace {}):",
        text(&report["workspace"])
    );
    for c in list("modes") {
        print_mode(&c);
    }
    outln!("\n  self-test (the kernel must refuse each attempt):");
    let tests = list("self_test");
    if tests.is_empty() {
        outln!("    no runner to test");
    }
    for t in &tests {
        outln!(
            "    {} {:<22} {}",
            mark(t["ok"] == true),
            text(&t["name"]),
            text(&t["detail"])
        );
    }
    let unsettled = list("unsettled");
    if !unsettled.is_empty() {
        outln!(
            "\n  !! left by an earlier command, not set aside (workspace-write is refused \
             here until you look at each, then move or remove it; do not run git or tools \
             there before):"
        );
        for u in &unsettled {
            outln!("    {} ({})", visible(&text(&u["path"])), text(&u["what"]));
        }
    }
    outln!(
        "\n{}",
        if report["healthy"] == true {
            format!("healthy: confined modes are enforced {here}")
        } else if report["any_runner"] == true {
            format!("UNHEALTHY: a self-test was not refused; do not rely on the sandbox {here}")
        } else {
            "UNHEALTHY: no sandbox runner works; confined modes fail with SANDBOX_UNAVAILABLE"
                .to_owned()
        }
    );
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "ok "
    } else {
        "!! "
    }
}

fn partial_reason(e: &Enforcement) -> Option<&str> {
    match e {
        Enforcement::Partial(why) => Some(why),
        Enforcement::Full => None,
    }
}

/// What `policy`'s mode gets here: the runner, how completely it is enforced, whether a
/// command runs at all (partial enforcement is refused unless accepted), and how the
/// protected paths and the read denials are enforced.
fn mode_report(sandbox: &LocalSandbox, policy: &SandboxPolicy) -> Value {
    let mode = policy.mode;
    let denied = dsh_sandbox::deny_read::expand(&policy.deny_read);
    let home = dsh_sandbox::deny_read::HomeRule::new(
        &policy.closed_dirs,
        &policy.read_allow,
        &policy.readable_roots(),
        &denied,
    );
    let open: Vec<&PathBuf> = home.allowed.iter().map(|(w, _)| w).collect();
    match sandbox.choose(policy) {
        Ok((runner, enforcement)) => {
            let runs = enforcement.is_full() || policy.on_partial == OnPartial::Accept;
            let carves = runner != Runner::Landlock;
            let writable = policy.writable_dirs();
            let protected: Vec<_> = policy
                .protected
                .iter()
                .filter(|p| writable.iter().any(|w| p.starts_with(w)))
                .collect();
            json!({
                "mode": mode.as_str(),
                "runner": runner.as_str(),
                "enforcement": enforcement.as_str(),
                "partial_reason": partial_reason(&enforcement),
                "runs": runs,
                "protected_paths": (mode == SandboxMode::WorkspaceWrite).then(|| json!({
                    "enforced": carves,
                    "count": protected.len(),
                    "git_dirs": policy.git_dirs,
                })),
                "read_denial": {
                    "enforced": true,
                    "by": match runner {
                        Runner::Landlock => "Landlock read grants around each path",
                        Runner::Seatbelt => "Seatbelt file-read* denials",
                        _ => "an empty read-only mount over each path",
                    },
                    "paths": denied,
                    "closed": home.homes,
                    "open_in_closed": open,
                },
            })
        }
        Err(e) => json!({ "mode": mode.as_str(), "error": e.message(), "runs": false }),
    }
}

fn print_mode(c: &Value) {
    let mode = c["mode"].as_str().unwrap_or("");
    if let Some(e) = c.get("error") {
        outln!("    {mode:<16} unavailable: {}", e.as_str().unwrap_or(""));
        return;
    }
    outln!(
        "    {mode:<16} {} ({}{}){}",
        c["runner"].as_str().unwrap_or(""),
        c["enforcement"].as_str().unwrap_or(""),
        c["partial_reason"]
            .as_str()
            .map(|r| format!(": {r}"))
            .unwrap_or_default(),
        if c["runs"].as_bool() == Some(false) {
            " — REFUSED: partial enforcement is not accepted (--allow-partial, allow_partial = true)"
        } else {
            ""
        }
    );
    if let Some(p) = c.get("protected_paths").filter(|p| !p.is_null()) {
        outln!(
            "    {:<16} protected paths: {} in the writable roots, {} git dirs; {}",
            "",
            p["count"],
            p["git_dirs"].as_array().map_or(0, Vec::len),
            if p["enforced"].as_bool() == Some(true) {
                "read-only and uncreatable"
            } else {
                "NOT enforced by this runner"
            }
        );
    }
    let paths = c["read_denial"]["paths"].as_array().map_or(0, Vec::len);
    outln!(
        "    {:<16} read denial: {paths} credential paths here, by {}",
        "",
        c["read_denial"]["by"].as_str().unwrap_or("")
    );
    let names = |key: &str| -> Vec<String> {
        c["read_denial"][key]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (closed, open) = (names("closed"), names("open_in_closed"));
    if !closed.is_empty() {
        outln!(
            "    {:<16} closed (readable only through read_allow): {}; {} allowed paths in them",
            "",
            closed.join(", "),
            open.len()
        );
    }
}

fn runner_fix(runner: Runner, why: &str) -> String {
    match runner {
        Runner::Bwrap if why.contains("not found") => {
            "apt-get install bubblewrap (or your distribution's bubblewrap package)".into()
        }
        Runner::Bwrap => "allow unprivileged user namespaces (Ubuntu 24.04: `sysctl -w \
             kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile for \
             bwrap; Debian: `sysctl -w kernel.unprivileged_userns_clone=1`), or run dsh as root"
            .into(),
        Runner::Landlock => {
            "boot a kernel with Landlock enabled (5.13+, CONFIG_SECURITY_LANDLOCK=y, \
             landlock in the lsm= boot parameter)"
                .into()
        }
        Runner::Seatbelt => "sandbox-exec must be usable (macOS)".into(),
        Runner::Operator => "fix the configured runner command".into(),
    }
}

fn seccomp_check() -> Check {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let present = status.lines().any(|l| l.starts_with("Seccomp:"));
    let ok = present && seccomp::supported();
    Check {
        name: "seccomp",
        ok,
        detail: match (present, seccomp::supported()) {
            (true, true) => {
                "filters available; network-deny filter built for this architecture".into()
            }
            (true, false) => {
                "filters available, but dsh has no network-deny filter for this architecture".into()
            }
            (false, _) => "not available in this kernel".into(),
        },
        fix: (!ok).then(|| "a kernel with CONFIG_SECCOMP_FILTER (x86_64 or aarch64)".into()),
    }
}

fn read_sysctl(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

fn userns_check() -> Check {
    let max = read_sysctl("/proc/sys/user/max_user_namespaces");
    let debian = read_sysctl("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = read_sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let mut blocked = Vec::new();
    if max.as_deref() == Some("0") {
        blocked.push("user.max_user_namespaces=0");
    }
    if debian.as_deref() == Some("0") {
        blocked.push("kernel.unprivileged_userns_clone=0");
    }
    if apparmor.as_deref() == Some("1") {
        blocked.push("kernel.apparmor_restrict_unprivileged_userns=1");
    }
    Check {
        name: "user-namespaces",
        ok: blocked.is_empty(),
        detail: if blocked.is_empty() {
            format!(
                "unprivileged user namespaces allowed (max {})",
                max.as_deref().unwrap_or("?")
            )
        } else {
            format!("restricted: {}", blocked.join(", "))
        },
        fix: (!blocked.is_empty()).then(|| {
            "bubblewrap needs them when dsh is not root: relax the sysctl named above".into()
        }),
    }
}

fn openat2_check() -> Check {
    use rustix::fs::{openat2, Mode, OFlags, ResolveFlags, CWD};
    let probe = openat2(
        CWD,
        ".",
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH,
    );
    let ok = probe.is_ok();
    Check {
        name: "openat2",
        ok,
        detail: match probe {
            Ok(_) => "available (kernel-checked path containment for the file tools)".into(),
            Err(e) => format!(
                "unavailable ({e}): the sandboxed file tools refuse writes under workspace-write"
            ),
        },
        fix: (!ok).then(|| "Linux 5.6+ without a seccomp profile that blocks openat2".into()),
    }
}

fn cgroup_check() -> Check {
    let sub = LocalSubprocess::new();
    let mechanism = sub.tree_mechanism();
    let why = sub.cgroup_status().err().map(str::to_owned);
    Check {
        name: "cgroup-v2",
        ok: mechanism == TreeMechanism::Cgroup,
        detail: match &why {
            None => "a cgroup per command (cgroup.kill)".into(),
            Some(why) => format!("per-command subreaper only: {why}"),
        },
        fix: why.map(|_| {
            "run dsh as root or in a delegated cgroup (e.g. `systemd-run --user --scope -p \
             Delegate=yes dsh ...`); the subreaper still owns every tree"
                .into()
        }),
    }
}

fn process_limit_check() -> Check {
    let status = LocalSubprocess::new().process_limit_status();
    Check {
        name: "process-limit",
        ok: status.is_ok(),
        detail: match &status {
            Ok(limit) => format!(
                "at most {} processes and threads per command ({} pids.max)",
                limit.max, limit.hierarchy
            ),
            Err(why) => format!("no limit on the processes a command starts: {why}"),
        },
        fix: status.err().map(|_| {
            "run dsh as root on a host with the cgroup v1 pids hierarchy, or in a cgroup v2 \
             whose pids controller is enabled for its children; without it a fork bomb can \
             exhaust the host's pids until its command ends"
                .into()
        }),
    }
}

/// Under `runner`: a write read-only mode forbids, and a connect the denied network
/// forbids. Each check is ok when the kernel refused it.
async fn self_test(runner: Runner) -> Vec<Check> {
    let Ok(dir) = tempfile::tempdir() else {
        return vec![Check {
            name: "self-test",
            ok: false,
            detail: "cannot create a temporary workspace".into(),
            fix: None,
        }];
    };
    let ws = dsh_core::path::canonical_path(dir.path());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").ok();
    let port = listener
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map_or(9, |a| a.port());
    let sandbox = Arc::new(LocalSandbox::new().force_runner(runner));
    let shell = LocalBash::new(Arc::new(LocalSubprocess::new())).with_sandbox(sandbox);
    let probe = ws.join("probe");
    let write = attempt(
        &shell,
        &ws,
        &format!("echo x > '{}'", probe.display()),
        read_only(&ws, Network::Deny),
    )
    .await;
    let connect = attempt(
        &shell,
        &ws,
        &format!("echo x > /dev/tcp/127.0.0.1/{port}"),
        read_only(&ws, Network::Deny),
    )
    .await;
    let secret = ws.join("secret");
    let denied_read = match std::fs::write(&secret, "secret\n") {
        Ok(()) => {
            let policy = read_only(&ws, Network::Deny).with_deny_read([secret.clone()]);
            attempt(&shell, &ws, &format!("cat '{}'", secret.display()), policy).await
        }
        Err(e) => Attempt::CouldNotRun(format!("cannot write {}: {e}", secret.display())),
    };
    let bwrap = runner == Runner::Bwrap;
    let name = |what: &'static str| -> &'static str {
        match (bwrap, what) {
            (true, "write") => "bwrap: write",
            (true, "connect") => "bwrap: connect",
            (true, _) => "bwrap: denied read",
            (false, "write") => "landlock: write",
            (false, "connect") => "landlock: connect",
            (false, _) => "landlock: denied read",
        }
    };
    let mut out = vec![
        Check {
            name: name("write"),
            ok: matches!(write, Attempt::Refused(_)) && !probe.exists(),
            detail: write.describe(),
            fix: None,
        },
        Check {
            name: name("connect"),
            ok: matches!(connect, Attempt::Refused(_)),
            detail: connect.describe(),
            fix: None,
        },
        Check {
            name: name("read"),
            ok: matches!(denied_read, Attempt::Refused(_)),
            detail: denied_read.describe(),
            fix: None,
        },
    ];
    if bwrap {
        // A hook in a fresh repository: workspace-write must keep it uncreatable.
        let hook = ws.join(".git/hooks/pre-commit");
        let made = std::fs::create_dir_all(ws.join(".git/hooks"));
        let protected = match made {
            Ok(()) => {
                let policy = dsh_protect::workspace_policy(SandboxMode::WorkspaceWrite, &ws);
                attempt(
                    &shell,
                    &ws,
                    &format!("echo x > '{}'", hook.display()),
                    policy,
                )
                .await
            }
            Err(e) => Attempt::CouldNotRun(format!("cannot make a test repository: {e}")),
        };
        out.push(Check {
            name: "bwrap: protected path",
            ok: matches!(protected, Attempt::Refused(_)) && !hook.exists(),
            detail: protected.describe(),
            fix: None,
        });
    }
    out
}

fn read_only(ws: &Path, network: Network) -> SandboxPolicy {
    SandboxPolicy::new(SandboxMode::ReadOnly, ws).with_network(network)
}

/// What happened to one self-test attempt.
enum Attempt {
    /// The kernel refused it; what the command said.
    Refused(String),
    /// It went through: enforcement is missing.
    WentThrough,
    /// The attempt itself could not run (no sandbox, say).
    CouldNotRun(String),
}

impl Attempt {
    fn describe(&self) -> String {
        match self {
            Attempt::Refused(said) => format!("refused ({said})"),
            Attempt::WentThrough => "NOT REFUSED: the attempt went through".into(),
            Attempt::CouldNotRun(why) => format!("could not run: {why}"),
        }
    }
}

async fn attempt(shell: &LocalBash, ws: &Path, command: &str, policy: SandboxPolicy) -> Attempt {
    let mut request = ShellRequest::new(command, policy);
    request.workdir = Some(ws.to_path_buf());
    request.timeout_ms = Some(10_000.0);
    let spec = match shell.spec_for(request) {
        Ok(spec) => spec,
        Err(e) => return Attempt::CouldNotRun(e.to_string()),
    };
    match shell.run(spec).await {
        Ok(r) if r.exit_code == Some(0) => Attempt::WentThrough,
        Ok(r) => Attempt::Refused(
            r.stderr
                .text
                .lines()
                .last()
                .unwrap_or("refused")
                .trim()
                .to_owned(),
        ),
        Err(e) => Attempt::CouldNotRun(e.to_string()),
    }
}

/// The config files `dsh` reads here and which of them exist: the valid ones named, a
/// missing one said to be absent (defaults apply in its place).
fn config_files_detail(ws: &std::path::Path) -> String {
    let files = [
        crate::config::user_config_path(),
        Some(ws.join(".dsh/config.toml")),
    ];
    let (present, absent): (Vec<PathBuf>, Vec<PathBuf>) =
        files.into_iter().flatten().partition(|p| p.is_file());
    let list = |v: &[PathBuf]| {
        v.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" and ")
    };
    match (present.is_empty(), absent.is_empty()) {
        (true, _) => format!("no config file ({} absent): the defaults", list(&absent)),
        (false, true) => format!("valid ({})", list(&present)),
        (false, false) => format!("valid ({}); {} absent", list(&present), list(&absent)),
    }
}
