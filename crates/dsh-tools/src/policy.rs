//! The sandbox policy of one call, with the one approved escalation a tool may ask for;
//! shared by `bash`, `write` and `edit`.

use crate::escalation::{
    approve_escalation, validate_escalation_args, ApprovalQuestion, EscalationRequest, Subject,
};
use dsh_approval::{Action, ApprovalOutcome, ApprovalRequest};
use dsh_core::journal::{Journal, Logged, Quarantined, Record};
use dsh_core::{CallId, ErrorCode, HarnessError};
use dsh_sandbox::{SandboxMode, SandboxPolicy};
use dsh_store::session::Session;
use schemars::JsonSchema;
use serde::Deserialize;
use std::sync::Arc;

use crate::CallContext;

/// The policy this call runs under: the session's standing policy, or, when the model
/// asked for `requested` with a `justification` and the user allowed it once, the same
/// policy in that mode, as the World's policy service resolves it (the only place a
/// call's policy is made; in a World that does not confine, it resolves
/// danger-full-access when so configured, and a confined mode there is refused by the
/// providers). The user is shown `action` (what the call will do), a file's path resolved against the
/// workspace root.
///
/// # Errors
/// `ESCALATION_INVALID` (unpaired or blank arguments, a mode not strictly wider),
/// `INVALID_ARGS` (an escalation where nothing confines), the approval errors
/// (`APPROVAL_REJECTED`, `APPROVAL_CANCELLED`, `APPROVAL_UNAVAILABLE`). Nothing ran.
pub(crate) async fn call_policy(
    ctx: &CallContext<'_>,
    requested: Option<SandboxMode>,
    justification: Option<&str>,
    subject: Subject,
    tool_name: &str,
    action: Action,
) -> Result<SandboxPolicy, HarnessError> {
    validate_escalation_args(requested, justification)?;
    let world = ctx.world;
    let standing = match ctx.session {
        Some(s) => {
            let cwd = s.header().cwd.clone();
            world
                .policy()
                .resolve(Some((&**s as &dyn Journal, &cwd)), None)
                .await
        }
        None => world.policy().resolve(None, None).await,
    };
    let (Some(wanted), Some(why)) = (requested, justification) else {
        return Ok(standing);
    };
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
    let widened = match ctx.session {
        Some(s) => {
            let cwd = s.header().cwd.clone();
            world
                .policy()
                .resolve(Some((&**s as &dyn Journal, &cwd)), Some(granted))
                .await
        }
        None => world.policy().resolve(None, Some(granted)).await,
    };
    Ok(widened)
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

/// The check after a confined call that could write (workspace-write): what it made that
/// the host's tools would run or read, with the programs in it set aside
/// ([`PolicyService::after_command`](crate::PolicyService::after_command)). Logs
/// `sandbox/new-git-dir` and returns the line the model sees (and the event's data), or
/// `None` when nothing appeared.
///
/// # Errors
/// The session log's.
pub(crate) async fn after_call(
    ctx: &CallContext<'_>,
    policy: &SandboxPolicy,
) -> Result<Option<(String, serde_json::Value)>, HarnessError> {
    AfterCheck::of(ctx).run(policy).await
}

/// What [`after_call`] needs, kept beyond the call: a background job runs the check when
/// it ends.
pub(crate) struct AfterCheck {
    service: Arc<crate::PolicyService>,
    temp: Vec<std::path::PathBuf>,
    session: Option<Arc<Session>>,
    call_id: CallId,
}

impl AfterCheck {
    /// The check for `ctx`'s call.
    pub(crate) fn of(ctx: &CallContext<'_>) -> AfterCheck {
        AfterCheck {
            service: ctx.world.policy_arc(),
            temp: ctx
                .world
                .sandbox()
                .and_then(|s| s.temp_dir())
                .into_iter()
                .collect(),
            session: ctx.session.cloned(),
            call_id: ctx.call_id.clone(),
        }
    }

    /// Runs it for a command that ran under `policy` (see [`after_call`]).
    ///
    /// # Errors
    /// The session log's.
    pub(crate) async fn run(
        &self,
        policy: &SandboxPolicy,
    ) -> Result<Option<(String, serde_json::Value)>, HarnessError> {
        if policy.mode != SandboxMode::WorkspaceWrite {
            return Ok(None);
        }
        let after = self.service.after_command(policy, &self.temp).await;
        self.report(after).await
    }

    async fn report(
        &self,
        after: crate::policy_service::AfterCommand,
    ) -> Result<Option<(String, serde_json::Value)>, HarnessError> {
        if after.appeared.is_empty() {
            return Ok(None);
        }
        let paths: Vec<String> = after
            .appeared
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let quarantined: Vec<Quarantined> = after
            .quarantined
            .iter()
            .map(|q| Quarantined {
                path: q.path.display().to_string().into(),
                moved_to: q.moved_to.as_ref().map(|m| m.display().to_string().into()),
                what: q.what.to_string().into(),
                set_aside: q.set_aside,
            })
            .collect();
        let mut line = format!(
            "[sandbox: this call made {}, which the host's git and editors run or read by \
         themselves; from now on it is protected",
            paths.join(", ")
        );
        let (done, failed): (Vec<_>, Vec<_>) = after.quarantined.iter().partition(|q| q.set_aside);
        if !done.is_empty() {
            let set: Vec<String> = done
                .iter()
                .map(|q| {
                    let to = q.moved_to.as_ref().map(|m| m.display().to_string());
                    format!(
                        "{} ({}) to {}",
                        q.path.display(),
                        q.what,
                        to.unwrap_or_default()
                    )
                })
                .collect();
            line.push_str(&format!(
                "; what would run a program was set aside for the user to review: {}",
                set.join("; ")
            ));
        }
        if !failed.is_empty() {
            let list: Vec<String> = failed
                .iter()
                .map(|q| format!("{} ({})", q.path.display(), q.what))
                .collect();
            line.push_str(&format!(
                "; dsh could NOT set aside {}: workspace-write is refused in this workspace until \
             the user has dealt with it",
                list.join("; ")
            ));
        }
        line.push_str(". Do not make repositories, hooks or tool settings for the user to run.]");
        if !failed.is_empty() {
            // The user is told directly: the model is the one that made it.
            let list: Vec<String> = failed
                .iter()
                .map(|q| format!("{} ({})", q.path.display(), q.what))
                .collect();
            let text = format!(
                "a sandboxed command (call {}) made what the host's git or tools would run, \
                 and dsh could not set it aside: {}. Do not run git or those tools there \
                 until you have looked at it and moved or removed it; dsh refuses \
                 workspace-write commands there until then (dsh doctor lists it).",
                self.call_id.as_str(),
                list.join("; ")
            );
            self.service.tell_unsettled(&text);
            if let Some(session) = &self.session {
                let unsettled: Vec<Quarantined> = quarantined
                    .iter()
                    .filter(|q| !q.set_aside)
                    .cloned()
                    .collect();
                session
                    .append(Record::SandboxUnsettled {
                        call_id: Some(self.call_id.as_str().into()),
                        text: text.into(),
                        quarantined: unsettled,
                    })
                    .await?;
            }
        }
        let record = Record::SandboxNewGitDir {
            call_id: Some(self.call_id.as_str().into()),
            paths: paths.into_iter().map(Logged::from).collect(),
            quarantined,
        };
        let data = record.data();
        if let Some(session) = &self.session {
            session.append(record).await?;
        }
        Ok(Some((line, data)))
    }
}
