//! The screen a person would see: output run through a terminal emulator (the `vt100`
//! crate), for programs that draw a full screen.
//!
//! Line-oriented output is shown from the sanitized lines (see the
//! [sanitizer](crate::sanitizer)). A program that switches to the alternate screen
//! (`top`, `htop`, `vim`, `less`, a curses menu) draws with cursor moves that mean
//! nothing as lines: while it holds the alternate screen, a send's viewport is the
//! rendered screen instead, rows × cols of text with no escape bytes.

/// A terminal emulator's screen, bounded to rows × cols (no scrollback of its own).
pub(crate) struct Screen {
    parser: vt100::Parser,
    strings: Strings,
    /// The bytes passed on, reused between calls.
    out: Vec<u8>,
}

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
            parser: vt100::Parser::new(rows, cols, 0),
            strings: Strings::Ground,
            out: Vec::new(),
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
        self.parser.process(&self.out);
        if self.out.capacity() > 64 << 10 {
            self.out = Vec::new();
        }
    }

    /// Whether a full-screen program holds the alternate screen.
    pub(crate) fn alternate(&self) -> bool {
        self.parser.screen().alternate_screen()
    }

    /// The screen's text: its rows, trailing blanks and blank rows at the bottom trimmed.
    pub(crate) fn contents(&self) -> String {
        let text = self.parser.screen().contents();
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        let keep = lines
            .iter()
            .rposition(|l| !l.is_empty())
            .map_or(0, |i| i + 1);
        lines[..keep].join("\n")
    }
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
            .field("size", &self.parser.screen().size())
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
}
