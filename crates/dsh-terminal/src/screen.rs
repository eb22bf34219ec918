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
}

impl Screen {
    /// A blank screen of `rows` × `cols`.
    pub(crate) fn new(rows: u16, cols: u16) -> Screen {
        Screen {
            parser: vt100::Parser::new(rows, cols, 0),
        }
    }

    /// Feeds raw output.
    pub(crate) fn process(&mut self, bytes: &[u8]) {
        self.parser.process(bytes);
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

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screen")
            .field("size", &self.parser.screen().size())
            .finish()
    }
}
