//! The check after a call is a step of the call's life: a tool that runs a confined
//! command under a policy that can write gets it without calling it, on every outcome.

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{CancelToken, ErrorCode, HarnessError};
use dsh_sandbox::SandboxMode;
use dsh_shell::ShellRequest;
use dsh_store::session::SessionLog;
use dsh_store::SqliteStorage;
use dsh_tools::{CallContext, Preset, Tool, ToolOutput, World, WorldBuilder, WorldConfig};
use serde_json::{json, Value};

use crate::support::call;

/// Runs `command` confined under the call's policy and says only that it ran; with
/// `fail`, returns an error after it ran. It never calls the check.
struct Plants;

#[async_trait]
impl Tool for Plants {
    fn name(&self) -> &str {
        "plants"
    }
    fn description(&self, _: &World) -> String {
        "runs a command".into()
    }
    fn parameters(&self, _: &World) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let policy = ctx.policy().await;
        let command = args["command"].as_str().unwrap_or_default();
        let mut request = ShellRequest::new(command, policy.clone());
        request.workdir = Some(policy.workspace_root.clone());
        let shell = ctx.world.shell();
        let result = shell.run(shell.spec_for(request)?).await?;
        if args["hang"] == json!(true) {
            // A body that never ends: its caller gives up on the call.
            std::future::pending::<()>().await;
        }
        if args["fail"] == json!(true) {
            return Err(HarnessError::new(
                ErrorCode::Internal,
                "failed after it ran",
            ));
        }
        Ok(ToolOutput {
            text: format!("ran: exit {:?}", result.exit_code),
            meta: None,
            image: None,
        })
    }
}

async fn world_with_plants(ws: &std::path::Path) -> (World, Arc<dsh_store::session::Session>) {
    let storage = Arc::new(SqliteStorage::open(ws.join("state/dsh.db")).expect("sqlite"));
    let sessions = Arc::new(SessionLog::new(storage).await.expect("log"));
    let session = sessions.create(ws).await.expect("session");
    let config = WorldConfig::new(ws).with_mode(SandboxMode::WorkspaceWrite);
    let world = WorldBuilder::new()
        .preset(Preset::Sandboxed, &config, sessions)
        .and_then(|b| b.tool(Arc::new(Plants)))
        .and_then(WorldBuilder::build)
        .expect("world");
    (world, session)
}

const PLANT: &str =
    "git init -q sub && printf '#!/bin/sh\\necho pwned\\n' > sub/.git/hooks/pre-commit && chmod +x sub/.git/hooks/pre-commit";

/// A call of `plants` planting a hook (with `args` added) in a fresh workspace-write World:
/// its result, its session, whether the hook is still where git would run it, and the
/// folder holding the workspace and the log (kept while the test reads them).
async fn plant(
    args: Value,
) -> (
    dsh_tools::ToolResult,
    Arc<dsh_store::session::Session>,
    bool,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session) = world_with_plants(&ws).await;
    let mut arguments = json!({"command": PLANT});
    if let (Some(a), Some(more)) = (arguments.as_object_mut(), args.as_object()) {
        a.extend(more.clone());
    }
    let r = world
        .call(
            Some(&session),
            call("plants", arguments),
            CancelToken::new(),
        )
        .await;
    let armed = ws.join("sub/.git/hooks/pre-commit").exists();
    (r, session, armed, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_tool_that_writes_gets_the_check_without_calling_it() {
    let (r, session, armed, _dir) = plant(json!({})).await;
    assert!(!r.is_error, "{r:?}");
    assert!(r.text.starts_with("ran: exit Some(0)"), "{r:?}");
    assert!(
        r.text.contains("[sandbox: this call made") && r.text.contains("sub/.git"),
        "the check's line is not in the result: {r:?}"
    );
    assert!(!armed, "the planted hook is still where git would run it");
    // The check is in the session log too, as for a built-in tool.
    let events = session.events().await.expect("events");
    assert!(
        events
            .iter()
            .any(|e| e.kind == dsh_core::journal::EventKind::SandboxChecked),
        "no sandbox/checked event"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_fails_after_its_command_ran_still_gets_the_check() {
    let (r, _session, armed, _dir) = plant(json!({"fail": true})).await;
    assert!(r.is_error, "{r:?}");
    assert!(
        r.text.contains("failed after it ran") && r.text.contains("[sandbox: this call made"),
        "the error does not say what the check found: {r:?}"
    );
    assert!(!armed, "the planted hook is still where git would run it");
}

// A call whose future is dropped after its command ran (its caller gave up, without
// cancelling it) still gets the check: the hook is set aside and the check is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_still_gets_the_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session) = world_with_plants(&ws).await;
    let hook = ws.join("sub/.git/hooks/pre-commit");
    let mut running = Box::pin(world.call(
        Some(&session),
        call("plants", json!({"command": PLANT, "hang": true})),
        CancelToken::new(),
    ));
    let planted = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !hook.exists() {
        assert!(std::time::Instant::now() < planted, "the command never ran");
        tokio::select! {
            r = &mut running => panic!("the call ended: {r:?}"),
            () = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
        }
    }
    drop(running);
    let checked = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let events = session.events().await.expect("events");
        let logged = events
            .iter()
            .any(|e| e.kind == dsh_core::journal::EventKind::SandboxChecked);
        if logged && !hook.exists() {
            break;
        }
        assert!(
            std::time::Instant::now() < checked,
            "no check after the dropped call (hook still armed: {})",
            hook.exists()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

// A runtime shut down while a call's command runs (its scope unclosed, dropped with the
// call's task) ends: the scope's check is handed to one task, never again and again.
#[test]
fn a_runtime_shut_down_mid_call_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (world, session) = runtime.block_on(world_with_plants(&ws));
    let world = Arc::new(world);
    let (w, s) = (world.clone(), session.clone());
    runtime.spawn(async move {
        w.call(
            Some(&s),
            call("plants", json!({"command": PLANT, "hang": true})),
            CancelToken::new(),
        )
        .await
    });
    let hook = ws.join("sub/.git/hooks/pre-commit");
    runtime.block_on(async {
        let planted = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !hook.exists() {
            assert!(std::time::Instant::now() < planted, "the command never ran");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(10));
}
