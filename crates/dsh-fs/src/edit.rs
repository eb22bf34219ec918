//! The edit algorithm: the replacement of an edit, found in the file's text (whole, or
//! streamed past a size), with its line ends and BOM kept, then published as a guarded
//! replacement (see [`crate::publish`]).

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use dsh_core::{ErrorCode, HarnessError};
use rustix::fs::OFlags;

use crate::publish::{is_file, probe, publish, version_of, Pinned};
use crate::stream_edit::{self, NotText, Part};
use crate::{fs_error, to_lf, EditOutcome, EditRequest, FsVersion};

/// The largest file an edit reads whole (it holds about three copies while it works).
pub(crate) const EDIT_MAX_BYTES: u64 = 256 << 20;

/// Edits `name` in `dir`. See [`FileSystem::edit_text`](crate::FileSystem::edit_text).
pub(crate) fn edit(
    dir: &OwnedFd,
    name: &OsStr,
    display: &Path,
    req: &EditRequest,
    expected: Option<&FsVersion>,
) -> Result<EditOutcome, HarnessError> {
    let stale = || changed_since_read(display);
    let (st, src) = open_checked(dir, name, display, expected)?;
    if !req.old.is_empty() {
        if let Some(out) = edit_streamed(dir, name, display, req, &src)? {
            return Ok(out);
        }
    }
    let raw = read_whole(&src, &st, display)?;
    let (bom, body) = match raw.strip_prefix('\u{feff}') {
        Some(rest) => ("\u{feff}", rest),
        None => ("", raw.as_str()),
    };
    let crlf = uses_crlf(body);
    // A text without `\r` is its own LF form: it is searched and written in place, never
    // copied whole.
    let before: std::borrow::Cow<'_, str> = if memchr::memchr(b'\r', body.as_bytes()).is_some() {
        to_lf(body).into()
    } else {
        body.into()
    };
    let old = to_lf(&req.old);
    let new = to_lf(&req.new);
    if old.is_empty() {
        return Err(fs_error(
            ErrorCode::FsEditNotFound,
            "old_string must be a non-empty string".into(),
        ));
    }
    let (count, first, last) = occurrences(&before, &old, req.replace_all, display)?;
    // The lines the replacements touch, before and after. No occurrence starts between
    // `w_start` and `first`, or after `last`, so replacing within the window gives the
    // same text as replacing in the whole.
    let last = if req.replace_all { last } else { first };
    let last_end = last + old.len();
    let w_start = before[..first].rfind('\n').map_or(0, |i| i + 1);
    let w_end = before[last_end..]
        .find('\n')
        .map_or(before.len(), |i| last_end + i + 1);
    let first_line = memchr::memchr_iter(b'\n', &before.as_bytes()[..w_start]).count() + 1;
    let after_window = if req.replace_all {
        before[w_start..w_end].replace(old.as_str(), &new)
    } else {
        before[w_start..w_end].replacen(old.as_str(), &new, 1)
    };
    let mode = Some(st.st_mode & 0o777);
    // Only the occurrences change: the rest keeps its bytes, line breaks included.
    let new_on_disk = if crlf {
        new.replace('\n', "\r\n")
    } else {
        new.clone()
    };
    let on_disk = replace_raw(body, &before, &old, &new_on_disk, req.replace_all);
    let parts = [Part::Bytes(bom.as_bytes()), Part::Bytes(on_disk.as_bytes())];
    let check = || {
        if src.still_at(dir, name) {
            Ok(())
        } else {
            Err(stale())
        }
    };
    publish(dir, name, display, &parts, mode, false, &check)?;
    drop(on_disk);
    let before_window = before[w_start..w_end].to_owned();
    let st = probe(dir, name, display, "edit")?.ok_or_else(stale)?;
    Ok(EditOutcome {
        version: version_of(&st),
        first_line,
        before: before_window,
        after: after_window,
        replaced: if req.replace_all { count } else { 1 },
    })
}

/// `FS_STALE_VERSION`: the file at `display` changed since it was read.
fn changed_since_read(display: &Path) -> HarnessError {
    fs_error(
        ErrorCode::FsStaleVersion,
        format!(
            "cannot edit \"{}\": file changed since it was read",
            display.display()
        ),
    )
}

/// The file `name` in `dir` as an edit finds it: its status, and the file pinned (held
/// open, checked unchanged and at `name` again before the rename).
///
/// # Errors
/// `FS_STALE_VERSION` (gone, or not `expected`), `FS_NOT_REGULAR_FILE`, `FS_TOO_LARGE`.
fn open_checked(
    dir: &OwnedFd,
    name: &OsStr,
    display: &Path,
    expected: Option<&FsVersion>,
) -> Result<(rustix::fs::Stat, Pinned), HarnessError> {
    let d = display.display();
    let stale = || changed_since_read(display);
    let st = probe(dir, name, display, "edit")?.ok_or_else(stale)?;
    if !is_file(&st) {
        return Err(fs_error(
            ErrorCode::FsNotRegularFile,
            format!("cannot edit \"{d}\": not a regular file"),
        ));
    }
    if expected.is_some_and(|v| *v != version_of(&st)) {
        return Err(stale());
    }
    if st.st_size as u64 > EDIT_MAX_BYTES {
        return Err(fs_error(
            ErrorCode::FsTooLarge,
            format!(
                "cannot edit \"{d}\": {} bytes exceeds the {EDIT_MAX_BYTES}-byte limit",
                st.st_size
            ),
        ));
    }
    // The file checked, held to the rename: every read is of it, and it must still be
    // unchanged and at `name` then.
    let src = Pinned::open(
        dir,
        name,
        OFlags::RDONLY | OFlags::NONBLOCK,
        &version_of(&st),
    )
    .ok_or_else(stale)?;
    Ok((st, src))
}

/// The whole text of the pinned file `src` (status `st`), read while it stays unchanged.
///
/// # Errors
/// `FS_STALE_VERSION` (it changed, or grew past the limit), `FS_NOT_TEXT`.
fn read_whole(src: &Pinned, st: &rustix::fs::Stat, display: &Path) -> Result<String, HarnessError> {
    let d = display.display();
    let stale = || changed_since_read(display);
    let mut bytes = Vec::with_capacity(usize::try_from(st.st_size).unwrap_or(0).saturating_add(1));
    (&src.file)
        .take(EDIT_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| crate::os_error("edit", display, e))?;
    if bytes.len() as u64 > EDIT_MAX_BYTES || !src.unchanged() {
        return Err(stale());
    }
    if memchr::memchr(0, &bytes).is_some() {
        return Err(fs_error(
            ErrorCode::FsNotText,
            format!("cannot edit \"{d}\": binary file"),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        fs_error(
            ErrorCode::FsNotText,
            format!("cannot edit \"{d}\": invalid UTF-8 text"),
        )
    })
}

/// How many times `old` occurs in `before`, and where the first and the last start.
///
/// # Errors
/// `FS_EDIT_NOT_FOUND` (none), `FS_AMBIGUOUS_EDIT` (several, without `replace_all`).
fn occurrences(
    before: &str,
    old: &str,
    replace_all: bool,
    display: &Path,
) -> Result<(usize, usize, usize), HarnessError> {
    let d = display.display();
    // Counted without being collected: an edit of "a" in a large file must not hold a
    // position per occurrence.
    let (mut count, mut first, mut last) = (0usize, 0usize, 0usize);
    for at in memchr::memmem::find_iter(before.as_bytes(), old.as_bytes()) {
        if count == 0 {
            first = at;
        }
        last = at;
        count += 1;
    }
    if count == 0 {
        return Err(fs_error(
            ErrorCode::FsEditNotFound,
            format!("old_string was not found in \"{d}\""),
        ));
    }
    if count > 1 && !replace_all {
        return Err(fs_error(
            ErrorCode::FsAmbiguousEdit,
            format!(
                "old_string matched {count} times in \"{d}\"; provide a more specific old_string or set replace_all to true"
            ),
        ));
    }
    Ok((count, first, last))
}

/// The edit of an LF text file, streamed (see [`stream_edit`]); `None` when the file needs
/// the whole-file edit. Errors and bytes written are those of the whole-file edit.
fn edit_streamed(
    dir: &OwnedFd,
    name: &OsStr,
    display: &Path,
    req: &EditRequest,
    pinned: &Pinned,
) -> Result<Option<EditOutcome>, HarnessError> {
    let d = display.display();
    let stale = || changed_since_read(display);
    let failed = |e: std::io::Error| crate::os_error("edit", display, e);
    let (src, opened) = (&pinned.file, &pinned.st);
    let size = opened.st_size as u64;
    let mut head = [0u8; 3];
    let bom = if size >= 3 && src.read_exact_at(&mut head, 0).is_ok() && head == *b"\xEF\xBB\xBF" {
        3
    } else {
        0
    };
    let old = to_lf(&req.old);
    let scan =
        match stream_edit::scan(src, size, old.as_bytes(), req.replace_all, bom).map_err(failed)? {
            Err(NotText::Binary) => {
                return Err(fs_error(
                    ErrorCode::FsNotText,
                    format!("cannot edit \"{d}\": binary file"),
                ))
            }
            Err(NotText::InvalidUtf8) => {
                return Err(fs_error(
                    ErrorCode::FsNotText,
                    format!("cannot edit \"{d}\": invalid UTF-8 text"),
                ))
            }
            Ok(None) => return Ok(None),
            Ok(Some(scan)) => scan,
        };
    if scan.count == 0 {
        return Err(fs_error(
            ErrorCode::FsEditNotFound,
            format!("old_string was not found in \"{d}\""),
        ));
    }
    if scan.count > 1 && !req.replace_all {
        return Err(fs_error(
            ErrorCode::FsAmbiguousEdit,
            format!(
                "old_string matched {} times in \"{d}\"; provide a more specific old_string or set replace_all to true",
                scan.count
            ),
        ));
    }
    let new = to_lf(&req.new);
    let len = old.len() as u64;
    let starts = &scan.starts;
    let last_end = starts[starts.len() - 1] + len;
    // The window starts after the BOM, as the whole-file edit's does.
    let w_start = stream_edit::line_start(src, starts[0])
        .map_err(failed)?
        .max(bom);
    let w_end = stream_edit::line_end(src, last_end, size).map_err(failed)?;
    // The file as scanned: same version (checked again below), and the text read back
    // must hold the occurrences where the scan saw them.
    let before = stream_edit::read_range(src, w_start, w_end).map_err(|_| stale())?;
    if !pinned.unchanged() {
        return Err(stale());
    }
    let rel = |at: u64| usize::try_from(at.saturating_sub(w_start)).unwrap_or(usize::MAX);
    let slice = |a: u64, b: u64| before.get(rel(a)..rel(b)).ok_or_else(stale);
    let mut after = String::with_capacity(before.len());
    let mut parts = Vec::with_capacity(starts.len() * 2 + 1);
    let mut at = 0;
    for &start in starts {
        if slice(start, start + len)? != old {
            return Err(stale());
        }
        after.push_str(slice(at.max(w_start), start)?);
        after.push_str(&new);
        parts.push(Part::Copy(src, at, start - at));
        parts.push(Part::Bytes(new.as_bytes()));
        at = start + len;
    }
    after.push_str(slice(at, w_end)?);
    parts.push(Part::Copy(src, at, size - at));
    // The copy reads the file as it is now: it must still be the version scanned, and
    // still be the file at `name`.
    let check = || {
        if pinned.still_at(dir, name) {
            Ok(())
        } else {
            Err(stale())
        }
    };
    publish(
        dir,
        name,
        display,
        &parts,
        Some(opened.st_mode & 0o777),
        false,
        &check,
    )?;
    let done = probe(dir, name, display, "edit")?.ok_or_else(stale)?;
    Ok(Some(EditOutcome {
        version: version_of(&done),
        first_line: scan.lines_before_first + 1,
        before,
        after,
        replaced: starts.len(),
    }))
}

/// `body` with the first occurrence (or all) of `old` in `lf`, its LF form, replaced by
/// `new`. The bytes between occurrences are copied unchanged; an occurrence spans the `\r`
/// of each `\r\n` it matched as `\n`.
fn replace_raw(body: &str, lf: &str, old: &str, new: &str, all: bool) -> String {
    let mut out = String::with_capacity(body.len() + new.len());
    // The `\r`s the LF form dropped (each before a `\n`), in order, and how many lie
    // before the position last mapped.
    let mut dropped = memchr::memmem::find_iter(body.as_bytes(), b"\r\n").peekable();
    let mut skipped = 0;
    // The position in `body` of position `p` of `lf` (a `\n` that was `\r\n` maps to
    // its `\r`); `p` never decreases.
    let mut raw = |p: usize| {
        // The k-th dropped `\r` at `c` is followed by the `\n` at `c - k` in `lf`.
        while dropped.next_if(|&c| c - skipped < p).is_some() {
            skipped += 1;
        }
        p + skipped
    };
    let mut copied = 0;
    let hits = memchr::memmem::find_iter(lf.as_bytes(), old.as_bytes());
    for at in hits.take(if all { usize::MAX } else { 1 }) {
        let (start, end) = (raw(at), raw(at + old.len()));
        out.push_str(&body[copied..start]);
        out.push_str(new);
        copied = end;
    }
    out.push_str(&body[copied..]);
    out
}

/// CRLF when `\r\n` outnumbers lone `\n` in the first 4096 characters.
fn uses_crlf(text: &str) -> bool {
    let head: String = text.chars().take(4096).collect();
    let crlf = head.matches("\r\n").count();
    let lf = head.matches('\n').count() - crlf;
    crlf > lf
}
