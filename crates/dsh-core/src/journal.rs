//! The session journal: the events a session records, and the trait seams write them
//! through.
//!
//! Seams that must leave an audit trail (the approval service, the sandbox policy, the
//! tools pipeline) write [`Event`]s through a [`Journal`], the view of one session they
//! need; `dsh-store` provides the durable implementation.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::{HarnessError, SessionId};

/// The kinds of events the execution layer writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `turn/start {turn}`.
    TurnStart,
    /// `turn/end {turn, reason: {kind}}`.
    TurnEnd,
    /// `tool/call {turn, callId, name, arguments}`.
    ToolCall,
    /// `tool/result {turn, callId, name, text, error?: {name, code}}`.
    ToolResult,
    /// `sandbox/mode {mode}`.
    SandboxMode,
    /// `approval/policy {policy}`.
    ApprovalPolicy,
    /// `approval/asked {id, toolName, callId?, reason?}`.
    ApprovalAsked,
    /// `approval/decided {id, outcome}`.
    ApprovalDecided,
    /// `log/capped {capBytes, loggedBytes}`: the session's log reached its size cap; every
    /// later event is summarised (ids, outcome and sizes; long text as its length and
    /// digest). Written once, before the first summarised event.
    LogCapped,
    /// `sandbox/new-git-dir {callId?, paths}`: a confined command made git dirs, pointer
    /// files, hooks folders or other paths the host's tools run or read by themselves,
    /// which it could write while it ran; every later command gets them protected.
    SandboxNewGitDir,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [EventKind; 10] = [
        EventKind::TurnStart,
        EventKind::TurnEnd,
        EventKind::ToolCall,
        EventKind::ToolResult,
        EventKind::SandboxMode,
        EventKind::ApprovalPolicy,
        EventKind::ApprovalAsked,
        EventKind::ApprovalDecided,
        EventKind::LogCapped,
        EventKind::SandboxNewGitDir,
    ];

    /// The stable type name (`turn/start`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            EventKind::TurnStart => "turn/start",
            EventKind::TurnEnd => "turn/end",
            EventKind::ToolCall => "tool/call",
            EventKind::ToolResult => "tool/result",
            EventKind::SandboxMode => "sandbox/mode",
            EventKind::ApprovalPolicy => "approval/policy",
            EventKind::ApprovalAsked => "approval/asked",
            EventKind::ApprovalDecided => "approval/decided",
            EventKind::LogCapped => "log/capped",
            EventKind::SandboxNewGitDir => "sandbox/new-git-dir",
        }
    }

    /// The kind named `s`.
    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// One logged event.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// The session it belongs to.
    pub session: SessionId,
    /// Its position: 1, 2, 3, … with no gap.
    pub seq: u64,
    /// When it was appended, milliseconds since the Unix epoch.
    pub time_ms: u64,
    /// What it is.
    pub kind: EventKind,
    /// Its payload, as logged: the session log keeps a long string as its head, length
    /// and digest, and past its size cap summarises the payload (dsh-store's
    /// `log_bounds` module has the shapes).
    pub data: Value,
}

impl Event {
    /// The event as one JSON object: `{session, seq, time, type, data}`.
    pub fn to_json(&self) -> Value {
        json!({
            "session": self.session.as_str(),
            "seq": self.seq,
            "time": self.time_ms,
            "type": self.kind.as_str(),
            "data": self.data,
        })
    }
}

/// One session's log, as the seams that write to it see it.
#[async_trait]
pub trait Journal: Send + Sync {
    /// The session.
    fn session_id(&self) -> &SessionId;

    /// Appends an event and returns it once it is durable.
    ///
    /// # Errors
    /// The storage's errors; then nothing was appended.
    async fn append(&self, kind: EventKind, data: Value) -> Result<Event, HarnessError>;

    /// The turn open now, if any.
    async fn open_turn(&self) -> Option<u64>;

    /// The last event of `kind`, if any.
    async fn last_of(&self, kind: EventKind) -> Option<Event>;
}
