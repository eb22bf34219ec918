//! `bash` with `run_in_background: true`: a `bash-<n>` job held by the job registry
//! ([`BashJob`]).
//!
//! Its output is read with `job_output` (consuming, from the ring of each stream, with
//! the spill file named when some slid out of memory); its tree dies with `job_kill`,
//! with its connection, and with dsh. When it ends, the same check as after a foreground
//! command runs at once (under workspace-write: new repositories, hooks and tool settings
//! set aside and protected), and what it found and how the sandbox treated the command
//! come with the first read after the end.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::HarnessError;
use dsh_jobs::{Job, JobEnd, JobOutcome};
use dsh_shell::render::{outcome_detail, render_process_read};
use dsh_shell::{ProcessStatus, ShellProcess};

use crate::policy::escalation::{denial_lines, Subject};
use crate::policy::scope::{close_once, HeldScopes};

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
        lines.extend(close_once(&self.scopes).await);
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
