//! The session log stays bounded on both providers: long values are logged as a head, a
//! length and a digest, and past its cap a session's events are summarised, for good.
// Regression: issue 12 (ten minutes of large arguments made one session's database 16 GB).

use std::path::Path;
use std::sync::Arc;

use dsh_core::journal::{Logged, Record};
use dsh_store::log_bounds::LOG_HEAD_BYTES;
use dsh_store::session::{EventKind, SessionLog};
use dsh_store::{JsonlStorage, SqliteStorage, Storage};
use serde_json::{json, Value};

fn store(kind: &str, dir: &Path) -> Arc<dyn Storage> {
    match kind {
        "sqlite" => Arc::new(SqliteStorage::open(dir.join("dsh.db")).expect("sqlite")),
        _ => Arc::new(JsonlStorage::open(dir.join("jsonl")).expect("jsonl")),
    }
}

const KINDS: [&str; 2] = ["sqlite", "jsonl"];

/// The bytes of every file under `dir`.
fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .map(|e| {
            let md = e.metadata().expect("metadata");
            if md.is_dir() {
                du(&e.path())
            } else {
                md.len()
            }
        })
        .sum()
}

#[tokio::test]
async fn a_long_value_is_logged_as_its_head_length_and_digest_and_reloads_so() {
    for kind in KINDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SessionLog::new(store(kind, dir.path())).await.expect("log");
        let s = log.create(Path::new("/w")).await.expect("create");
        let big = format!("{{\"content\":\"{}\"}}", "x".repeat(4 << 20));
        for i in 0..20 {
            let e = s
                .append(Record::ToolCall {
                    turn: Some(1),
                    call_id: format!("c{i}").into(),
                    name: "write".into(),
                    arguments: big.as_str().into(),
                })
                .await
                .expect("append");
            assert_eq!(e.data["arguments"]["bytes"], json!(big.len()), "{kind}");
            assert_eq!(
                e.data["arguments"]["head"],
                json!(&big[..LOG_HEAD_BYTES]),
                "{kind}"
            );
            assert_eq!(
                e.data["arguments"]["sha256"].as_str().map(str::len),
                Some(64),
                "{kind}"
            );
            assert_eq!(e.data["callId"], json!(format!("c{i}")), "{kind}");
            // Read back typed, the arguments are what was kept of them.
            let Ok(Record::ToolCall { arguments, .. }) = e.record() else {
                panic!("{kind}: {e:?}")
            };
            assert_eq!(arguments.text(), &big[..LOG_HEAD_BYTES], "{kind}");
            assert_eq!(arguments.whole(), None, "{kind}");
        }
        let before = s.events().await.expect("events");
        let id = s.id().clone();
        drop(s);
        drop(log);
        // 80 MiB of arguments were appended; a few hundred KiB were kept.
        let size = du(dir.path());
        assert!(size < 2 << 20, "{kind}: {size} bytes on disk");
        let log = SessionLog::new(store(kind, dir.path())).await.expect("log");
        let s = log.open(&id).await.expect("open");
        assert_eq!(s.events().await.expect("events"), before, "{kind}");
    }
}

/// `result(i)` as the record a producer appends.
fn result_record(i: u32) -> Record {
    Record::from_data(EventKind::ToolResult, &result(i)).expect("a tool/result")
}

/// A `tool/result` as the pipeline logs it for a successful `write`.
fn result(i: u32) -> Value {
    json!({
        "turn": 1, "callId": format!("c{i}"), "name": "write", "isError": false,
        "text": "t".repeat(1000),
        "meta": {"key": "/w/f.txt", "version": format!("v{i}"), "path": "/w/f.txt"},
    })
}

#[tokio::test]
async fn a_session_past_its_cap_is_marked_once_and_summarised_even_after_a_reload() {
    for kind in KINDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let cap = 20_000;
        let log = SessionLog::with_cap(store(kind, dir.path()), cap)
            .await
            .expect("log");
        let s = log.create(Path::new("/w")).await.expect("create");
        for i in 0..40 {
            s.append(result_record(i)).await.expect("append");
        }
        let events = s.events().await.expect("events");
        let marks: Vec<usize> = (0..events.len())
            .filter(|&i| events[i].kind == EventKind::LogCapped)
            .collect();
        assert_eq!(marks.len(), 1, "{kind}: {events:?}");
        let at = marks[0];
        // Every event before the marker is whole; together they reached the cap; the
        // one before them did not.
        let stored = |e: &dsh_store::session::Event| {
            json!({"seq": e.seq, "time": e.time_ms, "type": e.kind.as_str(), "data": e.data})
                .to_string()
                .len() as u64
        };
        let logged: u64 = events[..at].iter().map(stored).sum();
        assert!(logged >= cap, "{kind}: {logged}");
        assert!(logged - stored(&events[at - 1]) < cap, "{kind}");
        assert_eq!(
            events[at].data,
            json!({"capBytes": cap, "loggedBytes": logged}),
            "{kind}"
        );
        for (i, e) in events[..at].iter().enumerate() {
            assert_eq!(e.data, result(i as u32), "{kind}");
        }
        // Every event after it is summarised: ids, outcome and the meta facts a replay
        // needs stay; the text is its size and digest.
        for e in &events[at + 1..] {
            let i = e.seq - 2;
            let mut want = result(i as u32);
            want["text"] = json!({"bytes": 1000, "sha256": events[at + 1].data["text"]["sha256"]});
            want["summarised"] = json!({"bytes": result(i as u32).to_string().len()});
            assert_eq!(e.data, want, "{kind}");
            // A summary reads back typed: ids, outcome and meta kept, the text as its
            // size and digest.
            let Ok(Record::ToolResult(r)) = e.record() else {
                panic!("{kind}: {e:?}")
            };
            assert_eq!(r.call_id.whole(), Some(format!("c{i}").as_str()), "{kind}");
            assert!(!r.failed(), "{kind}");
            assert!(matches!(r.text, Logged::Cut { bytes: 1000, .. }), "{kind}");
            assert_eq!(r.meta, Some(result(i as u32)["meta"].clone()), "{kind}");
        }
        let id = s.id().clone();
        drop(s);
        drop(log);
        let log = SessionLog::with_cap(store(kind, dir.path()), cap)
            .await
            .expect("log");
        let s = log.open(&id).await.expect("open");
        assert_eq!(s.events().await.expect("events"), events, "{kind}");
        let e = s.append(result_record(99)).await.expect("append");
        assert!(e.data.get("summarised").is_some(), "{kind}: {e:?}");
        let again = s.events().await.expect("events");
        assert_eq!(
            again
                .iter()
                .filter(|e| e.kind == EventKind::LogCapped)
                .count(),
            1,
            "{kind}: the marker is written once"
        );
    }
}
