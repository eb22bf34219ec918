//! The persistent `bash` tool (`bash = "persistent"`): one shell per session on a
//! terminal, so `cd`, `export`, functions and aliases carry from one call to the next.
//!
//! The shell is the session's [`PersistentBash`], a provider of the shell seam over a
//! terminal named `bash` (it shows in `terminal_list`), opened at the session's first call
//! and kept while the session's sandbox policy stays the same. Calls are serialised per
//! session, the check after each call included, so the check sees that call's command
//! alone. The timeouts and the output budget are the configuration's, as one-shot `bash`
//! takes them ([`PersistentBashTool::new`]); the text is the shell seam's rendering.
//!
//! The shell is reset (closed; the next call opens a fresh one in the workspace) when a
//! command times out, when the call is cancelled, and when the shell exits (`exit`), and
//! the result says so: `next bash call starts from the workspace`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError, Owner, SessionId};
use dsh_shell::render::{render_result_with, SHELL_RESET_NOTE};
use dsh_shell::{Shell, ShellConfig, ShellRequest};
use dsh_terminal::persistent::ansi_c;
use dsh_terminal::{PersistentBash, Terminals};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::policy::escalation::{denial_lines, Subject};
use crate::schema::bounds::{self, Bound, Bounded};
use crate::{invalid_args, CallContext, Tool, ToolOutput, World};

/// One session's shell; locking it serialises the session's calls.
type ShellSlot = Arc<tokio::sync::Mutex<PersistentBash>>;

/// The persistent `bash` tool. See the [module docs](self).
#[derive(Debug)]
pub struct PersistentBashTool {
    /// Each session's shell, behind a lock that serialises the session's calls in arrival
    /// order.
    shells: Mutex<HashMap<Option<SessionId>, ShellSlot>>,
    /// The shells' configuration.
    config: ShellConfig,
}

impl Default for PersistentBashTool {
    /// The tool with [`ShellConfig::default`]'s timeouts and output budget.
    fn default() -> PersistentBashTool {
        PersistentBashTool::new(&ShellConfig::default())
    }
}

impl PersistentBashTool {
    /// The tool under `shell`'s configuration, as one-shot `bash` takes it: `timeout_ms`
    /// when a call names none, `max_timeout_ms` as the cap (and never past the terminals'
    /// own, 600 s by default), and `max_output_bytes` as the most characters of output a
    /// result shows (the terminal merges both streams).
    pub fn new(shell: &ShellConfig) -> PersistentBashTool {
        PersistentBashTool {
            shells: Mutex::default(),
            config: shell.clone(),
        }
    }

    /// The shell of `session`, whose owner is `owner`: the one it has, else a new one (a
    /// session whose owner changed, a client that connected again, gets a new one).
    fn slot(
        &self,
        session: Option<&SessionId>,
        terminals: &Arc<Terminals>,
        owner: Owner,
    ) -> Result<ShellSlot, HarnessError> {
        let mut shells = self.shells.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = shells.get(&session.cloned()) {
            if slot.try_lock().map_or(true, |s| *s.owner() == owner) {
                return Ok(slot.clone());
            }
        }
        let slot = Arc::new(tokio::sync::Mutex::new(PersistentBash::new(
            terminals.clone(),
            owner,
            self.config.clone(),
        )?));
        shells.insert(session.cloned(), slot.clone());
        Ok(slot)
    }
}

/// The arguments of a persistent `bash` call: the one-shot tool's.
#[derive(Debug, Deserialize, JsonSchema)]
struct Args {
    /// The command line, run in this session's shell (its working directory and
    /// variables carry over from earlier calls).
    command: String,
    /// What the command does, in a few words (shown to the user).
    description: String,
    /// Timeout in milliseconds (default 120000, at most 600000). A command that times out
    /// resets the shell.
    timeout_ms: Option<f64>,
    /// A directory to `cd` to first (relative: against the current one); the shell stays
    /// there.
    workdir: Option<String>,
}

impl Bounded for Args {
    const BOUNDS: &'static [Bound] = &[bounds::COMMAND, bounds::DESCRIPTION, bounds::WORKDIR];
}

#[async_trait]
impl Tool for PersistentBashTool {
    fn name(&self) -> &str {
        "bash"
    }

    fn title(&self) -> &str {
        "Run a bash command (persistent shell)"
    }

    fn description(&self, world: &World) -> String {
        let mut d = String::from(
            "Run a command line in this session's persistent bash shell: the working \
             directory, exported variables and functions carry over from earlier calls. A \
             non-zero exit shows as `[exit code: N]` at the end of the result: check it. The \
             shell is reset to a fresh one in the workspace when a command times out, waits \
             for input, is cancelled, or runs `exit`; the result says so. Do not start \
             interactive programs here; use terminal_open for those. There is no \
             run_in_background and no wider sandbox mode per call here.",
        );
        if world.confines() {
            d.push_str(
                " The shell runs in the session's sandbox: a write it refuses shows as \
                 `[sandbox: file access denied under <mode> mode]`. When the sandbox changes (a \
                 new repository is protected, say), the next call runs in a fresh shell and its \
                 result opens with `[a fresh shell: …]`.",
            );
        }
        d
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<Args>()
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                (
                    "exitCode",
                    json!({"type": "integer", "description": "the command's exit status, when it finished"}),
                ),
                ("timedOut", json!({"type": "boolean"})),
                ("timeoutMs", json!({"type": "integer"})),
                (
                    "shellReset",
                    json!({"type": "boolean", "description": "the shell was closed after this call; the next starts a fresh one in the workspace"}),
                ),
                (
                    "freshShell",
                    json!({"type": "boolean", "description": "this call ran in a fresh shell where the last call left one: its directory and variables were lost"}),
                ),
                (
                    "sessionId",
                    json!({"type": "string", "description": "the terminal the shell is (terminal_list shows it as bash)"}),
                ),
                (
                    "sandbox",
                    json!({"type": "object", "properties": {
                        "mode": {"type": "string"},
                        "denied": {"type": "boolean"},
                        "appeared": {"type": "array", "items": {"type": "string"}}}}),
                ),
            ],
            &["timedOut", "shellReset"],
        )
    }

    fn action(&self, args: &Value) -> dsh_approval::Action {
        let text = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
        match text("command") {
            Some(command) => dsh_approval::Action::Command {
                command,
                workdir: text("workdir"),
            },
            None => dsh_approval::Action::Arguments(args.clone()),
        }
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: Args = crate::parse_args(args)?;
        // Not an argument of this tool; silently running it in the foreground would block
        // the model for as long as a background job was meant to run.
        if args
            .get("run_in_background")
            .is_some_and(|v| v != &Value::Bool(false))
        {
            return Err(invalid_args(
                "run_in_background is not available with persistent bash; type the command \
                 into a terminal with terminal_send and run_in_background: true",
            ));
        }
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
                return Err(invalid_args(
                    "invalid timeout_ms: expected a positive number",
                ));
            }
        }
        let command = match &a.workdir {
            Some(w) => format!("cd -- {} && {}", ansi_c(w), a.command),
            None => a.command,
        };
        let terminals = ctx.world.terminals().ok_or_else(|| {
            HarnessError::new(
                ErrorCode::UnknownTool,
                "this world has no terminals, so bash cannot be persistent",
            )
        })?;
        let session = ctx.session.map(|s| s.id());
        let slot = self.slot(session, terminals, ctx.world.owner(session))?;
        // Calls of one session run one at a time, in arrival order.
        let shell = slot.lock().await;
        if let Some(reason) = ctx.cancel.reason() {
            return Err(HarnessError::aborted_before_start("bash", reason));
        }
        // A shell a dropped call left closing is gone (whole tree) before this call's
        // policy is decided; what it made since it opened is checked after this call.
        if let Some(closed) = shell.settle().await {
            ctx.armed(closed);
        }
        // The call's policy, with the check after the call armed. A shell opened under
        // another policy is replaced by a fresh one, and what its commands made since it
        // opened (its background jobs between calls too) is checked after this call,
        // against the policy it ran under.
        let policy = ctx.policy().await;
        if let Some(replaced) = shell.replaced_by(&policy).await {
            ctx.armed(replaced);
        }
        let mut request = ShellRequest::new(command, policy.clone());
        request.timeout_ms = a.timeout_ms;
        request.cancel = Some(ctx.cancel.clone());
        request.dsh_env = Some(ctx.managed_env()?);
        let ran = match shell.spec_for(request) {
            Ok(spec) => shell.run(spec).await,
            Err(e) => Err(e),
        };
        // The check runs before the next call may type into the shell, so it sees this
        // call's command alone (the pipeline adds what it found to the result).
        ctx.scopes.close_now().await;
        let result = ran?;
        if result.aborted {
            return Err(HarnessError::new(
                ErrorCode::Aborted,
                format!("persistent bash command aborted {SHELL_RESET_NOTE}"),
            ));
        }
        let run = result
            .persistent
            .as_ref()
            .ok_or_else(|| HarnessError::internal("a persistent shell gave a one-shot result"))?;
        let reset = run.reset.is_some();
        let denied = result.sandbox.as_ref().is_some_and(|f| f.denied);
        let mut meta = json!({
            "timedOut": result.timed_out,
            "timeoutMs": result.timeout_ms,
            "shellReset": reset,
            "freshShell": run.fresh.is_some(),
            // The shell's sandbox facts, as a one-shot call gives them (what the check
            // after the call finds is added by the pipeline).
            "sandbox": {"mode": policy.mode.as_str(), "denied": denied},
        });
        if !reset {
            meta["exitCode"] = json!(result.exit_code);
            meta["sessionId"] = json!(run.shell_id);
        }
        // A write the sandbox refused is said as one-shot bash says it; this tool cannot
        // ask for a wider mode, so the hint is the one for a session nobody can widen.
        let markers = if denied {
            denial_lines(policy.mode, Subject::Command, false)
        } else {
            Vec::new()
        };
        Ok(ToolOutput {
            text: render_result_with(&result, &markers),
            meta: Some(meta),
            image: None,
        })
    }
}
