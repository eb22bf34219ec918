//! Files as the tools see them: stable identities, bounded reads, atomic writes and edits
//! guarded by versions, and a sandbox fence the kernel checks.
//!
//! [`FileSystem`] is the seam. A path is first made a target
//! ([`target_of`](FileSystem::target_of)), an [`FsTarget`]: the path as the caller
//! spelled it (made absolute, `..` folded) for messages, and a stable key (the canonical path; for a missing file, the canonical
//! nearest ancestor plus the missing rest) so that aliases of one file share one key.
//! Every read takes a byte limit (`FS_TOO_LARGE` past it; never an unbounded buffer).
//! Writes and edits publish atomically (a private staging file next to the target,
//! fsynced, renamed into place, the directory fsynced), one at a time per target, and can
//! be guarded by the [`FsVersion`] the caller last saw (`FS_STALE_VERSION` when the file
//! changed, checked again just before the rename) or be create-only (never replacing a
//! file that appeared meanwhile).
//!
//! Providers: [`LocalFs`] (the host, no policy) and [`SandboxedFs`] (the same, fenced by
//! each call's [`SandboxPolicy`]: writes only beneath the
//! writable roots, never into a protected path (nor where one leads through a symlink),
//! checked by the kernel with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` from the
//! root's directory fd and by the identity of each directory opened, so no symlink swap
//! between the check and the write can escape).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), dsh_core::HarnessError> {
//! use dsh_fs::{EditRequest, FileSystem, LocalFs};
//! use dsh_sandbox::SandboxPolicy;
//!
//! let dir = tempfile::tempdir().expect("tempdir");
//! let fs = LocalFs::new(dir.path());
//! let policy = SandboxPolicy::danger_full_access(dir.path());
//! let notes = fs.target_of("notes.txt", None).await?;
//! let written = fs.write_text(&notes, "alpha\nbeta\n", None, &policy).await?;
//! assert!(written.created);
//! // An edit guarded by the version last seen: a file changed meanwhile is refused.
//! let edit = EditRequest { old: "beta".into(), new: "gamma".into(), replace_all: false };
//! fs.edit_text(&notes, &edit, Some(&written.version), &policy).await?;
//! let (text, _) = fs.read_text(&notes, 1 << 20, &policy).await?;
//! assert_eq!(text, "alpha\ngamma\n");
//! let stale = fs.edit_text(&notes, &edit, Some(&written.version), &policy).await;
//! assert_eq!(stale.unwrap_err().code(), dsh_core::ErrorCode::FsStaleVersion);
//! # Ok(()) }
//! ```
//!
//! # Reads
//! Every read of content ([`read_bytes`](FileSystem::read_bytes),
//! [`read_text`](FileSystem::read_text), [`read_lines`](FileSystem::read_lines),
//! [`glob`](FileSystem::glob), [`grep`](FileSystem::grep)) takes the call's
//! [`SandboxPolicy`], as writes do: read denial travels with the policy.
//! [`SandboxedFs`] refuses (`FS_SANDBOX_DENIED`) what the policy's
//! [read fence](SandboxPolicy::read_fence) denies, in every mode, and `/proc` and `/dev`;
//! a search never opens such a file nor lists it. [`LocalFs`] fences nothing, so it
//! refuses a confined policy (`SANDBOX_UNAVAILABLE`). Metadata (`stat`, `lstat`,
//! `list_dir`) takes no policy.
//!
//! # Guarantees
//! - A write or an edit either lands whole or leaves the file as it was, with no staging
//!   file left behind; a reader never sees half a write.
//! - A guarded write or edit never replaces a file that changed after the version it
//!   names, nor one replaced by another file meanwhile (`FS_STALE_VERSION`).
//! - Memory is bounded by the limits each call passes, whatever the file's size: a line
//!   window and an LF edit are streamed.
//! - [`SandboxedFs`] writes only where its call's policy lets a confined command write,
//!   and reads nothing a confined command could not (read denial, the closed homes), nor
//!   `/proc` and `/dev`.
//!
//! # Limits
//! - Linux and macOS; the kernel-checked containment needs `openat2` (Linux 5.6): without
//!   it, writes under workspace-write are refused.
//! - An edit reads at most 256 MiB of a file that is not plain LF text.
//!
//! # Errors
//! The `FS_*` codes of [`dsh_core::ErrorCode`], each with a message naming the path as
//! the caller spelled it.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use dsh_core::{CancelToken, ErrorCode, HarnessError};
use dsh_sandbox::SandboxPolicy;

mod edit;
mod lines;
mod local;
pub mod observations;
mod open;
mod publish;
mod sandboxed;
pub mod search;
mod stream_edit;

pub use local::LocalFs;
pub use open::open_no_symlinks;
pub use sandboxed::SandboxedFs;
pub use search::{GlobFound, GlobQuery, GrepFound, GrepMatch, GrepQuery};

/// Bytes of a file examined for a NUL to call it binary.
pub const BINARY_SAMPLE: usize = 8192;

/// Bytes a line window reads past its last line to count the rest of the file's lines
/// (about: reads are 64 KiB); a longer rest leaves the total a [`TotalLines::AtLeast`].
pub const COUNT_AHEAD: u64 = 1 << 20;

/// A resolved path. See the [crate docs](crate).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FsTarget {
    key: PathBuf,
    display: PathBuf,
}

impl FsTarget {
    /// The stable identity: canonical path of the file (or of its nearest existing
    /// ancestor, plus the missing rest). Aliases of one file have one key.
    pub fn key(&self) -> &Path {
        &self.key
    }

    /// The path as the caller spelled it, absolute with `..` folded: for messages.
    pub fn display(&self) -> &Path {
        &self.display
    }
}

/// An opaque version of a file (`dev:ino:size:mtime_ns:ctime_ns`): equal versions mean
/// the file was not replaced or written in between. Compare; never parse.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FsVersion(pub(crate) String);

impl FsVersion {
    /// The token as text (for logs and tool metadata).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A version from its text (as logged earlier).
    pub fn from_token(token: impl Into<String>) -> FsVersion {
        FsVersion(token.into())
    }
}

/// What is at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (only from [`FileSystem::lstat`]).
    Symlink,
    /// Anything else (a device, a FIFO, a socket, a broken link in a listing).
    Other,
}

/// Metadata of a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsInfo {
    /// Its version.
    pub version: FsVersion,
    /// What it is.
    pub kind: FsKind,
    /// Its size, for a file.
    pub size: Option<u64>,
}

/// One child in a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Its name.
    pub name: String,
    /// What it is (following links; a broken link is [`FsKind::Other`]).
    pub kind: FsKind,
    /// Its target.
    pub target: FsTarget,
    /// Its version (absent for a broken link).
    pub version: Option<FsVersion>,
    /// Its size, for a file.
    pub size: Option<u64>,
}

/// The condition a write is published under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteIntent {
    /// Only if nothing is there (not even a file created since the caller looked):
    /// `FS_NOT_OBSERVED` otherwise.
    CreateIfAbsent,
    /// Only if the file is still at this version until it is replaced: `FS_STALE_VERSION`
    /// otherwise (also when it vanished; it is never recreated).
    ReplaceIfVersion(FsVersion),
}

/// The result of a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Whether the file was created (else replaced).
    pub created: bool,
    /// The version now on disk.
    pub version: FsVersion,
    /// The previous text with `\r\n` as `\n`, when there was a previous text file under
    /// the diff limit; else `None`.
    pub before: Option<String>,
    /// The new text with `\r\n` as `\n` (the bytes on disk are the content verbatim).
    pub after: String,
}

/// A literal replacement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EditRequest {
    /// The text to find (non-empty; `\r\n` matches as `\n`).
    pub old: String,
    /// Its replacement (literal).
    pub new: String,
    /// Replace every occurrence; else exactly one must exist.
    pub replace_all: bool,
}

/// The result of an edit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EditOutcome {
    /// The version now on disk.
    pub version: FsVersion,
    /// The line (1-based) where `before` and `after` start.
    pub first_line: usize,
    /// The lines the replacements touched, before (`\r\n` as `\n`): from the start of the
    /// line of the first occurrence to the end of the line of the last.
    pub before: String,
    /// The same lines after the edit.
    pub after: String,
    /// How many occurrences were replaced.
    pub replaced: usize,
}

/// What a window of lines is cut to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineLimits {
    /// The first line to return (1-based).
    pub offset: u64,
    /// At most this many lines.
    pub limit: u64,
    /// Characters kept of one line; a longer one is cut and marked.
    pub max_line_chars: usize,
    /// Bytes of the returned lines together (text plus one per line break); the window
    /// stops before the line that would pass it.
    pub max_bytes: usize,
}

/// How many lines a file has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TotalLines {
    /// Exactly this many: the file was read to its end.
    Exact(u64),
    /// At least this many: the file was not read to its end (see
    /// [`FileSystem::read_lines`]); more may follow.
    AtLeast(u64),
}

impl TotalLines {
    /// The count: exact, or the lower bound.
    pub fn count(self) -> u64 {
        match self {
            TotalLines::Exact(n) | TotalLines::AtLeast(n) => n,
        }
    }
}

/// A window of a text file's lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinesWindow {
    /// `(line number, text)`, the text without its line break (and without a `\r`
    /// before it), cut to the character limit with `... (line truncated to N chars)`.
    pub lines: Vec<(u64, String)>,
    /// Lines in the whole file, or a lower bound (a final line break does not start
    /// another line).
    pub total_lines: TotalLines,
    /// Whether the byte limit stopped the window early.
    pub truncated_by_bytes: bool,
    /// The file's version when it was opened.
    pub version: FsVersion,
}

/// The filesystem seam. See the [crate docs](crate).
#[async_trait]
pub trait FileSystem: Send + Sync {
    /// The target `path` names (relative ones against `cwd`, else the provider's working
    /// directory).
    ///
    /// # Errors
    /// `FS_NOT_FOUND` for an empty path, a path with a NUL byte, a path longer than
    /// `PATH_MAX`, or a path through a regular file.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing; work already on a blocking thread finishes there
    /// and its answer is discarded.
    async fn target_of(&self, path: &str, cwd: Option<&Path>) -> Result<FsTarget, HarnessError>;

    /// Metadata, following links; `None` when nothing is there.
    ///
    /// # Errors
    /// `FS_IO_ERROR`, `FS_PERMISSION_DENIED`.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing; work already on a blocking thread finishes there
    /// and its answer is discarded.
    async fn stat(&self, target: &FsTarget) -> Result<Option<FsInfo>, HarnessError>;

    /// Metadata of the path itself (a link is [`FsKind::Symlink`]); `None` when nothing
    /// is there.
    ///
    /// # Errors
    /// As [`target_of`](Self::target_of) and [`stat`](Self::stat).
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing; work already on a blocking thread finishes there
    /// and its answer is discarded.
    async fn lstat(&self, path: &str, cwd: Option<&Path>) -> Result<Option<FsInfo>, HarnessError>;

    /// The whole file as bytes, at most `max_bytes` (inclusive), if the call's `policy`
    /// lets it be read (see [Reads](crate#reads)).
    ///
    /// # Errors
    /// `FS_SANDBOX_DENIED`, `SANDBOX_UNAVAILABLE` (see [Reads](crate#reads)), `FS_NOT_FOUND`, `FS_NOT_REGULAR_FILE` (directories, FIFOs, devices: never
    /// opened, so nothing blocks), `FS_TOO_LARGE` (also when the file grows past the limit
    /// while read), `FS_PERMISSION_DENIED`, `FS_IO_ERROR`.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing; work already on a blocking thread finishes there
    /// and its answer is discarded.
    async fn read_bytes(
        &self,
        target: &FsTarget,
        max_bytes: u64,
        policy: &SandboxPolicy,
    ) -> Result<(Vec<u8>, FsVersion), HarnessError>;

    /// The whole file as UTF-8 text, at most `max_bytes`, if `policy` lets it be read.
    ///
    /// # Errors
    /// As [`read_bytes`](Self::read_bytes), and `FS_NOT_TEXT` for a NUL in the first
    /// [`BINARY_SAMPLE`] bytes or invalid UTF-8.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing; work already on a blocking thread finishes there
    /// and its answer is discarded.
    async fn read_text(
        &self,
        target: &FsTarget,
        max_bytes: u64,
        policy: &SandboxPolicy,
    ) -> Result<(String, FsVersion), HarnessError>;

    /// A window of lines of a text file, streamed: memory follows the window, not the
    /// file (a line is buffered only up to its character limit), and so does time: the
    /// file is read to the window's end, then about [`COUNT_AHEAD`] more bytes to count
    /// lines. A cut line is not read to its end when it is the window's last; the window
    /// ends in it when it goes on [`COUNT_AHEAD`] bytes past its cut. `cancel` is checked
    /// before each read.
    ///
    /// # Errors
    /// As [`read_text`](Self::read_text) (`FS_NOT_TEXT` for invalid UTF-8 anywhere in the
    /// bytes read), `FS_NOT_FOUND` for an offset past the last line, `FS_ABORTED` once
    /// `cancel` is cancelled.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing; work already on a blocking thread stops at its next
    /// read once `cancel` fires, else finishes there; its answer is discarded.
    async fn read_lines(
        &self,
        target: &FsTarget,
        limits: LineLimits,
        policy: &SandboxPolicy,
        cancel: &CancelToken,
    ) -> Result<LinesWindow, HarnessError>;

    /// The children of a directory, sorted by name.
    ///
    /// # Errors
    /// `FS_NOT_FOUND`, `FS_NOT_DIRECTORY`, `FS_PERMISSION_DENIED`, `FS_IO_ERROR`.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing; work already on a blocking thread finishes there
    /// and its answer is discarded.
    async fn list_dir(&self, target: &FsTarget) -> Result<Vec<DirEntry>, HarnessError>;

    /// The files beneath `root` (a directory, or a file) whose path matches `query`, as
    /// [`search`] finds them: ignore files honoured, hidden files included, VCS
    /// directories never entered, oldest first; none that `policy` keeps from being read
    /// (see [Reads](crate#reads)).
    ///
    /// # Errors
    /// `FS_SANDBOX_DENIED` for a root `policy` keeps from being read,
    /// `SANDBOX_UNAVAILABLE`, `SEARCH_INVALID_PATTERN`, `SEARCH_ABORTED` once `cancel` fires,
    /// `SEARCH_RAW_OUTPUT_OVERFLOW`.
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing. Dropping the future does not stop a search already
    /// on a blocking thread (it ends within its bounds); cancel `cancel` to stop it.
    async fn glob(
        &self,
        root: &FsTarget,
        query: &GlobQuery,
        policy: &SandboxPolicy,
        cancel: &CancelToken,
    ) -> Result<GlobFound, HarnessError>;

    /// The lines beneath `root` matching `query`, as [`search`] finds them: hidden and
    /// binary files skipped, and every file `policy` keeps from being read never opened.
    ///
    /// # Errors
    /// As [`glob`](Self::glob).
    ///
    /// # Cancel safety
    /// Cancel safe: it changes nothing. Dropping the future does not stop a search already
    /// on a blocking thread (it ends within its bounds); cancel `cancel` to stop it.
    async fn grep(
        &self,
        root: &FsTarget,
        query: &GrepQuery,
        policy: &SandboxPolicy,
        cancel: &CancelToken,
    ) -> Result<GrepFound, HarnessError>;

    /// Writes `content` atomically under `intent` (`None`: create or overwrite) and the
    /// call's `policy`, resolved by the caller: there is no default. A provider that
    /// cannot confine refuses a confined mode (`SANDBOX_UNAVAILABLE`).
    ///
    /// # Errors
    /// `FS_NOT_REGULAR_FILE`, `FS_STALE_VERSION`, `FS_NOT_OBSERVED`, `FS_SANDBOX_DENIED`,
    /// `FS_PERMISSION_DENIED`, `FS_IO_ERROR`. On any error the target is unchanged and no
    /// staging file is left.
    ///
    /// # Cancel safety
    /// Not cancel safe once started: the write goes on on its blocking thread and lands
    /// whole or not at all, holding the target's lock until it ends (a later write or edit
    /// of the target waits for it); dropping the future loses only the outcome.
    async fn write_text(
        &self,
        target: &FsTarget,
        content: &str,
        intent: Option<WriteIntent>,
        policy: &SandboxPolicy,
    ) -> Result<WriteOutcome, HarnessError>;

    /// Replaces text in a file atomically, checking `expected` (when given) before
    /// looking for the text. Only the occurrences change: every other byte is kept (line
    /// breaks, a UTF-8 BOM), and the new text's line breaks become `\r\n` in a file
    /// where `\r\n` outnumbers lone `\n` in the first 4096 characters. An LF file is
    /// streamed (memory follows the lines touched, not the file; the unchanged ranges are
    /// copied by the kernel). The file must not change, nor be replaced, from the moment
    /// it is opened until the new one is renamed over it (`FS_STALE_VERSION`).
    ///
    /// # Errors
    /// `FS_STALE_VERSION` (also for a missing file), `FS_NOT_REGULAR_FILE`,
    /// `FS_NOT_TEXT` (a NUL anywhere, invalid UTF-8), `FS_EDIT_NOT_FOUND`,
    /// `FS_AMBIGUOUS_EDIT`, `FS_TOO_LARGE`, `FS_SANDBOX_DENIED`, `FS_IO_ERROR`.
    ///
    /// # Cancel safety
    /// Not cancel safe once started: the edit goes on on its blocking thread and lands
    /// whole or not at all, holding the target's lock until it ends (a later write or edit
    /// of the target waits for it); dropping the future loses only the outcome.
    async fn edit_text(
        &self,
        target: &FsTarget,
        edit: &EditRequest,
        expected: Option<&FsVersion>,
        policy: &SandboxPolicy,
    ) -> Result<EditOutcome, HarnessError>;
}

pub(crate) fn fs_error(code: ErrorCode, message: String) -> HarnessError {
    HarnessError::new(code, message)
}

/// Maps an OS error of an operation on `display` to an `FS_*` error.
pub(crate) fn os_error(verb: &str, display: &Path, e: std::io::Error) -> HarnessError {
    use std::io::ErrorKind;
    let d = display.display();
    let (code, what) = match (e.kind(), e.raw_os_error()) {
        (ErrorKind::NotFound, _) => (ErrorCode::FsNotFound, "not found".to_owned()),
        (ErrorKind::PermissionDenied, _) => (
            ErrorCode::FsPermissionDenied,
            "permission denied".to_owned(),
        ),
        (_, Some(libc_enotdir)) if libc_enotdir == rustix::io::Errno::NOTDIR.raw_os_error() => (
            ErrorCode::FsNotFound,
            "a parent path segment is not a directory".to_owned(),
        ),
        _ => (ErrorCode::FsIoError, e.to_string()),
    };
    HarnessError::new(code, format!("cannot {verb} \"{d}\": {what}")).with_source(e)
}

/// `\r\n` → `\n` (a lone `\r` stays).
pub(crate) fn to_lf(s: &str) -> String {
    if s.contains('\r') {
        s.replace("\r\n", "\n")
    } else {
        s.to_owned()
    }
}
