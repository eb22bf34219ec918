//! Ask a human, once, for something the sandbox or a policy does not allow by itself; fail
//! closed; write down that it was asked and what was decided.
//!
//! [`ApprovalService::request`] is the whole contract:
//! 1. the session must be inside an open turn (the turn is the audit boundary); otherwise
//!    the request is refused and nothing is logged;
//! 2. `approval/asked {id, toolName, callId?, action?, reason?}` is appended (a fresh
//!    random id; `action` is [`Action::to_json`]);
//! 3. the decision: a request already cancelled is `cancelled`; policy `never` is
//!    `rejected` before any answerer is consulted; otherwise the [`Answerer`]s are asked in
//!    order until one answers; none, one that fails or one that panics gives
//!    `unavailable`; a cancel while waiting gives `cancelled` and the late answer is
//!    dropped;
//! 4. `approval/decided {id, outcome}` is appended, and the outcome returned.
//!
//! An append that fails rejects the request with that error: no decision is ever returned
//! that is not in the log.
//!
//! The policy of a session is its last `approval/policy` event, else the service's default
//! ([`ApprovalPolicy::Ask`] unless configured). Answerers: [`ScriptedAnswerer`] (tests,
//! scripted runs), [`TerminalAnswerer`] (the CLI, only when there is a terminal), and any
//! type implementing [`Answerer`] (the MCP server asks its client).
//!
//! # What a person is shown
//! A question shows what will be done (its [`Action`]: the command line, the file), then
//! the wider mode asked for and the agent's justification, labelled as the agent's words.
//! Everything of the model's is shown through [`shown`]: controls and invisible characters
//! as visible escapes ([`dsh_core::visible`]), and at most [`ACTION_SHOWN_CHARS`] of an
//! action or [`REASON_SHOWN_CHARS`] of a justification or reason, a longer text being cut
//! with a notice of how much is not shown, never silently. Nothing of the model's reaches
//! a terminal raw.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock};

use async_trait::async_trait;
use dsh_core::journal::{EventKind, Journal, Logged, Record};
use dsh_core::{CancelToken, HarnessError};
use serde_json::{json, Map, Value};

pub use terminal::TerminalAnswerer;

mod terminal;

/// Whether approvals may be asked at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ApprovalPolicy {
    /// Ask the answerers (the default).
    #[default]
    Ask,
    /// Never ask: every request is `rejected` at once.
    Never,
}

impl ApprovalPolicy {
    /// `ask` or `never`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Ask => "ask",
            ApprovalPolicy::Never => "never",
        }
    }
}

impl std::str::FromStr for ApprovalPolicy {
    type Err = HarnessError;

    /// Parses `ask` or `never`; anything else is `INVALID_ARGUMENT`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ask" => Ok(ApprovalPolicy::Ask),
            "never" => Ok(ApprovalPolicy::Never),
            _ => Err(HarnessError::invalid_argument(format!(
                "unknown approval policy \"{s}\"; expected ask or never"
            ))),
        }
    }
}

/// What a call will do if it is allowed: the first thing every question shows, and the
/// `action` of the `approval/asked` event. It is taken from the call's own arguments, so
/// it is what runs, whatever the justification says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A command line (`bash`), run in `workdir` when the call names one (as the model
    /// gave it; a relative one is under the workspace root).
    Command {
        /// The command line, exactly as it will be run.
        command: String,
        /// The call's `workdir` argument, if any.
        workdir: Option<String>,
    },
    /// A file the call changes (`write`, `edit`).
    File {
        /// The path as the model gave it.
        path: String,
        /// The change in short, from the arguments: a `write`'s size and first lines, an
        /// `edit`'s lines out and in (see [`file_change`]).
        change: Option<String>,
        /// Where it leads: against the workspace root, `.` and `..` folded, as the file
        /// tools resolve it (links are followed later, under the sandbox); `None` when not
        /// known or the same as `path`.
        resolved: Option<String>,
    },
    /// Any other call: its arguments.
    Arguments(Value),
}

impl Action {
    /// The form logged in `approval/asked`: `{command, workdir?}`, `{path, resolved?}` or
    /// `{arguments}`.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        match self {
            Action::Command { command, workdir } => {
                m.insert("command".into(), json!(command));
                if let Some(w) = workdir {
                    m.insert("workdir".into(), json!(w));
                }
            }
            Action::File { path, resolved, .. } => {
                m.insert("path".into(), json!(path));
                if let Some(r) = resolved {
                    m.insert("resolved".into(), json!(r));
                }
            }
            Action::Arguments(a) => {
                m.insert("arguments".into(), a.clone());
            }
        }
        Value::Object(m)
    }
}

/// At most this many characters of an [`Action`]'s text (the command line, the workdir,
/// the path, the arguments) are shown, each rendered by [`shown`]. 4096 is a choice: a
/// screen or two of a terminal (52 lines of 80 columns), which a person can still read
/// to the end; a command longer than that is cut with a notice saying how much is not
/// shown and to reject it.
pub const ACTION_SHOWN_CHARS: usize = 4096;

/// At most this many characters of a justification or a reason are shown (a choice: 13
/// lines of 80 columns, so that the words around an action cannot push it off the screen).
pub const REASON_SHOWN_CHARS: usize = 1024;

/// `text` as a question shows it: rendered visible
/// ([`dsh_core::visible::visible_prefix_in_markup`]: no control, invisible or space-like
/// character, no backtick, a backslash doubled), whole when that rendering has
/// at most `max_chars` characters; otherwise its start, then
/// ` … [N more bytes not shown; reject what you cannot read in full]`, N counting the
/// bytes of `text` left out.
///
/// ```
/// use dsh_approval::shown;
/// assert_eq!(shown("make test\x1b[1A", 100), r"make test\x1b[1A");
/// assert_eq!(
///     shown("rm -rf /", 3),
///     "rm  … [5 more bytes not shown; reject what you cannot read in full]"
/// );
/// ```
pub fn shown(text: &str, max_chars: usize) -> String {
    let (mut out, covered) = dsh_core::visible::visible_prefix_in_markup(text, max_chars);
    if covered < text.len() {
        out.push_str(&format!(
            " … [{} more bytes not shown; reject what you cannot read in full]",
            text.len() - covered
        ));
    }
    out
}

/// How a human (or a policy) answered an approval request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApprovalOutcome {
    /// Allowed, for this one call.
    AllowedOnce,
    /// Refused.
    Rejected,
    /// Cancelled before an answer.
    Cancelled,
    /// Nobody can answer.
    Unavailable,
    /// Asked, but no answer came before the question's time limit.
    Expired,
}

impl ApprovalOutcome {
    /// `allowed-once`, `rejected`, `cancelled`, `unavailable` or `expired`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ApprovalOutcome::AllowedOnce => "allowed-once",
            ApprovalOutcome::Rejected => "rejected",
            ApprovalOutcome::Cancelled => "cancelled",
            ApprovalOutcome::Unavailable => "unavailable",
            ApprovalOutcome::Expired => "expired",
        }
    }
}

/// What is being asked.
#[derive(Clone, Debug, Default)]
pub struct ApprovalRequest {
    /// The tool that asks (non-empty).
    pub tool_name: String,
    /// The call that asks.
    pub call_id: Option<String>,
    /// What the call will do if allowed (logged as `action`).
    pub action: Option<Action>,
    /// The wider sandbox mode an escalation asks for, by its name (`workspace-write`);
    /// `None` for other questions.
    pub requested: Option<String>,
    /// The mode the call has without the escalation, by its name; `None` for other
    /// questions.
    pub current: Option<String>,
    /// The agent's own words for why (an escalation's `justification`): shown labelled as
    /// the agent's, never as dsh's. Not logged apart: an escalation's `reason` holds it.
    pub justification: Option<String>,
    /// Why, in one honest sentence (what, why, which wider mode), as logged. Shown when no
    /// wider mode is `requested` (an escalation's reason repeats the mode and the
    /// justification, which are shown apart).
    pub reason: Option<String>,
    /// Cancels the request.
    pub cancel: Option<CancelToken>,
}

/// A request as an answerer sees it. Every text in it may hold what the model wrote: an
/// answerer that shows it to a person shows it through [`shown`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    /// The request id, as logged.
    pub id: String,
    /// The session.
    pub session: String,
    /// The tool that asks.
    pub tool_name: String,
    /// The call that asks.
    pub call_id: Option<String>,
    /// What the call will do if allowed.
    pub action: Option<Action>,
    /// The wider sandbox mode asked for, by its name, if any.
    pub requested: Option<String>,
    /// The mode the call has without the escalation, by its name, if any.
    pub current: Option<String>,
    /// The agent's own words for why, if any.
    pub justification: Option<String>,
    /// Why, as logged.
    pub reason: Option<String>,
}

/// Someone who can answer approval requests. Return `None` to let the next answerer
/// decide.
#[async_trait]
pub trait Answerer: Send + Sync {
    /// The answer to `question`, or `None` to pass.
    ///
    /// # Cancel safety
    /// Dropping the future ends the question for dsh: an answer that comes later is
    /// discarded. The question itself may stay posed: the terminal answerer's read of
    /// `/dev/tty` goes on, on a blocking thread, until a line is entered, and a question
    /// already sent to an MCP client stays with it.
    async fn answer(&self, question: &Question) -> Option<ApprovalOutcome>;
}

/// The approval service. See the [crate docs](crate).
pub struct ApprovalService {
    default_policy: ApprovalPolicy,
    answerers: RwLock<Vec<Arc<dyn Answerer>>>,
}

impl std::fmt::Debug for ApprovalService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalService")
            .field("default_policy", &self.default_policy)
            .finish_non_exhaustive()
    }
}

impl ApprovalService {
    /// A service whose sessions default to `policy`, with no answerer yet.
    pub fn new(policy: ApprovalPolicy) -> ApprovalService {
        ApprovalService {
            default_policy: policy,
            answerers: RwLock::new(Vec::new()),
        }
    }

    /// Whether an answerer is installed: a question can reach someone (a person, or a
    /// script answering for one). Without one every question is `unavailable`.
    pub fn has_answerer(&self) -> bool {
        !self
            .answerers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Adds an answerer after the ones already there.
    pub fn add_answerer(&self, answerer: Arc<dyn Answerer>) {
        self.answerers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(answerer);
    }

    /// The session's policy: its last `approval/policy` event, else the default.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn effective_policy(&self, session: &dyn Journal) -> ApprovalPolicy {
        let logged = session.last_of(EventKind::ApprovalPolicy).await;
        match logged.map(|e| e.record()) {
            Some(Ok(Record::ApprovalPolicy { policy })) => match policy.whole() {
                Some("never") => ApprovalPolicy::Never,
                Some(_) => ApprovalPolicy::Ask,
                None => self.default_policy,
            },
            _ => self.default_policy,
        }
    }

    /// Sets the session's policy: appends one `approval/policy` event unless it already is
    /// `policy`. Returns whether it changed.
    ///
    /// # Errors
    /// The journal's errors.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped during the append, the `approval/policy` event may or may
    /// not be logged (see [`Journal::append`]).
    pub async fn set_policy(
        &self,
        session: &dyn Journal,
        policy: ApprovalPolicy,
    ) -> Result<bool, HarnessError> {
        if self.effective_policy(session).await == policy {
            return Ok(false);
        }
        session
            .append(Record::ApprovalPolicy {
                policy: policy.as_str().into(),
            })
            .await?;
        Ok(true)
    }

    /// Asks for approval. See the [crate docs](crate).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` outside an open turn (nothing logged) or for an empty tool name;
    /// the journal's errors (then no decision is returned).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after `approval/asked` is logged, the question never gets
    /// its `approval/decided`, and the answerers' task goes on to its end (its answer is
    /// discarded). Cancel `request.cancel` instead: the request then ends `cancelled`,
    /// logged.
    pub async fn request(
        &self,
        session: &dyn Journal,
        request: ApprovalRequest,
    ) -> Result<ApprovalOutcome, HarnessError> {
        if request.tool_name.is_empty() {
            return Err(HarnessError::invalid_argument(
                "approval: the tool name must not be empty",
            ));
        }
        if session.open_turn().await.is_none() {
            return Err(HarnessError::invalid_argument(format!(
                "approval: session \"{}\" is outside an open turn; approvals are only asked inside a turn",
                session.session_id()
            )));
        }
        let id = dsh_core::spill::random_hex(32);
        session
            .append(Record::ApprovalAsked {
                id: id.as_str().into(),
                tool_name: request.tool_name.as_str().into(),
                call_id: request.call_id.as_deref().map(Logged::from),
                action: request.action.as_ref().map(Action::to_json),
                reason: request.reason.as_deref().map(Logged::from),
            })
            .await?;
        let question = Question {
            id: id.clone(),
            session: session.session_id().to_string(),
            tool_name: request.tool_name,
            call_id: request.call_id,
            action: request.action,
            requested: request.requested,
            current: request.current,
            justification: request.justification,
            reason: request.reason,
        };
        let outcome = self.decide(session, question, request.cancel).await;
        session
            .append(Record::ApprovalDecided {
                id: id.into(),
                outcome: outcome.as_str().into(),
            })
            .await?;
        Ok(outcome)
    }

    async fn decide(
        &self,
        session: &dyn Journal,
        question: Question,
        cancel: Option<CancelToken>,
    ) -> ApprovalOutcome {
        if cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            return ApprovalOutcome::Cancelled;
        }
        if self.effective_policy(session).await == ApprovalPolicy::Never {
            return ApprovalOutcome::Rejected;
        }
        let answerers = self
            .answerers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // On its own task: a panicking answerer is `unavailable`, and a cancel can drop a
        // late answer without waiting for it.
        let task = tokio::spawn(async move {
            for a in answerers {
                if let Some(outcome) = a.answer(&question).await {
                    return outcome;
                }
            }
            ApprovalOutcome::Unavailable
        });
        let abort = task.abort_handle();
        let outcome = match cancel {
            // An answer that is there already wins over a cancel that arrived with it.
            Some(cancel) => tokio::select! {
                biased;
                joined = task => joined.unwrap_or(ApprovalOutcome::Unavailable),
                () = cancel.cancelled() => ApprovalOutcome::Cancelled,
            },
            None => task.await.unwrap_or(ApprovalOutcome::Unavailable),
        };
        abort.abort();
        outcome
    }
}

/// Answers from a script, in order, and records every question it saw; passes (`None`)
/// once the script is used up.
#[derive(Debug, Default)]
pub struct ScriptedAnswerer {
    script: Mutex<VecDeque<ApprovalOutcome>>,
    seen: Mutex<Vec<Question>>,
}

impl ScriptedAnswerer {
    /// An answerer that gives `outcomes` in order.
    pub fn new(outcomes: impl IntoIterator<Item = ApprovalOutcome>) -> ScriptedAnswerer {
        ScriptedAnswerer {
            script: Mutex::new(outcomes.into_iter().collect()),
            seen: Mutex::new(Vec::new()),
        }
    }

    /// The questions asked so far.
    pub fn questions(&self) -> Vec<Question> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

#[async_trait]
impl Answerer for ScriptedAnswerer {
    async fn answer(&self, question: &Question) -> Option<ApprovalOutcome> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(question.clone());
        self.script
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }
}

/// At most this many lines of each side of a [`file_change`] are shown.
const CHANGE_LINES: usize = 6;

/// At most this many characters of each line of a [`file_change`] are shown.
const CHANGE_LINE_CHARS: usize = 120;

/// A file change in short, as a question shows it: for a `write` (`old` is `None`) its
/// size and first lines as `+ …`; for an `edit`, the lines taken out as `- …` and put in
/// as `+ …`. At most six lines a side, each ending with how many more there are.
///
/// ```
/// use dsh_approval::file_change;
/// assert_eq!(file_change(None, "a\nb\n"), "writes 4 bytes:\n+ a\n+ b");
/// assert_eq!(file_change(Some("x = 1"), "x = 2"), "- x = 1\n+ x = 2");
/// ```
pub fn file_change(old: Option<&str>, new: &str) -> String {
    fn side(out: &mut Vec<String>, sign: char, text: &str) {
        let lines: Vec<&str> = text.lines().collect();
        for line in lines.iter().take(CHANGE_LINES) {
            // A line is shown up to 120 characters, so the change cannot push the rest of
            // the question (the asked mode) out of a dialog.
            let cut: String = line.chars().take(CHANGE_LINE_CHARS).collect();
            let more = if cut.len() < line.len() { " …" } else { "" };
            out.push(format!("{sign} {cut}{more}"));
        }
        if lines.len() > CHANGE_LINES {
            out.push(format!(
                "{sign} … ({} more lines)",
                lines.len() - CHANGE_LINES
            ));
        }
    }
    let mut out = Vec::new();
    match old {
        None => {
            out.push(format!("writes {} bytes:", new.len()));
            side(&mut out, '+', new);
        }
        Some(old) => {
            side(&mut out, '-', old);
            side(&mut out, '+', new);
        }
    }
    out.join("\n")
}

/// What an escalation asks, in words for the person deciding: from the call's `current`
/// mode (when known) to `requested`, for this one call, and what `requested` means
/// (`danger-full-access`: no sandbox at all). A name that is no mode is shown as given.
///
/// ```
/// use dsh_approval::asked_mode;
/// assert!(asked_mode(Some("read-only"), "danger-full-access")
///     .starts_with("from read-only to danger-full-access, for this one call (no sandbox at all"));
/// ```
pub fn asked_mode(current: Option<&str>, requested: &str) -> String {
    let from = current.map(|c| format!("from {c} ")).unwrap_or_default();
    match requested.parse::<dsh_sandbox::SandboxMode>() {
        Ok(mode) => format!("{from}to {mode}, for this one call ({})", mode.meaning()),
        Err(_) => format!("{from}to {requested}, for this one call"),
    }
}
