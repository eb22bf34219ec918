//! Completion notices: a background job that ends unseen is told to its connection's
//! client as an MCP `notifications/message` (level `info`, logger `dsh.jobs`), logged in
//! the session as `job/notice`, and put before the model: the connection's next tool
//! result (an error result too; not the answer to a cancelled request, which is never
//! sent) carries the notice as a text block of its own after the tool's content, and after
//! a blank line in its structured `text` (the spec's `inject` lane; many clients show
//! logging messages to the user but never to the model). That marks the end delivered, so
//! no later result repeats it.
//!
//! A job whose end someone already collected (a kill, a `job_output` that showed the end,
//! a wait that saw it) gets no notice, and one whose end a read collects before the next
//! result is not carried either; neither does a job of another connection. A client that
//! set `logging/setLevel` above `info` gets no logging message; the log and the next
//! result still have the notice.

// MCP logging is marked deprecated in rmcp (SEP-2577) but it is what clients show today,
// and what the issue asks for; tasks will carry completion for clients that declare them.
#![allow(deprecated)]

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use dsh_core::journal::Record;
use dsh_jobs::{completion_notice, JobSnapshot, Jobs, NOTICE_MAX_BYTES};
use dsh_store::session::Session;
use dsh_tools::World;
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::service::Peer;
use rmcp::RoleServer;
use serde_json::json;

/// The least severe level the client wants (`logging/setLevel`); every level by default.
#[derive(Debug, Default)]
pub(crate) struct LogLevel(AtomicU8);

impl LogLevel {
    pub(crate) fn set(&self, level: LoggingLevel) {
        self.0.store(rank(level), Ordering::Relaxed);
    }

    fn wants(&self, level: LoggingLevel) -> bool {
        rank(level) >= self.0.load(Ordering::Relaxed)
    }
}

fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The most notices waiting for the next result; past it the oldest go (each is still
/// in the session log, and its job in `job_list`).
const INBOX_MAX: usize = 100;

/// Notices of job ends the model has not seen yet, for the connection's next tool result.
#[derive(Debug, Default)]
pub(crate) struct Inbox(Mutex<Vec<(String, String)>>);

impl Inbox {
    fn push(&self, job_id: String, text: String) {
        let mut pending = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if pending.len() >= INBOX_MAX {
            pending.remove(0);
        }
        pending.push((job_id, text));
    }

    /// The notices of ends still undelivered, for the result being sent, which are marked
    /// delivered; the others are dropped.
    pub(crate) fn take(&self, jobs: &Jobs, owner: &dsh_core::Owner) -> Vec<String> {
        let pending = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        pending
            .into_iter()
            .filter(|(id, _)| jobs.deliver_end(id, Some(owner)))
            .map(|(_, text)| text)
            .collect()
    }
}

/// Tells the user what the check after a call could not set aside: on this process's
/// stderr (a client keeps a server's stderr in its log) and to `peer` as a logging message
/// (level `warning`, logger `dsh.sandbox`), whatever the model makes of its own result.
pub(crate) fn forward_unsettled(world: &World, peer: Peer<RoleServer>, level: Arc<LogLevel>) {
    world.policy().on_unsettled(Arc::new(move |text: &str| {
        eprintln!("dsh mcp: {text}");
        if !level.wants(LoggingLevel::Warning) {
            return;
        }
        let mut message = LoggingMessageNotificationParam::new(LoggingLevel::Warning, json!(text));
        message.logger = Some("dsh.sandbox".into());
        let peer = peer.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = peer.notify_logging_message(message).await;
            });
        }
    }));
}

/// Sends `session`'s unseen job ends to `peer`, and keeps them in `inbox` for the next
/// result, from now on (see the [module docs](self)).
pub(crate) fn forward(
    world: &World,
    session: &Arc<Session>,
    peer: Peer<RoleServer>,
    level: Arc<LogLevel>,
    inbox: Arc<Inbox>,
) {
    let Some(jobs) = world.jobs() else {
        return;
    };
    let owner = world.owner(Some(session.id()));
    let session = session.clone();
    jobs.on_done(Arc::new(move |job: &JobSnapshot, of| {
        if job.reported || of != Some(&owner) {
            return;
        }
        let text = completion_notice(job, job.output_limit_bytes.unwrap_or(NOTICE_MAX_BYTES));
        let (peer, session, level) = (peer.clone(), session.clone(), level.clone());
        let id = job.id.as_str().to_owned();
        // Before the listener returns: a result finished right after this end carries it.
        inbox.push(id.clone(), text.clone());
        tokio::spawn(async move {
            if level.wants(LoggingLevel::Info) {
                let mut message =
                    LoggingMessageNotificationParam::new(LoggingLevel::Info, json!(text));
                message.logger = Some("dsh.jobs".into());
                // A client gone meanwhile: the log below still has it.
                let _ = peer.notify_logging_message(message).await;
            }
            let record = Record::JobNotice {
                job_id: id.into(),
                text: text.into(),
            };
            if let Err(e) = session.append(record).await {
                eprintln!("dsh mcp: cannot log a job notice: {e}");
            }
        });
    }));
}
