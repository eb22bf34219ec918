//! [`LocalFs`]: the host filesystem, no policy.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::{CancelToken, ErrorCode, HarnessError};
use dsh_sandbox::SandboxPolicy;
use rustix::fs::{FileType, Mode, OFlags};

use crate::open::open_for_read;
use crate::publish::{self, version_of};
use crate::{
    fs_error, DirEntry, EditOutcome, EditRequest, FileSystem, FsInfo, FsKind, FsTarget, FsVersion,
    GlobFound, GlobQuery, GrepFound, GrepQuery, WriteIntent, WriteOutcome,
};

/// The longest path accepted.
const PATH_MAX: usize = 4096;

/// Default bound on the previous text kept for a diff.
pub const DEFAULT_DIFF_MAX_BYTES: u64 = 10 << 20;

/// The host filesystem. Relative paths resolve against its working directory (a default
/// for resolution, not a boundary). Mutations of one target run one at a time, in order.
pub struct LocalFs {
    cwd: PathBuf,
    diff_max: u64,
    locks: Arc<LockMap>,
}

impl std::fmt::Debug for LocalFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalFs")
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl LocalFs {
    /// A provider resolving relative paths against `cwd`.
    pub fn new(cwd: impl Into<PathBuf>) -> LocalFs {
        LocalFs {
            cwd: cwd.into(),
            diff_max: DEFAULT_DIFF_MAX_BYTES,
            locks: Arc::default(),
        }
    }

    /// The directory relative paths are resolved against.
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// Keeps the previous text of a write for a diff only below `bytes`. Default 10 MiB.
    pub fn diff_max_bytes(mut self, bytes: u64) -> LocalFs {
        self.diff_max = bytes.max(1);
        self
    }

    /// Runs the blocking `f` off the async workers, holding the lock of `key` until `f`
    /// has finished: a caller that stops waiting (its future dropped) does not let another
    /// write of `key` start while `f` still runs. The lock entry goes once nobody holds
    /// it, whichever side lets go last.
    pub(crate) async fn locked<T: Send + 'static>(
        &self,
        key: &Path,
        f: impl FnOnce() -> Result<T, HarnessError> + Send + 'static,
    ) -> Result<T, HarnessError> {
        let mine = LockUse::take(&self.locks, key);
        let held = mine.lock().lock_owned().await;
        let theirs = LockUse::take(&self.locks, key);
        blocking(move || {
            let out = f();
            drop(held);
            drop(theirs);
            out
        })
        .await
    }

    /// The number of targets with a lock entry (for tests: zero once everything drained).
    pub fn lock_entries(&self) -> usize {
        self.locks.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub(crate) fn diff_max(&self) -> u64 {
        self.diff_max
    }
}

/// The per-target write locks, by key.
type LockMap = Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>;

/// One use of a target's lock entry; the entry is forgotten when the last use ends (only
/// the map holds it then).
struct LockUse {
    locks: Arc<LockMap>,
    key: PathBuf,
    /// Let go of under the map's lock (so two uses ending at once cannot both see the
    /// other and leave the entry behind).
    lock: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl LockUse {
    /// A use of `key`'s entry in `locks`, made if missing.
    fn take(locks: &Arc<LockMap>, key: &Path) -> LockUse {
        let lock = locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_path_buf())
            .or_default()
            .clone();
        LockUse {
            locks: locks.clone(),
            key: key.to_path_buf(),
            lock: Some(lock),
        }
    }

    /// The lock this use holds an entry of.
    fn lock(&self) -> Arc<tokio::sync::Mutex<()>> {
        // Some until the use is dropped.
        self.lock
            .clone()
            .expect("a lock use holds its lock until dropped")
    }
}

impl Drop for LockUse {
    fn drop(&mut self) {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        drop(self.lock.take());
        // Only the map's is left: nobody else uses or waits for the lock.
        if locks
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(&self.key);
        }
    }
}

/// Runs blocking file work off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, HarnessError> + Send + 'static,
) -> Result<T, HarnessError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| match e.try_into_panic() {
            Ok(payload) => HarnessError::panicked("the file worker", payload.as_ref()),
            Err(e) => HarnessError::internal(format!(
            "the file worker was cancelled before it finished ({e}); the runtime is shutting down"
        )),
        })?
}

/// Lexical absolute form: `cwd.join(path)` with `.` and `..` folded.
pub(crate) fn lexical(cwd: &Path, path: &Path) -> PathBuf {
    dsh_core::path::fold_dots(&cwd.join(path))
}

/// Checks a model-supplied path string.
pub(crate) fn check_path(path: &str) -> Result<(), HarnessError> {
    if path.trim().is_empty() {
        return Err(fs_error(
            ErrorCode::FsNotFound,
            "file_path must be a non-empty string".into(),
        ));
    }
    if path.contains('\0') {
        return Err(fs_error(
            ErrorCode::FsNotFound,
            "file_path must not contain a NUL byte".into(),
        ));
    }
    if path.len() > PATH_MAX {
        return Err(fs_error(
            ErrorCode::FsNotFound,
            format!(
                "file_path is {} bytes long; the limit is {PATH_MAX}",
                path.len()
            ),
        ));
    }
    Ok(())
}

/// The stable key of `display` (absolute, folded). See [`FsTarget::key`].
pub(crate) fn key_of(display: &Path) -> Result<PathBuf, HarnessError> {
    let not_dir = || {
        fs_error(
            ErrorCode::FsNotFound,
            format!(
                "cannot resolve \"{}\": a parent path segment is not a directory",
                display.display()
            ),
        )
    };
    match std::fs::canonicalize(display) {
        Ok(k) => return Ok(k),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {
            return Err(not_dir())
        }
        Err(_) => {}
    }
    // A dangling link is its own key (under its canonical parent).
    if std::fs::symlink_metadata(display).is_ok() {
        if let (Some(parent), Some(name)) = (display.parent(), display.file_name()) {
            return Ok(std::fs::canonicalize(parent)
                .unwrap_or_else(|_| parent.to_path_buf())
                .join(name));
        }
    }
    let mut missing = Vec::new();
    let mut at = display.to_path_buf();
    loop {
        match std::fs::canonicalize(&at) {
            Ok(real) => {
                if !real.is_dir() {
                    return Err(not_dir());
                }
                let mut key = real;
                for m in missing.iter().rev() {
                    key.push(m);
                }
                return Ok(key);
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {
                return Err(not_dir())
            }
            Err(_) => {}
        }
        match (at.file_name().map(OsStr::to_os_string), at.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                at = parent.to_path_buf();
            }
            _ => return Ok(display.to_path_buf()),
        }
    }
}

fn kind_of(mode: u32) -> FsKind {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => FsKind::File,
        FileType::Directory => FsKind::Directory,
        FileType::Symlink => FsKind::Symlink,
        _ => FsKind::Other,
    }
}

fn info_of(st: &rustix::fs::Stat) -> FsInfo {
    let kind = kind_of(st.st_mode);
    FsInfo {
        version: version_of(st),
        kind,
        size: (kind == FsKind::File).then_some(st.st_size as u64),
    }
}

pub(crate) fn stat_path(path: &Path, follow: bool) -> Result<Option<FsInfo>, HarnessError> {
    let r = if follow {
        rustix::fs::stat(path)
    } else {
        rustix::fs::lstat(path)
    };
    match r {
        Ok(st) => Ok(Some(info_of(&st))),
        Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) => Ok(None),
        Err(e) => Err(crate::os_error("stat", path, e.into())),
    }
}

/// Reads a regular file at `key` whole, at most `max` bytes; never opens anything that
/// could block (a FIFO is opened non-blocking and refused).
pub(crate) fn read_file(
    key: &Path,
    display: &Path,
    max: u64,
) -> Result<(Vec<u8>, FsVersion), HarnessError> {
    let d = display.display();
    let fd = open_for_read(key, display)?;
    let st = rustix::fs::fstat(&fd).map_err(|e| crate::os_error("read", display, e.into()))?;
    if kind_of(st.st_mode) != FsKind::File {
        return Err(fs_error(
            ErrorCode::FsNotRegularFile,
            format!("cannot read \"{d}\": not a regular file"),
        ));
    }
    if st.st_size as u64 > max {
        return Err(fs_error(
            ErrorCode::FsTooLarge,
            format!(
                "cannot read \"{d}\": {} bytes exceeds the {max}-byte limit",
                st.st_size
            ),
        ));
    }
    let mut buf = Vec::with_capacity(usize::try_from(st.st_size).unwrap_or(0).min(1 << 20));
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| crate::os_error("read", display, e))?;
    if buf.len() as u64 > max {
        return Err(fs_error(
            ErrorCode::FsTooLarge,
            format!("cannot read \"{d}\": content exceeds the {max}-byte limit"),
        ));
    }
    Ok((buf, version_of(&st)))
}

pub(crate) fn to_text(bytes: Vec<u8>, display: &Path) -> Result<String, HarnessError> {
    let d = display.display();
    if publish::looks_binary(&bytes) {
        return Err(fs_error(
            ErrorCode::FsNotText,
            format!("cannot read \"{d}\": binary file"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        fs_error(
            ErrorCode::FsNotText,
            format!("cannot read \"{d}\": invalid UTF-8 text"),
        )
    })
}

/// Opens (creating it and its missing ancestors) the parent directory of `key`.
fn open_parent(key: &Path, display: &Path) -> Result<(OwnedFd, std::ffi::OsString), HarnessError> {
    let (Some(parent), Some(name)) = (key.parent(), key.file_name()) else {
        return Err(fs_error(
            ErrorCode::FsNotRegularFile,
            format!("cannot write \"{}\": not a regular file", display.display()),
        ));
    };
    std::fs::create_dir_all(parent).map_err(|e| crate::os_error("write", display, e))?;
    let fd = rustix::fs::open(
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| crate::os_error("write", display, e.into()))?;
    Ok((fd, name.to_os_string()))
}

/// The reads themselves, with no policy: what the local provider does once a policy lets
/// it, and what the sandboxed one does once its read fence has.
impl LocalFs {
    pub(crate) async fn unfenced_bytes(
        &self,
        target: &FsTarget,
        max_bytes: u64,
    ) -> Result<(Vec<u8>, FsVersion), HarnessError> {
        let t = target.clone();
        blocking(move || read_file(&t.key, &t.display, max_bytes)).await
    }

    pub(crate) async fn unfenced_text(
        &self,
        target: &FsTarget,
        max_bytes: u64,
    ) -> Result<(String, FsVersion), HarnessError> {
        let t = target.clone();
        blocking(move || {
            let (bytes, v) = read_file(&t.key, &t.display, max_bytes)?;
            Ok((to_text(bytes, &t.display)?, v))
        })
        .await
    }

    pub(crate) async fn unfenced_lines(
        &self,
        target: &FsTarget,
        limits: crate::LineLimits,
        cancel: &dsh_core::CancelToken,
    ) -> Result<crate::LinesWindow, HarnessError> {
        let (t, cancel) = (target.clone(), cancel.clone());
        blocking(move || crate::lines::read_lines(&t.key, &t.display, limits, &cancel)).await
    }

    pub(crate) async fn unfenced_glob(
        &self,
        root: &FsTarget,
        query: &GlobQuery,
        cancel: &CancelToken,
    ) -> Result<GlobFound, HarnessError> {
        let (root, query, cancel) = (root.key.clone(), query.clone(), cancel.clone());
        blocking(move || crate::search::glob(&root, &query, &cancel)).await
    }
}

/// `SANDBOX_UNAVAILABLE` for a confined `policy`: the local provider fences nothing, so it
/// never reads or writes where a confined call asked (fail closed, never unconfined).
fn refuse_confined(
    policy: &SandboxPolicy,
    verb: &str,
    target: &FsTarget,
) -> Result<(), HarnessError> {
    if !policy.mode.is_confined() {
        return Ok(());
    }
    Err(HarnessError::new(
        ErrorCode::SandboxUnavailable,
        format!(
            "cannot {verb} \"{}\" under {} mode: this filesystem provider does not confine \
             (it is the local one); compose the sandboxed provider, or run in danger-full-access",
            target.display.display(),
            policy.mode
        ),
    ))
}

#[async_trait]
impl FileSystem for LocalFs {
    async fn target_of(&self, path: &str, cwd: Option<&Path>) -> Result<FsTarget, HarnessError> {
        check_path(path)?;
        let display = lexical(cwd.unwrap_or(&self.cwd), Path::new(path));
        let d = display.clone();
        let key = blocking(move || key_of(&d)).await?;
        Ok(FsTarget { key, display })
    }

    async fn stat(&self, target: &FsTarget) -> Result<Option<FsInfo>, HarnessError> {
        let key = target.key.clone();
        blocking(move || stat_path(&key, true)).await
    }

    async fn lstat(&self, path: &str, cwd: Option<&Path>) -> Result<Option<FsInfo>, HarnessError> {
        check_path(path)?;
        let p = lexical(cwd.unwrap_or(&self.cwd), Path::new(path));
        blocking(move || stat_path(&p, false)).await
    }

    async fn read_bytes(
        &self,
        target: &FsTarget,
        max_bytes: u64,
        policy: &SandboxPolicy,
    ) -> Result<(Vec<u8>, FsVersion), HarnessError> {
        refuse_confined(policy, "read", target)?;
        self.unfenced_bytes(target, max_bytes).await
    }

    async fn read_text(
        &self,
        target: &FsTarget,
        max_bytes: u64,
        policy: &SandboxPolicy,
    ) -> Result<(String, FsVersion), HarnessError> {
        refuse_confined(policy, "read", target)?;
        self.unfenced_text(target, max_bytes).await
    }

    async fn read_lines(
        &self,
        target: &FsTarget,
        limits: crate::LineLimits,
        policy: &SandboxPolicy,
        cancel: &dsh_core::CancelToken,
    ) -> Result<crate::LinesWindow, HarnessError> {
        refuse_confined(policy, "read", target)?;
        self.unfenced_lines(target, limits, cancel).await
    }

    async fn glob(
        &self,
        root: &FsTarget,
        query: &GlobQuery,
        policy: &SandboxPolicy,
        cancel: &CancelToken,
    ) -> Result<GlobFound, HarnessError> {
        refuse_confined(policy, "search", root)?;
        self.unfenced_glob(root, query, cancel).await
    }

    /// Every file is searched: this provider fences nothing.
    async fn grep(
        &self,
        root: &FsTarget,
        query: &GrepQuery,
        policy: &SandboxPolicy,
        cancel: &CancelToken,
    ) -> Result<GrepFound, HarnessError> {
        refuse_confined(policy, "search", root)?;
        let (root, query, cancel) = (root.key.clone(), query.clone(), cancel.clone());
        blocking(move || crate::search::grep(&root, &query, &Default::default(), &cancel)).await
    }

    async fn list_dir(&self, target: &FsTarget) -> Result<Vec<DirEntry>, HarnessError> {
        let t = target.clone();
        blocking(move || {
            let d = t.display.display().to_string();
            let meta =
                std::fs::metadata(&t.key).map_err(|e| crate::os_error("list", &t.display, e))?;
            if !meta.is_dir() {
                return Err(fs_error(
                    ErrorCode::FsNotDirectory,
                    format!("cannot list \"{d}\": not a directory"),
                ));
            }
            let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(&t.key)
                .map_err(|e| crate::os_error("list", &t.display, e))?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<_, _>>()
                .map_err(|e| crate::os_error("list", &t.display, e))?;
            names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            let mut out = Vec::with_capacity(names.len());
            for name in names {
                let key = t.key.join(&name);
                let info = stat_path(&key, true).ok().flatten();
                out.push(DirEntry {
                    name: name.to_string_lossy().into_owned(),
                    kind: info.as_ref().map_or(FsKind::Other, |i| i.kind),
                    target: FsTarget {
                        key,
                        display: t.display.join(&name),
                    },
                    version: info.as_ref().map(|i| i.version.clone()),
                    size: info.and_then(|i| i.size),
                });
            }
            Ok(out)
        })
        .await
    }

    async fn write_text(
        &self,
        target: &FsTarget,
        content: &str,
        intent: Option<WriteIntent>,
        policy: &SandboxPolicy,
    ) -> Result<WriteOutcome, HarnessError> {
        refuse_confined(policy, "write", target)?;
        let (t, content, diff_max) = (target.clone(), content.to_owned(), self.diff_max);
        self.locked(&target.key, move || {
            let (dir, name) = open_parent(&t.key, &t.display)?;
            publish::write(&dir, &name, &t.display, &content, intent.as_ref(), diff_max)
        })
        .await
    }

    async fn edit_text(
        &self,
        target: &FsTarget,
        edit: &EditRequest,
        expected: Option<&FsVersion>,
        policy: &SandboxPolicy,
    ) -> Result<EditOutcome, HarnessError> {
        refuse_confined(policy, "edit", target)?;
        let (t, edit, expected) = (target.clone(), edit.clone(), expected.cloned());
        self.locked(&target.key, move || {
            let (Some(parent), Some(name)) = (t.key.parent(), t.key.file_name()) else {
                return Err(fs_error(
                    ErrorCode::FsNotRegularFile,
                    format!(
                        "cannot edit \"{}\": not a regular file",
                        t.display.display()
                    ),
                ));
            };
            let dir = rustix::fs::open(
                parent,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|_| {
                fs_error(
                    ErrorCode::FsStaleVersion,
                    format!(
                        "cannot edit \"{}\": file changed since it was read",
                        t.display.display()
                    ),
                )
            })?;
            crate::edit::edit(&dir, name, &t.display, &edit, expected.as_ref())
        })
        .await
    }
}
