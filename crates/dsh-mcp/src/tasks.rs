//! MCP tasks (the `io.modelcontextprotocol/tasks` extension): a `bash` call still running
//! after a threshold (10 s by default) becomes a task the client polls, for a client that
//! declared the extension; any other client gets the ordinary result, however long the
//! call takes.
//!
//! The task is the call itself, moved off the request: its processes, its cancel token
//! and its session log entries are the call's. `tasks/get` answers with its state (and
//! the call's result once it ended); `tasks/cancel` cancels the call, which kills its
//! process tree, and the task settles `cancelled`. A task whose retention lapses, or whose
//! connection ends, has its call cancelled the same way. Tasks belong to the connection
//! that made them: another connection has its own task store.

use std::time::Duration;

use dsh_core::{CancelReason, CancelToken};
use rmcp::model::CreateTaskResult;
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::RoleServer;

use crate::elicitation::Flight;

/// How long a call runs before it becomes a task, by default: 10 s.
pub const TASK_AFTER: Duration = Duration::from_secs(10);

/// How often a client should poll a task.
const POLL_INTERVAL_MS: u64 = 1_000;

/// How long a task is kept after it was made (its result an hour more).
const TTL_MS: u64 = 3_600_000;

/// Whether a call of `tool` may become a task: a `bash` call of a client that declared
/// the tasks extension.
pub(crate) fn eligible(tool: &str, context: &RequestContext<RoleServer>) -> bool {
    tool == "bash"
        && context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
}

/// Cancels the call when dropped: a task dropped by the store (its retention lapsed, the
/// store shut down) takes its processes with it.
struct CancelOnDrop(CancelToken);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0
            .cancel(CancelReason::Other("the task was dropped".into()));
    }
}

/// Moves `flight` into a task of `store`; `finish` turns the call's end into its result
/// (and forgets the call's route).
pub(crate) fn spawn(
    store: &TaskManager,
    mut flight: Flight,
    finish: impl FnOnce(
            Flight,
            Result<dsh_tools::ToolResult, tokio::task::JoinError>,
        ) -> rmcp::model::CallToolResult
        + Send
        + 'static,
) -> CreateTaskResult {
    let options = TaskOptions::new()
        .with_poll_interval_ms(POLL_INTERVAL_MS)
        .with_ttl_ms(TTL_MS)
        .with_status_message(format!("{} is running", flight.tool));
    let task = store.spawn(options, move |context| {
        Box::pin(async move {
            let guard = CancelOnDrop(flight.cancel.clone());
            // Questions the call asks from now on have nobody to answer them in place.
            let mut asks = std::mem::replace(&mut flight.asks, tokio::sync::mpsc::channel(1).1);
            let drain = tokio::spawn(async move {
                while let Some(ask) = asks.recv().await {
                    let _ = ask.reply.send(dsh_approval::ApprovalOutcome::Unavailable);
                }
            });
            let ended = tokio::select! {
                biased;
                () = context.cancelled() => None,
                r = &mut flight.task => Some(r),
            };
            let (result, cancelled) = match ended {
                Some(r) => (r, false),
                None => {
                    // tasks/cancel: the call is cancelled (its tree killed) and awaited.
                    flight.cancel.cancel(CancelReason::ClientCancelled);
                    ((&mut flight.task).await, true)
                }
            };
            drain.abort();
            drop(guard);
            let result = finish(flight, result);
            if cancelled {
                Err(TaskExit::Cancelled)
            } else {
                Ok(result)
            }
        })
    });
    CreateTaskResult::new(task)
}
