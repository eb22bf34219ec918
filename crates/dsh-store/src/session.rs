//! The session log: what happened in each session, append-only, in order.
//!
//! A [`Session`] is an ordered list of [`Event`]s (`turn/start`, `tool/call`,
//! `approval/asked`, …; [`EventKind`]), each with the session id, a sequence number that
//! only grows, the time, and a JSON payload. [`Session::append`] returns once the event is
//! durable (see the provider), so an event is never reported that a crash could lose.
//! Each session is one storage unit (`s_<id>`, table `events`); the [`SessionLog`] index
//! unit lists them with their header (id, working directory, creation time).
//!
//! # Bounds
//! A session's log is bounded whatever the events carry: a string longer than
//! [`LOG_HEAD_BYTES`](crate::log_bounds::LOG_HEAD_BYTES) is logged as its head, its length
//! and its SHA-256, and once a session's stored events reach its cap
//! ([`DEFAULT_LOG_CAP_BYTES`] by default, see [`SessionLog::with_cap`]) a `log/capped`
//! event is written and every later event is summarised: ids, outcome and sizes. The
//! exact shapes are in [`log_bounds`](crate::log_bounds).
//!
//! # Crash recovery
//! A torn final write is discarded by the provider; nothing committed is ever rewritten.
//! A turn left open by a crash is kept and closed when the session is opened again: every
//! `tool/call` of that turn without a `tool/result` gets one, an error with code
//! `TOOL_OUTCOME_UNKNOWN` (the call may or may not have had its effect), then a
//! `turn/end` with reason `interrupted`. These synthetic events reuse the time of the last
//! event. A balanced log gets none.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use dsh_core::journal::Journal;
use dsh_core::journal::{ErrorRecord, Logged, Record, ToolResultRecord, TurnEndReason};
pub use dsh_core::journal::{Event, EventKind};
use dsh_core::{ErrorCode, HarnessError, SessionId};
use serde_json::{json, Value};

use crate::log_bounds::{bound, json_len, summarise, DEFAULT_LOG_CAP_BYTES};
use crate::{Storage, Unit, UnitSpec};

/// What a session is: its id, the working directory it was created in (its workspace
/// root), and when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionHeader {
    /// Its id.
    pub id: SessionId,
    /// Its working directory, as given at creation.
    pub cwd: PathBuf,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: u64,
}

const INDEX: &str = "sessions";
const EVENTS: &str = "events";

/// Every session of one store. See the [module docs](self).
pub struct SessionLog {
    storage: Arc<dyn Storage>,
    index: Arc<dyn Unit>,
    open: Mutex<HashMap<SessionId, Weak<Session>>>,
    /// Bytes of stored events after which a session's events are summarised.
    cap_bytes: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The longest session id, in bytes.
const ID_MAX: usize = 64;

/// Session ids: the names people type: ASCII letters, digits, `-`, `_` and `.`, not
/// starting with `-` or `.`, at most 64 characters (`fix-login-bug`, `PR.1234`).
fn check_id(id: &str) -> Result<(), HarnessError> {
    let ok = !id.is_empty()
        && id.len() <= ID_MAX
        && !id.starts_with(['-', '.'])
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(HarnessError::invalid_argument(format!(
            "session id {:?} is not one: use ASCII letters, digits, '-', '_' and '.', not \
             starting with '-' or '.', at most {ID_MAX} characters (e.g. fix-login-bug)",
            dsh_core::visible::visible(id)
        )))
    }
}

/// The storage unit of session `id`. Ids of the first form (`[a-z0-9][a-z0-9_]*`) keep the
/// unit they always had, `s_<id>`; any other is `x_` and the id with each byte outside
/// `[a-z0-9]` written `_` + two hex digits: one unit per id, different ids never sharing
/// one (even where file names ignore case).
fn unit_name(id: &str) -> String {
    let first_form = id.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_form {
        return format!("s_{id}");
    }
    let mut name = String::from("x_");
    for b in id.bytes() {
        if b.is_ascii_lowercase() || b.is_ascii_digit() {
            name.push(char::from(b));
        } else {
            name.push_str(&format!("_{b:02x}"));
        }
    }
    name
}

/// Every stored event of session `id`, in order.
async fn load_events(id: &SessionId, unit: &dyn Unit) -> Result<Vec<Event>, HarnessError> {
    let data = unit.load_all().await?;
    let mut events = Vec::new();
    for (key, v) in data.tables.get(EVENTS).into_iter().flatten() {
        events.push(event_from(id, v).ok_or_else(|| {
            HarnessError::new(
                ErrorCode::StorageMalformed,
                format!("session \"{id}\": event {key} cannot be read"),
            )
        })?);
    }
    events.sort_by_key(|e| e.seq);
    Ok(events)
}

fn unit_spec(id: &SessionId) -> UnitSpec {
    UnitSpec {
        name: unit_name(id.as_str()),
        version: 1,
        tables: vec![EVENTS.into()],
        has_global: false,
    }
}

fn header_json(h: &SessionHeader) -> Value {
    json!({"id": h.id.as_str(), "cwd": h.cwd.to_string_lossy(), "created": h.created_ms})
}

fn header_from(v: &Value) -> Option<SessionHeader> {
    Some(SessionHeader {
        id: SessionId::new(v.get("id")?.as_str()?),
        cwd: PathBuf::from(v.get("cwd")?.as_str()?),
        created_ms: v.get("created")?.as_u64()?,
    })
}

impl SessionLog {
    /// The log kept in `storage`, each session capped at [`DEFAULT_LOG_CAP_BYTES`].
    ///
    /// # Errors
    /// The storage's errors opening the index unit.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped while the index unit opens, that unit may stay marked open
    /// in `storage` (see [`Storage::open`]), so a later log on the
    /// same storage fails with `INVALID_ARGUMENT`.
    pub async fn new(storage: Arc<dyn Storage>) -> Result<SessionLog, HarnessError> {
        SessionLog::with_cap(storage, DEFAULT_LOG_CAP_BYTES).await
    }

    /// The log kept in `storage`, where a session whose stored events (their JSON) reach
    /// `cap_bytes` gets a `log/capped` event and has every later event summarised (see
    /// [`log_bounds`](crate::log_bounds)). The cap applies to the sessions this log
    /// creates and opens, old ones included, and never rewrites what is stored; a session
    /// that has its `log/capped` event stays summarised under any cap. Default (with
    /// [`new`](Self::new)): [`DEFAULT_LOG_CAP_BYTES`].
    ///
    /// # Errors
    /// The storage's errors opening the index unit.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped while the index unit opens, that unit may stay marked open
    /// in `storage` (see [`Storage::open`]), so a later log on the
    /// same storage fails with `INVALID_ARGUMENT`.
    pub async fn with_cap(
        storage: Arc<dyn Storage>,
        cap_bytes: u64,
    ) -> Result<SessionLog, HarnessError> {
        let index = storage
            .open(UnitSpec {
                name: INDEX.into(),
                version: 1,
                tables: vec!["headers".into()],
                has_global: false,
            })
            .await?;
        Ok(SessionLog {
            storage,
            index,
            open: Mutex::new(HashMap::new()),
            cap_bytes,
        })
    }

    /// A new session created in `cwd`, with a fresh id.
    ///
    /// # Errors
    /// The storage's errors.
    ///
    /// # Cancel safety
    /// Not cancel safe: as [`create_with_id`](Self::create_with_id), with an id nobody
    /// else knows (a session left behind shows in [`list`](Self::list)).
    pub async fn create(&self, cwd: &Path) -> Result<Arc<Session>, HarnessError> {
        let id = format!("s{}_{}", now_ms(), dsh_core::spill::random_hex(6));
        self.create_with_id(SessionId::new(id), cwd).await
    }

    /// A new session with `id`, created in `cwd`, which its header records resolved
    /// through its links ([`root_of`](dsh_core::path::root_of)): the session's workspace
    /// root, which a link swapped later does not move.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for an id that is not one (ASCII letters, digits, `-`, `_`, `.`;
    /// not starting with `-` or `.`; at most 64 characters) or one that exists;
    /// the storage's errors.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped while the session's unit opens, that unit may stay marked
    /// open in the store (see [`Storage::open`]); dropped while its
    /// header is written, the session may exist, empty, though none was returned.
    pub async fn create_with_id(
        &self,
        id: SessionId,
        cwd: &Path,
    ) -> Result<Arc<Session>, HarnessError> {
        check_id(id.as_str())?;
        if self.header(&id).await?.is_some() {
            return Err(HarnessError::invalid_argument(format!(
                "session \"{id}\" already exists"
            )));
        }
        let header = SessionHeader {
            id: id.clone(),
            // Resolved once, here: the workspace root every later call checks it still
            // leads to (a link swapped later does not move the session).
            cwd: dsh_core::path::root_of(cwd),
            created_ms: now_ms(),
        };
        let unit = self.storage.open(unit_spec(&id)).await?;
        self.index
            .put("headers", id.as_str(), &header_json(&header))
            .await?;
        let session = Arc::new(Session {
            header,
            unit,
            cap_bytes: self.cap_bytes,
            state: tokio::sync::Mutex::new(State::default()),
        });
        self.remember(&session);
        Ok(session)
    }

    /// The session `id`, with a turn a crash left open closed (see the [module
    /// docs](self)). Opening a session that is already open here returns the same one.
    ///
    /// # Errors
    /// `SESSION_NOT_FOUND`; `STORAGE_MALFORMED` for an event that cannot be read; the
    /// storage's errors.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped while the session's unit opens, that unit may stay marked
    /// open in the store, so opening the session again fails with `INVALID_ARGUMENT` (see
    /// [`Storage::open`]). Dropped while a turn a crash left open is
    /// being closed, part of the closing events may be logged; the next open logs the rest.
    pub async fn open(&self, id: &SessionId) -> Result<Arc<Session>, HarnessError> {
        if let Some(s) = self.lock().get(id).and_then(Weak::upgrade) {
            return Ok(s);
        }
        let header = self.header(id).await?.ok_or_else(|| {
            HarnessError::new(
                ErrorCode::SessionNotFound,
                format!("no session \"{id}\"; `dsh session list` shows the sessions"),
            )
        })?;
        let unit = self.storage.open(unit_spec(id)).await?;
        let events = load_events(id, &*unit).await?;
        let session = Arc::new(Session {
            header,
            unit,
            cap_bytes: self.cap_bytes,
            state: tokio::sync::Mutex::new(State::from_events(&events)),
        });
        session.close_interrupted_turn(&events).await?;
        self.remember(&session);
        Ok(session)
    }

    /// The session `id` if it exists, else a new one with that id created in `cwd`.
    ///
    /// # Errors
    /// As [`open`](Self::open) and [`create_with_id`](Self::create_with_id).
    ///
    /// # Cancel safety
    /// Not cancel safe: as [`open`](Self::open) and
    /// [`create_with_id`](Self::create_with_id).
    pub async fn open_or_create(
        &self,
        id: SessionId,
        cwd: &Path,
    ) -> Result<Arc<Session>, HarnessError> {
        match self.open(&id).await {
            Err(e) if e.code() == ErrorCode::SessionNotFound => self.create_with_id(id, cwd).await,
            other => other,
        }
    }

    /// Every session's header, oldest first.
    ///
    /// # Errors
    /// The storage's errors.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn list(&self) -> Result<Vec<SessionHeader>, HarnessError> {
        let data = self.index.load_all().await?;
        let mut out: Vec<SessionHeader> = data
            .tables
            .get("headers")
            .into_iter()
            .flatten()
            .filter_map(|(_, v)| header_from(v))
            .collect();
        out.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(out)
    }

    async fn header(&self, id: &SessionId) -> Result<Option<SessionHeader>, HarnessError> {
        let data = self.index.load_all().await?;
        Ok(data
            .tables
            .get("headers")
            .and_then(|t| t.get(id.as_str()))
            .and_then(header_from))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Weak<Session>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remember(&self, s: &Arc<Session>) {
        let mut open = self.lock();
        open.retain(|_, w| w.strong_count() > 0);
        open.insert(s.header.id.clone(), Arc::downgrade(s));
    }
}

fn event_from(session: &SessionId, v: &Value) -> Option<Event> {
    Some(Event {
        session: session.clone(),
        seq: v.get("seq")?.as_u64()?,
        time_ms: v.get("time")?.as_u64()?,
        kind: EventKind::parse(v.get("type")?.as_str()?)?,
        data: v.get("data")?.clone(),
    })
}

/// An event as stored: `{seq, time, type, data}`.
fn stored(event: &Event) -> Value {
    json!({
        "seq": event.seq, "time": event.time_ms, "type": event.kind.as_str(), "data": event.data,
    })
}

/// What a session keeps in memory: what the next event needs, never the events (the log
/// is read from storage when asked for), so memory stays flat however long it runs.
#[derive(Default)]
struct State {
    /// The sequence number and time of the last event.
    last: Option<(u64, u64)>,
    /// The last event of each kind ([`Session::last_of`]).
    last_of: HashMap<EventKind, Event>,
    /// The turn open now, if any.
    open_turn: Option<u64>,
    /// The last turn number used.
    last_turn: u64,
    /// The size of the stored events (their JSON).
    logged_bytes: u64,
    /// Whether the `log/capped` event was written: every later event is summarised.
    capped: bool,
}

impl State {
    fn from_events(events: &[Event]) -> State {
        let mut st = State::default();
        for e in events {
            st.track(e, json_len(&stored(e)));
        }
        st
    }

    fn track(&mut self, e: &Event, stored_bytes: usize) {
        self.last = Some((e.seq, e.time_ms));
        self.last_of.insert(e.kind, e.clone());
        self.logged_bytes = self.logged_bytes.saturating_add(stored_bytes as u64);
        match e.kind {
            EventKind::TurnStart => {
                // A turn/start whose number cannot be read opens no turn.
                let turn = match e.record() {
                    Ok(Record::TurnStart { turn }) => Some(turn),
                    _ => None,
                };
                self.open_turn = turn;
                self.last_turn = self.last_turn.max(turn.unwrap_or(0));
            }
            EventKind::TurnEnd => self.open_turn = None,
            EventKind::LogCapped => self.capped = true,
            _ => {}
        }
    }

    fn next_seq(&self) -> u64 {
        self.last.map_or(1, |(seq, _)| seq + 1)
    }
}

/// One session. See the [module docs](self).
pub struct Session {
    header: SessionHeader,
    unit: Arc<dyn Unit>,
    /// See [`SessionLog::with_cap`].
    cap_bytes: u64,
    state: tokio::sync::Mutex<State>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Journal for Session {
    fn session_id(&self) -> &SessionId {
        &self.header.id
    }

    async fn append(&self, record: Record) -> Result<Event, HarnessError> {
        Session::append(self, record).await
    }

    async fn open_turn(&self) -> Option<u64> {
        Session::open_turn(self).await
    }

    async fn last_of(&self, kind: EventKind) -> Option<Event> {
        Session::last_of(self, kind).await
    }
}

impl Session {
    /// Its id.
    pub fn id(&self) -> &SessionId {
        &self.header.id
    }

    /// Its header.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// Appends an event; returns it once it is durable. Appends are applied one at a time
    /// in the order they get here, with consecutive sequence numbers.
    ///
    /// The event is logged, and returned, within the log's bounds (see the [module
    /// docs](self)): long strings as their head, length and digest; once the session's
    /// cap is reached, preceded by one `log/capped` event and summarised.
    ///
    /// # Errors
    /// The storage's errors; then nothing was appended.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped once its write is queued, the event may still be stored,
    /// but the session does not count it: the next append takes the same sequence number
    /// and replaces it. The session's lock is released either way.
    pub async fn append(&self, record: Record) -> Result<Event, HarnessError> {
        let mut st = self.state.lock().await;
        let time_ms = now_ms();
        self.append_locked(&mut st, &record, time_ms).await
    }

    async fn append_locked(
        &self,
        st: &mut State,
        record: &Record,
        time_ms: u64,
    ) -> Result<Event, HarnessError> {
        if !st.capped && st.logged_bytes >= self.cap_bytes {
            let marker = Record::LogCapped {
                cap_bytes: self.cap_bytes,
                logged_bytes: st.logged_bytes,
            };
            self.put_locked(st, marker.kind(), marker.data(), time_ms)
                .await?;
        }
        let (kind, data) = (record.kind(), record.data());
        let data = if st.capped {
            summarise(&data)
        } else {
            bound(&data)
        };
        self.put_locked(st, kind, data, time_ms).await
    }

    /// Stores `data` as it is, as the next event.
    async fn put_locked(
        &self,
        st: &mut State,
        kind: EventKind,
        data: Value,
        time_ms: u64,
    ) -> Result<Event, HarnessError> {
        let event = Event {
            session: self.header.id.clone(),
            seq: st.next_seq(),
            time_ms,
            kind,
            data,
        };
        let stored = stored(&event);
        self.unit
            .put(EVENTS, &format!("{:012}", event.seq), &stored)
            .await?;
        st.track(&event, json_len(&stored));
        Ok(event)
    }

    /// Starts a turn (closing none: a turn already open is an error).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when a turn is open; the storage's errors.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped once its write is queued, the `turn/start` may still be
    /// stored, but the session does not count the turn open, and its next append replaces
    /// that event (see [`append`](Self::append)).
    pub async fn begin_turn(&self) -> Result<u64, HarnessError> {
        let mut st = self.state.lock().await;
        if let Some(open) = st.open_turn {
            return Err(HarnessError::invalid_argument(format!(
                "session \"{}\": turn {open} is still open",
                self.header.id
            )));
        }
        let turn = st.last_turn + 1;
        self.append_locked(&mut st, &Record::TurnStart { turn }, now_ms())
            .await?;
        Ok(turn)
    }

    /// Ends the open turn with `reason` (`completed`, `aborted`, `error`, …); a no-op
    /// without one.
    ///
    /// # Errors
    /// The storage's errors.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped once its write is queued, the `turn/end` may still be
    /// stored, but the session still counts the turn open, and its next append replaces
    /// that event (see [`append`](Self::append)).
    pub async fn end_turn(&self, reason: &str) -> Result<(), HarnessError> {
        let mut st = self.state.lock().await;
        if let Some(turn) = st.open_turn {
            let end = Record::TurnEnd {
                turn,
                reason: TurnEndReason {
                    kind: reason.into(),
                },
            };
            self.append_locked(&mut st, &end, now_ms()).await?;
        }
        Ok(())
    }

    /// The turn open now, if any.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn open_turn(&self) -> Option<u64> {
        self.state.lock().await.open_turn
    }

    /// Every event, in order, read from storage (a session keeps none in memory).
    ///
    /// # Errors
    /// The storage's errors; `STORAGE_MALFORMED` for an event that cannot be read.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads; the session's lock is released when the future drops.
    pub async fn events(&self) -> Result<Vec<Event>, HarnessError> {
        // Appends wait, so the list ends at an event boundary.
        let _st = self.state.lock().await;
        load_events(&self.header.id, &*self.unit).await
    }

    /// The last event of `kind`, if any.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn last_of(&self, kind: EventKind) -> Option<Event> {
        self.state.lock().await.last_of.get(&kind).cloned()
    }

    /// Closes a turn a crash left open (see the [module docs](self)); `events` are the
    /// session's, as stored.
    async fn close_interrupted_turn(&self, events: &[Event]) -> Result<(), HarnessError> {
        let mut st = self.state.lock().await;
        let Some(turn) = st.open_turn else {
            return Ok(());
        };
        let start = events
            .iter()
            .rposition(|e| e.kind == EventKind::TurnStart)
            .unwrap_or(0);
        // (seq, callId, name) of each call without a result.
        let mut pending: Vec<(u64, Logged, Logged)> = Vec::new();
        for e in &events[start..] {
            match e.record()? {
                Record::ToolCall { call_id, name, .. } => pending.push((e.seq, call_id, name)),
                Record::ToolResult(r) => pending.retain(|(_, id, _)| *id != r.call_id),
                _ => {}
            }
        }
        let time = st.last.map_or_else(now_ms, |(_, time)| time);
        for (call_seq, call_id, name) in pending {
            let result = Record::ToolResult(ToolResultRecord {
                turn: Some(turn),
                call_id,
                name,
                text: "Error: the outcome of this tool call is unknown: dsh stopped while it ran. \
                       Retry it only if it is read-only or idempotent; otherwise check what it \
                       changed first, or ask the user."
                    .into(),
                is_error: true,
                error: Some(ErrorRecord {
                    name: "ToolOutcomeUnknownError".into(),
                    code: "TOOL_OUTCOME_UNKNOWN".into(),
                }),
                source_event_seqs: vec![call_seq],
                seen: None,
                ..ToolResultRecord::default()
            });
            self.append_locked(&mut st, &result, time).await?;
        }
        let end = Record::TurnEnd {
            turn,
            reason: TurnEndReason {
                kind: "interrupted".into(),
            },
        };
        self.append_locked(&mut st, &end, time).await?;
        Ok(())
    }
}
