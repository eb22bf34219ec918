//! The one error type of dsh and its stable codes.

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;

/// What went wrong, as a stable code a program can match on.
///
/// The string form ([`ErrorCode::as_str`]) is an interface: it appears in tool results, in
/// the session log and in `dsh exec --json`, and never changes for an existing variant.
/// New variants may be added, so match with a wildcard arm.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// A request value is out of range or malformed (an empty argv, a grace of 0, a
    /// non-positive timeout). Nothing was started. Fix the value named in the message.
    /// `as_str()`: `INVALID_ARGUMENT`.
    InvalidArgument,
    /// A configuration value is invalid (a zero byte budget, a grace above the timer
    /// limit). The last good configuration stays in force. Fix the named field.
    /// `as_str()`: `CONFIG_INVALID`.
    ConfigInvalid,
    /// The call was cancelled (by its caller, the client, or the end of its connection)
    /// after its tool's body started: what the call itself was running was stopped (a
    /// background job it started goes on), what it changed stays, and the check after the
    /// call still ran. A call cancelled before its body
    /// started is [`AbortedBeforeDispatch`](Self::AbortedBeforeDispatch). Retry if still
    /// wanted. `as_str()`: `ABORTED`.
    Aborted,
    /// The working directory of a command does not exist, is not a directory, or cannot be
    /// entered. Nothing ran. Pass an existing directory.
    /// `as_str()`: `PROCESS_CWD_INVALID`.
    ProcessCwdInvalid,
    /// The program of a command was not found (not on `PATH`, or a missing absolute path).
    /// Nothing ran. Install it or give its absolute path.
    /// `as_str()`: `PROCESS_NOT_FOUND`.
    ProcessNotFound,
    /// The program exists but cannot be executed (a directory, no execute permission, a bad
    /// interpreter line). Nothing ran. `as_str()`: `PROCESS_NOT_EXECUTABLE`.
    ProcessNotExecutable,
    /// The operating system refused to start the process for another reason (out of
    /// processes or file descriptors, a pipe could not be made). Nothing ran; the `source`
    /// carries the OS error. `as_str()`: `PROCESS_SPAWN_FAILED`.
    ProcessSpawnFailed,
    /// A second provider was installed for a seam that already has one.
    /// `as_str()`: `DUPLICATE_SERVICE`.
    DuplicateService,
    /// A confined mode was asked for but this machine cannot enforce it; the command was
    /// not run unconfined. The message says what is missing and how to get it (the same
    /// advice `dsh doctor` prints). `as_str()`: `SANDBOX_UNAVAILABLE`.
    SandboxUnavailable,
    /// A `DSH_*` environment contributor is malformed or returned something it did not
    /// declare. Fix the contributor named in the message. `as_str()`: `SHELL_ENV_INVALID`.
    ShellEnvInvalid,
    /// A sandbox escalation request is malformed (`sandbox_permissions` without a
    /// justification, or the reverse) or asks for a mode that is not strictly wider than
    /// the call's. No human was asked. Fix the arguments. `as_str()`: `ESCALATION_INVALID`.
    EscalationInvalid,
    /// The human rejected the request. Do not retry the same request; change the approach.
    /// `as_str()`: `APPROVAL_REJECTED`.
    ApprovalRejected,
    /// The approval was cancelled before anyone answered (the call was cancelled).
    /// `as_str()`: `APPROVAL_CANCELLED`.
    ApprovalCancelled,
    /// No approval channel can answer (none configured, no terminal, the client cannot
    /// elicit). Nothing ran; configure an approval policy or answerer.
    /// `as_str()`: `APPROVAL_UNAVAILABLE`.
    ApprovalUnavailable,
    /// A stored unit was written with another schema version than the one asked for. The
    /// data was not touched. `as_str()`: `STORAGE_VERSION_MISMATCH`.
    StorageVersionMismatch,
    /// Stored data cannot be read back (not dsh's format, a corrupt record). The message
    /// names the file or table. `as_str()`: `STORAGE_MALFORMED`.
    StorageMalformed,
    /// The store or unit was closed; reopen it. `as_str()`: `STORAGE_CLOSED`.
    StorageClosed,
    /// No session has this id (`dsh session list` shows them). `as_str()`:
    /// `SESSION_NOT_FOUND`.
    SessionNotFound,
    /// No tool has this name. `as_str()`: `UNKNOWN_TOOL`.
    UnknownTool,
    /// A tool's arguments do not match its schema or its rules; the message lists what is
    /// wrong. Nothing ran. `as_str()`: `INVALID_ARGS`.
    InvalidArgs,
    /// The tool call was cancelled before its body started; nothing ran.
    /// `as_str()`: `ABORTED_BEFORE_DISPATCH`.
    AbortedBeforeDispatch,
    /// A policy hook or guard refused the tool call, or its approval was not given; the
    /// message says why. Nothing ran. `as_str()`: `TOOL_DENIED`.
    ToolDenied,
    /// The file or directory does not exist (or a path segment is a file). Check the path. `as_str()`: `FS_NOT_FOUND`.
    FsNotFound,
    /// A directory was expected; the path is something else. `as_str()`: `FS_NOT_DIRECTORY`.
    FsNotDirectory,
    /// The file is binary (a NUL byte) or not valid UTF-8 text; use a byte-level tool. `as_str()`: `FS_NOT_TEXT`.
    FsNotText,
    /// A regular file was expected (the path is a directory, a device, a FIFO, …). `as_str()`: `FS_NOT_REGULAR_FILE`.
    FsNotRegularFile,
    /// The file is larger than the limit of the call; read a part of it. `as_str()`: `FS_TOO_LARGE`.
    FsTooLarge,
    /// The operating system refused access (permissions). `as_str()`: `FS_PERMISSION_DENIED`.
    FsPermissionDenied,
    /// The sandbox policy of the call does not allow this write; a wider mode needs approval. `as_str()`: `FS_SANDBOX_DENIED`.
    FsSandboxDenied,
    /// Another I/O failure; the `source` carries the OS error. `as_str()`: `FS_IO_ERROR`.
    FsIoError,
    /// The file changed (or vanished) since it was read; read it again, then retry. `as_str()`: `FS_STALE_VERSION`.
    FsStaleVersion,
    /// The file must be read before it is overwritten or edited. `as_str()`: `FS_NOT_OBSERVED`.
    FsNotObserved,
    /// The text to replace occurs more than once; give more context or replace all. `as_str()`: `FS_AMBIGUOUS_EDIT`.
    FsAmbiguousEdit,
    /// The text to replace does not occur in the file (or is empty). `as_str()`: `FS_EDIT_NOT_FOUND`.
    FsEditNotFound,
    /// The file operation was cancelled; nothing was changed. `as_str()`: `FS_ABORTED`.
    FsAborted,
    /// The search pattern (regex or glob) does not parse; the message quotes the parser. `as_str()`: `SEARCH_INVALID_PATTERN`.
    SearchInvalidPattern,
    /// The search could not run (the root is missing, an I/O error). `as_str()`: `SEARCH_FAILED`.
    SearchFailed,
    /// The search was cancelled. `as_str()`: `SEARCH_ABORTED`.
    SearchAborted,
    /// The search matched more than can be handled at once; narrow the pattern or the path. `as_str()`: `SEARCH_RAW_OUTPUT_OVERFLOW`.
    SearchRawOutputOverflow,
    /// No terminal backend of the type asked for is registered (`terminal_open` knows the type `shell`). Nothing started; use a listed type. `as_str()`: `NO_BACKEND`.
    NoBackend,
    /// A second terminal backend was registered for a type that has one. `as_str()`: `DUPLICATE_BACKEND`.
    DuplicateBackend,
    /// The session (MCP connection) that would own a terminal is gone or ending; nothing started. `as_str()`: `OWNER_NOT_LIVE`.
    OwnerNotLive,
    /// A terminal of the same owner already has this name (or is being opened with it); pick another name or close that one. `as_str()`: `DUPLICATE_NAME`.
    DuplicateName,
    /// No terminal session has this id (it never existed, or was closed); `terminal_list` shows the open ones. `as_str()`: `NO_SESSION`.
    NoSession,
    /// The terminal session belongs to another owner (another MCP connection); it cannot be seen or touched from here. `as_str()`: `FOREIGN_SESSION`.
    ForeignSession,
    /// Input is already being sent to this terminal session; wait for that send to settle (or cancel it), then send again. `as_str()`: `SEND_ACTIVE`.
    SendActive,
    /// The terminal service is shutting down; nothing new starts. `as_str()`: `SERVICE_DISPOSING`.
    ServiceDisposing,
    /// The owner has as many terminal sessions open as allowed; close one with `terminal_close` first. `as_str()`: `TERMINAL_LIMIT`.
    TerminalLimit,
    /// The terminal session is being closed; it takes no more input or signals. `as_str()`: `TERMINAL_CLOSING`.
    TerminalClosing,
    /// The terminal session's shell has exited; open a new session. `as_str()`: `TERMINAL_EXITED`.
    TerminalExited,
    /// A terminal could not be started, read or cleaned up (the message says which, and the `source` why). `as_str()`: `TERMINAL_FAILED`.
    TerminalFailed,
    /// No background job has this id (it never existed, or its session ended); `job_list`
    /// shows the current ones. `as_str()`: `NO_JOB`.
    NoJob,
    /// The background job belongs to another owner (another MCP connection); it cannot be
    /// read, waited for or killed from here. `as_str()`: `FOREIGN_JOB`.
    ForeignJob,
    /// The owner has as many background jobs running as allowed; stop one with `job_kill`
    /// or collect one with `job_output` (`wait: true`), then retry. `as_str()`: `JOB_LIMIT`.
    JobLimit,
    /// Background jobs are not available in this world (no job registry, or it is shutting
    /// down); run the command in the foreground. `as_str()`: `JOBS_UNAVAILABLE`.
    JobsUnavailable,
    /// A file or directory dsh manages itself (the spill directory, a spill file) could not
    /// be created or written. The `source` carries the OS error. `as_str()`: `IO_FAILED`.
    IoFailed,
    /// A bug in dsh: an invariant did not hold. Please report it with the message.
    /// `as_str()`: `INTERNAL`.
    Internal,
    /// An MCP message was larger than `dsh mcp` reads (the message says the limit); it was
    /// skipped whole. Put large data in a file and pass its path.
    /// `as_str()`: `MCP_MESSAGE_TOO_LARGE`.
    McpMessageTooLarge,
    /// The MCP connection is closing (its input ended): no new call starts. Open a new
    /// connection. `as_str()`: `MCP_CLOSING`.
    McpClosing,
    /// A resumed call's `requestState` names no call waiting for input (answered, expired,
    /// or another connection's). Call the tool again. `as_str()`: `MCP_REQUEST_STATE_UNKNOWN`.
    McpRequestStateUnknown,
    /// The connection to a remote world ended (the transport command exited, the network
    /// dropped, the far side's dsh died) before the request was answered; what it ran there
    /// is killed by the far side. Nothing ran locally in its place. Check the host or
    /// container, then call again: the next call connects anew.
    /// `as_str()`: `REMOTE_DISCONNECTED`.
    RemoteDisconnected,
    /// The far side of a remote world is not a `dsh serve --stdio` that speaks this dsh's
    /// protocol (another version, another program, a broken frame). Nothing ran. Install
    /// the same dsh there, or name it with `--remote-dsh`.
    /// `as_str()`: `REMOTE_INCOMPATIBLE`.
    RemoteIncompatible,
}

impl ErrorCode {
    /// Every code, in declaration order (for docs, tests and `dsh` help output).
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::InvalidArgument,
        ErrorCode::ConfigInvalid,
        ErrorCode::Aborted,
        ErrorCode::ProcessCwdInvalid,
        ErrorCode::ProcessNotFound,
        ErrorCode::ProcessNotExecutable,
        ErrorCode::ProcessSpawnFailed,
        ErrorCode::DuplicateService,
        ErrorCode::SandboxUnavailable,
        ErrorCode::ShellEnvInvalid,
        ErrorCode::EscalationInvalid,
        ErrorCode::ApprovalRejected,
        ErrorCode::ApprovalCancelled,
        ErrorCode::ApprovalUnavailable,
        ErrorCode::StorageVersionMismatch,
        ErrorCode::StorageMalformed,
        ErrorCode::StorageClosed,
        ErrorCode::SessionNotFound,
        ErrorCode::UnknownTool,
        ErrorCode::InvalidArgs,
        ErrorCode::AbortedBeforeDispatch,
        ErrorCode::ToolDenied,
        ErrorCode::FsNotFound,
        ErrorCode::FsNotDirectory,
        ErrorCode::FsNotText,
        ErrorCode::FsNotRegularFile,
        ErrorCode::FsTooLarge,
        ErrorCode::FsPermissionDenied,
        ErrorCode::FsSandboxDenied,
        ErrorCode::FsIoError,
        ErrorCode::FsStaleVersion,
        ErrorCode::FsNotObserved,
        ErrorCode::FsAmbiguousEdit,
        ErrorCode::FsEditNotFound,
        ErrorCode::FsAborted,
        ErrorCode::SearchInvalidPattern,
        ErrorCode::SearchFailed,
        ErrorCode::SearchAborted,
        ErrorCode::SearchRawOutputOverflow,
        ErrorCode::NoBackend,
        ErrorCode::DuplicateBackend,
        ErrorCode::OwnerNotLive,
        ErrorCode::DuplicateName,
        ErrorCode::NoSession,
        ErrorCode::ForeignSession,
        ErrorCode::SendActive,
        ErrorCode::ServiceDisposing,
        ErrorCode::TerminalLimit,
        ErrorCode::TerminalClosing,
        ErrorCode::TerminalExited,
        ErrorCode::TerminalFailed,
        ErrorCode::NoJob,
        ErrorCode::ForeignJob,
        ErrorCode::JobLimit,
        ErrorCode::JobsUnavailable,
        ErrorCode::IoFailed,
        ErrorCode::Internal,
        ErrorCode::McpMessageTooLarge,
        ErrorCode::McpClosing,
        ErrorCode::McpRequestStateUnknown,
        ErrorCode::RemoteDisconnected,
        ErrorCode::RemoteIncompatible,
    ];

    /// The code whose [`as_str`](Self::as_str) is `code`, if any (a code read off the wire).
    pub fn from_code(code: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.as_str() == code)
    }

    /// The stable SCREAMING_SNAKE form of the code.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::ConfigInvalid => "CONFIG_INVALID",
            ErrorCode::Aborted => "ABORTED",
            ErrorCode::ProcessCwdInvalid => "PROCESS_CWD_INVALID",
            ErrorCode::ProcessNotFound => "PROCESS_NOT_FOUND",
            ErrorCode::ProcessNotExecutable => "PROCESS_NOT_EXECUTABLE",
            ErrorCode::ProcessSpawnFailed => "PROCESS_SPAWN_FAILED",
            ErrorCode::DuplicateService => "DUPLICATE_SERVICE",
            ErrorCode::SandboxUnavailable => "SANDBOX_UNAVAILABLE",
            ErrorCode::ShellEnvInvalid => "SHELL_ENV_INVALID",
            ErrorCode::EscalationInvalid => "ESCALATION_INVALID",
            ErrorCode::ApprovalRejected => "APPROVAL_REJECTED",
            ErrorCode::ApprovalCancelled => "APPROVAL_CANCELLED",
            ErrorCode::ApprovalUnavailable => "APPROVAL_UNAVAILABLE",
            ErrorCode::StorageVersionMismatch => "STORAGE_VERSION_MISMATCH",
            ErrorCode::StorageMalformed => "STORAGE_MALFORMED",
            ErrorCode::StorageClosed => "STORAGE_CLOSED",
            ErrorCode::SessionNotFound => "SESSION_NOT_FOUND",
            ErrorCode::UnknownTool => "UNKNOWN_TOOL",
            ErrorCode::InvalidArgs => "INVALID_ARGS",
            ErrorCode::AbortedBeforeDispatch => "ABORTED_BEFORE_DISPATCH",
            ErrorCode::ToolDenied => "TOOL_DENIED",
            ErrorCode::FsNotFound => "FS_NOT_FOUND",
            ErrorCode::FsNotDirectory => "FS_NOT_DIRECTORY",
            ErrorCode::FsNotText => "FS_NOT_TEXT",
            ErrorCode::FsNotRegularFile => "FS_NOT_REGULAR_FILE",
            ErrorCode::FsTooLarge => "FS_TOO_LARGE",
            ErrorCode::FsPermissionDenied => "FS_PERMISSION_DENIED",
            ErrorCode::FsSandboxDenied => "FS_SANDBOX_DENIED",
            ErrorCode::FsIoError => "FS_IO_ERROR",
            ErrorCode::FsStaleVersion => "FS_STALE_VERSION",
            ErrorCode::FsNotObserved => "FS_NOT_OBSERVED",
            ErrorCode::FsAmbiguousEdit => "FS_AMBIGUOUS_EDIT",
            ErrorCode::FsEditNotFound => "FS_EDIT_NOT_FOUND",
            ErrorCode::FsAborted => "FS_ABORTED",
            ErrorCode::SearchInvalidPattern => "SEARCH_INVALID_PATTERN",
            ErrorCode::SearchFailed => "SEARCH_FAILED",
            ErrorCode::SearchAborted => "SEARCH_ABORTED",
            ErrorCode::SearchRawOutputOverflow => "SEARCH_RAW_OUTPUT_OVERFLOW",
            ErrorCode::NoBackend => "NO_BACKEND",
            ErrorCode::DuplicateBackend => "DUPLICATE_BACKEND",
            ErrorCode::OwnerNotLive => "OWNER_NOT_LIVE",
            ErrorCode::DuplicateName => "DUPLICATE_NAME",
            ErrorCode::NoSession => "NO_SESSION",
            ErrorCode::ForeignSession => "FOREIGN_SESSION",
            ErrorCode::SendActive => "SEND_ACTIVE",
            ErrorCode::ServiceDisposing => "SERVICE_DISPOSING",
            ErrorCode::TerminalLimit => "TERMINAL_LIMIT",
            ErrorCode::TerminalClosing => "TERMINAL_CLOSING",
            ErrorCode::TerminalExited => "TERMINAL_EXITED",
            ErrorCode::TerminalFailed => "TERMINAL_FAILED",
            ErrorCode::NoJob => "NO_JOB",
            ErrorCode::ForeignJob => "FOREIGN_JOB",
            ErrorCode::JobLimit => "JOB_LIMIT",
            ErrorCode::JobsUnavailable => "JOBS_UNAVAILABLE",
            ErrorCode::IoFailed => "IO_FAILED",
            ErrorCode::Internal => "INTERNAL",
            ErrorCode::McpMessageTooLarge => "MCP_MESSAGE_TOO_LARGE",
            ErrorCode::McpClosing => "MCP_CLOSING",
            ErrorCode::McpRequestStateUnknown => "MCP_REQUEST_STATE_UNKNOWN",
            ErrorCode::RemoteDisconnected => "REMOTE_DISCONNECTED",
            ErrorCode::RemoteIncompatible => "REMOTE_INCOMPATIBLE",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error every dsh seam returns: a stable [`ErrorCode`], a message for people and
/// models, and the underlying cause.
///
/// The message names the thing (a path, `argv[0]`, a field) and the next step; the OS error
/// is the [`source`](StdError::source), not repeated in the text. `Display` prints
/// `CODE: message`.
///
/// A command that exits non-zero, times out or is cancelled after it started is *not* a
/// `HarnessError`: it is an ordinary result that says so.
pub struct HarnessError {
    code: ErrorCode,
    message: Cow<'static, str>,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

impl HarnessError {
    /// An error with `code` and `message` and no underlying cause.
    pub fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
        HarnessError {
            code,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying cause (an `io::Error`, a parse error).
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// The message, without the code.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `line` added to its message, on a line of its own.
    pub fn with_line(mut self, line: &str) -> Self {
        let mut message = self.message.into_owned();
        message.push('\n');
        message.push_str(line);
        self.message = message.into();
        self
    }

    /// `INVALID_ARGUMENT` with `message`.
    pub fn invalid_argument(message: impl Into<Cow<'static, str>>) -> Self {
        HarnessError::new(ErrorCode::InvalidArgument, message)
    }

    /// `CONFIG_INVALID` with `message`.
    pub fn config_invalid(message: impl Into<Cow<'static, str>>) -> Self {
        HarnessError::new(ErrorCode::ConfigInvalid, message)
    }

    /// `ABORTED`: the call was cancelled before `what` started (its body had), with the
    /// cancel reason.
    pub fn aborted_before_start(what: &str, reason: &crate::CancelReason) -> Self {
        HarnessError::new(
            ErrorCode::Aborted,
            format!("aborted before {what}: {reason}"),
        )
    }

    /// `INTERNAL` with `message`.
    pub fn internal(message: impl Into<Cow<'static, str>>) -> Self {
        HarnessError::new(ErrorCode::Internal, message)
    }

    /// `INTERNAL` for a panic caught in `what` (`the tool call`, `the glob worker`): the
    /// panic's message (its first 500 characters: it may quote the input), that this is a
    /// bug in dsh to report, and that only this call's work was abandoned: dsh goes on
    /// serving other calls.
    pub fn panicked(what: &str, payload: &(dyn std::any::Any + Send)) -> Self {
        let said = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)");
        let said = match said.char_indices().nth(PANIC_MESSAGE_CHARS) {
            Some((cut, _)) => format!("{}… ({} bytes in all)", &said[..cut], said.len()),
            None => said.to_owned(),
        };
        HarnessError::internal(format!(
            "{what} panicked: {said}. This is a bug in dsh; please report it with this \
             message. Only this call's work was abandoned: dsh keeps serving other calls."
        ))
    }
}

/// How much of a panic's message [`HarnessError::panicked`] keeps.
const PANIC_MESSAGE_CHARS: usize = 500;

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl fmt::Debug for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("HarnessError");
        d.field("code", &self.code).field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl StdError for HarnessError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

/// How much of a library's message an error quotes (a parser's message may quote a whole
/// argument, a pattern compiler's a whole pattern).
pub const QUOTED_MAX_CHARS: usize = 500;

/// `msg` if it has at most [`QUOTED_MAX_CHARS`] characters, else its head and its size.
pub fn quoted(msg: &str) -> String {
    match msg.char_indices().nth(QUOTED_MAX_CHARS) {
        None => msg.to_owned(),
        Some((cut, _)) => format!("{}… ({} bytes in all)", &msg[..cut], msg.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_stable() {
        let pairs: Vec<(ErrorCode, &str)> =
            ErrorCode::ALL.iter().map(|c| (*c, c.as_str())).collect();
        assert_eq!(
            pairs,
            vec![
                (ErrorCode::InvalidArgument, "INVALID_ARGUMENT"),
                (ErrorCode::ConfigInvalid, "CONFIG_INVALID"),
                (ErrorCode::Aborted, "ABORTED"),
                (ErrorCode::ProcessCwdInvalid, "PROCESS_CWD_INVALID"),
                (ErrorCode::ProcessNotFound, "PROCESS_NOT_FOUND"),
                (ErrorCode::ProcessNotExecutable, "PROCESS_NOT_EXECUTABLE"),
                (ErrorCode::ProcessSpawnFailed, "PROCESS_SPAWN_FAILED"),
                (ErrorCode::DuplicateService, "DUPLICATE_SERVICE"),
                (ErrorCode::SandboxUnavailable, "SANDBOX_UNAVAILABLE"),
                (ErrorCode::ShellEnvInvalid, "SHELL_ENV_INVALID"),
                (ErrorCode::EscalationInvalid, "ESCALATION_INVALID"),
                (ErrorCode::ApprovalRejected, "APPROVAL_REJECTED"),
                (ErrorCode::ApprovalCancelled, "APPROVAL_CANCELLED"),
                (ErrorCode::ApprovalUnavailable, "APPROVAL_UNAVAILABLE"),
                (
                    ErrorCode::StorageVersionMismatch,
                    "STORAGE_VERSION_MISMATCH"
                ),
                (ErrorCode::StorageMalformed, "STORAGE_MALFORMED"),
                (ErrorCode::StorageClosed, "STORAGE_CLOSED"),
                (ErrorCode::SessionNotFound, "SESSION_NOT_FOUND"),
                (ErrorCode::UnknownTool, "UNKNOWN_TOOL"),
                (ErrorCode::InvalidArgs, "INVALID_ARGS"),
                (ErrorCode::AbortedBeforeDispatch, "ABORTED_BEFORE_DISPATCH"),
                (ErrorCode::ToolDenied, "TOOL_DENIED"),
                (ErrorCode::FsNotFound, "FS_NOT_FOUND"),
                (ErrorCode::FsNotDirectory, "FS_NOT_DIRECTORY"),
                (ErrorCode::FsNotText, "FS_NOT_TEXT"),
                (ErrorCode::FsNotRegularFile, "FS_NOT_REGULAR_FILE"),
                (ErrorCode::FsTooLarge, "FS_TOO_LARGE"),
                (ErrorCode::FsPermissionDenied, "FS_PERMISSION_DENIED"),
                (ErrorCode::FsSandboxDenied, "FS_SANDBOX_DENIED"),
                (ErrorCode::FsIoError, "FS_IO_ERROR"),
                (ErrorCode::FsStaleVersion, "FS_STALE_VERSION"),
                (ErrorCode::FsNotObserved, "FS_NOT_OBSERVED"),
                (ErrorCode::FsAmbiguousEdit, "FS_AMBIGUOUS_EDIT"),
                (ErrorCode::FsEditNotFound, "FS_EDIT_NOT_FOUND"),
                (ErrorCode::FsAborted, "FS_ABORTED"),
                (ErrorCode::SearchInvalidPattern, "SEARCH_INVALID_PATTERN"),
                (ErrorCode::SearchFailed, "SEARCH_FAILED"),
                (ErrorCode::SearchAborted, "SEARCH_ABORTED"),
                (
                    ErrorCode::SearchRawOutputOverflow,
                    "SEARCH_RAW_OUTPUT_OVERFLOW"
                ),
                (ErrorCode::NoBackend, "NO_BACKEND"),
                (ErrorCode::DuplicateBackend, "DUPLICATE_BACKEND"),
                (ErrorCode::OwnerNotLive, "OWNER_NOT_LIVE"),
                (ErrorCode::DuplicateName, "DUPLICATE_NAME"),
                (ErrorCode::NoSession, "NO_SESSION"),
                (ErrorCode::ForeignSession, "FOREIGN_SESSION"),
                (ErrorCode::SendActive, "SEND_ACTIVE"),
                (ErrorCode::ServiceDisposing, "SERVICE_DISPOSING"),
                (ErrorCode::TerminalLimit, "TERMINAL_LIMIT"),
                (ErrorCode::TerminalClosing, "TERMINAL_CLOSING"),
                (ErrorCode::TerminalExited, "TERMINAL_EXITED"),
                (ErrorCode::TerminalFailed, "TERMINAL_FAILED"),
                (ErrorCode::NoJob, "NO_JOB"),
                (ErrorCode::ForeignJob, "FOREIGN_JOB"),
                (ErrorCode::JobLimit, "JOB_LIMIT"),
                (ErrorCode::JobsUnavailable, "JOBS_UNAVAILABLE"),
                (ErrorCode::IoFailed, "IO_FAILED"),
                (ErrorCode::Internal, "INTERNAL"),
                (ErrorCode::McpMessageTooLarge, "MCP_MESSAGE_TOO_LARGE"),
                (ErrorCode::McpClosing, "MCP_CLOSING"),
                (
                    ErrorCode::McpRequestStateUnknown,
                    "MCP_REQUEST_STATE_UNKNOWN"
                ),
                (ErrorCode::RemoteDisconnected, "REMOTE_DISCONNECTED"),
                (ErrorCode::RemoteIncompatible, "REMOTE_INCOMPATIBLE"),
            ]
        );
    }

    #[test]
    fn display_prefixes_the_code_and_keeps_the_source_separate() {
        let io = std::io::Error::from_raw_os_error(2);
        let e = HarnessError::new(
            ErrorCode::ProcessNotFound,
            "program \"nope\" was not found on PATH",
        )
        .with_source(io);
        assert_eq!(
            e.to_string(),
            "PROCESS_NOT_FOUND: program \"nope\" was not found on PATH"
        );
        assert!(StdError::source(&e).is_some());
        assert_eq!(e.code(), ErrorCode::ProcessNotFound);
    }

    #[test]
    fn aborted_before_start_names_the_reason() {
        let e = HarnessError::aborted_before_start("spawn", &"too late".into());
        assert_eq!(e.message(), "aborted before spawn: too late");
        assert_eq!(e.code(), ErrorCode::Aborted);
    }

    #[test]
    fn a_panic_is_internal_says_it_is_a_bug_and_quotes_a_bounded_message() {
        let payload =
            std::panic::catch_unwind(|| panic!("bad {}", "state")).expect_err("it panicked");
        let e = HarnessError::panicked("the tool call", payload.as_ref());
        assert_eq!(e.code(), ErrorCode::Internal);
        assert_eq!(
            e.message(),
            "the tool call panicked: bad state. This is a bug in dsh; please report it with \
             this message. Only this call's work was abandoned: dsh keeps serving other calls."
        );
        let e = HarnessError::panicked("the glob worker", &42u32);
        assert!(
            e.message()
                .starts_with("the glob worker panicked: (no message). This is a bug in dsh"),
            "{}",
            e.message()
        );
        let e = HarnessError::panicked("the grep worker", &"é".repeat(2000));
        let quoted = format!("{}… (4000 bytes in all)", "é".repeat(500));
        assert!(e.message().contains(&quoted), "{}", e.message());
    }
}
