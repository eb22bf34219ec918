//! Spawn latency: `dsh exec` with and without each sandbox runner, beside `bash -c true`,
//! the raw bwrap argv and the floor under both.

use crate::measure::{argv, compare, floor_binary, ratio_figure};
use crate::Figure;
use dsh_sandbox::bwrap;
use dsh_sandbox::LocalSandbox;
use dsh_sandbox::Runner;
use dsh_sandbox::Sandbox;
use dsh_sandbox::SandboxMode;
use dsh_sandbox::SandboxPolicy;
use std::ffi::OsString;
use std::path::Path;

/// Spawn latency: the process layer alone (`--mode danger-full-access`) against
/// `bash -c true` and, for context, `timeout 1000 true` (which also execs twice); then
/// each sandbox runner in read-only mode, Landlock against `bash -c true` and bubblewrap
/// against the same bwrap argv run raw; and the floor under each baseline (`dsh-spawn-floor`
/// in front of the same program).
pub(crate) fn spawn_latency(dsh: &Path, runs: usize) -> Vec<Figure> {
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
        // The argv dsh runs for this workspace (the closed homes, the denied paths),
        // minus `--seccomp FD` (the raw baseline has no fd to pass).
        let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
        let policy = SandboxPolicy::new(SandboxMode::ReadOnly, &cwd);
        // Kept until the figures are taken: its private area holds the stand-ins the argv
        // mounts.
        let confiner = LocalSandbox::new().force_runner(Runner::Bwrap);
        let raw = match confiner.confine(&argv(&["true"]), &policy) {
            Ok(c) => without_seccomp(c.argv),
            Err(e) => {
                eprintln!("dsh-bench: cannot confine for the raw bwrap baseline ({e})");
                bwrap::argv(
                    Path::new("bwrap"),
                    &SandboxPolicy::bare(SandboxMode::ReadOnly, Path::new("/")),
                    &bwrap::Layout::default(),
                    &argv(&["true"]),
                )
            }
        };
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

/// `argv` without its `--seccomp FD` pair (before `--`).
fn without_seccomp(mut argv: Vec<OsString>) -> Vec<OsString> {
    let end = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    if let Some(i) = argv[..end].iter().position(|a| a == "--seccomp") {
        argv.drain(i..(i + 2).min(end));
    }
    argv
}
