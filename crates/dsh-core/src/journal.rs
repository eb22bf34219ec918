//! The session journal: the events a session records, and the trait seams write them
//! through.
//!
//! Seams that must leave an audit trail (the approval service, the sandbox policy, the
//! tools pipeline) append typed [`Record`]s through a [`Journal`], the view of one
//! session they need; `dsh-store` provides the durable implementation, which stores each
//! as an [`Event`] and keeps the log bounded. Readers get the record back with
//! [`Event::record`]: typed on the way in and out, with the log's bounds in the types
//! (a long string may come back as its head and digest, see [`Logged`]).

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::{ErrorCode, HarnessError, SessionId};

mod logged;
mod record;

pub use logged::Logged;
pub use record::{
    ErrorRecord, ImageRecord, Quarantined, Record, SeenRecord, ToolResultRecord, TurnEndReason,
};

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
    /// `sandbox/checked {callId?, paths, quarantined}`: the check after a call found git
    /// dirs, pointer files, hooks folders, tool settings or other paths the host's tools
    /// run or read by themselves, which the call's command made; every later command gets
    /// them protected. Parsed from its old name, `sandbox/new-git-dir`, too.
    SandboxChecked,
    /// `job/notice {jobId, text}`: a background job ended unseen and its owner was told,
    /// with this text.
    JobNotice,
    /// `sandbox/unsettled {callId?, text, quarantined}`: the check after a call could not
    /// set aside what the host's tools would run; workspace-write is refused there until
    /// the user deals with it, and the user was told (not only the model).
    SandboxUnsettled,
}

impl EventKind {
    /// Every kind.
    pub const ALL: [EventKind; 12] = [
        EventKind::TurnStart,
        EventKind::TurnEnd,
        EventKind::ToolCall,
        EventKind::ToolResult,
        EventKind::SandboxMode,
        EventKind::ApprovalPolicy,
        EventKind::ApprovalAsked,
        EventKind::ApprovalDecided,
        EventKind::LogCapped,
        EventKind::SandboxChecked,
        EventKind::JobNotice,
        EventKind::SandboxUnsettled,
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
            EventKind::SandboxChecked => "sandbox/checked",
            EventKind::JobNotice => "job/notice",
            EventKind::SandboxUnsettled => "sandbox/unsettled",
        }
    }

    /// The kind named `s` (its name now, or a name it had before).
    pub fn parse(s: &str) -> Option<EventKind> {
        if s == "sandbox/new-git-dir" {
            return Some(EventKind::SandboxChecked);
        }
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
    /// `log_bounds` module has the shapes). Read it typed with [`record`](Self::record).
    pub data: Value,
}

impl Event {
    /// What the event says, typed.
    ///
    /// # Errors
    /// `STORAGE_MALFORMED` when the data does not fit its kind (a log written by hand, or
    /// damaged).
    pub fn record(&self) -> Result<Record, HarnessError> {
        Record::from_data(self.kind, &self.data).map_err(|e| {
            HarnessError::new(
                ErrorCode::StorageMalformed,
                format!(
                    "session \"{}\": event {} ({}) cannot be read: {e}; the session log was \
                     changed by something other than dsh",
                    self.session,
                    self.seq,
                    self.kind.as_str()
                ),
            )
        })
    }

    /// The size the data had before the log summarised it, if it did.
    pub fn summarised_bytes(&self) -> Option<u64> {
        self.data.get("summarised")?.get("bytes")?.as_u64()
    }

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

    /// Appends `record` as the next event and returns the event once it is durable (with
    /// the data as logged, within the log's bounds).
    ///
    /// # Errors
    /// The storage's errors; then nothing was appended.
    ///
    /// # Cancel safety
    /// Not cancel safe: an append dropped after it began may still be stored, with no
    /// event returned for it (the session log then gives the next append its sequence
    /// number, replacing it).
    async fn append(&self, record: Record) -> Result<Event, HarnessError>;

    /// The turn open now, if any.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn open_turn(&self) -> Option<u64>;

    /// The last event of `kind`, if any.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn last_of(&self, kind: EventKind) -> Option<Event>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_whose_data_does_not_fit_its_kind_is_storage_malformed() {
        let e = Event {
            session: SessionId::new("s"),
            seq: 4,
            time_ms: 0,
            kind: EventKind::TurnStart,
            data: json!({"turn": "one"}),
        };
        let err = e.record().expect_err("a string turn");
        assert_eq!(err.code(), ErrorCode::StorageMalformed);
        assert!(
            err.message().contains("event 4 (turn/start)"),
            "{}",
            err.message()
        );
        let ok = Event {
            data: json!({"turn": 1, "summarised": {"bytes": 90}}),
            ..e
        };
        assert_eq!(ok.record().expect("fits"), Record::TurnStart { turn: 1 });
        assert_eq!(ok.summarised_bytes(), Some(90));
    }
}
