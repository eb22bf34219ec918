//! Finding files and lines: what [`FileSystem::glob`](crate::FileSystem::glob) and
//! [`FileSystem::grep`](crate::FileSystem::grep) do, in process on the ripgrep crates
//! (`ignore`, `globset`, `grep-searcher`, `grep-regex`): no `rg` binary, no shell, nothing
//! a pattern can inject.
//!
//! Both walk from a root honouring `.gitignore`, `.ignore` and the global git excludes,
//! and never enter a VCS directory (`.git`, `.svn`, `.hg`, `.bzr`, `.jj`, `.sl`). A glob
//! lists hidden files too, oldest modification first; grep skips hidden and binary files,
//! searches files in parallel, and keeps the first matches in path and line order
//! (whichever thread found them), each line cut on a character boundary. Either stops
//! with `SEARCH_RAW_OUTPUT_OVERFLOW` past [`SEARCH_MAX_FOUND`] results, and with
//! `SEARCH_ABORTED` once its cancel token fires. The providers run these on a blocking
//! thread.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use dsh_core::{CancelToken, ErrorCode, HarnessError};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{sinks::Lossy, BinaryDetection, SearcherBuilder};

/// The most paths or matches a search may find before it asks to be narrowed.
pub const SEARCH_MAX_FOUND: usize = 1_000_000;

const VCS_DIRS: [&str; 6] = [".git", ".svn", ".hg", ".bzr", ".jj", ".sl"];

/// What a glob looks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobQuery {
    /// The glob: without `/` it matches file names at any depth, with `/` the path
    /// relative to the root (ripgrep's `--glob`).
    pub pattern: String,
    /// How many paths to return (the oldest).
    pub limit: usize,
}

/// What a glob found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobFound {
    /// The oldest `limit` matching files, oldest modification first (absolute).
    pub paths: Vec<PathBuf>,
    /// How many files matched in all.
    pub total: usize,
}

/// What a grep looks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrepQuery {
    /// A regular expression (Rust regex syntax, as ripgrep's).
    pub pattern: String,
    /// Only files matching this glob (as [`GlobQuery::pattern`]).
    pub include: Option<String>,
    /// How many matches to return (the first in path and line order).
    pub limit: usize,
    /// Bytes of a matched line kept (cut on a character boundary, marked
    /// `(line truncated)`).
    pub max_line_bytes: usize,
}

/// One matching line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrepMatch {
    /// The file (absolute).
    pub path: PathBuf,
    /// Its 1-based line number.
    pub line: u64,
    /// The line, without its line end, cut to the query's `max_line_bytes`.
    pub text: String,
}

/// What a grep found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrepFound {
    /// The first `limit` matches in path and line order.
    pub matches: Vec<GrepMatch>,
    /// How many lines matched in all.
    pub total: usize,
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
                dsh_core::quoted(&e.to_string())
            ),
        )
    };
    let glob = GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(rejected)?;
    GlobSetBuilder::new().add(glob).build().map_err(rejected)
}

/// `path` relative to the walk's `root`; the root's own name when the root is the file
/// itself (a search of one file).
fn relative<'a>(root: &'a Path, path: &'a Path) -> &'a Path {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => root.file_name().map_or(rel, Path::new),
        Ok(rel) => rel,
        Err(_) => path,
    }
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

/// The files beneath `root` matching `query` (see the [module docs](self)). Blocking.
///
/// # Errors
/// `SEARCH_INVALID_PATTERN`, `SEARCH_ABORTED`, `SEARCH_RAW_OUTPUT_OVERFLOW`.
pub fn glob(
    root: &Path,
    query: &GlobQuery,
    cancel: &CancelToken,
) -> Result<GlobFound, HarnessError> {
    let m = glob_matcher(&query.pattern, "glob")?;
    // The oldest `limit` matches only (a max-heap: its top is the newest kept), so memory
    // stays at `limit` paths whatever matches.
    let mut found: std::collections::BinaryHeap<(SystemTime, PathBuf)> =
        std::collections::BinaryHeap::new();
    let mut total = 0usize;
    for entry in walk_builder(root, true).build() {
        if cancel.is_cancelled() {
            return Err(aborted());
        }
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let rel = relative(root, entry.path());
        if glob_hit(&m, &query.pattern, rel) {
            if total >= SEARCH_MAX_FOUND {
                return Err(overflow("glob"));
            }
            total += 1;
            let mtime = entry
                .metadata()
                .ok()
                .and_then(|md| md.modified().ok())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let newer_than_kept = found.len() >= query.limit
                && found
                    .peek()
                    .is_some_and(|top| (mtime, entry.path()) >= (top.0, top.1.as_path()));
            if !newer_than_kept {
                found.push((mtime, entry.into_path()));
                if found.len() > query.limit {
                    found.pop();
                }
            }
        }
    }
    let found = found.into_sorted_vec();
    Ok(GlobFound {
        paths: found.into_iter().map(|(_, p)| p).collect(),
        total,
    })
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

/// The matches kept so far, by (path as text, line): the first `limit` in that order.
type Kept = Mutex<BTreeMap<(String, u64), (PathBuf, String)>>;

/// Keeps `line` under `key` if `key` is among the `limit` smallest seen.
fn keep_first(kept: &Kept, limit: usize, key: (String, u64), path: &Path, line: &str, max: usize) {
    let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
    if kept.len() >= limit {
        match kept.last_key_value() {
            Some((last, _)) if *last > key => {
                kept.pop_last();
            }
            _ => return,
        }
    }
    let line = line.trim_end_matches('\n').trim_end_matches('\r');
    kept.insert(key, (path.to_path_buf(), cut(line, max)));
}

/// The most memory a grep pattern may compile to (ripgrep allows 100 MiB: one `\w{5000}`
/// took hundreds of MiB before it was refused).
pub const REGEX_SIZE_LIMIT: usize = 8 << 20;

/// The most memory a grep's lazy DFA may use per searching thread (ripgrep allows 1 GiB;
/// past it the search goes on, slower, with its cache cleared).
pub const REGEX_DFA_LIMIT: usize = 8 << 20;

/// The lines beneath `root` matching `query` (see the [module docs](self)); files whose
/// reads `deny` refuses (see [`dsh_sandbox::deny_read`]) are never opened. Blocking.
///
/// # Errors
/// `SEARCH_INVALID_PATTERN`, `SEARCH_ABORTED`, `SEARCH_RAW_OUTPUT_OVERFLOW`.
pub fn grep(
    root: &Path,
    query: &GrepQuery,
    deny: &dsh_sandbox::deny_read::Matcher,
    cancel: &CancelToken,
) -> Result<GrepFound, HarnessError> {
    // The walk follows no link, so an entry's canonical path is the root's plus its own rest.
    let canonical_root = dsh_core::path::canonical_path(root);
    let matcher = RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_LIMIT)
        .build(&query.pattern)
        .map_err(|e| {
            HarnessError::new(
                ErrorCode::SearchInvalidPattern,
                format!(
                    "grep pattern rejected: {} (a pattern compiles to at most {} MiB: narrow a \
                     large repetition such as \\w{{5000}}, or use a literal)",
                    dsh_core::quoted(&e.to_string()),
                    REGEX_SIZE_LIMIT >> 20
                ),
            )
        })?;
    let inc = query
        .include
        .as_deref()
        .map(|i| glob_matcher(i, "include").map(|m| (m, i.to_owned())))
        .transpose()?;
    // Files are searched in parallel; the matches kept are the first `limit` in (path,
    // line) order, so the answer does not depend on which thread ran first.
    let kept: Kept = Mutex::new(BTreeMap::new());
    let seen = AtomicUsize::new(0);
    let (limit, max_line) = (query.limit, query.max_line_bytes);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
    // One walk lists the files, lazily, a folder at a time; the searchers take them from a
    // bounded queue. Memory stays at the queue and the open folders whatever the tree holds
    // (a parallel walk queued every entry of a folder at once: 100 000 deep paths took
    // hundreds of MiB).
    let (tx, rx) = std::sync::mpsc::sync_channel::<ignore::DirEntry>(256);
    let rx = Mutex::new(rx);
    let search_one = |searcher: &mut grep_searcher::Searcher, entry: ignore::DirEntry| {
        let rel = relative(root, entry.path());
        if let Some((m, p)) = &inc {
            if !glob_hit(m, p, rel) {
                return;
            }
        }
        if deny.denies_as_written(entry.path()) || deny.denies_canonical(&canonical_root.join(rel))
        {
            return;
        }
        let path = entry.path().to_path_buf();
        let key = path.to_string_lossy().into_owned();
        // Opened non-blocking: a "regular" file whose read waits for data (`/proc/kmsg`)
        // would hold the search, and the call, forever. It reads as unreadable then, and an
        // unreadable file is skipped, as ripgrep does. Opened at its canonical path with no
        // symlink allowed on the way (a directory swapped for a link since the walk listed
        // it is refused, not followed into a denied one), and checked by identity (a hard
        // link).
        let at = if entry.path() == root {
            canonical_root.clone()
        } else {
            canonical_root.join(rel)
        };
        let Ok(file) = crate::open_no_symlinks(&at) else {
            return;
        };
        let denied = file.metadata().is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            deny.denies_identity(m.dev(), m.ino())
        });
        if denied {
            return;
        }
        let _ = searcher.search_file(
            &matcher,
            &file,
            Lossy(|number, line| {
                let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
                keep_first(&kept, limit, (key.clone(), number), &path, line, max_line);
                Ok(n < SEARCH_MAX_FOUND && !cancel.is_cancelled())
            }),
        );
    };
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let (rx, search_one) = (&rx, &search_one);
            scope.spawn(move || {
                // A line longer than the heap limit is not searched: its file is skipped, as
                // an unreadable one is.
                let mut searcher = SearcherBuilder::new()
                    .binary_detection(BinaryDetection::quit(0))
                    .line_number(true)
                    .heap_limit(Some(64 << 20))
                    .build();
                loop {
                    let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    match next {
                        Ok(entry) => search_one(&mut searcher, entry),
                        Err(_) => break,
                    }
                }
            });
        }
        for entry in walk_builder(root, false).build() {
            if cancel.is_cancelled() || seen.load(Ordering::Relaxed) >= SEARCH_MAX_FOUND {
                break;
            }
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            if tx.send(entry).is_err() {
                break;
            }
        }
        drop(tx);
    });
    if cancel.is_cancelled() {
        return Err(aborted());
    }
    let total = seen.into_inner();
    if total >= SEARCH_MAX_FOUND {
        return Err(overflow("grep"));
    }
    let matches = kept
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|((_, line), (path, text))| GrepMatch { path, line, text })
        .collect();
    Ok(GrepFound { matches, total })
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
