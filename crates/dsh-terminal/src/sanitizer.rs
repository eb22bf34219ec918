//! Terminal output as lines of text: escape sequences removed, line ends normalised, the
//! shell's prompt marker found.
//!
//! A [`Sanitizer`] takes decoded text in chunks, as it arrives, and keeps what a sequence
//! split across chunks needs. It removes:
//! - OSC sequences (`ESC ]` … BEL or `ESC \`): window titles and the like (DCS, SOS,
//!   PM and APC strings, `ESC P`/`X`/`^`/`_` …, are removed the same way). One whose
//!   content starts with `133;D;` is the shell's prompt marker (the bash backend's
//!   `PROMPT_COMMAND` prints it before each prompt): its position is reported.
//! - CSI sequences (`ESC [` … a byte in `0x40..=0x7E`): colours, cursor moves.
//! - Every other escape sequence (`ESC 7`, `ESC ( B`: intermediates, then one final
//!   character), and BEL.
//!
//! - Every other control character but tab and line feed: C0 (backspace, shift-in, …),
//!   DEL, and C1 (U+0080-U+009F, where `U+009B` would start a CSI on some terminals).
//!
//! CR LF becomes LF, also when split across chunks. A lone CR is kept as `\r`: it means
//! "back to the start of the line", and the consumers ([`Scrollback`](crate::Scrollback)
//! and a send's output) let the text after it replace the line, so a progress bar that
//! redraws itself a hundred times shows its last state, not a hundred lines. (The
//! reference turns a lone CR into a line end; this is the deliberate difference.)
//!
//! An unterminated sequence longer than the pending cap is dropped through its
//! terminator: a program cannot make dsh hold unbounded text waiting for an `ESC \`.

/// The content that starts the prompt marker's OSC sequence.
pub const MARKER_PREFIX: &str = "133;D;";

/// One chunk's sanitized text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sanitized {
    /// The text: no escape sequences, LF line ends, `\r` for a lone carriage return.
    pub text: String,
    /// Where in `text` the last prompt marker of this chunk was (the text after it is
    /// what the shell printed as its prompt), if the chunk had one.
    pub marker_at: Option<usize>,
}

/// What the sanitizer is in the middle of dropping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Discard {
    /// An OSC, until BEL or `ESC \`.
    Osc,
    /// An OSC that just had an `ESC`: a `\` ends it.
    OscEsc,
    /// A CSI, until its final byte.
    Csi,
}

/// The streaming sanitizer. See the [module docs](self).
#[derive(Debug)]
pub struct Sanitizer {
    /// An incomplete escape sequence from the end of the last chunk.
    pending: String,
    /// The most bytes `pending` may hold before the sequence is dropped instead.
    max_pending: usize,
    discard: Option<Discard>,
    /// The last chunk ended in CR: an LF at the start of the next one makes one line end.
    held_cr: bool,
}

impl Sanitizer {
    /// A sanitizer that holds at most `max_pending` bytes of an unterminated sequence.
    pub fn new(max_pending: usize) -> Sanitizer {
        Sanitizer {
            pending: String::new(),
            max_pending,
            discard: None,
            held_cr: false,
        }
    }

    /// Sanitizes the next chunk.
    pub fn push(&mut self, chunk: &str) -> Sanitized {
        let input = if self.pending.is_empty() {
            chunk.to_owned()
        } else {
            let mut s = std::mem::take(&mut self.pending);
            s.push_str(chunk);
            s
        };
        let mut out = Sanitized::default();
        let bytes = input.as_bytes();
        let mut i = 0;
        if self.held_cr {
            self.held_cr = false;
            if bytes.first() == Some(&b'\n') {
                out.text.push('\n');
                i = 1;
            } else if !bytes.is_empty() || self.discard.is_some() {
                out.text.push('\r');
            } else {
                self.held_cr = true;
            }
        }
        while i < bytes.len() {
            if let Some(mode) = self.discard {
                i = self.skip_discarded(bytes, i, mode);
                continue;
            }
            match bytes[i] {
                0x1b => match self.escape(&input, i, &mut out) {
                    Some(next) => i = next,
                    None => break,
                },
                b'\r' => match bytes.get(i + 1) {
                    Some(b'\n') => {
                        out.text.push('\n');
                        i += 2;
                    }
                    Some(_) => {
                        out.text.push('\r');
                        i += 1;
                    }
                    None => {
                        self.held_cr = true;
                        i += 1;
                    }
                },
                0x07 => i += 1,
                _ => {
                    // Copy up to the next byte that needs a look (all ASCII, so a char
                    // boundary).
                    let end = bytes[i..]
                        .iter()
                        .position(|b| matches!(b, 0x1b | b'\r' | 0x07))
                        .map_or(bytes.len(), |p| i + p);
                    // Other control characters (C0 but tab and line feed, DEL, the C1
                    // range U+0080-U+009F) are for a terminal, not for a reader.
                    out.text.extend(
                        input[i..end]
                            .chars()
                            .filter(|c| !c.is_control() || matches!(c, '\n' | '\t')),
                    );
                    i = end;
                }
            }
        }
        out
    }

    /// At the end of output: a held CR becomes a line end; an unfinished sequence is
    /// dropped; the state is reset.
    pub fn flush(&mut self) -> Sanitized {
        let mut out = Sanitized::default();
        if self.held_cr {
            out.text.push('\n');
        }
        self.pending.clear();
        self.discard = None;
        self.held_cr = false;
        out
    }

    /// Handles the escape at `input[i]`; returns where to go on, or `None` when the rest
    /// of the chunk is an incomplete sequence (held in `pending`, or dropped).
    fn escape(&mut self, input: &str, i: usize, out: &mut Sanitized) -> Option<usize> {
        let bytes = input.as_bytes();
        match bytes.get(i + 1) {
            None => {
                self.hold(&input[i..], None);
                None
            }
            // OSC, and the other string sequences (DCS, SOS, PM, APC), which end the
            // same way.
            Some(&kind @ (b']' | b'P' | b'X' | b'^' | b'_')) => {
                let body = i + 2;
                match osc_end(&bytes[body..]) {
                    Some((len, term)) => {
                        let content = &input[body..body + len];
                        if kind == b']' && content.starts_with(MARKER_PREFIX) {
                            out.marker_at = Some(out.text.len());
                        }
                        Some(body + len + term)
                    }
                    None => {
                        self.hold(&input[i..], Some(Discard::Osc));
                        None
                    }
                }
            }
            Some(b'[') => {
                let body = i + 2;
                match bytes[body..].iter().position(|b| (0x40..=0x7e).contains(b)) {
                    Some(p) => Some(body + p + 1),
                    None => {
                        self.hold(&input[i..], Some(Discard::Csi));
                        None
                    }
                }
            }
            // Any other sequence: `ESC`, intermediate bytes (`(`, `#`, … as in
            // `ESC ( B`), then one final character (`ESC 7`, `ESC =`).
            Some(_) => {
                let body = i + 1;
                let inter = bytes[body..]
                    .iter()
                    .take_while(|b| (0x20..=0x2f).contains(*b))
                    .count();
                match input[body + inter..].chars().next() {
                    Some(c) => Some(body + inter + c.len_utf8()),
                    None => {
                        self.hold(&input[i..], None);
                        None
                    }
                }
            }
        }
    }

    /// Keeps `rest` for the next chunk, or, past the cap, starts dropping the sequence
    /// (`mode`) through its terminator.
    fn hold(&mut self, rest: &str, mode: Option<Discard>) {
        match mode {
            Some(mode) if rest.len() > self.max_pending => {
                self.discard = Some(match (mode, rest.ends_with('\x1b')) {
                    (Discard::Osc, true) => Discard::OscEsc,
                    (m, _) => m,
                });
            }
            // A run of intermediates this long is no sequence: dropped.
            None if rest.len() > self.max_pending => {}
            _ => self.pending = rest.to_owned(),
        }
    }

    /// Drops bytes of a discarded sequence from `i`; returns where the text resumes.
    fn skip_discarded(&mut self, bytes: &[u8], mut i: usize, mut mode: Discard) -> usize {
        while i < bytes.len() {
            let b = bytes[i];
            i += 1;
            match (mode, b) {
                (Discard::Osc, 0x07) | (Discard::OscEsc, b'\\') => {
                    self.discard = None;
                    return i;
                }
                (Discard::Osc | Discard::OscEsc, 0x1b) => mode = Discard::OscEsc,
                (Discard::OscEsc, _) => mode = Discard::Osc,
                (Discard::Csi, 0x40..=0x7e) => {
                    self.discard = None;
                    return i;
                }
                _ => {}
            }
        }
        self.discard = Some(mode);
        i
    }
}

/// The length of an OSC body and of its terminator (BEL: 1, `ESC \`: 2), if it ends in
/// `bytes`.
fn osc_end(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut j = 0;
    while j < bytes.len() {
        match bytes[j] {
            0x07 => return Some((j, 1)),
            0x1b => match bytes.get(j + 1) {
                Some(b'\\') => return Some((j, 2)),
                Some(_) => {}
                None => return None,
            },
            _ => {}
        }
        j += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(s: &mut Sanitizer, chunks: &[&str]) -> Vec<Sanitized> {
        chunks.iter().map(|c| s.push(c)).collect()
    }

    #[test]
    fn split_csi_and_split_marker_are_removed_and_the_prompt_follows_the_marker() {
        let mut s = Sanitizer::new(1024);
        let out = all(
            &mut s,
            &["a\x1b[3", "1mred\x1b[0m \x1b]133;D;", "0\x07dsh> "],
        );
        assert_eq!(out[0].text, "a");
        assert_eq!(out[1].text, "red ");
        assert_eq!(out[2].text, "dsh> ");
        assert_eq!(out[2].marker_at, Some(0));
        assert_eq!(out[1].marker_at, None);
    }

    #[test]
    fn other_osc_esc_pairs_bel_and_trailing_escapes_never_reach_the_text() {
        let mut s = Sanitizer::new(1024);
        let a = s.push("\x1b]0;title\x07x\x1b]2;t\x1b\\y\x1b7z\x07w\x1b");
        assert_eq!(a.text, "xyzw");
        assert_eq!(a.marker_at, None);
        assert_eq!(s.push("[Kv").text, "v");
        assert_eq!(s.push("é\x1b(B!").text, "é!");
    }

    #[test]
    fn crlf_is_one_line_end_across_chunks_and_a_lone_cr_is_kept() {
        let mut s = Sanitizer::new(1024);
        assert_eq!(s.push("a\r").text, "a");
        assert_eq!(s.push("\nb\r\nc").text, "\nb\nc");
        assert_eq!(s.push("\r").text, "");
        assert_eq!(s.push("d").text, "\rd");
        assert_eq!(s.push("50%\r100%\n").text, "50%\r100%\n");
        assert_eq!(s.push("e\r").text, "e");
        assert_eq!(s.flush().text, "\n");
    }

    #[test]
    fn an_overlong_unterminated_sequence_is_dropped_through_its_terminator() {
        let mut s = Sanitizer::new(8);
        assert_eq!(s.push("a\x1b]0;").text, "a");
        assert_eq!(s.push(&"x".repeat(100)).text, "");
        // An ESC split from its backslash.
        assert_eq!(s.push("xx\x1b").text, "");
        assert_eq!(s.push("\\b").text, "b");
        assert_eq!(s.push("\x1b[1;2;3;4;5;6;7;8;9").text, "");
        assert_eq!(s.push(";10mc").text, "c");
        // Flush resets discard mode.
        assert_eq!(s.push("\x1b]0;0123456789").text, "");
        s.flush();
        assert_eq!(s.push("d").text, "d");
    }

    #[test]
    fn dcs_and_apc_strings_are_removed_whole() {
        let mut s = Sanitizer::new(1024);
        assert_eq!(s.push("a\x1bP1$qm\x1b\\b\x1b_hidden\x07c").text, "abc");
    }

    #[test]
    fn other_control_characters_are_dropped_but_tab_and_line_feed() {
        let mut s = Sanitizer::new(1024);
        assert_eq!(
            s.push("a\x08b\x0ec\x7fd\u{9b}31me\tf\n").text,
            "abcd31me\tf\n"
        );
    }

    #[test]
    fn the_last_marker_of_a_chunk_is_the_one_reported() {
        let mut s = Sanitizer::new(1024);
        let out = s.push("\x1b]133;D;0\x07dsh> ls\nx\n\x1b]133;D;0\x07dsh> ");
        assert_eq!(out.text, "dsh> ls\nx\ndsh> ");
        assert_eq!(out.marker_at, Some(10));
    }
}
