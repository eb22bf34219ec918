//! The execution pipeline: stage order, cancellation codes, approval mapping, the log.
//! Test tools are ordinary tools (no OS mock); the bash tool runs real commands.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dsh_approval::ApprovalOutcome;
use dsh_core::journal::EventKind;
use dsh_core::{CancelToken, ErrorCode, HarnessError};
use dsh_process::LocalSubprocess;
use dsh_tools::{
    CallContext, CallView, PostDecision, PostExecute, PreDecision, PreExecute, Tool, ToolOutput,
    ToolResult, World, WorldBuilder,
};

use crate::support::{call, code, fixture};
use serde_json::{json, Value};

/// Echoes its `text` argument; counts its runs, the bodies that ran to their end and the
/// finalizer calls; sleeps `sleep_ms` first, ignoring cancellation (an uncooperative
/// body).
#[derive(Default)]
pub struct Echo {
    pub runs: AtomicUsize,
    pub ended: AtomicUsize,
    pub finals: AtomicUsize,
}

#[async_trait]
impl Tool for Echo {
    fn name(&self) -> &str {
        "echo"
    }
    fn description(&self, _: &World) -> String {
        "echoes".into()
    }
    fn parameters(&self, _: &World) -> Value {
        json!({"type": "object"})
    }
    async fn call(&self, args: &Value, _: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if let Some(ms) = args.get("sleep_ms").and_then(Value::as_u64) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        self.ended.fetch_add(1, Ordering::SeqCst);
        if args.get("fail").is_some() {
            return Err(HarnessError::invalid_argument("asked to fail"));
        }
        Ok(ToolOutput {
            image: None,
            text: args
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            meta: None,
        })
    }
    fn finalize(&self, _: &ToolResult) -> Option<String> {
        self.finals.fetch_add(1, Ordering::SeqCst);
        None
    }
}

struct Decide(PreDecision);
#[async_trait]
impl PreExecute for Decide {
    async fn pre_execute(&self, call: &CallView) -> Result<PreDecision, HarnessError> {
        Ok(if call.name == "echo" {
            self.0.clone()
        } else {
            PreDecision::Allow
        })
    }
}

struct Post(PostDecision);
#[async_trait]
impl PostExecute for Post {
    async fn post_execute(
        &self,
        _: &CallView,
        _: &ToolResult,
    ) -> Result<PostDecision, HarnessError> {
        Ok(self.0.clone())
    }
}

#[tokio::test]
async fn a_second_provider_for_a_seam_is_a_duplicate() {
    let b = WorldBuilder::new()
        .subprocess(Arc::new(LocalSubprocess::new()))
        .expect("first");
    let e = b
        .subprocess(Arc::new(LocalSubprocess::new()))
        .err()
        .expect("second");
    assert_eq!(e.code(), ErrorCode::DuplicateService);
}

#[tokio::test]
async fn unknown_tools_and_pre_aborted_calls_are_errors_with_codes() {
    let f = fixture(|b| b, vec![]).await;
    let r = f
        .world
        .call(None, call("nope", json!({})), CancelToken::new())
        .await;
    assert_eq!(
        (r.text.as_str(), code(&r)),
        ("Error: unknown tool \"nope\"", Some("UNKNOWN_TOOL"))
    );
    assert_eq!(
        r.error.as_ref().map(|e| e.name.as_str()),
        Some("ToolNotFoundError")
    );
    let cancel = CancelToken::new();
    cancel.cancel("stop");
    let r = f
        .world
        .call(None, call("echo", json!({"text": "x"})), cancel)
        .await;
    assert_eq!(r.text, "Error: tool call aborted before dispatch");
    assert_eq!(code(&r), Some("ABORTED_BEFORE_DISPATCH"));
    assert_eq!(f.echo.runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        f.echo.finals.load(Ordering::SeqCst),
        1,
        "the finalizer runs on every outcome"
    );
}

#[tokio::test]
async fn a_deny_skips_the_body_and_a_guard_can_only_deny() {
    let f = fixture(
        |b| b.pre_execute(Arc::new(Decide(PreDecision::Deny("not today".into())))),
        vec![],
    )
    .await;
    let r = f
        .world
        .call(None, call("echo", json!({"text": "x"})), CancelToken::new())
        .await;
    assert_eq!(
        (r.text.as_str(), code(&r)),
        ("Error: not today", Some("TOOL_DENIED"))
    );
    assert_eq!(f.echo.runs.load(Ordering::SeqCst), 0);

    let g = fixture(
        |b| {
            b.guard(Arc::new(|c: &CallView| {
                (c.arguments["text"] == "secret").then(|| "guarded".to_owned())
            }))
        },
        vec![],
    )
    .await;
    let r = g
        .world
        .call(
            None,
            call("echo", json!({"text": "secret"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text, "Error: guarded");
    let r = g
        .world
        .call(
            None,
            call("echo", json!({"text": "fine"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!((r.text.as_str(), r.is_error), ("fine", false));
}

#[tokio::test]
async fn ask_goes_to_approval_and_maps_every_outcome() {
    let f = fixture(
        |b| {
            b.pre_execute(Arc::new(Decide(PreDecision::Ask(Some(
                "writes the disk".into(),
            )))))
        },
        vec![ApprovalOutcome::AllowedOnce, ApprovalOutcome::Rejected],
    )
    .await;
    // Without a session there is nobody to route the question through.
    let r = f
        .world
        .call(None, call("echo", json!({"text": "x"})), CancelToken::new())
        .await;
    assert!(
        r.text.contains("has no agent to route it through"),
        "{}",
        r.text
    );
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    let r = f
        .world
        .call(s, call("echo", json!({"text": "ok"})), CancelToken::new())
        .await;
    assert_eq!((r.text.as_str(), r.is_error), ("ok", false));
    let r = f
        .world
        .call(s, call("echo", json!({"text": "x"})), CancelToken::new())
        .await;
    assert_eq!(
        r.text,
        "Error: tool \"echo\" was declined by the user or the client"
    );
    let r = f
        .world
        .call(s, call("echo", json!({"text": "x"})), CancelToken::new())
        .await;
    assert_eq!(
        r.text,
        "Error: tool \"echo\" requires approval, but no approval channel is available (no \
         terminal, or an MCP client without elicitation); set the approval policy to never to \
         refuse such calls without asking"
    );
    assert_eq!(
        f.answers.questions()[0].reason.as_deref(),
        Some("writes the disk")
    );
    // Each call: tool/call, approval/asked, approval/decided, tool/result, in that order.
    let kinds: Vec<EventKind> = f
        .session
        .events()
        .await
        .expect("events")
        .iter()
        .skip(1)
        .map(|e| e.kind)
        .collect();
    let one = [
        EventKind::ToolCall,
        EventKind::ApprovalAsked,
        EventKind::ApprovalDecided,
        EventKind::ToolResult,
    ];
    assert_eq!(kinds, [one, one, one].concat());
}

#[tokio::test]
async fn post_execute_blocks_or_replaces_and_a_cancelled_success_is_aborted() {
    let f = fixture(
        |b| {
            b.post_execute(Arc::new(Post(PostDecision::Block(
                "blocked by policy".into(),
            ))))
        },
        vec![],
    )
    .await;
    let r = f
        .world
        .call(None, call("echo", json!({"text": "x"})), CancelToken::new())
        .await;
    assert_eq!(
        (r.text.as_str(), r.is_error),
        ("Error: blocked by policy", true)
    );
    let f = fixture(
        |b| b.post_execute(Arc::new(Post(PostDecision::Replace("redacted".into())))),
        vec![],
    )
    .await;
    let r = f
        .world
        .call(None, call("echo", json!({"text": "x"})), CancelToken::new())
        .await;
    assert_eq!((r.text.as_str(), r.is_error), ("redacted", false));

    // The body ignores the cancel: it is awaited, then its success becomes ABORTED.
    let f = fixture(|b| b, vec![]).await;
    let cancel = CancelToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c2.cancel("stop");
    });
    let r = f
        .world
        .call(
            None,
            call("echo", json!({"text": "x", "sleep_ms": 300})),
            cancel,
        )
        .await;
    // The started body was awaited: it ran to its end before the call returned.
    assert_eq!(f.echo.ended.load(Ordering::SeqCst), 1);
    assert_eq!(
        (r.text.as_str(), code(&r)),
        ("Error: tool call aborted", Some("ABORTED"))
    );
    // A failing body keeps its own error.
    let r = f
        .world
        .call(
            None,
            call("echo", json!({"fail": true})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), Some("INVALID_ARGUMENT"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_calls_complete_and_are_logged_in_pairs() {
    let f = Arc::new(fixture(|b| b, vec![]).await);
    f.session.begin_turn().await.expect("turn");
    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            let f = f.clone();
            tokio::spawn(async move {
                f.world
                    .call(
                        Some(&f.session),
                        call("echo", json!({"text": i.to_string()})),
                        CancelToken::new(),
                    )
                    .await
            })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.expect("task").text, i.to_string());
    }
    let events = f.session.events().await.expect("events");
    assert!(events
        .iter()
        .enumerate()
        .all(|(i, e)| e.seq == i as u64 + 1));
    let calls = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolCall)
        .count();
    let results = events
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .count();
    assert_eq!((calls, results), (1000, 1000));
    // Each result comes after its own call.
    for r in events.iter().filter(|e| e.kind == EventKind::ToolResult) {
        let call = events
            .iter()
            .find(|e| e.kind == EventKind::ToolCall && e.data["callId"] == r.data["callId"])
            .expect("its call");
        assert!(call.seq < r.seq);
    }
}

#[tokio::test]
async fn bash_renders_denials_escalates_once_and_never_forwards_model_env() {
    let f = fixture(
        |b| b,
        vec![ApprovalOutcome::AllowedOnce, ApprovalOutcome::Rejected],
    )
    .await;
    let ws = f.session.header().cwd.clone();
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    let write = json!({"command": "echo hi > f", "description": "write f"});
    let r = f
        .world
        .call(s, call("bash", write.clone()), CancelToken::new())
        .await;
    assert!(!r.is_error, "a denial is an ordinary result: {}", r.text);
    assert!(
        r.text
            .contains("[sandbox: file access denied under read-only mode]"),
        "{}",
        r.text
    );
    assert!(
        r.text
            .contains("[sandbox: escalation available — retry this exact command once"),
        "{}",
        r.text
    );
    assert!(r.text.ends_with("[exit code: 1]"), "{}", r.text);
    assert!(!ws.join("f").exists());

    let mut escalated = write.clone();
    escalated["sandbox_permissions"] = json!("workspace-write");
    escalated["justification"] = json!("the build writes f");
    let r = f
        .world
        .call(s, call("bash", escalated.clone()), CancelToken::new())
        .await;
    assert_eq!((r.text.as_str(), r.is_error), ("(no output)", false));
    assert_eq!(std::fs::read_to_string(ws.join("f")).expect("f"), "hi\n");
    std::fs::remove_file(ws.join("f")).expect("rm");
    let r = f
        .world
        .call(s, call("bash", escalated.clone()), CancelToken::new())
        .await;
    assert_eq!(code(&r), Some("APPROVAL_REJECTED"));
    assert!(!ws.join("f").exists(), "a rejected escalation runs nothing");
    // The grant was for one call: the next one is read-only again.
    let r = f
        .world
        .call(s, call("bash", write), CancelToken::new())
        .await;
    assert!(r.text.contains("denied under read-only mode"), "{}", r.text);

    let smuggled = json!({
        "command": "echo \"[$SMUGGLED][$DSH_SHELL][${DSH_SESSION_ID:+set}]\"; cat",
        "description": "env", "env": {"SMUGGLED": "yes"}, "stdin": "data",
    });
    let r = f
        .world
        .call(s, call("bash", smuggled), CancelToken::new())
        .await;
    assert_eq!(r.text, "[][1][set]\n");

    let bad = f
        .world
        .call(
            s,
            call("bash", json!({"command": " ", "description": "x"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(
        (bad.text.as_str(), code(&bad)),
        (
            "Error: invalid command: expected a non-empty string",
            Some("INVALID_ARGS")
        )
    );
    let unpaired = json!({"command": "true", "description": "x", "justification": "why"});
    let r = f
        .world
        .call(s, call("bash", unpaired), CancelToken::new())
        .await;
    assert!(
        r.text
            .contains("justification is only valid together with sandbox_permissions"),
        "{}",
        r.text
    );
    let exit = f
        .world
        .call(
            s,
            call(
                "bash",
                json!({"command": "echo failing; exit 3", "description": "x"}),
            ),
            CancelToken::new(),
        )
        .await;
    assert_eq!(
        (exit.text.as_str(), exit.is_error),
        ("failing\n[exit code: 3]", false)
    );
    let rel = f
        .world
        .call(
            s,
            call(
                "bash",
                json!({"command": "pwd", "description": "x", "workdir": "state"}),
            ),
            CancelToken::new(),
        )
        .await;
    assert_eq!(rel.text, format!("{}\n", ws.join("state").display()));
}

#[tokio::test]
async fn the_bash_schema_offers_escalation_only_when_commands_are_confined() {
    let f = fixture(|b| b, vec![]).await;
    let (_, _, params) = f
        .world
        .schemas()
        .into_iter()
        .find(|(n, _, _)| n == "bash")
        .expect("bash");
    let props = params["properties"].as_object().expect("properties");
    for k in [
        "command",
        "description",
        "timeout_ms",
        "workdir",
        "sandbox_permissions",
        "justification",
        // The preset's world runs background jobs.
        "run_in_background",
    ] {
        assert!(props.contains_key(k), "{k}: {params}");
    }
    let required: Vec<&str> = params["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(required, ["command", "description"]);
}

struct Fails;
#[async_trait]
impl PreExecute for Fails {
    async fn pre_execute(&self, _: &CallView) -> Result<PreDecision, HarnessError> {
        Err(HarnessError::internal("policy hook crashed"))
    }
}

#[tokio::test]
async fn a_failing_pre_execute_hook_is_final_and_skips_post_execute() {
    let f = fixture(
        |b| {
            b.pre_execute(Arc::new(Fails))
                .post_execute(Arc::new(Post(PostDecision::Replace("rewritten".into()))))
        },
        vec![],
    )
    .await;
    let r = f
        .world
        .call(None, call("echo", json!({"text": "x"})), CancelToken::new())
        .await;
    assert_eq!(
        (r.text.as_str(), code(&r)),
        ("Error: policy hook crashed", Some("INTERNAL"))
    );
    assert_eq!(f.echo.runs.load(Ordering::SeqCst), 0);
    assert_eq!(f.echo.finals.load(Ordering::SeqCst), 1);
}

/// Cancels the call's token while it answers, then gives `outcome`.
struct CancelsWhileAsking(CancelToken, Option<ApprovalOutcome>);
#[async_trait]
impl dsh_approval::Answerer for CancelsWhileAsking {
    async fn answer(&self, _: &dsh_approval::Question) -> Option<ApprovalOutcome> {
        self.0.cancel("user pressed stop");
        match self.1 {
            Some(o) => Some(o),
            None => std::future::pending().await,
        }
    }
}

#[tokio::test]
async fn a_cancel_during_approval_is_aborted_before_dispatch_unless_already_denied() {
    let f = fixture(
        |b| b.pre_execute(Arc::new(Decide(PreDecision::Ask(None)))),
        vec![],
    )
    .await;
    f.session.begin_turn().await.expect("turn");
    // The answerer never answers; the cancel wins: ABORTED_BEFORE_DISPATCH, no body.
    let cancel = CancelToken::new();
    f.world
        .approval()
        .add_answerer(Arc::new(CancelsWhileAsking(cancel.clone(), None)));
    let r = f
        .world
        .call(Some(&f.session), call("echo", json!({"text": "x"})), cancel)
        .await;
    assert_eq!(code(&r), Some("ABORTED_BEFORE_DISPATCH"), "{}", r.text);
    assert_eq!(f.echo.runs.load(Ordering::SeqCst), 0);

    let g = fixture(
        |b| b.pre_execute(Arc::new(Decide(PreDecision::Ask(None)))),
        vec![],
    )
    .await;
    g.session.begin_turn().await.expect("turn");
    let cancel = CancelToken::new();
    g.world.approval().add_answerer(Arc::new(CancelsWhileAsking(
        cancel.clone(),
        Some(ApprovalOutcome::Rejected),
    )));
    let r = g
        .world
        .call(Some(&g.session), call("echo", json!({"text": "x"})), cancel)
        .await;
    // The rejection settled after the cancel: the denial is preserved, not an abort.
    assert_eq!(code(&r), Some("TOOL_DENIED"), "{r:?}");
    assert_eq!(g.echo.runs.load(Ordering::SeqCst), 0);
}
