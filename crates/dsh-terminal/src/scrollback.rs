//! The lines a terminal keeps, bounded in lines and in bytes.

use std::collections::VecDeque;

/// A page of retained lines ([`Scrollback::page`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPage {
    /// The lines, joined by `\n`.
    pub text: String,
    /// How many lines are retained.
    pub total_lines: u64,
    /// The page's first line, counted from the newest (0 = ends at the newest line).
    pub line_begin: u64,
    /// `line_begin` plus the number of lines returned.
    pub line_end: u64,
    /// Whether older output was dropped from the scrollback, or the page was cut.
    pub truncated: bool,
}

/// Sanitized output as lines: the newest `max_lines` lines within `max_bytes` bytes. A
/// `\r` makes the text after it replace the line it is on (see the
/// [sanitizer](crate::sanitizer)).
#[derive(Debug)]
pub struct Scrollback {
    lines: VecDeque<String>,
    /// The line being written (no `\n` yet).
    current: String,
    bytes: usize,
    max_lines: usize,
    max_bytes: usize,
    truncated: bool,
}

impl Scrollback {
    /// An empty scrollback of at most `max_lines` lines and `max_bytes` bytes.
    pub fn new(max_lines: usize, max_bytes: usize) -> Scrollback {
        Scrollback {
            lines: VecDeque::new(),
            current: String::new(),
            bytes: 0,
            max_lines: max_lines.max(1),
            max_bytes: max_bytes.max(4),
            truncated: false,
        }
    }

    /// Adds sanitized text.
    pub fn push(&mut self, text: &str) {
        let mut rest = text;
        while let Some(p) = rest.find(['\n', '\r']) {
            self.append(&rest[..p]);
            if rest.as_bytes()[p] == b'\n' {
                let line = std::mem::take(&mut self.current);
                self.lines.push_back(line);
                // The `\n` that joins it to the next line.
                self.bytes += 1;
            } else {
                self.bytes -= self.current.len();
                self.current.clear();
            }
            rest = &rest[p + 1..];
        }
        self.append(rest);
        self.bound();
    }

    fn append(&mut self, s: &str) {
        self.current.push_str(s);
        self.bytes += s.len();
        if self.current.len() > self.max_bytes {
            // One endless line: keep its tail.
            let cut = floor_boundary(&self.current, self.current.len() - self.max_bytes);
            self.current.drain(..cut);
            self.bytes -= cut;
            self.truncated = true;
        }
    }

    fn bound(&mut self) {
        while self.lines.len() + usize::from(!self.current.is_empty()) > self.max_lines
            || self.bytes > self.max_bytes
        {
            let Some(old) = self.lines.pop_front() else {
                break;
            };
            self.bytes -= old.len() + 1;
            self.truncated = true;
        }
    }

    /// Whether output was ever dropped.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// How many lines are retained (the line being written counts once it has text).
    pub fn total_lines(&self) -> u64 {
        (self.lines.len() + usize::from(!self.current.is_empty())) as u64
    }

    /// `count` lines ending `offset` lines before the newest, within `max_bytes` (the
    /// tail of the page is kept, never splitting a character).
    pub fn page(&self, offset: u64, count: u64, max_bytes: usize) -> ReadPage {
        let total = self.total_lines();
        if offset >= total {
            return ReadPage {
                text: String::new(),
                total_lines: total,
                line_begin: offset,
                line_end: offset,
                truncated: self.truncated,
            };
        }
        let end = (total - offset) as usize;
        let begin = end.saturating_sub(count.min(total) as usize);
        let current = (!self.current.is_empty()).then_some(self.current.as_str());
        let all = self.lines.iter().map(String::as_str).chain(current);
        let page: Vec<&str> = all.skip(begin).take(end - begin).collect();
        let mut text = page.join("\n");
        let mut cut = false;
        if text.len() > max_bytes {
            let from = ceil_boundary(&text, text.len() - max_bytes);
            text.drain(..from);
            cut = true;
        }
        // The lines the text still holds, counted from its end.
        let returned = if text.is_empty() {
            0
        } else {
            text.matches('\n').count() as u64 + 1
        };
        ReadPage {
            text,
            total_lines: total,
            line_begin: offset,
            line_end: offset + returned,
            truncated: self.truncated || cut,
        }
    }
}

/// The largest char boundary of `s` at or below `i`.
pub(crate) fn floor_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The smallest char boundary of `s` at or above `i`.
pub(crate) fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i.min(s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_count_from_the_newest_line() {
        let mut s = Scrollback::new(100, 1 << 20);
        s.push("a\nb\nc\nd");
        assert_eq!(s.total_lines(), 4);
        let p = s.page(0, 2, 1 << 20);
        assert_eq!((p.text.as_str(), p.line_begin, p.line_end), ("c\nd", 0, 2));
        let p = s.page(1, 10, 1 << 20);
        assert_eq!((p.text.as_str(), p.line_end), ("a\nb\nc", 4));
        let far = s.page(9, 1, 1 << 20);
        assert_eq!(
            (far.text.as_str(), far.line_begin, far.line_end),
            ("", 9, 9)
        );
        assert!(!p.truncated);
    }

    #[test]
    fn line_and_byte_caps_drop_the_oldest_and_say_so() {
        let mut s = Scrollback::new(3, 1 << 20);
        s.push("1\n2\n3\n4\n");
        assert_eq!(s.page(0, 10, 100).text, "2\n3\n4");
        assert!(s.truncated());
        let mut b = Scrollback::new(100, 10);
        b.push("aaaa\nbbbb\ncccc\n");
        assert_eq!(b.page(0, 10, 100).text, "bbbb\ncccc");
        assert!(b.truncated());
        let mut one = Scrollback::new(100, 8);
        one.push(&"z".repeat(50));
        assert_eq!(one.page(0, 1, 100).text, "z".repeat(8));
    }

    #[test]
    fn a_carriage_return_replaces_the_line() {
        let mut s = Scrollback::new(100, 1 << 20);
        s.push("10%\r50%");
        s.push("\r100%\ndone\n");
        assert_eq!(s.page(0, 10, 100).text, "100%\ndone");
    }

    #[test]
    fn a_page_over_the_byte_cap_keeps_its_tail_on_a_char_boundary() {
        let mut s = Scrollback::new(100, 1 << 20);
        s.push("héllo\nwörld\n");
        let p = s.page(0, 10, 7);
        assert_eq!(p.text, "\nwörld");
        assert_eq!(p.line_end, 2);
        assert!(p.truncated);
        let tiny = s.page(0, 1, 1);
        assert_eq!(tiny.text, "d");
        let mut e = Scrollback::new(100, 1 << 20);
        e.push("€");
        assert_eq!(e.page(0, 1, 1).text, "");
    }
}
