//! Domains: named, validated key/value state over the storage seam, read from memory,
//! written durably first.
//!
//! [`Domains`] routes each domain to a backend (a default one, and per-domain routes) and
//! lets a domain be open once at a time. A [`Domain`] loads its unit at open, checks every
//! stored record with the domain's validator (`STORAGE_MALFORMED` naming table and key),
//! then serves reads from memory. Writes go one at a time per domain: durable first, then
//! memory, then a [`Change`] to subscribers; a write that fails changes neither memory nor
//! subscribers. After [`Domain::close`], new writes are refused at once, queued ones
//! finish, and then reads are refused too and the name is free again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use dsh_core::{ErrorCode, HarnessError};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::{Storage, Unit, UnitData, UnitSpec};

/// Checks one record: `(table, key, value)`; the global is checked with empty table and
/// key. `Err` says what is wrong.
pub type Validator = Arc<dyn Fn(&str, &str, &Value) -> Result<(), String> + Send + Sync>;

/// What a domain is.
#[derive(Clone)]
pub struct DomainSpec {
    /// The unit underneath (name, version, tables, global).
    pub unit: UnitSpec,
    /// Checks every record read or written; `None` accepts any JSON.
    pub validate: Option<Validator>,
}

/// One change, sent after it is durable and in memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The domain.
    pub domain: String,
    /// The table (empty for the global).
    pub table: String,
    /// The key (empty for the global).
    pub key: String,
    /// The new value; `None` when the key was deleted.
    pub value: Option<Value>,
}

/// Opens domains on their backends. See the [module docs](self).
pub struct Domains {
    default: Arc<dyn Storage>,
    routes: HashMap<String, Arc<dyn Storage>>,
    open: Arc<Mutex<HashSet<String>>>,
}

impl Domains {
    /// Domains on `default`, unless routed elsewhere.
    pub fn new(default: Arc<dyn Storage>) -> Domains {
        Domains {
            default,
            routes: HashMap::new(),
            open: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Routes the domain `name` to `backend`.
    pub fn route(mut self, name: &str, backend: Arc<dyn Storage>) -> Domains {
        self.routes.insert(name.to_owned(), backend);
        self
    }

    /// Opens a domain.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when it is open already (or being opened); `STORAGE_MALFORMED`
    /// for a stored record the validator refuses (the unit is closed again); the backend's
    /// errors.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped before it returns, the domain's name stays taken, so every
    /// later open of it is `INVALID_ARGUMENT`; dropped while the backend opens the unit,
    /// the unit may stay marked open there too (see [`Storage::open`]).
    pub async fn open(&self, spec: DomainSpec) -> Result<Arc<Domain>, HarnessError> {
        let name = spec.unit.name.clone();
        if !self.lock().insert(name.clone()) {
            return Err(HarnessError::invalid_argument(format!(
                "domain \"{name}\" is already open"
            )));
        }
        let opened = self.open_unit(&spec).await;
        match opened {
            Ok((unit, data)) => {
                let (changed, _) = broadcast::channel(256);
                Ok(Arc::new(Domain {
                    spec,
                    unit,
                    data: RwLock::new(data),
                    writes: tokio::sync::Mutex::new(()),
                    changed,
                    closing: AtomicBool::new(false),
                    closed: AtomicBool::new(false),
                    registry: self.open.clone(),
                }))
            }
            Err(e) => {
                self.lock().remove(&name);
                Err(e)
            }
        }
    }

    async fn open_unit(
        &self,
        spec: &DomainSpec,
    ) -> Result<(Arc<dyn Unit>, UnitData), HarnessError> {
        let backend = self.routes.get(&spec.unit.name).unwrap_or(&self.default);
        let unit = backend.open(spec.unit.clone()).await?;
        let data = match unit.load_all().await {
            Ok(d) => d,
            Err(e) => {
                unit.close().await;
                return Err(e);
            }
        };
        if let Some(v) = &spec.validate {
            let bad = data
                .tables
                .iter()
                .flat_map(|(t, rows)| {
                    rows.iter()
                        .map(move |(k, val)| (t.as_str(), k.as_str(), val))
                })
                .chain(data.global.iter().map(|g| ("", "", g)))
                .find_map(|(t, k, val)| {
                    v(t, k, val)
                        .err()
                        .map(|why| (t.to_owned(), k.to_owned(), why))
                });
            if let Some((t, k, why)) = bad {
                unit.close().await;
                return Err(invalid_record(&spec.unit.name, &t, &k, &why));
            }
        }
        Ok((unit, data))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn invalid_record(domain: &str, table: &str, key: &str, why: &str) -> HarnessError {
    HarnessError::new(
        ErrorCode::StorageMalformed,
        format!("domain \"{domain}\": record {table}[{key}] is invalid: {why}"),
    )
}

/// One open domain. See the [module docs](self).
pub struct Domain {
    spec: DomainSpec,
    unit: Arc<dyn Unit>,
    data: RwLock<UnitData>,
    /// One write at a time, in arrival order.
    writes: tokio::sync::Mutex<()>,
    changed: broadcast::Sender<Change>,
    closing: AtomicBool,
    closed: AtomicBool,
    registry: Arc<Mutex<HashSet<String>>>,
}

impl Drop for Domain {
    /// A domain dropped without `close` frees its name (its unit closes as it drops).
    fn drop(&mut self) {
        if !self.closed.load(Ordering::Acquire) {
            self.registry
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&self.spec.unit.name);
        }
    }
}

impl Domain {
    fn read(&self) -> Result<std::sync::RwLockReadGuard<'_, UnitData>, HarnessError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(crate::closed());
        }
        Ok(self.data.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn table_check(&self, table: &str) -> Result<(), HarnessError> {
        if self.spec.unit.tables.iter().any(|t| t == table) {
            Ok(())
        } else {
            Err(crate::undeclared(&self.spec.unit.name, table))
        }
    }

    /// The value of `table[key]`, from memory.
    ///
    /// # Errors
    /// `STORAGE_CLOSED`; `INVALID_ARGUMENT` for an undeclared table.
    pub fn get(&self, table: &str, key: &str) -> Result<Option<Value>, HarnessError> {
        self.table_check(table)?;
        Ok(self
            .read()?
            .tables
            .get(table)
            .and_then(|t| t.get(key))
            .cloned())
    }

    /// Every record of `table`, by key.
    ///
    /// # Errors
    /// As [`get`](Self::get).
    pub fn entries(&self, table: &str) -> Result<BTreeMap<String, Value>, HarnessError> {
        self.table_check(table)?;
        Ok(self.read()?.tables.get(table).cloned().unwrap_or_default())
    }

    /// The global value, if ever written.
    ///
    /// # Errors
    /// `STORAGE_CLOSED`.
    pub fn global(&self) -> Result<Option<Value>, HarnessError> {
        Ok(self.read()?.global.clone())
    }

    /// Changes from now on (a slow subscriber misses the oldest ones; it is told so by
    /// the channel).
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changed.subscribe()
    }

    fn validate(&self, table: &str, key: &str, value: &Value) -> Result<(), HarnessError> {
        match &self.spec.validate {
            Some(v) => v(table, key, value)
                .map_err(|why| invalid_record(&self.spec.unit.name, table, key, &why)),
            None => Ok(()),
        }
    }

    async fn begin_write(&self) -> Result<tokio::sync::MutexGuard<'_, ()>, HarnessError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(crate::closed());
        }
        Ok(self.writes.lock().await)
    }

    fn emit(&self, table: &str, key: &str, value: Option<Value>) {
        let _ = self.changed.send(Change {
            domain: self.spec.unit.name.clone(),
            table: table.to_owned(),
            key: key.to_owned(),
            value,
        });
    }

    /// Records a value the backend has stored: in the cache, then to the listeners.
    fn remember(&self, table: &str, key: &str, value: Value) {
        self.data
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .tables
            .entry(table.to_owned())
            .or_default()
            .insert(key.to_owned(), value.clone());
        self.emit(table, key, Some(value));
    }

    /// Sets `table[key] = value`.
    ///
    /// # Errors
    /// `STORAGE_MALFORMED` when the validator refuses it; `STORAGE_CLOSED`;
    /// `INVALID_ARGUMENT` for an undeclared table; the backend's errors (then nothing
    /// changed).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped once its write is queued, the write may still reach the
    /// backend while memory and subscribers never hear of it (reads disagree with storage
    /// until the domain is opened again). The write lock is released either way.
    pub async fn put(&self, table: &str, key: &str, value: Value) -> Result<(), HarnessError> {
        self.table_check(table)?;
        self.validate(table, key, &value)?;
        let _w = self.begin_write().await?;
        self.unit.put(table, key, &value).await?;
        self.remember(table, key, value);
        Ok(())
    }

    /// Replaces `table[key]` with `f(old)`; returns the new value.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when the key does not exist; otherwise as [`put`](Self::put).
    ///
    /// # Cancel safety
    /// Not cancel safe: as [`put`](Self::put).
    pub async fn update(
        &self,
        table: &str,
        key: &str,
        f: impl FnOnce(&Value) -> Value,
    ) -> Result<Value, HarnessError> {
        self.table_check(table)?;
        let _w = self.begin_write().await?;
        let old = self.get(table, key)?.ok_or_else(|| {
            HarnessError::invalid_argument(format!(
                "domain \"{}\": no key \"{key}\" in table \"{table}\" to update",
                self.spec.unit.name
            ))
        })?;
        let new = f(&old);
        self.validate(table, key, &new)?;
        self.unit.put(table, key, &new).await?;
        self.remember(table, key, new.clone());
        Ok(new)
    }

    /// Deletes `table[key]`; `false` (and no write, no change) when it does not exist.
    ///
    /// # Errors
    /// As [`put`](Self::put).
    ///
    /// # Cancel safety
    /// Not cancel safe: as [`put`](Self::put).
    pub async fn delete(&self, table: &str, key: &str) -> Result<bool, HarnessError> {
        self.table_check(table)?;
        let _w = self.begin_write().await?;
        if self.get(table, key)?.is_none() {
            return Ok(false);
        }
        self.unit.delete(table, key).await?;
        if let Some(t) = self
            .data
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .tables
            .get_mut(table)
        {
            t.remove(key);
        }
        self.emit(table, key, None);
        Ok(true)
    }

    /// Sets the global value.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when the domain has no global; otherwise as [`put`](Self::put).
    ///
    /// # Cancel safety
    /// Not cancel safe: as [`put`](Self::put).
    pub async fn set_global(&self, value: Value) -> Result<(), HarnessError> {
        if !self.spec.unit.has_global {
            return Err(crate::no_global(&self.spec.unit.name));
        }
        self.validate("", "", &value)?;
        let _w = self.begin_write().await?;
        self.unit.set_global(&value).await?;
        self.data.write().unwrap_or_else(|p| p.into_inner()).global = Some(value.clone());
        self.emit("", "", Some(value));
        Ok(())
    }

    /// Closes the domain: new writes are refused at once, queued ones finish (and notify),
    /// then the unit closes, reads are refused, and the name can be opened again.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped before it completes, the domain refuses writes but still
    /// serves reads and keeps its name until it is dropped; a later `close` returns at
    /// once without finishing.
    pub async fn close(&self) {
        if self.closing.swap(true, Ordering::AcqRel) {
            return;
        }
        drop(self.writes.lock().await);
        self.unit.close().await;
        self.closed.store(true, Ordering::Release);
        self.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.spec.unit.name);
    }
}
