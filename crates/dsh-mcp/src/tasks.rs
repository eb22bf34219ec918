//! MCP tasks (the `io.modelcontextprotocol/tasks` extension): a `bash` call still running
//! after a threshold (10 s by default) becomes a task the client polls, for a client that
//! declared the extension; any other client gets the ordinary result, however long the
//! call takes.
//!
//! The task is the call itself, moved off the request: its processes, its cancel token
//! and its session log entries are the call's. `tasks/get` answers with its state (and
//! the call's result once it ended); `tasks/cancel` cancels the call, which kills its
//! process tree, and the task settles `cancelled` (a call that ended first keeps its
//! result). A task whose retention lapses, or whose connection ends, has its call
//! cancelled the same way. Tasks belong to the connection that made them: another
//! connection has its own task store, which holds at most [`MAX_TASKS`].

use std::time::Duration;

use dsh_core::{CancelReason, CancelToken};
use std::sync::{Arc, Mutex};

use rmcp::model::{CallToolResult, CreateTaskResult};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::RoleServer;

use crate::elicitation::{Desk, Flight};

/// How long a call runs before it becomes a task, by default: 10 s.
pub const TASK_AFTER: Duration = Duration::from_secs(10);

/// How often a client should poll a task.
const POLL_INTERVAL_MS: u64 = 1_000;

/// How long a task is kept after it was made, and its result after it ended: 15 min,
/// beyond the longest `bash` call (600 s and its grace).
const TTL_MS: u64 = 900_000;

/// The most tasks a connection's store holds (running, or ended and kept for polling);
/// past it, a long call is answered as an ordinary call. Each holds a call's result (a
/// `bash` result is at most about 130 KB).
pub const MAX_TASKS: usize = 256;

/// Whether a call of `tool` may become a task: a `bash` call of a client that declared
/// the tasks extension.
pub(crate) fn eligible(tool: &str, context: &RequestContext<RoleServer>) -> bool {
    tool == "bash"
        && context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
}

/// The ids of a store's tasks, to keep their number within [`MAX_TASKS`].
#[derive(Default)]
pub(crate) struct TaskIds(Mutex<Vec<String>>);

impl TaskIds {
    /// Whether `store` has room for another task (ids it forgot are forgotten here too).
    pub(crate) fn has_room(&self, store: &TaskManager) -> bool {
        let mut ids = self.0.lock().unwrap_or_else(|p| p.into_inner());
        ids.retain(|id| store.get_task(id).is_ok());
        ids.len() < MAX_TASKS
    }

    fn add(&self, id: String) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(id);
    }
}

/// A task's hold on its call. Dropped before the call ended (the store dropped the task:
/// its retention lapsed, or the store shut down) it cancels the call, which kills its
/// processes; either way it lets go of the call's question route.
struct CallGuard {
    cancel: CancelToken,
    ended: bool,
    desk: Arc<Desk>,
    call_id: String,
    drain: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if !self.ended {
            self.cancel
                .cancel(CancelReason::Other("the task was dropped".into()));
        }
        self.desk.unroute(&self.call_id);
        if let Some(d) = self.drain.take() {
            d.abort();
        }
    }
}

/// Moves `flight` into a task of `store` (counted in `ids`); `finish` turns the call's
/// end into its result.
pub(crate) fn spawn(
    store: &TaskManager,
    ids: &TaskIds,
    desk: Arc<Desk>,
    mut flight: Flight,
    finish: impl FnOnce(Flight, Result<dsh_tools::ToolResult, tokio::task::JoinError>) -> CallToolResult
        + Send
        + 'static,
) -> CreateTaskResult {
    let options = TaskOptions::new()
        .with_poll_interval_ms(POLL_INTERVAL_MS)
        .with_ttl_ms(TTL_MS)
        .with_status_message(format!("{} is running", flight.tool));
    let task = store.spawn(options, move |context| {
        Box::pin(async move {
            // Questions the call asks from now on have nobody to answer them in place.
            let mut asks = std::mem::replace(&mut flight.asks, tokio::sync::mpsc::channel(1).1);
            let drain = tokio::spawn(async move {
                while let Some(ask) = asks.recv().await {
                    let _ = ask.reply.send(dsh_approval::ApprovalOutcome::Unavailable);
                }
            });
            let mut guard = CallGuard {
                cancel: flight.cancel.clone(),
                ended: false,
                desk,
                call_id: flight.call_id.clone(),
                drain: Some(drain),
            };
            // A call that ended wins over a cancel that came with it: its result is kept.
            let ended = tokio::select! {
                biased;
                r = &mut flight.task => Some(r),
                () = context.cancelled() => None,
            };
            let (result, cancelled) = match ended {
                Some(r) => (r, false),
                None => {
                    // tasks/cancel: the call is cancelled (its tree killed) and awaited;
                    // its check after the command still runs.
                    flight.cancel.cancel(CancelReason::ClientCancelled);
                    ((&mut flight.task).await, true)
                }
            };
            guard.ended = true;
            drop(guard);
            context.set_status_message(if cancelled {
                format!("{} was cancelled", flight.tool)
            } else {
                format!("{} ended", flight.tool)
            });
            let result = finish(flight, result);
            if cancelled {
                Err(TaskExit::Cancelled)
            } else {
                Ok(result)
            }
        })
    });
    ids.add(task.task_id.clone());
    CreateTaskResult::new(task)
}
