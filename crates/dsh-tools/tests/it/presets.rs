//! World presets: what each one composes, and that a preset never runs a confined mode
//! unconfined.

use std::sync::Arc;

use dsh_core::{CancelToken, ErrorCode};
use dsh_process::LocalSubprocess;
use dsh_sandbox::SandboxMode;
use dsh_store::session::SessionLog;
use dsh_store::SqliteStorage;
use dsh_tools::{Preset, WorldBuilder, WorldConfig};
use serde_json::json;

use crate::support::{call, code};

async fn sessions(ws: &std::path::Path) -> Arc<SessionLog> {
    let storage = Arc::new(SqliteStorage::open(ws.join("state/dsh.db")).expect("sqlite"));
    Arc::new(SessionLog::new(storage).await.expect("log"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_preset_has_no_sandbox_and_never_runs_a_confined_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let log = sessions(&ws).await;
    let e = WorldBuilder::new()
        .preset(Preset::Local, &WorldConfig::new(&ws), log.clone())
        .err()
        .expect("a confined default mode is refused");
    assert_eq!(e.code(), ErrorCode::ConfigInvalid);
    assert!(
        e.message().contains("danger-full-access"),
        "{}",
        e.message()
    );

    let config = WorldConfig::new(&ws).with_mode(SandboxMode::DangerFullAccess);
    let world = WorldBuilder::new()
        .preset(Preset::Local, &config, log.clone())
        .and_then(WorldBuilder::build)
        .expect("world");
    assert!(!world.confines());
    assert!(world.sandbox().is_none());
    let session = log.create(&ws).await.expect("session");
    let bash = |cmd: &str| call("bash", json!({"command": cmd, "description": "write"}));
    let r = world
        .call(
            Some(&session),
            bash("echo x > unconfined"),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), None, "{}", r.text);
    assert!(ws.join("unconfined").exists());
    // A session that asks for a confined mode is refused, never run unconfined.
    world
        .policy()
        .set_mode(&*session, SandboxMode::WorkspaceWrite)
        .await
        .expect("mode");
    let r = world
        .call(
            Some(&session),
            bash("echo x > confined"),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), Some("SANDBOX_UNAVAILABLE"), "{}", r.text);
    assert!(!ws.join("confined").exists());
    let r = world
        .call(
            Some(&session),
            call("write", json!({"file_path": "written", "content": "x"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), Some("SANDBOX_UNAVAILABLE"), "{}", r.text);
    assert!(!ws.join("written").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preset_keeps_a_provider_given_first_and_refuses_a_second_session_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let log = sessions(&ws).await;
    let mine: Arc<dyn dsh_process::Subprocess> = Arc::new(LocalSubprocess::new());
    let world = WorldBuilder::new()
        .subprocess(mine.clone())
        .and_then(|b| b.preset(Preset::Sandboxed, &WorldConfig::new(&ws), log.clone()))
        .and_then(WorldBuilder::build)
        .expect("world");
    assert!(Arc::ptr_eq(world.subprocess(), &mine));
    assert!(world.confines());
    let names: Vec<String> = world.schemas().into_iter().map(|s| s.0).collect();
    assert_eq!(
        names,
        [
            "bash",
            "edit",
            "glob",
            "grep",
            "job_kill",
            "job_list",
            "job_output",
            "read",
            "read_image",
            "terminal_close",
            "terminal_list",
            "terminal_open",
            "terminal_read",
            "terminal_send",
            "terminal_signal",
            "write"
        ]
    );
    let e = WorldBuilder::new()
        .sessions(log.clone())
        .and_then(|b| b.preset(Preset::Sandboxed, &WorldConfig::new(&ws), log))
        .err()
        .expect("second log");
    assert_eq!(e.code(), ErrorCode::DuplicateService);
}
