//! [`SqliteStorage`]: every unit in one SQLite database.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;

use crate::worker::{OpenUnits, UnitHandle, Worker};
use crate::{Storage, Unit, UnitData, UnitSpec};

/// The layout version stamped in `PRAGMA user_version`.
const LAYOUT_VERSION: i64 = 1;

/// Every unit in one SQLite database file: `units(name, version)`,
/// `unit_globals(unit, value)`, and a `u_<unit>_<table>(key, value)` table per unit table,
/// values as JSON text. The journal is WAL with `synchronous = NORMAL`: a write that
/// returned survives a crash of dsh; a power loss may lose the last writes but never
/// corrupts the database. The directory is made 0700 and the file 0600.
///
/// All database work runs on one dedicated thread (one connection, one writer).
pub struct SqliteStorage {
    worker: Arc<Worker<State>>,
    path: PathBuf,
}

impl OpenUnits for State {
    fn release(&mut self, name: &str) {
        self.open.remove(name);
    }
}

struct State {
    conn: Connection,
    open: HashSet<String>,
}

fn sql_error(what: &str, e: rusqlite::Error) -> HarnessError {
    HarnessError::new(ErrorCode::IoFailed, format!("storage (sqlite): {what}")).with_source(e)
}

impl SqliteStorage {
    /// Opens (creating if needed) the database at `path` (`:memory:` for a private
    /// in-memory one).
    ///
    /// # Errors
    /// `STORAGE_VERSION_MISMATCH` when the file has another layout version,
    /// `STORAGE_MALFORMED` when it is not a SQLite database, `IO_FAILED`.
    pub fn open(path: impl Into<PathBuf>) -> Result<SqliteStorage, HarnessError> {
        let path = path.into();
        if path.as_os_str() != ":memory:" {
            prepare_file(&path)?;
        }
        let conn = Connection::open(&path)
            .map_err(|e| sql_error(&format!("cannot open {}", path.display()), e))?;
        init(&conn, &path)?;
        let worker = Worker::start(
            "dsh-sqlite",
            State {
                conn,
                open: HashSet::new(),
            },
        )
        .map_err(|e| crate::io_failed("storage (sqlite): cannot start its thread".into(), e))?;
        Ok(SqliteStorage {
            worker: Arc::new(worker),
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The parent directory 0700, the file 0600 (an existing file keeps its mode).
fn prepare_file(path: &Path) -> Result<(), HarnessError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                crate::io_failed(format!("storage: cannot create {}", dir.display()), e)
            })?;
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(crate::io_failed(
            format!("storage: cannot create {}", path.display()),
            e,
        )),
    }
}

/// Journal mode, then the layout (stamped once) or a check of its version.
fn init(conn: &Connection, path: &Path) -> Result<(), HarnessError> {
    let malformed = |e: rusqlite::Error| {
        HarnessError::new(
            ErrorCode::StorageMalformed,
            format!("storage: {} is not a dsh SQLite database", path.display()),
        )
        .with_source(e)
    };
    conn.pragma_update(None, "journal_mode", "wal")
        .map_err(malformed)?;
    conn.pragma_update(None, "synchronous", "normal")
        .map_err(malformed)?;
    // The workload appends and seldom reads back: a small page cache (512 KiB, not
    // SQLite's 2 MiB) keeps a long-running `dsh mcp` near its starting memory.
    conn.pragma_update(None, "cache_size", -512)
        .map_err(malformed)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(malformed)?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(malformed)?;
    match version {
        0 => conn
            .execute_batch(
                "BEGIN;
                 CREATE TABLE IF NOT EXISTS units(name TEXT PRIMARY KEY, version INTEGER NOT NULL) STRICT;
                 CREATE TABLE IF NOT EXISTS unit_globals(
                     unit TEXT PRIMARY KEY REFERENCES units(name), value TEXT NOT NULL) STRICT;
                 PRAGMA user_version = 1;
                 COMMIT;",
            )
            .map_err(|e| sql_error("cannot create the layout", e)),
        LAYOUT_VERSION => Ok(()),
        other => Err(HarnessError::new(
            ErrorCode::StorageVersionMismatch,
            format!(
                "storage: {} has layout version {other}, this dsh reads {LAYOUT_VERSION}; it was not changed",
                path.display()
            ),
        )),
    }
}

fn table_name(unit: &str, table: &str) -> String {
    // Both names matched ^[a-z][a-z0-9_]*$, so the identifier needs no escaping; a double
    // underscore separates them so `a` + `b_c` and `a_b` + `c` cannot collide.
    format!("\"u_{unit}__{table}\"")
}

#[async_trait]
impl Storage for SqliteStorage {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn open(&self, spec: UnitSpec) -> Result<Arc<dyn Unit>, HarnessError> {
        crate::check_spec(&spec)?;
        let s = spec.clone();
        self.worker
            .run(move |st| {
                if st.open.contains(&s.name) {
                    return Err(crate::already_open(&s.name));
                }
                let stored: Option<i64> = st
                    .conn
                    .query_row("SELECT version FROM units WHERE name = ?1", [&s.name], |r| r.get(0))
                    .optional()
                    .map_err(|e| sql_error("cannot read the unit list", e))?;
                if let Some(v) = stored.filter(|v| *v != i64::from(s.version)) {
                    return Err(crate::version_mismatch(&s.name, v, s.version));
                }
                let tx = st.conn.transaction().map_err(|e| sql_error("cannot begin", e))?;
                if stored.is_none() {
                    tx.execute(
                        "INSERT INTO units(name, version) VALUES (?1, ?2)",
                        params![s.name, i64::from(s.version)],
                    )
                    .map_err(|e| sql_error("cannot record the unit", e))?;
                }
                for t in &s.tables {
                    tx.execute_batch(&format!(
                        "CREATE TABLE IF NOT EXISTS {}(key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;",
                        table_name(&s.name, t)
                    ))
                    .map_err(|e| sql_error("cannot create a table", e))?;
                }
                tx.commit().map_err(|e| sql_error("cannot commit", e))?;
                st.open.insert(s.name.clone());
                Ok(())
            })
            .await?;
        Ok(Arc::new(SqliteUnit {
            h: UnitHandle::new(self.worker.clone(), spec),
        }))
    }

    async fn units(&self) -> Result<Vec<String>, HarnessError> {
        self.worker
            .run(|st| {
                let mut stmt = st
                    .conn
                    .prepare_cached("SELECT name FROM units ORDER BY name")
                    .map_err(|e| sql_error("cannot list units", e))?;
                let rows = stmt
                    .query_map([], |r| r.get::<_, String>(0))
                    .map_err(|e| sql_error("cannot list units", e))?;
                rows.collect::<Result<Vec<_>, _>>()
                    .map_err(|e| sql_error("cannot list units", e))
            })
            .await
    }

    async fn close(&self) {
        self.worker.close().await;
    }
}

struct SqliteUnit {
    h: UnitHandle<State>,
}

impl SqliteUnit {}

fn parse(unit: &str, what: &str, text: &str) -> Result<Value, HarnessError> {
    serde_json::from_str(text).map_err(|e| {
        HarnessError::new(
            ErrorCode::StorageMalformed,
            format!("storage: unit \"{unit}\": {what} is not valid JSON"),
        )
        .with_source(e)
    })
}

#[async_trait]
impl Unit for SqliteUnit {
    async fn load_all(&self) -> Result<UnitData, HarnessError> {
        self.h.check(None)?;
        let spec = self.h.spec.clone();
        self.h
            .worker
            .run(move |st| {
                let mut data = UnitData::default();
                for t in &spec.tables {
                    let mut stmt = st
                        .conn
                        .prepare_cached(&format!(
                            "SELECT key, value FROM {}",
                            table_name(&spec.name, t)
                        ))
                        .map_err(|e| sql_error("cannot read a table", e))?;
                    let rows = stmt
                        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                        .map_err(|e| sql_error("cannot read a table", e))?;
                    let mut table = BTreeMap::new();
                    for row in rows {
                        let (k, v) = row.map_err(|e| sql_error("cannot read a row", e))?;
                        let value = parse(&spec.name, &format!("{t}[{k}]"), &v)?;
                        table.insert(k, value);
                    }
                    data.tables.insert(t.clone(), table);
                }
                let global: Option<String> = st
                    .conn
                    .query_row(
                        "SELECT value FROM unit_globals WHERE unit = ?1",
                        [&spec.name],
                        |r| r.get(0),
                    )
                    .optional()
                    .map_err(|e| sql_error("cannot read the global", e))?;
                data.global = global
                    .map(|g| parse(&spec.name, "the global", &g))
                    .transpose()?;
                Ok(data)
            })
            .await
    }

    async fn put(&self, table: &str, key: &str, value: &Value) -> Result<(), HarnessError> {
        self.h.check(Some(table))?;
        let sql = format!(
            "INSERT INTO {}(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            table_name(&self.h.spec.name, table)
        );
        let (key, text) = (key.to_owned(), value.to_string());
        self.h
            .worker
            .run(move |st| {
                st.conn
                    .prepare_cached(&sql)
                    .and_then(|mut s| s.execute(params![key, text]))
                    .map(|_| ())
                    .map_err(|e| sql_error("cannot write a record", e))
            })
            .await
    }

    async fn delete(&self, table: &str, key: &str) -> Result<(), HarnessError> {
        self.h.check(Some(table))?;
        let sql = format!(
            "DELETE FROM {} WHERE key = ?1",
            table_name(&self.h.spec.name, table)
        );
        let key = key.to_owned();
        self.h
            .worker
            .run(move |st| {
                st.conn
                    .prepare_cached(&sql)
                    .and_then(|mut s| s.execute([key]))
                    .map(|_| ())
                    .map_err(|e| sql_error("cannot delete a record", e))
            })
            .await
    }

    async fn set_global(&self, value: &Value) -> Result<(), HarnessError> {
        self.h.check(None)?;
        if !self.h.spec.has_global {
            return Err(crate::no_global(&self.h.spec.name));
        }
        let (unit, text) = (self.h.spec.name.clone(), value.to_string());
        self.h
            .worker
            .run(move |st| {
                st.conn
                    .prepare_cached(
                        "INSERT INTO unit_globals(unit, value) VALUES (?1, ?2) \
                         ON CONFLICT(unit) DO UPDATE SET value = excluded.value",
                    )
                    .and_then(|mut s| s.execute(params![unit, text]))
                    .map(|_| ())
                    .map_err(|e| sql_error("cannot write the global", e))
            })
            .await
    }

    async fn close(&self) {
        self.h.close().await;
    }
}
