//! A policy's `ask` (a pre-execute hook, not a sandbox escalation) reaches the MCP client
//! as an `elicitation/create` request; accept runs the call, decline refuses it.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::HarnessError;
use dsh_mcp::{DshServer, LineTransport, Opened, Opener, Workspace};
use dsh_store::session::SessionLog;
use dsh_store::SqliteStorage;
use dsh_tools::{CallView, PreDecision, PreExecute, Preset, WorldBuilder, WorldConfig};
use rmcp::ServiceExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Asks before every `bash` call.
struct AskFirst;

#[async_trait]
impl PreExecute for AskFirst {
    async fn pre_execute(&self, call: &CallView) -> Result<PreDecision, HarnessError> {
        Ok(if call.name == "bash" {
            PreDecision::Ask(Some("the team policy asks before every command".into()))
        } else {
            PreDecision::Allow
        })
    }
}

async fn open(ws: PathBuf) -> Result<Opened, HarnessError> {
    let storage = Arc::new(SqliteStorage::open(ws.join("state/dsh.db"))?);
    let sessions = Arc::new(SessionLog::new(storage).await?);
    let session = sessions.create(&ws).await?;
    let world = WorldBuilder::new()
        .preset(Preset::Sandboxed, &WorldConfig::new(&ws), sessions)?
        .pre_execute(Arc::new(AskFirst))
        .build()?;
    session.begin_turn().await?;
    Ok((Arc::new(world), session))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_ask_is_elicited_and_its_answer_decides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let opener: Opener = Arc::new(|ws| Box::pin(open(ws)));
    let server = DshServer::new(
        Workspace {
            dir: ws,
            explicit: true,
        },
        opener,
    );
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (server_r, server_w) = tokio::io::split(server_io);
    let running = tokio::spawn(server.clone().serve(LineTransport::new(server_r, server_w)));
    let (client_r, mut client_w) = tokio::io::split(client_io);
    let mut lines = BufReader::new(client_r).lines();
    let mut send = async |v: Value| {
        client_w
            .write_all(format!("{v}\n").as_bytes())
            .await
            .expect("write");
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "test", "version": "0"}}}),
    )
    .await;
    let init: Value =
        serde_json::from_str(&lines.next_line().await.expect("read").expect("line")).expect("json");
    assert_eq!(init["id"], 1, "{init}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    for (id, action, want) in [
        (2, "accept", "asked\n"),
        (
            3,
            "decline",
            "Error: tool \"bash\" was declined by the user or the client",
        ),
    ] {
        send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "bash", "arguments": {"command": "echo asked", "description": "x"}}}))
        .await;
        let ask: Value =
            serde_json::from_str(&lines.next_line().await.expect("read").expect("line"))
                .expect("json");
        assert_eq!(ask["method"], "elicitation/create", "{ask}");
        let message = ask["params"]["message"].as_str().expect("message");
        assert!(
            message.contains("the team policy asks before every command"),
            "{message}"
        );
        send(
            json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"action": action, "content": {}}}),
        )
        .await;
        let result: Value =
            serde_json::from_str(&lines.next_line().await.expect("read").expect("line"))
                .expect("json");
        assert_eq!(result["id"], id, "{result}");
        assert_eq!(
            result["result"]["content"][0]["text"], want,
            "{action}: {result}"
        );
    }
    server.close().await;
    running.abort();
}
