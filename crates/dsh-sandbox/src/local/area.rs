//! The private area: a directory per dsh process holding the sandbox's temp directory
//! and the stand-ins of denied paths, removed with the process (or by the next one).

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The provider's private directory. See [`LocalSandbox`].
pub(super) struct Area {
    pub(super) root: PathBuf,
    pub(super) temp: PathBuf,
    pub(super) empty_dir: PathBuf,
    pub(super) empty_file: PathBuf,
    /// Mounted over denied paths: mode 000, so a read fails (a command has no capability
    /// that could override it, root's included) instead of finding an empty file.
    pub(super) denied_dir: PathBuf,
    pub(super) denied_file: PathBuf,
}

impl Area {
    pub(super) fn create(parent: Option<&Path>) -> Result<Area, String> {
        let parent = match parent {
            Some(p) => p.to_path_buf(),
            None => dsh_core::spill::ensure_private_parent().map_err(|e| {
                format!("cannot make the private directory of this user's dsh processes: {e}")
            })?,
        };
        let parent = dsh_core::path::canonical_path(&parent);
        remove_stale_areas(&parent);
        // Where areas were kept before they moved into the closed private directory.
        remove_stale_areas(Path::new("/var/tmp"));
        let mut root = None;
        for _ in 0..8 {
            let candidate = parent.join(format!(
                "dsh-sandbox-{}-{}",
                std::process::id(),
                dsh_core::spill::random_hex(12)
            ));
            match std::fs::DirBuilder::new().mode(0o700).create(&candidate) {
                Ok(()) => {
                    root = Some(candidate);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(format!(
                        "cannot create the sandbox's private directory under {}: {e}",
                        parent.display()
                    ))
                }
            }
        }
        let root = root
            .ok_or_else(|| format!("cannot create a fresh directory under {}", parent.display()))?;
        let area = Area {
            temp: root.join("tmp"),
            empty_dir: root.join("empty-dir"),
            empty_file: root.join("empty-file"),
            denied_dir: root.join("denied-dir"),
            denied_file: root.join("denied-file"),
            root,
        };
        let made = (|| -> std::io::Result<()> {
            std::fs::DirBuilder::new().mode(0o700).create(&area.temp)?;
            std::fs::DirBuilder::new()
                .mode(0o500)
                .create(&area.empty_dir)?;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o400)
                .open(&area.empty_file)?;
            std::fs::DirBuilder::new()
                .mode(0o000)
                .create(&area.denied_dir)?;
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o000)
                .open(&area.denied_file)?;
            // The umask cannot add bits, but be exact about the mode that denies.
            std::fs::set_permissions(&area.denied_dir, std::fs::Permissions::from_mode(0o000))?;
            std::fs::set_permissions(&area.denied_file, std::fs::Permissions::from_mode(0o000))?;
            Ok(())
        })();
        made.map_err(|e| format!("cannot prepare {}: {e}", area.root.display()))?;
        Ok(area)
    }
}

/// Removes the private directories of dsh processes that died without cleaning up (by
/// SIGKILL, say): `dsh-sandbox-<pid>-*` of a pid that no longer exists, owned by us.
pub(super) fn remove_stale_areas(parent: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    for e in entries.flatten() {
        let ours = e.metadata().is_ok_and(|m| m.uid() == uid && m.is_dir());
        if ours && dsh_core::spill::is_stale_name(&e.file_name(), "dsh-sandbox-") {
            remove_area(&e.path());
        }
    }
}

/// Removes a private directory whole. Every directory in it is given its owner's bits
/// first (its mode-000 stand-in, and whatever a command did to its `TMPDIR` with
/// `chmod`), or a user without root's override could not empty it.
pub(super) fn remove_area(root: &Path) {
    fn open_up(dir: &Path, depth: usize) {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        if depth > 64 {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            // The entry's own type: a link is never followed.
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                open_up(&e.path(), depth + 1);
            }
        }
    }
    open_up(root, 0);
    let _ = std::fs::remove_dir_all(root);
}

impl Drop for Area {
    fn drop(&mut self) {
        remove_area(&self.root);
    }
}
