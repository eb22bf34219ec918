//! `dsh mcp` under hostile traffic, as a fuzzer sends it: oversized patterns, a 100 MB
//! message, and ten thousand pipelined calls with 1 MB arguments. Every call is answered,
//! the server stays alive (and exits cleanly at the end), and its state directory stays
//! small; a session past its log cap is summarised, and `dsh session show` says so.
// Regression: issue 11 (a 2 MB `glob` pattern or `grep` include killed the server by
// SIGABRT) and issue 12 (large arguments grew one session's database to 16 GB).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use dsh_core::journal::{Record, ToolResultRecord};
use dsh_store::session::SessionLog;
use dsh_store::{SqliteStorage, Storage};
use serde_json::{json, Value};

/// A `dsh mcp` in a fresh workspace and state directory, past its handshake.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    _dirs: tempfile::TempDir,
    state: PathBuf,
}

impl Server {
    fn start() -> Server {
        let dirs = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dirs.path()).expect("canonical");
        let ws = root.join("ws");
        std::fs::create_dir(&ws).expect("ws");
        let mut child = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .args(["mcp", "-C", ws.to_str().expect("utf-8"), "--state"])
            .arg(root.join("state"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn dsh mcp");
        let mut s = Server {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().expect("stdout")),
            child,
            _dirs: dirs,
            state: root.join("state"),
        };
        s.send(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "hostile", "version": "0"}}}),
        );
        assert_eq!(s.answer()["result"]["serverInfo"]["name"], "dsh");
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, m: &Value) {
        let w = self.stdin.as_mut().expect("stdin");
        writeln!(w, "{m}").expect("write");
        w.flush().expect("flush");
    }

    /// The next response (notifications skipped).
    fn answer(&mut self) -> Value {
        loop {
            let mut line = String::new();
            assert!(
                self.stdout.read_line(&mut line).expect("read") > 0,
                "dsh mcp closed stdout: it died"
            );
            let v: Value = serde_json::from_str(&line).expect("every stdout line is JSON-RPC");
            if v.get("id").is_some() {
                return v;
            }
        }
    }

    fn call(&mut self, id: u64, name: &str, args: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": args}}));
        let r = self.answer();
        assert_eq!(r["id"], id, "{r}");
        r
    }

    fn is_alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Closes stdin; the server must then exit with status 0. Returns the state directory
    /// (and the directory that holds it, removed when dropped).
    fn finish(self) -> (tempfile::TempDir, PathBuf) {
        let Server {
            mut child,
            stdin,
            _dirs,
            state,
            ..
        } = self;
        drop(stdin);
        let status = child.wait().expect("dsh mcp exits");
        assert!(status.success(), "dsh mcp exited with {status:?}");
        (_dirs, state)
    }
}

/// The stable code of an error result, `"ok"` for a success.
fn outcome(r: &Value) -> String {
    if r["result"]["isError"] == true {
        r["result"]["structuredContent"]["error"]["code"]
            .as_str()
            .unwrap_or("?")
            .to_owned()
    } else if r.get("result").is_some() {
        "ok".into()
    } else {
        format!("rpc {}", r["error"]["code"])
    }
}

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

fn dsh(args: &[&str], state: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args(args)
        .arg("--state")
        .arg(state)
        .output()
        .expect("dsh");
    assert!(out.status.success(), "dsh {args:?}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn oversized_patterns_and_a_100_mb_argument_are_answered_and_the_server_lives() {
    let mut s = Server::start();
    let two_mb = "?".repeat(2 << 20);
    let r = s.call(1, "glob", json!({"pattern": two_mb}));
    assert_eq!(outcome(&r), "INVALID_ARGS", "{r}");
    let r = s.call(2, "grep", json!({"pattern": "x", "include": two_mb}));
    assert_eq!(outcome(&r), "INVALID_ARGS", "{r}");
    let r = s.call(
        3,
        "bash",
        json!({"command": "x".repeat(100 << 20), "description": "huge"}),
    );
    assert_eq!(r["error"]["data"]["code"], "MCP_MESSAGE_TOO_LARGE", "{r}");
    let r = s.call(4, "glob", json!({"pattern": "*.rs"}));
    assert_eq!(outcome(&r), "ok", "{r}");
    assert!(s.is_alive());
    s.finish();
}

/// One kind of hostile call: the tool, its arguments as JSON text around a 1 MB string,
/// and the outcome it must get.
struct Kind {
    tool: &'static str,
    before: &'static str,
    after: &'static str,
    want: &'static str,
}

const KINDS: [Kind; 5] = [
    Kind {
        tool: "bash",
        before: r#"{"description":"d","command":""#,
        after: r#""}"#,
        want: "INVALID_ARGS",
    },
    Kind {
        tool: "write",
        before: r#"{"file_path":"big.txt","content":""#,
        after: r#""}"#,
        // Within its bound; the session is read-only.
        want: "FS_SANDBOX_DENIED",
    },
    Kind {
        tool: "grep",
        before: r#"{"pattern":"needle","junk":""#,
        after: r#""}"#,
        // An unknown key is ignored, whatever its size.
        want: "ok",
    },
    Kind {
        tool: "read",
        before: r#"{"file_path":""#,
        after: r#""}"#,
        want: "INVALID_ARGS",
    },
    Kind {
        tool: "edit",
        before: r#"{"file_path":"e.txt","new_string":"y","old_string":""#,
        after: r#""}"#,
        want: "FS_NOT_OBSERVED",
    },
];

const CALLS: u64 = 10_000;
/// Calls in flight at once, as an agent with parallel tool calls would send them.
const WINDOW: u64 = 64;

#[test]
fn ten_thousand_pipelined_calls_with_1_mb_arguments_are_all_answered_in_a_small_state() {
    let mut s = Server::start();
    let big = "x".repeat(1 << 20);
    // Each request line, without its id: `{"jsonrpc":"2.0","id":` ID BODY.
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(
        KINDS
            .iter()
            .map(|k| {
                format!(
                    r#","method":"tools/call","params":{{"name":"{}","arguments":{}{big}{}}}}}
"#,
                    k.tool, k.before, k.after
                )
                .into_bytes()
            })
            .collect(),
    );
    let started = Instant::now();
    let (credit, credits) = std::sync::mpsc::channel::<()>();
    let mut stdin = s.stdin.take().expect("stdin");
    // A 1 MiB pipe (the default unprivileged maximum) moves a request in one write.
    let _ = rustix::pipe::fcntl_setpipe_size(&stdin, 1 << 20);
    let writer = {
        let bodies = bodies.clone();
        std::thread::spawn(move || {
            for id in 1..=CALLS {
                if id > WINDOW && credits.recv().is_err() {
                    return stdin;
                }
                let head = format!(r#"{{"jsonrpc":"2.0","id":{id}"#);
                let body = &bodies[(id % KINDS.len() as u64) as usize];
                stdin
                    .write_all(head.as_bytes())
                    .and_then(|()| stdin.write_all(body))
                    .expect("write a request");
            }
            stdin.flush().expect("flush");
            stdin
        })
    };
    let mut answered = vec![false; CALLS as usize + 1];
    for _ in 0..CALLS {
        let r = s.answer();
        let id = r["id"].as_u64().expect("a numeric id");
        assert!(!answered[id as usize], "{id} answered twice");
        answered[id as usize] = true;
        let kind = &KINDS[(id % KINDS.len() as u64) as usize];
        assert_eq!(outcome(&r), kind.want, "{} call {id}: {r}", kind.tool);
        let _ = credit.send(());
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{CALLS} calls of 1 MiB answered in {:.1} s ({:.2} ms a call)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / CALLS as f64
    );
    s.stdin = Some(writer.join().expect("writer"));
    assert!(s.is_alive());
    s.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "ping"}));
    assert!(
        s.answer().get("result").is_some(),
        "the server still answers"
    );

    let (_dirs, state) = s.finish();
    let size = du(&state);
    eprintln!("state directory: {} MiB", size >> 20);
    assert!(size < 256 << 20, "the state directory holds {size} bytes");
    // Every call is in the log, its arguments as a head, a length and a digest.
    let id = dsh(&["session", "list"], &state)
        .split_whitespace()
        .next()
        .expect("one session")
        .to_owned();
    let events: Vec<Value> = dsh(&["session", "show", "--json", &id], &state)
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let count = |t: &str| events.iter().filter(|e| e["type"] == t).count() as u64;
    assert_eq!((count("tool/call"), count("tool/result")), (CALLS, CALLS));
    let call = events
        .iter()
        .find(|e| e["type"] == "tool/call")
        .expect("a call");
    let arguments = &call["data"]["arguments"];
    assert_eq!(
        arguments["head"].as_str().map(str::len),
        Some(4096),
        "{call}"
    );
    assert!(arguments["bytes"].as_u64() > Some(1 << 20), "{call}");
}

#[tokio::test]
async fn a_session_past_its_log_cap_is_summarised_and_session_show_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    // The same database `dsh --state` reads, with a small cap.
    let storage: Arc<dyn Storage> =
        Arc::new(SqliteStorage::open(state.join("dsh.db")).expect("sqlite"));
    let log = SessionLog::with_cap(storage.clone(), 4096)
        .await
        .expect("log");
    let session = log.create(dir.path()).await.expect("session");
    let turn = session.begin_turn().await.expect("turn");
    for i in 0..10 {
        let call_id = format!("c{i}");
        session
            .append(Record::ToolCall {
                turn: Some(turn),
                call_id: call_id.as_str().into(),
                name: "bash".into(),
                arguments: format!("{{\"command\":\"echo {i} {}\"}}", "z".repeat(900)).into(),
            })
            .await
            .expect("call");
        session
            .append(Record::ToolResult(ToolResultRecord {
                turn: Some(turn),
                call_id: call_id.as_str().into(),
                name: "bash".into(),
                is_error: false,
                text: format!("{i} {}\n", "z".repeat(900)).into(),
                ..ToolResultRecord::default()
            }))
            .await
            .expect("result");
    }
    session.end_turn("completed").await.expect("end");
    let id = session.id().to_string();
    drop(session);
    drop(log);
    storage.close().await;

    let shown = dsh(&["session", "show", &id], &state);
    let lines: Vec<&str> = shown.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.contains("log/capped"))
        .unwrap_or_else(|| panic!("no log/capped line:\n{shown}"));
    assert!(
        lines[at].ends_with(
            "the session log reached its cap of 4096 bytes: later events are summarised \
             (ids, outcome, sizes)"
        ),
        "{}",
        lines[at]
    );
    assert!(
        lines[..at].iter().all(|l| !l.ends_with("[summarised]")),
        "{shown}"
    );
    assert!(lines.len() > at + 2, "{shown}");
    for l in &lines[at + 1..] {
        assert!(l.ends_with("[summarised]"), "{l}");
    }
    // A summarised result still says which call it answers and how it ended.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("tool/result") && l.contains("bash c9 ok")),
        "{shown}"
    );
}

/// The peak resident memory of process `pid`, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM")
}

// Regression: issue 23: one grep pattern took dsh mcp to 1.6 GB, and 48 at once to 6.4 GB.
#[test]
fn no_pattern_or_set_of_patterns_takes_dsh_mcp_past_a_fixed_memory_bound() {
    let mut s = Server::start();
    let ws = s.state.parent().expect("root").join("ws");
    // Text for the patterns to work on: 16 files of 256 KiB of `a`, `b` and spaces.
    let mut seed = 7u64;
    for i in 0..16 {
        let text: String = (0..256 * 1024)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                [b'a', b'b', b' ', b'\n'][(seed >> 62) as usize] as char
            })
            .collect();
        std::fs::write(ws.join(format!("f{i}.txt")), text).expect("text");
    }
    let patterns = [
        r"\w{5000}",
        r"(?:\w{1,100}){1,100}",
        r"(a|b)*a(a|b){24}",
        r"[\w\W]{1,20000}x",
    ];
    let n = 48u64;
    for id in 0..n {
        let p = patterns[id as usize % patterns.len()];
        s.send(
            &json!({"jsonrpc": "2.0", "id": 100 + id, "method": "tools/call",
            "params": {"name": "grep", "arguments": {"pattern": p}}}),
        );
    }
    let mut answered = 0;
    while answered < n {
        let r = s.answer();
        let code = outcome(&r);
        assert!(
            code == "ok" || code == "SEARCH_INVALID_PATTERN",
            "{code}: {r}"
        );
        answered += 1;
    }
    let peak = peak_rss_kib(s.child.id());
    assert!(peak < 256 << 10, "dsh mcp peaked at {peak} KiB");
    assert!(s.is_alive());
    s.finish();
}

// 200 000 files beneath fourteen 250-character folder names: glob and grep keep dsh mcp
// in bounded memory (holding every match, or every queued entry, with its 3.5 KB path
// would take it past 1 GB).
#[test]
fn a_search_of_a_huge_deep_tree_keeps_dsh_mcp_in_bounded_memory() {
    let mut s = Server::start();
    let ws = s.state.parent().expect("root").join("ws");
    let mut deep = ws.clone();
    for i in 0..14u8 {
        deep.push(String::from(char::from(b'a' + i)).repeat(250));
    }
    std::fs::create_dir_all(&deep).expect("deep");
    for j in 0..100_000 {
        std::fs::write(deep.join(format!("f{j}")), "a\n").expect("file");
    }
    let r = s.call(1, "glob", json!({"pattern": "**/*"}));
    assert_eq!(outcome(&r), "ok", "{r}");
    let r = s.call(2, "grep", json!({"pattern": "a"}));
    assert_eq!(outcome(&r), "ok", "{r}");
    let peak = peak_rss_kib(s.child.id());
    assert!(peak < 128 << 10, "dsh mcp peaked at {peak} KiB");
    s.finish();
}
