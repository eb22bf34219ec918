//! [`PersistentBash`]: the shell seam over one long-lived `bash` on a terminal, so `cd`,
//! `export`, functions and aliases carry from one run to the next (spec shell.md §13).
//!
//! The shell is a terminal named `bash` of one [`Owner`] (it shows in that owner's
//! terminal list), opened at the first run and kept. Runs are serialised. Each command
//! is typed as one line, `eval -- $'COMMAND'`, between a start marker and an end marker
//! that carries its exit status, each with a fresh random nonce; the result is the text
//! between the markers. The defaults, caps and output budget are [`ShellConfig`]'s, as a
//! one-shot shell takes them ([`ShellConfig::spec_for`]); the text is rendered by
//! [`dsh_shell::render`], as every shell's is.
//!
//! # Guarantees
//! - A shell runs under the sandbox policy of the run that opened it. A run whose policy
//!   differs (another mode, other roots, other protected paths or denials) closes it and
//!   opens a fresh one under its own: a shell never runs a command under a policy the
//!   command was not given. [`PersistentRun::fresh`] says so, as it says when the last
//!   run was cancelled and closed its shell.
//! - The shell is reset (closed; the next run opens a fresh one in its workdir) when a
//!   command times out, is cancelled, waits for input, or ends the shell, and the result
//!   says why ([`ShellReset`]); also when the future of a run is dropped.
//! - Memory is bounded: at most 1 MiB of a command's output is kept while it runs (its
//!   end), and a result shows at most `stdout_max_bytes` characters of it.
//!
//! # Limits
//! - The working directory of a spec is where a fresh shell starts; an open shell stays
//!   where its last command left it (the point of a persistent shell).
//! - No stdin, no environment overlay and no background start: a program that reads the
//!   terminal is an interactive program, for a terminal of its own.
//! - Protection decided after the shell opened reaches it only when a run's policy
//!   differs from the shell's (then the shell is fresh).
//!
//! # Errors
//! `ABORTED` (cancelled before it started), `INVALID_ARGUMENT` (stdin, an environment
//! overlay, a background start), `TERMINAL_FAILED` (the shell did not start), and the
//! terminal registry's and the sandbox's errors (`SANDBOX_UNAVAILABLE`).

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use dsh_core::{CancelToken, ErrorCode, HarnessError, Owner};
use dsh_sandbox::{classify_denial, SandboxFacts, SandboxPolicy};
use dsh_shell::render::clipped_tail;
use dsh_shell::{
    FreshShell, PersistentRun, RunResult, Shell, ShellConfig, ShellProcess, ShellRequest,
    ShellReset, ShellSpec,
};

use crate::{OpenRequest, SendRequest, TerminalId, TerminalStatus, Terminals, WaitReason};

/// What a write the sandbox refused prints, whichever runner confines the shell.
const DENIALS: &[&str] = &[
    "read-only file system",
    "permission denied",
    "operation not permitted",
];

/// The most bytes of a command's output kept while it runs (its end).
const MAX_KEPT_BYTES: usize = 1 << 20;

/// The shell seam over one long-lived `bash` on a terminal. See the
/// [module docs](self).
pub struct PersistentBash {
    terminals: Arc<Terminals>,
    owner: Owner,
    config: ShellConfig,
    /// The shell, once open; locking it serialises runs in arrival order.
    shell: tokio::sync::Mutex<Option<Open>>,
    /// The close of a shell whose run was dropped, and the policy it ran under, which
    /// the next run (or [`settle`](PersistentBash::settle)) waits for: the fresh shell
    /// takes the same name.
    closing: std::sync::Mutex<Option<Closing>>,
    /// A run was cancelled or dropped and closed its shell, and no result has said so
    /// yet: the next run that opens a shell says it is fresh.
    untold_reset: std::sync::atomic::AtomicBool,
}

/// A shell whose run was dropped: its close (until awaited) and the policy it ran under
/// (until [`PersistentBash::settle`] hands it over).
struct Closing {
    close: Option<tokio::task::JoinHandle<()>>,
    policy: SandboxPolicy,
}

/// Puts a [`Closing`] back when a wait for it is dropped.
struct PutBack<'a> {
    slot: &'a std::sync::Mutex<Option<Closing>>,
    pending: Option<Closing>,
}

impl PutBack<'_> {
    /// Waits for the close; the policy stays owed.
    async fn closed(&mut self) {
        if let Some(close) = self.pending.as_mut().and_then(|c| c.close.as_mut()) {
            let _ = close.await;
        }
        if let Some(c) = self.pending.as_mut() {
            c.close = None;
        }
    }
}

impl Drop for PutBack<'_> {
    fn drop(&mut self) {
        if let Some(pending) = self.pending.take() {
            *self
                .slot
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(pending);
        }
    }
}

/// An open shell: its terminal and the policy it runs under.
struct Open {
    id: TerminalId,
    policy: SandboxPolicy,
}

impl std::fmt::Debug for PersistentBash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentBash")
            .field("owner", &self.owner)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PersistentBash {
    /// A persistent shell of `owner` among `terminals` (which need a `shell` backend),
    /// under `config`: `timeout_ms` when a run names none, `max_timeout_ms` as the cap
    /// (and never past the terminals' own), `max_output_bytes` as the most characters of
    /// output a result shows (the terminal merges both streams).
    ///
    /// # Errors
    /// `CONFIG_INVALID` as [`ShellConfig::validate`].
    pub fn new(
        terminals: Arc<Terminals>,
        owner: Owner,
        config: ShellConfig,
    ) -> Result<PersistentBash, HarnessError> {
        config.validate("bash")?;
        Ok(PersistentBash {
            terminals,
            owner,
            config,
            shell: tokio::sync::Mutex::new(None),
            closing: std::sync::Mutex::new(None),
            untold_reset: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The owner whose terminal the shell is.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// Waits until a shell whose run was dropped is gone, whole tree, and returns the
    /// policy it ran under: what its commands made since it opened is for the caller to
    /// check. `None` when no run was dropped since the last call.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped, the close goes on, and a later call waits for it again.
    pub async fn settle(&self) -> Option<SandboxPolicy> {
        let pending = self
            .closing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()?;
        let mut waiting = PutBack {
            slot: &self.closing,
            pending: Some(pending),
        };
        waiting.closed().await;
        waiting.pending.take().map(|c| c.policy)
    }

    /// The policy of the open shell when a run under `wanted` would replace it (it is
    /// running under another policy): what its commands made since it opened is for the
    /// caller to check once it is gone. `None` when the run would keep it, or none is open.
    pub async fn replaced_by(&self, wanted: &SandboxPolicy) -> Option<SandboxPolicy> {
        let slot = self.shell.lock().await;
        let open = slot.as_ref()?;
        let running = self
            .terminals
            .list(&self.owner)
            .iter()
            .any(|s| s.id == open.id && s.status == TerminalStatus::Running);
        (running && !same_sandbox(&open.policy, wanted)).then(|| open.policy.clone())
    }

    /// The shell ready for `spec`: the open one when it is running under the same policy,
    /// else a fresh one, and why it is fresh where the last run left a shell.
    async fn ready(
        &self,
        slot: &mut Option<Open>,
        spec: &ShellSpec,
        cancel: &CancelToken,
    ) -> Result<(TerminalId, Option<FreshShell>), HarnessError> {
        // A dropped run's shell is gone before its name is taken again; its policy stays
        // owed to the caller's next `settle`.
        let pending = self
            .closing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if pending.is_some() {
            PutBack {
                slot: &self.closing,
                pending,
            }
            .closed()
            .await;
        }
        let mut replaced = false;
        if let Some(open) = slot.take() {
            let running = self
                .terminals
                .list(&self.owner)
                .iter()
                .any(|s| s.id == open.id && s.status == TerminalStatus::Running);
            if running && same_sandbox(&open.policy, &spec.sandbox) {
                let id = open.id.clone();
                *slot = Some(open);
                return Ok((id, None));
            }
            replaced = running;
            let _ = self.terminals.close(&self.owner, open.id.as_str()).await;
        }
        let opened = self
            .terminals
            .open(
                &self.owner,
                OpenRequest {
                    kind: "shell".into(),
                    name: Some("bash".into()),
                    cwd: Some(spec.workdir.clone()),
                    policy: spec.sandbox.clone(),
                    env: spec.dsh_env.clone().unwrap_or_default(),
                },
                cancel,
            )
            .await?;
        let id = opened.snapshot.id;
        let init = self
            .terminals
            .send(
                &self.owner,
                id.as_str(),
                SendRequest {
                    text: "stty -echo".into(),
                    submit: true,
                    timeout: Duration::from_secs(10),
                },
                cancel,
            )
            .await;
        match init {
            Ok(r) if r.wait != WaitReason::Timeout && r.status == TerminalStatus::Running => {
                *slot = Some(Open {
                    id: id.clone(),
                    policy: spec.sandbox.clone(),
                });
                let untold = self.untold_reset.swap(false, Ordering::SeqCst);
                let fresh = if replaced {
                    Some(FreshShell::PolicyChanged)
                } else {
                    untold.then_some(FreshShell::AfterCancel)
                };
                Ok((id, fresh))
            }
            other => {
                let _ = self.terminals.close(&self.owner, id.as_str()).await;
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

    /// Types `command` into the shell `id` and reads until it ends, the shell ends, it
    /// waits for input, `timeout` passes or `cancel` fires.
    ///
    /// # Errors
    /// A send's error (the caller resets the shell).
    async fn exchange(
        &self,
        id: &TerminalId,
        command: &str,
        timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<Ended, HarnessError> {
        let markers = Markers::new();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut seen = String::new();
        let mut lost_start = false;
        let mut first = true;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let r = self
                .terminals
                .send(
                    &self.owner,
                    id.as_str(),
                    SendRequest {
                        text: if first {
                            markers.line(command)
                        } else {
                            String::new()
                        },
                        submit: first,
                        timeout: left.max(Duration::from_millis(1)),
                    },
                    cancel,
                )
                .await?;
            first = false;
            seen.push_str(&r.viewport);
            keep_tail(&mut seen);
            lost_start |= r.truncated && !seen.contains(&markers.start);
            if cancel.is_cancelled() {
                return Ok(Ended::reset(
                    markers.partial(&seen),
                    lost_start,
                    ShellReset::Aborted,
                ));
            }
            if let Some((output, status)) = markers.complete(&seen) {
                return Ok(match output {
                    Some(output) => Ended::done(output, false, status),
                    None => Ended::done(markers.partial(&seen), true, status),
                });
            }
            let partial = markers.partial(&seen);
            if let TerminalStatus::Exited { code, signal } = &r.status {
                // Less the `exit` an interactive bash prints as it leaves.
                let left = partial.trim_end_matches('\n');
                let left = left
                    .strip_suffix("exit")
                    .unwrap_or(left)
                    .trim_end_matches('\n');
                let reset = ShellReset::Exited {
                    code: *code,
                    signal: signal.clone(),
                };
                return Ok(Ended::reset(left.to_owned(), lost_start, reset));
            }
            if r.wait == WaitReason::Timeout || tokio::time::Instant::now() >= deadline {
                return Ok(Ended::reset(partial, lost_start, ShellReset::TimedOut));
            }
            if r.wait == WaitReason::StdinRead {
                // A program waits for input this shell cannot give (or the shell for the
                // rest of a line): whatever the next run typed would go to it, and it
                // could answer in the shell's place.
                return Ok(Ended::reset(partial, lost_start, ShellReset::WaitsForInput));
            }
            // Quiet for a while: look again.
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// Whether a shell opened under `open` may run a command given `wanted`: the policies
/// are the same but for which roots' layouts they were handed (`laid_out`, how a policy
/// was built, not what it allows). Every other field, including one added later, counts.
fn same_sandbox(open: &SandboxPolicy, wanted: &SandboxPolicy) -> bool {
    if open.laid_out == wanted.laid_out {
        return open == wanted;
    }
    let mut open = open.clone();
    open.laid_out.clone_from(&wanted.laid_out);
    open == *wanted
}

/// How a command's exchange ended.
struct Ended {
    output: String,
    lost_start: bool,
    /// The command's status, when it finished.
    status: Option<i32>,
    reset: Option<ShellReset>,
}

impl Ended {
    fn done(output: String, lost_start: bool, status: i32) -> Ended {
        Ended {
            output,
            lost_start,
            status: Some(status),
            reset: None,
        }
    }

    fn reset(output: String, lost_start: bool, reset: ShellReset) -> Ended {
        Ended {
            output,
            lost_start,
            status: None,
            reset: Some(reset),
        }
    }
}

/// The shell of a run in progress: closed (and forgotten) unless the run settles it,
/// so a run whose future is dropped leaves no half-typed command for the next.
struct InProgress<'a> {
    slot: &'a mut Option<Open>,
    shell: &'a PersistentBash,
    settled: bool,
}

impl InProgress<'_> {
    /// Closes the shell now (the next run opens a fresh one).
    async fn reset(mut self) {
        self.settled = true;
        if let Some(open) = self.slot.take() {
            let _ = self
                .shell
                .terminals
                .close(&self.shell.owner, open.id.as_str())
                .await;
        }
    }

    /// Keeps the shell for the next run.
    fn keep(mut self) {
        self.settled = true;
    }
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let Some(open) = self.slot.take() else { return };
        self.shell.untold_reset.store(true, Ordering::SeqCst);
        let (terminals, owner) = (self.shell.terminals.clone(), self.shell.owner.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let id = open.id;
            let closing = runtime.spawn(async move {
                let _ = terminals.close(&owner, id.as_str()).await;
            });
            *self
                .shell
                .closing
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Closing {
                close: Some(closing),
                policy: open.policy,
            });
        }
    }
}

#[async_trait]
impl Shell for PersistentBash {
    /// As [`ShellConfig::spec_for`], except that the working directory defaults to the
    /// policy's workspace root.
    fn spec_for(&self, mut request: ShellRequest) -> Result<ShellSpec, HarnessError> {
        if request.workdir.is_none() {
            request.workdir = Some(request.sandbox.workspace_root.clone());
        }
        self.config.spec_for("bash", request)
    }

    /// Runs `spec` in the shell (opened or replaced first as the module docs say). A
    /// command that finished, timed out, was cancelled, waits for input or ended the shell
    /// is an `Ok` result ([`RunResult::persistent`] says which).
    ///
    /// # Errors
    /// See the [module docs](self#errors). After an error the shell is reset.
    ///
    /// # Cancel safety
    /// Dropping the future closes the shell (its whole process tree) in a task of its own.
    async fn run(&self, spec: ShellSpec) -> Result<RunResult, HarnessError> {
        let cancel = spec.cancel.clone().unwrap_or_default();
        if let Some(reason) = cancel.reason() {
            return Err(HarnessError::aborted_before_start("bash", reason));
        }
        if spec.stdin.is_some() || spec.env.as_ref().is_some_and(|e| !e.is_empty()) {
            return Err(HarnessError::invalid_argument(
                "a persistent shell takes neither stdin nor an environment overlay: type the \
                 input into a terminal, or set the variables in the command",
            ));
        }
        let mut slot = self.shell.lock().await;
        if let Some(reason) = cancel.reason() {
            return Err(HarnessError::aborted_before_start("bash", reason));
        }
        let (id, fresh) = self.ready(&mut slot, &spec, &cancel).await?;
        // A shell is a terminal: no run waits past the terminals' own cap.
        let timeout =
            Duration::from_millis(spec.timeout_ms).min(self.terminals.config().max_timeout);
        let run = InProgress {
            slot: &mut slot,
            shell: self,
            settled: false,
        };
        let ended = match self.exchange(&id, &spec.command, timeout, &cancel).await {
            Ok(ended) => ended,
            Err(e) => {
                run.reset().await;
                return Err(e);
            }
        };
        if ended.reset.is_some() {
            run.reset().await;
            // A cancelled run's result may reach nobody (MCP answers no cancelled request):
            // the next result says the shell is fresh.
            if ended.reset == Some(ShellReset::Aborted) {
                self.untold_reset.store(true, Ordering::SeqCst);
            }
        } else {
            run.keep();
        }
        let confined = spec.sandbox.mode.is_confined();
        let sandbox = SandboxFacts {
            mode: spec.sandbox.mode,
            // The terminal merges the streams: the denial is read from the whole output.
            denied: confined && classify_denial(ended.status, &ended.output, DENIALS),
            enforcement: None,
            runner: None,
            runner_failed: false,
        };
        let output = clipped_tail(&ended.output, ended.lost_start, spec.stdout_max_bytes);
        Ok(RunResult::in_persistent_shell(
            output,
            ended.status,
            timeout.as_millis() as u64,
            Some(sandbox),
            PersistentRun {
                shell_id: id.as_str().to_owned(),
                reset: ended.reset,
                fresh,
            },
        ))
    }

    /// Refused: a persistent shell runs one command at a time, in the foreground.
    ///
    /// # Errors
    /// Always `INVALID_ARGUMENT`.
    fn start(&self, _spec: ShellSpec) -> Result<ShellProcess, HarnessError> {
        Err(HarnessError::invalid_argument(
            "a persistent shell runs nothing in the background; type the command into a \
             terminal instead",
        ))
    }
}

/// `s` as a bash ANSI-C string (`$'…'`): backslash and quote escaped, and every control
/// character (C0, DEL, C1) as `\xHH` or `\uHHHH`, so nothing reaches the shell's line
/// editor as a key (a tab completing, Ctrl-U erasing the wrapper).
pub fn ansi_c(s: &str) -> String {
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
    fn a_shell_is_kept_only_for_the_same_policy_however_it_was_built() {
        let root = std::path::Path::new("/ws");
        let policy = SandboxPolicy::danger_full_access(root);
        let mut built_otherwise = policy.clone();
        built_otherwise.laid_out.push(root.to_path_buf());
        assert!(same_sandbox(&policy, &built_otherwise));
        let mut gap = built_otherwise.clone();
        gap.incomplete_roots.push(root.to_path_buf());
        assert!(!same_sandbox(&built_otherwise, &gap));
        assert!(!same_sandbox(&policy, &gap));
        let protected = policy.clone().with_protected([root.join(".git")]);
        assert!(!same_sandbox(&policy, &protected));
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
}
