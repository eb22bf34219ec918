//! One suite, run against both providers: the storage contract and the session log on it.

use std::path::Path;
use std::sync::Arc;

use dsh_core::journal::{Record, ToolResultRecord};
use dsh_core::{ErrorCode, SessionId};
use dsh_store::session::{EventKind, SessionLog};
use dsh_store::{JsonlStorage, SqliteStorage, Storage, UnitSpec};
use serde_json::json;

/// Opens the provider `kind` at `dir` (the same place each time).
fn store(kind: &str, dir: &Path) -> Arc<dyn Storage> {
    match kind {
        "sqlite" => Arc::new(SqliteStorage::open(dir.join("dsh.db")).expect("sqlite")),
        _ => Arc::new(JsonlStorage::open(dir.join("jsonl")).expect("jsonl")),
    }
}

fn spec(version: u32) -> UnitSpec {
    UnitSpec {
        name: "notes".into(),
        version,
        tables: vec!["items".into(), "tags".into()],
        has_global: true,
    }
}

const KINDS: [&str; 2] = ["sqlite", "jsonl"];

#[tokio::test]
async fn units_open_empty_round_trip_and_refuse_a_version_mismatch() {
    for kind in KINDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = store(kind, dir.path());
        let unit = s.open(spec(1)).await.expect("open");
        let data = unit.load_all().await.expect("load");
        assert!(
            data.tables["items"].is_empty() && data.global.is_none(),
            "{kind}"
        );
        unit.put("items", "a", &json!({"n": 1})).await.expect("put");
        unit.put("items", "a", &json!({"n": 2}))
            .await
            .expect("replace");
        unit.put("items", "b", &json!("x")).await.expect("put");
        unit.delete("items", "b").await.expect("delete");
        unit.delete("items", "missing")
            .await
            .expect("deleting a missing key is fine");
        unit.put("tags", "t", &json!(null)).await.expect("put null");
        unit.set_global(&json!([1, 2])).await.expect("global");
        let e = unit
            .put("nope", "k", &json!(1))
            .await
            .expect_err("undeclared");
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{kind}");
        let e = s.open(spec(1)).await.err().expect("double open");
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{kind}");
        unit.close().await;
        let e = unit
            .put("items", "c", &json!(1))
            .await
            .expect_err("closed unit");
        assert_eq!(e.code(), ErrorCode::StorageClosed, "{kind}");
        s.close().await;
        let e = s.open(spec(1)).await.err().expect("closed store");
        assert_eq!(e.code(), ErrorCode::StorageClosed, "{kind}");

        let s = store(kind, dir.path());
        let e = s.open(spec(2)).await.err().expect("version mismatch");
        assert_eq!(e.code(), ErrorCode::StorageVersionMismatch, "{kind}");
        let unit = s.open(spec(1)).await.expect("reopen");
        let data = unit.load_all().await.expect("load");
        assert_eq!(data.tables["items"].len(), 1, "{kind}");
        assert_eq!(data.tables["items"]["a"], json!({"n": 2}), "{kind}");
        assert_eq!(data.tables["tags"]["t"], json!(null), "{kind}");
        assert_eq!(data.global, Some(json!([1, 2])), "{kind}");
        assert_eq!(
            s.units().await.expect("units"),
            vec!["notes".to_owned()],
            "{kind}"
        );
        drop(unit);
        // A unit dropped without close can be opened again.
        let again = s.open(spec(1)).await.expect("reopen after drop");
        let no_global = s
            .open(UnitSpec {
                name: "plain".into(),
                version: 0,
                tables: vec![],
                has_global: false,
            })
            .await
            .expect("plain");
        let e = no_global
            .set_global(&json!(1))
            .await
            .expect_err("no global");
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{kind}");
        let e = s
            .open(UnitSpec {
                name: "Bad-Name".into(),
                version: 0,
                tables: vec![],
                has_global: false,
            })
            .await
            .err()
            .expect("bad name");
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{kind}");
        drop(again);
    }
}

/// A `tool/call` of `bash` in `turn`.
fn call(turn: u64, id: &str) -> Record {
    Record::ToolCall {
        turn: Some(turn),
        call_id: id.into(),
        name: "bash".into(),
        arguments: "{}".into(),
    }
}

/// A successful `tool/result` of `bash` in `turn`.
fn result(turn: u64, id: &str) -> Record {
    Record::ToolResult(ToolResultRecord {
        turn: Some(turn),
        call_id: id.into(),
        name: "bash".into(),
        text: "ok".into(),
        ..ToolResultRecord::default()
    })
}

/// A `sandbox/mode` event.
fn mode(mode: &str) -> Record {
    Record::SandboxMode { mode: mode.into() }
}

#[tokio::test]
async fn sessions_append_in_order_and_reload_identically() {
    for kind in KINDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SessionLog::new(store(kind, dir.path())).await.expect("log");
        let s = log.create(Path::new("/work/ws")).await.expect("create");
        let turn = s.begin_turn().await.expect("turn");
        s.append(call(turn, "c1")).await.expect("call");
        s.append(result(turn, "c1")).await.expect("result");
        s.end_turn("completed").await.expect("end");
        let before = s.events().await.expect("events");
        assert_eq!(
            before.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        let id = s.id().clone();
        drop(s);
        drop(log);

        let log = SessionLog::new(store(kind, dir.path())).await.expect("log");
        let s = log.open(&id).await.expect("open");
        assert_eq!(
            s.events().await.expect("events"),
            before,
            "{kind}: a balanced log gets no closers"
        );
        assert_eq!(s.header().cwd, Path::new("/work/ws"));
        let listed = log.list().await.expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, id);
        let e = log
            .open(&SessionId::new("nope"))
            .await
            .expect_err("missing");
        assert_eq!(e.code(), ErrorCode::SessionNotFound, "{kind}");
        let e = log
            .create_with_id(SessionId::new("Bad Id"), Path::new("/"))
            .await
            .expect_err("bad id");
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{kind}");
    }
}

#[tokio::test]
async fn a_turn_left_open_is_closed_on_reload() {
    for kind in KINDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SessionLog::new(store(kind, dir.path())).await.expect("log");
        let s = log.create(Path::new("/")).await.expect("create");
        let turn = s.begin_turn().await.expect("turn");
        for call in ["c1", "c2"] {
            s.append(self::call(turn, call)).await.expect("call");
        }
        s.append(result(turn, "c1")).await.expect("result");
        let id = s.id().clone();
        let last_time = s
            .events()
            .await
            .expect("events")
            .last()
            .expect("last")
            .time_ms;
        drop(s);
        drop(log);

        let log = SessionLog::new(store(kind, dir.path())).await.expect("log");
        let s = log.open(&id).await.expect("open");
        let events = s.events().await.expect("events");
        let tail = &events[4..];
        assert_eq!(tail.len(), 2, "{kind}: {events:?}");
        assert_eq!(tail[0].kind, EventKind::ToolResult);
        assert_eq!(tail[0].data["callId"], "c2");
        assert_eq!(tail[0].data["error"]["code"], "TOOL_OUTCOME_UNKNOWN");
        assert_eq!(tail[0].data["sourceEventSeqs"], json!([3]));
        assert_eq!(tail[1].kind, EventKind::TurnEnd);
        assert_eq!(tail[1].data["reason"]["kind"], "interrupted");
        assert!(tail.iter().all(|e| e.time_ms == last_time), "{kind}");
        assert_eq!(s.open_turn().await, None);
        assert_eq!(s.begin_turn().await.expect("next turn"), turn + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_get_consecutive_sequence_numbers() {
    for kind in KINDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = SessionLog::new(store(kind, dir.path())).await.expect("log");
        let s = log.create(Path::new("/")).await.expect("create");
        let tasks: Vec<_> = (0..500)
            .map(|i| {
                let s = s.clone();
                tokio::spawn(
                    async move { s.append(call(0, &i.to_string())).await.expect("append") },
                )
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
        let id = s.id().clone();
        drop(s);
        drop(log);
        let log = SessionLog::new(store(kind, dir.path())).await.expect("log");
        let events = log
            .open(&id)
            .await
            .expect("open")
            .events()
            .await
            .expect("events");
        assert_eq!(events.len(), 500, "{kind}");
        assert!(
            events
                .iter()
                .enumerate()
                .all(|(i, e)| e.seq == i as u64 + 1),
            "{kind}"
        );
        let mut calls: Vec<u64> = events
            .iter()
            .filter_map(|e| e.data["callId"].as_str()?.parse().ok())
            .collect();
        calls.sort_unstable();
        assert_eq!(calls, (0..500).collect::<Vec<_>>(), "{kind}");
    }
}

#[tokio::test]
async fn a_torn_jsonl_tail_is_cut_and_nothing_before_it_is_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = SessionLog::new(store("jsonl", dir.path()))
        .await
        .expect("log");
    let s = log.create(Path::new("/")).await.expect("create");
    for i in 0..3 {
        s.append(mode(&format!("read-only {i}")))
            .await
            .expect("append");
    }
    let id = s.id().clone();
    drop(s);
    drop(log);
    let file = dir.path().join("jsonl").join(format!("s_{id}.jsonl"));
    let mut bytes = std::fs::read(&file).expect("read");
    bytes.extend_from_slice(br#"{"put":["events","000000000004",{"seq":4,"ti"#);
    std::fs::write(&file, &bytes).expect("tear");
    let log = SessionLog::new(store("jsonl", dir.path()))
        .await
        .expect("log");
    let s = log.open(&id).await.expect("open");
    assert_eq!(s.events().await.expect("events").len(), 3);
    let e = s.append(mode("read-only")).await.expect("append");
    assert_eq!(e.seq, 4);
}

#[tokio::test]
async fn domains_validate_serialise_writes_notify_and_close() {
    use dsh_store::domain::{Change, DomainSpec, Domains};
    let spec = |validate: bool| DomainSpec {
        unit: UnitSpec {
            name: "prefs".into(),
            version: 1,
            tables: vec!["kv".into()],
            has_global: true,
        },
        validate: validate.then(|| {
            Arc::new(|_t: &str, _k: &str, v: &serde_json::Value| {
                if v.is_number() || v.is_object() {
                    Ok(())
                } else {
                    Err("expected a number or an object".to_owned())
                }
            }) as dsh_store::domain::Validator
        }),
    };
    for kind in KINDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let domains = Domains::new(store(kind, dir.path()));
        let d = domains.open(spec(true)).await.expect("open");
        let e = domains.open(spec(true)).await.err().expect("twice");
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{kind}");
        let mut changes = d.subscribe();
        d.put("kv", "a", json!(1)).await.expect("put");
        let e = d.put("kv", "b", json!("text")).await.expect_err("invalid");
        assert_eq!(e.code(), ErrorCode::StorageMalformed, "{kind}");
        assert_eq!(
            d.get("kv", "b").expect("get"),
            None,
            "{kind}: a refused write changes nothing"
        );
        assert_eq!(
            d.update("kv", "a", |v| json!(v.as_i64().unwrap_or(0) + 1))
                .await
                .expect("update"),
            json!(2)
        );
        let e = d
            .update("kv", "zz", |v| v.clone())
            .await
            .expect_err("missing key");
        assert_eq!(e.code(), ErrorCode::InvalidArgument, "{kind}");
        assert!(
            !d.delete("kv", "zz").await.expect("delete missing"),
            "{kind}"
        );
        assert!(d.delete("kv", "a").await.expect("delete"), "{kind}");
        d.set_global(json!({"v": 1})).await.expect("global");
        let got: Vec<Change> = (0..4)
            .map(|_| changes.try_recv().expect("a change"))
            .collect();
        assert_eq!(got[0].value, Some(json!(1)));
        assert_eq!(got[1].value, Some(json!(2)));
        assert_eq!((got[2].key.as_str(), got[2].value.clone()), ("a", None));
        assert_eq!((got[3].table.as_str(), got[3].key.as_str()), ("", ""));
        assert!(
            changes.try_recv().is_err(),
            "{kind}: no event for a no-op or a refused write"
        );
        d.put("kv", "keep", json!(7)).await.expect("put");
        d.close().await;
        assert_eq!(
            d.get("kv", "keep").expect_err("closed").code(),
            ErrorCode::StorageClosed
        );
        assert_eq!(
            d.put("kv", "x", json!(1)).await.expect_err("closed").code(),
            ErrorCode::StorageClosed
        );
        let d = domains.open(spec(true)).await.expect("reopen after close");
        assert_eq!(d.get("kv", "keep").expect("get"), Some(json!(7)), "{kind}");
        d.close().await;

        // A stored record the validator refuses: the open fails and frees the name.
        let raw = domains.open(spec(false)).await.expect("unvalidated");
        raw.put("kv", "bad", json!("text")).await.expect("put");
        raw.close().await;
        let e = domains
            .open(spec(true))
            .await
            .err()
            .expect("invalid record");
        assert_eq!(e.code(), ErrorCode::StorageMalformed, "{kind}");
        assert!(e.message().contains("kv[bad]"), "{}", e.message());
        assert!(
            domains.open(spec(false)).await.is_ok(),
            "{kind}: the name is free again"
        );
    }
}

#[tokio::test]
async fn session_ids_are_the_names_people_type_and_never_share_a_unit() {
    for kind in KINDS {
        let dir = tempfile::tempdir().expect("tempdir");
        let ids = [
            "fix-login-bug",
            "Fix-Login-Bug",
            "fix_login_bug",
            "fix_2dlogin_2dbug",
            "PR.1234",
            "pr_2e1234",
            "a..b",
            &"z".repeat(64),
        ];
        {
            let log = SessionLog::new(store(kind, dir.path())).await.expect("log");
            for id in ids {
                let s = log
                    .create_with_id(SessionId::new(id), Path::new("/"))
                    .await
                    .unwrap_or_else(|e| panic!("{kind}: {id}: {e}"));
                s.append(mode(id)).await.expect("append");
            }
            for bad in ["-x", ".x", "a/b", "a b", "", "é", "a\0b", &"z".repeat(65)] {
                let e = log
                    .create_with_id(SessionId::new(bad), Path::new("/"))
                    .await
                    .expect_err(bad);
                assert_eq!(e.code(), ErrorCode::InvalidArgument, "{kind}: {bad:?}");
                assert!(e.message().contains("fix-login-bug"), "{}", e.message());
            }
        }
        // Reopened from storage, each id finds its own events and only those.
        let log = SessionLog::new(store(kind, dir.path())).await.expect("log");
        for id in ids {
            let s = log.open(&SessionId::new(id)).await.expect("open");
            let modes: Vec<String> = s
                .events()
                .await
                .expect("events")
                .iter()
                .filter(|e| e.kind == EventKind::SandboxMode)
                .map(|e| e.data["mode"].as_str().unwrap_or_default().to_owned())
                .collect();
            assert_eq!(modes, vec![id.to_owned()], "{kind}: {id}");
        }
        assert_eq!(log.list().await.expect("list").len(), ids.len(), "{kind}");
    }
}
