//! Bounded retention: what to keep of a long stream, and exactly how much was left out.
//!
//! A retainer sees every push but keeps at most a budget: [`ItemRetainer`] keeps the first
//! N items; [`TextRetainer`] keeps a byte prefix, a rolling byte suffix, or both
//! ([`TextStrategy`]). Memory stays within the budget however much is pushed. On
//! [`finish`](TextRetainer::finish) the kept bytes are decoded without splitting a UTF-8
//! character at a cut, and the [`Omitted`] count says how many bytes are really missing from
//! the text, partial characters included. Callers word the gap with [`describe_omitted`]
//! and [`format_retention_notice`]; the retainers add no marker of their own.
//!
//! Consumers: spill policy (the head+tail preview of an oversize result), jobs and terminal
//! output. The bash executors bound their output with their own collector instead.
//!
//! ```
//! use dsh_core::retention::{describe_omitted, TextRetainer, TextStrategy};
//!
//! let mut r = TextRetainer::new(TextStrategy::HeadTail { head_bytes: 4, tail_bytes: 4 });
//! r.push_str("HEAD middle nobody needs to read TAIL");
//! let kept = r.finish();
//! assert_eq!((kept.head.as_str(), kept.tail.as_str()), ("HEAD", "TAIL"));
//! assert_eq!(describe_omitted(&kept.omitted, "bytes"), "Omitted 29 bytes.");
//! ```
//!
//! # Guarantees
//! - A text retainer holds at most its head budget plus its tail budget of bytes.
//! - `omitted` is exact: stream length minus the bytes that made it into the text.
//! - When nothing was omitted, the text is the whole stream, decoded as one buffer.
//!
//! # Limits
//! - Bytes that are invalid UTF-8 in the stream itself become U+FFFD; they are not trimmed.
//!
//! # Errors
//! `INVALID_ARGUMENT` from [`checked_budget`] for a budget that is not a non-negative integer.

use crate::ring::ByteRing;
use crate::utf8::{complete_prefix_len, decode_lossy, leading_continuations};
use crate::HarnessError;

/// How much of a stream was left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Omitted {
    /// Nothing was left out.
    None,
    /// Exactly this many units (bytes or items) were left out.
    Exact(u64),
    /// Something was left out but the amount is not known. The retainers here never
    /// produce it; it exists for sources that can only tell "more".
    Unknown,
}

/// What one push did.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushDecision {
    /// No byte or item of this push was dropped.
    pub kept: bool,
    /// Something has been dropped by this push or an earlier one.
    pub truncated: bool,
}

/// Validates a budget that arrives as a JSON-style number (config, tool arguments).
///
/// Returns it as a `usize`; an integer beyond `usize::MAX` saturates, which is a budget
/// larger than any stream.
///
/// # Errors
/// `INVALID_ARGUMENT` `<field> must be a non-negative integer` when `value` is negative,
/// fractional, NaN or infinite.
pub fn checked_budget(field: &str, value: f64) -> Result<usize, HarnessError> {
    if value.is_finite() && value >= 0.0 && value.fract() == 0.0 {
        // `as` saturates for floats, which is the documented behaviour above.
        Ok(value as usize)
    } else {
        Err(HarnessError::invalid_argument(format!(
            "{field} must be a non-negative integer"
        )))
    }
}

/// Keeps the first `max_items` items of a stream and counts the rest.
#[derive(Debug, Clone)]
pub struct ItemRetainer<T> {
    items: Vec<T>,
    max_items: usize,
    seen: u64,
}

/// What an [`ItemRetainer`] kept.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemRetention<T> {
    /// The kept items, in push order.
    pub items: Vec<T>,
    /// Whether any item was dropped.
    pub truncated: bool,
    /// Items pushed.
    pub seen: u64,
    /// Items kept (`items.len()`).
    pub kept: u64,
    /// `Exact(seen - kept)` when anything was dropped, else `None`.
    pub omitted: Omitted,
}

impl<T> ItemRetainer<T> {
    /// A retainer that keeps the first `max_items` items. It allocates as items arrive, so
    /// a large budget costs nothing up front.
    pub fn head(max_items: usize) -> Self {
        ItemRetainer {
            items: Vec::new(),
            max_items,
            seen: 0,
        }
    }

    /// Offers `item`; it is kept while the budget has room and dropped after that.
    pub fn push(&mut self, item: T) -> PushDecision {
        self.seen += 1;
        let kept = self.items.len() < self.max_items;
        if kept {
            self.items.push(item);
        }
        PushDecision {
            kept,
            truncated: self.seen > self.items.len() as u64,
        }
    }

    /// The kept items and the count of dropped ones.
    pub fn finish(self) -> ItemRetention<T> {
        let kept = self.items.len() as u64;
        let dropped = self.seen - kept;
        ItemRetention {
            items: self.items,
            truncated: dropped > 0,
            seen: self.seen,
            kept,
            omitted: if dropped > 0 {
                Omitted::Exact(dropped)
            } else {
                Omitted::None
            },
        }
    }
}

/// Which bytes of a stream a [`TextRetainer`] keeps. Budgets are in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextStrategy {
    /// The first `max_bytes` bytes.
    Head {
        /// Prefix budget.
        max_bytes: usize,
    },
    /// The last `max_bytes` bytes.
    Tail {
        /// Suffix budget.
        max_bytes: usize,
    },
    /// The first `head_bytes` and the last `tail_bytes` bytes; the middle is omitted.
    HeadTail {
        /// Prefix budget.
        head_bytes: usize,
        /// Suffix budget.
        tail_bytes: usize,
    },
}

impl TextStrategy {
    /// `(prefix cap, suffix cap)`: every strategy is a head+tail with one side possibly 0.
    fn caps(self) -> (usize, usize) {
        match self {
            TextStrategy::Head { max_bytes } => (max_bytes, 0),
            TextStrategy::Tail { max_bytes } => (0, max_bytes),
            TextStrategy::HeadTail {
                head_bytes,
                tail_bytes,
            } => (head_bytes, tail_bytes),
        }
    }
}

/// Keeps a bounded prefix and/or rolling suffix of a byte stream. See the
/// [module docs](self).
///
/// Bytes fill the prefix first; everything after it flows through the suffix window, whose
/// oldest bytes are dropped as new ones arrive. Memory never exceeds the two budgets, and
/// both sides allocate as bytes arrive.
#[derive(Debug)]
pub struct TextRetainer {
    head_cap: usize,
    head: Vec<u8>,
    tail: ByteRing,
    total: u64,
}

/// What a [`TextRetainer`] kept.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextRetention {
    /// `head` followed by `tail`, with no separator: callers that want a notice in the gap
    /// use the two fields instead.
    pub text: String,
    /// The kept prefix. When nothing was omitted it holds the whole text.
    pub head: String,
    /// The kept suffix. Empty when nothing was omitted and for [`TextStrategy::Head`].
    pub tail: String,
    /// Whether any byte of the stream is missing from `text`.
    pub truncated: bool,
    /// Bytes pushed.
    pub total_bytes: u64,
    /// `Exact(total_bytes - bytes in text)` when anything is missing, else `None`.
    pub omitted: Omitted,
}

impl TextRetainer {
    /// A retainer that keeps what `strategy` says.
    pub fn new(strategy: TextStrategy) -> Self {
        let (head_cap, tail_cap) = strategy.caps();
        TextRetainer {
            head_cap,
            head: Vec::new(),
            tail: ByteRing::new(tail_cap),
            total: 0,
        }
    }

    /// Offers `bytes`. `kept` is false when this push made the omitted total grow.
    pub fn push(&mut self, bytes: &[u8]) -> PushDecision {
        let before = self.omitted_bytes();
        self.total += bytes.len() as u64;
        let room = self.head_cap - self.head.len();
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        if !rest.is_empty() {
            self.tail.push(rest);
        }
        let after = self.omitted_bytes();
        PushDecision {
            kept: after == before,
            truncated: after > 0,
        }
    }

    /// Offers the UTF-8 bytes of `s`; the same as `push(s.as_bytes())`.
    pub fn push_str(&mut self, s: &str) -> PushDecision {
        self.push(s.as_bytes())
    }

    /// Bytes dropped so far, before any trimming at character boundaries.
    fn omitted_bytes(&self) -> u64 {
        self.total - self.head.len() as u64 - self.tail.retained() as u64
    }

    /// Decodes what was kept.
    ///
    /// When nothing was omitted, prefix and suffix are decoded as one buffer, so a
    /// character split across them survives. Otherwise the prefix loses a trailing
    /// incomplete character and the suffix its leading continuation bytes, the two are
    /// decoded apart (no character is rebuilt across the gap), and the trimmed bytes count
    /// as omitted.
    pub fn finish(self) -> TextRetention {
        let mut suffix = Vec::with_capacity(self.tail.retained());
        self.tail.read_from(0, &mut suffix);
        if self.omitted_bytes() == 0 {
            let mut whole = self.head;
            whole.extend_from_slice(&suffix);
            let text = decode_lossy(&whole);
            return TextRetention {
                head: text.clone(),
                text,
                tail: String::new(),
                truncated: false,
                total_bytes: self.total,
                omitted: Omitted::None,
            };
        }
        let head_len = complete_prefix_len(&self.head);
        let suffix = &suffix[leading_continuations(&suffix)..];
        let head = decode_lossy(&self.head[..head_len]);
        let tail = decode_lossy(suffix);
        let kept = (head_len + suffix.len()) as u64;
        TextRetention {
            text: format!("{head}{tail}"),
            head,
            tail,
            truncated: true,
            total_bytes: self.total,
            omitted: Omitted::Exact(self.total - kept),
        }
    }
}

/// Words an omission for a model: `Omitted <n> <unit>.`, `More <unit> were omitted.`, or
/// the empty string when nothing was omitted.
pub fn describe_omitted(omitted: &Omitted, unit: &str) -> String {
    match omitted {
        Omitted::None => String::new(),
        Omitted::Exact(n) => format!("Omitted {n} {unit}."),
        Omitted::Unknown => format!("More {unit} were omitted."),
    }
}

/// Joins an omission notice and a recovery hint with one space; an empty half is left out,
/// so two empty halves give the empty string.
pub fn format_retention_notice(notice: &str, recovery: &str) -> String {
    match (notice.is_empty(), recovery.is_empty()) {
        (false, false) => format!("{notice} {recovery}"),
        (false, true) => notice.to_owned(),
        (true, false) => recovery.to_owned(),
        (true, true) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    fn retain(strategy: TextStrategy, chunks: &[&[u8]]) -> TextRetention {
        let mut r = TextRetainer::new(strategy);
        for c in chunks {
            r.push(c);
        }
        r.finish()
    }

    fn head(max_bytes: usize) -> TextStrategy {
        TextStrategy::Head { max_bytes }
    }

    fn tail(max_bytes: usize) -> TextStrategy {
        TextStrategy::Tail { max_bytes }
    }

    fn head_tail(head_bytes: usize, tail_bytes: usize) -> TextStrategy {
        TextStrategy::HeadTail {
            head_bytes,
            tail_bytes,
        }
    }

    fn decision(kept: bool, truncated: bool) -> PushDecision {
        PushDecision { kept, truncated }
    }

    fn text_retention(head: &str, tail: &str, total_bytes: u64, omitted: Omitted) -> TextRetention {
        TextRetention {
            text: format!("{head}{tail}"),
            head: head.to_owned(),
            tail: tail.to_owned(),
            truncated: omitted != Omitted::None,
            total_bytes,
            omitted,
        }
    }

    #[test]
    fn item_head_keeps_the_first_items_and_counts_the_rest_exactly() {
        let mut r = ItemRetainer::head(2);
        assert_eq!(r.push('a'), decision(true, false));
        assert_eq!(r.push('b'), decision(true, false));
        assert_eq!(r.push('c'), decision(false, true));
        assert_eq!(r.push('d'), decision(false, true));
        assert_eq!(
            r.finish(),
            ItemRetention {
                items: vec!['a', 'b'],
                truncated: true,
                seen: 4,
                kept: 2,
                omitted: Omitted::Exact(2),
            }
        );
    }

    #[test]
    fn item_head_under_the_budget_omits_nothing() {
        let mut r = ItemRetainer::head(3);
        r.push(1);
        r.push(2);
        assert_eq!(
            r.finish(),
            ItemRetention {
                items: vec![1, 2],
                truncated: false,
                seen: 2,
                kept: 2,
                omitted: Omitted::None,
            }
        );
    }

    #[test]
    fn item_head_with_a_zero_budget_keeps_nothing_but_counts_everything() {
        let mut r = ItemRetainer::head(0);
        assert_eq!(r.push("x"), decision(false, true));
        assert_eq!(r.push("y"), decision(false, true));
        let got = r.finish();
        assert_eq!((got.items.len(), got.seen, got.kept), (0, 2, 0));
        assert_eq!(got.omitted, Omitted::Exact(2));
    }

    #[test]
    fn bad_budgets_are_rejected_with_the_field_name() {
        for bad in [-1.0, 1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let e = checked_budget("max_bytes", bad).expect_err("must reject");
            assert_eq!(e.code(), ErrorCode::InvalidArgument, "{bad}");
            assert_eq!(e.message(), "max_bytes must be a non-negative integer");
        }
    }

    #[test]
    fn integral_budgets_are_accepted_and_huge_ones_saturate() {
        assert_eq!(checked_budget("b", 0.0).ok(), Some(0));
        assert_eq!(checked_budget("b", -0.0).ok(), Some(0));
        assert_eq!(checked_budget("b", 4096.0).ok(), Some(4096));
        assert_eq!(checked_budget("b", 1e300).ok(), Some(usize::MAX));
    }

    #[test]
    fn head_keeps_the_prefix_and_counts_the_rest_exactly() {
        let got = retain(head(5), &[b"hello", b"world"]);
        assert_eq!(got, text_retention("hello", "", 10, Omitted::Exact(5)));
    }

    #[test]
    fn a_chunk_straddling_the_head_cap_is_not_kept() {
        let mut r = TextRetainer::new(head(4));
        assert_eq!(r.push(b"ab"), decision(true, false));
        assert_eq!(r.push(b"cde"), decision(false, true));
        assert_eq!(r.finish().text, "abcd");
    }

    #[test]
    fn pushes_past_the_head_cap_keep_counting() {
        let mut r = TextRetainer::new(head(2));
        r.push(b"ab");
        assert_eq!(r.push(b"cd"), decision(false, true));
        assert_eq!(r.push(b"efg"), decision(false, true));
        assert_eq!(r.push(b""), decision(true, true));
        assert_eq!(r.finish(), text_retention("ab", "", 7, Omitted::Exact(5)));
    }

    #[test]
    fn tail_keeps_the_last_bytes_and_counts_the_rest() {
        let got = retain(tail(4), &[b"helloworld"]);
        assert_eq!(got, text_retention("", "orld", 10, Omitted::Exact(6)));
    }

    #[test]
    fn tail_under_the_cap_keeps_everything() {
        let mut r = TextRetainer::new(tail(10));
        assert_eq!(r.push(b"hel"), decision(true, false));
        assert_eq!(r.push(b"lo"), decision(true, false));
        assert_eq!(r.finish(), text_retention("hello", "", 5, Omitted::None));
    }

    #[test]
    fn old_chunks_slide_out_of_the_tail() {
        let mut r = TextRetainer::new(tail(3));
        assert_eq!(r.push(b"11"), decision(true, false));
        assert_eq!(r.push(b"22"), decision(false, true));
        assert_eq!(r.push(b"33"), decision(false, true));
        assert_eq!(r.push(b"44"), decision(false, true));
        assert_eq!(r.finish(), text_retention("", "344", 8, Omitted::Exact(5)));
    }

    #[test]
    fn head_tail_omits_the_middle_exactly() {
        let got = retain(head_tail(3, 3), &[b"abc", b"-middle-", b"xyz"]);
        assert_eq!(got, text_retention("abc", "xyz", 14, Omitted::Exact(8)));
    }

    #[test]
    fn head_and_tail_covering_the_whole_stream_are_not_truncated() {
        let mut r = TextRetainer::new(head_tail(3, 3));
        assert_eq!(r.push(b"abcx"), decision(true, false));
        assert_eq!(r.push(b"yz"), decision(true, false));
        assert_eq!(r.finish(), text_retention("abcxyz", "", 6, Omitted::None));
    }

    #[test]
    fn a_character_split_between_head_and_tail_survives_when_nothing_is_omitted() {
        // "é" is C3 A9: the head budget of 1 takes C3 and the tail takes A9.
        let got = retain(head_tail(1, 3), &["éab".as_bytes()]);
        assert_eq!(got, text_retention("éab", "", 4, Omitted::None));
    }

    #[test]
    fn a_real_gap_trims_partial_characters_on_both_sides() {
        // head 2 ends inside the first "€"; tail 2 starts inside the second.
        let got = retain(head_tail(2, 2), &["a€-€b".as_bytes()]);
        assert_eq!(got, text_retention("a", "b", 9, Omitted::Exact(7)));
    }

    #[test]
    fn zero_budgets_keep_nothing_but_count_everything() {
        for strategy in [head(0), tail(0), head_tail(0, 0)] {
            let mut r = TextRetainer::new(strategy);
            assert_eq!(r.push(b"abc"), decision(false, true), "{strategy:?}");
            assert_eq!(
                r.finish(),
                text_retention("", "", 3, Omitted::Exact(3)),
                "{strategy:?}"
            );
        }
    }

    #[test]
    fn an_empty_stream_is_empty_and_not_truncated() {
        for strategy in [head(0), tail(4), head_tail(2, 2)] {
            let got = retain(strategy, &[b"", b""]);
            assert_eq!(
                got,
                text_retention("", "", 0, Omitted::None),
                "{strategy:?}"
            );
        }
    }

    #[test]
    fn a_head_cut_inside_a_character_drops_its_partial_bytes() {
        let got = retain(head(2), &["a€b".as_bytes()]);
        assert_eq!(got, text_retention("a", "", 5, Omitted::Exact(4)));
    }

    #[test]
    fn a_tail_cut_inside_a_character_drops_its_partial_bytes() {
        let got = retain(tail(2), &["a€b".as_bytes()]);
        assert_eq!(got, text_retention("", "b", 5, Omitted::Exact(4)));
    }

    #[test]
    fn the_head_tail_count_equals_the_bytes_actually_absent() {
        let stream = "é€😀-middle-😀€é";
        let got = retain(head_tail(4, 4), &[stream.as_bytes()]);
        // Head 4 = "é" + 2 bytes of "€"; tail 4 = 2 bytes of "€" + "é".
        assert_eq!(got.text, "éé");
        let absent = stream.len() as u64 - got.text.len() as u64;
        assert_eq!(got.omitted, Omitted::Exact(absent));
        assert_eq!(absent, 22);
    }

    #[test]
    fn a_whole_multibyte_character_that_exactly_fits_is_kept() {
        assert_eq!(retain(head(3), &["€x".as_bytes()]).text, "€");
        assert_eq!(retain(head(4), &["😀x".as_bytes()]).text, "😀");
        assert_eq!(retain(tail(3), &["x€".as_bytes()]).text, "€");
        assert_eq!(retain(tail(4), &["x😀".as_bytes()]).text, "😀");
        assert_eq!(
            retain(head_tail(3, 4), &["€--😀".as_bytes()]),
            text_retention("€", "😀", 9, Omitted::Exact(2))
        );
    }

    #[test]
    fn two_and_four_byte_partials_are_trimmed() {
        assert_eq!(
            retain(head(2), &["aé".as_bytes(), b"z"]),
            text_retention("a", "", 4, Omitted::Exact(3))
        );
        assert_eq!(
            retain(head(3), &["a😀z".as_bytes()]),
            text_retention("a", "", 6, Omitted::Exact(5))
        );
        assert_eq!(
            retain(tail(1), &["zé".as_bytes()]),
            text_retention("", "", 3, Omitted::Exact(3))
        );
        assert_eq!(
            retain(tail(4), &["z😀z".as_bytes()]),
            text_retention("", "z", 6, Omitted::Exact(5))
        );
    }

    #[test]
    fn a_stray_continuation_run_in_the_head_is_left_for_the_lossy_decoder() {
        // No lead byte within reach, so there is no character to complete: keep the bytes.
        let got = retain(head(5), &[b"a\x80\x80\x80\x80zzz"]);
        assert_eq!(got.head, "a\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}");
        assert_eq!(got.omitted, Omitted::Exact(3));
    }

    #[test]
    fn a_stray_continuation_run_in_the_tail_loses_at_most_three_bytes() {
        // A character has at most three continuation bytes; more cannot come from one cut.
        let got = retain(tail(5), &[b"zzz\x80\x80\x80\x80a"]);
        assert_eq!(got.tail, "\u{FFFD}a");
        assert_eq!(got.omitted, Omitted::Exact(6));
    }

    #[test]
    fn an_invalid_lead_byte_is_left_for_the_lossy_decoder() {
        let got = retain(head(2), &[b"a\xF8bc"]);
        assert_eq!(got, text_retention("a\u{FFFD}", "", 4, Omitted::Exact(2)));
    }

    #[test]
    fn invalid_bytes_in_an_untruncated_stream_are_decoded_lossily() {
        let got = retain(head_tail(2, 2), &[b"a\xFF", b"b"]);
        assert_eq!(got, text_retention("a\u{FFFD}b", "", 3, Omitted::None));
    }

    #[test]
    fn push_str_pushes_the_utf8_bytes() {
        let mut r = TextRetainer::new(tail(2));
        assert_eq!(r.push_str("é"), decision(true, false));
        assert_eq!(r.push_str("€"), decision(false, true));
        assert_eq!(r.finish(), text_retention("", "", 5, Omitted::Exact(5)));
    }

    #[test]
    fn a_huge_budget_allocates_only_what_arrives() {
        let mut r = TextRetainer::new(head_tail(usize::MAX, usize::MAX));
        r.push(b"small");
        assert!(r.head.capacity() < 1024);
        assert_eq!(r.finish(), text_retention("small", "", 5, Omitted::None));
        let mut items = ItemRetainer::head(usize::MAX);
        items.push(0u8);
        assert!(items.items.capacity() < 1024);
    }

    #[test]
    fn memory_stays_within_the_budgets_for_a_long_stream() {
        let mut r = TextRetainer::new(head_tail(10, 20));
        let chunk = [b'x'; 1000];
        for _ in 0..100 {
            r.push(&chunk);
            assert!(r.head.len() <= 10);
            assert!(r.tail.retained() <= 20);
        }
        let got = r.finish();
        assert_eq!(got.omitted, Omitted::Exact(100_000 - 30));
    }

    #[test]
    fn describe_omitted_words_each_case() {
        assert_eq!(
            describe_omitted(&Omitted::Exact(12), "bytes"),
            "Omitted 12 bytes."
        );
        assert_eq!(
            describe_omitted(&Omitted::Unknown, "lines"),
            "More lines were omitted."
        );
        assert_eq!(describe_omitted(&Omitted::None, "bytes"), "");
    }

    #[test]
    fn format_retention_notice_joins_with_one_space_and_drops_empty_halves() {
        assert_eq!(
            format_retention_notice("Omitted 3 bytes.", "Read the file."),
            "Omitted 3 bytes. Read the file."
        );
        assert_eq!(
            format_retention_notice("Omitted 3 bytes.", ""),
            "Omitted 3 bytes."
        );
        assert_eq!(
            format_retention_notice("", "Read the file."),
            "Read the file."
        );
        assert_eq!(format_retention_notice("", ""), "");
    }

    /// xorshift64: deterministic, so a failing case reproduces from its seed.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn floor_boundary(s: &str, mut at: usize) -> usize {
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        at
    }

    fn ceil_boundary(s: &str, mut at: usize) -> usize {
        while !s.is_char_boundary(at) {
            at += 1;
        }
        at
    }

    /// The omitted total once `t` bytes were pushed, per the spec formula.
    fn dropped_at(t: usize, head_cap: usize, tail_cap: usize) -> usize {
        let prefix = t.min(head_cap);
        t - prefix - (t - prefix).min(tail_cap)
    }

    #[test]
    fn random_chunkings_match_a_reference_model() {
        const PIECES: [&str; 9] = ["a", "b", " ", "\n", "é", "ß", "€", "中", "😀"];
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for case in 0..2000 {
            let stream: String = (0..rng.below(80))
                .map(|_| PIECES[rng.below(PIECES.len())])
                .collect();
            let bytes = stream.as_bytes();
            let t = bytes.len();
            // Budgets up to a bit past the stream, so untruncated cases are covered too.
            let strategy = match rng.below(3) {
                0 => head(rng.below(t + 6)),
                1 => tail(rng.below(t + 6)),
                _ => head_tail(rng.below(t / 2 + 4), rng.below(t / 2 + 4)),
            };
            let (head_cap, tail_cap) = strategy.caps();
            let ctx = format!("case {case} {strategy:?} stream {stream:?}");

            let mut r = TextRetainer::new(strategy);
            let mut pushed = 0;
            while pushed < t {
                // Zero-length chunks are legal pushes and must be `kept`.
                let n = rng.below(10).min(t - pushed);
                let d = r.push(&bytes[pushed..pushed + n]);
                let before = dropped_at(pushed, head_cap, tail_cap);
                pushed += n;
                let after = dropped_at(pushed, head_cap, tail_cap);
                assert_eq!(d, decision(after == before, after > 0), "{ctx} at {pushed}");
                assert!(r.head.len() <= head_cap, "{ctx}");
                assert!(r.tail.retained() <= tail_cap, "{ctx}");
            }
            let got = r.finish();

            let prefix = t.min(head_cap);
            let suffix = (t - prefix).min(tail_cap);
            let expected = if prefix + suffix == t {
                text_retention(&stream, "", t as u64, Omitted::None)
            } else {
                let h = &stream[..floor_boundary(&stream, prefix)];
                let s = &stream[ceil_boundary(&stream, t - suffix)..];
                text_retention(
                    h,
                    s,
                    t as u64,
                    Omitted::Exact((t - h.len() - s.len()) as u64),
                )
            };
            assert_eq!(got, expected, "{ctx}");
            assert!(stream.starts_with(&got.head), "{ctx}");
            assert!(stream.ends_with(&got.tail), "{ctx}");
            let kept = (got.head.len() + got.tail.len()) as u64;
            let omitted = match got.omitted {
                Omitted::None => 0,
                Omitted::Exact(n) => n,
                Omitted::Unknown => panic!("retainers never produce Unknown: {ctx}"),
            };
            assert_eq!(omitted, t as u64 - kept, "{ctx}");
        }
    }
}
