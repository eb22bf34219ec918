//! Background work held by the job registry: `bash` with `run_in_background: true` (a
//! `bash-<n>` job, [`BashJob`]) and `terminal_send` with it (a `pty-send-<n>` job,
//! [`PtySendJob`]).
//!
//! Its output is read with `job_output` (consuming, from the ring of each stream, with
//! the spill file named when some slid out of memory); its tree dies with `job_kill`,
//! with its connection, and with dsh. When it ends, the same check as after a foreground
//! command runs at once (under workspace-write: new repositories, hooks and tool settings
//! set aside and protected), and what it found and how the sandbox treated the command
//! come with the first read after the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use dsh_core::{CancelReason, CancelToken, HarnessError};
use dsh_jobs::{Job, JobEnd, JobOutcome};
use dsh_sandbox::SandboxPolicy;
use dsh_shell::render::{outcome_detail, render_process_read};
use dsh_shell::{ProcessStatus, ShellProcess};
use dsh_terminal::{BackgroundSend, SessionStatus};

use crate::escalation::{denial_marker, escalation_hint, wider_modes, Subject};
use crate::policy::AfterCheck;

/// One background command. See the [module docs](self).
pub(crate) struct BashJob {
    process: ShellProcess,
    policy: SandboxPolicy,
    check: AfterCheck,
    /// The lines for the first read after the end; taken by it.
    closing: Mutex<Option<Vec<String>>>,
}

impl BashJob {
    pub(crate) fn new(process: ShellProcess, policy: SandboxPolicy, check: AfterCheck) -> BashJob {
        BashJob {
            process,
            policy,
            check,
            closing: Mutex::new(None),
        }
    }

    fn closing(&self) -> std::sync::MutexGuard<'_, Option<Vec<String>>> {
        self.closing.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Job for BashJob {
    fn cancel(&self, _reason: &str) -> Result<(), HarnessError> {
        // SIGTERM to the tree, SIGKILL after the grace; false only once it has ended.
        self.process.terminate();
        Ok(())
    }

    async fn done(&self) -> JobOutcome {
        self.process.done().await;
        let mut lines = Vec::new();
        if let Some(facts) = self.process.sandbox_facts() {
            if facts.runner_failed {
                lines.push(format!(
                    "[sandbox: the sandbox runner itself failed under {} mode — the command \
                     did not run; this is a sandbox problem, not a command failure]",
                    facts.mode
                ));
            } else if facts.denied {
                lines.push(denial_marker(facts.mode));
                if !wider_modes(facts.mode).is_empty() {
                    lines.push(escalation_hint(Subject::Command));
                }
            }
        }
        match self.check.run(&self.policy).await {
            Ok(Some((line, _))) => lines.push(line),
            Ok(None) => {}
            Err(e) => lines.push(format!(
                "[dsh: the check of what the command made could not be logged: {e}]"
            )),
        }
        *self.closing() = Some(lines);
        let status = self.process.status();
        match outcome_detail(status, self.process.exit_code(), self.process.signal()) {
            Some((_, detail)) => JobOutcome {
                end: if status == ProcessStatus::Killed {
                    JobEnd::Killed
                } else {
                    JobEnd::Completed
                },
                detail: Some(detail),
                output: None,
            },
            None => JobOutcome {
                end: JobEnd::Failed,
                detail: Some("settled while still running (a bug in dsh)".into()),
                output: None,
            },
        }
    }

    fn streams(&self) -> bool {
        true
    }

    fn read_output(&self) -> String {
        let read = self.process.read_output();
        let lines = self.closing().take().unwrap_or_default();
        render_process_read(&read, &lines)
    }
}

/// A terminal send running on after its call returned. Its output comes whole when it
/// settles: the viewport a foreground send would have shown, and the status line says why
/// it settled (`wait: stdin_read`) or that the session ended. A kill interrupts the
/// foreground program (SIGINT), as cancelling a foreground send does.
pub(crate) struct PtySendJob {
    send: Mutex<Option<BackgroundSend>>,
    cancel: CancelToken,
    killed: AtomicBool,
    policy: SandboxPolicy,
    check: AfterCheck,
}

impl PtySendJob {
    pub(crate) fn new(
        send: BackgroundSend,
        cancel: CancelToken,
        policy: SandboxPolicy,
        check: AfterCheck,
    ) -> PtySendJob {
        PtySendJob {
            send: Mutex::new(Some(send)),
            cancel,
            killed: AtomicBool::new(false),
            policy,
            check,
        }
    }
}

#[async_trait]
impl Job for PtySendJob {
    fn cancel(&self, reason: &str) -> Result<(), HarnessError> {
        self.killed.store(true, Ordering::SeqCst);
        self.cancel.cancel(CancelReason::Other(reason.to_owned()));
        Ok(())
    }

    async fn done(&self) -> JobOutcome {
        let send = self.send.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(send) = send else {
            return JobOutcome {
                end: JobEnd::Failed,
                detail: Some("the send was awaited twice (a bug in dsh)".into()),
                output: None,
            };
        };
        let result = send.await;
        let after = match self.check.run(&self.policy).await {
            Ok(found) => found.map(|(line, _)| line),
            Err(e) => Some(format!(
                "[dsh: the check of what the command made could not be logged: {e}]"
            )),
        };
        match result {
            Ok(r) => {
                let mut text = crate::terminal::render_viewport(&r);
                if let Some(line) = after {
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(&line);
                }
                let detail = match &r.status {
                    SessionStatus::Running => format!("wait: {}", r.wait.as_str()),
                    SessionStatus::Exited { code, signal } => format!(
                        "session exited: {}",
                        code.map(|c| c.to_string())
                            .or_else(|| signal.clone())
                            .unwrap_or_else(|| "unknown".into())
                    ),
                };
                JobOutcome {
                    end: if self.killed.load(Ordering::SeqCst) {
                        JobEnd::Killed
                    } else {
                        JobEnd::Completed
                    },
                    detail: Some(detail),
                    output: Some(text),
                }
            }
            Err(e) => JobOutcome {
                end: JobEnd::Failed,
                detail: Some(e.to_string()),
                output: after,
            },
        }
    }
}
