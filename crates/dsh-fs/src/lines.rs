//! Streaming line windows: one pass over the file, counting every line, keeping the
//! selected ones, each cut at its character limit, so memory follows the window.

use std::io::Read;
use std::path::Path;

use dsh_core::{ErrorCode, HarnessError};
use rustix::fs::{Mode, OFlags};

use crate::publish::version_of;
use crate::{fs_error, LineLimits, LinesWindow, BINARY_SAMPLE};

/// Reads the window `limits` of the file at `key`.
pub(crate) fn read_lines(
    key: &Path,
    display: &Path,
    limits: LineLimits,
) -> Result<LinesWindow, HarnessError> {
    let d = display.display();
    let fd = rustix::fs::open(
        key,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| crate::os_error("read", display, e.into()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| crate::os_error("read", display, e.into()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(fs_error(
            ErrorCode::FsNotRegularFile,
            format!("cannot read \"{d}\": not a regular file"),
        ));
    }
    let mut file = std::fs::File::from(fd);
    let mut w = Window::new(limits);
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen: usize = 0;
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| crate::os_error("read", display, e))?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        if seen < BINARY_SAMPLE && chunk[..chunk.len().min(BINARY_SAMPLE - seen)].contains(&0) {
            return Err(fs_error(
                ErrorCode::FsNotText,
                format!("cannot read \"{d}\": binary file"),
            ));
        }
        seen = seen.saturating_add(n);
        // Decode with the carried partial character; keep a new partial for the next read.
        carry.extend_from_slice(chunk);
        let valid = match std::str::from_utf8(&carry) {
            Ok(_) => carry.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => {
                return Err(fs_error(
                    ErrorCode::FsNotText,
                    format!("cannot read \"{d}\": invalid UTF-8 text"),
                ))
            }
        };
        let text = std::str::from_utf8(&carry[..valid])
            .unwrap_or_default()
            .to_owned();
        w.feed(&text);
        carry.drain(..valid);
    }
    if !carry.is_empty() {
        return Err(fs_error(
            ErrorCode::FsNotText,
            format!("cannot read \"{d}\": invalid UTF-8 text"),
        ));
    }
    let (lines, total, truncated) = w.finish();
    if limits.offset > total && !(limits.offset == 1 && total == 0) {
        return Err(fs_error(
            ErrorCode::FsNotFound,
            format!(
                "offset {} is out of range for \"{d}\" ({total} lines)",
                limits.offset
            ),
        ));
    }
    Ok(LinesWindow {
        lines,
        total_lines: total,
        truncated_by_bytes: truncated,
        version: version_of(&st),
    })
}

struct Window {
    limits: LineLimits,
    /// The line being read: its number, its kept text, its length in characters.
    number: u64,
    current: String,
    chars: usize,
    /// Whether the current line has any content yet (a final line break does not open
    /// another line).
    open: bool,
    lines: Vec<(u64, String)>,
    bytes: usize,
    stopped: bool,
    truncated: bool,
}

impl Window {
    fn new(limits: LineLimits) -> Window {
        Window {
            limits,
            number: 1,
            current: String::new(),
            chars: 0,
            open: false,
            lines: Vec::new(),
            bytes: 0,
            stopped: false,
            truncated: false,
        }
    }

    fn selected(&self) -> bool {
        !self.stopped
            && self.number >= self.limits.offset
            && self.number < self.limits.offset.saturating_add(self.limits.limit)
    }

    /// Counts the lines of `text` without keeping any (std's fast search, no per-line
    /// work): for the parts of the file outside the window.
    fn skip(&mut self, text: &str, breaks: u64) {
        if breaks == 0 {
            self.open |= !text.is_empty();
            return;
        }
        self.number += breaks;
        self.open = !text.ends_with('\n');
        self.current.clear();
        self.chars = 0;
    }

    fn feed(&mut self, text: &str) {
        let breaks = text.matches('\n').count() as u64;
        let end = self.limits.offset.saturating_add(self.limits.limit);
        let past = self.stopped || self.number >= end;
        let before = self.number.saturating_add(breaks) < self.limits.offset;
        if past || before {
            return self.skip(text, breaks);
        }
        for piece in text.split_inclusive('\n') {
            let (body, ends) = match piece.strip_suffix('\n') {
                Some(b) => (b, true),
                None => (piece, false),
            };
            if !body.is_empty() {
                self.open = true;
            }
            if self.selected() && self.chars <= self.limits.max_line_chars {
                for c in body.chars() {
                    if self.chars > self.limits.max_line_chars {
                        break;
                    }
                    self.current.push(c);
                    self.chars += 1;
                }
            }
            if ends {
                self.end_line();
            }
        }
    }

    fn end_line(&mut self) {
        if self.selected() {
            let mut text = std::mem::take(&mut self.current);
            if text.ends_with('\r') && self.chars <= self.limits.max_line_chars {
                text.pop();
            }
            if text.chars().count() > self.limits.max_line_chars {
                text = text.chars().take(self.limits.max_line_chars).collect();
                text.push_str(&format!(
                    "... (line truncated to {} chars)",
                    self.limits.max_line_chars
                ));
            }
            let cost = text.len() + usize::from(!self.lines.is_empty());
            if self.bytes + cost > self.limits.max_bytes {
                self.stopped = true;
                self.truncated = true;
            } else {
                self.bytes += cost;
                self.lines.push((self.number, text));
            }
        }
        self.current.clear();
        self.chars = 0;
        self.open = false;
        self.number += 1;
    }

    fn finish(mut self) -> (Vec<(u64, String)>, u64, bool) {
        if self.open {
            self.end_line();
        }
        (self.lines, self.number - 1, self.truncated)
    }
}
