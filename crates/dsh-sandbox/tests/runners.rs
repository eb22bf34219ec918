//! `LocalSandbox` runner probing and selection, with stand-in `bwrap` programs (real
//! executables that misbehave on purpose) where the real one cannot show a case.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_core::path::canonical_path;
use dsh_core::ErrorCode;
use dsh_sandbox::{LocalSandbox, Runner, Sandbox, SandboxMode, SandboxPolicy, WorkspaceLayout};

/// An executable script `name` in `dir` running `body`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// A workspace-write policy for `root` decided as dsh-protect decides one for an empty
/// workspace, in part: the root's git hooks and config and `.dsh` protected, nothing left
/// unsettled.
fn decided_write(root: impl AsRef<Path>) -> SandboxPolicy {
    let root = canonical_path(root.as_ref());
    let layout = WorkspaceLayout {
        protected: [".git/hooks", ".git/config", ".dsh"]
            .iter()
            .map(|n| root.join(n))
            .collect(),
        complete: true,
        ..WorkspaceLayout::default()
    };
    SandboxPolicy::new(SandboxMode::WorkspaceWrite, &root)
        .with_layout(&root, layout)
        .settled(Vec::new())
}

fn bwrap_status(sandbox: &LocalSandbox) -> Result<String, String> {
    sandbox
        .runners()
        .into_iter()
        .find(|s| s.runner == Runner::Bwrap)
        .expect("bwrap is a Linux runner")
        .available
}

#[test]
fn a_probe_that_hangs_is_unusable_after_the_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = format!("5.{}", std::process::id());
    let slow = script(dir.path(), "bwrap", &format!("sleep {marker}"));
    let sandbox = LocalSandbox::new()
        .bwrap_program(&slow)
        .probe_timeout(Duration::from_millis(200))
        .expect("timeout");
    let why = bwrap_status(&sandbox).expect_err("a hanging probe is unusable");
    assert!(why.contains("within 200 ms"), "{why}");
    let pgrep = std::process::Command::new("pgrep")
        .args(["-f", &format!("sleep {marker}")])
        .output()
        .expect("pgrep");
    assert!(
        pgrep.stdout.is_empty(),
        "the timed-out probe left its child running"
    );
    let quick = script(dir.path(), "bwrap-quick", "sleep 0.1");
    let sandbox = LocalSandbox::new()
        .bwrap_program(&quick)
        .probe_timeout(Duration::from_millis(5000))
        .expect("timeout");
    assert!(
        bwrap_status(&sandbox).is_ok(),
        "a slow but passing probe is usable"
    );
}

#[test]
fn a_failing_probe_says_why_and_how_to_fix_it_and_is_cached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let count = dir.path().join("count");
    let failing = script(
        dir.path(),
        "bwrap",
        &format!(
            "echo x >> '{}'; echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1",
            count.display()
        ),
    );
    let sandbox = LocalSandbox::new()
        .bwrap_program(&failing)
        .without_landlock();
    let why = bwrap_status(&sandbox).expect_err("failing probe");
    assert!(why.contains("setting up uid map"), "{why}");
    assert!(why.contains("user namespaces"), "{why}");
    let policy = decided_write(dir.path());
    for _ in 0..3 {
        let e = sandbox
            .confine(&["true".into()], &policy)
            .expect_err("no runner works");
        assert_eq!(e.code(), ErrorCode::SandboxUnavailable);
        assert!(
            e.message().contains("bwrap: its probe failed"),
            "{}",
            e.message()
        );
    }
    let probes = std::fs::read_to_string(&count)
        .expect("count")
        .lines()
        .count();
    assert_eq!(probes, 1, "the verdict is computed once per provider");
}

#[test]
fn a_missing_bwrap_names_the_package() {
    let sandbox = LocalSandbox::new().bwrap_program("/nonexistent/bwrap");
    let why = bwrap_status(&sandbox).expect_err("missing");
    assert!(why.contains("apt-get install bubblewrap"), "{why}");
}

#[test]
fn a_zero_probe_timeout_is_a_configuration_error() {
    let e = LocalSandbox::new()
        .probe_timeout(Duration::ZERO)
        .expect_err("zero");
    assert_eq!(e.code(), ErrorCode::ConfigInvalid);
}

#[test]
fn danger_full_access_is_never_confined_and_no_runner_means_unavailable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = LocalSandbox::new().without_bwrap().without_landlock();
    let full = SandboxPolicy::new(SandboxMode::DangerFullAccess, dir.path());
    let e = sandbox
        .confine(&["true".into()], &full)
        .expect_err("danger");
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    let ro = SandboxPolicy::new(SandboxMode::ReadOnly, dir.path());
    let e = sandbox.confine(&["true".into()], &ro).expect_err("none");
    assert_eq!(e.code(), ErrorCode::SandboxUnavailable);
    assert!(
        e.message().contains("landlock: disabled by configuration"),
        "{}",
        e.message()
    );
}

#[test]
fn the_fastest_fully_enforcing_runner_is_chosen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = LocalSandbox::new();
    let landlock = sandbox
        .runners()
        .iter()
        .any(|s| s.runner == Runner::Landlock && s.available.is_ok());
    let bwrap = sandbox
        .runners()
        .iter()
        .any(|s| s.runner == Runner::Bwrap && s.available.is_ok());
    let ro = SandboxPolicy::new(SandboxMode::ReadOnly, dir.path());
    let ww = decided_write(dir.path());
    if landlock {
        let (runner, _) = sandbox.choose(&ro).expect("read-only");
        assert_eq!(
            runner,
            Runner::Landlock,
            "Landlock is the faster one for read-only"
        );
    }
    if bwrap {
        let (runner, enforcement) = sandbox.choose(&ww).expect("workspace-write");
        assert_eq!(runner, Runner::Bwrap, "protected paths need bubblewrap");
        assert!(enforcement.is_full());
    } else if landlock {
        let (runner, enforcement) = sandbox.choose(&ww).expect("workspace-write");
        assert_eq!(runner, Runner::Landlock);
        assert!(
            !enforcement.is_full(),
            "Landlock cannot carve protected paths"
        );
    }
}

#[test]
fn a_missing_root_is_kept_as_given() {
    assert_eq!(
        canonical_path(Path::new("/no/such/root")),
        PathBuf::from("/no/such/root")
    );
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(
        canonical_path(dir.path()),
        std::fs::canonicalize(dir.path()).expect("realpath")
    );
}

#[test]
fn an_operator_runner_wraps_the_bwrap_shape_reports_full_and_is_never_probed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let count = dir.path().join("count");
    let runner = script(
        dir.path(),
        "my-runner",
        &format!("echo x >> '{}'; exec bwrap \"$@\"", count.display()),
    );
    let sandbox = LocalSandbox::new()
        .operator_runner(
            vec![runner.clone().into_os_string()],
            vec!["my-runner: ".into()],
        )
        .expect("config");
    let policy = SandboxPolicy::new(SandboxMode::ReadOnly, dir.path());
    let c = sandbox.confine(&["true".into()], &policy).expect("confine");
    assert_eq!(c.runner, Runner::Operator);
    assert!(c.enforcement.is_full());
    assert_eq!(c.argv[0], runner.as_os_str());
    assert_eq!(c.argv[1], "--ro-bind");
    assert_eq!(&c.argv[c.argv.len() - 2..], ["--", "true"]);
    assert_eq!(
        c.denial_signatures,
        ["read-only file system", "permission denied"]
    );
    assert_eq!(c.runner_failure_rules[0].fatal_signatures, ["my-runner: "]);
    assert!(!count.exists(), "the operator runner was probed");
}

#[test]
fn operator_runner_configuration_is_checked() {
    let bad = |cmd: Vec<std::ffi::OsString>, sigs: Vec<String>| {
        LocalSandbox::new()
            .operator_runner(cmd, sigs)
            .expect_err("invalid")
            .code()
    };
    assert_eq!(bad(vec![], vec!["x".into()]), ErrorCode::ConfigInvalid);
    assert_eq!(bad(vec!["r".into()], vec![]), ErrorCode::ConfigInvalid);
    for sig in ["  ", "a\nb", "a\rb"] {
        assert_eq!(
            bad(vec!["r".into()], vec![sig.into()]),
            ErrorCode::ConfigInvalid
        );
    }
    assert!(LocalSandbox::new().operator_runner(vec![], vec![]).is_ok());
}

// A protected path of `ROOT/../..` (from a workspace's config) must not turn into anchors
// that bind the root's parents, up to `/`, writable.
#[test]
fn a_protected_path_outside_the_root_never_becomes_a_writable_bind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = canonical_path(dir.path()).join("a/ws");
    std::fs::create_dir_all(&ws).expect("ws");
    // Stand-in bwrap: the argv is all this test looks at.
    let fake = script(dir.path(), "bwrap", "exit 0");
    let sandbox = LocalSandbox::new()
        .bwrap_program(&fake)
        .force_runner(Runner::Bwrap);
    let policy = decided_write(&ws)
        .with_protected([ws.join("../../../../dshprobe/x"), ws.join("sub/../../y")]);
    let c = sandbox.confine(&["true".into()], &policy).expect("confine");
    let argv: Vec<String> = c
        .argv
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    for w in argv.windows(3).filter(|w| w[0] == "--bind") {
        assert!(
            Path::new(&w[2]).starts_with(&ws)
                || w[2] == "/tmp"
                || w[1] == w[2] && w[2].contains("dsh-sandbox-"),
            "a writable bind outside the workspace: {w:?}"
        );
    }
    assert!(!Path::new("/dshprobe").exists());
    assert!(!argv.iter().any(|a| a.contains("dshprobe")), "{argv:?}");
}

// A denied file's name hard-linked before the secret is written into it leaves the other
// name readable: the policy reports it as a gap.
#[test]
fn a_denied_file_with_another_name_is_a_gap() {
    let d = tempfile::tempdir().expect("tempdir");
    let ws = dsh_core::path::canonical_path(d.path());
    std::fs::write(ws.join(".env"), "").expect("env");
    let policy = SandboxPolicy::new(SandboxMode::ReadOnly, &ws).with_deny_read([ws.join(".env")]);
    let gaps = |p: &SandboxPolicy| match LocalSandbox::new().choose(p) {
        Ok((_, dsh_sandbox::Enforcement::Partial(why))) => why,
        Ok(_) => String::new(),
        Err(e) => e.message().to_owned(),
    };
    assert!(!gaps(&policy).contains("hard link"), "{}", gaps(&policy));
    std::fs::hard_link(ws.join(".env"), ws.join("x")).expect("link");
    assert!(gaps(&policy).contains("hard link"), "{}", gaps(&policy));
}

// Confining never decides a policy (it never walks or moves files): a workspace-write
// policy nobody decided is refused, in every runner's case, before anything runs.
#[test]
fn an_undecided_workspace_write_policy_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let undecided = SandboxPolicy::new(SandboxMode::WorkspaceWrite, dir.path());
    assert_eq!(undecided.unsettled, None);
    let e = LocalSandbox::new()
        .confine(&["true".into()], &undecided)
        .expect_err("undecided");
    assert_eq!(e.code(), ErrorCode::Internal, "{}", e.message());
    assert!(
        e.message().contains("before it was decided"),
        "{}",
        e.message()
    );
    // Changing the mode of a decided policy forgets the decision.
    let widened = SandboxPolicy::new(SandboxMode::ReadOnly, dir.path())
        .settled(Vec::new())
        .with_mode(SandboxMode::WorkspaceWrite);
    assert_eq!(widened.unsettled, None);
}

// Landlock grants the writable roots where the policy found them: one reached through a
// link now (the workspace moved and its name linked elsewhere by a command of the
// session, between the check before a call and the sandbox's setup) is refused, never
// granted where the link leads.
#[test]
fn landlock_refuses_a_writable_root_reached_through_a_link() {
    let sandbox = LocalSandbox::new().force_runner(Runner::Landlock);
    let status = sandbox
        .runners()
        .into_iter()
        .find(|s| s.runner == Runner::Landlock)
        .expect("Landlock is a Linux runner");
    if let Err(why) = status.available {
        dsh_testkit::skip(dsh_testkit::Need::Landlock, &why);
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let root = canonical_path(dir.path());
    let real = root.join("real");
    std::fs::create_dir(&real).expect("mkdir");
    std::os::unix::fs::symlink(&real, root.join("link")).expect("link");
    let accept = |p: SandboxPolicy| p.with_on_partial(dsh_sandbox::OnPartial::Accept);
    sandbox
        .confine(&["true".into()], &accept(decided_write(&real)))
        .expect("the real root confines");
    let mut moved = accept(decided_write(&real));
    moved.workspace_root = root.join("link");
    let e = sandbox
        .confine(&["true".into()], &moved)
        .expect_err("a link on the way");
    assert_eq!(e.code(), ErrorCode::SandboxUnavailable, "{}", e.message());
    assert!(
        e.message().contains("without following a link"),
        "{}",
        e.message()
    );
}
