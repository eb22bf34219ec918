//! `glob` and `grep`: the tools over the filesystem seam's searches
//! ([`FileSystem::glob`](dsh_fs::FileSystem::glob), [`FileSystem::grep`](dsh_fs::FileSystem::grep);
//! see [`dsh_fs::search`] for how they walk), so a provider elsewhere carries them too.
//!
//! Both search from `path` (default: the session's workspace). `glob` shows at most 100
//! paths, oldest modification first; `grep` at most 250 matches, grouped by file, each
//! line cut at 2000 bytes. Paths under the workspace are shown relative to it. Searches
//! are reads: they are not confined; a fenced provider's grep never opens a file whose
//! reads it denies.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError};
use dsh_fs::{FsTarget, GlobQuery, GrepQuery};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::schema::bounds::{self, Bound, Bounded};
use crate::{CallContext, Tool, ToolOutput, World};

/// Paths `glob` shows.
pub const GLOB_MAX_RESULTS: usize = 100;
/// Matches `grep` shows.
pub const GREP_MAX_MATCHES: usize = 250;
/// Bytes of a matched line `grep` shows.
pub const GREP_MAX_LINE_BYTES: usize = 2000;
pub use dsh_fs::search::SEARCH_MAX_FOUND;

use crate::{invalid_args, parse_args};

/// The workspace of the call and the root to search, resolved by the filesystem seam.
async fn roots(
    ctx: &CallContext<'_>,
    path: Option<&str>,
) -> Result<(PathBuf, FsTarget), HarnessError> {
    let fs = crate::tools::files::fs_of(ctx.world)?;
    let cwd = ctx.workspace_root();
    let path = match path {
        Some(p) if p.trim().is_empty() => {
            return Err(invalid_args("path must be a non-empty string when given"))
        }
        Some(p) => p,
        None => ".",
    };
    let not_found = |shown: &Path| {
        HarnessError::new(
            ErrorCode::SearchFailed,
            format!("cannot search \"{}\": not found", shown.display()),
        )
    };
    let root = match fs.target_of(path, Some(&cwd)).await {
        Ok(t) => t,
        Err(e) if e.code() == ErrorCode::FsNotFound => {
            return Err(not_found(&dsh_core::path::root_of(&cwd.join(path))))
        }
        Err(e) => return Err(e),
    };
    if fs.stat(&root).await?.is_none() {
        return Err(not_found(root.key()));
    }
    Ok((cwd, root))
}

/// `path` relative to the workspace when it is inside it (`.` for the workspace itself).
fn shown(cwd: &Path, path: &Path) -> String {
    match path.strip_prefix(cwd) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// The `glob` tool. See the [module docs](self).
#[derive(Debug, Default)]
pub struct GlobTool;

/// The arguments of a `glob` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct GlobArgs {
    /// The glob, e.g. `**/*.rs` or `*.md` (without `/` it matches file names at any depth).
    pattern: String,
    /// Where to search (default: the workspace).
    path: Option<String>,
}

impl Bounded for GlobArgs {
    const BOUNDS: &'static [Bound] = &[
        Bound {
            arg: "pattern",
            max: bounds::GLOB_MAX_BYTES,
            advice: "use a shorter glob, or several calls",
        },
        bounds::SEARCH_PATH,
    ];
}

/// The text and facts of what a glob found.
fn glob_output(cwd: &Path, root: &FsTarget, found: dsh_fs::GlobFound) -> ToolOutput {
    let total = found.total;
    let paths: Vec<String> = found.paths.iter().map(|p| shown(cwd, p)).collect();
    let text = if total == 0 {
        "No files found".to_owned()
    } else if total > GLOB_MAX_RESULTS {
        format!(
            "{}\n\n(Showing {GLOB_MAX_RESULTS} of {total} paths. The complete result could not be saved; narrow pattern or path to see more.)",
            paths.join("\n")
        )
    } else {
        paths.join("\n")
    };
    ToolOutput {
        text,
        meta: Some(json!({"root": shown(cwd, root.key()), "total": total, "shown": paths.len()})),
        image: None,
    }
}

#[async_trait]
impl Tool for GlobTool {
    fn name(&self) -> &str {
        "glob"
    }

    fn title(&self) -> &str {
        "Find files by name"
    }

    fn hints(&self) -> crate::ToolHints {
        crate::ToolHints::READ_ONLY
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("root", serde_json::json!({"type": "string"})),
                ("total", serde_json::json!({"type": "integer"})),
                ("shown", serde_json::json!({"type": "integer"})),
            ],
            &["total", "shown"],
        )
    }

    fn description(&self, _world: &World) -> String {
        "Find files by name pattern (`**/*.rs`, `src/**/mod.rs`, `*.md`), honouring \
         .gitignore, hidden files included, oldest first, at most 100."
            .into()
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<GlobArgs>()
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: GlobArgs = parse_args(args)?;
        if a.pattern.trim().is_empty() {
            return Err(invalid_args("pattern must be a non-empty string"));
        }
        let (cwd, root) = roots(ctx, a.path.as_deref()).await?;
        let query = GlobQuery {
            pattern: a.pattern,
            limit: GLOB_MAX_RESULTS,
        };
        let found = crate::tools::files::fs_of(ctx.world)?
            .glob(&root, &query, &ctx.read_policy().await, ctx.cancel)
            .await?;
        Ok(glob_output(&cwd, &root, found))
    }
}

/// The `grep` tool. See the [module docs](self).
#[derive(Debug, Default)]
pub struct GrepTool;

/// The arguments of a `grep` call.
#[derive(Debug, Deserialize, JsonSchema)]
struct GrepArgs {
    /// A regular expression (Rust regex syntax, like ripgrep).
    pattern: String,
    /// Where to search (default: the workspace).
    path: Option<String>,
    /// Only files matching this glob (`*.rs`, `*.{ts,tsx}`).
    include: Option<String>,
}

impl Bounded for GrepArgs {
    const BOUNDS: &'static [Bound] = &[
        Bound {
            arg: "pattern",
            max: bounds::GREP_PATTERN_MAX_BYTES,
            advice: "use a shorter regular expression, or several calls",
        },
        Bound {
            arg: "include",
            max: bounds::GLOB_MAX_BYTES,
            advice: "use a shorter glob, or several calls",
        },
        bounds::SEARCH_PATH,
    ];
}

/// Rejects what ripgrep's `--glob` would read differently: blank, negated, comma lists.
fn check_include(include: &str) -> Result<(), HarnessError> {
    if include.trim().is_empty() {
        return Err(invalid_args(
            "include must be a non-empty string when given",
        ));
    }
    if include.starts_with('!') {
        return Err(invalid_args(
            "include must not be negated (a leading \"!\")",
        ));
    }
    let mut depth = 0i32;
    for c in include.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                return Err(invalid_args(
                    "include must be one glob; use {a,b} for alternatives, not a comma list",
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The text and facts of what a grep found.
fn grep_output(cwd: &Path, found: dsh_fs::GrepFound) -> ToolOutput {
    let seen = found.total;
    let kept: Vec<(String, u64, String)> = found
        .matches
        .into_iter()
        .map(|m| (shown(cwd, &m.path), m.line, m.text))
        .collect();
    if kept.is_empty() {
        return ToolOutput {
            image: None,
            text: "No matches found".into(),
            meta: Some(json!({"matches": 0})),
        };
    }
    let head = if seen > kept.len() {
        format!("Found {} of {seen} matches", kept.len())
    } else if seen == 1 {
        "Found 1 match".to_owned()
    } else {
        format!("Found {seen} matches")
    };
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (path, n, line) in &kept {
        let row = format!("Line {n}: {line}");
        match groups.iter_mut().find(|(p, _)| p == path) {
            Some((_, rows)) => rows.push(row),
            None => groups.push((path.clone(), vec![row])),
        }
    }
    let body: Vec<String> = groups
        .iter()
        .map(|(p, rows)| format!("{p}\n{}", rows.join("\n")))
        .collect();
    let mut text = format!("{head}\n\n{}", body.join("\n\n"));
    if seen > kept.len() {
        text.push_str(&format!(
            "\n\n(Showing {} of {seen} matches. The complete result could not be saved; narrow pattern or path to see more.)",
            kept.len()
        ));
    }
    ToolOutput {
        text,
        meta: Some(json!({"matches": seen, "shown": kept.len()})),
        image: None,
    }
}

#[async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &str {
        "grep"
    }

    fn title(&self) -> &str {
        "Search file contents"
    }

    fn hints(&self) -> crate::ToolHints {
        crate::ToolHints::READ_ONLY
    }

    fn output_schema(&self) -> Value {
        crate::object_schema(
            &[
                ("matches", serde_json::json!({"type": "integer"})),
                ("shown", serde_json::json!({"type": "integer"})),
            ],
            &["matches"],
        )
    }

    fn description(&self, _world: &World) -> String {
        "Search file contents with a regular expression (ripgrep syntax), honouring \
         .gitignore and skipping hidden and binary files; `include` limits the files by glob. \
         At most 250 matches, grouped by file, with line numbers."
            .into()
    }

    fn parameters(&self, _world: &World) -> Value {
        crate::args_schema::<GrepArgs>()
    }

    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError> {
        let a: GrepArgs = parse_args(args)?;
        if a.pattern.is_empty() {
            return Err(invalid_args("pattern must be a non-empty string"));
        }
        if let Some(i) = &a.include {
            check_include(i)?;
        }
        let (cwd, root) = roots(ctx, a.path.as_deref()).await?;
        let query = GrepQuery {
            pattern: a.pattern,
            include: a.include,
            limit: GREP_MAX_MATCHES,
            max_line_bytes: GREP_MAX_LINE_BYTES,
        };
        let found = crate::tools::files::fs_of(ctx.world)?
            .grep(&root, &query, &ctx.read_policy().await, ctx.cancel)
            .await?;
        Ok(grep_output(&cwd, found))
    }
}
