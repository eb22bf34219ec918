//! The `bash` tool: one command line in a fresh `bash -c`, confined by the session's
//! sandbox policy, with one approved escalation per call when the model asks for it.
//!
//! Only the named arguments reach the shell (`command`, `workdir`, `timeout_ms`); anything
//! else a model sends (`env`, `stdin`, …) is ignored. Each command gets the `DSH_*` facts.
//! The result text is the rendering of `dsh_shell::render` (stdout, `[stderr]`, `(no
//! output)`, then the markers), preceded, after a sandbox denial, by
//! `[sandbox: file access denied under <mode> mode]` and, where a wider mode exists, the
//! escalation hint. A non-zero exit is an ordinary result; a command that could not start
//! (`SANDBOX_UNAVAILABLE`, a bad workdir) is an error result.

mod job;
pub mod persistent;

use std::path::PathBuf;
use std::sync::Arc;

use crate::policy::escalation::{denial_lines, validate_escalation_args, Subject};
use async_trait::async_trait;
use dsh_approval::Action;
use dsh_core::{ErrorCode, HarnessError};
use dsh_sandbox::Enforcement;
use dsh_shell::render::render_result_with;
use dsh_shell::ShellRequest;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::policy::Escalation;
use crate::schema::bounds::{self, Bound, Bounded};
use crate::{CallContext, Tool, ToolOutput, World};
use dsh_jobs::JobStart;
use job::BashJob;

/// The `bash` tool. See the [module docs](self).
#[derive(Debug, Default)]
pub struct BashTool;

/// The arguments of a `bash` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct BashArgs {
    /// The command line, run as `bash -c COMMAND` in a fresh shell.
    command: String,
    /// What the command does, in a few words (shown to the user).
    description: String,
    /// Timeout in milliseconds (default 120000, at most 600000).
    timeout_ms: Option<f64>,
    /// Working directory; a relative one resolves against the session's workspace. Pass
    /// this instead of `cd`.
    workdir: Option<String>,
    /// A wider sandbox mode for this one call; needs `justification`, and the user is
    /// asked. Use the narrowest mode that suffices.
    sandbox_permissions: Option<Escalation>,
    /// Why the wider mode is needed, in one sentence the user will read.
    justification: Option<String>,
    /// Start the command in the background and return its job id at once (no timeout);
    /// read its output with `job_output`, stop it with `job_kill`. You are told when it
    /// ends.
    run_in_background: Option<bool>,
}

impl Bounded for BashArgs {
    const BOUNDS: &'static [Bound] = &[
        bounds::COMMAND,
        bounds::DESCRIPTION,
        bounds::WORKDIR,
        bounds::JUSTIFICATION,
    ];
}

use crate::invalid_args;

fn parse(args: &Value) -> Result<BashArgs, HarnessError> {
    let a: BashArgs = crate::parse_args(args)?;
    if a.command.trim().is_empty() {
        return Err(invalid_args("invalid command: expected a non-empty string"));
    }
    if a.description.trim().is_empty() {
        return Err(invalid_args(
            "invalid description: expected a non-empty string",
        ));
    }
    if let Some(t) = a.timeout_ms {
        if !(t.is_finite() && t > 0.0) {
            return Err(invalid_args(format!(
                "invalid timeout_ms: expected a positive number, got {}",
                args.get("timeout_ms").cloned().unwrap_or(Value::Null)
            )));
        }
    }
    validate_escalation_args(
        a.sandbox_permissions.map(Escalation::mode),
        a.justification.as_deref(),
    )?;
    Ok(a)
}

/// Starts `request` as a `bash-<n>` job of the call's session and acknowledges it.
fn start_in_background(
    ctx: &CallContext<'_>,
    mut request: ShellRequest,
    label: String,
    can_ask: bool,
) -> Result<ToolOutput, HarnessError> {
    let Some(jobs) = ctx.world.jobs() else {
        return Err(HarnessError::new(
            ErrorCode::JobsUnavailable,
            "background jobs are not available here; run the command without \
             run_in_background",
        ));
    };
    // A cancel that came after an approval: nothing starts.
    if ctx.cancel.is_cancelled() {
        return Err(HarnessError::new(ErrorCode::Aborted, "tool call aborted"));
    }
    // The job outlives the call: neither the call's cancel nor a timeout ends it.
    request.cancel = None;
    request.timeout_ms = None;
    let owner = ctx.world.owner(ctx.session.map(|s| s.id()));
    let shell = ctx.world.shell().clone();
    // The job takes the call's write scopes over once its command runs, and closes them
    // when it ends; if it never starts, the pipeline closes them with the call.
    let scopes = ctx.scopes.handover();
    let id = jobs.start(JobStart::new("bash", label, Some(owner)), move || {
        let process = shell.start(shell.spec_for(request)?)?;
        Ok(Arc::new(BashJob::new(process, scopes.take(), can_ask)) as Arc<dyn dsh_jobs::Job>)
    })?;
    Ok(ToolOutput {
        image: None,
        text: dsh_shell::render::background_ack(id.as_str()),
        meta: Some(json!({"jobId": id.as_str()})),
    })
}

#[async_trait]
impl Tool for BashTool {
    fn name(&self) -> &str {
        "bash"
    }

    fn title(&self) -> &str {
        "Run a bash command"
    }

    fn hints(&self) -> crate::ToolHints {
        crate::ToolHints::ANYTHING
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("exitCode", serde_json::json!({"type": "integer"})),
                ("jobId", serde_json::json!({"type": "string"})),
                ("signal", serde_json::json!({"type": "string"})),
                ("timedOut", serde_json::json!({"type": "boolean"})),
                ("timeoutMs", serde_json::json!({"type": "integer"})),
                ("truncated", serde_json::json!({"type": "boolean"})),
                (
                    "spill",
                    serde_json::json!({"type": "object", "properties": {
                        "stdout": {"type": "string"}, "stderr": {"type": "string"}}}),
                ),
                (
                    "sandbox",
                    serde_json::json!({"type": "object", "properties": {
                        "mode": {"type": "string"},
                        "denied": {"type": "boolean"},
                        "enforcement": {"type": "string"},
                        "partialReason": {"type": "string"},
                        "runner": {"type": "string"},
                        "appeared": {"type": "array", "items": {"type": "string"}}}}),
                ),
            ],
            &[],
        )
    }

    fn description(&self, world: &World) -> String {
        let mut d = String::from(
            "Run a command line with `bash -c`. Every call is a fresh shell: pass `workdir` \
             instead of `cd`. A non-zero exit shows as `[exit code: N]` at the end of the \
             result: check it. Facts about this harness are in the `DSH_*` environment \
             variables. Long output keeps its tail, with the path of a file holding the rest.",
        );
        if world.jobs().is_some() {
            d.push_str(
                " For a server or a long build, pass `run_in_background: true`: the call \
                 returns a job id at once; read the output with `job_output`, stop it with \
                 `job_kill`. You are told when it ends.",
            );
        }
        if world.confines() {
            d.push_str(
                " Commands run in a sandbox: a write it refuses shows as `[sandbox: file access \
                 denied under <mode> mode]`; do not try to work around it.",
            );
            if world.approval().has_answerer() {
                d.push_str(
                    " To retry one call in a wider mode, pass `sandbox_permissions` (the \
                     narrowest mode that suffices) and a one-sentence `justification`; the user \
                     is asked, and may refuse.",
                );
            } else {
                d.push_str(
                    " Nobody can approve a wider mode in this session: if the task needs one, \
                     say so to the user, who can restart dsh with a wider `--mode`.",
                );
            }
        }
        d
    }

    fn parameters(&self, world: &World) -> Value {
        let mut v = crate::args_schema::<BashArgs>();
        if let Some(props) = v.get_mut("properties").and_then(Value::as_object_mut) {
            if !world.confines() {
                props.remove("sandbox_permissions");
                props.remove("justification");
            }
            if world.jobs().is_none() {
                props.remove("run_in_background");
            }
        }
        v
    }

    /// The command line and the workdir, as given.
    fn action(&self, args: &Value) -> Action {
        let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
        match text("command") {
            Some(command) => Action::Command {
                command,
                workdir: text("workdir"),
            },
            None => Action::Arguments(args.clone()),
        }
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a = parse(args)?;
        let world = ctx.world;
        let policy = crate::policy::policy_for_call(
            ctx,
            a.sandbox_permissions.map(Escalation::mode),
            a.justification.as_deref(),
            Subject::Command,
            "bash",
            self.action(args),
        )
        .await?;
        let root = ctx.workspace_root();
        let workdir = Some(match a.workdir.as_deref() {
            Some(w) if !w.starts_with('/') => root.join(w),
            Some(w) => PathBuf::from(w),
            None => root,
        });
        let dsh_env = ctx.managed_env()?;
        let label = a.command.clone();
        let mut request = ShellRequest::new(a.command, policy.clone());
        request.workdir = workdir;
        request.timeout_ms = a.timeout_ms;
        request.dsh_env = Some(dsh_env);
        if a.run_in_background == Some(true) {
            let can_ask = world.can_ask(ctx.session.map(|s| &**s)).await;
            return start_in_background(ctx, request, label, can_ask);
        }
        request.cancel = Some(ctx.cancel.clone());
        let shell = world.shell();
        let result = shell.run(shell.spec_for(request)?).await?;
        if result.aborted {
            // What a cancelled call planted before it was stopped is still checked: the
            // pipeline closes the call's write scope on every outcome.
            return Err(HarnessError::new(ErrorCode::Aborted, "tool call aborted"));
        }
        // Reads a closed home or a denial refused are said as such; a wider mode would not
        // open them, so no escalation is offered for them alone.
        let read_lines = if result.exit_code == Some(0) {
            Vec::new()
        } else {
            crate::policy::escalation::read_denial_lines(&policy, &result.stderr.text)
        };
        let other_denials = result
            .stderr
            .text
            .lines()
            .filter(|l| {
                l.contains("Permission denied")
                    || l.contains("Read-only file system")
                    || l.contains("Operation not permitted")
            })
            .count()
            > read_lines.len();
        let markers = match result
            .sandbox
            .as_ref()
            .filter(|f| f.denied && (read_lines.is_empty() || other_denials))
        {
            Some(facts) => denial_lines(
                facts.mode,
                Subject::Command,
                world.can_ask(ctx.session.map(|s| &**s)).await,
            ),
            None => Vec::new(),
        };
        let mut text = render_result_with(&result, &markers);
        let partial = result.sandbox.as_ref().and_then(|f| match &f.enforcement {
            Some(Enforcement::Partial(why)) => Some(why.clone()),
            _ => None,
        });
        if let Some(why) = &partial {
            text.push_str(&format!(
                "\n[sandbox: enforced only in part, as the user allowed: {why}]"
            ));
        }
        for line in &read_lines {
            text.push('\n');
            text.push_str(line);
        }
        let meta = json!({
            "exitCode": result.exit_code,
            "signal": result.signal.map(|s| s.name()),
            "timedOut": result.timed_out,
            "timeoutMs": result.timeout_ms,
            "truncated": result.stdout.truncated || result.stderr.truncated,
            // Left out when nothing spilled (an empty object says nothing).
            "spill": (result.stdout.spill.is_some() || result.stderr.spill.is_some()).then(|| json!({
                "stdout": result.stdout.spill.as_ref().map(|s| s.path.clone()),
                "stderr": result.stderr.spill.as_ref().map(|s| s.path.clone()),
            })),
            "sandbox": result.sandbox.as_ref().map(|f| json!({
                "mode": f.mode.as_str(),
                "denied": f.denied,
                "enforcement": f.enforcement.as_ref().map(|e| e.as_str()),
                "partialReason": partial,
                "runner": f.runner.map(|r| r.as_str()),
            })),
        });
        Ok(ToolOutput {
            image: None,
            text,
            meta: Some(meta),
        })
    }
}
