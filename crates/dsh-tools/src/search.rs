//! `glob` and `grep`, in process on the ripgrep crates (`ignore`, `globset`,
//! `grep-searcher`, `grep-regex`): no `rg` binary, no shell, nothing a pattern can inject.
//!
//! Both walk from `path` (default: the session's workspace) honouring `.gitignore`,
//! `.ignore` and the global git excludes, and never enter a VCS directory (`.git`, `.svn`,
//! `.hg`, `.bzr`, `.jj`, `.sl`). `glob` lists hidden files too, oldest modification first,
//! at most 100; `grep` skips hidden files and binary files, searches files in parallel, and
//! returns at most 250 matches (the first in path and line order, whichever thread found
//! them), each line cut at 2000 bytes on a character boundary. Paths under the
//! workspace are shown relative to it. Searches are reads: they are not confined.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use async_trait::async_trait;
use dsh_core::{CancelToken, ErrorCode, HarnessError};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use grep_regex::RegexMatcher;
use grep_searcher::{sinks::Lossy, BinaryDetection, SearcherBuilder};
use ignore::WalkState;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::bounds::{self, Bound, Bounded};
use crate::{CallContext, Tool, ToolOutput, World};

/// Paths `glob` shows.
pub const GLOB_MAX_RESULTS: usize = 100;
/// Matches `grep` shows.
pub const GREP_MAX_MATCHES: usize = 250;
/// Bytes of a matched line `grep` shows.
pub const GREP_MAX_LINE_BYTES: usize = 2000;
/// The most paths or matches a search may find before it asks to be narrowed.
pub const SEARCH_MAX_FOUND: usize = 1_000_000;

const VCS_DIRS: [&str; 6] = [".git", ".svn", ".hg", ".bzr", ".jj", ".sl"];

use crate::{invalid_args, parse_args};

/// The workspace of the call and the root to search.
fn roots(ctx: &CallContext<'_>, path: Option<&str>) -> Result<(PathBuf, PathBuf), HarnessError> {
    let cwd = ctx
        .session
        .map(|s| s.header().cwd.clone())
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_else(|| PathBuf::from("/"));
    let cwd = dsh_core::path::root_of(&cwd);
    let root = match path {
        Some(p) if p.trim().is_empty() => {
            return Err(invalid_args("path must be a non-empty string when given"))
        }
        Some(p) => dsh_core::path::root_of(&cwd.join(p)),
        None => cwd.clone(),
    };
    if !root.exists() {
        return Err(HarnessError::new(
            ErrorCode::SearchFailed,
            format!("cannot search \"{}\": not found", root.display()),
        ));
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

/// A walker from `root` that never enters VCS directories.
fn walker(root: &Path, hidden: bool) -> ignore::Walk {
    walk_builder(root, hidden).build()
}

fn walk_builder(root: &Path, hidden: bool) -> ignore::WalkBuilder {
    let mut b = ignore::WalkBuilder::new(root);
    b.hidden(!hidden)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .ignore(true)
        .parents(true)
        .require_git(false)
        .filter_entry(|e| !VCS_DIRS.iter().any(|v| e.file_name() == *v));
    b
}

/// The matcher of one glob. A set of one rather than `Glob::compile_matcher`, which
/// panics when the glob's regex is over the regex size limit; the set reports it.
// Regression: issue 11 (a 2 MB glob killed the server through that panic).
fn glob_matcher(pattern: &str, what: &str) -> Result<GlobSet, HarnessError> {
    let rejected = |e: globset::Error| {
        HarnessError::new(
            ErrorCode::SearchInvalidPattern,
            format!(
                "{what} pattern rejected: {}",
                bounds::shorten(&e.to_string())
            ),
        )
    };
    let glob = GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(rejected)?;
    GlobSetBuilder::new().add(glob).build().map_err(rejected)
}

/// Whether `rel` (relative to the root) matches as ripgrep's `--glob` would: a pattern
/// without `/` matches the file name at any depth, one with `/` the relative path.
fn glob_hit(m: &GlobSet, pattern: &str, rel: &Path) -> bool {
    if pattern.contains('/') {
        m.is_match(rel)
    } else {
        rel.file_name().is_some_and(|n| m.is_match(n))
    }
}

/// The error of a search worker that did not finish: `INTERNAL` either way, since a
/// worker that panicked is a bug in dsh and one that was cancelled means the runtime is
/// shutting down under the call.
fn worker_failed(tool: &str, e: tokio::task::JoinError) -> HarnessError {
    match e.try_into_panic() {
        Ok(payload) => HarnessError::panicked(&format!("the {tool} worker"), payload.as_ref()),
        Err(e) => HarnessError::internal(format!(
            "the {tool} worker was cancelled before it finished ({e}); the runtime is \
             shutting down"
        )),
    }
}

fn aborted() -> HarnessError {
    HarnessError::new(ErrorCode::SearchAborted, "the search was cancelled")
}

fn overflow(what: &str) -> HarnessError {
    HarnessError::new(
        ErrorCode::SearchRawOutputOverflow,
        format!(
            "{what} found more than {SEARCH_MAX_FOUND} results; narrow the pattern or the path"
        ),
    )
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

fn glob_blocking(
    cwd: PathBuf,
    root: PathBuf,
    pattern: String,
    cancel: CancelToken,
) -> Result<ToolOutput, HarnessError> {
    let m = glob_matcher(&pattern, "glob")?;
    let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
    for entry in walker(&root, true) {
        if cancel.is_cancelled() {
            return Err(aborted());
        }
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let rel = entry.path().strip_prefix(&root).unwrap_or(entry.path());
        if glob_hit(&m, &pattern, rel) {
            if found.len() >= SEARCH_MAX_FOUND {
                return Err(overflow("glob"));
            }
            let mtime = entry
                .metadata()
                .ok()
                .and_then(|md| md.modified().ok())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            found.push((mtime, entry.into_path()));
        }
    }
    found.sort();
    let total = found.len();
    let paths: Vec<String> = found
        .iter()
        .take(GLOB_MAX_RESULTS)
        .map(|(_, p)| shown(&cwd, p))
        .collect();
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
    Ok(ToolOutput {
        text,
        meta: Some(json!({"root": shown(&cwd, &root), "total": total, "shown": paths.len()})),
        image: None,
    })
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
        let (cwd, root) = roots(ctx, a.path.as_deref())?;
        let cancel = ctx.cancel.clone();
        tokio::task::spawn_blocking(move || glob_blocking(cwd, root, a.pattern, cancel))
            .await
            .map_err(|e| worker_failed("glob", e))?
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

/// Cuts `line` to at most `max` bytes on a character boundary.
fn cut(line: &str, max: usize) -> String {
    if line.len() <= max {
        return line.to_owned();
    }
    let mut end = max;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} (line truncated)", &line[..end])
}

/// Keeps `line` under `key` if `key` is among the GREP_MAX_MATCHES smallest seen.
fn keep_first(kept: &Mutex<BTreeMap<(String, u64), String>>, key: (String, u64), line: &str) {
    let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
    if kept.len() >= GREP_MAX_MATCHES {
        match kept.last_key_value() {
            Some((last, _)) if *last > key => {
                kept.pop_last();
            }
            _ => return,
        }
    }
    let line = line.trim_end_matches('\n').trim_end_matches('\r');
    kept.insert(key, cut(line, GREP_MAX_LINE_BYTES));
}

fn grep_blocking(
    cwd: PathBuf,
    root: PathBuf,
    pattern: String,
    include: Option<String>,
    deny: Vec<PathBuf>,
    cancel: CancelToken,
) -> Result<ToolOutput, HarnessError> {
    // Files whose reads the sandbox denies (credential stores) are never opened. The
    // walk follows no link, so an entry's canonical path is the root's plus its own rest.
    let deny = dsh_sandbox::deny_read::Matcher::new(&deny);
    let canonical_root = dsh_core::path::canonical_path(&root);
    let matcher = RegexMatcher::new_line_matcher(&pattern).map_err(|e| {
        HarnessError::new(
            ErrorCode::SearchInvalidPattern,
            format!("grep pattern rejected: {}", bounds::shorten(&e.to_string())),
        )
    })?;
    let inc = include
        .as_deref()
        .map(|i| glob_matcher(i, "include").map(|m| (m, i.to_owned())))
        .transpose()?;
    // Files are searched in parallel; the matches kept are the first GREP_MAX_MATCHES in
    // (path, line) order, so the answer does not depend on which thread ran first.
    let kept: Mutex<BTreeMap<(String, u64), String>> = Mutex::new(BTreeMap::new());
    let seen = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    walk_builder(&root, false)
        .threads(threads)
        .build_parallel()
        .run(|| {
            // A line longer than the heap limit is not searched: its file is skipped, as an
            // unreadable one is.
            let mut searcher = SearcherBuilder::new()
                .binary_detection(BinaryDetection::quit(0))
                .line_number(true)
                .heap_limit(Some(64 << 20))
                .build();
            let (matcher, kept, seen, inc, root, cwd, cancel, deny, canonical_root) = (
                matcher.clone(),
                &kept,
                &seen,
                &inc,
                &root,
                &cwd,
                &cancel,
                &deny,
                &canonical_root,
            );
            Box::new(move |entry| {
                if cancel.is_cancelled() || seen.load(Ordering::Relaxed) >= SEARCH_MAX_FOUND {
                    return WalkState::Quit;
                }
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return WalkState::Continue;
                }
                let rel = entry.path().strip_prefix(root).unwrap_or(entry.path());
                if let Some((m, p)) = inc {
                    if !glob_hit(m, p, rel) {
                        return WalkState::Continue;
                    }
                }
                if deny.denies_as_written(entry.path())
                    || deny.denies_canonical(&canonical_root.join(rel))
                {
                    return WalkState::Continue;
                }
                let path = shown(cwd, entry.path());
                // Opened non-blocking: a "regular" file whose read waits for data
                // (`/proc/kmsg`) would hold the search, and the call, forever. It reads as
                // unreadable then, and an unreadable file is skipped, as ripgrep does.
                // Opened at its canonical path with no symlink allowed on the way
                // (a directory swapped for a link since the walk listed it is refused, not
                // followed into a denied one), and checked by identity (a hard link).
                let Ok(file) = dsh_fs::open_no_symlinks(&canonical_root.join(rel)) else {
                    return WalkState::Continue;
                };
                let denied = file.metadata().is_ok_and(|m| {
                    use std::os::unix::fs::MetadataExt;
                    deny.denies_identity(m.dev(), m.ino())
                });
                if denied {
                    return WalkState::Continue;
                }
                let _ = searcher.search_file(
                    &matcher,
                    &file,
                    Lossy(|number, line| {
                        let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
                        keep_first(kept, (path.clone(), number), line);
                        Ok(n < SEARCH_MAX_FOUND && !cancel.is_cancelled())
                    }),
                );
                WalkState::Continue
            })
        });
    if cancel.is_cancelled() {
        return Err(aborted());
    }
    let seen = seen.into_inner();
    if seen >= SEARCH_MAX_FOUND {
        return Err(overflow("grep"));
    }
    let kept: Vec<(String, u64, String)> = kept
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|((path, n), line)| (path, n, line))
        .collect();
    if kept.is_empty() {
        return Ok(ToolOutput {
            image: None,
            text: "No matches found".into(),
            meta: Some(json!({"matches": 0})),
        });
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
    Ok(ToolOutput {
        text,
        meta: Some(json!({"matches": seen, "shown": kept.len()})),
        image: None,
    })
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
        let (cwd, root) = roots(ctx, a.path.as_deref())?;
        let cancel = ctx.cancel.clone();
        let deny = ctx.world.policy().deny_read().to_vec();
        tokio::task::spawn_blocking(move || {
            grep_blocking(cwd, root, a.pattern, a.include, deny, cancel)
        })
        .await
        .map_err(|e| worker_failed("grep", e))?
    }
}

#[cfg(test)]
mod tests {
    use super::glob_matcher;
    use dsh_core::ErrorCode;

    #[test]
    fn a_glob_whose_regex_is_over_the_size_limit_is_refused_not_a_panic() {
        // Regression: issue 11. 256 Ki `?` compile past the regex crate's NFA size limit,
        // where `Glob::compile_matcher` panics ("regex compilation shouldn't fail"). The
        // argument bound keeps a call from getting here; the matcher holds without it.
        let e = glob_matcher(&"?".repeat(256 << 10), "glob").expect_err("too large");
        assert_eq!(e.code(), ErrorCode::SearchInvalidPattern);
        assert!(
            e.message()
                .starts_with("glob pattern rejected: error building NFA"),
            "{}",
            e.message()
        );
        assert!(
            e.message().len() < 1200,
            "the message quotes a bounded part"
        );
    }
}
