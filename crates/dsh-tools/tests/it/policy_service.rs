//! The sandbox policy service against a real session log.

use std::path::Path;
use std::sync::Arc;

use dsh_core::journal::EventKind;
use dsh_sandbox::{Network, SandboxMode};
use dsh_store::session::SessionLog;
use dsh_store::{JsonlStorage, Storage};
use dsh_tools::PolicyService;

#[tokio::test]
async fn precedence_is_explicit_then_session_then_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> =
        Arc::new(JsonlStorage::open(dir.path().join("s")).expect("store"));
    let log = SessionLog::new(storage).await.expect("log");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let s = log.create(&ws).await.expect("session");
    let svc = PolicyService::new(SandboxMode::ReadOnly, Network::Deny, &ws);
    let p = svc
        .armed_policy(Some((&*s, &ws)), None)
        .await
        .policy()
        .clone();
    assert_eq!((p.mode, p.network), (SandboxMode::ReadOnly, Network::Deny));
    assert_eq!(svc.override_of(&*s).await, None);
    svc.set_mode(&*s, SandboxMode::WorkspaceWrite)
        .await
        .expect("set");
    svc.set_mode(&*s, SandboxMode::DangerFullAccess)
        .await
        .expect("set");
    let modes = s
        .events()
        .await
        .expect("events")
        .iter()
        .filter(|e| e.kind == EventKind::SandboxMode)
        .count();
    assert_eq!(modes, 2, "one event per set");
    assert_eq!(
        svc.armed_policy(Some((&*s, &ws)), None)
            .await
            .policy()
            .clone()
            .mode,
        SandboxMode::DangerFullAccess
    );
    svc.set_mode(&*s, SandboxMode::ReadOnly).await.expect("set");
    let p = svc
        .armed_policy(Some((&*s, &ws)), Some(SandboxMode::WorkspaceWrite))
        .await
        .policy()
        .clone();
    assert_eq!(
        p.mode,
        SandboxMode::WorkspaceWrite,
        "an explicit mode beats the session"
    );
    assert_eq!(p.workspace_root, ws);
    let agentless = svc.armed_policy(None, None).await.policy().clone();
    assert_eq!(
        (agentless.mode, agentless.workspace_root),
        (SandboxMode::ReadOnly, ws.clone())
    );
}

#[tokio::test]
async fn the_root_is_canonicalised_before_dot_dot_is_folded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(dir.path()).expect("canonical");
    let physical = base.join("physical");
    std::fs::create_dir_all(physical.join("child")).expect("dirs");
    std::os::unix::fs::symlink(physical.join("child"), base.join("link")).expect("link");
    let svc = PolicyService::new(SandboxMode::ReadOnly, Network::Deny, Path::new("/"));
    let storage: Arc<dyn Storage> = Arc::new(JsonlStorage::open(base.join("s")).expect("store"));
    let log = SessionLog::new(storage).await.expect("log");
    let cwd = base.join("link/..");
    let s = log.create(&cwd).await.expect("session");
    // The session log resolves the directory once, when the session is created; a call
    // passes the directory as recorded.
    let p = svc
        .armed_policy(Some((&*s, &s.header().cwd)), None)
        .await
        .policy()
        .clone();
    assert_eq!(p.workspace_root, physical, "link/.. follows the link first");
}

#[test]
fn the_context_text_is_per_mode_and_byte_stable() {
    let policy = |mode| dsh_protect::workspace_policy(mode, "/projects/../projects/current");
    let ro = PolicyService::context_text(&policy(SandboxMode::ReadOnly));
    assert!(
        ro.starts_with("Current DSH file policy: read-only."),
        "{ro}"
    );
    assert!(!ro.contains("/projects"));
    let ww = PolicyService::context_text(&policy(SandboxMode::WorkspaceWrite));
    assert!(
        ww.starts_with("Current DSH file policy: workspace-write."),
        "{ww}"
    );
    assert!(
        ww.contains("under the session workspace \"/projects/current\"."),
        "{ww}"
    );
    assert!(
        !ww.contains("/tmp") && !ww.contains("/var/tmp"),
        "no host temp path: {ww}"
    );
    let full = PolicyService::context_text(&policy(SandboxMode::DangerFullAccess));
    assert!(
        full.starts_with("Current DSH file policy: danger-full-access."),
        "{full}"
    );
}

// The policy reads are fenced by is never decided: it walks nothing, and under
// workspace-write it confines no command and lets the file tools write nothing.
#[tokio::test]
async fn a_read_policy_is_never_decided() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let extra = ws.join("extra");
    std::fs::create_dir(&extra).expect("mkdir");
    let svc = PolicyService::new(SandboxMode::WorkspaceWrite, Network::Deny, &ws)
        .with_writable_roots([extra.clone()])
        .with_deny_read([ws.join("*.pem")]);
    let p = svc.read_policy(None).await;
    assert_eq!(p.mode, SandboxMode::WorkspaceWrite);
    assert_eq!(p.unsettled, None, "undecided");
    assert!(p.laid_out.is_empty(), "{:?}", p.laid_out);
    assert_eq!(
        p.writable_roots,
        vec![extra.clone()],
        "its roots stay readable"
    );
    assert!(p.denies_read(&ws.join("id.pem")));
    let sandbox = dsh_sandbox::LocalSandbox::new();
    let e = dsh_sandbox::Sandbox::confine(&sandbox, &["true".into()], &p)
        .expect_err("an undecided policy confines nothing");
    assert_eq!(e.code(), dsh_core::ErrorCode::Internal, "{}", e.message());
    // Under read-only the extra roots are not the policy's.
    let ro =
        PolicyService::new(SandboxMode::ReadOnly, Network::Deny, &ws).with_writable_roots([extra]);
    assert!(ro.read_policy(None).await.writable_roots.is_empty());
}

/// An armed policy runs the check after the command whether it is closed, dropped, or its
/// close is dropped before the check ran: a hook planted while it is armed is set aside
/// each way.
#[tokio::test]
async fn an_armed_policy_checks_when_closed_and_when_dropped() {
    for how in ["closed", "dropped", "close dropped"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = std::fs::canonicalize(dir.path()).expect("canonical");
        let svc = PolicyService::new(SandboxMode::WorkspaceWrite, Network::Deny, &ws);
        let armed = svc.armed_policy(None, None).await;
        assert_eq!(armed.policy().mode, SandboxMode::WorkspaceWrite);
        // What a command under it would plant: a repository with a hook git runs.
        let git = std::process::Command::new("git")
            .args(["init", "-q", "sub"])
            .current_dir(&ws)
            .status()
            .expect("git");
        assert!(git.success());
        let hook = ws.join("sub/.git/hooks/pre-commit");
        std::fs::write(&hook, "#!/bin/sh\necho pwned\n").expect("hook");
        match how {
            "closed" => {
                let found = armed.close().await;
                assert!(
                    found.found.iter().any(|p| p.starts_with(ws.join("sub"))),
                    "{:?}",
                    found.found
                );
            }
            "dropped" => drop(armed),
            _ => {
                // The close itself is dropped before its check ran: the drop runs it.
                let close = std::pin::pin!(armed.close());
                // Ready at once only if the check ran already; pending, it is dropped here.
                let _ = futures_poll_once(close);
            }
        }
        assert!(!hook.exists(), "{how}: the hook was set aside");
    }
}

/// Polls `future` once: its output if it was ready; dropped otherwise.
fn futures_poll_once<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> Option<F::Output> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match future.poll(&mut cx) {
        std::task::Poll::Ready(out) => Some(out),
        std::task::Poll::Pending => None,
    }
}
