//! The World the tests run in: real sandbox, real SQLite session log, real files.

use std::sync::Arc;

use dsh_approval::{ApprovalOutcome, ApprovalPolicy, ApprovalService, ScriptedAnswerer};
use dsh_core::CallId;
use dsh_fs::{LocalFs, SandboxedFs};
use dsh_process::LocalSubprocess;
use dsh_sandbox::{LocalSandbox, Network, SandboxMode};
use dsh_shell::bash::LocalBash;
use dsh_store::session::{Session, SessionLog};
use dsh_store::SqliteStorage;
use dsh_tools::bash::BashTool;
use dsh_tools::files::{EditTool, ReadTool, WriteTool};
use dsh_tools::image::ReadImageTool;
use dsh_tools::search::{GlobTool, GrepTool};
use dsh_tools::PolicyService;
use dsh_tools::{ToolCall, ToolResult, World, WorldBuilder};
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
    let subprocess = Arc::new(LocalSubprocess::new());
    let sandbox = Arc::new(LocalSandbox::new());
    let shell = LocalBash::new(subprocess.clone()).with_sandbox(sandbox.clone());
    let approval = Arc::new(ApprovalService::new(ApprovalPolicy::Ask));
    let answers = Arc::new(ScriptedAnswerer::new(answers));
    approval.add_answerer(answers.clone());
    let echo = Arc::new(Echo::default());
    let builder = WorldBuilder::new()
        .subprocess(subprocess)
        .and_then(|b| b.shell(Arc::new(shell)))
        .and_then(|b| b.sandbox(sandbox))
        .and_then(|b| {
            b.policy(PolicyService::new(
                SandboxMode::ReadOnly,
                Network::Deny,
                &ws,
            ))
        })
        .and_then(|b| b.approval(approval))
        .and_then(|b| b.sessions(sessions))
        .and_then(|b| b.tool(echo.clone()))
        .and_then(|b| b.tool(Arc::new(BashTool)))
        .and_then(|b| b.tool(Arc::new(ReadTool)))
        .and_then(|b| b.tool(Arc::new(WriteTool)))
        .and_then(|b| b.tool(Arc::new(EditTool)))
        .and_then(|b| b.tool(Arc::new(GlobTool)))
        .and_then(|b| b.tool(Arc::new(GrepTool)))
        .and_then(|b| b.tool(Arc::new(ReadImageTool)))
        .and_then(|b| {
            let fs = SandboxedFs::new(LocalFs::new(&ws));
            b.fs(Arc::new(fs))
        })
        .expect("builder");
    let world = customize(builder).build().expect("world");
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
        arguments: args.to_string(),
    }
}

pub fn code(r: &ToolResult) -> Option<&str> {
    r.error.as_ref().map(|e| e.code.as_str())
}
