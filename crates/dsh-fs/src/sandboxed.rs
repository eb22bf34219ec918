//! [`SandboxedFs`]: the host filesystem, with writes fenced by each call's policy.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use async_trait::async_trait;
use dsh_core::{ErrorCode, HarnessError};
use dsh_sandbox::{SandboxMode, SandboxPolicy};
use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::local::{blocking, key_of, LocalFs};
use crate::publish;
use crate::{
    fs_error, DirEntry, EditOutcome, EditRequest, FileSystem, FsInfo, FsTarget, FsVersion,
    WriteIntent, WriteOutcome,
};

/// The host filesystem with a fence on writes and edits. Reads are never restricted.
///
/// For each write or edit, the call's policy (else the provider's default) decides:
/// danger-full-access writes anywhere; read-only refuses (`FS_SANDBOX_DENIED`); under
/// workspace-write the path is resolved again at that moment and must lie beneath a
/// writable root (the workspace, the extra roots, the sandbox's temp directory) and
/// outside every protected path. Then the kernel keeps it there: the target's directory
/// is opened from the root's directory fd one component at a time with
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` (missing directories are made with
/// `mkdirat` on the way), and the file is staged and renamed inside that directory fd. A
/// symlink swapped in after the check cannot move the write outside the root: the final
/// rename replaces the directory entry itself, and no directory on the way can lead out.
/// Where `openat2` is missing (Linux < 5.6), writes under workspace-write are refused
/// rather than done with a weaker check (`dsh doctor` reports `openat2`).
pub struct SandboxedFs {
    local: LocalFs,
    default: SandboxPolicy,
    temp: Option<PathBuf>,
}

impl std::fmt::Debug for SandboxedFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxedFs")
            .field("default_mode", &self.default.mode)
            .finish_non_exhaustive()
    }
}

impl SandboxedFs {
    /// A fenced provider over `local`, applying `default` to calls that carry no policy.
    pub fn new(local: LocalFs, default: SandboxPolicy) -> SandboxedFs {
        SandboxedFs {
            local,
            default,
            temp: None,
        }
    }

    /// Also allows writes beneath `dir` under workspace-write (the sandbox's private temp
    /// directory, so bash and the file tools see the same files).
    pub fn with_temp_dir(mut self, dir: impl AsRef<Path>) -> SandboxedFs {
        self.temp = Some(dsh_sandbox::canonical_path(dir.as_ref()));
        self
    }

    /// The directory to write `target` in, kernel-checked beneath its root, and the file
    /// name; `None` when the policy does not confine (write as the local provider does).
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
        match policy.mode {
            SandboxMode::DangerFullAccess => return Ok(None),
            SandboxMode::ReadOnly => return Err(denied(SandboxMode::ReadOnly)),
            SandboxMode::WorkspaceWrite => {}
        }
        // Resolved again now: never trust a key computed earlier.
        let fresh = key_of(target.display())?;
        let mut roots = policy.writable_dirs();
        roots.extend(temp.map(Path::to_path_buf));
        let Some(root) = roots.iter().find(|r| fresh.starts_with(r)) else {
            return Err(denied(SandboxMode::WorkspaceWrite));
        };
        if policy.protected.iter().any(|p| fresh.starts_with(p)) {
            return Err(fs_error(
                ErrorCode::FsSandboxDenied,
                format!("cannot {verb} \"{d}\": file access denied under workspace-write mode (a protected path)"),
            ));
        }
        let rel = fresh.strip_prefix(root).unwrap_or(Path::new(""));
        let (Some(name), parent_rel) = (rel.file_name(), rel.parent().unwrap_or(Path::new("")))
        else {
            return Err(fs_error(
                ErrorCode::FsNotRegularFile,
                format!("cannot {verb} \"{d}\": not a regular file"),
            ));
        };
        let mut dir = rustix::fs::open(
            root.as_path(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| crate::os_error(verb, target.display(), e.into()))?;
        for comp in parent_rel.components() {
            let Component::Normal(part) = comp else {
                return Err(denied(SandboxMode::WorkspaceWrite));
            };
            dir = step_beneath(&dir, part, verb == "write")
                .map_err(|e| match e {
                    rustix::io::Errno::XDEV | rustix::io::Errno::LOOP => denied(SandboxMode::WorkspaceWrite),
                    rustix::io::Errno::NOSYS => fs_error(
                        ErrorCode::FsSandboxDenied,
                        format!(
                            "cannot {verb} \"{d}\": this kernel has no openat2, which the sandboxed file \
                             tools need to keep writes inside the workspace (Linux 5.6+)"
                        ),
                    ),
                    e => crate::os_error(verb, target.display(), e.into()),
                })?;
        }
        Ok(Some((dir, name.to_os_string())))
    }
}

/// Opens `part` of `dir` as a directory, never leaving `dir` (`RESOLVE_BENEATH`, no
/// magic links); with `create`, makes it first if it is missing.
fn step_beneath(
    dir: &OwnedFd,
    part: &std::ffi::OsStr,
    create: bool,
) -> Result<OwnedFd, rustix::io::Errno> {
    let open = || {
        rustix::fs::openat2(
            dir,
            part,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        )
    };
    match open() {
        Err(rustix::io::Errno::NOENT) if create => {
            match rustix::fs::mkdirat(dir, part, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => open(),
                Err(e) => Err(e),
            }
        }
        other => other,
    }
}

#[async_trait]
impl FileSystem for SandboxedFs {
    fn sandbox_mode(&self) -> Option<SandboxMode> {
        Some(self.default.mode)
    }

    async fn resolve(&self, path: &str, cwd: Option<&Path>) -> Result<FsTarget, HarnessError> {
        self.local.resolve(path, cwd).await
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
    ) -> Result<(Vec<u8>, FsVersion), HarnessError> {
        self.local.read_bytes(target, max_bytes).await
    }

    async fn read_text(
        &self,
        target: &FsTarget,
        max_bytes: u64,
    ) -> Result<(String, FsVersion), HarnessError> {
        self.local.read_text(target, max_bytes).await
    }

    async fn read_lines(
        &self,
        target: &FsTarget,
        limits: crate::LineLimits,
    ) -> Result<crate::LinesWindow, HarnessError> {
        self.local.read_lines(target, limits).await
    }

    async fn list_dir(&self, target: &FsTarget) -> Result<Vec<DirEntry>, HarnessError> {
        self.local.list_dir(target).await
    }

    async fn write_text(
        &self,
        target: &FsTarget,
        content: &str,
        intent: Option<WriteIntent>,
        policy: Option<&SandboxPolicy>,
    ) -> Result<WriteOutcome, HarnessError> {
        let policy = policy.unwrap_or(&self.default).clone();
        if policy.mode == SandboxMode::DangerFullAccess {
            return self.local.write_text(target, content, intent, None).await;
        }
        let (t, content, temp, diff_max) = (
            target.clone(),
            content.to_owned(),
            self.temp.clone(),
            self.local.diff_max(),
        );
        self.local
            .locked(
                target.key(),
                blocking(move || {
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
                }),
            )
            .await
    }

    async fn edit_text(
        &self,
        target: &FsTarget,
        edit: &EditRequest,
        expected: Option<&FsVersion>,
        policy: Option<&SandboxPolicy>,
    ) -> Result<EditOutcome, HarnessError> {
        let policy = policy.unwrap_or(&self.default).clone();
        if policy.mode == SandboxMode::DangerFullAccess {
            return self.local.edit_text(target, edit, expected, None).await;
        }
        let (t, edit, expected, temp) = (
            target.clone(),
            edit.clone(),
            expected.cloned(),
            self.temp.clone(),
        );
        self.local
            .locked(
                target.key(),
                blocking(move || {
                    let (dir, name) = SandboxedFs::fence(&policy, temp.as_deref(), &t, "edit")?
                        .ok_or_else(|| {
                            HarnessError::internal("fence: confined mode without a directory")
                        })?;
                    publish::edit(&dir, &name, t.display(), &edit, expected.as_ref())
                }),
            )
            .await
    }
}
