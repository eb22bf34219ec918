//! What a check after a command could not set aside, remembered for the user across dsh
//! processes: a `dsh tool` call, a `dsh exec` or another agent session on the same
//! workspace must not run a workspace-write command there while it remains.
//!
//! One record per thing, in the state directory's `unsettled` area ([`crate::state_dir`]):
//! a file under a random name holding its kind and its path. Records are written whole
//! under a hidden name and then renamed, so a reader never sees half of one. Where there is
//! no state directory, the records live in this process only.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// What a record is: how the check acts on it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A hooks folder a git config names.
    HooksDir,
    /// Anything else the check finds (a git dir, a `.git` entry, tool settings).
    Entry,
    /// A root whose walk after a command stopped short: what was there before it (its
    /// git dirs and the `.git` entries and tool settings it protected) is kept with the
    /// record, so that what the command made is told apart once a walk is whole again.
    Baseline,
}

impl Kind {
    fn tag(self) -> &'static [u8] {
        match self {
            Kind::HooksDir => b"hooks\n",
            Kind::Entry => b"entry\n",
            Kind::Baseline => b"baseline\n",
        }
    }
}

fn area() -> Option<&'static OwnedFd> {
    static DIR: OnceLock<Option<OwnedFd>> = OnceLock::new();
    DIR.get_or_init(|| dsh_sandbox::state_dir::open("unsettled"))
        .as_ref()
}

/// A record kept in memory: path, kind, and a baseline's list.
type Record = (PathBuf, Kind, Vec<PathBuf>);

/// The records of a process without a state directory, locked.
fn memory() -> std::sync::MutexGuard<'static, Vec<Record>> {
    static MEMORY: Mutex<Vec<Record>> = Mutex::new(Vec::new());
    MEMORY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Remembers `path` (absolute) as not set aside.
pub(crate) fn remember(path: &Path, kind: Kind) {
    remember_with(path, kind, &[]);
}

/// Remembers the root `path` as walked short after a command, with `baseline`: what was
/// there before it (see [`Kind::Baseline`]). A record there already is kept (its baseline
/// is the older, so the truer one).
pub(crate) fn remember_baseline(path: &Path, baseline: &[PathBuf]) {
    remember_with(path, Kind::Baseline, baseline);
}

/// The baseline kept with the record of the root `path`, if there is one.
pub(crate) fn baseline(path: &Path) -> Option<Vec<PathBuf>> {
    let Some(dir) = area() else {
        return memory()
            .iter()
            .find(|(p, k, _)| p == path && *k == Kind::Baseline)
            .map(|(_, _, list)| list.clone());
    };
    records(dir)
        .into_iter()
        .find(|r| r.1 == path && r.2 == Kind::Baseline)
        .and_then(|(name, _, _)| read_record(dir, &name))
        .map(|(_, _, list)| list)
}

fn remember_with(path: &Path, kind: Kind, list: &[PathBuf]) {
    let Some(dir) = area() else {
        let mut m = memory();
        if !m.iter().any(|(p, k, _)| p == path && *k == kind) {
            m.push((path.to_path_buf(), kind, list.to_vec()));
        }
        return;
    };
    if records(dir).iter().any(|(_, p, k)| p == path && *k == kind) {
        return;
    }
    let name = dsh_core::spill::random_hex(16);
    let (Ok(tmp), Ok(to)) = (
        std::ffi::CString::new(format!(".{name}")),
        std::ffi::CString::new(name),
    ) else {
        return;
    };
    let Ok(f) =
        dsh_sandbox::nofollow::open_at(dir, &tmp, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL)
    else {
        return;
    };
    let mut bytes = kind.tag().to_vec();
    bytes.extend_from_slice(path.as_os_str().as_bytes());
    for p in list {
        bytes.push(0);
        bytes.extend_from_slice(p.as_os_str().as_bytes());
    }
    if std::io::Write::write_all(&mut std::fs::File::from(f), &bytes).is_ok() {
        // SAFETY: renameat(2) within our directory fd, valid C strings.
        unsafe {
            libc::renameat(dir.as_raw_fd(), tmp.as_ptr(), dir.as_raw_fd(), to.as_ptr());
        }
    } else {
        // SAFETY: unlinkat(2) within our directory fd, a valid C string.
        unsafe {
            libc::unlinkat(dir.as_raw_fd(), tmp.as_ptr(), 0);
        }
    }
}

/// Forgets the record of `kind` of `path` (set aside, or settled).
pub(crate) fn forget_kind(path: &Path, kind: Kind) {
    forget_where(path, Some(kind));
}

/// Forgets `path` (gone), whatever its records.
pub(crate) fn forget(path: &Path) {
    forget_where(path, None);
}

/// Forgets the records of `path` of `kind` (any kind: `None`).
fn forget_where(path: &Path, kind: Option<Kind>) {
    let of = |p: &Path, k: Kind| p == path && kind.is_none_or(|want| want == k);
    let Some(dir) = area() else {
        memory().retain(|(p, k, _)| !of(p, *k));
        return;
    };
    for (name, p, k) in records(dir) {
        if of(&p, k) {
            if let Ok(c) = std::ffi::CString::new(name.into_vec()) {
                // SAFETY: unlinkat(2) within our directory fd, a valid C string.
                unsafe {
                    libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0);
                }
            }
        }
    }
}

/// What is remembered at `root` or beneath it and still exists, one entry per path.
/// Records of paths that are gone are dropped.
pub(crate) fn beneath(root: &Path) -> Vec<(PathBuf, Kind)> {
    let all: Vec<(PathBuf, Kind)> = match area() {
        Some(dir) => records(dir).into_iter().map(|(_, p, k)| (p, k)).collect(),
        None => memory().iter().map(|(p, k, _)| (p.clone(), *k)).collect(),
    };
    let mut out: Vec<(PathBuf, Kind)> = Vec::new();
    for (p, kind) in all {
        if !p.starts_with(root) || out.iter().any(|(q, k)| *q == p && *k == kind) {
            continue;
        }
        if std::fs::symlink_metadata(&p).is_err() {
            forget(&p);
            continue;
        }
        out.push((p, kind));
    }
    out
}

/// The largest record read (a baseline lists a root's git dirs and tool settings).
const MAX_RECORD_BYTES: u64 = 16 << 20;

/// Every record: `(file name, path, kind)`. At most a few thousand are read (a record is
/// only made when setting aside failed).
fn records(dir: &OwnedFd) -> Vec<(OsString, PathBuf, Kind)> {
    const MAX_RECORDS: usize = 4096;
    let Ok(entries) = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten().take(MAX_RECORDS) {
        let name = e.file_name();
        if name.as_bytes().starts_with(b".") {
            continue;
        }
        if let Some((path, kind, _)) = read_record(dir, &name) {
            out.push((name, path, kind));
        }
    }
    out
}

/// The record `name`: its path, kind and (for a baseline) list.
fn read_record(dir: &OwnedFd, name: &OsString) -> Option<(PathBuf, Kind, Vec<PathBuf>)> {
    let c = std::ffi::CString::new(name.as_bytes()).ok()?;
    let f = dsh_sandbox::nofollow::open_at(dir, &c, libc::O_RDONLY | libc::O_NONBLOCK).ok()?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::fs::File::from(f), MAX_RECORD_BYTES),
        &mut bytes,
    )
    .ok()?;
    let (kind, rest) = [Kind::HooksDir, Kind::Entry, Kind::Baseline]
        .into_iter()
        .find_map(|k| bytes.strip_prefix(k.tag()).map(|rest| (k, rest)))?;
    let mut parts = rest.split(|b| *b == 0);
    let path = PathBuf::from(OsString::from_vec(parts.next()?.to_vec()));
    let list = parts
        .map(|p| PathBuf::from(OsString::from_vec(p.to_vec())))
        .collect();
    path.is_absolute().then_some((path, kind, list))
}
