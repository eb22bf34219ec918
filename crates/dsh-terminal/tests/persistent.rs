//! [`PersistentBash`] through the shell seam, with real bash on a real PTY: state carries
//! from one run to the next, a run under another policy gets a fresh shell, a dropped run
//! leaves nothing half-typed, and what a persistent shell cannot do is refused.

use std::sync::Arc;
use std::time::Duration;

use dsh_core::{CancelToken, ErrorCode, Owner, SessionId};
use dsh_process::LocalSubprocess;
use dsh_sandbox::SandboxPolicy;
use dsh_shell::render::{render_result, FRESH_AFTER_CANCEL, FRESH_SHELL};
use dsh_shell::{FreshShell, RunResult, Shell, ShellConfig, ShellRequest};
use dsh_terminal::{BashBackend, PersistentBash, TerminalConfig, TerminalStatus, Terminals};

/// A persistent shell of a new owner, over terminals with the bash backend, unconfined.
fn shell() -> (Arc<Terminals>, Owner, Arc<PersistentBash>) {
    let terminals = Arc::new(Terminals::new(TerminalConfig::default()).expect("config"));
    terminals
        .register(Arc::new(BashBackend::new(
            Arc::new(LocalSubprocess::new()),
            None,
        )))
        .expect("backend");
    let owner = Owner::new(SessionId::new("s"));
    let shell = PersistentBash::new(terminals.clone(), owner.clone(), ShellConfig::default())
        .expect("shell");
    (terminals, owner, Arc::new(shell))
}

async fn run(shell: &PersistentBash, policy: &SandboxPolicy, command: &str) -> RunResult {
    let request = ShellRequest::new(command, policy.clone());
    shell
        .run(shell.spec_for(request).expect("spec"))
        .await
        .expect("run")
}

/// The owner's terminals that are running.
fn running(terminals: &Terminals, owner: &Owner) -> usize {
    terminals
        .list(owner)
        .iter()
        .filter(|s| s.status == TerminalStatus::Running)
        .count()
}

fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    std::fs::create_dir(ws.join("sub")).expect("sub");
    (dir, ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_carries_over_and_another_policy_gets_a_fresh_shell() {
    let (_dir, ws) = workspace();
    let (terminals, owner, shell) = shell();
    let policy = SandboxPolicy::danger_full_access(&ws);
    let r = run(&shell, &policy, "cd sub && export V=1").await;
    assert_eq!(render_result(&r), "(no output)");
    let first = r.persistent.clone().expect("persistent");
    assert!(first.fresh.is_none() && first.reset.is_none(), "{first:?}");
    let r = run(&shell, &policy, "pwd; echo V=$V; false").await;
    assert_eq!(
        render_result(&r),
        format!("{}\nV=1\n[exit code: 1]", ws.join("sub").display())
    );
    assert_eq!(r.exit_code, Some(1));
    assert_eq!(
        r.persistent.as_ref().expect("persistent").shell_id,
        first.shell_id
    );
    // Another protected path: the shell opened under the old policy must not run it.
    let other = policy.clone().with_protected([ws.join("sub")]);
    assert_eq!(shell.replaced_by(&policy).await, None);
    assert_eq!(shell.replaced_by(&other).await, Some(policy.clone()));
    let r = run(&shell, &other, "pwd; echo V=$V.").await;
    let fresh = r.persistent.clone().expect("persistent");
    assert_eq!(fresh.fresh, Some(FreshShell::PolicyChanged), "{fresh:?}");
    assert_ne!(fresh.shell_id, first.shell_id);
    assert_eq!(
        render_result(&r),
        format!("{FRESH_SHELL}\n{}\nV=.\n", ws.display())
    );
    assert_eq!(running(&terminals, &owner), 1, "the old shell is closed");
    terminals.dispose().await.expect("dispose");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_run_leaves_no_half_typed_command() {
    let (_dir, ws) = workspace();
    let (terminals, owner, shell) = shell();
    let policy = SandboxPolicy::danger_full_access(&ws);
    run(&shell, &policy, "export V=1").await;
    // The run is dropped once its command is typed and running: the shell it typed into
    // is closed, so the next run cannot be typed into a shell still busy with it.
    let marker = ws.join("started");
    let command = format!("touch {}; sleep 30", marker.display());
    let spec = shell
        .spec_for(ShellRequest::new(command, policy.clone()))
        .expect("spec");
    let mut running_run = Box::pin(shell.run(spec));
    let dropped = tokio::select! {
        r = &mut running_run => panic!("a 30 s command ended: {r:?}"),
        () = async {
            while !marker.exists() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        } => true,
    };
    assert!(dropped);
    drop(running_run);
    // The dropped run's shell is gone, and its policy is owed a check.
    assert_eq!(shell.settle().await, Some(policy.clone()));
    assert_eq!(running(&terminals, &owner), 0);
    assert_eq!(shell.settle().await, None, "owed once");
    let r = run(&shell, &policy, "echo V=$V.").await;
    assert_eq!(
        render_result(&r),
        format!("{FRESH_AFTER_CANCEL}\nV=.\n"),
        "a fresh shell, and said so: {r:?}"
    );
    assert_eq!(running(&terminals, &owner), 1);
    // A cancelled run says so in its own result; the next one says the shell is fresh.
    run(&shell, &policy, "export V=2").await;
    let cancel = CancelToken::new();
    let mut request = ShellRequest::new(
        format!("touch {}2; sleep 30", marker.display()),
        policy.clone(),
    );
    request.cancel = Some(cancel.clone());
    let spec = shell.spec_for(request).expect("spec");
    let cancelling = async {
        while !ws.join("started2").exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cancel.cancel(dsh_core::CancelReason::ClientCancelled);
    };
    let (r, ()) = tokio::join!(shell.run(spec), cancelling);
    let r = r.expect("a cancel is a result");
    assert!(r.aborted, "{r:?}");
    assert_eq!(
        r.persistent.as_ref().expect("persistent").reset,
        Some(dsh_shell::ShellReset::Aborted)
    );
    let r = run(&shell, &policy, "echo V=$V.").await;
    assert_eq!(
        render_result(&r),
        format!("{FRESH_AFTER_CANCEL}\nV=.\n"),
        "{r:?}"
    );
    let r = run(&shell, &policy, "echo again").await;
    assert_eq!(render_result(&r), "again\n", "told once: {r:?}");
    terminals.dispose().await.expect("dispose");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_persistent_shell_cannot_do_is_refused() {
    let (_dir, ws) = workspace();
    let (terminals, owner, shell) = shell();
    let policy = SandboxPolicy::danger_full_access(&ws);
    let mut request = ShellRequest::new("cat", policy.clone());
    request.stdin = Some(b"input".to_vec());
    let e = shell
        .run(shell.spec_for(request).expect("spec"))
        .await
        .expect_err("stdin");
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    let spec = shell
        .spec_for(ShellRequest::new("sleep 1", policy.clone()))
        .expect("spec");
    let e = shell.start(spec).expect_err("background");
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    let cancel = CancelToken::new();
    cancel.cancel(dsh_core::CancelReason::ClientCancelled);
    let mut request = ShellRequest::new("echo never", policy);
    request.cancel = Some(cancel);
    let e = shell
        .run(shell.spec_for(request).expect("spec"))
        .await
        .expect_err("cancelled");
    assert_eq!(e.code(), ErrorCode::Aborted);
    assert_eq!(running(&terminals, &owner), 0, "nothing was opened");
}
