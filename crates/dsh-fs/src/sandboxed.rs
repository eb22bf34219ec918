//! [`SandboxedFs`]: the host filesystem, with writes fenced by each call's policy.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use async_trait::async_trait;
use dsh_core::{CancelToken, ErrorCode, HarnessError};
use dsh_sandbox::{SandboxMode, SandboxPolicy};
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, Stat};

use crate::local::{blocking, key_of, LocalFs};
use crate::publish;
use crate::{
    fs_error, DirEntry, EditOutcome, EditRequest, FileSystem, FsInfo, FsTarget, FsVersion,
    GlobFound, GlobQuery, GrepFound, GrepQuery, WriteIntent, WriteOutcome,
};

/// The host filesystem with a fence on reads, writes and edits, each by its call's policy.
///
/// Reads of a path the policy's [read fence](SandboxPolicy::read_fence) denies (its denied
/// paths as written, where their links lead, or beneath them; a path in a closed home
/// outside `read_allow`, the policy's roots and the temp directory), and of `/proc` and
/// `/dev` (`FILE_TOOLS_DENY`), are `FS_SANDBOX_DENIED`, whatever the call's mode: what a
/// confined command under that policy could not read, the file tools do not read either.
/// `grep` never opens them and `glob` does not list them. The file is opened at its
/// resolved path with no symlink allowed on the way, so what was checked is what is read.
///
/// For each write or edit, the call's policy (required; no default) decides:
/// danger-full-access writes anywhere; read-only refuses (`FS_SANDBOX_DENIED`); under
/// workspace-write the path is resolved again at that moment (symlinks followed) and must
/// lie beneath a writable root (the workspace, the extra roots, the sandbox's temp
/// directory) and outside every protected path, taken both as written and where its
/// symlinks lead (`.git/hooks -> ../tools/hooks` protects `tools/hooks`).
///
/// Then the kernel keeps it there: the target's directory is opened from the root's
/// directory fd one component of the resolved path at a time with
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (missing directories are made with
/// `mkdirat` on the way), and the file is staged and renamed inside that directory fd. A
/// symlink swapped in after the check is refused, not followed; the final rename
/// replaces the directory entry itself. Each directory opened is also checked by
/// identity: it must not be a protected directory, and the entry taken from it must not
/// be a protected entry (`(dev, ino)` of its directory plus its name), whatever it is
/// called now. Identities are taken at each call (one recorded earlier could be an inode
/// number a new file has reused since).
///
/// No write or edit under workspace-write may touch a path with a `.git` component: a new
/// `.git` pointer file or directory would be a repository whose hooks and config nothing
/// protects yet.
///
/// Where `openat2` is missing (Linux < 5.6), writes under workspace-write are refused
/// rather than done with a weaker check (`dsh doctor` reports `openat2`).
pub struct SandboxedFs {
    local: LocalFs,
    temp: Option<PathBuf>,
}

impl std::fmt::Debug for SandboxedFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxedFs")
            .field("temp", &self.temp)
            .finish_non_exhaustive()
    }
}

/// What the file tools never read, besides the commands' denials: dsh's own process and
/// the machine's devices.
pub const FILE_TOOLS_DENY: [&str; 2] = ["/proc", "/dev"];

impl SandboxedFs {
    /// A fenced provider over `local`: each read, write and edit under its call's
    /// policy.
    pub fn new(local: LocalFs) -> SandboxedFs {
        SandboxedFs { local, temp: None }
    }

    /// The read fence of a call under `policy`, as the disk is now: the policy's, with
    /// [`FILE_TOOLS_DENY`] and the default denials denied too (whatever the policy holds:
    /// one with no lists, a bare or danger-full-access one, still closes the homes but for
    /// the default allow-list), and the temp directory and this process's spill files
    /// readable (the notice of a cut result names them to be read).
    fn read_fence(&self, policy: &SandboxPolicy) -> dsh_sandbox::deny_read::Matcher {
        use dsh_sandbox::deny_read;
        // The file tools run in dsh's own process, unconfined: `/proc` would show its
        // environment (the credentials the scrub keeps from commands) and its memory, and
        // `/dev` the raw disks to a root dsh. A command reads what it needs there itself.
        let mut denied: Vec<PathBuf> = FILE_TOOLS_DENY.iter().map(PathBuf::from).collect();
        denied.extend(deny_read::defaults());
        let mut readable: Vec<PathBuf> = self.temp.iter().cloned().collect();
        readable.extend(deny_read::own_private_dirs());
        if policy.closed_dirs.is_empty() {
            let closed = policy
                .clone()
                .with_homes_closed(deny_read::read_allow_defaults());
            return closed.read_fence(&denied, &readable);
        }
        policy.read_fence(&denied, &readable)
    }

    /// `FS_SANDBOX_DENIED` when `policy` keeps `target` from being read.
    fn check_read(&self, policy: &SandboxPolicy, target: &FsTarget) -> Result<(), HarnessError> {
        refuse_read(&self.read_fence(policy), target.display(), target.key())
    }

    /// Also allows writes beneath `dir` under workspace-write (the sandbox's private temp
    /// directory, so bash and the file tools see the same files).
    pub fn with_temp_dir(mut self, dir: impl AsRef<Path>) -> SandboxedFs {
        self.temp = Some(dsh_core::path::canonical_path(dir.as_ref()));
        self
    }

    /// The directory to write `target` in, kernel-checked beneath its root and outside the
    /// protected paths (see the [type docs](SandboxedFs)), and the file name; `None` when
    /// the policy does not confine (write as the local provider does).
    fn fence(
        policy: &SandboxPolicy,
        temp: Option<&Path>,
        target: &FsTarget,
        verb: &str,
    ) -> Result<Option<(OwnedFd, OsString)>, HarnessError> {
        let d = target.display().display();
        let denied = |mode: SandboxMode| {
            fs_error(
                ErrorCode::FsSandboxDenied,
                format!("cannot {verb} \"{d}\": file access denied under {mode} mode"),
            )
        };
        let protected = || {
            fs_error(
                ErrorCode::FsSandboxDenied,
                format!("cannot {verb} \"{d}\": file access denied under workspace-write mode (a protected path)"),
            )
        };
        match policy.mode {
            SandboxMode::DangerFullAccess => return Ok(None),
            SandboxMode::ReadOnly => return Err(denied(SandboxMode::ReadOnly)),
            SandboxMode::WorkspaceWrite => {}
        }
        // A workspace-write policy nobody decided has protected nothing yet.
        if policy.unsettled.is_none() {
            return Err(fs_error(
                ErrorCode::Internal,
                format!(
                    "cannot {verb} \"{d}\": a workspace-write policy reached the file tools \
                     before it was decided (its protected paths were never found), so nothing \
                     was written. This is a bug in dsh: please report it with the call that \
                     hit it; reads still work."
                ),
            ));
        }
        // Resolved again now: never trust a key computed earlier.
        let fresh = key_of(target.display())?;
        let mut roots = policy.writable_dirs();
        roots.extend(temp.map(Path::to_path_buf));
        let Some(root) = roots.iter().find(|r| fresh.starts_with(r)) else {
            return Err(denied(SandboxMode::WorkspaceWrite));
        };
        // Taken now, so every identity is of an object that exists now: an inode number
        // freed by a deleted protected path and reused by a new file is not mistaken.
        let guard = Protected::of(&policy.protected);
        if guard.paths.iter().any(|p| fresh.starts_with(p)) {
            return Err(protected());
        }
        let in_git_dir = |p: &Path| {
            p.strip_prefix(root)
                .is_ok_and(|rel| rel.components().any(|c| c.as_os_str() == ".git"))
        };
        if in_git_dir(&fresh) || in_git_dir(target.display()) {
            return Err(fs_error(
                ErrorCode::FsSandboxDenied,
                format!(
                    "cannot {verb} \"{d}\": file access denied under workspace-write mode (the \
                     file tools never write inside .git, nor make a .git: use git itself)"
                ),
            ));
        }
        let is_protected = |st: &Stat| guard.is_dir_or_file(st);
        let is_entry = |dir: &Stat, name: &OsStr| guard.is_entry(dir, name);
        let rel = fresh.strip_prefix(root).unwrap_or(Path::new(""));
        let (Some(name), parent_rel) = (rel.file_name(), rel.parent().unwrap_or(Path::new("")))
        else {
            return Err(fs_error(
                ErrorCode::FsNotRegularFile,
                format!("cannot {verb} \"{d}\": not a regular file"),
            ));
        };
        let failed = |e: rustix::io::Errno| crate::os_error(verb, target.display(), e.into());
        let mut dir = rustix::fs::open(
            root.as_path(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(failed)?;
        let mut here = rustix::fs::fstat(&dir).map_err(failed)?;
        for comp in parent_rel.components() {
            let Component::Normal(part) = comp else {
                return Err(denied(SandboxMode::WorkspaceWrite));
            };
            if is_entry(&here, part) {
                return Err(protected());
            }
            dir = step_beneath(&dir, part, verb == "write")
                .map_err(|e| match e {
                    // A symlink on the way (swapped in since the path was resolved).
                    rustix::io::Errno::XDEV | rustix::io::Errno::LOOP => denied(SandboxMode::WorkspaceWrite),
                    rustix::io::Errno::NOSYS => fs_error(
                        ErrorCode::FsSandboxDenied,
                        format!(
                            "cannot {verb} \"{d}\": this kernel has no openat2, which the sandboxed file \
                             tools need to keep writes inside the workspace (Linux 5.6+)"
                        ),
                    ),
                    e => failed(e),
                })?;
            here = rustix::fs::fstat(&dir).map_err(failed)?;
            if is_protected(&here) {
                return Err(protected());
            }
        }
        if is_entry(&here, name) {
            return Err(protected());
        }
        if let Ok(st) = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            if is_protected(&st) {
                return Err(protected());
            }
        }
        Ok(Some((dir, name.to_os_string())))
    }
}

/// Opens `part` of `dir` as a directory, never leaving `dir` and never through a symlink
/// (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`: `EXDEV`, `ELOOP`); with `create`, makes it
/// first if it is missing.
fn step_beneath(dir: &OwnedFd, part: &OsStr, create: bool) -> Result<OwnedFd, rustix::io::Errno> {
    let open = || {
        rustix::fs::openat2(
            dir,
            part,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
        )
    };
    match open() {
        Err(rustix::io::Errno::NOENT) if create => {
            // 0777 less the umask, as `mkdir -p` makes them.
            match rustix::fs::mkdirat(dir, part, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => open(),
                Err(e) => Err(e),
            }
        }
        other => other,
    }
}

/// Protected paths as found at one moment: each as written and where its symlinks lead
/// (see [`leads_to`]), and, for the kernel-side check, the `(dev, ino)` of each that
/// exists and of the directory holding each (with its name, which also covers one not
/// created yet).
#[derive(Debug, Default)]
struct Protected {
    paths: Vec<PathBuf>,
    ids: Vec<(u64, u64)>,
    entries: Vec<((u64, u64), OsString)>,
}

fn id_of(st: &Stat) -> (u64, u64) {
    #[allow(clippy::useless_conversion)] // `dev_t` and `ino_t` are not u64 everywhere
    (u64::from(st.st_dev), u64::from(st.st_ino))
}

impl Protected {
    fn of(paths: &[PathBuf]) -> Protected {
        let mut out = Protected::default();
        for p in paths {
            let led = leads_to(p);
            for q in [p, &led] {
                if out.paths.contains(q) {
                    continue;
                }
                out.paths.push(q.clone());
                if let Ok(st) = rustix::fs::stat(q) {
                    out.ids.push(id_of(&st));
                }
                if let (Some(parent), Some(name)) = (q.parent(), q.file_name()) {
                    if let Ok(st) = rustix::fs::stat(parent) {
                        out.entries.push((id_of(&st), name.to_os_string()));
                    }
                }
            }
        }
        out
    }

    /// Whether `st` is a protected file or directory itself.
    fn is_dir_or_file(&self, st: &Stat) -> bool {
        self.ids.contains(&id_of(st))
    }

    /// Whether `name` in the directory `dir` is a protected path.
    fn is_entry(&self, dir: &Stat, name: &OsStr) -> bool {
        let id = id_of(dir);
        self.entries.iter().any(|(d, n)| *d == id && n == name)
    }
}

/// Where `path` (absolute) leads: every symlink followed, even a dangling one (at most
/// 40), `..` taken after the link before it; missing components are kept as written.
fn leads_to(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    // Components still to walk, last first; `..` stays `..` (no name can be `..`).
    let mut todo: Vec<OsString> = Vec::new();
    let push = |todo: &mut Vec<OsString>, p: &Path| {
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => todo.push(n.to_os_string()),
                Component::ParentDir => todo.push("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
    };
    push(&mut todo, path);
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        if c == ".." {
            out.pop();
            continue;
        }
        let next = out.join(&c);
        match std::fs::read_link(&next) {
            Ok(to) if hops < 40 => {
                hops += 1;
                if to.is_absolute() {
                    out = PathBuf::from("/");
                }
                push(&mut todo, &to);
            }
            _ => out = next,
        }
    }
    out
}

/// `FS_SANDBOX_DENIED` when `fence` refuses reading `display` (as the caller wrote it) or
/// `key` (where it resolved), naming why and what the user can change.
fn refuse_read(
    fence: &dsh_sandbox::deny_read::Matcher,
    display: &Path,
    key: &Path,
) -> Result<(), HarnessError> {
    let why = fence.refusal(display).or_else(|| fence.refusal(key));
    refused(why, display)
}

/// `FS_SANDBOX_DENIED` when `fence` refuses searching the directory `display` (as
/// [`refuse_read`]).
fn refuse_search(
    fence: &dsh_sandbox::deny_read::Matcher,
    display: &Path,
    key: &Path,
) -> Result<(), HarnessError> {
    let why = fence
        .search_refusal(display)
        .or_else(|| fence.search_refusal(key));
    refused(why, display)
}

/// The error of a refused read of `display`, if `why` says it is refused.
fn refused(
    why: Option<dsh_sandbox::deny_read::Refusal>,
    display: &Path,
) -> Result<(), HarnessError> {
    use dsh_sandbox::deny_read::Refusal;
    let d = display.display();
    match why {
        None => Ok(()),
        Some(Refusal::Denied) => Err(fs_error(
            ErrorCode::FsSandboxDenied,
            format!(
                "cannot read \"{d}\": it holds credentials or dsh's own state, and the sandbox \
                 denies reading it (deny_read); ask the user for what you need from it"
            ),
        )),
        Some(Refusal::OutsideAllowList) => Err(fs_error(
            ErrorCode::FsSandboxDenied,
            format!(
                "cannot read \"{d}\": it is in a home directory, which the sandbox keeps closed \
                 but for the workspace and the paths read_allow names (a home holds tokens and \
                 keys no list can name); ask the user for what you need from it, or to add it \
                 to read_allow in {}",
                dsh_sandbox::deny_read::user_config_hint()
            ),
        )),
    }
}

#[async_trait]
impl FileSystem for SandboxedFs {
    async fn target_of(&self, path: &str, cwd: Option<&Path>) -> Result<FsTarget, HarnessError> {
        self.local.target_of(path, cwd).await
    }

    async fn stat(&self, target: &FsTarget) -> Result<Option<FsInfo>, HarnessError> {
        self.local.stat(target).await
    }

    async fn lstat(&self, path: &str, cwd: Option<&Path>) -> Result<Option<FsInfo>, HarnessError> {
        self.local.lstat(path, cwd).await
    }

    async fn read_bytes(
        &self,
        target: &FsTarget,
        max_bytes: u64,
        policy: &SandboxPolicy,
    ) -> Result<(Vec<u8>, FsVersion), HarnessError> {
        self.check_read(policy, target)?;
        self.local.unfenced_bytes(target, max_bytes).await
    }

    async fn read_text(
        &self,
        target: &FsTarget,
        max_bytes: u64,
        policy: &SandboxPolicy,
    ) -> Result<(String, FsVersion), HarnessError> {
        self.check_read(policy, target)?;
        self.local.unfenced_text(target, max_bytes).await
    }

    async fn read_lines(
        &self,
        target: &FsTarget,
        limits: crate::LineLimits,
        policy: &SandboxPolicy,
        cancel: &dsh_core::CancelToken,
    ) -> Result<crate::LinesWindow, HarnessError> {
        self.check_read(policy, target)?;
        self.local.unfenced_lines(target, limits, cancel).await
    }

    async fn list_dir(&self, target: &FsTarget) -> Result<Vec<DirEntry>, HarnessError> {
        self.local.list_dir(target).await
    }

    /// A root whose reads this provider refuses is refused; a file it refuses is not
    /// listed.
    async fn glob(
        &self,
        root: &FsTarget,
        query: &GlobQuery,
        policy: &SandboxPolicy,
        cancel: &CancelToken,
    ) -> Result<GlobFound, HarnessError> {
        let fence = self.read_fence(policy);
        refuse_search(&fence, root.display(), root.key())?;
        let mut found = self.local.unfenced_glob(root, query, cancel).await?;
        let before = found.paths.len();
        found
            .paths
            .retain(|p| !fence.denies_canonical(&dsh_core::path::canonical_path(p)));
        found.total = found.total.saturating_sub(before - found.paths.len());
        Ok(found)
    }

    /// A root whose reads this provider refuses is refused; a file it refuses is never
    /// opened.
    async fn grep(
        &self,
        root: &FsTarget,
        query: &GrepQuery,
        policy: &SandboxPolicy,
        cancel: &CancelToken,
    ) -> Result<GrepFound, HarnessError> {
        let fence = self.read_fence(policy);
        refuse_search(&fence, root.display(), root.key())?;
        let (root, query, cancel) = (root.key().to_path_buf(), query.clone(), cancel.clone());
        blocking(move || crate::search::grep(&root, &query, &fence, &cancel)).await
    }

    async fn write_text(
        &self,
        target: &FsTarget,
        content: &str,
        intent: Option<WriteIntent>,
        policy: &SandboxPolicy,
    ) -> Result<WriteOutcome, HarnessError> {
        if policy.mode == SandboxMode::DangerFullAccess {
            return self.local.write_text(target, content, intent, policy).await;
        }
        let policy = policy.clone();
        let (t, content, temp, diff_max) = (
            target.clone(),
            content.to_owned(),
            self.temp.clone(),
            self.local.diff_max(),
        );
        self.local
            .locked(target.key(), move || {
                let (dir, name) = SandboxedFs::fence(&policy, temp.as_deref(), &t, "write")?
                    .ok_or_else(|| {
                        HarnessError::internal("fence: confined mode without a directory")
                    })?;
                publish::write(
                    &dir,
                    &name,
                    t.display(),
                    &content,
                    intent.as_ref(),
                    diff_max,
                )
            })
            .await
    }

    async fn edit_text(
        &self,
        target: &FsTarget,
        edit: &EditRequest,
        expected: Option<&FsVersion>,
        policy: &SandboxPolicy,
    ) -> Result<EditOutcome, HarnessError> {
        if policy.mode == SandboxMode::DangerFullAccess {
            return self.local.edit_text(target, edit, expected, policy).await;
        }
        let policy = policy.clone();
        let (t, edit, expected, temp) = (
            target.clone(),
            edit.clone(),
            expected.cloned(),
            self.temp.clone(),
        );
        self.local
            .locked(target.key(), move || {
                let (dir, name) = SandboxedFs::fence(&policy, temp.as_deref(), &t, "edit")?
                    .ok_or_else(|| {
                        HarnessError::internal("fence: confined mode without a directory")
                    })?;
                crate::edit::edit(&dir, &name, t.display(), &edit, expected.as_ref())
            })
            .await
    }
}
