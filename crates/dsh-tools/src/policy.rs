//! The sandbox policy of one call: decided by the [`service`], widened once by an
//! approved [`escalation`], and the write scope that runs the check after the call
//! ([`CallContext::policy`](crate::CallContext::policy)).

pub mod escalation;
pub(crate) mod scope;
pub mod service;

use crate::policy::escalation::{
    approve_escalation, validate_escalation_args, ApprovalQuestion, EscalationRequest, Subject,
};
use dsh_approval::{Action, ApprovalOutcome, ApprovalRequest};
use dsh_core::{ErrorCode, HarnessError};
use dsh_sandbox::{SandboxMode, SandboxPolicy};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::CallContext;

/// The policy this call runs under: the session's standing policy, or, when the model
/// asked for `requested` with a `justification` and the user allowed it once, the same
/// policy in that mode, as the World's policy service resolves it (the only place a
/// call's policy is made; in a World that does not confine, it resolves
/// danger-full-access when so configured, and a confined mode there is refused by the
/// providers). The user is shown `action` (what the call will do), a file's path resolved
/// against the workspace root. The check after the call is armed for the policy returned
/// (see [`CallContext::policy`]).
///
/// # Errors
/// `ESCALATION_INVALID` (unpaired or blank arguments, a mode not strictly wider),
/// `INVALID_ARGS` (an escalation where nothing confines), the approval errors
/// (`APPROVAL_REJECTED`, `APPROVAL_CANCELLED`, `APPROVAL_UNAVAILABLE`). Nothing ran.
pub(crate) async fn policy_for_call(
    ctx: &CallContext<'_>,
    requested: Option<SandboxMode>,
    justification: Option<&str>,
    subject: Subject,
    tool_name: &str,
    action: Action,
) -> Result<SandboxPolicy, HarnessError> {
    validate_escalation_args(requested, justification)?;
    let world = ctx.world;
    let (Some(wanted), Some(why)) = (requested, justification) else {
        return Ok(ctx.policy().await);
    };
    let standing = ctx.unarmed_policy(None).await;
    if !world.confines() {
        let what = match subject {
            Subject::Command => "executor",
            Subject::Operation => "filesystem",
        };
        return Err(HarnessError::new(
            ErrorCode::InvalidArgs,
            format!("sandbox_permissions is not available in this composition (no sandboxing {what} to escalate)"),
        ));
    }
    let request = EscalationRequest {
        effective: standing.mode,
        requested: wanted,
        justification: why.to_owned(),
        subject,
        tool_name: tool_name.to_owned(),
        call_id: ctx.call_id.to_string(),
        has_session: ctx.session.is_some(),
    };
    let action = with_resolved_path(action, &standing.workspace_root);
    let standing_mode = standing.mode;
    let approver = |q: ApprovalQuestion| async move {
        let Some(session) = ctx.session else {
            return ApprovalOutcome::Unavailable;
        };
        world
            .approval()
            .request(
                &**session,
                ApprovalRequest {
                    tool_name: q.tool_name,
                    call_id: Some(q.call_id),
                    action: Some(action),
                    requested: Some(wanted.to_string()),
                    current: Some(standing_mode.to_string()),
                    justification: Some(why.to_owned()),
                    reason: Some(q.reason),
                    cancel: Some(ctx.cancel.clone()),
                },
            )
            .await
            .unwrap_or(ApprovalOutcome::Unavailable)
    };
    let granted = approve_escalation(&request, Some(approver)).await?;
    // Resolved again in the granted mode: a wider mode has its own protected paths.
    let widened = ctx.unarmed_policy(Some(granted)).await;
    Ok(ctx.armed(widened))
}

/// `action` with a file's path resolved against `root` as the file tools resolve it
/// (joined, `.` and `..` folded), when that differs from the path as given.
fn with_resolved_path(action: Action, root: &std::path::Path) -> Action {
    match action {
        Action::File {
            path,
            change,
            resolved: None,
        } => {
            let r = dsh_core::path::fold_dots(&root.join(&path))
                .to_string_lossy()
                .into_owned();
            Action::File {
                resolved: (r != path).then_some(r),
                path,
                change,
            }
        }
        other => other,
    }
}

/// A wider sandbox mode a call may ask for (`sandbox_permissions`).
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Escalation {
    WorkspaceWrite,
    DangerFullAccess,
}

impl Escalation {
    pub(crate) fn mode(self) -> SandboxMode {
        match self {
            Escalation::WorkspaceWrite => SandboxMode::WorkspaceWrite,
            Escalation::DangerFullAccess => SandboxMode::DangerFullAccess,
        }
    }
}
