//! The file tools: `read`, `write`, `edit`, over the World's filesystem seam.
//!
//! Read before you write: a session that read a file (even part of it) may replace it at
//! the version it saw; a file it never saw can only be created (never overwritten), and
//! it cannot be edited at all (`FS_NOT_OBSERVED`, with the way out in the message). A file
//! that changed since it was read is `FS_STALE_VERSION` ("re-read the file, then retry").
//! `write` and `edit` run under the call's sandbox policy, and take `sandbox_permissions`
//! and `justification` for one approved escalation, exactly like `bash`; a refusal shows
//! the pinned denial marker and the escalation hint.

use std::path::{Path, PathBuf};

use crate::escalation::{denial_marker, escalation_hint, Subject};
use async_trait::async_trait;
use dsh_approval::Action;
use dsh_core::{ErrorCode, HarnessError};
use dsh_fs::{EditRequest, FileSystem, FsKind, FsTarget, LineLimits, TotalLines, WriteIntent};
use dsh_sandbox::{SandboxMode, SandboxPolicy};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::bounds::{self, Bound, Bounded};
use crate::policy::Escalation;
use crate::{CallContext, Tool, ToolOutput, World};
use dsh_fs::observations::Observation;

/// Lines per `read`: the default and the most.
pub const READ_LIMIT: u64 = 2000;
/// Characters kept of one line.
pub const READ_MAX_LINE_CHARS: usize = 2000;
/// Bytes of the lines of one `read`.
pub const READ_MAX_BYTES: usize = 51_200;
pub use crate::bounds::WRITE_MAX_BYTES;

const IMAGE_EXTENSIONS: [&str; 5] = ["png", "jpg", "jpeg", "gif", "webp"];

use crate::{invalid_args, parse_args};

pub(crate) fn fs_of(world: &World) -> Result<&std::sync::Arc<dyn FileSystem>, HarnessError> {
    world.fs().ok_or_else(|| {
        HarnessError::config_invalid(
            "this World has no filesystem provider; the file tools need one",
        )
    })
}

fn check_path(path: &str) -> Result<(), HarnessError> {
    if path.trim().is_empty() {
        return Err(invalid_args("file_path must be a non-empty string"));
    }
    Ok(())
}

/// Where relative paths resolve: the policy's workspace for a mutation in a world that
/// confines (`confined_by`), else the session's working directory (canonicalised when
/// `..` is involved).
fn base_dir(
    ctx: &CallContext<'_>,
    confined_by: Option<&SandboxPolicy>,
    path: &str,
) -> Option<PathBuf> {
    if let Some(p) = confined_by {
        return Some(p.workspace_root.clone());
    }
    let cwd = ctx.session.map(|s| s.header().cwd.clone())?;
    let dotdot = |p: &Path| p.components().any(|c| c == std::path::Component::ParentDir);
    Some(if dotdot(&cwd) || dotdot(Path::new(path)) {
        dsh_core::path::canonical_path(&cwd)
    } else {
        cwd
    })
}

fn envelope(path: &Path, body: &str) -> String {
    format!(
        "<path>{}</path>\n<type>file</type>\n<content>\n{body}\n</content>",
        path.display()
    )
}

/// The model-facing form of a failed write or edit.
fn remediate(e: HarnessError, mode: SandboxMode) -> HarnessError {
    match e.code() {
        ErrorCode::FsSandboxDenied => HarnessError::new(
            ErrorCode::FsSandboxDenied,
            format!(
                "{}\n{}",
                denial_marker(mode),
                escalation_hint(Subject::Operation)
            ),
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
async fn observation(ctx: &CallContext<'_>, key: &Path) -> Option<Observation> {
    ctx.world.observed(ctx.session?, key).await
}

fn schema_of<T: JsonSchema + Bounded>(world: &World) -> Value {
    let mut v = crate::args_schema::<T>();
    if !world.confines() {
        if let Some(props) = v.get_mut("properties").and_then(Value::as_object_mut) {
            props.remove("sandbox_permissions");
            props.remove("justification");
        }
    }
    v
}

/// The `read` tool. See the [module docs](self).
#[derive(Debug, Default)]
pub struct ReadTool;

/// The arguments of a `read` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct ReadArgs {
    /// The file, absolute or relative to the session's workspace.
    file_path: String,
    /// The first line to read (1-based). Default 1.
    offset: Option<u64>,
    /// How many lines (default and at most 2000).
    limit: Option<u64>,
}

impl Bounded for ReadArgs {
    const BOUNDS: &'static [Bound] = &[bounds::FILE_PATH];
}

#[async_trait]
impl Tool for ReadTool {
    fn name(&self) -> &str {
        "read"
    }

    fn title(&self) -> &str {
        "Read a file"
    }

    fn hints(&self) -> crate::ToolHints {
        crate::ToolHints::READ_ONLY
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("path", serde_json::json!({"type": "string"})),
                ("key", serde_json::json!({"type": "string"})),
                ("offset", serde_json::json!({"type": "integer"})),
                ("lines", serde_json::json!({"type": "integer"})),
                ("totalLines", serde_json::json!({"type": "integer"})),
                ("totalLinesExact", serde_json::json!({"type": "boolean"})),
                ("version", serde_json::json!({"type": "string"})),
            ],
            &["path", "key", "lines", "version"],
        )
    }

    fn description(&self, _world: &World) -> String {
        "Read a text file: its lines, numbered, from `offset` (default 1), at most `limit` \
         (default and at most 2000). Prefer this to `cat`. Long lines are cut; a footer says \
         how to continue. Reading a file is what allows `write` to replace it and `edit` to \
         change it. Images go through `read_image`."
            .into()
    }

    fn parameters(&self, world: &World) -> Value {
        schema_of::<ReadArgs>(world)
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: ReadArgs = parse_args(args)?;
        check_path(&a.file_path)?;
        let offset = a.offset.unwrap_or(1);
        let limit = a.limit.unwrap_or(READ_LIMIT);
        if offset == 0 {
            return Err(invalid_args("offset must be a positive integer"));
        }
        if limit == 0 {
            return Err(invalid_args("limit must be a positive integer"));
        }
        if limit > READ_LIMIT {
            return Err(invalid_args(format!(
                "limit must be less than or equal to {READ_LIMIT}"
            )));
        }
        let fs = fs_of(ctx.world)?;
        let base = base_dir(ctx, None, &a.file_path);
        let target = fs.resolve(&a.file_path, base.as_deref()).await?;
        let session = ctx.session.map(|s| s.id());
        let d = target.display().display().to_string();
        let Some(info) = fs.stat(&target).await? else {
            ctx.world
                .observe(session, target.key(), Observation::Absent);
            return Err(HarnessError::new(
                ErrorCode::FsNotFound,
                format!("cannot read \"{d}\": not found"),
            ));
        };
        if info.kind != FsKind::File {
            return Err(HarnessError::new(
                ErrorCode::FsNotRegularFile,
                format!("cannot read \"{d}\": not a regular file"),
            ));
        }
        let ext = target
            .display()
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if ext
            .as_deref()
            .is_some_and(|e| IMAGE_EXTENSIONS.contains(&e))
        {
            return Err(HarnessError::new(
                ErrorCode::FsNotText,
                format!("cannot read \"{d}\": it is an image; use read_image to see it"),
            ));
        }
        let w = fs
            .read_lines(
                &target,
                LineLimits {
                    offset,
                    limit,
                    max_line_chars: READ_MAX_LINE_CHARS,
                    max_bytes: READ_MAX_BYTES,
                },
                ctx.cancel,
            )
            .await?;
        ctx.world.observe(
            session,
            target.key(),
            Observation::Present(w.version.clone()),
        );
        let end = w.lines.last().map_or(offset - 1, |(n, _)| *n);
        let footer = if w.truncated_by_bytes {
            format!(
                "(Output capped. Showing lines {offset}-{end}. Use offset={} to continue.)",
                end + 1
            )
        } else {
            match w.total_lines {
                TotalLines::Exact(total) if end < total => format!(
                    "(Showing lines {offset}-{end} of {total}. Use offset={} to continue.)",
                    end + 1
                ),
                TotalLines::Exact(total) => format!("(End of file - total {total} lines)"),
                // Not counted to the end: more may follow even the last line counted.
                TotalLines::AtLeast(total) if end < total => format!(
                    "(Showing lines {offset}-{end} of at least {total}. Use offset={} to continue.)",
                    end + 1
                ),
                // The count stopped inside the window's last line: no later line was seen,
                // so none is promised.
                TotalLines::AtLeast(_) => format!(
                    "(Showing lines {offset}-{end}. Line {end} runs on for more than {} MiB; \
                     the file was not read past that.)",
                    dsh_fs::COUNT_AHEAD >> 20
                ),
            }
        };
        let body = if w.lines.is_empty() {
            footer
        } else {
            let lines: Vec<String> = w.lines.iter().map(|(n, t)| format!("{n}: {t}")).collect();
            format!("{}\n\n{footer}", lines.join("\n"))
        };
        Ok(ToolOutput {
            image: None,
            text: envelope(target.display(), &body),
            meta: Some(json!({
                "path": target.display(),
                "key": target.key(),
                "offset": offset,
                "lines": w.lines.len(),
                "totalLines": w.total_lines.count(),
                "totalLinesExact": matches!(w.total_lines, TotalLines::Exact(_)),
                "version": w.version.as_str(),
            })),
        })
    }
}

/// The `write` tool. See the [module docs](self).
#[derive(Debug, Default)]
pub struct WriteTool;

/// The arguments of a `write` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct WriteArgs {
    /// The file, absolute or relative to the session's workspace.
    file_path: String,
    /// The whole new content.
    content: String,
    /// A wider sandbox mode for this one operation; needs `justification`, and the user is
    /// asked.
    sandbox_permissions: Option<Escalation>,
    /// Why the wider mode is needed, in one sentence the user will read.
    justification: Option<String>,
}

impl Bounded for WriteArgs {
    const BOUNDS: &'static [Bound] = &[
        bounds::FILE_PATH,
        Bound {
            arg: "content",
            max: bounds::WRITE_MAX_BYTES,
            advice: "write a smaller file, or build a large one from parts with bash",
        },
        bounds::JUSTIFICATION,
    ];
}

/// What a `write` or `edit` of `path` does, as an approval question shows it.
fn file_action(path: &str) -> Action {
    Action::File {
        path: path.to_owned(),
        resolved: None,
    }
}

/// [`Tool::action`] of `write` and `edit`: the file, else the arguments.
fn file_action_of(args: &Value) -> Action {
    match args.get("file_path").and_then(Value::as_str) {
        Some(path) => file_action(path),
        None => Action::Arguments(args.clone()),
    }
}

async fn target_and_policy(
    ctx: &CallContext<'_>,
    path: &str,
    requested: Option<Escalation>,
    justification: Option<&str>,
    tool: &str,
) -> Result<(FsTarget, SandboxPolicy), HarnessError> {
    let fs = fs_of(ctx.world)?;
    let policy = crate::policy::call_policy(
        ctx,
        requested.map(Escalation::mode),
        justification,
        Subject::Operation,
        tool,
        file_action(path),
    )
    .await?;
    let base = base_dir(ctx, ctx.world.confines().then_some(&policy), path);
    let target = fs.resolve(path, base.as_deref()).await?;
    Ok((target, policy))
}

#[async_trait]
impl Tool for WriteTool {
    fn name(&self) -> &str {
        "write"
    }

    fn title(&self) -> &str {
        "Write a file"
    }

    fn hints(&self) -> crate::ToolHints {
        crate::ToolHints {
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
        }
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("path", serde_json::json!({"type": "string"})),
                ("key", serde_json::json!({"type": "string"})),
                (
                    "operation",
                    serde_json::json!({"type": "string", "enum": ["create", "update"]}),
                ),
                ("version", serde_json::json!({"type": "string"})),
                (
                    "diff",
                    serde_json::json!({"type": "object", "properties": {"firstLine": {"type": "integer"}, "removed": {"type": "integer"}, "added": {"type": "integer"}}}),
                ),
            ],
            &["path", "key", "operation", "version"],
        )
    }

    fn action(&self, args: &Value) -> Action {
        file_action_of(args)
    }

    fn description(&self, _world: &World) -> String {
        "Create a file, or replace one you have read, with `content` (parent directories are \
         made). The write is atomic: the file holds the old or the new content, never a mix. \
         A file you have not read in this session cannot be overwritten."
            .into()
    }

    fn parameters(&self, world: &World) -> Value {
        schema_of::<WriteArgs>(world)
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: WriteArgs = parse_args(args)?;
        check_path(&a.file_path)?;
        let (target, policy) = target_and_policy(
            ctx,
            &a.file_path,
            a.sandbox_permissions,
            a.justification.as_deref(),
            "write",
        )
        .await?;
        let session = ctx.session.map(|s| s.id());
        let intent = match observation(ctx, target.key()).await {
            Some(Observation::Present(v)) => WriteIntent::ReplaceIfVersion(v),
            _ => WriteIntent::CreateIfAbsent,
        };
        let fs = fs_of(ctx.world)?;
        let out = fs
            .write_text(&target, &a.content, Some(intent), &policy)
            .await
            .map_err(|e| remediate(e, policy.mode))?;
        ctx.world.observe(
            session,
            target.key(),
            Observation::Present(out.version.clone()),
        );
        let what = if out.created {
            "Created file"
        } else {
            "Updated file"
        };
        let mut text = envelope(target.display(), what);
        // Regression: a review made a repository (config, HEAD, objects/, refs/) with
        // writes alone, which no check after a command saw.
        if let Some((line, _)) = crate::policy::after_call(ctx, &policy).await? {
            text.push('\n');
            text.push_str(&line);
        }
        Ok(ToolOutput {
            image: None,
            text,
            meta: Some(json!({
                "path": target.display(),
                "key": target.key(),
                "operation": if out.created { "create" } else { "update" },
                "version": out.version.as_str(),
                "diff": out.before.as_deref().map(|b| line_diff(b, &out.after)),
            })),
        })
    }
}

/// The `edit` tool. See the [module docs](self).
#[derive(Debug, Default)]
pub struct EditTool;

/// The arguments of an `edit` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct EditArgs {
    /// The file, absolute or relative to the session's workspace.
    file_path: String,
    /// The exact text to replace (it must occur exactly once unless `replace_all`).
    old_string: String,
    /// The text to put there instead (literal).
    new_string: String,
    /// Replace every occurrence. Default false.
    replace_all: Option<bool>,
    /// A wider sandbox mode for this one operation; needs `justification`, and the user is
    /// asked.
    sandbox_permissions: Option<Escalation>,
    /// Why the wider mode is needed, in one sentence the user will read.
    justification: Option<String>,
}

impl Bounded for EditArgs {
    const BOUNDS: &'static [Bound] = &[
        bounds::FILE_PATH,
        Bound {
            arg: "old_string",
            max: bounds::EDIT_MAX_BYTES,
            advice: "replace a shorter, unique part of the text",
        },
        Bound {
            arg: "new_string",
            max: bounds::EDIT_MAX_BYTES,
            advice: "make the change in several smaller edits",
        },
        bounds::JUSTIFICATION,
    ];
}

#[async_trait]
impl Tool for EditTool {
    fn name(&self) -> &str {
        "edit"
    }

    fn title(&self) -> &str {
        "Edit a file"
    }

    fn hints(&self) -> crate::ToolHints {
        crate::ToolHints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
        }
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("path", serde_json::json!({"type": "string"})),
                ("key", serde_json::json!({"type": "string"})),
                ("replaced", serde_json::json!({"type": "integer"})),
                ("version", serde_json::json!({"type": "string"})),
                (
                    "diff",
                    serde_json::json!({"type": "object", "properties": {"firstLine": {"type": "integer"}, "removed": {"type": "integer"}, "added": {"type": "integer"}}}),
                ),
            ],
            &["path", "key", "replaced", "version"],
        )
    }

    fn action(&self, args: &Value) -> Action {
        file_action_of(args)
    }

    fn description(&self, _world: &World) -> String {
        "Replace `old_string` with `new_string` in a file you have read (exactly one \
         occurrence unless `replace_all`). The match is literal; CRLF files stay CRLF. If \
         the file changed since you read it, read it again."
            .into()
    }

    fn parameters(&self, world: &World) -> Value {
        schema_of::<EditArgs>(world)
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: EditArgs = parse_args(args)?;
        check_path(&a.file_path)?;
        if a.old_string.is_empty() {
            return Err(invalid_args("old_string must be a non-empty string"));
        }
        if a.old_string == a.new_string {
            return Err(invalid_args("old_string and new_string must differ"));
        }
        let (target, policy) = target_and_policy(
            ctx,
            &a.file_path,
            a.sandbox_permissions,
            a.justification.as_deref(),
            "edit",
        )
        .await?;
        let session = ctx.session.map(|s| s.id());
        let d = target.display().display().to_string();
        let expected = match observation(ctx, target.key()).await {
            Some(Observation::Present(v)) => v,
            Some(Observation::Absent) => {
                return Err(HarnessError::new(
                    ErrorCode::FsNotFound,
                    format!("cannot edit \"{d}\": not found"),
                ))
            }
            None => {
                return Err(remediate(
                    HarnessError::new(
                        ErrorCode::FsNotObserved,
                        format!("edit requires reading \"{d}\" first"),
                    ),
                    policy.mode,
                ))
            }
        };
        let all = a.replace_all.unwrap_or(false);
        let req = EditRequest {
            old: a.old_string,
            new: a.new_string,
            replace_all: all,
        };
        let fs = fs_of(ctx.world)?;
        let out = fs
            .edit_text(&target, &req, Some(&expected), &policy)
            .await
            .map_err(|e| remediate(e, policy.mode))?;
        ctx.world.observe(
            session,
            target.key(),
            Observation::Present(out.version.clone()),
        );
        let mut text = if all {
            format!("The file {d} has been updated. All occurrences were successfully replaced.")
        } else {
            format!("The file {d} has been updated successfully.")
        };
        if let Some((line, _)) = crate::policy::after_call(ctx, &policy).await? {
            text.push('\n');
            text.push_str(&line);
        }
        Ok(ToolOutput {
            image: None,
            text,
            meta: Some(json!({
                "path": target.display(),
                "key": target.key(),
                "replaced": out.replaced,
                "version": out.version.as_str(),
                "diff": edit_diff(&out),
            })),
        })
    }
}

/// [`line_diff`] of the lines an edit touched, numbered as in the file.
fn edit_diff(out: &dsh_fs::EditOutcome) -> Value {
    let mut d = line_diff(&out.before, &out.after);
    if let Some(n) = d["firstLine"].as_u64() {
        d["firstLine"] = json!(n as usize + out.first_line - 1);
    }
    d
}

/// A one-hunk summary of a change: the lines removed and added between the common head
/// and tail of `before` and `after` (as [`str::lines`] counts them).
///
/// Whole lines the two texts share at the start and at the end are skipped by comparing
/// bytes, so a one-line edit of a 100 MiB file costs two memory scans, not two line lists.
fn line_diff(before: &str, after: &str) -> Value {
    let (b, a) = (before.as_bytes(), after.as_bytes());
    // Cut both after the last newline of their common prefix...
    let common = common_prefix(b, a);
    let head_cut = b[..common]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    let head_lines = b[..head_cut].iter().filter(|&&c| c == b'\n').count();
    // When one text is a prefix of the other, their first lines past the cut may still be
    // equal lines ("a" and "a\nb"): count what is left line by line.
    if common == b.len() || common == a.len() {
        let (head, removed, added) = lines_changed(&before[head_cut..], &after[head_cut..]);
        return json!({"firstLine": head_lines + head + 1, "removed": removed, "added": added});
    }
    // Otherwise the first lines past the cut differ. Cut again before the first line start
    // of their common suffix (within what is left).
    let (br, ar) = (&b[head_cut..], &a[head_cut..]);
    let common = common_suffix(br, ar);
    let at_line_start = |s: &[u8], i: usize| i == 0 || s[i - 1] == b'\n';
    let tail_cut = (0..=common)
        .find(|&k| {
            at_line_start(br, br.len() - common + k) && at_line_start(ar, ar.len() - common + k)
        })
        .map_or(0, |k| common - k);
    // The middles start and end on line boundaries, so their lines are the rest.
    let mid_b = &before[head_cut..before.len() - tail_cut];
    let mid_a = &after[head_cut..after.len() - tail_cut];
    let (head, removed, added) = lines_changed(mid_b, mid_a);
    if (removed, added) == (0, 0) {
        // The middles differ only in what `lines` ignores (a `\r` before a `\n`): the
        // line-by-line head runs on into the tail, so count the whole.
        let (head, removed, added) = lines_changed(before, after);
        return json!({"firstLine": head + 1, "removed": removed, "added": added});
    }
    json!({
        "firstLine": head_lines + head + 1,
        "removed": removed,
        "added": added,
    })
}

/// The length of the longest common prefix of `a` and `b` (compared a page at a time).
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 4096 <= n && a[i..i + 4096] == b[i..i + 4096] {
        i += 4096;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// The length of the longest common suffix of `a` and `b`.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut i = 0;
    while i + 4096 <= n && a[n - i - 4096..n - i] == b[n - i - 4096..n - i] {
        i += 4096;
    }
    i + a[..n - i]
        .iter()
        .rev()
        .zip(b[..n - i].iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// `(common head lines, removed, added)` between `before` and `after`, line by line.
fn lines_changed(before: &str, after: &str) -> (usize, usize, usize) {
    let b: Vec<&str> = before.lines().collect();
    let a: Vec<&str> = after.lines().collect();
    let head = b.iter().zip(&a).take_while(|(x, y)| x == y).count();
    let tail = b[head..]
        .iter()
        .rev()
        .zip(a[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    (head, b.len() - head - tail, a.len() - head - tail)
}

#[cfg(test)]
mod tests {
    use super::{line_diff, lines_changed};
    use serde_json::json;

    /// Every text of up to 5 characters over `a`, `\r` and `\n`.
    fn texts() -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..5 {
            last = last
                .iter()
                .flat_map(|t| ["a", "b", "\n"].map(|c| format!("{t}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    #[test]
    fn line_diff_agrees_on_long_texts_around_page_boundaries() {
        let before: String = (0..3000).map(|i| format!("line {i}\n")).collect();
        for at in [0, 1, 4095, 4096, 4097, 8191, 8192, 12_000, before.len() - 1] {
            let at = (0..=at)
                .rev()
                .find(|&i| before.is_char_boundary(i))
                .unwrap_or(0);
            for (cut, insert) in [(1, ""), (0, "x"), (0, "\n"), (1, "new\nlines\n"), (7, "")] {
                let end = (at + cut).min(before.len());
                let after = format!("{}{insert}{}", &before[..at], &before[end..]);
                let (head, removed, added) = lines_changed(&before, &after);
                let want = json!({"firstLine": head + 1, "removed": removed, "added": added});
                assert_eq!(
                    line_diff(&before, &after),
                    want,
                    "at {at}, cut {cut}, insert {insert:?}"
                );
                let (head, removed, added) = lines_changed(&after, &before);
                let want = json!({"firstLine": head + 1, "removed": removed, "added": added});
                assert_eq!(line_diff(&after, &before), want, "reversed, at {at}");
            }
        }
    }

    #[test]
    fn line_diff_agrees_with_the_line_by_line_count_on_every_small_pair() {
        let all = texts();
        for b in &all {
            for a in &all {
                let (head, removed, added) = lines_changed(b, a);
                let want = json!({"firstLine": head + 1, "removed": removed, "added": added});
                assert_eq!(line_diff(b, a), want, "{b:?} -> {a:?}");
            }
        }
    }
}
