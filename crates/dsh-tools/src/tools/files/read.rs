//! The `read` tool: a window of numbered lines in the pinned envelope.

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError};
use dsh_fs::observations::Observation;
use dsh_fs::{FsKind, LineLimits, TotalLines};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{
    check_path, envelope, fs_of, schema_of, with_seen, IMAGE_EXTENSIONS, READ_LIMIT,
    READ_MAX_BYTES, READ_MAX_LINE_CHARS,
};
use crate::schema::bounds::{self, Bound, Bounded};
use crate::{invalid_args, parse_args, CallContext, Tool, ToolOutput, World};

/// The `read` tool. See the [file tools](super).
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
        let target = fs
            .target_of(&a.file_path, Some(&ctx.workspace_root()))
            .await?;
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
                &ctx.read_policy().await,
                ctx.cancel,
            )
            .await?;
        ctx.saw(&target, &w.version);
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
            meta: Some(with_seen(
                json!({
                    "path": target.display(),
                    "offset": offset,
                    "lines": w.lines.len(),
                    "totalLines": w.total_lines.count(),
                    "totalLinesExact": matches!(w.total_lines, TotalLines::Exact(_)),
                }),
                &target,
                &w.version,
            )),
        })
    }
}
