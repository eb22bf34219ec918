//! Paths as every seam spells them: [`fold_dots`] is the one lexical rule for `.` and
//! `..`, [`canonical_path`] the one resolution through links, and [`root_of`] how a
//! workspace root is made from a directory someone named.
//!
//! Lexical folding never looks at the filesystem, so `link/..` folds to `.` whatever
//! `link` leads to: use it on a path that may not exist, and [`canonical_path`] where the
//! links on the way must be followed.

use std::path::{Component, Path, PathBuf};

/// `path` with `.` and `..` folded lexically (no filesystem lookup). `..` at the root
/// stays at the root; a relative path keeps the `..` it cannot fold (`../x` stays).
pub fn fold_dots(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                let popped =
                    matches!(out.components().next_back(), Some(Component::Normal(_))) && out.pop();
                if !popped && !out.has_root() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `realpath`, or `p` unchanged when it cannot be resolved (a missing root then matches
/// nothing rather than inventing a grant).
pub fn canonical_path(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `path` through its links where it exists ([`canonical_path`]), else with `.` and `..`
/// folded lexically: what a path a file names (a `.git` pointer, `commondir`) leads to.
pub fn resolved(path: &Path) -> PathBuf {
    fold_dots(&canonical_path(path))
}

/// A workspace root: canonicalised first (so `link/..` follows the link), then made
/// absolute with `.` and `..` folded (for a path that does not exist).
pub fn root_of(path: &Path) -> PathBuf {
    resolved(&std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folding_is_lexical_and_keeps_what_it_cannot_fold() {
        let f = |p: &str| fold_dots(Path::new(p));
        assert_eq!(f("/a/./b/../c"), PathBuf::from("/a/c"));
        assert_eq!(f("/../a"), PathBuf::from("/a"));
        assert_eq!(f("a/../../b"), PathBuf::from("../b"));
        assert_eq!(f("../../x/."), PathBuf::from("../../x"));
        assert_eq!(f("a/.."), PathBuf::new());
    }

    #[test]
    fn a_root_follows_links_before_folding() {
        let dir = std::env::temp_dir().join(format!("dsh-core-root-{}", std::process::id()));
        let real = dir.join("real/inner");
        std::fs::create_dir_all(&real).expect("dirs");
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&real, &link).expect("link");
        let canonical_dir = canonical_path(&dir);
        assert_eq!(root_of(&link.join("..")), canonical_dir.join("real"));
        assert_eq!(
            root_of(&dir.join("missing/../x")),
            canonical_dir.join("x"),
            "a missing path is folded"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
