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
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::{CancelReason, CancelToken, HarnessError};
use dsh_jobs::{Job, JobEnd, JobOutcome};
use dsh_shell::render::{outcome_detail, render_process_read};
use dsh_shell::{ProcessStatus, ShellProcess};
use dsh_terminal::{BackgroundSend, SendReader, SessionStatus};

use crate::escalation::{denial_lines, Subject};
use crate::scope::HeldScopes;

/// The lines closing `scopes` gives (what the check found, or that it could not be
/// logged); none the second time.
async fn close(scopes: &Mutex<Option<HeldScopes>>) -> Vec<String> {
    let held = scopes.lock().unwrap_or_else(|p| p.into_inner()).take();
    match held {
        Some(held) => held.close().await,
        None => Vec::new(),
    }
}

/// One background command. See the [module docs](self).
pub(crate) struct BashJob {
    /// The command while it runs; given up when it settles, so a finished job holds no
    /// pipes, no sandbox placeholders and no process.
    process: Mutex<Option<Arc<ShellProcess>>>,
    /// The call's write scopes, closed when the command ends.
    scopes: Mutex<Option<HeldScopes>>,
    /// Whether a person could be asked for a wider mode when the job started.
    can_ask: bool,
    /// What the first read after the end gets: the last output and the closing lines.
    last: Mutex<Option<String>>,
}

impl BashJob {
    pub(crate) fn new(process: ShellProcess, scopes: HeldScopes, can_ask: bool) -> BashJob {
        BashJob {
            process: Mutex::new(Some(Arc::new(process))),
            scopes: Mutex::new(Some(scopes)),
            can_ask,
            last: Mutex::new(None),
        }
    }

    fn process(&self) -> std::sync::MutexGuard<'_, Option<Arc<ShellProcess>>> {
        self.process.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn last(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Job for BashJob {
    fn cancel(&self, _reason: &str) -> Result<(), HarnessError> {
        // SIGTERM to the tree, SIGKILL after the grace; nothing once it has ended.
        if let Some(p) = self.process().as_ref() {
            p.terminate();
        }
        Ok(())
    }

    async fn done(&self) -> JobOutcome {
        let Some(process) = self.process().clone() else {
            return JobOutcome {
                end: JobEnd::Failed,
                detail: Some("the job was awaited twice (a bug in dsh)".into()),
                output: None,
            };
        };
        process.done().await;
        // As after a foreground call: nothing the command started outlives its end (and
        // nothing can plant after the check below).
        process.end_tree().await;
        let mut lines = Vec::new();
        if let Some(facts) = process.sandbox_facts() {
            if facts.runner_failed {
                lines.push(format!(
                    "[sandbox: the sandbox runner itself failed under {} mode — the command \
                     did not run; this is a sandbox problem, not a command failure]",
                    facts.mode
                ));
            } else if facts.denied {
                lines.extend(denial_lines(facts.mode, Subject::Command, self.can_ask));
            }
        }
        lines.extend(close(&self.scopes).await);
        let status = process.status();
        let detail = outcome_detail(status, process.exit_code(), process.signal());
        {
            // The last output and the lines, for the next read; then the process goes.
            let mut slot = self.process();
            *self.last() = Some(render_process_read(&process.read_output(), &lines));
            *slot = None;
        }
        drop(process);
        match detail {
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

    fn read_output(&self, settled: bool) -> String {
        let slot = self.process();
        if let Some(p) = slot.as_ref() {
            return render_process_read(&p.read_output(), &[]);
        }
        drop(slot);
        // Ended: the last output and the closing lines go with the status that says so.
        if settled {
            self.last().take().unwrap_or_default()
        } else {
            String::new()
        }
    }
}

/// The most one read of a running send takes: a `job_output` result, less room for the
/// status line and the truncation marker.
const SEND_READ_MAX: usize = crate::terminal::MAX_RESULT_BYTES - 1024;

/// A terminal send running on after its call returned. Its output streams: each read
/// takes the complete lines shown since the last (the line being written waits for its
/// end), and the first read after it settles takes the rest, as the foreground send would
/// have shown it, with the closing lines; the status line says why it settled
/// (`wait: stdin_read`) or that the session ended. A kill interrupts the foreground
/// program (SIGINT), as cancelling a foreground send does, and what the send started
/// that runs on anyway gets SIGTERM, then SIGKILL.
pub(crate) struct PtySendJob {
    send: Mutex<Option<BackgroundSend>>,
    reader: SendReader,
    cancel: CancelToken,
    killed: AtomicBool,
    /// The call's write scopes, closed when the send ends.
    scopes: Mutex<Option<HeldScopes>>,
    /// What the first read after the end gets: the rest of the output and the closing
    /// lines.
    last: Mutex<Option<String>>,
    /// The send has ended: its reader takes nothing more.
    ended: AtomicBool,
}

impl PtySendJob {
    pub(crate) fn new(send: BackgroundSend, cancel: CancelToken, scopes: HeldScopes) -> PtySendJob {
        PtySendJob {
            reader: send.reader(),
            send: Mutex::new(Some(send)),
            cancel,
            killed: AtomicBool::new(false),
            scopes: Mutex::new(Some(scopes)),
            last: Mutex::new(None),
            ended: AtomicBool::new(false),
        }
    }

    fn last(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.last.lock().unwrap_or_else(|p| p.into_inner())
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
        self.ended.store(true, Ordering::SeqCst);
        let after = close(&self.scopes).await;
        match result {
            Ok(r) => {
                let mut text = crate::terminal::render_viewport(&r);
                for line in after {
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(&line);
                }
                *self.last() = Some(text);
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
                    output: None,
                }
            }
            Err(e) => {
                *self.last() = (!after.is_empty()).then(|| after.join("\n"));
                JobOutcome {
                    end: JobEnd::Failed,
                    detail: Some(e.to_string()),
                    output: None,
                }
            }
        }
    }

    fn streams(&self) -> bool {
        true
    }

    fn read_output(&self, settled: bool) -> String {
        if settled {
            // The rest of the output and the closing lines, with the end's status.
            return self.last().take().unwrap_or_default();
        }
        if self.ended.load(Ordering::SeqCst) {
            return String::new();
        }
        crate::terminal::render_send_read(&self.reader.take(SEND_READ_MAX))
    }
}
