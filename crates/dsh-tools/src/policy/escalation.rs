//! One approved retry in a wider mode: the ladder, the argument rules, the markers the
//! model sees, and the order of checks before a human is asked.
//!
//! A tool that confines (bash, write, edit) offers `sandbox_permissions` (one of
//! [`ESCALATION_TARGETS`]) and `justification`. When a call asks for it,
//! [`validate_escalation_args`] checks the pair, and [`approve_escalation`] checks the
//! requested mode is strictly wider than the call's ([`wider_modes`]) *before* asking
//! anyone, then asks the approver once. The grant is for that one call only.
//!
//! The model-visible markers are interface facts: [`denial_marker`] and
//! [`escalation_hint`] render byte-for-byte as pinned.

use std::future::Future;

use dsh_core::{ErrorCode, HarnessError};

use dsh_approval::ApprovalOutcome;
use dsh_sandbox::SandboxMode;

/// The modes a call may escalate to, advertised in full whenever the capability confines.
pub const ESCALATION_TARGETS: [SandboxMode; 2] =
    [SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess];

/// The modes strictly wider than `effective` (none for danger-full-access).
pub fn wider_modes(effective: SandboxMode) -> &'static [SandboxMode] {
    match effective {
        SandboxMode::ReadOnly => &ESCALATION_TARGETS,
        SandboxMode::WorkspaceWrite => &[SandboxMode::DangerFullAccess],
        SandboxMode::DangerFullAccess => &[],
    }
}

/// Checks that `sandbox_permissions` and `justification` come together and that the
/// justification is a non-blank sentence.
///
/// # Errors
/// `ESCALATION_INVALID` with the pinned texts:
/// `invalid escalation: sandbox_permissions requires a justification`,
/// `invalid escalation: justification is only valid together with sandbox_permissions`,
/// `invalid justification: expected a non-empty sentence`.
pub fn validate_escalation_args(
    sandbox_permissions: Option<SandboxMode>,
    justification: Option<&str>,
) -> Result<(), HarnessError> {
    let invalid = |m: &'static str| HarnessError::new(ErrorCode::EscalationInvalid, m);
    match (sandbox_permissions, justification) {
        (None, None) => Ok(()),
        (Some(_), None) => Err(invalid(
            "invalid escalation: sandbox_permissions requires a justification",
        )),
        (None, Some(_)) => Err(invalid(
            "invalid escalation: justification is only valid together with sandbox_permissions",
        )),
        (Some(_), Some(j)) if j.trim().is_empty() => Err(invalid(
            "invalid justification: expected a non-empty sentence",
        )),
        (Some(_), Some(_)) => Ok(()),
    }
}

/// One line per path a command's error output says it could not read that its policy
/// keeps from it: `[sandbox: reading PATH is denied: …]`, naming the key that opens it.
pub fn read_denial_lines(policy: &dsh_sandbox::SandboxPolicy, stderr: &str) -> Vec<String> {
    use dsh_sandbox::deny_read::Refusal;
    dsh_sandbox::deny_read::refused_in_output(policy, stderr, 3)
        .into_iter()
        .map(|(p, why)| {
            let p = dsh_core::visible::visible(&p.display().to_string());
            match why {
                Refusal::OutsideAllowList => format!(
                    "[sandbox: reading {p} is denied: it is in a home directory, closed but for \
                     the workspace and what read_allow names (a wider mode does not open it); \
                     ask the user for what you need from it, or to add it to read_allow in {}]",
                    dsh_sandbox::deny_read::user_config_hint()
                ),
                Refusal::Denied => format!(
                    "[sandbox: reading {p} is denied: it holds credentials or dsh's own state \
                     (deny_read); ask the user for what you need from it]"
                ),
            }
        })
        .collect()
}

/// `[sandbox: file access denied under <mode> mode]`.
pub fn denial_marker(mode: SandboxMode) -> String {
    format!("[sandbox: file access denied under {mode} mode]")
}

/// The lines after a denial under `mode`: the marker, then, when a wider mode exists,
/// the escalation hint if a person can be asked (`can_ask`), else how the user can widen
/// the session ([`no_escalation_hint`]): a model is never told to ask where nobody can
/// answer.
pub fn denial_lines(mode: SandboxMode, subject: Subject, can_ask: bool) -> Vec<String> {
    let mut lines = vec![denial_marker(mode)];
    match wider_modes(mode).first() {
        Some(_) if can_ask => lines.push(escalation_hint(subject)),
        Some(wider) => lines.push(no_escalation_hint(*wider)),
        None => {}
    }
    lines
}

/// The line after a denial where nobody can approve a wider mode (the client cannot ask
/// its user, or the approval policy is `never`): who can widen the session, and how.
pub fn no_escalation_hint(wider: SandboxMode) -> String {
    format!(
        "[sandbox: nobody can approve a wider mode in this session; if the task needs it, \
         tell the user: they can restart dsh with --mode {wider} (or set mode in their dsh \
         config)]"
    )
}

/// What is being escalated, as the hint and the rejection name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    /// A shell command (`command`).
    Command,
    /// A file operation (`operation`).
    Operation,
}

impl Subject {
    /// `command` or `operation`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Subject::Command => "command",
            Subject::Operation => "operation",
        }
    }
}

/// The pinned hint that follows a denial when escalation is available.
pub fn escalation_hint(subject: Subject) -> String {
    format!(
        "[sandbox: escalation available — retry this exact {} once with sandbox_permissions \
         (the narrowest wider mode that suffices) + justification; the approval prompt asks \
         the user]",
        subject.as_str()
    )
}

/// What the approver is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalQuestion {
    /// The tool that asks (`bash`, `write`, …).
    pub tool_name: String,
    /// The call that asks.
    pub call_id: String,
    /// `escalate sandbox to <mode>: <justification>`.
    pub reason: String,
}

/// One escalation request.
#[derive(Clone, Debug)]
pub struct EscalationRequest {
    /// The call's current mode.
    pub effective: SandboxMode,
    /// The mode asked for.
    pub requested: SandboxMode,
    /// Why (already validated non-blank).
    pub justification: String,
    /// What is escalated.
    pub subject: Subject,
    /// The tool that asks.
    pub tool_name: String,
    /// The call that asks.
    pub call_id: String,
    /// Whether the call belongs to an agent session an approval can be routed through.
    pub has_session: bool,
}

/// Grants `request.requested` for one call if it is strictly wider than the call's mode and
/// the approver allows it. Checks, in this order: widening, an approver, a session; only
/// then asks (once).
///
/// # Errors
/// `ESCALATION_INVALID` when the mode is not strictly wider (nobody asked);
/// `APPROVAL_UNAVAILABLE` without an approver, without a session, or when the approver
/// says nobody can answer; `APPROVAL_REJECTED`; `APPROVAL_CANCELLED`.
///
/// # Cancel safety
/// As cancel safe as `approver`: it awaits nothing else, and dropping it drops the
/// approver's future (an approval service request then leaves its question without a
/// decision, see [`ApprovalService::request`](dsh_approval::ApprovalService::request)).
pub async fn approve_escalation<F, Fut>(
    request: &EscalationRequest,
    approver: Option<F>,
) -> Result<SandboxMode, HarnessError>
where
    F: FnOnce(ApprovalQuestion) -> Fut,
    Fut: Future<Output = ApprovalOutcome>,
{
    let mode = request.requested;
    if !wider_modes(request.effective).contains(&mode) {
        return Err(HarnessError::new(
            ErrorCode::EscalationInvalid,
            format!(
                "sandbox escalation to \"{mode}\" is not strictly wider than this call's current \"{}\" mode",
                request.effective
            ),
        ));
    }
    let Some(approver) = approver else {
        return Err(HarnessError::new(
            ErrorCode::ApprovalUnavailable,
            format!("sandbox escalation to \"{mode}\" requires approval, but no approval service is composed"),
        ));
    };
    if !request.has_session {
        return Err(HarnessError::new(
            ErrorCode::ApprovalUnavailable,
            format!("sandbox escalation to \"{mode}\" requires approval, but the call has no agent to route it through"),
        ));
    }
    let question = ApprovalQuestion {
        tool_name: request.tool_name.clone(),
        call_id: request.call_id.clone(),
        reason: format!("escalate sandbox to {mode}: {}", request.justification),
    };
    match approver(question).await {
        ApprovalOutcome::AllowedOnce => Ok(mode),
        ApprovalOutcome::Rejected => Err(HarnessError::new(
            ErrorCode::ApprovalRejected,
            format!(
                "escalating this {} to \"{mode}\" was declined by the user or the client \
                 (some clients decline without asking anyone); do not retry it: work within \
                 the current mode, or tell the user what you need",
                request.subject.as_str()
            ),
        )),
        ApprovalOutcome::Expired => Err(HarnessError::new(
            ErrorCode::ApprovalCancelled,
            format!(
                "approval for escalating to \"{mode}\" expired: nobody answered in time, and \
                 nothing ran"
            ),
        )),
        ApprovalOutcome::Cancelled => Err(HarnessError::new(
            ErrorCode::ApprovalCancelled,
            format!("approval for escalating to \"{mode}\" was cancelled"),
        )),
        ApprovalOutcome::Unavailable => Err(HarnessError::new(
            ErrorCode::ApprovalUnavailable,
            format!(
                "sandbox escalation to \"{mode}\" requires approval, but no approval channel is \
                 available (no terminal, or an MCP client without elicitation); to allow it \
                 without asking, start the session with --mode {mode}"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::future::ready;

    fn block_on<F: Future>(f: F) -> F::Output {
        // The approvers here are ready futures: one poll finishes them.
        use std::pin::pin;
        use std::sync::Arc;
        use std::task::{Context, Poll, Wake, Waker};
        struct Noop;
        impl Wake for Noop {
            fn wake(self: Arc<Self>) {}
        }
        let waker = Waker::from(Arc::new(Noop));
        let mut f = pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(&waker)) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("approver future did not finish"),
        }
    }

    fn request(effective: SandboxMode, requested: SandboxMode) -> EscalationRequest {
        EscalationRequest {
            effective,
            requested,
            justification: "need to write the build output".into(),
            subject: Subject::Command,
            tool_name: "bash".into(),
            call_id: "c1".into(),
            has_session: true,
        }
    }

    #[test]
    fn the_ladder_is_strict() {
        assert_eq!(
            wider_modes(SandboxMode::ReadOnly),
            &[SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess]
        );
        assert_eq!(
            wider_modes(SandboxMode::WorkspaceWrite),
            &[SandboxMode::DangerFullAccess]
        );
        assert!(wider_modes(SandboxMode::DangerFullAccess).is_empty());
    }

    #[test]
    fn arguments_come_in_pairs() {
        assert!(validate_escalation_args(None, None).is_ok());
        assert!(validate_escalation_args(Some(SandboxMode::WorkspaceWrite), Some("why")).is_ok());
        let e = |p, j| {
            validate_escalation_args(p, j)
                .expect_err("must fail")
                .message()
                .to_owned()
        };
        assert_eq!(
            e(Some(SandboxMode::WorkspaceWrite), None),
            "invalid escalation: sandbox_permissions requires a justification"
        );
        assert_eq!(
            e(None, Some("why")),
            "invalid escalation: justification is only valid together with sandbox_permissions"
        );
        assert_eq!(
            e(Some(SandboxMode::WorkspaceWrite), Some("  \n")),
            "invalid justification: expected a non-empty sentence"
        );
    }

    #[test]
    fn markers_render_as_pinned() {
        assert_eq!(
            denial_marker(SandboxMode::ReadOnly),
            "[sandbox: file access denied under read-only mode]"
        );
        assert_eq!(
            denial_marker(SandboxMode::WorkspaceWrite),
            "[sandbox: file access denied under workspace-write mode]"
        );
        assert_eq!(
            escalation_hint(Subject::Command),
            "[sandbox: escalation available — retry this exact command once with sandbox_permissions (the narrowest wider mode that suffices) + justification; the approval prompt asks the user]"
        );
        assert!(escalation_hint(Subject::Operation).contains("retry this exact operation once"));
    }

    #[test]
    fn a_grant_returns_the_mode_and_the_approver_sees_the_reason() {
        let seen = RefCell::new(None);
        let approver = |q: ApprovalQuestion| {
            *seen.borrow_mut() = Some(q);
            ready(ApprovalOutcome::AllowedOnce)
        };
        let r = request(SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite);
        assert_eq!(
            block_on(approve_escalation(&r, Some(approver))).ok(),
            Some(SandboxMode::WorkspaceWrite)
        );
        let q = seen.borrow().clone().expect("asked");
        assert_eq!(
            q.reason,
            "escalate sandbox to workspace-write: need to write the build output"
        );
        assert_eq!((q.tool_name.as_str(), q.call_id.as_str()), ("bash", "c1"));
    }

    #[test]
    fn checks_run_in_order_and_non_widening_never_asks() {
        let asked = RefCell::new(0);
        let approver = || {
            |_q: ApprovalQuestion| {
                *asked.borrow_mut() += 1;
                ready(ApprovalOutcome::AllowedOnce)
            }
        };
        let not_wider = request(SandboxMode::ReadOnly, SandboxMode::ReadOnly);
        let e = block_on(approve_escalation(&not_wider, Some(approver()))).expect_err("must fail");
        assert_eq!(e.code(), ErrorCode::EscalationInvalid);
        assert_eq!(
            e.message(),
            "sandbox escalation to \"read-only\" is not strictly wider than this call's current \"read-only\" mode"
        );
        let from_full = request(SandboxMode::DangerFullAccess, SandboxMode::WorkspaceWrite);
        assert!(block_on(approve_escalation(&from_full, Some(approver()))).is_err());
        assert_eq!(*asked.borrow(), 0);

        let r = request(SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite);
        let none: Option<fn(ApprovalQuestion) -> std::future::Ready<ApprovalOutcome>> = None;
        let no_approver = block_on(approve_escalation(&r, none)).expect_err("must fail");
        assert!(no_approver
            .message()
            .contains("no approval service is composed"));
        let mut no_session = r.clone();
        no_session.has_session = false;
        let e = block_on(approve_escalation(&no_session, Some(approver()))).expect_err("must fail");
        assert!(e.message().contains("no agent to route it through"));
        assert_eq!(*asked.borrow(), 0);
    }

    #[test]
    fn outcomes_map_to_their_texts() {
        let r = request(SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess);
        let run =
            |o| block_on(approve_escalation(&r, Some(move |_| ready(o)))).expect_err("must fail");
        let rejected = run(ApprovalOutcome::Rejected);
        assert_eq!(rejected.code(), ErrorCode::ApprovalRejected);
        assert_eq!(
            rejected.message(),
            "escalating this command to \"danger-full-access\" was declined by the user or the \
             client (some clients decline without asking anyone); do not retry it: work within \
             the current mode, or tell the user what you need"
        );
        assert_eq!(
            run(ApprovalOutcome::Cancelled).message(),
            "approval for escalating to \"danger-full-access\" was cancelled"
        );
        assert_eq!(
            run(ApprovalOutcome::Unavailable).message(),
            "sandbox escalation to \"danger-full-access\" requires approval, but no approval channel is \
             available (no terminal, or an MCP client without elicitation); to allow it without \
             asking, start the session with --mode danger-full-access"
        );
    }
}
