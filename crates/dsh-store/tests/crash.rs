//! A writer process killed (SIGKILL) while it appends never corrupts what it committed:
//! the session reopens with consecutive, readable events, and takes new ones.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use dsh_core::journal::Record;
use dsh_core::SessionId;
use dsh_store::session::{EventKind, SessionLog};
use dsh_store::{JsonlStorage, SqliteStorage, Storage};

const HELPER: &str = "DSH_TEST_CRASH_WRITER";

fn store(kind: &str, dir: &Path) -> Arc<dyn Storage> {
    match kind {
        "sqlite" => Arc::new(SqliteStorage::open(dir.join("dsh.db")).expect("sqlite")),
        _ => Arc::new(JsonlStorage::open(dir.join("jsonl")).expect("jsonl")),
    }
}

#[test]
fn a_killed_writer_leaves_every_committed_event_intact() {
    if let Some(args) = std::env::var_os(HELPER) {
        return writer(&args.to_string_lossy());
    }
    for kind in ["sqlite", "jsonl"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "a_killed_writer_leaves_every_committed_event_intact",
                "--nocapture",
            ])
            .env(HELPER, format!("{kind}:{}", dir.path().display()))
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn writer");
        // Kill it mid-stream, once it has committed a good number of events.
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut committed = 0u64;
        for line in lines.by_ref() {
            if let Some(n) = line.expect("line").strip_prefix("COMMITTED ") {
                committed = n.parse().expect("seq");
                if committed >= 300 {
                    break;
                }
            }
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
        assert!(committed >= 300, "{kind}: the writer did not get going");

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async {
            let log = SessionLog::new(store(kind, dir.path()))
                .await
                .expect("reopen");
            let s = log.open(&SessionId::new("crash")).await.expect("open");
            let events = s.events().await.expect("events");
            // Every event the writer reported committed is there, in order, readable; the
            // open turn was closed by recovery.
            assert!(events.len() as u64 >= committed, "{kind}: lost events");
            for (i, e) in events.iter().enumerate() {
                assert_eq!(e.seq, i as u64 + 1, "{kind}: a gap at {i}");
            }
            assert_eq!(
                events.last().expect("last").kind,
                EventKind::TurnEnd,
                "{kind}"
            );
            let next = s
                .append(Record::SandboxMode {
                    mode: "read-only".into(),
                })
                .await;
            assert!(next.is_ok(), "{kind}: the log takes new events");
        });
    }
}

/// Appends events as fast as it can, printing each committed seq, until killed.
fn writer(args: &str) {
    let (kind, dir) = args.split_once(':').expect("kind:dir");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    rt.block_on(async {
        let log = SessionLog::new(store(kind, Path::new(dir)))
            .await
            .expect("log");
        let s = log
            .create_with_id(SessionId::new("crash"), Path::new("/"))
            .await
            .expect("create");
        let turn = s.begin_turn().await.expect("turn");
        let payload = "x".repeat(2000);
        loop {
            let e = s
                .append(Record::ToolCall {
                    turn: Some(turn),
                    call_id: "c".into(),
                    name: "write".into(),
                    arguments: payload.as_str().into(),
                })
                .await
                .expect("append");
            println!("COMMITTED {}", e.seq);
        }
    });
}
