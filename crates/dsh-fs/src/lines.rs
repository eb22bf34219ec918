//! Streaming line windows: one pass over the file, keeping the selected lines, each cut at
//! its character limit, so memory follows the window; the lines after it are counted for
//! at most [`COUNT_AHEAD`] more bytes, so time follows the window too.

use std::io::Read;
use std::path::Path;

use dsh_core::{CancelToken, ErrorCode, HarnessError};

use crate::publish::version_of;
use crate::{fs_error, LineLimits, LinesWindow, TotalLines, BINARY_SAMPLE, COUNT_AHEAD};

/// Reads the window `limits` of the file at `key`, checking `cancel` before each read.
pub(crate) fn read_lines(
    key: &Path,
    display: &Path,
    limits: LineLimits,
    cancel: &CancelToken,
) -> Result<LinesWindow, HarnessError> {
    let d = display.display();
    let fd = crate::open::open_for_read(key, display)?;
    let st = rustix::fs::fstat(&fd).map_err(|e| crate::os_error("read", display, e.into()))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(fs_error(
            ErrorCode::FsNotRegularFile,
            format!("cannot read \"{d}\": not a regular file"),
        ));
    }
    let size = u64::try_from(st.st_size).unwrap_or(0);
    let mut file = std::fs::File::from(fd);
    let mut w = Window::new(limits);
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen: u64 = 0;
    // Bytes read when the window was full: counting stops COUNT_AHEAD bytes later.
    let mut full_at: Option<u64> = None;
    let mut carry: Vec<u8> = Vec::new();
    let at_end = loop {
        if cancel.is_cancelled() {
            return Err(fs_error(ErrorCode::FsAborted, "read aborted".into()));
        }
        // At exactly the size seen at open, one more read tells whether the file ends.
        if full_at.is_some_and(|at| seen - at >= COUNT_AHEAD) && seen != size {
            break false;
        }
        let n = file
            .read(&mut buf)
            .map_err(|e| crate::os_error("read", display, e))?;
        if n == 0 {
            break true;
        }
        let chunk = &buf[..n];
        let sample = usize::try_from((BINARY_SAMPLE as u64).saturating_sub(seen)).unwrap_or(0);
        if chunk[..chunk.len().min(sample)].contains(&0) {
            return Err(fs_error(
                ErrorCode::FsNotText,
                format!("cannot read \"{d}\": binary file"),
            ));
        }
        seen += n as u64;
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
        w.feed(std::str::from_utf8(&carry[..valid]).unwrap_or_default());
        carry.drain(..valid);
        if full_at.is_none() && w.full() {
            full_at = Some(seen);
        }
    };
    if at_end && !carry.is_empty() {
        return Err(fs_error(
            ErrorCode::FsNotText,
            format!("cannot read \"{d}\": invalid UTF-8 text"),
        ));
    }
    let (lines, total, truncated) = w.finish(at_end);
    if let TotalLines::Exact(total) = total {
        if limits.offset > total && !(limits.offset == 1 && total == 0) {
            return Err(fs_error(
                ErrorCode::FsNotFound,
                format!(
                    "offset {} is out of range for \"{d}\" ({total} lines)",
                    limits.offset
                ),
            ));
        }
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
    /// Bytes of the current line read since it was cut.
    cut_bytes: u64,
    /// No more lines are kept: the byte limit was reached, or a line was cut that is the
    /// window's last or has gone on for [`COUNT_AHEAD`] bytes since.
    closed: bool,
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
            cut_bytes: 0,
            closed: false,
            truncated: false,
        }
    }

    fn end(&self) -> u64 {
        self.limits.offset.saturating_add(self.limits.limit)
    }

    /// Whether nothing read from here on changes the lines kept.
    fn full(&self) -> bool {
        self.closed || self.number >= self.end()
    }

    fn selected(&self) -> bool {
        !self.full() && self.number >= self.limits.offset
    }

    /// Counts the lines of `text` without keeping any (a fast byte search, no per-line
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
        let breaks = memchr::memchr_iter(b'\n', text.as_bytes()).count() as u64;
        if self.full() || self.number.saturating_add(breaks) < self.limits.offset {
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
            let max = self.limits.max_line_chars;
            if self.selected() && self.chars <= max {
                for c in body.chars() {
                    if self.chars > max {
                        break;
                    }
                    self.current.push(c);
                    self.chars += 1;
                }
            }
            if self.selected() && self.chars > max {
                self.cut_bytes += body.len() as u64;
            }
            if ends {
                self.end_line();
            } else if self.selected()
                && self.chars > max
                && (self.number + 1 == self.end() || self.cut_bytes >= COUNT_AHEAD)
            {
                // Where the cut line ends changes nothing, or is too far to look for.
                self.keep();
                self.closed = true;
            }
        }
    }

    /// Keeps the current line (cut, and within the byte limit), or closes the window.
    fn keep(&mut self) {
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
            self.closed = true;
            self.truncated = true;
        } else {
            self.bytes += cost;
            self.lines.push((self.number, text));
        }
    }

    fn end_line(&mut self) {
        if self.selected() {
            self.keep();
        }
        self.current.clear();
        self.chars = 0;
        self.cut_bytes = 0;
        self.open = false;
        self.number += 1;
    }

    /// The lines kept, the total (exact when the file was read `at_end`), and whether
    /// the byte limit cut the window.
    fn finish(mut self, at_end: bool) -> (Vec<(u64, String)>, TotalLines, bool) {
        let total = if at_end {
            if self.open {
                self.end_line();
            }
            TotalLines::Exact(self.number - 1)
        } else {
            TotalLines::AtLeast(self.number - 1 + u64::from(self.open))
        };
        (self.lines, total, self.truncated)
    }
}
