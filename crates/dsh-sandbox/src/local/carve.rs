//! The bubblewrap binds that carve protected and denied paths out of the writable roots,
//! and the anchors that keep them in place.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::area::Area;
use crate::bwrap::Carve;
use crate::placeholder::DIRECTORY_NAMES;
use crate::placeholder::{Kind, Placeholders};
use crate::small_file::{self, MAX_CONFIG_BYTES};
use crate::SandboxPolicy;

/// Where bwrap commands find the private temp dir: `/tmp` itself when the dir lies under
/// `/tmp` (the mount of it at `/tmp` hides its own path) and no writable root does;
/// else its own path.
pub(super) fn bwrap_temp_inside<'a>(policy: &SandboxPolicy, area: &'a Area) -> &'a Path {
    let roots_under_tmp = policy.writable_dirs().iter().any(|d| d.starts_with("/tmp"));
    if area.temp.starts_with("/tmp") && !roots_under_tmp {
        Path::new("/tmp")
    } else {
        &area.temp
    }
}

/// Inserts the protected carve-outs before the `--` of a bwrap argv (after every
/// writable bind, so they win).
pub(super) fn with_carves(
    mut argv: Vec<OsString>,
    anchors: &[PathBuf],
    carves: Vec<Carve>,
) -> Vec<OsString> {
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    let anchored = anchors.iter().flat_map(|a| {
        [
            "--bind".into(),
            a.clone().into_os_string(),
            a.clone().into_os_string(),
        ]
    });
    let binds = carves.into_iter().flat_map(|c| {
        // A protected name that is a dangling link (`.vscode -> /gone`) has nothing to
        // bind: skipped rather than failing every call (it is reported partial).
        let dangling = std::fs::symlink_metadata(&c.at).is_ok_and(|m| m.file_type().is_symlink())
            && !c.at.exists();
        [
            if dangling {
                "--ro-bind-try"
            } else {
                "--ro-bind"
            }
            .into(),
            c.source.into_os_string(),
            c.at.into_os_string(),
        ]
    });
    let all: Vec<OsString> = anchored.chain(binds).collect();
    argv.splice(at..at, all);
    argv
}

/// Appends a read-only mount of an unreadable (mode 000) directory or file over each
/// denied path (after every writable bind, so it wins): reading it fails with "Permission
/// denied", for a root command too (it has no capability left to override the mode).
pub(super) fn with_denied(
    mut argv: Vec<OsString>,
    denied: &[PathBuf],
    area: &Area,
) -> Vec<OsString> {
    let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    let binds = denied.iter().flat_map(|d| {
        let source = if d.is_dir() {
            &area.denied_dir
        } else {
            &area.denied_file
        };
        [
            OsString::from("--ro-bind"),
            source.clone().into_os_string(),
            d.clone().into_os_string(),
        ]
    });
    let binds: Vec<OsString> = binds.collect();
    argv.splice(at..at, binds);
    argv
}

/// For each writable root whose `.git` is a directory with an `info/exclude`, a
/// read-only stand-in for that file holding its lines plus one per placeholder file made in
/// the root's worktree, so that `git status` and `git add -A` in the sandbox do not see the
/// empty `.bashrc`, `.mcp.json`, … the command's mounts need (empty directories git does
/// not list anyway). The host's `info/exclude` is unchanged.
pub(super) fn exclude_placeholders(
    policy: &SandboxPolicy,
    held: &mut Placeholders,
    area: &Area,
) -> Vec<(PathBuf, Carve)> {
    let made = held.made();
    let mut out = Vec::new();
    for root in policy.writable_dirs() {
        let exclude = root.join(".git/info/exclude");
        let lines: Vec<String> = made
            .iter()
            .filter_map(|p| p.strip_prefix(&root).ok())
            .filter(|rel| !rel.components().any(|c| c.as_os_str() == ".git"))
            .filter(|rel| std::fs::symlink_metadata(root.join(rel)).is_ok_and(|m| m.is_file()))
            .map(|rel| format!("/{}", gitignore_escape(&rel.to_string_lossy())))
            .collect();
        if lines.is_empty() || !std::fs::symlink_metadata(&exclude).is_ok_and(|m| m.is_file()) {
            continue;
        }
        let Some(mut text) = small_file::read(&exclude, MAX_CONFIG_BYTES) else {
            continue;
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("# dsh: empty placeholders of protected paths, for this command only\n");
        for l in lines {
            text.push_str(&l);
            text.push('\n');
        }
        let generated = area
            .root
            .join(format!("exclude-{}", dsh_core::spill::random_hex(12)));
        if std::fs::write(&generated, text).is_ok() {
            held.remove_on_drop(generated.clone());
            out.push((
                root.clone(),
                Carve {
                    at: exclude,
                    source: generated,
                },
            ));
        }
    }
    out
}

/// `name` as a gitignore pattern that matches only itself.
pub(super) fn gitignore_escape(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if matches!(c, '*' | '?' | '[' | '\\') || (i == 0 && matches!(c, '!' | '#')) {
            out.push('\\');
        }
        out.push(c);
    }
    if let Some(stripped) = out.strip_suffix(' ') {
        out = format!("{stripped}\\ ");
    }
    out
}

/// For a protected git `config` that sets `core.worktree` (a submodule's, under
/// `.git/modules`), a read-only copy without that line, to mount in its place: `git
/// submodule update` rewrites `core.worktree` whenever it is set (even to the same value),
/// which a read-only config refuses; without it git finds the worktree from the `.git`
/// file, as it does for every command run in the submodule. The host's file is unchanged.
pub(super) fn config_without_worktree(
    p: &Path,
    area: &Area,
    held: &mut Placeholders,
) -> Option<PathBuf> {
    if p.file_name()? != "config" {
        return None;
    }
    let meta = std::fs::symlink_metadata(p).ok()?;
    if !meta.is_file() || meta.len() > MAX_CONFIG_BYTES {
        return None;
    }
    let text = small_file::read(p, MAX_CONFIG_BYTES)?;
    let mut out = String::new();
    let mut dropped = false;
    let mut in_core = false;
    let mut continued = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if continued {
            continued = line.trim_end().ends_with('\\');
            continue;
        }
        if trimmed.starts_with('[') {
            let header = trimmed
                .split(']')
                .next()
                .unwrap_or("")
                .trim_start_matches('[');
            in_core = header.trim().eq_ignore_ascii_case("core");
        } else if in_core {
            let key = trimmed
                .split(|c: char| c == '=' || c.is_whitespace())
                .next()
                .unwrap_or("");
            if key.eq_ignore_ascii_case("worktree") {
                continued = line.trim_end().ends_with('\\');
                dropped = true;
                continue;
            }
        }
        out.push_str(line);
    }
    // Only a config that sets `core.worktree` gets a copy; the copy holds a subset of
    // its lines.
    if !dropped {
        return None;
    }
    let copy = area
        .root
        .join(format!("config-{}", dsh_core::spill::random_hex(12)));
    std::fs::write(&copy, out).ok()?;
    held.remove_on_drop(copy.clone());
    Some(copy)
}

/// Protected files whose empty stand-in a tool refuses where it would pass over a missing
/// one: rustup fails every `cargo` call in a folder with an empty `rust-toolchain`, and
/// passes over one it cannot read as a file. A directory stands in for them.
const DIRECTORY_STAND_INS: [&str; 2] = ["rust-toolchain", "rust-toolchain.toml"];

/// What stands in for the missing `at` on the way to (or at) the protected path `p`.
pub(super) fn placeholder_kind(at: &Path, p: &Path) -> Kind {
    let name = at.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if at != p || DIRECTORY_NAMES.contains(&name) || DIRECTORY_STAND_INS.contains(&name) {
        Kind::Dir
    } else if name == "commondir" {
        Kind::Commondir
    } else {
        Kind::File
    }
}

/// Removes `--bind T T` (T under /tmp would be hidden by `--bind T /tmp` anyway).
pub(super) fn drop_self_bind(argv: &mut Vec<OsString>, temp: &Path) {
    if let Some(i) = argv
        .windows(3)
        .position(|w| w[0] == "--bind" && w[1] == temp.as_os_str() && w[2] == temp.as_os_str())
    {
        argv.drain(i..i + 3);
    }
}

/// Adds every real directory between `root` (exclusive) and `at` (exclusive) to
/// `anchors`: bound onto itself, each is a mount point that cannot be renamed or removed,
/// so the read-only binds beneath it cannot be carried away.
pub(super) fn add_anchors(at: &Path, root: &Path, anchors: &mut Vec<PathBuf>) {
    for anchor in at
        .ancestors()
        .skip(1)
        .take_while(|a| a.starts_with(root) && *a != root)
    {
        // Only a real directory reached by no link: a bind of a path through a link would
        // bind the link's target, writable, wherever it is (`protected = ["link/sub/x"]`
        // with `link -> ../victim` would make `victim/sub` writable).
        let real_dir = std::fs::symlink_metadata(anchor).is_ok_and(|m| m.is_dir())
            && dsh_core::path::canonical_path(anchor) == anchor;
        if real_dir && !anchors.iter().any(|a| a == anchor) {
            anchors.push(anchor.to_path_buf());
        }
    }
}

/// Whether `p` lies strictly beneath `root` by plain names only (no `.` or `..`): the only
/// paths a carve, an anchor or a placeholder may be made for.
pub(super) fn strictly_beneath(p: &Path, root: &Path) -> bool {
    use std::path::Component;
    p.strip_prefix(root).is_ok_and(|rel| {
        rel.components().next().is_some()
            && rel.components().all(|c| matches!(c, Component::Normal(_)))
    })
}

/// The first component of `path` below `root` that does not exist or is a placeholder
/// directory (its mount covers everything beneath it); `None` when the whole path exists.
pub(super) fn first_missing(root: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(root).ok()?;
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Err(_) => return Some(at),
            Ok(m) if m.is_dir() && crate::placeholder::is_placeholder_dir(&at) => return Some(at),
            Ok(_) => {}
        }
    }
    None
}
