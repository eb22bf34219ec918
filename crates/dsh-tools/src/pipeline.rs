//! [`World::call`]: the execution pipeline of the [crate docs](crate).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use dsh_approval::{Action, ApprovalOutcome, ApprovalRequest};
use dsh_core::journal::{ErrorRecord, ImageRecord, Record, ToolResultRecord};
use dsh_core::{CancelToken, ErrorCode, HarnessError};
use dsh_store::session::Session;

use crate::policy::scope::CallScopes;
use crate::{CallContext, CallView, PostDecision, PreDecision, ToolCall, ToolResult, World};

fn aborted_before_dispatch() -> HarnessError {
    HarnessError::new(
        ErrorCode::AbortedBeforeDispatch,
        "tool call aborted before dispatch",
    )
}

fn denied(reason: String) -> HarnessError {
    HarnessError::new(ErrorCode::ToolDenied, reason)
}

/// How far a call got before its result was decided.
enum Stage {
    /// The result skips the post-execute hooks.
    Final(ToolResult),
    /// The result goes through the post-execute hooks.
    Post(ToolResult),
}

impl World {
    /// Runs `call` through the pipeline (see the [crate docs](crate)) and returns its
    /// result, which is never an `Err`: every failure is an error result with its code.
    /// With `session`, the call and its result are logged (the session must have an open
    /// turn for approvals to be asked).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped mid-call, the log keeps the `tool/call` without a
    /// `tool/result` and the body stops where it stands (see
    /// [`Tool::call`](crate::Tool::call)); the check after the call still runs, in a
    /// task of its own, and is logged. Cancel `cancel` instead: the call then ends checked
    /// and logged, with its result.
    pub async fn call(
        &self,
        session: Option<&Arc<Session>>,
        call: ToolCall,
        cancel: CancelToken,
    ) -> ToolResult {
        let turn = match session {
            Some(s) => s.open_turn().await,
            None => None,
        };
        if let Some(s) = session {
            let logged = s
                .append(Record::ToolCall {
                    turn,
                    call_id: call.call_id.as_str().into(),
                    name: call.name.as_str().into(),
                    // As JSON text: the log bounds a long one as its head and digest.
                    arguments: call.arguments.to_string().into(),
                })
                .await;
            if let Err(e) = logged {
                // Nothing runs that the log does not show.
                return ToolResult::from_error(&e);
            }
        }
        let view = CallView {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            arguments: Arc::new(call.arguments),
        };
        // What the call saw of a file, logged with its result whatever the outcome: the
        // read-before-edit memory already has it.
        let seen = std::sync::Mutex::new(None);
        let stage = self.run_stages(session, &view, &cancel, &seen).await;
        let mut result = match stage {
            Stage::Final(r) => r,
            Stage::Post(r) => self.post_execute(&view, r, &cancel).await,
        };
        // The finalizer: exactly once, on every outcome.
        if let Some(tool) = self.tools.get(&call.name) {
            if let Some(text) = tool.finalize(&result) {
                result.text = text;
            }
        }
        if let Some(line) = session.and_then(|s| self.take_mode_change(s.id())) {
            result.text.push('\n');
            result.text.push_str(&line);
        }
        if let Some(s) = session {
            let logged = Record::ToolResult(ToolResultRecord {
                turn,
                call_id: call.call_id.as_str().into(),
                name: call.name.as_str().into(),
                text: result.text.as_str().into(),
                is_error: result.is_error,
                error: result.error.as_ref().map(|e| ErrorRecord {
                    name: e.name.as_str().into(),
                    code: e.code.as_str().into(),
                }),
                meta: result.meta.clone(),
                image: result.image.as_ref().map(|img| ImageRecord {
                    mime_type: img.mime_type.into(),
                    bytes: img.data.len() as u64,
                }),
                source_event_seqs: Vec::new(),
                seen: seen
                    .into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .map(|s| Box::new(s.to_record())),
            });
            if let Err(e) = s.append(logged).await {
                return ToolResult::from_error(&e);
            }
        }
        result
    }

    /// Steps 2-4: cancellation, pre-execute, approval, guards, dispatch.
    async fn run_stages(
        &self,
        session: Option<&Arc<Session>>,
        view: &CallView,
        cancel: &CancelToken,
        seen: &std::sync::Mutex<Option<dsh_fs::observations::Seen>>,
    ) -> Stage {
        if cancel.is_cancelled() {
            return Stage::Final(ToolResult::from_error(&aborted_before_dispatch()));
        }
        // A session whose working directory now leads elsewhere runs nothing: its root,
        // and with it what its calls may read and write, stays where it was pinned.
        if let Some(s) = session {
            if let Err(e) = self.policy().check_root(&s.header().cwd) {
                return Stage::Final(ToolResult::from_error(&e));
            }
        }
        let mut decision = PreDecision::Allow;
        for hook in &self.pre {
            match hook.pre_execute(view).await {
                Ok(PreDecision::Allow) => {}
                Ok(d) => {
                    decision = d;
                    break;
                }
                Err(e) => return Stage::Final(ToolResult::from_error(&e)),
            }
        }
        if let PreDecision::Ask(reason) = decision {
            decision = match self.ask(session, view, reason, cancel).await {
                Ok(d) => d,
                Err(e) => return Stage::Final(ToolResult::from_error(&e)),
            };
            if cancel.is_cancelled() && decision == PreDecision::Deny(cancelled_text(&view.name)) {
                return Stage::Post(ToolResult::from_error(&aborted_before_dispatch()));
            }
        }
        let reason = match decision {
            PreDecision::Deny(reason) => Some(reason),
            _ => self.guards.iter().find_map(|g| g(view)),
        };
        if let Some(reason) = reason {
            // A denial stands even if a cancel arrived meanwhile.
            return Stage::Post(ToolResult::from_error(&denied(reason)));
        }
        if cancel.is_cancelled() {
            return Stage::Post(ToolResult::from_error(&aborted_before_dispatch()));
        }
        let Some(tool) = self.tools.get(&view.name) else {
            return Stage::Post(ToolResult::from_error(&HarnessError::new(
                ErrorCode::UnknownTool,
                format!("unknown tool \"{}\"", view.name),
            )));
        };
        let scopes = CallScopes::default();
        let ctx = CallContext {
            call_id: &view.call_id,
            session,
            cancel,
            world: self,
            scopes: &scopes,
            seen,
        };
        // A body that started is awaited to its end, cancelled or not. A panic in it ends
        // this call alone.
        let outcome = match CatchUnwind(tool.call(&view.arguments, &ctx)).await {
            Ok(outcome) => outcome,
            Err(payload) => Err(HarnessError::panicked(
                &format!("the {} tool", view.name),
                payload.as_ref(),
            )),
        };
        let outcome = match outcome {
            Ok(_) if cancel.is_cancelled() => {
                Err(HarnessError::new(ErrorCode::Aborted, "tool call aborted"))
            }
            other => other,
        };
        // The check after the call, on every outcome: the write scopes the body's
        // policies armed and nothing took over (see `scope`).
        let (found, log_error) = scopes.close_all().await;
        let outcome = match (outcome, log_error) {
            // What was found is said all the same (it was set aside).
            (_, Some(e)) => Err(found.iter().fold(e, |e, (line, _)| e.with_line(line))),
            (Ok(mut out), None) => {
                for (line, paths) in found {
                    out.text.push('\n');
                    out.text.push_str(&line);
                    // Beside the sandbox facts of a command's result.
                    if let Some(sandbox) = out
                        .meta
                        .as_mut()
                        .and_then(|m| m.get_mut("sandbox"))
                        .and_then(serde_json::Value::as_object_mut)
                    {
                        sandbox.insert("appeared".into(), paths.into());
                    }
                }
                Ok(out)
            }
            (Err(e), None) => Err(found.iter().fold(e, |e, (line, _)| e.with_line(line))),
        };
        Stage::Post(match outcome {
            Ok(out) => ToolResult {
                text: out.text,
                is_error: false,
                error: None,
                meta: out.meta.map(crate::without_nulls),
                image: out.image,
            },
            Err(e) => ToolResult::from_error(&e),
        })
    }

    /// `ask` → the approval service → allow or a denial.
    async fn ask(
        &self,
        session: Option<&Arc<Session>>,
        view: &CallView,
        reason: Option<String>,
        cancel: &CancelToken,
    ) -> Result<PreDecision, HarnessError> {
        let name = &view.name;
        let Some(session) = session else {
            return Ok(PreDecision::Deny(format!(
                "tool \"{name}\" requires approval, but the call has no agent to route it through"
            )));
        };
        let outcome = self
            .approval
            .request(
                &**session,
                ApprovalRequest {
                    tool_name: name.clone(),
                    call_id: Some(view.call_id.to_string()),
                    // What the call would do (a bash call's command line), not only the
                    // hook's reason: the user decides on what runs.
                    action: Some(match self.tools.get(name) {
                        Some(tool) => tool.action(&view.arguments),
                        None => Action::Arguments((*view.arguments).clone()),
                    }),
                    reason,
                    cancel: Some(cancel.clone()),
                    ..ApprovalRequest::default()
                },
            )
            .await?;
        Ok(match outcome {
            ApprovalOutcome::AllowedOnce => PreDecision::Allow,
            ApprovalOutcome::Rejected => PreDecision::Deny(format!(
                "tool \"{name}\" was declined by the user or the client"
            )),
            ApprovalOutcome::Expired => PreDecision::Deny(format!(
                "approval for tool \"{name}\" expired: nobody answered in time"
            )),
            ApprovalOutcome::Cancelled => PreDecision::Deny(cancelled_text(name)),
            ApprovalOutcome::Unavailable => PreDecision::Deny(format!(
                "tool \"{name}\" requires approval, but no approval channel is available (no \
                 terminal, or an MCP client without elicitation); set the approval policy to \
                 never to refuse such calls without asking"
            )),
        })
    }

    /// Step 5: the post-execute hooks.
    async fn post_execute(
        &self,
        view: &CallView,
        mut result: ToolResult,
        cancel: &CancelToken,
    ) -> ToolResult {
        for hook in &self.post {
            match hook.post_execute(view, &result).await {
                Ok(PostDecision::Accept) => {}
                Ok(PostDecision::Replace(text)) => result.text = text,
                Ok(PostDecision::Block(feedback)) => {
                    result = ToolResult::from_error(&denied(feedback));
                }
                Err(e) => return ToolResult::from_error(&e),
            }
        }
        if cancel.is_cancelled() && !result.is_error {
            return ToolResult::from_error(&HarnessError::new(
                ErrorCode::Aborted,
                "tool call aborted",
            ));
        }
        result
    }
}

/// A tool body that reports a panic as `Err(payload)` instead of unwinding into the
/// pipeline (and, from there, the server).
///
/// `AssertUnwindSafe` is sound here because the body is never seen again after a panic:
/// this future is then ready, and the pipeline drops it (which kills any process it
/// started). What it shared with the rest of dsh is behind locks that a panic does not
/// leave unusable: tokio's do not poison, and std's are taken with
/// `unwrap_or_else(PoisonError::into_inner)`.
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = std::thread::Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let body = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(body).poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Err(payload) => Poll::Ready(Err(payload)),
        }
    }
}

fn cancelled_text(name: &str) -> String {
    format!("approval for tool \"{name}\" was cancelled")
}
