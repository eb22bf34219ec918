//! The six terminal tools over [`dsh_terminal::Terminals`]: `terminal_open`,
//! `terminal_send`, `terminal_read`, `terminal_signal`, `terminal_close`,
//! `terminal_list`.
//!
//! Every terminal belongs to the session (MCP connection) that opened it; another cannot
//! see or touch it. The wire names a terminal `sessionId` (the reference's word, as in
//! the pinned messages); these tools' argument types are the one place that maps it to a
//! terminal id. A terminal runs under the sandbox policy its session had when it
//! opened, for its whole life (read-only by default: a terminal cannot write where
//! `bash` cannot), and the session's mode cannot change while it has terminals open.
//! Results are bounded to [`MAX_RESULT_BYTES`]: a send or read keeps the tail of its
//! output and its status lines, and says `[output truncated]`.

mod render;
mod send_job;

use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError};
use dsh_terminal::{
    CloseOutcome, OpenRequest, ReadPage, SendRequest, Snapshot, TerminalSignal, Terminals,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::policy::escalation::Subject;
use crate::schema::bounds::{self, Bound, Bounded};
use crate::tools::output::bounded;
pub use crate::tools::output::MAX_RESULT_BYTES;
use crate::{invalid_args, parse_args, CallContext, Tool, ToolHints, ToolOutput, World};
use render::render_send;

/// The most bytes one `terminal_send` may type: 64 KiB, more than a person pastes;
/// write a file with `write` and run it instead.
pub const TEXT_MAX_BYTES: usize = 64 << 10;

const SESSION_ID_BOUND: Bound = Bound {
    arg: "sessionId",
    max: 64,
    advice: "pass an id terminal_open returned (pty-1, …)",
};

/// The registry and the caller's owner, or why there is none.
fn terminals<'a>(
    ctx: &'a CallContext<'_>,
) -> Result<(&'a std::sync::Arc<Terminals>, dsh_terminal::Owner), HarnessError> {
    let t = ctx.world.terminals().ok_or_else(|| {
        HarnessError::new(
            ErrorCode::UnknownTool,
            "this world has no terminals; use the bash tool",
        )
    })?;
    Ok((t, ctx.world.owner(ctx.session.map(|s| s.id()))))
}

fn terminal_id(id: &str) -> Result<&str, HarnessError> {
    if id.trim().is_empty() {
        return Err(invalid_args(
            "sessionId must be a non-empty string (pty-1, …)",
        ));
    }
    Ok(id)
}

/// `running` / `exited …` as the status line shows it.
fn snapshot_line(s: &Snapshot) -> String {
    let mut line = s.id.to_string();
    if let Some(n) = &s.name {
        line.push_str(&format!(" ({})", dsh_core::visible::visible(n)));
    }
    line.push_str(&format!(" [{}] {}", s.kind, s.status));
    if let Some(pid) = s.pid {
        line.push_str(&format!(" pid={pid}"));
    }
    line
}

fn snapshot_json(s: &Snapshot) -> Value {
    let mut v = json!({
        "sessionId": s.id.as_str(),
        "type": s.kind,
        "status": s.status.to_string(),
    });
    if let Some(n) = &s.name {
        v["name"] = json!(n);
    }
    if let Some(pid) = s.pid {
        v["pid"] = json!(pid);
    }
    v
}

/// The `terminal_open` tool.
#[derive(Debug, Default)]
pub struct TerminalOpenTool;

#[derive(Debug, Deserialize, JsonSchema)]
struct OpenArgs {
    /// The terminal type: `shell` (bash).
    #[serde(rename = "type")]
    kind: String,
    /// A name for the session, unique among yours.
    name: Option<String>,
    /// The working directory (default: the workspace); a relative one resolves against
    /// the workspace.
    cwd: Option<String>,
}

impl Bounded for OpenArgs {
    const BOUNDS: &'static [Bound] = &[
        Bound {
            arg: "type",
            max: 64,
            advice: "use \"shell\"",
        },
        Bound {
            arg: "name",
            max: 256,
            advice: "use a short name",
        },
        Bound {
            arg: "cwd",
            max: bounds::PATH_MAX_BYTES,
            advice: "use a shorter path",
        },
    ];
}

#[async_trait]
impl Tool for TerminalOpenTool {
    fn name(&self) -> &str {
        "terminal_open"
    }

    fn title(&self) -> &str {
        "Open terminal"
    }

    fn description(&self, world: &World) -> String {
        let mut d = String::from(
            "Open a persistent terminal session (type \"shell\": bash on a PTY) for \
             interactive programs and state kept between sends (REPLs, debuggers, prompts, \
             `cd` and `export`). Prefer the one-shot bash and file tools otherwise. Returns \
             the session id (pty-1, …); close sessions you no longer need with \
             terminal_close.",
        );
        if world.confines() {
            d.push_str(
                " The session runs in the sandbox mode the session has now, for its whole life.",
            );
        }
        d
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<OpenArgs>()
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("sessionId", json!({"type": "string"})),
                ("name", json!({"type": "string"})),
                ("type", json!({"type": "string"})),
                ("pid", json!({"type": "integer"})),
                ("status", json!({"type": "string"})),
            ],
            &["sessionId", "type", "status"],
        )
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: OpenArgs = parse_args(args)?;
        if a.kind.is_empty() {
            return Err(invalid_args("type must be a non-empty string (\"shell\")"));
        }
        let (t, owner) = terminals(ctx)?;
        let policy = crate::policy::policy_for_call(
            ctx,
            None,
            None,
            Subject::Command,
            "terminal_open",
            self.action(args),
        )
        .await?;
        let cwd = a.cwd.as_deref().map(|c| ctx.workspace_root().join(c));
        let opened = t
            .open(
                &owner,
                OpenRequest {
                    kind: a.kind,
                    name: a.name,
                    cwd,
                    policy,
                    env: ctx.managed_env()?,
                },
                ctx.cancel,
            )
            .await?;
        let s = &opened.snapshot;
        let mut head = format!("started terminal session {}", s.id);
        if let Some(n) = &s.name {
            head.push_str(&format!(" ({})", dsh_core::visible::visible(n)));
        }
        head.push_str(&format!(" [type: {}]\n", s.kind));
        let motd = if opened.motd.is_empty() {
            "(no startup output)"
        } else {
            opened.motd.as_str()
        };
        let text = if head.len() + motd.len() <= MAX_RESULT_BYTES {
            format!("{head}{motd}")
        } else {
            format!(
                "{head}{}",
                bounded(motd, "", true, MAX_RESULT_BYTES - head.len())
            )
        };
        Ok(ToolOutput {
            text,
            meta: Some(snapshot_json(s)),
            image: None,
        })
    }
}

/// The `terminal_send` tool.
#[derive(Debug, Default)]
pub struct TerminalSendTool;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SendArgs {
    /// The session (pty-1, …).
    session_id: String,
    /// What to type. Control characters are sent as they are (`\u0004` is Ctrl-D, `\u001b`
    /// Escape); to interrupt, use terminal_signal or cancel the call.
    text: String,
    /// Press Enter after the text (default true).
    submit: Option<bool>,
    /// How long to wait for the program to be ready, in milliseconds (default 30000, at
    /// most 600000; a background send waits up to the most by default).
    #[serde(rename = "timeout_ms")]
    timeout_ms: Option<u64>,
    /// Return a job id at once and let the send run on (a build typed into the
    /// terminal); `job_output` gives its output as it comes, whole lines at a time, and
    /// you are told when it settles.
    #[serde(rename = "run_in_background")]
    run_in_background: Option<bool>,
}

impl Bounded for SendArgs {
    const BOUNDS: &'static [Bound] = &[
        SESSION_ID_BOUND,
        Bound {
            arg: "text",
            max: TEXT_MAX_BYTES,
            advice: "write longer input to a file with write, and have the program read it",
        },
    ];
}

/// Starts `request` as a `pty-send-<n>` job of the call's session and acknowledges it;
/// the terminal's checks (`SEND_ACTIVE`, …) come before the job exists.
fn send_in_background(
    ctx: &CallContext<'_>,
    t: &std::sync::Arc<Terminals>,
    owner: dsh_terminal::Owner,
    id: &str,
    request: SendRequest,
) -> Result<ToolOutput, HarnessError> {
    let jobs = ctx.world.jobs().ok_or_else(|| {
        HarnessError::new(
            ErrorCode::JobsUnavailable,
            "background jobs are not available here; send without run_in_background",
        )
    })?;
    if ctx.cancel.is_cancelled() {
        return Err(HarnessError::new(
            ErrorCode::Aborted,
            "terminal send aborted",
        ));
    }
    let label = format!(
        "{id}: {}",
        if request.text.is_empty() {
            "(input)"
        } else {
            request.text.as_str()
        }
    );
    let mut start = dsh_jobs::JobStart::new("pty-send", label, Some(owner.clone()));
    start.output_limit_bytes = Some(MAX_RESULT_BYTES);
    // The job takes the call's write scopes over once the send has started, and closes
    // them when it ends; if it never starts, the pipeline closes them with the call.
    let scopes = ctx.scopes.handover();
    // The send does not use the call's cancel: it outlives the call; a kill cancels it.
    let cancel = dsh_core::CancelToken::new();
    let job = jobs.start(start, || {
        let send = t.start_send(&owner, id, request, cancel.clone())?;
        let job = send_job::PtySendJob::new(send, cancel, scopes.take());
        Ok(std::sync::Arc::new(job) as std::sync::Arc<dyn dsh_jobs::Job>)
    })?;
    Ok(ToolOutput {
        text: dsh_shell::render::background_ack(job.as_str()),
        meta: Some(json!({"sessionId": id, "jobId": job.as_str()})),
        image: None,
    })
}

#[async_trait]
impl Tool for TerminalSendTool {
    fn name(&self) -> &str {
        "terminal_send"
    }

    fn title(&self) -> &str {
        "Send to terminal"
    }

    fn description(&self, world: &World) -> String {
        let d =
            "Type text into a terminal session (Enter pressed unless submit is false) and wait \
         until the program is ready for more. The result ends with [wait: stdin_read] (it \
         waits for input), [wait: inferred_idle] (quiet for a while: it may still be \
         working), [wait: timeout] or [wait: session_exit], then [session: …]. \
         inferred_idle and timeout do not prove the command ended: read again or send an \
         empty text to wait more. Cancelling the call interrupts the program (SIGINT).";
        let mut d = String::from(d);
        if world.jobs().is_some() {
            d.push_str(
                " With run_in_background: true the call returns a job id at once; the \
                 send's output comes with job_output as it is printed, whole lines at a \
                 time.",
            );
        }
        d
    }

    fn parameters(&self, world: &World) -> Value {
        let mut v = crate::args_schema::<SendArgs>();
        if world.jobs().is_none() {
            if let Some(props) = v.get_mut("properties").and_then(Value::as_object_mut) {
                props.remove("run_in_background");
            }
        }
        v
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("sessionId", json!({"type": "string"})),
                (
                    "wait",
                    json!({"type": "string", "enum": ["stdin_read", "inferred_idle", "timeout", "session_exit"]}),
                ),
                ("status", json!({"type": "string"})),
                ("truncated", json!({"type": "boolean"})),
                ("jobId", json!({"type": "string"})),
            ],
            &["sessionId"],
        )
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: SendArgs = parse_args(args)?;
        let id = terminal_id(&a.session_id)?;
        if a.text.contains('\0') {
            return Err(invalid_args(
                "text must not contain NUL characters; to interrupt use terminal_signal",
            ));
        }
        let (t, owner) = terminals(ctx)?;
        let max = t.config().max_timeout;
        let timeout = match a.timeout_ms {
            Some(0) => return Err(invalid_args("timeout_ms must be at least 1")),
            // Clamped to the most, as `bash` and `job_output` do.
            Some(ms) => Duration::from_millis(ms).min(max),
            // A background send is for long work (a build): it runs to the limit unless
            // told otherwise, so `job_kill` can still reach it.
            None if a.run_in_background == Some(true) => max,
            None => t.config().timeout,
        };
        // The terminal's policy: what its command makes is checked after this call.
        ctx.armed(t.policy(&owner, id)?);
        if a.run_in_background == Some(true) {
            let request = SendRequest {
                text: a.text,
                submit: a.submit.unwrap_or(true),
                timeout,
            };
            return send_in_background(ctx, t, owner, id, request);
        }
        let r = t
            .send(
                &owner,
                id,
                SendRequest {
                    text: a.text,
                    submit: a.submit.unwrap_or(true),
                    timeout,
                },
                ctx.cancel,
            )
            .await?;
        if ctx.cancel.is_cancelled() {
            return Err(HarnessError::new(
                ErrorCode::Aborted,
                "terminal send aborted: the program was interrupted (SIGINT)",
            ));
        }
        let text = render_send(&r);
        Ok(ToolOutput {
            text,
            meta: Some(json!({
                "sessionId": id,
                "wait": r.wait.as_str(),
                "status": r.status.to_string(),
                "truncated": r.truncated,
            })),
            image: None,
        })
    }
}

/// The `terminal_read` tool.
#[derive(Debug, Default)]
pub struct TerminalReadTool;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct ReadArgs {
    /// The session (pty-1, …).
    session_id: String,
    /// Lines to skip back from the newest (default 0: the page ends at the newest line).
    offset: Option<u64>,
    /// Lines to show (default 500).
    count: Option<u64>,
}

impl Bounded for ReadArgs {
    const BOUNDS: &'static [Bound] = &[SESSION_ID_BOUND];
}

fn render_read(p: &ReadPage) -> String {
    let body = if p.text.is_empty() {
        "(no retained output)"
    } else {
        p.text.as_str()
    };
    let suffix = format!(
        "\n[lines: {}-{} of {}]",
        p.line_begin, p.line_end, p.total_lines
    );
    bounded(body, &suffix, p.truncated, MAX_RESULT_BYTES)
}

#[async_trait]
impl Tool for TerminalReadTool {
    fn name(&self) -> &str {
        "terminal_read"
    }

    fn title(&self) -> &str {
        "Read terminal"
    }

    fn hints(&self) -> ToolHints {
        ToolHints::READ_ONLY
    }

    fn description(&self, _world: &World) -> String {
        "Read a terminal session's retained output (the newest 10 000 lines at most): \
         count lines ending offset lines before the newest."
            .into()
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<ReadArgs>()
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("totalLines", json!({"type": "integer"})),
                ("lineBegin", json!({"type": "integer"})),
                ("lineEnd", json!({"type": "integer"})),
                ("truncated", json!({"type": "boolean"})),
            ],
            &["totalLines", "lineBegin", "lineEnd", "truncated"],
        )
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: ReadArgs = parse_args(args)?;
        let id = terminal_id(&a.session_id)?;
        let count = a.count.unwrap_or(500);
        if count == 0 {
            return Err(invalid_args("count must be at least 1"));
        }
        let (t, owner) = terminals(ctx)?;
        let p = t.read(&owner, id, a.offset.unwrap_or(0), count)?;
        Ok(ToolOutput {
            text: render_read(&p),
            meta: Some(json!({
                "totalLines": p.total_lines,
                "lineBegin": p.line_begin,
                "lineEnd": p.line_end,
                "truncated": p.truncated,
            })),
            image: None,
        })
    }
}

/// The `terminal_signal` tool.
#[derive(Debug, Default)]
pub struct TerminalSignalTool;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SignalArgs {
    /// The session (pty-1, …).
    session_id: String,
    /// SIGINT, SIGTERM, SIGKILL, SIGTSTP or SIGHUP.
    signal: String,
}

impl Bounded for SignalArgs {
    const BOUNDS: &'static [Bound] = &[
        SESSION_ID_BOUND,
        Bound {
            arg: "signal",
            max: 16,
            advice: "use SIGINT, SIGTERM, SIGKILL, SIGTSTP or SIGHUP",
        },
    ];
}

#[async_trait]
impl Tool for TerminalSignalTool {
    fn name(&self) -> &str {
        "terminal_signal"
    }

    fn title(&self) -> &str {
        "Signal terminal"
    }

    fn description(&self, _world: &World) -> String {
        "Send a signal (SIGINT, SIGTERM, SIGKILL, SIGTSTP, SIGHUP) to the program in the \
         foreground of a terminal session. SIGKILL is refused for the shell itself: close \
         the session instead."
            .into()
    }

    fn parameters(&self, _world: &World) -> Value {
        let mut s = crate::args_schema::<SignalArgs>();
        s["properties"]["signal"]["enum"] = json!(TerminalSignal::ALL.map(TerminalSignal::as_str));
        s
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("signal", json!({"type": "string"})),
                ("targetPgid", json!({"type": "integer"})),
            ],
            &["signal", "targetPgid"],
        )
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: SignalArgs = parse_args(args)?;
        let id = terminal_id(&a.session_id)?;
        let signal =
            TerminalSignal::parse(&a.signal).map_err(|e| invalid_args(e.message().to_owned()))?;
        let (t, owner) = terminals(ctx)?;
        let pgid = t.signal(&owner, id, signal)?;
        Ok(ToolOutput {
            text: format!(
                "delivered {} to foreground process group {pgid}",
                signal.as_str()
            ),
            meta: Some(json!({"signal": signal.as_str(), "targetPgid": pgid})),
            image: None,
        })
    }
}

/// The `terminal_close` tool.
#[derive(Debug, Default)]
pub struct TerminalCloseTool;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct CloseArgs {
    /// The session (pty-1, …).
    session_id: String,
}

impl Bounded for CloseArgs {
    const BOUNDS: &'static [Bound] = &[SESSION_ID_BOUND];
}

#[async_trait]
impl Tool for TerminalCloseTool {
    fn name(&self) -> &str {
        "terminal_close"
    }

    fn title(&self) -> &str {
        "Close terminal"
    }

    fn description(&self, _world: &World) -> String {
        "Close a terminal session: its shell and everything started in it end.".into()
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<CloseArgs>()
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("sessionId", json!({"type": "string"})),
                (
                    "outcome",
                    json!({"type": "string", "enum": ["closed", "already-closing"]}),
                ),
            ],
            &["sessionId", "outcome"],
        )
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: CloseArgs = parse_args(args)?;
        let id = terminal_id(&a.session_id)?;
        let (t, owner) = terminals(ctx)?;
        // Once its tree is gone, what a background job of it made since the last send is
        // checked (it outlives every check before this one).
        ctx.armed(t.policy(&owner, id)?);
        let (text, outcome) = match t.close(&owner, id).await? {
            CloseOutcome::Closed => (format!("closed terminal session {id}"), "closed"),
            CloseOutcome::AlreadyClosing => (
                format!("terminal session {id} was already closing"),
                "already-closing",
            ),
        };
        Ok(ToolOutput {
            text,
            meta: Some(json!({"sessionId": id, "outcome": outcome})),
            image: None,
        })
    }
}

/// The `terminal_list` tool.
#[derive(Debug, Default)]
pub struct TerminalListTool;

#[derive(Debug, Deserialize, JsonSchema)]
struct ListArgs {}

impl Bounded for ListArgs {
    const BOUNDS: &'static [Bound] = &[];
}

#[async_trait]
impl Tool for TerminalListTool {
    fn name(&self) -> &str {
        "terminal_list"
    }

    fn title(&self) -> &str {
        "List terminal sessions"
    }

    fn hints(&self) -> ToolHints {
        ToolHints::READ_ONLY
    }

    fn description(&self, _world: &World) -> String {
        "List your open terminal sessions: id, name, type, status and pid.".into()
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<ListArgs>()
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(&[("sessions", json!({"type": "array"}))], &["sessions"])
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let _: ListArgs = parse_args(args)?;
        let (t, owner) = terminals(ctx)?;
        let list = t.list(&owner);
        let text = if list.is_empty() {
            "(no terminal sessions)".to_owned()
        } else {
            let lines: Vec<String> = list.iter().map(snapshot_line).collect();
            let all = lines.join("\n");
            if all.len() > MAX_RESULT_BYTES {
                bounded(&all, "", true, MAX_RESULT_BYTES)
            } else {
                all
            }
        };
        Ok(ToolOutput {
            text,
            meta: Some(json!({"sessions": list.iter().map(snapshot_json).collect::<Vec<_>>()})),
            image: None,
        })
    }
}
