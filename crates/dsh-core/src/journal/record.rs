//! What each kind of event says, typed: producers append a [`Record`], readers get one back
//! from [`Event::record`](super::Event::record).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{EventKind, Logged};

/// What one event says. The session log stores it as `{type, data}`, `data` being the
/// variant's fields in camelCase; the log may cut its long strings and, past its cap,
/// summarise it (see [`Logged`]), so a field a summary can drop reads as
/// [`Logged::Dropped`], an empty list or `None`, never as an error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all_fields = "camelCase")]
pub enum Record {
    /// `turn/start {turn}`.
    #[serde(rename = "turn/start")]
    TurnStart {
        /// The turn's number: 1, 2, 3, … in the session.
        turn: u64,
    },
    /// `turn/end {turn, reason: {kind}}`.
    #[serde(rename = "turn/end")]
    TurnEnd {
        /// The turn that ended.
        turn: u64,
        /// Why it ended.
        #[serde(default)]
        reason: TurnEndReason,
    },
    /// `tool/call {turn, callId, name, arguments}`: a call about to run.
    #[serde(rename = "tool/call")]
    ToolCall {
        /// The open turn, if any (logged as `null` otherwise).
        #[serde(default)]
        turn: Option<u64>,
        /// The call's id.
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        call_id: Logged,
        /// The tool's name.
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        name: Logged,
        /// Its arguments as JSON text.
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        arguments: Logged,
    },
    /// `tool/result {turn, callId, name, text, isError, error?, meta?, image?}`: how a
    /// call ended.
    #[serde(rename = "tool/result")]
    ToolResult(ToolResultRecord),
    /// `sandbox/mode {mode}`: the session's own sandbox mode from now on.
    #[serde(rename = "sandbox/mode")]
    SandboxMode {
        /// The mode's name (`read-only`, …).
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        mode: Logged,
    },
    /// `approval/policy {policy}`: the session's approval policy from now on.
    #[serde(rename = "approval/policy")]
    ApprovalPolicy {
        /// The policy's name (`ask`, `never`).
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        policy: Logged,
    },
    /// `approval/asked {id, toolName, callId?, action?, reason?}`.
    #[serde(rename = "approval/asked")]
    ApprovalAsked {
        /// The question's id, which its decision repeats.
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        id: Logged,
        /// The tool that asked.
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        tool_name: Logged,
        /// The call that asked, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<Logged>,
        /// What would be done, as the approval service describes it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        action: Option<Value>,
        /// Why it is asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<Logged>,
    },
    /// `approval/decided {id, outcome}`.
    #[serde(rename = "approval/decided")]
    ApprovalDecided {
        /// The question's id.
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        id: Logged,
        /// The outcome's name (`approved`, `rejected`, …).
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        outcome: Logged,
    },
    /// `log/capped {capBytes, loggedBytes}`: the session's log reached its size cap;
    /// every later event is summarised. Written by the log itself, once.
    #[serde(rename = "log/capped")]
    LogCapped {
        /// The cap.
        cap_bytes: u64,
        /// The size of the events stored before this one.
        logged_bytes: u64,
    },
    /// `sandbox/checked {callId?, paths, quarantined}`: the check after a call found git
    /// dirs, pointer files, hooks folders, tool settings or other paths the host's tools
    /// run or read by themselves, which the call's command made; every later command gets
    /// them protected. Logs written before the event had this name call it
    /// `sandbox/new-git-dir`, which is still read.
    #[serde(rename = "sandbox/checked", alias = "sandbox/new-git-dir")]
    SandboxChecked {
        /// The call whose command made them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<Logged>,
        /// The paths, as the host sees them.
        #[serde(default)]
        paths: Vec<Logged>,
        /// What was set aside for the user to review.
        #[serde(default)]
        quarantined: Vec<Quarantined>,
    },
    /// `job/notice {jobId, text}`: a background job ended unseen and its owner was told.
    #[serde(rename = "job/notice")]
    JobNotice {
        /// The job.
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        job_id: Logged,
        /// The notice, as sent.
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        text: Logged,
    },
    /// `sandbox/unsettled {callId?, text, quarantined}`: the check after a call could not
    /// set aside what the host's tools would run, and the user was told this text.
    #[serde(rename = "sandbox/unsettled")]
    SandboxUnsettled {
        /// The call whose command made them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<Logged>,
        /// What the user was told.
        #[serde(default, skip_serializing_if = "Logged::is_dropped")]
        text: Logged,
        /// What was not set aside.
        #[serde(default)]
        quarantined: Vec<Quarantined>,
    },
}

/// Why a turn ended: `{kind}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TurnEndReason {
    /// `completed`, `aborted`, `error`, `interrupted` (a crash left it open), ….
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub kind: Logged,
}

/// The data of a [`Record::ToolResult`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultRecord {
    /// The turn the call ran in, if any (logged as `null` otherwise).
    #[serde(default)]
    pub turn: Option<u64>,
    /// The call's id.
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub call_id: Logged,
    /// The tool's name.
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub name: Logged,
    /// The text the model got.
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub text: Logged,
    /// Whether it is an error result.
    #[serde(default)]
    pub is_error: bool,
    /// The error's name and code, for an error result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorRecord>,
    /// The facts the tool records for later calls (a file's `key` and `version`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Value>,
    /// The image the result carried, as its type and size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ImageRecord>,
    /// The file the call last saw, as it was then: what the read-before-edit memory of a
    /// session resumed from its log is seeded from (the newest wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<Box<SeenRecord>>,
    /// The events this result was derived from: the call a crash interrupted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_event_seqs: Vec<u64>,
}

impl ToolResultRecord {
    /// Whether the call failed: an error result, or one whose error survived a summary.
    pub fn failed(&self) -> bool {
        self.is_error || self.error.is_some()
    }
}

/// An error result's `{name, code}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorRecord {
    /// The error's name (`ToolOutcomeUnknownError`, …).
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub name: Logged,
    /// Its stable code (`INVALID_ARGUMENT`, …).
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub code: Logged,
}

/// A file a call saw, logged as `{key, version}`: its stable key (the canonical path) and
/// its version token then. A key the log cut (longer than the log keeps whole) seeds
/// nothing: that file must be read again.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SeenRecord {
    /// The file's stable key.
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub key: Logged,
    /// Its version token (opaque; compare, never parse).
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub version: Logged,
}

/// An image in a result, logged as `{mimeType, bytes}`, never its data.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageRecord {
    /// Its MIME type.
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub mime_type: Logged,
    /// The size of its data.
    #[serde(default)]
    pub bytes: u64,
}

/// One path a [`Record::SandboxChecked`] set aside, or tried to:
/// `{path, movedTo, what, setAside}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Quarantined {
    /// Where it was.
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub path: Logged,
    /// Where it went (`null` when it could not be moved).
    #[serde(default)]
    pub moved_to: Option<Logged>,
    /// What it is (`a hooks folder`, …).
    #[serde(default, skip_serializing_if = "Logged::is_dropped")]
    pub what: Logged,
    /// Whether it was set aside.
    #[serde(default)]
    pub set_aside: bool,
}

impl Record {
    /// Its kind.
    pub const fn kind(&self) -> EventKind {
        match self {
            Record::TurnStart { .. } => EventKind::TurnStart,
            Record::TurnEnd { .. } => EventKind::TurnEnd,
            Record::ToolCall { .. } => EventKind::ToolCall,
            Record::ToolResult(_) => EventKind::ToolResult,
            Record::SandboxMode { .. } => EventKind::SandboxMode,
            Record::ApprovalPolicy { .. } => EventKind::ApprovalPolicy,
            Record::ApprovalAsked { .. } => EventKind::ApprovalAsked,
            Record::ApprovalDecided { .. } => EventKind::ApprovalDecided,
            Record::LogCapped { .. } => EventKind::LogCapped,
            Record::SandboxChecked { .. } => EventKind::SandboxChecked,
            Record::JobNotice { .. } => EventKind::JobNotice,
            Record::SandboxUnsettled { .. } => EventKind::SandboxUnsettled,
        }
    }

    /// Its data as the log stores it before any bound: the `data` of `{type, data}`.
    pub fn data(&self) -> Value {
        match serde_json::to_value(self) {
            Ok(Value::Object(mut m)) => m.remove("data").unwrap_or(Value::Null),
            // Every field serialises to JSON (strings, numbers, values).
            _ => Value::Null,
        }
    }

    /// The record of `kind` whose data, as logged, is `data`.
    ///
    /// # Errors
    /// What does not fit the kind (a number where a string belongs, a missing turn).
    pub fn from_data(kind: EventKind, data: &Value) -> Result<Record, serde_json::Error> {
        let mut whole = serde_json::Map::with_capacity(2);
        whole.insert("type".into(), Value::String(kind.as_str().to_owned()));
        whole.insert("data".into(), data.clone());
        serde_json::from_value(Value::Object(whole))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // A log written before the event was renamed is still read: the old name parses to
    // the kind, and the record under it to the record.
    #[test]
    fn the_old_name_of_the_check_event_is_still_read() {
        assert_eq!(
            EventKind::parse("sandbox/new-git-dir"),
            Some(EventKind::SandboxChecked)
        );
        assert_eq!(EventKind::SandboxChecked.as_str(), "sandbox/checked");
        let old: Record = serde_json::from_value(json!({
            "type": "sandbox/new-git-dir",
            "data": {"callId": "c1", "paths": ["/ws/sub/.git"], "quarantined": []},
        }))
        .expect("old record");
        assert_eq!(old.kind(), EventKind::SandboxChecked);
        let new = serde_json::to_value(&old).expect("json");
        assert_eq!(new["type"], "sandbox/checked");
    }

    #[test]
    fn every_kind_has_the_record_of_its_name() {
        let records = [
            Record::TurnStart { turn: 1 },
            Record::TurnEnd {
                turn: 1,
                reason: TurnEndReason {
                    kind: "completed".into(),
                },
            },
            Record::ToolCall {
                turn: None,
                call_id: "c".into(),
                name: "bash".into(),
                arguments: "{}".into(),
            },
            Record::ToolResult(ToolResultRecord::default()),
            Record::SandboxMode {
                mode: "read-only".into(),
            },
            Record::ApprovalPolicy {
                policy: "ask".into(),
            },
            Record::ApprovalAsked {
                id: "q".into(),
                tool_name: "bash".into(),
                call_id: None,
                action: None,
                reason: None,
            },
            Record::ApprovalDecided {
                id: "q".into(),
                outcome: "approved".into(),
            },
            Record::LogCapped {
                cap_bytes: 1,
                logged_bytes: 2,
            },
            Record::SandboxChecked {
                call_id: None,
                paths: vec![],
                quarantined: vec![],
            },
            Record::JobNotice {
                job_id: "bash-1".into(),
                text: "background job bash-1 (bash: true) finished".into(),
            },
            Record::SandboxUnsettled {
                call_id: None,
                text: "dsh: could not set aside x".into(),
                quarantined: vec![],
            },
        ];
        assert_eq!(records.len(), EventKind::ALL.len());
        for (r, kind) in records.iter().zip(EventKind::ALL) {
            assert_eq!(r.kind(), kind);
            let v = serde_json::to_value(r).expect("serialises");
            assert_eq!(v["type"], json!(kind.as_str()));
            assert_eq!(Record::from_data(kind, &r.data()).expect("reads"), *r);
        }
    }

    #[test]
    fn the_data_keeps_the_logged_shapes() {
        let call = Record::ToolCall {
            turn: None,
            call_id: "mcp-1".into(),
            name: "read".into(),
            arguments: "{\"path\":\"a\"}".into(),
        };
        assert_eq!(
            call.data(),
            json!({"turn": null, "callId": "mcp-1", "name": "read", "arguments": "{\"path\":\"a\"}"})
        );
        let asked = Record::ApprovalAsked {
            id: "q".into(),
            tool_name: "bash".into(),
            call_id: Some("c".into()),
            action: None,
            reason: None,
        };
        assert_eq!(
            asked.data(),
            json!({"id": "q", "toolName": "bash", "callId": "c"})
        );
        let end = Record::TurnEnd {
            turn: 2,
            reason: TurnEndReason {
                kind: "aborted".into(),
            },
        };
        assert_eq!(
            end.data(),
            json!({"turn": 2, "reason": {"kind": "aborted"}})
        );
    }

    #[test]
    fn a_summary_reads_with_what_it_kept() {
        // A summary too large keeps top-level numbers, flags and `error`; cut text stays
        // as its length and digest.
        let r = Record::from_data(
            EventKind::ToolResult,
            &json!({
                "turn": 3, "callId": "c", "isError": true,
                "error": {"name": "X", "code": "E"},
                "text": {"bytes": 9000, "sha256": "ab"},
                "summarised": {"bytes": 12000},
            }),
        )
        .expect("reads");
        let Record::ToolResult(r) = r else {
            panic!("{r:?}")
        };
        assert!(r.failed());
        assert_eq!(r.name, Logged::Dropped);
        assert_eq!(r.text.text(), "");
        assert_eq!(r.error.expect("kept").code.whole(), Some("E"));
    }

    #[test]
    fn data_of_the_wrong_shape_is_an_error() {
        assert!(Record::from_data(EventKind::TurnStart, &json!({})).is_err());
        assert!(Record::from_data(EventKind::SandboxMode, &json!({"mode": 3})).is_err());
    }
}
