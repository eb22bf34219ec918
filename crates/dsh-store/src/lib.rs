//! Durable state: a unit-scoped key/value seam and, on top of it, the session log.
//!
//! [`Storage`] is the seam. A caller opens a **unit** ([`UnitSpec`]: a name, a schema
//! version, its tables, whether it has a global value) and gets a [`Unit`]: load everything,
//! put and delete records, set the global. Every call is atomic and durable when it
//! returns. Two providers:
//!
//! | provider | medium | crash safety |
//! |---|---|---|
//! | [`SqliteStorage`] (default) | one SQLite database, WAL journal, a table per unit table | each write is one transaction |
//! | [`JsonlStorage`] | one append-only JSON-lines file per unit | each write is one line, fsynced; a torn last line is cut off on load |
//!
//! Both run every file operation on a dedicated thread of their own, never on an async
//! runtime worker.
//!
//! [`domain::Domains`] adds named, validated domains on top: reads from memory, writes
//! durable first, a change notice after each write.
//!
//! [`session::SessionLog`] keeps each session as an append-only list of
//! [`session::Event`]s (session id, sequence number, time, JSON payload) in a unit of its
//! own, closes a turn a crash left open when the session is reloaded, and lists sessions.
//! The log is bounded ([`log_bounds`]): long strings are logged as their head, length and
//! SHA-256, and past a per-session cap every event is summarised.
//!
//! Unit and table names match `^[a-z][a-z0-9_]*$`.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), dsh_core::HarnessError> {
//! use dsh_store::{SqliteStorage, Storage, UnitSpec};
//!
//! let dir = tempfile::tempdir().expect("tempdir");
//! let storage = SqliteStorage::open(dir.path().join("dsh.db"))?;
//! let spec = UnitSpec {
//!     name: "notes".into(),
//!     version: 1,
//!     tables: vec!["pins".into()],
//!     has_global: false,
//! };
//! let unit = storage.open(spec).await?;
//! unit.put("pins", "a", &serde_json::json!({"line": 3})).await?;
//! let data = unit.load_all().await?;
//! assert_eq!(data.tables["pins"]["a"]["line"], 3);
//! storage.close().await;
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//! - A write that returned `Ok` is durable (committed, or fsynced), and a crash loses
//!   at most the write in flight, never an earlier one.
//! - A unit stored with another schema version is never opened, and never changed.
//! - The session log's events of one session are numbered 1, 2, 3, … with no gap, and a
//!   session's log stays within its cap (every event past it summarised).
//!
//! # Limits
//! One process at a time per database or directory; a second opener gets what SQLite or
//! the file system gives it, not a coordinated view.
//!
//! # Errors
//! `STORAGE_VERSION_MISMATCH` (a unit stored with another version; untouched),
//! `STORAGE_MALFORMED` (unreadable stored data), `STORAGE_CLOSED` (a call after close),
//! `INVALID_ARGUMENT` (a bad name, an undeclared table, a unit opened twice), `IO_FAILED`,
//! `INTERNAL` (a bug: a storage job panicked; the storage thread goes on with the next).

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError};
use serde_json::Value;

pub mod domain;
mod jsonl;
pub mod log_bounds;
pub mod session;
mod sqlite;
mod worker;

pub use jsonl::JsonlStorage;
pub use sqlite::SqliteStorage;

/// What a unit is: its name, schema version, tables, and whether it has a global value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnitSpec {
    /// `^[a-z][a-z0-9_]*$`.
    pub name: String,
    /// The schema version; a unit stored with another one is not opened.
    pub version: u32,
    /// The tables (same name rule).
    pub tables: Vec<String>,
    /// Whether [`Unit::set_global`] is allowed.
    pub has_global: bool,
}

/// Everything a unit holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UnitData {
    /// `table -> key -> value`, every declared table present (maybe empty).
    pub tables: BTreeMap<String, BTreeMap<String, Value>>,
    /// The global value; `None` if never written.
    pub global: Option<Value>,
}

/// The storage seam. See the [crate docs](crate).
#[async_trait]
pub trait Storage: Send + Sync {
    /// The provider's name (`sqlite`, `jsonl`).
    fn backend(&self) -> &'static str;

    /// Opens a unit; a unit never written opens empty.
    ///
    /// # Errors
    /// `STORAGE_VERSION_MISMATCH`, `STORAGE_MALFORMED`, `STORAGE_CLOSED`,
    /// `INVALID_ARGUMENT` (bad name; the unit is already open), `IO_FAILED`.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped once queued, the unit may be opened with nobody holding it
    /// (a second open of it is then `INVALID_ARGUMENT` until the store closes).
    async fn open(&self, spec: UnitSpec) -> Result<Arc<dyn Unit>, HarnessError>;

    /// The names of every unit stored, sorted.
    ///
    /// # Errors
    /// `STORAGE_CLOSED`, `IO_FAILED`.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing; a dropped call's job still runs on the storage
    /// thread and its answer is discarded.
    async fn units(&self) -> Result<Vec<String>, HarnessError>;

    /// Closes the store: waits for calls in flight; every later call is `STORAGE_CLOSED`.
    ///
    /// # Cancel safety
    /// Cancel safe: later calls are refused from the moment it is called; dropped, it only
    /// stops waiting for the calls in flight.
    async fn close(&self);
}

/// One open unit. Calls are atomic and durable when they return; concurrent calls are
/// applied in some order, each whole.
#[async_trait]
pub trait Unit: Send + Sync {
    /// Everything stored in the unit.
    ///
    /// # Errors
    /// `STORAGE_MALFORMED`, `STORAGE_CLOSED`, `IO_FAILED`.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing; a dropped call's job still runs on the storage
    /// thread and its answer is discarded.
    async fn load_all(&self) -> Result<UnitData, HarnessError>;

    /// Inserts or replaces `table[key] = value`.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` (undeclared table), `STORAGE_CLOSED`, `IO_FAILED`.
    ///
    /// # Cancel safety
    /// Not cancel safe once queued: the write runs on the storage thread whether or not
    /// the future is awaited, whole or not at all (dropping it loses only the answer).
    async fn put(&self, table: &str, key: &str, value: &Value) -> Result<(), HarnessError>;

    /// Removes `table[key]`; removing a missing key is not an error.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    ///
    /// # Cancel safety
    /// Not cancel safe once queued: the write runs on the storage thread whether or not
    /// the future is awaited, whole or not at all (dropping it loses only the answer).
    async fn delete(&self, table: &str, key: &str) -> Result<(), HarnessError>;

    /// Sets the global value.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when the unit has no global; otherwise as [`put`](Self::put).
    ///
    /// # Cancel safety
    /// Not cancel safe once queued: the write runs on the storage thread whether or not
    /// the future is awaited, whole or not at all (dropping it loses only the answer).
    async fn set_global(&self, value: &Value) -> Result<(), HarnessError>;

    /// Closes the unit (idempotent); later calls are `STORAGE_CLOSED`.
    ///
    /// # Cancel safety
    /// Cancel safe: the unit is closed from the moment it is called.
    async fn close(&self);
}

/// Where dsh keeps its state by default: `$XDG_STATE_HOME/dsh`, else
/// `~/.local/state/dsh`, else `./.dsh-state` when there is no home.
pub fn default_state_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("dsh");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/state/dsh"),
        None => PathBuf::from(".dsh-state"),
    }
}

/// Checks a unit or table name against `^[a-z][a-z0-9_]*$`.
pub(crate) fn check_name(kind: &str, name: &str) -> Result<(), HarnessError> {
    let mut chars = name.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(HarnessError::invalid_argument(format!(
            "storage: {kind} name \"{name}\" must match ^[a-z][a-z0-9_]*$"
        )))
    }
}

/// Checks a whole spec.
pub(crate) fn check_spec(spec: &UnitSpec) -> Result<(), HarnessError> {
    check_name("unit", &spec.name)?;
    for t in &spec.tables {
        check_name("table", t)?;
    }
    Ok(())
}

pub(crate) fn closed() -> HarnessError {
    HarnessError::new(
        ErrorCode::StorageClosed,
        "storage: the store or unit is closed; reopen it",
    )
}

pub(crate) fn io_failed(
    what: String,
    e: impl std::error::Error + Send + Sync + 'static,
) -> HarnessError {
    HarnessError::new(ErrorCode::IoFailed, what).with_source(e)
}

pub(crate) fn undeclared(unit: &str, table: &str) -> HarnessError {
    HarnessError::invalid_argument(format!("storage: unit \"{unit}\" has no table \"{table}\""))
}

pub(crate) fn no_global(unit: &str) -> HarnessError {
    HarnessError::invalid_argument(format!("storage: unit \"{unit}\" has no global value"))
}

pub(crate) fn version_mismatch(unit: &str, stored: i64, wanted: u32) -> HarnessError {
    HarnessError::new(
        ErrorCode::StorageVersionMismatch,
        format!(
            "storage: unit \"{unit}\" is stored at version {stored}, not {wanted}; it was not opened or changed"
        ),
    )
}

pub(crate) fn already_open(unit: &str) -> HarnessError {
    HarnessError::invalid_argument(format!("storage: unit \"{unit}\" is already open"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        for ok in ["a", "events", "s_2026_x9"] {
            assert!(check_name("unit", ok).is_ok(), "{ok}");
        }
        for bad in ["", "A", "1a", "a-b", "a b", "é"] {
            assert!(check_name("unit", bad).is_err(), "{bad}");
        }
    }
}
