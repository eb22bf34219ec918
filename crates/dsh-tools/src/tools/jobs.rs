//! The background job tools: `job_output`, `job_list`, `job_kill`.
//!
//! A job belongs to the session that started it (one MCP connection); another session
//! gets `FOREIGN_JOB`. Renderings are the reference's:
//! - `job_output`: the new output, or `(no new output)`, then the status line
//!   (`[status: completed, exit code: 0]`);
//! - `job_list`: `<id> [<kind>] <status> — <label>` per job, or `(no background jobs)`;
//! - `job_kill`: `requested cancellation of job <id>`, or
//!   `job <id> had already finished [status: …]`.
//!
//! Results are bounded to [`crate::tools::output::MAX_RESULT_BYTES`]: output
//! keeps its tail, then `[output truncated]` on its own line, then the status line.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError, Owner};
use dsh_jobs::{JobSnapshot, Jobs, KillOutcome};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::schema::bounds::{Bound, Bounded};
use crate::tools::output::{bounded, tail_of, MAX_RESULT_BYTES};
use crate::{invalid_args, parse_args, CallContext, Tool, ToolHints, ToolOutput, World};

/// How long `job_output` with `wait` waits when `timeout_ms` is not given: 30 s.
pub const WAIT_DEFAULT_MS: u64 = 30_000;
/// The longest `job_output` wait: 600 s; a larger `timeout_ms` is clamped to it.
pub const WAIT_MAX_MS: u64 = 600_000;

/// The marker of output left out of a `job_output` result.
const OUTPUT_TRUNCATED: &str = "[output truncated]";

/// A `job_output` result: `body`, then the status line, on its own line. Past `cap`
/// bytes, the body keeps its tail and `[output truncated]` comes between it and the
/// status line, once (a body that already ends with the marker gets no second one).
fn render_output(body: &str, status: &str, cap: usize) -> String {
    let newline = if body.ends_with('\n') { "" } else { "\n" };
    let whole = format!("{body}{newline}{status}");
    if whole.len() <= cap {
        return whole;
    }
    let body = body.strip_suffix('\n').unwrap_or(body);
    let marker = if body.ends_with(OUTPUT_TRUNCATED) {
        String::new()
    } else {
        format!("\n{OUTPUT_TRUNCATED}")
    };
    let suffix = format!("{marker}\n{status}");
    if suffix.len() >= cap {
        return tail_of(&suffix, cap).to_owned();
    }
    format!("{}{suffix}", tail_of(body, cap - suffix.len()))
}

const JOB_ID_BOUND: Bound = Bound {
    arg: "job_id",
    max: 64,
    advice: "pass an id a background start returned (bash-1, …)",
};

const REASON_BOUND: Bound = Bound {
    arg: "reason",
    max: 1024,
    advice: "say why in a sentence",
};

/// The registry and the caller's owner, or why there is none.
fn jobs<'a>(ctx: &'a CallContext<'_>) -> Result<(&'a Arc<Jobs>, Owner), HarnessError> {
    let jobs = ctx.world.jobs().ok_or_else(|| {
        HarnessError::new(
            ErrorCode::JobsUnavailable,
            "this world runs no background jobs",
        )
    })?;
    Ok((jobs, ctx.world.owner(ctx.session.map(|s| s.id()))))
}

fn job_id(id: &str) -> Result<&str, HarnessError> {
    if id.is_empty() {
        return Err(invalid_args(
            "invalid job_id: expected a non-empty string, got \"\"",
        ));
    }
    Ok(id)
}

/// A job as the model sees it (no owner, limit or delivery flag).
fn public(job: &JobSnapshot) -> Value {
    let mut v = json!({
        "id": job.id.as_str(),
        "kind": job.kind,
        "label": job.label,
        "status": job.status.as_str(),
        "startedAt": job.started_at_ms,
    });
    if let Some(d) = &job.detail {
        v["detail"] = json!(d);
    }
    if let Some(f) = job.finished_at_ms {
        v["finishedAt"] = json!(f);
    }
    v
}

fn job_schema() -> Value {
    json!({"type": "object", "properties": {
        "id": {"type": "string"}, "kind": {"type": "string"}, "label": {"type": "string"},
        "status": {"type": "string"}, "detail": {"type": "string"},
        "startedAt": {"type": "integer"}, "finishedAt": {"type": "integer"}}})
}

/// `job_output`: a background job's new output and its status, optionally after waiting
/// for it to end.
#[derive(Debug, Default)]
pub struct JobOutputTool;

/// The arguments of a `job_output` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct OutputArgs {
    /// The job's id (`bash-1`, …).
    job_id: String,
    /// Wait until the job ends (at most `timeout_ms`) before reading.
    wait: Option<bool>,
    /// How long to wait, in milliseconds (default 30000, at most 600000).
    timeout_ms: Option<f64>,
}

impl Bounded for OutputArgs {
    const BOUNDS: &'static [Bound] = &[JOB_ID_BOUND];
}

#[async_trait]
impl Tool for JobOutputTool {
    fn name(&self) -> &str {
        "job_output"
    }

    fn title(&self) -> &str {
        "Read a background job's output"
    }

    fn hints(&self) -> ToolHints {
        ToolHints::READ_ONLY
    }

    fn description(&self, _world: &World) -> String {
        "Read what a background job printed since your last read, and its status \
         (`[status: running]`, `[status: completed, exit code: 0]`, …). With `wait: true`, \
         first wait for the job to end (at most `timeout_ms`); wait only when you are \
         blocked on it: you are told when a job ends."
            .into()
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<OutputArgs>()
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[("output", json!({"type": "string"})), ("job", job_schema())],
            &["output", "job"],
        )
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: OutputArgs = parse_args(args)?;
        let id = job_id(&a.job_id)?;
        let timeout = match a.timeout_ms {
            None => WAIT_DEFAULT_MS,
            Some(t) if t.is_finite() && t > 0.0 => (t.ceil() as u64).min(WAIT_MAX_MS),
            Some(_) => {
                return Err(invalid_args(format!(
                    "invalid timeout_ms: expected a positive number of milliseconds, got {}",
                    args.get("timeout_ms").cloned().unwrap_or(Value::Null)
                )))
            }
        };
        let (jobs, owner) = jobs(ctx)?;
        if a.wait == Some(true) {
            jobs.wait(id, Duration::from_millis(timeout), Some(&owner), ctx.cancel)
                .await?;
        }
        let (text, job) = jobs.read(id, Some(&owner))?;
        let body = if text.is_empty() {
            "(no new output)"
        } else {
            text.as_str()
        };
        Ok(ToolOutput {
            text: render_output(body, &job.status_line(), MAX_RESULT_BYTES),
            meta: Some(json!({"output": text, "job": public(&job)})),
            image: None,
        })
    }
}

/// `job_list`: the caller's background jobs.
#[derive(Debug, Default)]
pub struct JobListTool;

#[derive(Debug, Deserialize, JsonSchema)]
struct ListArgs {}

impl Bounded for ListArgs {
    const BOUNDS: &'static [Bound] = &[];
}

#[async_trait]
impl Tool for JobListTool {
    fn name(&self) -> &str {
        "job_list"
    }

    fn title(&self) -> &str {
        "List background jobs"
    }

    fn hints(&self) -> ToolHints {
        ToolHints::READ_ONLY
    }

    fn description(&self, _world: &World) -> String {
        "List your background jobs: id, kind, status and what each runs.".into()
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<ListArgs>()
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[("jobs", json!({"type": "array", "items": job_schema()}))],
            &["jobs"],
        )
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let _: ListArgs = parse_args(args)?;
        let (jobs, owner) = jobs(ctx)?;
        let list = jobs.list(Some(&owner));
        let text = if list.is_empty() {
            "(no background jobs)".to_owned()
        } else {
            let lines: Vec<String> = list
                .iter()
                .map(|j| {
                    // A label is a command line: one visible line, its head.
                    let (label, used) = dsh_core::visible::visible_prefix(&j.label, 200);
                    let more = if used < j.label.len() { "…" } else { "" };
                    format!(
                        "{} [{}] {} — {label}{more}",
                        j.id,
                        j.kind,
                        j.status.as_str()
                    )
                })
                .collect();
            bounded(&lines.join("\n"), "", false, MAX_RESULT_BYTES)
        };
        Ok(ToolOutput {
            text,
            meta: Some(json!({"jobs": list.iter().map(public).collect::<Vec<_>>()})),
            image: None,
        })
    }
}

/// `job_kill`: stops a background job (its whole process tree).
#[derive(Debug, Default)]
pub struct JobKillTool;

/// The arguments of a `job_kill` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct KillArgs {
    /// The job's id (`bash-1`, …).
    job_id: String,
    /// Why, in a few words (kept in the session log).
    reason: Option<String>,
}

impl Bounded for KillArgs {
    const BOUNDS: &'static [Bound] = &[JOB_ID_BOUND, REASON_BOUND];
}

#[async_trait]
impl Tool for JobKillTool {
    fn name(&self) -> &str {
        "job_kill"
    }

    fn title(&self) -> &str {
        "Kill a background job"
    }

    fn hints(&self) -> ToolHints {
        ToolHints {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        }
    }

    fn description(&self, _world: &World) -> String {
        "Stop a background job: a command's whole process tree gets SIGTERM, then SIGKILL \
         after a grace; a terminal send's program gets SIGINT, then what the send started \
         gets SIGTERM and SIGKILL if it runs on (the terminal's shell lives on). Kill the jobs you no longer \
         need."
            .into()
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<KillArgs>()
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("outcome", json!({"type": "string"})),
                ("job", job_schema()),
            ],
            &["outcome", "job"],
        )
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: KillArgs = parse_args(args)?;
        let id = job_id(&a.job_id)?;
        let (jobs, owner) = jobs(ctx)?;
        let reason = a.reason.as_deref().unwrap_or("model request");
        let (outcome, job) = jobs.kill(id, Some(&owner), reason)?;
        let (text, outcome) = match outcome {
            KillOutcome::Requested => (
                format!("requested cancellation of job {}", job.id),
                "cancellation-requested",
            ),
            KillOutcome::AlreadyFinished => (
                format!("job {} had already finished {}", job.id, job.status_line()),
                "already-finished",
            ),
        };
        Ok(ToolOutput {
            text,
            meta: Some(json!({"outcome": outcome, "job": public(&job)})),
            image: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_job_id_is_the_pinned_error() {
        let e = job_id("").expect_err("empty");
        assert_eq!(
            e.message(),
            "invalid job_id: expected a non-empty string, got \"\""
        );
        assert_eq!(job_id("bash-1").expect("id"), "bash-1");
    }

    #[test]
    fn a_cut_output_says_so_once_before_its_status() {
        let status = "[status: running]";
        assert_eq!(render_output("a\n", status, 100), "a\n[status: running]");
        assert_eq!(render_output("a", status, 100), "a\n[status: running]");
        let cut = render_output(&"x\n".repeat(100), status, 60);
        assert_eq!(cut.len(), 60, "{cut}");
        assert!(
            cut.ends_with("x\nx\n[output truncated]\n[status: running]"),
            "{cut}"
        );
        let already = render_output(
            &format!("{}[output truncated]", "y".repeat(100)),
            status,
            60,
        );
        assert_eq!(
            already.matches("[output truncated]").count(),
            1,
            "{already}"
        );
        assert!(
            already.ends_with("y[output truncated]\n[status: running]"),
            "{already}"
        );
        // A status line longer than the cap keeps its tail.
        assert!(render_output("a", status, 5).len() <= 5);
    }
}
