//! Approvals asked of the MCP client's user, by elicitation.
//!
//! The pipeline asks its [`Answerer`]s; [`ElicitingAnswerer`] hands the question to the
//! `tools/call` that is running the call (found by call id), which asks the client in the
//! way its protocol version allows:
//! - up to `2025-11-25`: an `elicitation/create` request sent while the call waits;
//! - from `2026-07-28` (which forbids server-to-client requests): the call is parked
//!   server-side and `tools/call` returns an `InputRequiredResult` carrying the
//!   elicitation and an opaque `requestState`; the client's retry, carrying that state
//!   and its answer, resumes the parked call.
//!
//! The form has no fields: `accept` allows the call once, `decline` rejects it, `cancel`
//! cancels it. A client that did not declare the elicitation capability is never asked:
//! the approval is `unavailable` and the call fails closed, saying so. A parked call
//! whose client never comes back is cancelled after [`PARK_LIMIT`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dsh_approval::{Answerer, ApprovalOutcome, Question};
use dsh_core::CancelToken;
use dsh_tools::ToolResult;
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema,
};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// How long a parked call waits for its client's retry before it is cancelled.
pub const PARK_LIMIT: Duration = Duration::from_secs(600);

/// The key of the one elicitation in an `InputRequiredResult`.
pub(crate) const INPUT_KEY: &str = "approval";

/// A question on its way to the client, and where its answer goes.
pub(crate) struct Ask {
    pub(crate) question: Question,
    pub(crate) reply: oneshot::Sender<ApprovalOutcome>,
}

/// A call that is running, or parked waiting for the client.
pub(crate) struct Flight {
    pub(crate) call_id: String,
    pub(crate) tool: String,
    /// A hash of the call's arguments, which a retry must repeat.
    pub(crate) arguments: u64,
    pub(crate) task: JoinHandle<ToolResult>,
    pub(crate) asks: mpsc::Receiver<Ask>,
    pub(crate) cancel: CancelToken,
    /// The call's run slot; given back while the call is parked for a human.
    pub(crate) slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The calls of one connection that may ask, and the parked ones. Shared by the server
/// and its [`ElicitingAnswerer`].
#[derive(Default)]
pub(crate) struct Desk {
    /// Call id → where that call's questions go, and its cancel token.
    routes: Mutex<HashMap<String, (mpsc::Sender<Ask>, CancelToken)>>,
    /// requestState → a parked call and the reply its question waits for.
    parked: Mutex<HashMap<String, (Flight, oneshot::Sender<ApprovalOutcome>)>>,
    /// Held (shared) by every running call; [`Desk::close`] takes it whole to wait for all.
    active: Arc<tokio::sync::RwLock<()>>,
    /// Set for good by [`Desk::close`]: no call starts or parks after it.
    closing: std::sync::atomic::AtomicBool,
}

/// Held by a running call until it ends.
pub(crate) type Running = tokio::sync::OwnedRwLockReadGuard<()>;

impl Desk {
    /// Registers a new call: where its questions go, and the guard its task holds while
    /// it runs. `None` once the desk is closing.
    pub(crate) fn route(
        &self,
        call_id: &str,
        cancel: &CancelToken,
    ) -> Option<(mpsc::Receiver<Ask>, Running)> {
        let mut routes = lock(&self.routes);
        if self.closing.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        let running = self.active.clone().try_read_owned().ok()?;
        let (tx, rx) = mpsc::channel(1);
        routes.insert(call_id.to_owned(), (tx, cancel.clone()));
        Some((rx, running))
    }

    pub(crate) fn unroute(&self, call_id: &str) {
        lock(&self.routes).remove(call_id);
    }

    /// Parks `flight` under a fresh requestState; cancels it if nobody resumes it in time.
    pub(crate) fn park(
        self: &Arc<Self>,
        flight: Flight,
        reply: oneshot::Sender<ApprovalOutcome>,
    ) -> String {
        let mut flight = flight;
        flight.slot = None;
        let state = format!("dsh-{}", dsh_core::spill::random_hex(32));
        let mut parked = lock(&self.parked);
        if self.closing.load(std::sync::atomic::Ordering::SeqCst) {
            // The connection is over: the question is answered at once.
            let _ = reply.send(ApprovalOutcome::Cancelled);
            flight.cancel.cancel("the MCP client went away");
            return state;
        }
        parked.insert(state.clone(), (flight, reply));
        drop(parked);
        let (desk, key) = (Arc::downgrade(self), state.clone());
        tokio::spawn(async move {
            tokio::time::sleep(PARK_LIMIT).await;
            let Some(desk) = desk.upgrade() else { return };
            let parked = lock(&desk.parked).remove(&key);
            if let Some((flight, reply)) = parked {
                let _ = reply.send(ApprovalOutcome::Cancelled);
                flight
                    .cancel
                    .cancel("the MCP client did not answer the approval in time");
                desk.unroute(&flight.call_id);
            }
        });
        state
    }

    /// The call parked under `state`, if it is (still) there and is a call of `tool` with
    /// arguments hashing to `arguments` (when the retry repeats them).
    pub(crate) fn resume(
        &self,
        state: &str,
        tool: &str,
        arguments: Option<u64>,
    ) -> Option<(Flight, oneshot::Sender<ApprovalOutcome>)> {
        let mut parked = lock(&self.parked);
        let same = |f: &Flight| f.tool == tool && arguments.is_none_or(|a| a == f.arguments);
        if parked.get(state).is_some_and(|(f, _)| same(f)) {
            parked.remove(state)
        } else {
            None
        }
    }
}

impl Desk {
    /// Ends the connection's calls: parked ones get `cancelled` for their approval, running
    /// ones are cancelled (killing their processes); then waits, at most `limit`, for all
    /// of them to end, so their outcomes are in the session log before it closes.
    pub(crate) async fn close(&self, limit: std::time::Duration) {
        {
            // Under both locks, so that no call starts or parks unseen.
            let _routes = lock(&self.routes);
            let _parked = lock(&self.parked);
            self.closing
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let parked: Vec<_> = lock(&self.parked).drain().map(|(_, v)| v).collect();
        for (flight, reply) in parked {
            let _ = reply.send(ApprovalOutcome::Cancelled);
            flight.cancel.cancel("the MCP client went away");
        }
        for (_, cancel) in lock(&self.routes).values() {
            cancel.cancel("the MCP client went away");
        }
        let _ = tokio::time::timeout(limit, self.active.write()).await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The [`Answerer`] of an MCP connection. See the [module docs](self).
pub struct ElicitingAnswerer {
    desk: Arc<Desk>,
}

impl ElicitingAnswerer {
    pub(crate) fn new(desk: Arc<Desk>) -> ElicitingAnswerer {
        ElicitingAnswerer { desk }
    }
}

#[async_trait]
impl Answerer for ElicitingAnswerer {
    async fn answer(&self, question: &Question) -> Option<ApprovalOutcome> {
        let route = lock(&self.desk.routes)
            .get(question.call_id.as_deref()?)
            .map(|(tx, _)| tx.clone())?;
        let (reply, answer) = oneshot::channel();
        route
            .send(Ask {
                question: question.clone(),
                reply,
            })
            .await
            .ok()?;
        answer.await.ok()
    }
}

/// The message a user sees: what, why, and what accepting does.
fn message(q: &Question) -> String {
    let why = q
        .reason
        .as_deref()
        .unwrap_or("it needs more than the sandbox allows");
    format!(
        "dsh: the agent's `{}` call asks for approval: {why}. Accept to allow it once.",
        q.tool_name
    )
}

/// The elicitation that asks `q`.
pub(crate) fn request(q: &Question) -> ElicitRequest {
    ElicitRequest::new(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(q),
        requested_schema: ElicitationSchema::new(Default::default()),
    })
}

/// The approval an elicitation answer gives.
pub(crate) fn outcome(result: &ElicitResult) -> ApprovalOutcome {
    match result.action {
        ElicitationAction::Accept => ApprovalOutcome::AllowedOnce,
        ElicitationAction::Decline => ApprovalOutcome::Rejected,
        ElicitationAction::Cancel => ApprovalOutcome::Cancelled,
        // An action this version does not know is not a yes.
        _ => ApprovalOutcome::Rejected,
    }
}

/// The approval in a retry's `inputResponses`; anything unreadable is a rejection.
pub(crate) fn outcome_of_response(response: Option<&Value>) -> ApprovalOutcome {
    response
        .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok())
        .map_or(ApprovalOutcome::Rejected, |r| outcome(&r))
}
