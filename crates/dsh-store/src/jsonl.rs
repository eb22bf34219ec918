//! [`JsonlStorage`]: one append-only JSON-lines file per unit.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError};
use serde_json::{json, Value};

use crate::worker::{OpenUnits, UnitHandle, Worker};
use crate::{Storage, Unit, UnitData, UnitSpec};

/// One file per unit, `<root>/<unit>.jsonl`: a header line
/// `{"unit":{"name":…,"version":…}}`, then one line per write (`{"put":[table,key,value]}`,
/// `{"delete":[table,key]}`, `{"global":value}`). A write is one `write` of one whole line
/// to a file opened for appending, so a write that returned survives a crash of dsh. A
/// crash in the middle of a write can leave only the last line torn: opening the unit cuts
/// it off (nothing before it is touched). Any other unreadable line is `STORAGE_MALFORMED`.
///
/// The directory is made 0700 and the files 0600; all file work runs on one dedicated
/// thread.
pub struct JsonlStorage {
    worker: Arc<Worker<State>>,
    root: PathBuf,
}

impl OpenUnits for State {
    fn release(&mut self, name: &str) {
        self.open.remove(name);
    }
}

struct State {
    root: PathBuf,
    /// Open units: their file (created at the first write) and spec.
    open: HashMap<String, Option<File>>,
}

impl JsonlStorage {
    /// A store in the directory `root` (created 0700 if missing).
    ///
    /// # Errors
    /// `IO_FAILED` when the directory cannot be made.
    pub fn open(root: impl Into<PathBuf>) -> Result<JsonlStorage, HarnessError> {
        let root = root.into();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&root)
            .map_err(|e| {
                crate::io_failed(format!("storage: cannot create {}", root.display()), e)
            })?;
        let worker = Worker::start(
            "dsh-jsonl",
            State {
                root: root.clone(),
                open: HashMap::new(),
            },
        )
        .map_err(|e| crate::io_failed("storage (jsonl): cannot start its thread".into(), e))?;
        Ok(JsonlStorage {
            worker: Arc::new(worker),
            root,
        })
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

fn file_of(root: &Path, unit: &str) -> PathBuf {
    root.join(format!("{unit}.jsonl"))
}

fn malformed(path: &Path, line: usize, why: &str) -> HarnessError {
    HarnessError::new(
        ErrorCode::StorageMalformed,
        format!("storage: {} line {line}: {why}", path.display()),
    )
}

/// Reads a unit file: its stored version and the writes in order. A torn last line is cut
/// off the file first.
fn read_file(path: &Path, spec: &UnitSpec) -> Result<Option<(i64, Vec<Value>)>, HarnessError> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(crate::io_failed(
                format!("storage: cannot open {}", path.display()),
                e,
            ))
        }
    };
    let mut reader = BufReader::new(&file);
    let mut lines = Vec::new();
    let mut good_end = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| crate::io_failed(format!("storage: cannot read {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        let complete = buf.ends_with(b"\n");
        match serde_json::from_slice::<Value>(&buf) {
            Ok(v) if complete => {
                lines.push(v);
                good_end += n as u64;
            }
            // Only the very last line may be torn (a crash mid-write): it never returned.
            _ if !complete => break,
            _ => {
                let at_end = reader
                    .fill_buf()
                    .map(|rest| rest.is_empty())
                    .unwrap_or(false);
                if at_end {
                    break;
                }
                return Err(malformed(path, lines.len() + 1, "not a JSON line"));
            }
        }
    }
    let len = file
        .metadata()
        .map_err(|e| crate::io_failed(format!("storage: cannot stat {}", path.display()), e))?
        .len();
    if good_end < len {
        file.set_len(good_end).map_err(|e| {
            crate::io_failed(
                format!("storage: cannot cut the torn tail of {}", path.display()),
                e,
            )
        })?;
    }
    let Some(header) = lines.first() else {
        return Ok(None);
    };
    let name = header.pointer("/unit/name").and_then(Value::as_str);
    let version = header.pointer("/unit/version").and_then(Value::as_i64);
    match (name, version) {
        (Some(n), Some(v)) if n == spec.name => Ok(Some((v, lines[1..].to_vec()))),
        _ => Err(malformed(path, 1, "not the header of this unit")),
    }
}

#[async_trait]
impl Storage for JsonlStorage {
    fn backend(&self) -> &'static str {
        "jsonl"
    }

    async fn open(&self, spec: UnitSpec) -> Result<Arc<dyn Unit>, HarnessError> {
        crate::check_spec(&spec)?;
        let s = spec.clone();
        self.worker
            .run(move |st| {
                if st.open.contains_key(&s.name) {
                    return Err(crate::already_open(&s.name));
                }
                let path = file_of(&st.root, &s.name);
                if let Some((v, _)) = read_file(&path, &s)? {
                    if v != i64::from(s.version) {
                        return Err(crate::version_mismatch(&s.name, v, s.version));
                    }
                }
                st.open.insert(s.name.clone(), None);
                Ok(())
            })
            .await?;
        Ok(Arc::new(JsonlUnit {
            h: UnitHandle::new(self.worker.clone(), spec),
        }))
    }

    async fn units(&self) -> Result<Vec<String>, HarnessError> {
        self.worker
            .run(|st| {
                let entries = std::fs::read_dir(&st.root).map_err(|e| {
                    crate::io_failed(format!("storage: cannot list {}", st.root.display()), e)
                })?;
                let mut names: Vec<String> = entries
                    .flatten()
                    .filter_map(|e| {
                        e.file_name()
                            .to_str()
                            .and_then(|n| n.strip_suffix(".jsonl"))
                            .filter(|n| crate::check_name("unit", n).is_ok())
                            .map(str::to_owned)
                    })
                    .collect();
                names.sort();
                Ok(names)
            })
            .await
    }

    async fn close(&self) {
        self.worker.close().await;
    }
}

struct JsonlUnit {
    h: UnitHandle<State>,
}

impl JsonlUnit {
    /// Appends one line, writing the header first if the file is new.
    async fn append(&self, line: Value) -> Result<(), HarnessError> {
        let spec = self.h.spec.clone();
        self.h
            .worker
            .run(move |st| {
                let path = file_of(&st.root, &spec.name);
                let slot = st.open.get_mut(&spec.name).ok_or_else(crate::closed)?;
                if slot.is_none() {
                    let mut file = std::fs::OpenOptions::new()
                        .append(true)
                        .create(true)
                        .mode(0o600)
                        .open(&path)
                        .map_err(|e| {
                            crate::io_failed(format!("storage: cannot open {}", path.display()), e)
                        })?;
                    let empty = file.seek(SeekFrom::End(0)).map(|n| n == 0).unwrap_or(false);
                    if empty {
                        let header = json!({"unit": {"name": spec.name, "version": spec.version}});
                        file.write_all(format!("{header}\n").as_bytes())
                            .map_err(|e| {
                                crate::io_failed(
                                    format!("storage: cannot write {}", path.display()),
                                    e,
                                )
                            })?;
                    }
                    *slot = Some(file);
                }
                let file = slot.as_mut().ok_or_else(crate::closed)?;
                // One write call per line: a crash leaves the line whole or torn at the end.
                file.write_all(format!("{line}\n").as_bytes()).map_err(|e| {
                    crate::io_failed(format!("storage: cannot write {}", path.display()), e)
                })
            })
            .await
    }
}

#[async_trait]
impl Unit for JsonlUnit {
    async fn load_all(&self) -> Result<UnitData, HarnessError> {
        self.h.check(None)?;
        let spec = self.h.spec.clone();
        self.h
            .worker
            .run(move |st| {
                let path = file_of(&st.root, &spec.name);
                let mut data = UnitData {
                    tables: spec
                        .tables
                        .iter()
                        .map(|t| (t.clone(), BTreeMap::new()))
                        .collect(),
                    global: None,
                };
                let Some((_, writes)) = read_file(&path, &spec)? else {
                    return Ok(data);
                };
                for (i, w) in writes.into_iter().enumerate() {
                    let bad = || malformed(&path, i + 2, "not a write of this unit");
                    if let Some(g) = w.get("global") {
                        data.global = Some(g.clone());
                    } else if let Some([t, k, v]) =
                        w.get("put").and_then(Value::as_array).map(Vec::as_slice)
                    {
                        let (t, k) = (t.as_str().ok_or_else(bad)?, k.as_str().ok_or_else(bad)?);
                        data.tables
                            .get_mut(t)
                            .ok_or_else(bad)?
                            .insert(k.to_owned(), v.clone());
                    } else if let Some([t, k]) =
                        w.get("delete").and_then(Value::as_array).map(Vec::as_slice)
                    {
                        let (t, k) = (t.as_str().ok_or_else(bad)?, k.as_str().ok_or_else(bad)?);
                        data.tables.get_mut(t).ok_or_else(bad)?.remove(k);
                    } else {
                        return Err(bad());
                    }
                }
                Ok(data)
            })
            .await
    }

    async fn put(&self, table: &str, key: &str, value: &Value) -> Result<(), HarnessError> {
        self.h.check(Some(table))?;
        self.append(json!({"put": [table, key, value]})).await
    }

    async fn delete(&self, table: &str, key: &str) -> Result<(), HarnessError> {
        self.h.check(Some(table))?;
        self.append(json!({"delete": [table, key]})).await
    }

    async fn set_global(&self, value: &Value) -> Result<(), HarnessError> {
        self.h.check(None)?;
        if !self.h.spec.has_global {
            return Err(crate::no_global(&self.h.spec.name));
        }
        self.append(json!({"global": value})).await
    }

    async fn close(&self) {
        self.h.close().await;
    }
}
