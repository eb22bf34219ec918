//! The World the tests run in: real sandbox, real SQLite session log, real files.

use std::sync::Arc;

use dsh_approval::{ApprovalOutcome, ScriptedAnswerer};
use dsh_core::CallId;
use dsh_store::session::{Session, SessionLog};
use dsh_store::SqliteStorage;
use dsh_tools::{Preset, ToolCall, ToolResult, World, WorldBuilder, WorldConfig};
use serde_json::Value;

use crate::pipeline::Echo;

pub struct Fixture {
    pub _dir: tempfile::TempDir,
    pub world: World,
    pub echo: Arc<Echo>,
    pub session: Arc<Session>,
    pub answers: Arc<ScriptedAnswerer>,
}

pub async fn fixture(
    customize: impl FnOnce(WorldBuilder) -> WorldBuilder,
    answers: Vec<ApprovalOutcome>,
) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let storage = Arc::new(SqliteStorage::open(ws.join("state/dsh.db")).expect("sqlite"));
    let sessions = Arc::new(SessionLog::new(storage).await.expect("log"));
    let session = sessions.create(&ws).await.expect("session");
    let answers = Arc::new(ScriptedAnswerer::new(answers));
    let echo = Arc::new(Echo::default());
    let builder = WorldBuilder::new()
        .preset(Preset::Sandboxed, &WorldConfig::new(&ws), sessions)
        .and_then(|b| b.tool(echo.clone()))
        .expect("builder");
    let world = customize(builder).build().expect("world");
    world.approval().add_answerer(answers.clone());
    Fixture {
        _dir: dir,
        world,
        echo,
        session,
        answers,
    }
}

pub fn call(name: &str, args: Value) -> ToolCall {
    ToolCall {
        call_id: CallId::new(format!("c{}", dsh_core::spill::random_hex(6))),
        name: name.into(),
        arguments: args,
    }
}

pub fn code(r: &ToolResult) -> Option<&str> {
    r.error.as_ref().map(|e| e.code.as_str())
}
