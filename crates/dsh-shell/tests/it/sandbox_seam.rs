//! How the confining executor uses the sandbox seam (spec shell.md items 44-50), with a
//! recording provider whose runner is a real bash script, so runner failures, spawn
//! failures and denials are real processes and real stderr.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_core::{CancelToken, ErrorCode, HarnessError};
use dsh_process::LocalSubprocess;
use dsh_sandbox::{Confinement, Enforcement, Runner, Sandbox, SandboxMode, SandboxPolicy};
use dsh_shell::bash::LocalBash;
use dsh_shell::{ProcessStatus, Shell, ShellRequest};

/// Records every call; wraps the argv in `runner` (a bash script given the original argv
/// as its arguments), or a program path that does not exist.
struct Recording {
    calls: Mutex<Vec<(Vec<OsString>, SandboxPolicy)>>,
    runner: Vec<OsString>,
}

impl Recording {
    fn script(script: &str) -> Arc<Recording> {
        Arc::new(Recording {
            calls: Mutex::new(Vec::new()),
            runner: vec!["bash".into(), "-c".into(), script.into(), "runner".into()],
        })
    }

    fn calls(&self) -> Vec<(Vec<OsString>, SandboxPolicy)> {
        self.calls.lock().expect("lock").clone()
    }
}

impl Sandbox for Recording {
    fn confine_on_terminal(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, HarnessError> {
        self.confine(argv, policy)
    }

    fn confine(
        &self,
        argv: &[OsString],
        policy: &SandboxPolicy,
    ) -> Result<Confinement, HarnessError> {
        self.calls
            .lock()
            .expect("lock")
            .push((argv.to_vec(), policy.clone()));
        let mut wrapped = self.runner.clone();
        wrapped.extend(argv.iter().cloned());
        Ok(Confinement {
            argv: wrapped,
            env: Vec::new(),
            restrictions: None,
            enforcement: if policy.mode == SandboxMode::WorkspaceWrite {
                Enforcement::Partial("test".into())
            } else {
                Enforcement::Full
            },
            runner: Runner::Bwrap,
            denial_signatures: Runner::Bwrap.denial_signatures(),
            bounds_tree: false,
            runner_failure_rules: Runner::Bwrap.runner_failure_rules(),
            placeholders: None,
        })
    }

    fn temp_dir(&self) -> Option<PathBuf> {
        None
    }
}

const PASS_THROUGH: &str = "echo runner >&2; exec \"$@\"";

fn shell(sandbox: Arc<Recording>) -> LocalBash {
    LocalBash::new(Arc::new(LocalSubprocess::new())).with_sandbox(sandbox)
}

/// A request in `/tmp` under `mode` (none: unconfined), with a bare policy (the recording
/// sandbox needs no protected paths, and `/tmp` is not walked).
fn request(command: &str, mode: Option<SandboxMode>) -> ShellRequest {
    let root = Path::new("/tmp");
    let policy = mode.map_or_else(
        || SandboxPolicy::danger_full_access(root),
        |m| SandboxPolicy::bare(m, root),
    );
    let mut r = ShellRequest::new(command, policy);
    r.workdir = Some(PathBuf::from("/tmp"));
    r
}

#[tokio::test]
async fn danger_full_access_never_calls_the_provider() {
    let rec = Recording::script(PASS_THROUGH);
    let sh = shell(rec.clone());
    let spec = sh
        .spec_for(request("echo hi", Some(SandboxMode::DangerFullAccess)))
        .expect("resolve");
    let r = sh.run(spec.clone()).await.expect("run");
    assert_eq!(r.stdout.text, "hi\n");
    assert_eq!(r.stderr.text, "", "the runner ran");
    let facts = r.sandbox.expect("facts");
    assert_eq!(facts.mode, SandboxMode::DangerFullAccess);
    assert!(!facts.denied);
    assert_eq!(facts.enforcement, None);
    let bg = sh.start(spec).expect("start");
    bg.done().await;
    assert_eq!(bg.sandbox_facts(), None);
    assert!(rec.calls().is_empty());
}

#[tokio::test]
async fn confined_calls_hand_the_bash_argv_and_policy_and_spawn_the_result_verbatim() {
    let rec = Recording::script(PASS_THROUGH);
    let sh = shell(rec.clone());
    // The policy in the request is what the sandbox gets (here read-only, root = host cwd).
    let cwd = std::fs::canonicalize(std::env::current_dir().expect("cwd")).expect("canonical");
    let mut req = ShellRequest::new("echo hi", SandboxPolicy::bare(SandboxMode::ReadOnly, &cwd));
    req.workdir = Some(PathBuf::from("/tmp"));
    let r = sh
        .run(sh.spec_for(req).expect("resolve"))
        .await
        .expect("run");
    assert_eq!(
        (r.stdout.text.as_str(), r.stderr.text.as_str()),
        ("hi\n", "runner\n")
    );
    let spec = sh
        .spec_for(request("echo bg", Some(SandboxMode::WorkspaceWrite)))
        .expect("resolve");
    let bg = sh.start(spec).expect("start");
    bg.done().await;
    let calls = rec.calls();
    assert_eq!(calls.len(), 2, "consulted once per run and per start");
    assert_eq!(calls[0].0, ["bash", "-c", "echo hi"]);
    assert_eq!(calls[0].1.mode, SandboxMode::ReadOnly);
    assert_eq!(calls[0].1.workspace_root, cwd);
    assert_eq!(calls[1].1.mode, SandboxMode::WorkspaceWrite);
    assert_eq!(calls[1].1.workspace_root, PathBuf::from("/tmp"));
}

#[tokio::test]
async fn a_runner_failure_outranks_a_denial() {
    let rec = Recording::script(
        "echo 'bwrap: Can not mount tmpfs' >&2; echo 'x: Read-only file system' >&2; exit 1",
    );
    let sh = shell(rec);
    let spec = sh
        .spec_for(request("true", Some(SandboxMode::ReadOnly)))
        .expect("resolve");
    let e = sh.run(spec.clone()).await.expect_err("runner failure");
    assert_eq!(e.code(), ErrorCode::SandboxUnavailable);
    assert!(
        e.message()
            .ends_with("Runner failure: bwrap: Can not mount tmpfs"),
        "{}",
        e.message()
    );
    let bg = sh.start(spec).expect("start");
    bg.done().await;
    let facts = bg.sandbox_facts().expect("facts");
    assert!(facts.runner_failed);
    assert!(!facts.denied);
}

#[tokio::test]
async fn a_runner_that_cannot_be_spawned_is_sandbox_unavailable_but_a_bad_workdir_is_not() {
    let rec = Arc::new(Recording {
        calls: Mutex::new(Vec::new()),
        runner: vec!["/nonexistent/bwrap".into()],
    });
    let sh = shell(rec);
    let spec = sh
        .spec_for(request("true", Some(SandboxMode::ReadOnly)))
        .expect("resolve");
    let e = sh.run(spec.clone()).await.expect_err("no runner");
    assert_eq!(e.code(), ErrorCode::SandboxUnavailable);
    assert!(e.message().contains("Runner failure: "), "{}", e.message());
    assert!(
        e.message().contains("/nonexistent/bwrap"),
        "{}",
        e.message()
    );
    let e = sh.start(spec).expect_err("no runner");
    assert_eq!(e.code(), ErrorCode::SandboxUnavailable);

    let mut bad = request("true", Some(SandboxMode::ReadOnly));
    bad.workdir = Some(PathBuf::from("/nonexistent/workdir"));
    let spec = sh.spec_for(bad).expect("resolve");
    let e = sh.run(spec).await.expect_err("bad workdir");
    assert_eq!(e.code(), ErrorCode::ProcessCwdInvalid);
}

#[tokio::test]
async fn a_pre_aborted_call_is_aborted_before_any_runner_attribution() {
    let rec = Arc::new(Recording {
        calls: Mutex::new(Vec::new()),
        runner: vec!["/nonexistent/bwrap".into()],
    });
    let sh = shell(rec);
    let mut req = request("true", Some(SandboxMode::ReadOnly));
    let cancel = CancelToken::new();
    cancel.cancel("user hit stop");
    req.cancel = Some(cancel);
    let e = sh
        .run(sh.spec_for(req).expect("resolve"))
        .await
        .expect_err("aborted");
    assert_eq!(e.code(), ErrorCode::Aborted);
    assert!(e.message().contains("user hit stop"), "{}", e.message());
}

#[tokio::test]
async fn a_denial_needs_a_nonzero_exit_and_the_dialect_and_a_signal_is_never_one() {
    let sh = shell(Recording::script(PASS_THROUGH));
    let mode = Some(SandboxMode::ReadOnly);
    let run = |cmd: &'static str| {
        let sh = &sh;
        async move {
            let spec = sh.spec_for(request(cmd, mode)).expect("resolve");
            sh.run(spec).await.expect("run").sandbox.expect("facts")
        }
    };
    assert!(
        run("echo 'f: Read-only file system' >&2; exit 1")
            .await
            .denied
    );
    assert!(
        !run("echo 'f: Read-only file system' >&2; exit 0")
            .await
            .denied
    );
    assert!(!run("echo 'f: Permission denied' >&2; exit 1").await.denied);
    assert!(
        !run("echo 'f: Read-only file system' >&2; kill -9 $$")
            .await
            .denied
    );
}

#[tokio::test]
async fn overlapping_background_jobs_keep_their_own_facts() {
    let sh = shell(Recording::script(PASS_THROUGH));
    let start = |cmd: &str, mode| sh.start(sh.spec_for(request(cmd, Some(mode))).expect("resolve"));
    let a = start(
        "sleep 0.3; echo 'a: Read-only file system' >&2; exit 1",
        SandboxMode::WorkspaceWrite,
    )
    .expect("start a");
    let b = start("exit 0", SandboxMode::ReadOnly).expect("start b");
    assert_eq!(a.sandbox_facts(), None, "facts wait for the job to settle");
    b.done().await;
    a.done().await;
    assert_eq!(a.status(), ProcessStatus::Completed);
    let fa = a.sandbox_facts().expect("a");
    let fb = b.sandbox_facts().expect("b");
    assert_eq!((fa.mode, fa.denied), (SandboxMode::WorkspaceWrite, true));
    assert_eq!(fa.enforcement, Some(Enforcement::Partial("test".into())));
    assert_eq!((fb.mode, fb.denied), (SandboxMode::ReadOnly, false));
    assert_eq!(fb.enforcement, Some(Enforcement::Full));
}
