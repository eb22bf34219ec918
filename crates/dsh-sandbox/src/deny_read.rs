//! Read denial: paths no confined command may read, whatever its mode, so their contents
//! never reach the model.
//!
//! The default list is the user's credential stores ([`DEFAULT_DENY_READ`]). A policy's
//! `deny_read` holds absolute patterns: `*` and `?` may appear in the last component
//! (`~/.ssh/id_*`, say). Each confinement [expands](expand) them to the paths that exist now,
//! canonical (a link's target is what is denied, so the link cannot reach it either); the
//! runners then enforce them:
//! - bubblewrap mounts an empty, read-only file or directory over each;
//! - Landlock, which can only allow, grants reads around them: beneath every other entry of
//!   each directory on the way to a denied path, never beneath the path itself (listing
//!   directories stays allowed everywhere);
//! - Seatbelt denies `file-read*` on each.
//!
//! The file tools refuse them as well ([`denies`]).
//!
//! # Limits
//! A path created after the confinement was made is not denied to that command (a new
//! `~/.ssh/id_new`). Under Landlock, an entry created later directly in a directory on the
//! way to a denied path (`~/newfile` when `~/.ssh/id_rsa` is denied) is not readable by that
//! command. A hard link made before the command started is another name for the same data,
//! and stays readable through that name.

use std::path::{Path, PathBuf};

use crate::protected::name_matches;

/// The credential stores denied by default (`~` is the home directory of the user dsh
/// runs as).
pub const DEFAULT_DENY_READ: &[&str] = &[
    // Keys of every kind, whatever they are named (ssh itself is of no use without them).
    "~/.ssh",
    "~/.gnupg",
    // Cloud, cluster and registry credentials.
    "~/.aws/credentials",
    "~/.config/gcloud",
    "~/.azure",
    "~/.kube/config",
    "~/.docker/config.json",
    "~/.vault-token",
    "~/.terraform.d/credentials.tfrc.json",
    // Forges, package registries and git.
    "~/.config/gh/hosts.yml",
    "~/.netrc",
    "~/.git-credentials",
    "~/.npmrc",
    "~/.pypirc",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    // Databases.
    "~/.pgpass",
    "~/.my.cnf",
    // Agents' own sign-in tokens.
    "~/.claude/.credentials.json",
    "~/.codex/auth.json",
    "~/.config/gemini",
    // Password stores and keyrings.
    "~/.password-store",
    "~/.local/share/keyrings",
];

/// [`DEFAULT_DENY_READ`] with `~` expanded (entries under `~` are left out when there is
/// no home directory).
pub fn defaults() -> Vec<PathBuf> {
    DEFAULT_DENY_READ
        .iter()
        .filter_map(|p| expand_home(p))
        .collect()
}

/// `p` with a leading `~/` replaced by the home directory; `None` when it has one and
/// there is no home directory.
pub fn expand_home(p: &str) -> Option<PathBuf> {
    match p.strip_prefix("~/") {
        Some(rest) => crate::home_dir().map(|h| h.join(rest)),
        None => Some(PathBuf::from(p)),
    }
}

/// The paths `patterns` name that exist now, canonical, sorted, without duplicates. A
/// match that leads, through a symlink, to `/` or a directory directly in it (`/usr`,
/// `/tmp`: never what a pattern is written to deny) is left out: a command can make such
/// a link at a denied name, and an empty mount there would leave no usable sandbox.
pub fn expand(patterns: &[PathBuf]) -> Vec<PathBuf> {
    expand_matches(matches(patterns))
}

/// [`expand`], unless a match of `patterns` in one of `places` (where a command can
/// write) is a link, or lies behind one, leading out of every place or to a directory
/// holding one: then `Err((the match as written, where it leads))`. dsh does not hide that
/// target on the word of a link a command could have made (an empty mount over `/usr/lib`
/// would leave no usable sandbox). One look at the file system for both.
pub fn expand_unless_planted(
    patterns: &[PathBuf],
    places: &[PathBuf],
) -> Result<Vec<PathBuf>, (PathBuf, PathBuf)> {
    let found = matches(patterns);
    if let Some(planted) = planted_in(&found, places) {
        return Err(planted);
    }
    Ok(expand_matches(found))
}

fn expand_matches(found: Vec<(PathBuf, PathBuf)>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (written, real) in found {
        let through_link = real != dsh_core::path::fold_dots(&written);
        if through_link && real.components().count() <= 2 {
            continue;
        }
        out.push(real);
    }
    out.sort();
    out.dedup();
    out
}

/// The planted link among `found` (see [`expand_unless_planted`]).
fn planted_in(found: &[(PathBuf, PathBuf)], places: &[PathBuf]) -> Option<(PathBuf, PathBuf)> {
    found.iter().find_map(|(written, real)| {
        let (written, real) = (dsh_core::path::fold_dots(written), real.clone());
        let in_place = |p: &Path| places.iter().any(|w| p.starts_with(w));
        let holds_place = places.iter().any(|w| w.starts_with(&real));
        (written != real && in_place(&written) && (!in_place(&real) || holds_place))
            .then_some((written, real))
    })
}

/// The paths `patterns` name that exist now, `(as written, canonical)`.
fn matches(patterns: &[PathBuf]) -> Vec<(PathBuf, PathBuf)> {
    let mut out = Vec::new();
    for p in patterns {
        let (Some(dir), Some(last)) = (p.parent(), p.file_name()) else {
            continue;
        };
        let last = last.to_string_lossy();
        if !last.contains(['*', '?']) {
            if std::fs::symlink_metadata(p).is_ok() {
                out.push((p.clone(), dsh_core::path::canonical_path(p)));
            }
            continue;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for e in entries.flatten() {
            if name_matches(&last, &e.file_name().to_string_lossy()) {
                out.push((e.path(), dsh_core::path::canonical_path(&e.path())));
            }
        }
    }
    out
}

/// The paths `patterns` name that exist now, as the check after a command sees them: each
/// where it really is (what the sandbox hides), and a match in one of `roots` (the
/// writable roots, where a command makes links) also as written.
pub fn expand_within(patterns: &[PathBuf], roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = matches(patterns)
        .into_iter()
        .flat_map(|(written, real)| {
            let written = dsh_core::path::fold_dots(&written);
            // Where the sandbox hides it, and, in a root, the name it is denied under.
            let named = roots.iter().any(|r| written.starts_with(r));
            [Some(real), named.then_some(written)]
        })
        .flatten()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether `patterns` deny reading `path` (absolute): `path`, or where its links lead, is
/// a denied path or lies beneath one.
pub fn denies(patterns: &[PathBuf], path: &Path) -> bool {
    if patterns.is_empty() {
        return false;
    }
    let m = Matcher::new(patterns);
    let by_identity = std::fs::metadata(path).is_ok_and(|st| {
        use std::os::unix::fs::MetadataExt;
        m.denies_identity(st.dev(), st.ino())
    });
    by_identity
        || m.denies_as_written(path)
        || m.denies_canonical(&dsh_core::path::canonical_path(path))
}

/// `patterns` made ready to test many paths without a lookup per path: each pattern as
/// written, with its directory's symlinks resolved, and each match where it really is (a
/// denied `~/.gnupg` that is a link to `dots/gnupg` denies `dots/gnupg` too).
#[derive(Clone, Debug, Default)]
pub struct Matcher {
    patterns: Vec<PathBuf>,
    /// `(dev, ino)` of each denied path that exists, and of the files beneath a denied
    /// directory (at most [`IDENTITIES_MAX`]): another name for one (a hard link) is denied
    /// too.
    ids: Vec<(u64, u64)>,
}

impl Matcher {
    /// The matcher of `patterns` (resolving each pattern's directory once).
    pub fn new(patterns: &[PathBuf]) -> Matcher {
        let mut out = Vec::new();
        for p in patterns {
            out.push(p.clone());
            if let (Some(dir), Some(last)) = (p.parent(), p.file_name()) {
                let real = dsh_core::path::canonical_path(dir).join(last);
                if !out.contains(&real) {
                    out.push(real);
                }
            }
        }
        let real = expand(patterns);
        for r in &real {
            if !out.contains(r) {
                out.push(r.clone());
            }
        }
        let mut ids: Vec<(u64, u64)> = real
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino())
            })
            .collect();
        // Regression (review, helper-21): a hard link elsewhere to a file inside a denied
        // directory (`~/.ssh/id_ed25519`) was read under its other name.
        beneath_identities(&real, &mut ids);
        ids.sort_unstable();
        ids.dedup();
        Matcher { patterns: out, ids }
    }

    /// Whether the file with this identity (`st_dev`, `st_ino` of an opened file) is a
    /// denied one, under any name.
    pub fn denies_identity(&self, dev: u64, ino: u64) -> bool {
        self.ids.contains(&(dev, ino))
    }

    /// Whether `path` (absolute) is denied as written, without following its links.
    pub fn denies_as_written(&self, path: &Path) -> bool {
        self.patterns.iter().any(|pat| matches_beneath(pat, path))
    }

    /// Whether `path`, known to be canonical (no symlink in it), is denied.
    pub fn denies_canonical(&self, path: &Path) -> bool {
        self.denies_as_written(path)
    }
}

/// How many identities of files beneath denied directories a [`Matcher`] keeps: a denied
/// directory holds keys and tokens, a few dozen files; past this, the rest are denied by
/// name only.
pub const IDENTITIES_MAX: usize = 4096;

/// Adds to `ids` the identities of the regular files beneath each directory of `dirs`
/// (canonical), never following a link, at most [`IDENTITIES_MAX`] in all.
fn beneath_identities(dirs: &[PathBuf], ids: &mut Vec<(u64, u64)>) {
    use std::os::unix::fs::MetadataExt;
    let mut seen = 0usize;
    let mut todo: Vec<(PathBuf, usize)> = dirs
        .iter()
        .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()))
        .map(|d| (d.clone(), 0))
        .collect();
    while let Some((dir, depth)) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > IDENTITIES_MAX {
                return;
            }
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() && depth < 16 {
                todo.push((e.path(), depth + 1));
            } else if kind.is_file() {
                if let Ok(m) = e.metadata() {
                    ids.push((m.dev(), m.ino()));
                }
            }
        }
    }
}

/// Whether `path` is `pattern` (a `*`/`?` last component) or lies beneath a match.
fn matches_beneath(pattern: &Path, path: &Path) -> bool {
    let (Some(dir), Some(last)) = (pattern.parent(), pattern.file_name()) else {
        return false;
    };
    let Ok(rest) = path.strip_prefix(dir) else {
        return false;
    };
    let Some(first) = rest.components().next() else {
        return false;
    };
    name_matches(
        &last.to_string_lossy(),
        &first.as_os_str().to_string_lossy(),
    )
}

/// The directories on the way to the denied paths (strict ancestors, `/` included),
/// shallowest first: where Landlock's read grants must go around them.
pub(crate) fn split_dirs(denied: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = denied
        .iter()
        .flat_map(|d| d.ancestors().skip(1).map(Path::to_path_buf))
        .collect();
    out.sort_by_key(|p| (p.components().count(), p.clone()));
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_expand_to_what_exists_and_links_to_their_targets() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = dsh_core::path::canonical_path(d.path());
        std::fs::create_dir(r.join(".ssh")).expect("ssh");
        for f in ["id_ed25519", "id_ed25519.pub", "known_hosts"] {
            std::fs::write(r.join(".ssh").join(f), "x").expect("file");
        }
        std::os::unix::fs::symlink(r.join(".ssh/id_ed25519"), r.join("key")).expect("link");
        let got = expand(&[r.join(".ssh/id_*"), r.join("key"), r.join("missing")]);
        assert_eq!(
            got,
            vec![r.join(".ssh/id_ed25519"), r.join(".ssh/id_ed25519.pub")]
        );
    }

    #[test]
    fn denial_covers_the_path_what_is_beneath_it_and_links_to_it() {
        let d = tempfile::tempdir().expect("tempdir");
        let r = dsh_core::path::canonical_path(d.path());
        std::fs::create_dir_all(r.join("gcloud/sub")).expect("dirs");
        std::fs::write(r.join("gcloud/sub/creds.json"), "x").expect("file");
        std::os::unix::fs::symlink(r.join("gcloud"), r.join("alias")).expect("link");
        let pats = vec![r.join("gcloud"), r.join(".ssh/id_*")];
        assert!(denies(&pats, &r.join("gcloud")));
        assert!(denies(&pats, &r.join("gcloud/sub/creds.json")));
        assert!(denies(&pats, &r.join("alias/sub/creds.json")));
        assert!(denies(&pats, &r.join(".ssh/id_rsa")));
        assert!(!denies(&pats, &r.join(".ssh/known_hosts")));
        assert!(!denies(&pats, &r.join("gcloudx")));
        assert!(!denies(&[], &r.join("gcloud")));
    }

    #[test]
    fn split_dirs_are_every_strict_ancestor_shallowest_first() {
        let got = split_dirs(&[PathBuf::from("/h/u/.ssh/id"), PathBuf::from("/h/u/.netrc")]);
        assert_eq!(
            got,
            vec![
                PathBuf::from("/"),
                PathBuf::from("/h"),
                PathBuf::from("/h/u"),
                PathBuf::from("/h/u/.ssh")
            ]
        );
    }
}
