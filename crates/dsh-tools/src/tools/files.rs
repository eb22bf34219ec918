//! The file tools: `read`, `write`, `edit`, over the World's filesystem seam.
//!
//! Read before you write: a session that read a file (even part of it) may replace it at
//! the version it saw; a file it never saw can only be created (never overwritten), and
//! it cannot be edited at all (`FS_NOT_OBSERVED`, with the way out in the message). A file
//! that changed since it was read is `FS_STALE_VERSION` ("re-read the file, then retry").
//! `write` and `edit` run under the call's sandbox policy, and take `sandbox_permissions`
//! and `justification` for one approved escalation, exactly like `bash`; a refusal shows
//! the pinned denial marker and the escalation hint.

use std::path::Path;

use dsh_approval::Action;
use dsh_core::{ErrorCode, HarnessError};
use dsh_fs::observations::Observation;
use dsh_fs::{FileSystem, FsTarget};
use dsh_sandbox::{SandboxMode, SandboxPolicy};
use schemars::JsonSchema;
use serde_json::Value;

use crate::policy::escalation::{denial_lines, Subject};
use crate::policy::Escalation;
use crate::schema::bounds::Bounded;
use crate::{invalid_args, CallContext, World};

mod diff;
mod edit;
mod read;
mod write;

pub use edit::EditTool;
pub use read::ReadTool;
pub use write::WriteTool;

/// Lines per `read`: the default and the most.
pub const READ_LIMIT: u64 = 2000;
/// Characters kept of one line.
pub const READ_MAX_LINE_CHARS: usize = 2000;
/// Bytes of the lines of one `read`: 32 KiB, so a result, escaped as JSON in its
/// structured form, stays within what agent clients pass to the model inline (Claude Code
/// 50 000 characters, Codex CLI 48 000 bytes, Gemini CLI 40 000 characters; the
/// reference's 51 200 would not).
pub const READ_MAX_BYTES: usize = 32 << 10;
pub use crate::schema::bounds::WRITE_MAX_BYTES;

const IMAGE_EXTENSIONS: [&str; 5] = ["png", "jpg", "jpeg", "gif", "webp"];

pub(crate) fn fs_of(world: &World) -> Result<&std::sync::Arc<dyn FileSystem>, HarnessError> {
    world.fs().ok_or_else(|| {
        HarnessError::config_invalid(
            "this World has no filesystem provider; the file tools need one",
        )
    })
}

pub(super) fn check_path(path: &str) -> Result<(), HarnessError> {
    if path.trim().is_empty() {
        return Err(invalid_args("file_path must be a non-empty string"));
    }
    Ok(())
}

/// A file tool's result `facts` with what it saw of `target` (its key and `version`), in
/// the one form the read-before-edit memory is seeded from.
pub(super) fn with_seen(mut facts: Value, target: &FsTarget, version: &dsh_fs::FsVersion) -> Value {
    if let Value::Object(map) = &mut facts {
        map.insert(
            "key".into(),
            Value::from(target.key().to_string_lossy().into_owned()),
        );
        map.insert("version".into(), Value::from(version.as_str()));
    }
    facts
}

pub(super) fn envelope(path: &Path, body: &str) -> String {
    format!(
        "<path>{}</path>\n<type>file</type>\n<content>\n{body}\n</content>",
        path.display()
    )
}

/// The model-facing form of a failed write or edit; `can_ask`: whether a wider mode can
/// be asked for ([`World::can_ask`]).
pub(super) fn remediate(e: HarnessError, mode: SandboxMode, can_ask: bool) -> HarnessError {
    match e.code() {
        ErrorCode::FsSandboxDenied => HarnessError::new(
            ErrorCode::FsSandboxDenied,
            denial_lines(mode, Subject::Operation, can_ask).join("\n"),
        ),
        ErrorCode::FsStaleVersion => HarnessError::new(
            ErrorCode::FsStaleVersion,
            format!("{} — re-read the file, then retry", e.message()),
        ),
        ErrorCode::FsNotObserved => HarnessError::new(
            ErrorCode::FsNotObserved,
            format!("{} — read the file, then retry", e.message()),
        ),
        _ => e,
    }
}

/// What the session last saw of the file `key` (see [`dsh_fs::observations`]).
pub(super) async fn observation(ctx: &CallContext<'_>, key: &Path) -> Option<Observation> {
    ctx.world.observed(ctx.session?, key).await
}

pub(super) fn schema_of<T: JsonSchema + Bounded>(world: &World) -> Value {
    let mut v = crate::args_schema::<T>();
    if !world.confines() {
        if let Some(props) = v.get_mut("properties").and_then(Value::as_object_mut) {
            props.remove("sandbox_permissions");
            props.remove("justification");
        }
    }
    v
}

/// What a `write` or `edit` of `path` does, as an approval question shows it.
pub(super) fn file_action(path: &str, change: Option<String>) -> Action {
    Action::File {
        path: path.to_owned(),
        change,
        resolved: None,
    }
}

/// [`Tool::action`] of `write` and `edit`: the file and the change in short (a `write`'s
/// `content`, an `edit`'s `old_string` and `new_string`), else the arguments.
pub(super) fn file_action_of(args: &Value) -> Action {
    let text = |k: &str| args.get(k).and_then(Value::as_str);
    // Each tool's own arguments only: an unknown key (a `content` beside an edit's
    // strings) is ignored by the call, so it must not be what the question shows.
    let edit = args.get("old_string").is_some() || args.get("new_string").is_some();
    let change = match (
        edit,
        text("content"),
        text("old_string"),
        text("new_string"),
    ) {
        (false, Some(content), _, _) => Some(dsh_approval::file_change(None, content)),
        (true, _, Some(old), Some(new)) => Some(dsh_approval::file_change(Some(old), new)),
        _ => None,
    };
    match text("file_path") {
        Some(path) => file_action(path, change),
        None => Action::Arguments(args.clone()),
    }
}

pub(super) async fn target_and_policy(
    ctx: &CallContext<'_>,
    path: &str,
    requested: Option<Escalation>,
    justification: Option<&str>,
    tool: &str,
    action: Action,
) -> Result<(FsTarget, SandboxPolicy), HarnessError> {
    let fs = fs_of(ctx.world)?;
    let policy = crate::policy::policy_for_call(
        ctx,
        requested.map(Escalation::mode),
        justification,
        Subject::Operation,
        tool,
        action,
    )
    .await?;
    let target = fs.target_of(path, Some(&ctx.workspace_root())).await?;
    Ok((target, policy))
}
