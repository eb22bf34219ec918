//! `terminal_send` with `run_in_background: true`: a `pty-send-<n>` job held by the job
//! registry ([`PtySendJob`]).
//!
//! Its output is read with `job_output`; it ends when the send settles, with `job_kill`,
//! with its connection, and with dsh. When it ends, the check after a call runs at once
//! (under workspace-write), and what it found comes with the first read after the end.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use dsh_core::{CancelReason, CancelToken, HarnessError};
use dsh_jobs::{Job, JobEnd, JobOutcome};
use dsh_terminal::{BackgroundSend, SendReader, TerminalStatus};

use super::render::{render_send_read, render_viewport};
use crate::policy::scope::{close_once, HeldScopes};
use crate::tools::output::MAX_RESULT_BYTES;

/// The most one read of a running send takes: a `job_output` result, less room for the
/// status line and the truncation marker.
const SEND_READ_MAX: usize = MAX_RESULT_BYTES - 1024;

/// A terminal send running on after its call returned. Its output streams: each read
/// takes the complete lines shown since the last (the line being written waits for its
/// end), and the first read after it settles takes the rest, as the foreground send would
/// have shown it, with the closing lines; the status line says why it settled
/// (`wait: stdin_read`) or that the terminal ended. A kill interrupts the foreground
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
        let after = close_once(&self.scopes).await;
        match result {
            Ok(r) => {
                let mut text = render_viewport(&r);
                for line in after {
                    if !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(&line);
                }
                *self.last() = Some(text);
                let detail = match &r.status {
                    TerminalStatus::Running => format!("wait: {}", r.wait.as_str()),
                    TerminalStatus::Exited { code, signal } => format!(
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
        render_send_read(&self.reader.take(SEND_READ_MAX))
    }
}
