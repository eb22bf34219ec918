//! Publication and the write algorithm, on a directory fd: both providers run them, each
//! getting the directory its own way (the sandboxed one through `openat2` beneath a root).
//! The edit algorithm (in `edit`) publishes through the same guarded replacement.
//!
//! Publication: a private staging directory `.<name>.<pid>.<random>.tmpdir` (0700; the
//! name cut to its first [`STAGING_NAME_KEEP`] bytes) in the same directory, a file in it
//! (`O_EXCL`), the content written and fsynced, the mode of the file it replaces copied (a
//! new file gets `0666` less the umask, as `open(2)` gives), then `linkat` (create-only:
//! it never replaces) or `renameat` (atomic replace) into place, the directory fsynced, the
//! staging directory removed. Any failure before the commit removes the staging directory
//! and leaves the target as it was.
//!
//! A guarded replacement (a write under [`WriteIntent::ReplaceIfVersion`], every edit)
//! holds the file it checked open from that check on, and just before the rename checks
//! again that this file is unchanged (its version) and still at the name (`dev`, `ino`):
//! else `FS_STALE_VERSION`, never a lost update. What remains is the window between that
//! last check and the rename.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use dsh_core::{ErrorCode, HarnessError};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

use crate::stream_edit::Part;
use crate::{fs_error, to_lf, FsVersion, WriteIntent, WriteOutcome, BINARY_SAMPLE};

pub(crate) fn version_of(st: &Stat) -> FsVersion {
    FsVersion(format!(
        "{}:{}:{}:{}:{}",
        st.st_dev,
        st.st_ino,
        st.st_size,
        i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec),
        i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec),
    ))
}

fn io(verb: &str, display: &Path, e: rustix::io::Errno) -> HarnessError {
    crate::os_error(verb, display, std::io::Error::from(e))
}

/// `statat(dir, name)` following links; `None` when absent.
pub(crate) fn probe(
    dir: &OwnedFd,
    name: &OsStr,
    display: &Path,
    verb: &str,
) -> Result<Option<Stat>, HarnessError> {
    match rustix::fs::statat(dir, name, AtFlags::empty()) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(io(verb, display, e)),
    }
}

pub(crate) fn is_file(st: &Stat) -> bool {
    FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
}

/// A file held open from the moment it was checked, and its metadata then.
pub(crate) struct Pinned {
    pub(crate) file: File,
    pub(crate) st: Stat,
}

impl Pinned {
    /// Opens `name` in `dir` (`flags`, never through a symlink) if it is still at version
    /// `seen`.
    pub(crate) fn open(
        dir: &OwnedFd,
        name: &OsStr,
        flags: OFlags,
        seen: &FsVersion,
    ) -> Option<Pinned> {
        let fd = rustix::fs::openat(
            dir,
            name,
            flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        (version_of(&st) == *seen).then(|| Pinned {
            file: File::from(fd),
            st,
        })
    }

    /// Whether the file has not changed since it was opened.
    pub(crate) fn unchanged(&self) -> bool {
        matches!(rustix::fs::fstat(&self.file), Ok(now) if version_of(&now) == version_of(&self.st))
    }

    /// Whether it is unchanged and still the file at `name` in `dir`.
    pub(crate) fn still_at(&self, dir: &OwnedFd, name: &OsStr) -> bool {
        self.unchanged()
            && matches!(
                rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW),
                Ok(now) if (now.st_dev, now.st_ino) == (self.st.st_dev, self.st.st_ino)
            )
    }
}

/// Reads `name` in `dir` whole if it is a regular file of at most `max` bytes; `None`
/// when it is not (or grew past `max` while read).
fn read_small(dir: &OwnedFd, name: &OsStr, max: u64) -> Option<Vec<u8>> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if !is_file(&st) || st.st_size as u64 > max {
        return None;
    }
    // Sized once from the file's size: growing by doubling would copy it again and again.
    let mut buf = Vec::with_capacity(usize::try_from(st.st_size).unwrap_or(0).saturating_add(1));
    std::fs::File::from(fd)
        .take(max + 1)
        .read_to_end(&mut buf)
        .ok()?;
    (buf.len() as u64 <= max).then_some(buf)
}

/// Writes `content` as `name` in `dir` under `intent`. See the [module docs](self).
pub(crate) fn write(
    dir: &OwnedFd,
    name: &OsStr,
    display: &Path,
    content: &str,
    intent: Option<&WriteIntent>,
    diff_max: u64,
) -> Result<WriteOutcome, HarnessError> {
    let d = display.display();
    let stale = || {
        fs_error(
            ErrorCode::FsStaleVersion,
            format!("cannot write \"{d}\": file changed since it was read"),
        )
    };
    let existing = probe(dir, name, display, "write")?;
    if let Some(st) = &existing {
        if !is_file(st) {
            return Err(fs_error(
                ErrorCode::FsNotRegularFile,
                format!("cannot write \"{d}\": not a regular file"),
            ));
        }
    }
    match (intent, &existing) {
        (Some(WriteIntent::ReplaceIfVersion(_)), None) => {
            return Err(fs_error(
                ErrorCode::FsStaleVersion,
                format!("cannot write \"{d}\": file no longer exists"),
            ))
        }
        (Some(WriteIntent::ReplaceIfVersion(v)), Some(st)) if version_of(st) != *v => {
            return Err(stale())
        }
        (Some(WriteIntent::CreateIfAbsent), Some(_)) => {
            return Err(fs_error(
                ErrorCode::FsNotObserved,
                format!("cannot overwrite existing \"{d}\" without reading it first"),
            ))
        }
        _ => {}
    }
    let before = match &existing {
        Some(_) if (content.len() as u64) < diff_max => read_small(dir, name, diff_max - 1)
            .filter(|b| !b.contains(&0))
            .and_then(|b| String::from_utf8(b).ok())
            .map(|t| to_lf(&t)),
        _ => None,
    };
    // The version checked must still be the file replaced: held from here to the rename.
    let pinned = match intent {
        Some(WriteIntent::ReplaceIfVersion(v)) => {
            Some(Pinned::open(dir, name, OFlags::PATH, v).ok_or_else(stale)?)
        }
        _ => None,
    };
    let mode = existing.as_ref().map(|st| st.st_mode & 0o777);
    let create_only = matches!(intent, Some(WriteIntent::CreateIfAbsent));
    let parts = [Part::Bytes(content.as_bytes())];
    let check = || match &pinned {
        Some(p) if !p.still_at(dir, name) => Err(stale()),
        _ => Ok(()),
    };
    publish(dir, name, display, &parts, mode, create_only, &check)?;
    let st = probe(dir, name, display, "write")?.ok_or_else(|| {
        fs_error(
            ErrorCode::FsIoError,
            format!("cannot write \"{d}\": it vanished right after it was written"),
        )
    })?;
    Ok(WriteOutcome {
        created: existing.is_none(),
        version: version_of(&st),
        before,
        after: to_lf(content),
    })
}

/// The most bytes of the target's name kept in its staging directory's name: with the
/// rest (at most 32 bytes) that name stays under `NAME_MAX` (255).
pub(crate) const STAGING_NAME_KEEP: usize = 200;

/// `.<name>.<pid>.<random>.tmpdir`, the name cut to [`STAGING_NAME_KEEP`] bytes (not
/// inside a UTF-8 character).
fn staging_name(name: &OsStr) -> OsString {
    let bytes = name.as_bytes();
    let mut keep = &bytes[..bytes.len().min(STAGING_NAME_KEEP)];
    if let Err(e) = std::str::from_utf8(keep) {
        if e.error_len().is_none() {
            keep = &keep[..e.valid_up_to()];
        }
    }
    let mut staging = OsString::from(".");
    staging.push(OsStr::from_bytes(keep));
    staging.push(format!(
        ".{}.{}.tmpdir",
        std::process::id(),
        dsh_core::spill::random_hex(12)
    ));
    staging
}

#[cfg(test)]
thread_local! {
    /// Run by [`publish`] on this thread just before its last check and the commit: lets
    /// a test change the target in that window.
    static BEFORE_COMMIT: std::cell::RefCell<Option<Box<dyn Fn()>>> =
        const { std::cell::RefCell::new(None) };
}

/// Publishes `parts`, one after the other, as `name` in `dir`, if `check` still passes
/// right before the commit. `mode`: that of the file replaced; `None` for `0666` less the
/// umask. See the [module docs](self).
pub(crate) fn publish(
    dir: &OwnedFd,
    name: &OsStr,
    display: &Path,
    parts: &[Part<'_>],
    mode: Option<u32>,
    create_only: bool,
    check: &dyn Fn() -> Result<(), HarnessError>,
) -> Result<(), HarnessError> {
    let d = display.display();
    let staging = staging_name(name);
    rustix::fs::mkdirat(dir, &staging, Mode::RWXU).map_err(|e| io("write", display, e))?;
    let result = (|| -> Result<(), HarnessError> {
        let sdir = rustix::fs::openat(
            dir,
            &staging,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io("write", display, e))?;
        // The directory is private: the file needs no name of its own. A new file is
        // created as `open(2)` creates one, so the kernel applies the umask (or the
        // directory's default ACL); a replacement gets the old mode below.
        let tmp_name = OsStr::new("staged");
        let fd = rustix::fs::openat(
            &sdir,
            tmp_name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(if mode.is_some() { 0o600 } else { 0o666 }),
        )
        .map_err(|e| io("write", display, e))?;
        let mut file = std::fs::File::from(fd);
        for part in parts {
            part.write_to(&mut file).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    fs_error(
                        ErrorCode::FsStaleVersion,
                        format!("cannot write \"{d}\": the file changed while it was copied"),
                    )
                } else {
                    crate::os_error("write", display, e)
                }
            })?;
        }
        file.sync_all()
            .map_err(|e| crate::os_error("write", display, e))?;
        if let Some(m) = mode {
            rustix::fs::fchmod(file.as_fd(), Mode::from_raw_mode(m))
                .map_err(|e| io("write", display, e))?;
        }
        drop(file);
        #[cfg(test)]
        BEFORE_COMMIT.with(|hook| {
            if let Some(hook) = &*hook.borrow() {
                hook();
            }
        });
        check()?;
        if create_only {
            match rustix::fs::linkat(&sdir, tmp_name, dir, name, AtFlags::empty()) {
                Ok(()) => {}
                Err(rustix::io::Errno::EXIST) => {
                    return Err(
                        match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                            Ok(st) if !is_file(&st) => fs_error(
                                ErrorCode::FsNotRegularFile,
                                format!("cannot write \"{d}\": not a regular file"),
                            ),
                            _ => fs_error(
                                ErrorCode::FsNotObserved,
                                format!(
                                    "cannot overwrite existing \"{d}\" without reading it first"
                                ),
                            ),
                        },
                    )
                }
                Err(e) => return Err(io("write", display, e)),
            }
        } else {
            rustix::fs::renameat(&sdir, tmp_name, dir, name).map_err(|e| match e {
                rustix::io::Errno::ISDIR
                | rustix::io::Errno::NOTEMPTY
                | rustix::io::Errno::EXIST => fs_error(
                    ErrorCode::FsNotRegularFile,
                    format!("cannot write \"{d}\": not a regular file"),
                ),
                e => io("write", display, e),
            })?;
        }
        // The new name is durable once its directory is.
        let _ = rustix::fs::fsync(dir);
        Ok(())
    })();
    cleanup(dir, &staging);
    result
}

/// Removes a staging directory and what is left in it; failures do not matter (the name
/// is private and unpredictable).
fn cleanup(dir: &OwnedFd, staging: &OsStr) {
    if let Ok(sdir) = rustix::fs::openat(
        dir,
        staging,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        if let Ok(mut entries) = rustix::fs::Dir::read_from(&sdir) {
            let names: Vec<Vec<u8>> = entries
                .by_ref()
                .flatten()
                .map(|e| e.file_name().to_bytes().to_vec())
                .filter(|n| n.as_slice() != b"." && n.as_slice() != b"..")
                .collect();
            for n in names {
                let _ = rustix::fs::unlinkat(&sdir, OsStr::from_bytes(&n), AtFlags::empty());
            }
        }
    }
    let _ = rustix::fs::unlinkat(dir, staging, AtFlags::REMOVEDIR);
}

/// Whether a byte sample looks binary (a NUL in its first [`BINARY_SAMPLE`] bytes).
pub(crate) fn looks_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_SAMPLE)].contains(&0)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::PathBuf;

    use super::*;
    use crate::edit::edit;
    use crate::stream_edit;
    use crate::EditRequest;

    /// Runs `f` in [`publish`] just before the commit, while it lives.
    struct BeforeCommit;

    impl BeforeCommit {
        fn run(f: impl Fn() + 'static) -> BeforeCommit {
            BEFORE_COMMIT.with(|h| *h.borrow_mut() = Some(Box::new(f)));
            BeforeCommit
        }
    }

    impl Drop for BeforeCommit {
        fn drop(&mut self) {
            BEFORE_COMMIT.with(|h| *h.borrow_mut() = None);
        }
    }

    fn file_in_dir(content: &str) -> (tempfile::TempDir, OwnedFd, PathBuf) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("f");
        std::fs::write(&path, content).expect("write");
        let dir = rustix::fs::open(
            tmp.path(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .expect("open dir");
        (tmp, dir, path)
    }

    fn version(dir: &OwnedFd, path: &Path) -> FsVersion {
        version_of(
            &probe(dir, OsStr::new("f"), path, "stat")
                .expect("stat")
                .expect("some"),
        )
    }

    fn only_f_left(tmp: &tempfile::TempDir) {
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["f"], "no staging left");
    }

    fn append(path: &Path) -> impl Fn() + 'static {
        let path = path.to_path_buf();
        move || {
            std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .and_then(|mut f| f.write_all(b"appended\n"))
                .expect("append");
        }
    }

    /// The edits of each kind: whole-file (CRLF; more occurrences than a stream takes)
    /// and streamed.
    fn edits() -> Vec<(String, EditRequest)> {
        let req = |old: &str, all| EditRequest {
            old: old.into(),
            new: "new".into(),
            replace_all: all,
        };
        vec![
            ("a\r\nold\r\n".into(), req("old", false)),
            ("x\n".repeat(stream_edit::MAX_STARTS + 1), req("x", true)),
            ("a\nold\n".into(), req("old", false)),
        ]
    }

    #[test]
    fn a_staging_name_fits_name_max_and_is_cut_between_characters() {
        let name = format!("a{}", "é".repeat(127));
        let staging = staging_name(OsStr::new(&name));
        let text = staging.to_str().expect("still UTF-8");
        assert!(text.len() <= 255, "{}", text.len());
        assert!(
            text.starts_with(&format!(".a{}.", "é".repeat(99))),
            "{text}"
        );
        assert!(text.ends_with(".tmpdir"));
        let short = staging_name(OsStr::new("f"));
        assert!(short.to_str().expect("utf-8").starts_with(".f."));
    }

    #[test]
    fn a_write_or_edit_refuses_a_file_appended_to_before_its_commit() {
        let (tmp, dir, path) = file_in_dir("one\n");
        let v = version(&dir, &path);
        let _hook = BeforeCommit::run(append(&path));
        let intent = WriteIntent::ReplaceIfVersion(v);
        let e = write(
            &dir,
            OsStr::new("f"),
            &path,
            "two\n",
            Some(&intent),
            1 << 20,
        )
        .expect_err("stale");
        assert_eq!(e.code(), ErrorCode::FsStaleVersion, "{}", e.message());
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "one\nappended\n"
        );
        only_f_left(&tmp);
        // With no version to keep, a write replaces whatever is there.
        write(&dir, OsStr::new("f"), &path, "two\n", None, 1 << 20).expect("overwrite");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "two\n");

        for (content, req) in edits() {
            std::fs::write(&path, &content).expect("write");
            let v = version(&dir, &path);
            let e = edit(&dir, OsStr::new("f"), &path, &req, Some(&v)).expect_err("stale");
            assert_eq!(e.code(), ErrorCode::FsStaleVersion, "{content:.20?}");
            let now = std::fs::read_to_string(&path).expect("read");
            assert_eq!(now, format!("{content}appended\n"), "{content:.20?}");
            only_f_left(&tmp);
        }
    }

    #[test]
    fn a_write_or_edit_refuses_a_file_replaced_before_its_commit() {
        let (tmp, dir, path) = file_in_dir("one\n");
        let replace = {
            let path = path.clone();
            move || {
                let other = path.with_file_name("other");
                let now = std::fs::read(&path).expect("read");
                std::fs::write(&other, now).expect("write");
                std::fs::rename(&other, &path).expect("rename");
            }
        };
        let _hook = BeforeCommit::run(replace);
        let intent = WriteIntent::ReplaceIfVersion(version(&dir, &path));
        let e = write(
            &dir,
            OsStr::new("f"),
            &path,
            "two\n",
            Some(&intent),
            1 << 20,
        )
        .expect_err("stale");
        assert_eq!(e.code(), ErrorCode::FsStaleVersion);
        for (content, req) in edits() {
            std::fs::write(&path, &content).expect("write");
            let e = edit(&dir, OsStr::new("f"), &path, &req, None).expect_err("stale");
            assert_eq!(e.code(), ErrorCode::FsStaleVersion, "{content:.20?}");
            assert_eq!(std::fs::read_to_string(&path).expect("read"), content);
        }
        only_f_left(&tmp);
    }
}
