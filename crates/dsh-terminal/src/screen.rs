//! The screen a person would see: output run through a terminal emulator (the `vt100`
//! crate), for programs that draw a full screen.
//!
//! Line-oriented output is shown from the sanitized lines (see the
//! [sanitizer](crate::sanitizer)). A program that switches to the alternate screen
//! (`top`, `htop`, `vim`, `less`, a curses menu) draws with cursor moves that mean
//! nothing as lines: while it holds the alternate screen, a send's viewport is the
//! rendered screen instead, rows × cols of text with no escape bytes.
//!
//! The emulator exists only while the alternate screen is held: it is made when the
//! output switches to it (`CSI ? 1049 h`, `? 1047 h`, `? 47 h`) and dropped when the
//! program leaves it, so an idle shell costs no emulator (two grids of rows × cols
//! cells each).

/// A terminal emulator's screen, bounded to rows × cols (no scrollback of its own).
pub(crate) struct Screen {
    rows: u16,
    cols: u16,
    /// While the alternate screen is held.
    parser: Option<vt100::Parser>,
    strings: Strings,
    /// The bytes passed on, reused between calls.
    out: Vec<u8>,
    /// The end of the output so far, where a switch split across two reads begins.
    tail: Vec<u8>,
}

/// The longest alternate-screen switch looked for (`ESC [ ?` and a few parameters).
const SWITCH_MAX: usize = 24;

/// Where [`Screen::process`] is in the escape syntax, to drop the bodies of string
/// sequences (OSC, DCS, SOS, PM, APC): the emulator keeps an OSC body whole, however
/// long, and nothing a screen shows comes from one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strings {
    Ground,
    /// After `ESC`.
    Escape,
    /// After `ESC` and intermediate bytes (`ESC ( B`): no string follows.
    Intermediate,
    /// In a string's body.
    Body,
    /// In a string's body, after `ESC`: `\` ends the string, anything else starts an
    /// escape.
    BodyEscape,
}

impl Screen {
    /// A blank screen of `rows` × `cols`.
    pub(crate) fn new(rows: u16, cols: u16) -> Screen {
        Screen {
            rows,
            cols,
            parser: None,
            strings: Strings::Ground,
            out: Vec::new(),
            tail: Vec::new(),
        }
    }

    /// Feeds raw output, string sequences' bodies left out.
    pub(crate) fn process(&mut self, bytes: &[u8]) {
        self.out.clear();
        for &b in bytes {
            self.strings = match (self.strings, b) {
                (Strings::Body, 0x07 | 0x18 | 0x1a) => {
                    self.out.push(b);
                    Strings::Ground
                }
                (Strings::Body, 0x1b) => Strings::BodyEscape,
                (Strings::Body, _) => Strings::Body,
                (Strings::BodyEscape, b'\\') => {
                    self.out.extend_from_slice(&[0x1b, b'\\']);
                    Strings::Ground
                }
                (Strings::BodyEscape, _) => {
                    self.out.push(0x1b);
                    self.out.push(b);
                    escape_next(b)
                }
                (Strings::Escape, _) => {
                    self.out.push(b);
                    escape_next(b)
                }
                (Strings::Intermediate, 0x20..=0x2f) => {
                    self.out.push(b);
                    Strings::Intermediate
                }
                (_, 0x1b) => {
                    self.out.push(b);
                    Strings::Escape
                }
                (_, _) => {
                    self.out.push(b);
                    Strings::Ground
                }
            };
        }
        match &mut self.parser {
            Some(parser) => {
                parser.process(&self.out);
                if !parser.screen().alternate_screen() {
                    self.parser = None;
                }
            }
            None => {
                let mut seen = std::mem::take(&mut self.tail);
                seen.extend_from_slice(&self.out);
                if let Some(at) = alternate_switch(&seen) {
                    let mut parser = vt100::Parser::new(self.rows, self.cols, 0);
                    parser.process(&seen[at..]);
                    if parser.screen().alternate_screen() {
                        self.parser = Some(parser);
                    }
                }
                if self.parser.is_none() {
                    let from = seen.len().saturating_sub(SWITCH_MAX);
                    seen.drain(..from);
                    self.tail = seen;
                }
            }
        }
        if self.out.capacity() > 64 << 10 {
            self.out = Vec::new();
        }
    }

    /// Whether a full-screen program holds the alternate screen.
    pub(crate) fn alternate(&self) -> bool {
        self.parser.is_some()
    }

    /// The screen's text: its rows, trailing blanks and blank rows at the bottom trimmed
    /// (empty unless the alternate screen is held).
    pub(crate) fn contents(&self) -> String {
        let Some(parser) = &self.parser else {
            return String::new();
        };
        let text = parser.screen().contents();
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        let keep = lines
            .iter()
            .rposition(|l| !l.is_empty())
            .map_or(0, |i| i + 1);
        lines[..keep].join("\n")
    }
}

/// Where the first switch to the alternate screen in `bytes` starts: `ESC [ ?` with a
/// parameter 47, 1047 or 1049 among its `;`-separated ones, ending in `h`.
fn alternate_switch(bytes: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = memchr_esc(&bytes[from..]).map(|i| i + from) {
        let rest = &bytes[i..];
        if rest.starts_with(b"\x1b[?") {
            let params = &rest[3..];
            let end = params
                .iter()
                .take(SWITCH_MAX)
                .position(|b| !(b.is_ascii_digit() || *b == b';'));
            if let Some(end) = end {
                if params[end] == b'h'
                    && params[..end]
                        .split(|b| *b == b';')
                        .any(|p| matches!(p, b"47" | b"1047" | b"1049"))
                {
                    return Some(i);
                }
            }
        }
        from = i + 1;
    }
    None
}

fn memchr_esc(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|b| *b == 0x1b)
}

/// Where the byte after `ESC` leads.
fn escape_next(b: u8) -> Strings {
    match b {
        b']' | b'P' | b'X' | b'^' | b'_' => Strings::Body,
        0x1b => Strings::Escape,
        0x20..=0x2f => Strings::Intermediate,
        _ => Strings::Ground,
    }
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screen")
            .field("size", &(self.rows, self.cols))
            .field("alternate", &self.alternate())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_bodies_never_reach_the_emulator_and_the_screen_still_draws() {
        let mut s = Screen::new(5, 20);
        s.process(b"\x1b[?1049h\x1b]0;");
        for _ in 0..64 {
            s.process(&[b'x'; 16 << 10]);
        }
        s.process(b"\x1b\\\x1bP1$qm\x1b\\\x1b[2;3Hhi\x1b(B!");
        assert!(s.alternate());
        assert_eq!(s.contents(), "\n  hi!");
        assert_eq!(s.strings, Strings::Ground);
    }

    #[test]
    fn the_emulator_lives_only_while_the_alternate_screen_is_held() {
        let mut s = Screen::new(5, 20);
        s.process(b"plain output\r\n\x1b[1mbold\x1b[0m");
        assert!(!s.alternate() && s.parser.is_none());
        assert_eq!(s.contents(), "");
        // A switch split across reads, with another private mode beside it.
        s.process(b"\x1b[?10");
        s.process(b"49;25h\x1b[3;1Hmenu");
        assert!(s.alternate());
        assert_eq!(s.contents(), "\n\nmenu");
        s.process(b"\x1b[?1049lback");
        assert!(!s.alternate() && s.parser.is_none());
        s.process(b"\x1b[?47h\x1b[Hagain");
        assert_eq!(s.contents(), "again");
        // Other private modes are not a switch.
        let mut t = Screen::new(5, 20);
        t.process(b"\x1b[?25h\x1b[?2004h\x1b[?1h");
        assert!(!t.alternate());
    }
}
