//! A tool body that panics ends its own call, as an `INTERNAL` result, and nothing else:
//! the World goes on serving, and the processes the call started are killed.
// Regression: issue 11 (one call's panic killed the server, every session's calls and
// their trees).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::journal::EventKind;
use dsh_core::{CancelToken, HarnessError};
use dsh_process::SpawnSpec;
use dsh_tools::{CallContext, Tool, ToolOutput, World};
use serde_json::{json, Value};

use crate::support::{call, code, fixture};

/// Panics with `boom <what>`: at once, or after it started `sleep <marker>` and awaited.
struct Panics;

#[async_trait]
impl Tool for Panics {
    fn name(&self) -> &str {
        "panics"
    }
    fn description(&self, _: &World) -> String {
        "panics".into()
    }
    fn parameters(&self, _: &World) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let what = args["what"].as_str().unwrap_or("");
        let _running = match args["marker"].as_str() {
            Some(marker) => {
                let p = ctx
                    .world
                    .subprocess()
                    .spawn(SpawnSpec::new(["sleep", marker], "/"))?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some(p)
            }
            None => None,
        };
        panic!("boom {what}");
    }
}

/// Whether a live (not zombie) process has `marker` in its command line.
fn alive_with(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .expect("proc")
        .flatten()
        .any(|e| {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            String::from_utf8_lossy(&cmd)
                .replace('\0', " ")
                .contains(marker)
                && !stat.contains(") Z")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_tool_body_is_an_internal_result_and_the_world_keeps_serving() {
    let f = Arc::new(fixture(|b| b.tool(Arc::new(Panics)).expect("tool"), vec![]).await);
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    let r = f
        .world
        .call(
            s,
            call("panics", json!({"what": "now"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(
        (r.text.as_str(), code(&r)),
        (
            "Error: the panics tool panicked: boom now. This is a bug in dsh; please report \
             it with this message. Only this call's work was abandoned: dsh keeps serving \
             other calls.",
            Some("INTERNAL")
        )
    );
    // The call and its result are logged as any other.
    let events = f.session.events().await.expect("events");
    let last = events.last().expect("events");
    assert_eq!(last.kind, EventKind::ToolResult);
    assert_eq!(last.data["error"]["code"], "INTERNAL");
    assert_eq!(last.data["name"], "panics");

    // Panics mixed with ordinary calls, all at once: every call gets its own answer.
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let f = f.clone();
            tokio::spawn(async move {
                let (name, args) = if i % 2 == 0 {
                    ("panics", json!({"what": i.to_string()}))
                } else {
                    ("echo", json!({"text": format!("hi {i}"), "sleep_ms": 5}))
                };
                f.world
                    .call(Some(&f.session), call(name, args), CancelToken::new())
                    .await
            })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let r = t.await.expect("the task itself never panics");
        if i % 2 == 0 {
            assert_eq!(code(&r), Some("INTERNAL"), "{i}: {}", r.text);
            assert!(r.text.contains(&format!("boom {i}.")), "{}", r.text);
        } else {
            assert_eq!(
                (r.text.as_str(), r.is_error),
                (format!("hi {i}").as_str(), false)
            );
        }
    }

    // A panic after the body started a process: the process goes with the call.
    let marker = format!("1000.{}7", std::process::id());
    let r = f
        .world
        .call(
            s,
            call("panics", json!({"what": "late", "marker": marker})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), Some("INTERNAL"), "{}", r.text);
    let gone = (0..500).any(|_| {
        let alive = alive_with(&marker);
        if alive {
            std::thread::sleep(Duration::from_millis(10));
        }
        !alive
    });
    assert!(gone, "the panicking call's process outlived it");

    // The real tools still work, the file tools' shared state included.
    let ws = f.session.header().cwd.clone();
    std::fs::write(ws.join("f.txt"), "one\n").expect("write");
    let r = f
        .world
        .call(
            s,
            call("read", json!({"file_path": "f.txt"})),
            CancelToken::new(),
        )
        .await;
    assert!(r.text.contains("1: one"), "{}", r.text);
    let r = f
        .world
        .call(
            s,
            call(
                "bash",
                json!({"command": "echo still here", "description": "x"}),
            ),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text, "still here\n");
}
