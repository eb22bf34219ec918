//! What a confined command made that the host's tools would run by themselves, set aside
//! before they can.
//!
//! The check after a command ([`protected::appeared`](crate::protected::appeared)) finds the
//! git dirs and tool settings it made. Protecting them from the next command on is not
//! enough: the user's shell prompt runs `git status` in a new repository as soon as they
//! enter it, and `cargo` reads a new `.cargo/config.toml` on its next run. So, before dsh
//! returns the command's result, [`quarantine`] acts on each:
//! - a new git dir (whatever its shape: a `commondir` redirect, a directory that is not a
//!   repository yet): its `config` and `config.worktree` keep only [`SAFE_GIT_KEYS`] (what
//!   `git init`, `git clone`, `git remote add` and `git branch` write), and are rewritten
//!   whenever anything else is set or dsh cannot read all of the file as git would; its
//!   `hooks` keeps only git's `*.sample` files; a `commondir` that leads to a directory no
//!   earlier policy protected is made `.`;
//! - a new `.git` pointer file that leads out of the workspace, and a new `.git` symlink:
//!   moved aside;
//! - new tool settings ([`NESTED_TOOL_NAMES`](crate::walk::NESTED_TOOL_NAMES), a new
//!   `*.code-workspace`): emptied (a directory's entries moved out).
//!
//! Nothing is deleted: the original is copied, or its entries moved, to
//! `<name>.dsh-quarantine-<random>` beside it, where the user can read it and put it back.
//! Files and directories are changed in place, never replaced, so a read-only mount of the
//! same path in a concurrent call's sandbox stays attached (a rename would detach it and let
//! that call write the path again). A repository made with ordinary git commands is left
//! exactly as it is. Every step goes through directory fds opened beneath the writable
//! root without following a symlink; what is owned by this user but not writable to it is
//! made writable first.
//!
//! # Limits
//! A repository or setting made by a command that is still running elsewhere (a
//! concurrent call) is found by the next check, not this one. What fails to be set aside
//! is reported with `set_aside: false`; the policy service then refuses workspace-write in
//! that root until it is gone.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::gitconfig::{self, Entry};
use crate::protected::WorkspaceLayout;
use crate::SandboxPolicy;

/// The git settings a new repository may keep: data, never a program to run or a place
/// elsewhere to act on. `(section, key)`; a section with a subsection (`remote "origin"`)
/// is matched by its name; `*` is any key.
pub const SAFE_GIT_KEYS: &[(&str, &str)] = &[
    ("core", "repositoryformatversion"),
    ("core", "filemode"),
    ("core", "bare"),
    ("core", "logallrefupdates"),
    ("core", "ignorecase"),
    ("core", "precomposeunicode"),
    ("core", "symlinks"),
    ("core", "autocrlf"),
    ("core", "eol"),
    ("core", "safecrlf"),
    ("core", "quotepath"),
    ("core", "sparsecheckout"),
    ("core", "sparsecheckoutcone"),
    ("core", "untrackedcache"),
    ("core", "splitindex"),
    ("core", "checkstat"),
    ("core", "trustctime"),
    ("core", "compression"),
    ("core", "bigfilethreshold"),
    ("core", "abbrev"),
    ("extensions", "*"),
    ("remote", "url"),
    ("remote", "pushurl"),
    ("remote", "fetch"),
    ("remote", "push"),
    ("remote", "tagopt"),
    ("remote", "prune"),
    ("remote", "mirror"),
    ("branch", "remote"),
    ("branch", "merge"),
    ("branch", "rebase"),
    ("branch", "pushremote"),
    ("branch", "description"),
    ("user", "name"),
    ("user", "email"),
    ("init", "defaultbranch"),
    ("submodule", "url"),
    ("submodule", "active"),
    ("submodule", "branch"),
    ("submodule", "shallow"),
    ("submodule", "ignore"),
    ("pull", "rebase"),
    ("pull", "ff"),
    ("push", "default"),
    ("push", "autosetupremote"),
    ("fetch", "prune"),
    ("index", "version"),
];

/// One thing acted on: what, where the original went, and whether it worked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// The path as the command left it.
    pub path: PathBuf,
    /// Where the original is now (a copy, or a directory of its entries).
    pub moved_to: Option<PathBuf>,
    /// What it was (`git config setting core.fsmonitor`, `git hooks`, `tool settings`).
    pub what: String,
    /// Whether it was set aside; `false`: it is still there as the command left it (the
    /// caller must say so, and not trust that root again until it is gone).
    pub set_aside: bool,
}

/// Sets aside what of `appeared` (what the check found: `after` is the layout it found it
/// in, `before` the policy the command ran under) the host's tools would run: see the
/// [module docs](self). `roots` are every directory the command could write.
pub fn quarantine(
    appeared: &[PathBuf],
    before: &SandboxPolicy,
    after: &WorkspaceLayout,
    roots: &[PathBuf],
) -> Vec<Quarantined> {
    let mut out = Vec::new();
    for p in appeared {
        let Some(root) = roots.iter().find(|r| p.starts_with(r) && p != *r) else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            continue;
        };
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut act = |what: &str, r: Result<Option<PathBuf>, String>| match r {
            Ok(None) => {}
            Ok(Some(to)) => out.push(Quarantined {
                path: p.clone(),
                moved_to: Some(to),
                what: what.to_owned(),
                set_aside: true,
            }),
            Err(why) => out.push(Quarantined {
                path: p.clone(),
                moved_to: None,
                what: format!("{what} (NOT set aside: {why})"),
                set_aside: false,
            }),
        };
        if meta.file_type().is_symlink() {
            if name == ".git" {
                act("a .git symlink", rename_aside(root, p).map(Some));
            } else if is_tool_setting(&name) {
                act("tool settings (a symlink)", rename_aside(root, p).map(Some));
            }
            continue;
        }
        if name == ".git" && meta.is_file() {
            let leads_out =
                pointer_target(p).is_none_or(|t| !t.starts_with(&before.workspace_root));
            if leads_out {
                act(
                    "a .git file leading out of the workspace",
                    rename_aside(root, p).map(Some),
                );
            }
            continue;
        }
        if meta.is_dir() && after.hooks_dirs.contains(p) {
            out.extend(report(p, "a git hooks folder", quarantine_hooks(root, p)));
            continue;
        }
        if meta.is_dir() && (after.git_dirs.contains(p) || crate::walk::is_git_dir(p)) {
            for config in ["config", "config.worktree"] {
                let path = p.join(config);
                let mut what = String::new();
                let r = quarantine_config(root, &path, &mut what);
                out.extend(report(&path, &what, r));
            }
            let hooks = p.join("hooks");
            out.extend(report(&hooks, "git hooks", quarantine_hooks(root, &hooks)));
            let commondir = p.join("commondir");
            out.extend(report(
                &commondir,
                "a commondir leading to an unprotected directory",
                quarantine_commondir(root, &commondir, before),
            ));
            continue;
        }
        if is_tool_setting(&name) {
            let r = if meta.is_dir() {
                empty_dir_aside(root, p, |_| true)
            } else {
                rewrite_aside(root, p, b"")
            };
            act("tool settings", r);
        }
    }
    out
}

fn report(path: &Path, what: &str, r: Result<Option<PathBuf>, String>) -> Option<Quarantined> {
    match r {
        Ok(None) => None,
        Ok(Some(to)) => Some(Quarantined {
            path: path.to_path_buf(),
            moved_to: Some(to),
            what: what.to_owned(),
            set_aside: true,
        }),
        Err(why) => Some(Quarantined {
            path: path.to_path_buf(),
            moved_to: None,
            what: format!("{what} (NOT set aside: {why})"),
            set_aside: false,
        }),
    }
}

fn is_tool_setting(name: &str) -> bool {
    crate::walk::is_tool_setting(OsStr::new(name))
}

/// A git config with anything outside [`SAFE_GIT_KEYS`], or that dsh cannot read whole
/// as git would: a copy of the original set aside, the safe settings written in its place.
fn quarantine_config(
    root: &Path,
    config: &Path,
    what: &mut String,
) -> Result<Option<PathBuf>, String> {
    *what = "git config".into();
    let Ok(meta) = std::fs::symlink_metadata(config) else {
        return Ok(None);
    };
    if meta.file_type().is_symlink() || !meta.is_file() {
        *what = "git config (not a plain file)".into();
        return rename_aside(root, config).map(Some);
    }
    let bytes = read_nofollow(root, config, gitconfig::MAX_CONFIG_BYTES + 1)?;
    let whole = (bytes.len() as u64) <= gitconfig::MAX_CONFIG_BYTES;
    let text = String::from_utf8_lossy(&bytes);
    let (entries, clean) = gitconfig::parse(&text);
    let mut unsafe_keys: Vec<String> = entries
        .iter()
        .filter(|e| !is_safe(e))
        .map(|e| match &e.subsection {
            Some(sub) => format!("{}.{sub}.{}", e.section, e.key),
            None => format!("{}.{}", e.section, e.key),
        })
        .collect();
    unsafe_keys.dedup();
    if unsafe_keys.is_empty() && clean && whole {
        return Ok(None);
    }
    *what = if unsafe_keys.is_empty() {
        "git config dsh cannot read whole".into()
    } else {
        format!("git config setting {}", unsafe_keys.join(", "))
    };
    let safe: Vec<&Entry> = entries.iter().filter(|e| is_safe(e)).collect();
    rewrite_aside(root, config, render(&safe).as_bytes())
}

/// A hooks directory holding anything but git's samples: those entries moved aside.
fn quarantine_hooks(root: &Path, hooks: &Path) -> Result<Option<PathBuf>, String> {
    let Ok(meta) = std::fs::symlink_metadata(hooks) else {
        return Ok(None);
    };
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return rename_aside(root, hooks).map(Some);
    }
    empty_dir_aside(root, hooks, |n| !n.to_string_lossy().ends_with(".sample"))
}

/// A `commondir` that leads somewhere no earlier policy protected: a copy set aside, the
/// file made to lead to the git dir itself.
fn quarantine_commondir(
    root: &Path,
    commondir: &Path,
    before: &SandboxPolicy,
) -> Result<Option<PathBuf>, String> {
    let Ok(meta) = std::fs::symlink_metadata(commondir) else {
        return Ok(None);
    };
    if meta.file_type().is_symlink() || !meta.is_file() {
        return rename_aside(root, commondir).map(Some);
    }
    let text = read_nofollow(root, commondir, crate::small_file::POINTER_MAX)?;
    let rel = String::from_utf8_lossy(&text);
    let rel = rel.lines().next().unwrap_or("").trim();
    let g = commondir.parent().unwrap_or(root);
    let target = crate::canonical_path(&g.join(rel));
    if rel == "." || target == g || before.git_dirs.contains(&target) {
        return Ok(None);
    }
    rewrite_aside(
        root,
        commondir,
        crate::protected::COMMONDIR_PLACEHOLDER.as_bytes(),
    )
}

fn is_safe(e: &Entry) -> bool {
    SAFE_GIT_KEYS
        .iter()
        .any(|(s, k)| *s == e.section && (*k == "*" || *k == e.key))
}

/// `entries` as a git config file, values quoted.
fn render(entries: &[&Entry]) -> String {
    let mut out = String::new();
    let mut current: Option<(String, Option<String>)> = None;
    for e in entries {
        let section = (e.section.clone(), e.subsection.clone());
        if current.as_ref() != Some(&section) {
            match &e.subsection {
                Some(sub) => out.push_str(&format!("[{} \"{}\"]\n", e.section, escape(sub))),
                None => out.push_str(&format!("[{}]\n", e.section)),
            }
            current = Some(section);
        }
        match &e.value {
            Some(v) => out.push_str(&format!("\t{} = \"{}\"\n", e.key, escape(v))),
            None => out.push_str(&format!("\t{}\n", e.key)),
        }
    }
    out
}

fn escape(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// `<name>.dsh-quarantine-<random>`: unguessable, so a command cannot take the name first.
fn aside_name(name: &OsStr) -> OsString {
    let mut n = OsString::from(name);
    n.push(format!(
        ".dsh-quarantine-{}",
        dsh_core::spill::random_hex(12)
    ));
    n
}

/// The parent of `p` opened beneath `root` (no symlink on the way), made writable to its
/// owner, and `p`'s name.
fn parent_of(root: &Path, p: &Path) -> Result<(OwnedFd, CString), String> {
    let (parent, name) = (
        p.parent().ok_or("no parent")?,
        p.file_name().ok_or("no name")?,
    );
    let dir = open_beneath(root, parent, libc::O_RDONLY).ok_or_else(|| {
        format!(
            "cannot open {} beneath {} without symlinks",
            parent.display(),
            root.display()
        )
    })?;
    make_writable(dir.as_raw_fd());
    let name = CString::new(name.as_bytes()).map_err(|_| "a NUL in a name")?;
    Ok((dir, name))
}

/// Renames `p` to a fresh `<name>.dsh-quarantine-<random>` beside it.
fn rename_aside(root: &Path, p: &Path) -> Result<PathBuf, String> {
    let (dir, from) = parent_of(root, p)?;
    let to_name = aside_name(p.file_name().ok_or("no name")?);
    let to = CString::new(to_name.as_bytes()).map_err(|_| "a NUL in a name")?;
    // SAFETY: renameat2(2) within our directory fd, valid C strings.
    let r = unsafe {
        libc::renameat2(
            dir.as_raw_fd(),
            from.as_ptr(),
            dir.as_raw_fd(),
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(p.with_file_name(to_name))
}

/// Copies the file `p` to a fresh `<name>.dsh-quarantine-<random>` beside it, then
/// rewrites `p` in place (same inode) with `content`.
fn rewrite_aside(root: &Path, p: &Path, content: &[u8]) -> Result<Option<PathBuf>, String> {
    let (dir, name) = parent_of(root, p)?;
    // SAFETY: openat(2) relative to our directory fd; O_NOFOLLOW: never a link's target.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    let file = if fd < 0 {
        // Owned by this user but read-only: made writable (it cannot be a link here).
        // SAFETY: fchmodat(2) relative to our directory fd; then open again.
        unsafe {
            libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), 0o600, 0);
        }
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        fd
    } else {
        fd
    };
    // SAFETY: a fresh fd the kernel returned.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(file) });
    if !file.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err("not a regular file".into());
    }
    let mut original = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(&file, crate::gitconfig::MAX_CONFIG_BYTES * 4),
        &mut original,
    )
    .map_err(|e| e.to_string())?;
    let to_name = aside_name(p.file_name().ok_or("no name")?);
    let to = CString::new(to_name.as_bytes()).map_err(|_| "a NUL in a name")?;
    // SAFETY: openat(2) relative to our directory fd: a new file, never an existing one or
    // a link's target.
    let copy = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            to.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        )
    };
    if copy < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    // SAFETY: a fresh fd the kernel returned.
    let copy = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(copy) });
    std::io::Write::write_all(&mut &copy, &original).map_err(|e| e.to_string())?;
    file.set_len(0).map_err(|e| e.to_string())?;
    std::os::unix::fs::FileExt::write_all_at(&file, content, 0).map_err(|e| e.to_string())?;
    Ok(Some(p.with_file_name(to_name)))
}

/// Moves the entries of the directory `p` that `pick` chooses into a fresh
/// `<name>.dsh-quarantine-<random>` beside it; `p` itself stays (same inode). `None` when
/// there is nothing to move.
fn empty_dir_aside(
    root: &Path,
    p: &Path,
    pick: impl Fn(&OsStr) -> bool,
) -> Result<Option<PathBuf>, String> {
    let (parent, name) = parent_of(root, p)?;
    // SAFETY: openat(2) relative to our directory fd: the directory itself, not a link.
    let fd = unsafe {
        libc::openat(
            parent.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    let dir = if fd < 0 {
        // SAFETY: fchmodat(2) relative to our directory fd (owner only), then open again.
        unsafe {
            libc::fchmodat(parent.as_raw_fd(), name.as_ptr(), 0o700, 0);
        }
        let fd = unsafe {
            libc::openat(
                parent.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        fd
    } else {
        fd
    };
    // SAFETY: a fresh fd the kernel returned.
    let dir = unsafe { OwnedFd::from_raw_fd(dir) };
    make_writable(dir.as_raw_fd());
    let entries: Vec<OsString> = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| pick(n))
        .collect();
    if entries.is_empty() {
        return Ok(None);
    }
    let to_name = aside_name(p.file_name().ok_or("no name")?);
    let to = CString::new(to_name.as_bytes()).map_err(|_| "a NUL in a name")?;
    // SAFETY: mkdirat(2)/openat(2) relative to our directory fd with valid C strings.
    if unsafe { libc::mkdirat(parent.as_raw_fd(), to.as_ptr(), 0o700) } != 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    let aside = unsafe {
        libc::openat(
            parent.as_raw_fd(),
            to.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if aside < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    // SAFETY: a fresh fd the kernel returned.
    let aside = unsafe { OwnedFd::from_raw_fd(aside) };
    for n in entries {
        let Ok(c) = CString::new(n.as_bytes()) else {
            continue;
        };
        // SAFETY: renameat2(2) between our two directory fds; names, never followed.
        let r = unsafe {
            libc::renameat2(
                dir.as_raw_fd(),
                c.as_ptr(),
                aside.as_raw_fd(),
                c.as_ptr(),
                libc::RENAME_NOREPLACE,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
    }
    Ok(Some(p.with_file_name(to_name)))
}

/// Adds the owner's read, write and search bits to the directory behind `fd` (a command
/// of this user may have taken them away to stop dsh).
fn make_writable(fd: i32) {
    // SAFETY: fstat(2)/fchmod(2) on an fd we hold.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) == 0 && st.st_uid == libc::geteuid() {
            libc::fchmod(fd, (st.st_mode & 0o7777) | 0o700);
        }
    }
}

/// Up to `max` bytes of the regular file `p` (beneath `root`), never through a symlink.
fn read_nofollow(root: &Path, p: &Path, max: u64) -> Result<Vec<u8>, String> {
    let (dir, name) = parent_of(root, p)?;
    // SAFETY: openat(2) relative to our directory fd, not following a link.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    let fd = if fd < 0 {
        // SAFETY: as above, after making it readable to its owner.
        unsafe {
            libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), 0o600, 0);
        }
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
        fd
    } else {
        fd
    };
    // SAFETY: a fresh fd the kernel returned.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    if !file.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err("not a regular file".into());
    }
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(&file, max), &mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

/// The directory a `.git` pointer file names (canonical), read without following a link.
fn pointer_target(p: &Path) -> Option<PathBuf> {
    let text = crate::small_file::read(p, crate::small_file::POINTER_MAX)?;
    let rel = text
        .lines()
        .next()?
        .strip_prefix("gitdir:")?
        .trim()
        .to_owned();
    Some(crate::canonical_path(&p.parent()?.join(rel)))
}

/// `openat2(root, dir, O_DIRECTORY | flags, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`.
fn open_beneath(root: &Path, dir: &Path, flags: i32) -> Option<OwnedFd> {
    let rel = dir.strip_prefix(root).ok()?;
    let root_fd = crate::placeholder::open_dir_no_symlinks(root).ok()?;
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    const RESOLVE_BENEATH: u64 = 0x08;
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let c = CString::new(rel.as_os_str().as_bytes()).ok()?;
    let how = OpenHow {
        flags: (flags | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH,
    };
    // SAFETY: openat2(2) relative to our fd with a valid C string and an open_how of the
    // size given.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root_fd.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: a fresh fd the kernel returned.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(dir: &Path, config: &str) {
        for d in ["objects", "refs", "hooks"] {
            std::fs::create_dir_all(dir.join(d)).expect("dir");
        }
        std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::write(dir.join("config"), config).expect("config");
        std::fs::write(dir.join("hooks/pre-commit.sample"), "#!/bin/sh\n").expect("sample");
    }

    fn setup() -> (tempfile::TempDir, PathBuf, SandboxPolicy) {
        let d = tempfile::tempdir().expect("tempdir");
        let root = crate::canonical_path(d.path());
        let policy = SandboxPolicy::bare(crate::SandboxMode::WorkspaceWrite, &root);
        (d, root, policy)
    }

    /// The check's layout with `dirs` as the git dirs it found.
    fn found(dirs: &[&PathBuf]) -> WorkspaceLayout {
        WorkspaceLayout {
            git_dirs: dirs.iter().map(|d| (*d).clone()).collect(),
            ..WorkspaceLayout::default()
        }
    }

    fn aside_of(q: &[Quarantined], suffix: &str) -> PathBuf {
        q.iter()
            .find(|x| x.path.ends_with(suffix))
            .and_then(|x| x.moved_to.clone())
            .unwrap_or_else(|| panic!("{suffix} not set aside: {q:?}"))
    }

    #[test]
    fn a_plain_new_repository_is_left_as_it_is() {
        let (_d, root, policy) = setup();
        let g = root.join("sub/.git");
        let config = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n[remote \"origin\"]\n\turl = https://example.com/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n";
        repo(&g, config);
        assert!(quarantine(
            std::slice::from_ref(&g),
            &policy,
            &found(&[&g]),
            std::slice::from_ref(&root)
        )
        .is_empty());
        assert_eq!(
            std::fs::read_to_string(g.join("config")).expect("config"),
            config
        );
    }

    #[test]
    fn programs_in_a_new_repository_are_set_aside_in_place_and_its_data_kept() {
        let (_d, root, policy) = setup();
        let g = root.join("sub/.git");
        repo(
            &g,
            "[core]\n\tbare = false\n\tfsmonitor = \"touch /tmp/x\"\n\tworktree = /elsewhere\n[alias]\n\tx = !sh\n[remote \"origin\"]\n\turl = u\n",
        );
        std::fs::write(g.join("hooks/pre-commit"), "#!/bin/sh\ntouch /tmp/x\n").expect("hook");
        let config_ino = std::fs::metadata(g.join("config")).expect("meta");
        let q = quarantine(
            std::slice::from_ref(&g),
            &policy,
            &found(&[&g]),
            std::slice::from_ref(&root),
        );
        assert!(q.iter().all(|x| x.set_aside), "{q:?}");
        let cfg = q
            .iter()
            .find(|x| x.path.ends_with("config"))
            .expect("config");
        assert!(
            cfg.what.contains("core.fsmonitor") && cfg.what.contains("alias.x"),
            "{q:?}"
        );
        let now = std::fs::read_to_string(g.join("config")).expect("config");
        assert_eq!(
            now,
            "[core]\n\tbare = \"false\"\n[remote \"origin\"]\n\turl = \"u\"\n"
        );
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(g.join("config")).expect("meta").ino(),
            config_ino.ino(),
            "rewritten in place"
        );
        assert!(std::fs::read_to_string(aside_of(&q, "config"))
            .expect("kept")
            .contains("fsmonitor"));
        assert!(aside_of(&q, "hooks").join("pre-commit").exists());
        assert!(g.join("hooks/pre-commit.sample").exists() && !g.join("hooks/pre-commit").exists());
        // A new nested tool setting is emptied, its entries kept aside.
        std::fs::create_dir_all(root.join("crates/x/.cargo")).expect("cargo");
        std::fs::write(root.join("crates/x/.cargo/config.toml"), "x").expect("cfg");
        let q = quarantine(
            &[root.join("crates/x/.cargo")],
            &policy,
            &found(&[]),
            std::slice::from_ref(&root),
        );
        assert!(aside_of(&q, ".cargo").join("config.toml").exists());
        assert!(root.join("crates/x/.cargo").is_dir());
        assert!(!root.join("crates/x/.cargo/config.toml").exists());
    }

    // Regression: a second review took every `config.dsh-quarantine*` name first, hid an
    // include behind a carriage return, and padded a config past what dsh reads.
    #[test]
    fn names_cannot_be_taken_first_and_what_dsh_cannot_read_whole_is_rewritten() {
        let (_d, root, policy) = setup();
        let g = root.join("sub/.git");
        repo(&g, "[includeIf\r\"gitdir:/\"]\n\tpath = ../inc.cfg\n");
        for n in 0..100 {
            std::fs::write(g.join(format!("config.dsh-quarantine-{n}")), "").expect("taken");
        }
        let q = quarantine(
            std::slice::from_ref(&g),
            &policy,
            &found(&[&g]),
            std::slice::from_ref(&root),
        );
        assert!(q.iter().all(|x| x.set_aside), "{q:?}");
        assert_eq!(
            std::fs::read_to_string(g.join("config")).expect("config"),
            ""
        );
        let big = root.join("big/.git");
        let mut text = "#".repeat((gitconfig::MAX_CONFIG_BYTES + 10) as usize);
        text.push_str("\n[core]\n\tfsmonitor = x\n");
        repo(&big, &text);
        let q = quarantine(
            std::slice::from_ref(&big),
            &policy,
            &found(&[&big]),
            std::slice::from_ref(&root),
        );
        assert!(q[0].what.contains("cannot read whole"), "{q:?}");
        assert!(!std::fs::read_to_string(big.join("config"))
            .expect("c")
            .contains("fsmonitor"));
    }

    // Regression: a second review pointed a new git dir's `commondir` at a directory
    // holding the config and hooks, which git reads instead.
    #[test]
    fn a_commondir_leading_to_an_unprotected_directory_is_made_to_lead_home() {
        let (_d, root, policy) = setup();
        let g = root.join("sub/.git");
        std::fs::create_dir_all(&g).expect("g");
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        std::fs::write(g.join("commondir"), "../../c\n").expect("commondir");
        let q = quarantine(
            std::slice::from_ref(&g),
            &policy,
            &found(&[&g]),
            std::slice::from_ref(&root),
        );
        assert_eq!(
            std::fs::read_to_string(g.join("commondir")).expect("c"),
            ".\n"
        );
        assert!(
            q.iter()
                .any(|x| x.path.ends_with("commondir") && x.set_aside),
            "{q:?}"
        );
    }
}
