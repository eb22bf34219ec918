//! The few facts of git's configuration files that decide which files git runs or reads
//! as configuration: `core.hooksPath`, and the files `include.path` and
//! `includeIf.<condition>.path` pull in.
//!
//! A confined command must not be able to change a file that the host's git later runs
//! (a hook) or reads as configuration (an included file can set `core.fsmonitor`). This
//! module reads git's config syntax (`[section "sub"]`, `key = value`, quoting, escapes,
//! `#`/`;` comments, line continuations) and over-approximates: every `hooksPath` value
//! in a file counts, not only the last, and every `includeIf` counts whatever its
//! condition, so a file that could be included is protected.
//!
//! # Limits
//! Files are read up to [`MAX_CONFIG_BYTES`]; includes are followed [`MAX_INCLUDE_DEPTH`]
//! deep, as git itself does.

use std::path::{Path, PathBuf};

/// Bytes read of one config file (git's own files are a few KiB); the runners read
/// no more of one either.
pub use dsh_sandbox::small_file::MAX_CONFIG_BYTES;

/// How deep includes are followed (git's own limit is 10).
pub const MAX_INCLUDE_DEPTH: usize = 10;

/// How many includes and hooks paths one config file and what it includes may name before
/// the rest are not followed (and [`ConfigFacts::complete`] is false): git has no such
/// limit, but tens of thousands of them would make every call slow.
pub const MAX_NAMED: usize = 512;

/// What the config files reachable from one file say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigFacts {
    /// Every `core.hooksPath` value, as written (`~/` already expanded).
    pub hooks_paths: Vec<PathBuf>,
    /// Whether every include and hooks path was taken (at most [`MAX_NAMED`]).
    pub complete: bool,
    /// Every file an include names (absolute), followed or not.
    pub includes: Vec<PathBuf>,
    /// Every `remote.*.url` and `remote.*.pushurl` that names a repository on this disk
    /// ([`is_local_url`]), as a path (relative ones as written).
    pub local_remotes: Vec<PathBuf>,
}

/// Whether a remote URL names a repository on this disk: a path (`/srv/r.git`, `../r`,
/// `.git/x.git`) or a `file://` URL; not `host:path` (ssh) nor `scheme://` of another
/// kind.
pub fn is_local_url(url: &str) -> bool {
    if url.is_empty() {
        return false;
    }
    if url.starts_with("file://") {
        return true;
    }
    if url.contains("://") {
        return false;
    }
    // git's rule: a colon before any slash makes it `host:path`.
    match (url.find(':'), url.find('/')) {
        (Some(c), Some(s)) => s < c,
        (Some(_), None) => false,
        _ => true,
    }
}

/// The path a local remote URL ([`is_local_url`]) names.
pub fn local_path(url: &str) -> PathBuf {
    expand_home(url.strip_prefix("file://").unwrap_or(url))
}

/// The facts of the config file at `path` and of every file it includes, recursively.
/// A missing or unreadable file has none.
pub fn read(path: &Path) -> ConfigFacts {
    let mut facts = ConfigFacts {
        complete: true,
        ..ConfigFacts::default()
    };
    collect(path, 0, &mut facts);
    facts
}

fn collect(path: &Path, depth: usize, facts: &mut ConfigFacts) {
    let Some(text) = read_bounded(path) else {
        return;
    };
    let base = path.parent().unwrap_or(Path::new("/"));
    for entry in entries(&text) {
        if facts.hooks_paths.len() + facts.includes.len() >= MAX_NAMED {
            facts.complete = false;
            return;
        }
        match (entry.section.as_str(), entry.key.as_str()) {
            ("core", "hookspath") if entry.subsection.is_none() => {
                if let Some(v) = entry.value.filter(|v| !v.is_empty()) {
                    facts.hooks_paths.push(expand_home(&v));
                }
            }
            ("remote", "url" | "pushurl") => {
                if let Some(v) = entry.value.filter(|v| is_local_url(v)) {
                    facts.local_remotes.push(local_path(&v));
                }
            }
            ("include", "path") | ("includeif", "path") => {
                let Some(v) = entry.value.filter(|v| !v.is_empty()) else {
                    continue;
                };
                let p = expand_home(&v);
                let p = if p.is_absolute() { p } else { base.join(p) };
                let p = dsh_core::path::fold_dots(&p);
                if facts.includes.contains(&p) {
                    continue;
                }
                facts.includes.push(p.clone());
                if depth < MAX_INCLUDE_DEPTH {
                    collect(&p, depth + 1, facts);
                }
            }
            _ => {}
        }
    }
}

fn read_bounded(path: &Path) -> Option<String> {
    crate::small_file::read(path, MAX_CONFIG_BYTES)
}

/// `~/rest` with the home directory; anything else unchanged.
fn expand_home(v: &str) -> PathBuf {
    match (v.strip_prefix("~/"), dsh_sandbox::home_dir()) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(v),
    }
}

/// One `key = value` line of a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The section name, lower case.
    pub(crate) section: String,
    /// The subsection, as written (`[includeIf "gitdir:~/w/"]`), if any.
    pub(crate) subsection: Option<String>,
    /// The key, lower case.
    pub(crate) key: String,
    /// The value; `None` for a bare key (boolean true).
    pub(crate) value: Option<String>,
}

/// Every entry of `text`, in order. Lines that do not parse are skipped (git refuses
/// such a file; dsh then has nothing to protect from it, and neither does git run it).
pub(crate) fn entries(text: &str) -> Vec<Entry> {
    parse(text).0
}

/// The value the last `section.key` (no subsection) of `entries` sets, as git takes a
/// single-valued key.
pub(crate) fn last(entries: &[Entry], section: &str, key: &str) -> Option<String> {
    entries
        .iter()
        .filter(|e| e.section == section && e.subsection.is_none() && e.key == key)
        .filter_map(|e| e.value.clone())
        .next_back()
}

/// Every entry of `text`, and whether every line was understood (`false`: a line was
/// skipped, as a malformed one, or a key sat outside any section). What dsh does not
/// understand of a config it must not vouch for.
pub(crate) fn parse(text: &str) -> (Vec<Entry>, bool) {
    // git skips a UTF-8 byte order mark at the start of a config file.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    let mut clean = true;
    let mut section = String::new();
    let mut subsection: Option<String> = None;
    let mut chars = text.chars().peekable();
    loop {
        // Skip blank space, including line breaks, before a statement.
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&c) = chars.peek() else {
            break;
        };
        match c {
            '#' | ';' => skip_line(&mut chars),
            '[' => {
                chars.next();
                match header(&mut chars) {
                    Some((s, sub)) => {
                        section = s;
                        subsection = sub;
                    }
                    None => {
                        clean = false;
                        section.clear();
                        subsection = None;
                        skip_line(&mut chars);
                    }
                }
            }
            c if c.is_ascii_alphabetic() => {
                let mut key = String::new();
                while let Some(&k) = chars.peek() {
                    if k.is_ascii_alphanumeric() || k == '-' {
                        key.push(k.to_ascii_lowercase());
                        chars.next();
                    } else {
                        break;
                    }
                }
                while chars.peek().is_some_and(|c| is_blank(*c)) {
                    chars.next();
                }
                let value = match chars.peek() {
                    Some('=') => {
                        chars.next();
                        Some(value(&mut chars))
                    }
                    None | Some('\n') | Some('#') | Some(';') => {
                        skip_line(&mut chars);
                        None
                    }
                    Some(_) => {
                        clean = false;
                        skip_line(&mut chars);
                        continue;
                    }
                };
                if section.is_empty() {
                    clean = false;
                } else {
                    out.push(Entry {
                        section: section.clone(),
                        subsection: subsection.clone(),
                        key,
                        value,
                    });
                }
            }
            _ => {
                clean = false;
                skip_line(&mut chars);
            }
        }
    }
    (out, clean)
}

/// Blank within a line, as git's `isspace` has it (a carriage return included).
fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\u{b}' | '\u{c}')
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

fn skip_line(chars: &mut Chars<'_>) {
    for c in chars.by_ref() {
        if c == '\n' {
            break;
        }
    }
}

/// After `[`: `name]`, `name "sub"]` or `name.sub]` (the old form, sub lower-cased).
fn header(chars: &mut Chars<'_>) -> Option<(String, Option<String>)> {
    let mut name = String::new();
    while let Some(&c) = chars.peek() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
            name.push(c.to_ascii_lowercase());
            chars.next();
        } else {
            break;
        }
    }
    match chars.next()? {
        ']' => {
            return Some(match name.split_once('.') {
                Some((s, sub)) => (s.to_owned(), Some(sub.to_owned())),
                None => (name, None),
            })
        }
        c if is_blank(c) => {}
        _ => return None,
    }
    while chars.peek().is_some_and(|c| is_blank(*c)) {
        chars.next();
    }
    if chars.next()? != '"' {
        return None;
    }
    let mut sub = String::new();
    loop {
        match chars.next()? {
            '"' => break,
            '\n' => return None,
            '\\' => match chars.next()? {
                '\n' => return None,
                c => sub.push(c),
            },
            c => sub.push(c),
        }
    }
    (chars.next()? == ']').then_some((name, Some(sub)))
}

/// After `=`: the value to the end of its (possibly continued) line.
fn value(chars: &mut Chars<'_>) -> String {
    let mut out = String::new();
    // Whitespace outside quotes is kept only between words: trailing space is dropped.
    let mut pending_space = String::new();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '\n' => break,
            '"' => {
                out.push_str(&pending_space);
                pending_space.clear();
                quoted = !quoted;
            }
            '#' | ';' if !quoted => {
                skip_line(chars);
                break;
            }
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(e) => {
                    out.push_str(&pending_space);
                    pending_space.clear();
                    out.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'b' => '\u{8}',
                        other => other,
                    });
                }
                None => break,
            },
            ' ' | '\t' if !quoted => {
                if !out.is_empty() {
                    pending_space.push(c);
                }
            }
            '\r' if !quoted && chars.peek() == Some(&'\n') => {}
            c => {
                out.push_str(&pending_space);
                pending_space.clear();
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Vec<(String, Option<String>, String, Option<String>)> {
        entries(text)
            .into_iter()
            .map(|e| (e.section, e.subsection, e.key, e.value))
            .collect()
    }

    #[test]
    fn sections_keys_and_values_parse_as_git_reads_them() {
        let text = "# c\n[core]\n\thooksPath = .husky/_  # trailing\n\tbare\n[Include]\n\tPATH = \"a b\"\n";
        assert_eq!(
            one(text),
            vec![
                (
                    "core".into(),
                    None,
                    "hookspath".into(),
                    Some(".husky/_".into())
                ),
                ("core".into(), None, "bare".into(), None),
                ("include".into(), None, "path".into(), Some("a b".into())),
            ]
        );
    }

    #[test]
    fn subsections_quotes_escapes_and_continuations() {
        let text = "[includeIf \"gitdir:~/w/\"] path = x\\\ny\n[remote.Origin]\nurl = \"a;b\" # c\nv = a\\tb \\\"q\\\"\n";
        assert_eq!(
            one(text),
            vec![
                (
                    "includeif".into(),
                    Some("gitdir:~/w/".into()),
                    "path".into(),
                    Some("xy".into())
                ),
                (
                    "remote".into(),
                    Some("origin".into()),
                    "url".into(),
                    Some("a;b".into())
                ),
                (
                    "remote".into(),
                    Some("origin".into()),
                    "v".into(),
                    Some("a\tb \"q\"".into())
                ),
            ]
        );
    }

    #[test]
    fn a_broken_header_drops_its_entries_until_the_next_section() {
        let text = "[core\nhooksPath = x\n[core]\nhooksPath = y\n";
        assert_eq!(
            one(text),
            vec![("core".into(), None, "hookspath".into(), Some("y".into()))]
        );
    }

    #[test]
    fn includes_are_followed_relative_to_their_file_and_hooks_paths_collected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        std::fs::write(
            d.join("config"),
            "[include]\n\tpath = ../shared.cfg\n[includeIf \"onbranch:x\"]\n\tpath = /abs/never\n",
        )
        .expect("config");
        std::fs::create_dir(d.join("sub")).expect("sub");
        std::fs::write(d.join("shared.cfg"), "[core]\n\thooksPath = .githooks\n").expect("cfg");
        std::fs::rename(d.join("config"), d.join("sub/config")).expect("mv");
        let facts = read(&d.join("sub/config"));
        assert_eq!(
            facts.includes,
            vec![d.join("shared.cfg"), PathBuf::from("/abs/never")]
        );
        assert_eq!(facts.hooks_paths, vec![PathBuf::from(".githooks")]);
    }

    // An `includeIf` hidden behind a carriage return is seen: git reads a carriage return
    // as a blank, and so does dsh.
    #[test]
    fn a_carriage_return_is_a_blank_as_git_has_it() {
        assert_eq!(
            one("[includeIf\r\"gitdir:/\"]\npath = x\n"),
            vec![(
                "includeif".into(),
                Some("gitdir:/".into()),
                "path".into(),
                Some("x".into())
            )]
        );
        assert!(!parse("[core\nx = 1\n").1, "a broken header is reported");
        assert!(parse("[core]\r\n\tbare = false\r\n").1);
    }

    // A config starting with a BOM keeps its first section.
    #[test]
    fn a_byte_order_mark_is_skipped_as_git_skips_it() {
        assert_eq!(
            one("\u{feff}[core]\nhooksPath = h\n"),
            vec![("core".into(), None, "hookspath".into(), Some("h".into()))]
        );
    }

    #[test]
    fn an_include_cycle_stops() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a");
        std::fs::write(&a, "[include]\npath = a\n").expect("a");
        assert_eq!(read(&a).includes, vec![a]);
    }
}
