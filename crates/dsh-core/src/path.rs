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

/// Every symbolic link met on the way to what `path` (absolute) names, in the order they
/// are met: a link in any component, and each link a link leads to (a chain
/// `a -> b -> c` gives `a` and `b`). Stops after 40 links, as the kernel does. Whoever can
/// replace one of them can change what `path` names.
pub fn links_on_the_way(path: &Path) -> Vec<PathBuf> {
    use std::path::Component;
    let mut links = Vec::new();
    // What is left to walk, last component first.
    let mut todo: Vec<std::ffi::OsString> = Vec::new();
    let push_all = |todo: &mut Vec<std::ffi::OsString>, p: &Path| {
        for c in p.components().rev() {
            todo.push(c.as_os_str().to_owned());
        }
    };
    push_all(&mut todo, path);
    let mut at = PathBuf::from("/");
    while let Some(part) = todo.pop() {
        match Path::new(&part).components().next() {
            Some(Component::RootDir) => at = PathBuf::from("/"),
            Some(Component::CurDir) | None => {}
            Some(Component::ParentDir) => {
                at.pop();
            }
            Some(_) => {
                let next = at.join(&part);
                match std::fs::read_link(&next) {
                    Ok(target) if links.len() < 40 => {
                        links.push(next);
                        // The target replaces this component, relative to where it is.
                        if target.is_absolute() {
                            at = PathBuf::from("/");
                        }
                        push_all(&mut todo, &target);
                    }
                    _ => at = next,
                }
            }
        }
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_link_on_the_way_is_found_in_a_chain_and_in_a_component() {
        let d = std::fs::canonicalize(std::env::temp_dir())
            .expect("temp")
            .join(format!("dsh-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("real/app")).expect("dirs");
        std::os::unix::fs::symlink("real", d.join("mid")).expect("mid");
        std::os::unix::fs::symlink(d.join("mid"), d.join("top")).expect("top");
        std::os::unix::fs::symlink("../top/app", d.join("real/up")).expect("up");
        assert_eq!(
            links_on_the_way(&d.join("top/app")),
            vec![d.join("top"), d.join("mid")]
        );
        assert_eq!(
            links_on_the_way(&d.join("real/up")),
            vec![d.join("real/up"), d.join("top"), d.join("mid")]
        );
        assert!(links_on_the_way(&d.join("real/app")).is_empty());
        std::fs::remove_dir_all(&d).expect("cleanup");
    }

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
