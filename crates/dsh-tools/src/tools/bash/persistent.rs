//! The persistent `bash` tool (`bash = "persistent"`): one shell per session on a
//! terminal, so `cd`, `export`, functions and aliases carry from one call to the next.
//!
//! The shell is a terminal named `bash` (it shows in `terminal_list`), opened at
//! the session's first call under the session's sandbox policy and kept for its life.
//! Calls are serialised per session. Each command runs as one line,
//! `eval -- $'COMMAND'`, between a start marker and an end marker that carries its exit
//! status, each with a fresh random nonce; the result is the text between the markers,
//! then `[exit code: N]` for a non-zero status, as the one-shot tool renders it. The
//! timeouts and the output budget are the configuration's, as one-shot `bash` takes them
//! ([`PersistentBashTool::new`]); output over the budget keeps its end, after a
//! `<response clipped>` note.
//!
//! The shell is reset (closed; the next call opens a fresh one in the workspace) when a
//! command times out, when the call is cancelled, and when the shell exits (`exit`), and
//! the result says so: `next bash call starts from the workspace`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError, SessionId};
use dsh_shell::ShellConfig;
use dsh_terminal::{OpenRequest, SendRequest, TerminalId, TerminalStatus, WaitReason};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::policy::escalation::Subject;
use crate::schema::bounds::{self, Bound, Bounded};
use crate::{invalid_args, CallContext, Tool, ToolOutput, World};

/// The most bytes of output kept while a command runs (its end).
const MAX_KEPT_BYTES: usize = 1 << 20;

/// What a reset result says.
const RESET_NOTE: &str = "[the shell was reset: the next bash call starts from the workspace \
                          with a fresh working directory and environment]";

/// One session's shell (its terminal id, once open); locking it serialises the session's
/// calls.
type ShellSlot = Arc<tokio::sync::Mutex<Option<TerminalId>>>;

/// The persistent `bash` tool. See the [module docs](self).
#[derive(Debug)]
pub struct PersistentBashTool {
    /// Each session's shell (its terminal id, once open), behind a lock that serialises
    /// the session's calls in arrival order.
    shells: Mutex<HashMap<Option<SessionId>, ShellSlot>>,
    /// A command's timeout when the call names none.
    default_timeout: Duration,
    /// The cap on any command's timeout.
    max_timeout: Duration,
    /// The most characters of output a result shows (its end).
    max_output_chars: usize,
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
            default_timeout: Duration::from_millis(shell.timeout_ms.max(1)),
            max_timeout: Duration::from_millis(shell.max_timeout_ms.max(1)),
            max_output_chars: shell.max_output_bytes.max(1),
        }
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

/// `s` as a bash ANSI-C string (`$'…'`): backslash and quote escaped, and every control
/// character (C0, DEL, C1) as `\xHH` or `\uHHHH`, so nothing reaches the shell's line
/// editor as a key (a tab completing, Ctrl-U erasing the wrapper).
fn ansi_c(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    out.push_str("$'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if (c as u32) < 0x80 && c.is_control() => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The markers of one command.
struct Markers {
    start: String,
    end: String,
}

impl Markers {
    fn new() -> Markers {
        let nonce = dsh_core::spill::random_hex(16);
        Markers {
            start: format!("__DSH_PERSISTENT_BASH_START_{nonce}__"),
            end: format!("__DSH_PERSISTENT_BASH_END_{nonce}:"),
        }
    }

    /// The one line that runs `command`. Each marker is printed from two halves, so the
    /// line itself (should the terminal echo it) never holds a whole one.
    fn line(&self, command: &str) -> String {
        let (s1, s2) = self.start.split_at(12);
        let (e1, e2) = self.end.split_at(12);
        format!(
            "printf '\\033[?1049l%s%s\\n' '{s1}' '{s2}'; eval -- {}; __dsh_status=$?; \
             printf '\\n%s%s%s\\n' '{e1}' '{e2}' \"$__dsh_status\"",
            ansi_c(command)
        )
    }

    /// The output and exit status, once `text` holds the end marker and its status.
    /// The output is `None` when the start marker was lost (the output's start was
    /// dropped).
    fn complete(&self, text: &str) -> Option<(Option<String>, i32)> {
        let at = text.rfind(&self.end)?;
        let rest = &text[at + self.end.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() || !rest[digits.len()..].starts_with('\n') {
            return None;
        }
        let status = digits.parse().unwrap_or(255);
        let before = &text[..at];
        let output = before.rfind(&self.start).map(|s| {
            let body = &before[s + self.start.len()..];
            let body = body.strip_prefix('\n').unwrap_or(body);
            body.strip_suffix('\n').unwrap_or(body).to_owned()
        });
        Some((output, status))
    }

    /// What a command printed so far, for a partial result.
    fn partial(&self, text: &str) -> String {
        let from = text.rfind(&self.start).map_or(0, |s| s + self.start.len());
        let body = &text[from..];
        let body = body.split(&self.end).next().unwrap_or(body);
        body.strip_prefix('\n').unwrap_or(body).to_owned()
    }
}

/// `output` within `max_chars` characters (its end), with the notes a clipped or
/// incomplete output gets.
fn render_output(output: &str, incomplete: bool, max_chars: usize) -> String {
    let chars = output.chars().count();
    let mut text = String::new();
    if incomplete && !output.is_empty() {
        text.push_str(
            "<response clipped><NOTE>The start of this output was dropped by the terminal's \
             scrollback limit.</NOTE>\n",
        );
    }
    if chars > max_chars {
        text.push_str(&format!(
            "<response clipped><NOTE>The output had {chars} characters; only its last \
             {max_chars} are shown. Redirect long output to a file and search it with \
             `grep -n`.</NOTE>\n"
        ));
        let skip = chars - max_chars;
        text.extend(output.chars().skip(skip));
    } else {
        text.push_str(output);
    }
    text
}

/// The result of a call that reset the shell: its non-empty `parts`, a line each.
fn reset_output(parts: &[String], timed_out: bool) -> ToolOutput {
    let text: Vec<&str> = parts
        .iter()
        .map(String::as_str)
        .filter(|p| !p.is_empty())
        .collect();
    ToolOutput {
        text: text.join("\n"),
        meta: Some(json!({"timedOut": timed_out, "shellReset": true})),
        image: None,
    }
}

/// `s` with only its last [`MAX_KEPT_BYTES`] bytes.
fn keep_tail(s: &mut String) {
    if s.len() > MAX_KEPT_BYTES {
        let mut cut = s.len() - MAX_KEPT_BYTES;
        while !s.is_char_boundary(cut) {
            cut += 1;
        }
        s.drain(..cut);
    }
}

impl PersistentBashTool {
    fn slot(&self, session: Option<&SessionId>) -> ShellSlot {
        self.shells
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(session.cloned())
            .or_default()
            .clone()
    }
}

/// The session's shell: the one open, else a new one, ready for commands (no echo).
async fn shell(
    ctx: &CallContext<'_>,
    slot: &mut Option<TerminalId>,
) -> Result<TerminalId, HarnessError> {
    let t = ctx.world.terminals().ok_or_else(|| {
        HarnessError::new(
            ErrorCode::UnknownTool,
            "this world has no terminals, so bash cannot be persistent",
        )
    })?;
    let owner = ctx.world.owner(ctx.session.map(|s| s.id()));
    if let Some(id) = slot.clone() {
        let live = t
            .list(&owner)
            .iter()
            .any(|s| s.id == id && s.status == TerminalStatus::Running);
        if live {
            return Ok(id);
        }
        let _ = t.close(&owner, id.as_str()).await;
        *slot = None;
    }
    let policy = crate::policy::policy_for_call(
        ctx,
        None,
        None,
        Subject::Command,
        "bash",
        dsh_approval::Action::Arguments(json!({})),
    )
    .await?;
    let opened = t
        .open(
            &owner,
            OpenRequest {
                kind: "shell".into(),
                name: Some("bash".into()),
                cwd: None,
                policy,
                env: ctx.managed_env()?,
            },
            ctx.cancel,
        )
        .await?;
    let id = opened.snapshot.id;
    let init = t
        .send(
            &owner,
            id.as_str(),
            SendRequest {
                text: "stty -echo".into(),
                submit: true,
                timeout: Duration::from_secs(10),
            },
            ctx.cancel,
        )
        .await;
    match init {
        Ok(r) if r.wait != WaitReason::Timeout && r.status == TerminalStatus::Running => {
            *slot = Some(id.clone());
            Ok(id)
        }
        other => {
            let _ = t.close(&owner, id.as_str()).await;
            Err(match other {
                Err(e) => e,
                Ok(_) => HarnessError::new(
                    ErrorCode::TerminalFailed,
                    "the persistent bash shell did not accept initialization",
                ),
            })
        }
    }
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
             non-zero exit shows as `[exit code: N]` at the end of the result: check it. A \
             command that times out, or `exit`, resets the shell to a fresh one in the \
             workspace. Do not start interactive programs here; use terminal_open for those.",
        );
        if world.confines() {
            d.push_str(
                " The shell runs in the sandbox mode the session had when it started; a write \
                 it refuses fails as it would in a terminal.",
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
                ("exitCode", json!({"type": "integer"})),
                ("timedOut", json!({"type": "boolean"})),
                ("shellReset", json!({"type": "boolean"})),
                ("sessionId", json!({"type": "string"})),
                (
                    "sandbox",
                    json!({"type": "object", "properties": {
                        "mode": {"type": "string"},
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
        let timeout = match a.timeout_ms {
            Some(t) if !(t.is_finite() && t > 0.0) => {
                return Err(invalid_args(
                    "invalid timeout_ms: expected a positive number",
                ))
            }
            Some(t) => {
                Duration::from_millis(t as u64).clamp(Duration::from_millis(1), self.max_timeout)
            }
            None => self.default_timeout.min(self.max_timeout),
        };
        let command = match &a.workdir {
            Some(w) => format!("cd -- {} && {}", ansi_c(w), a.command),
            None => a.command,
        };
        let slot = self.slot(ctx.session.map(|s| s.id()));
        // Calls of one session run one at a time, in arrival order.
        let mut slot = slot.lock().await;
        if let Some(reason) = ctx.cancel.reason() {
            return Err(HarnessError::aborted_before_start("bash", reason));
        }
        let id = shell(ctx, &mut slot).await?;
        let t = ctx
            .world
            .terminals()
            .ok_or_else(|| HarnessError::internal("no terminals"))?;
        // The shell is a terminal: no send waits past the terminals' own cap.
        let timeout = timeout.min(t.config().max_timeout);
        let owner = ctx.world.owner(ctx.session.map(|s| s.id()));
        // The shell's policy: what the command makes is checked after this call, also
        // when it fails or is cut (the shell may be reset before then).
        let policy = ctx.armed(t.policy(&owner, id.as_str())?);
        let markers = Markers::new();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen = String::new();
        let mut incomplete_upstream = false;
        let mut first = true;
        let reset = |slot: &mut Option<TerminalId>| {
            let id = slot.take();
            let (t, owner) = (t.clone(), owner.clone());
            async move {
                if let Some(id) = id {
                    let _ = t.close(&owner, id.as_str()).await;
                }
            }
        };
        let ran: Result<ToolOutput, HarnessError> = async {
            loop {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let sent = t
                    .send(
                        &owner,
                        id.as_str(),
                        SendRequest {
                            text: if first {
                                markers.line(&command)
                            } else {
                                String::new()
                            },
                            submit: first,
                            timeout: left.max(Duration::from_millis(1)),
                        },
                        ctx.cancel,
                    )
                    .await;
                first = false;
                let r = match sent {
                    Ok(r) => r,
                    Err(e) => {
                        reset(&mut slot).await;
                        return Err(e);
                    }
                };
                if ctx.cancel.is_cancelled() {
                    reset(&mut slot).await;
                    return Err(HarnessError::new(
                        ErrorCode::Aborted,
                        format!("persistent bash command aborted {RESET_NOTE}"),
                    ));
                }
                seen.push_str(&r.viewport);
                keep_tail(&mut seen);
                incomplete_upstream |= r.truncated && !seen.contains(&markers.start);
                if let Some((output, status)) = markers.complete(&seen) {
                    let incomplete = output.is_none();
                    let body = output.unwrap_or_else(|| markers.partial(&seen));
                    let mut text = render_output(&body, incomplete, self.max_output_chars);
                    if status != 0 {
                        if !text.is_empty() && !text.ends_with('\n') {
                            text.push('\n');
                        }
                        text.push_str(&dsh_shell::render::exit_code_marker(i64::from(status)));
                    }
                    if text.is_empty() {
                        text = "(no output)".into();
                    }
                    return Ok(ToolOutput {
                        text,
                        meta: Some(json!({"exitCode": status, "timedOut": false,
                            "shellReset": false, "sessionId": id.as_str()})),
                        image: None,
                    });
                }
                let partial = markers.partial(&seen);
                if let TerminalStatus::Exited { code, signal } = &r.status {
                    reset(&mut slot).await;
                    // Less the `exit` an interactive bash prints as it leaves.
                    let left = partial.trim_end_matches('\n');
                    let left = left
                        .strip_suffix("exit")
                        .unwrap_or(left)
                        .trim_end_matches('\n');
                    let how = match (code, signal) {
                        (_, Some(s)) => format!("[shell killed by signal: {s}]"),
                        (Some(c), None) => format!("[shell exited: code {c}]"),
                        (None, None) => "[shell exited]".to_owned(),
                    };
                    let parts = [
                        render_output(left, incomplete_upstream, self.max_output_chars),
                        how,
                        RESET_NOTE.into(),
                    ];
                    return Ok(reset_output(&parts, false));
                }
                if r.wait == WaitReason::Timeout || tokio::time::Instant::now() >= deadline {
                    reset(&mut slot).await;
                    let secs = (timeout.as_millis() as f64 / 1000.0).round();
                    let parts = [
                        format!(
                            "Your command timed out after {secs} seconds or experienced an OOM \
                             error. Below is partial output:"
                        ),
                        render_output(&partial, incomplete_upstream, self.max_output_chars),
                        RESET_NOTE.into(),
                    ];
                    return Ok(reset_output(&parts, true));
                }
                if r.wait == WaitReason::StdinRead {
                    // A program waits for input this tool cannot give (or the shell waits
                    // for the rest of a line): whatever the next call typed would go to
                    // it, and it could answer in the shell's place. Reset.
                    reset(&mut slot).await;
                    let parts = [
                        render_output(&partial, incomplete_upstream, self.max_output_chars),
                        "[the command waits for input, which bash cannot give; use \
                         terminal_open for interactive programs]"
                            .to_owned(),
                        RESET_NOTE.into(),
                    ];
                    return Ok(reset_output(&parts, false));
                }
                // Quiet for a while: look again.
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
        .await;
        // The check runs before the next call may type into the shell, so it sees this
        // call's command alone (the pipeline adds what it found to the result).
        ctx.scopes.close_now().await;
        let mut out = ran?;
        // The shell's sandbox facts, as a one-shot call gives them (what the check after
        // the call finds is added by the pipeline).
        if let Some(Value::Object(facts)) = out.meta.as_mut() {
            let mut sandbox = serde_json::Map::new();
            sandbox.insert("mode".into(), json!(policy.mode.as_str()));
            facts.insert("sandbox".into(), Value::Object(sandbox));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_is_one_line_and_never_holds_a_whole_marker() {
        let m = Markers::new();
        let line = m.line("echo 'a'\necho \\b");
        assert!(!line.contains('\n'));
        assert!(!line.contains(&m.start) && !line.contains(&m.end));
        assert!(
            line.contains(r"eval -- $'echo \'a\'\x0aecho \\b'"),
            "{line}"
        );
        let keys = m.line("a\tb\u{15}c\u{9b}");
        assert!(keys.contains(r"$'a\x09b\x15c\u009b'"), "{keys}");
    }

    #[test]
    fn output_and_status_are_read_between_the_markers() {
        let m = Markers::new();
        let text = format!("{}\nhello\n\n{}7\ndsh> ", m.start, m.end);
        assert_eq!(m.complete(&text), Some((Some("hello\n".into()), 7)));
        let torn = format!("{}\nhello\n\n{}", m.start, m.end);
        assert_eq!(m.complete(&torn), None);
        let lost = format!("llo\n\n{}0\n", m.end);
        assert_eq!(m.complete(&lost), Some((None, 0)));
    }

    #[test]
    fn long_output_keeps_its_end_with_a_note() {
        let long = "x".repeat(16_005) + "END";
        let r = render_output(&long, false, 16_000);
        assert!(r.starts_with("<response clipped><NOTE>"), "{}", &r[..80]);
        assert!(r.ends_with("END"));
        assert!(r.contains("grep -n"));
    }
}
