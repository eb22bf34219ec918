//! UTF-8-safe cuts: where a byte window may be cut without splitting a character.
//!
//! Output arrives as bytes in arbitrary chunks. These functions find the cut points that
//! keep every complete character whole; bytes that are simply invalid are left for the
//! lossy decoder (U+FFFD), never treated as an error.

/// The length of `bytes` without a trailing *incomplete* UTF-8 sequence.
///
/// Walks back at most three continuation bytes to a lead byte. If the lead announces more
/// bytes than follow it, the sequence is incomplete and is cut off. A run with no lead in
/// reach, or an invalid lead (`0xF8..`), is left in place for the lossy decoder.
///
/// ```
/// use dsh_core::utf8::complete_prefix_len;
/// assert_eq!(complete_prefix_len(b"a\xE2\x82"), 1); // "a" + first two bytes of "€"
/// assert_eq!(complete_prefix_len("a€".as_bytes()), 4);
/// ```
pub fn complete_prefix_len(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=4.min(len) {
        let b = bytes[len - back];
        if is_continuation(b) {
            continue;
        }
        return match sequence_len(b) {
            Some(need) if need > back => len - back,
            _ => len,
        };
    }
    len
}

/// How many leading continuation bytes (at most three) to skip so a window cut inside a
/// character starts at a character boundary.
///
/// ```
/// use dsh_core::utf8::leading_continuations;
/// assert_eq!(leading_continuations(b"\x82\xACb"), 2); // tail of "€" then "b"
/// ```
pub fn leading_continuations(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|b| is_continuation(**b))
        .count()
}

/// Decodes `bytes` as UTF-8, replacing invalid sequences with U+FFFD.
pub fn decode_lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

fn sequence_len(lead: u8) -> Option<usize> {
    match lead {
        0x00..=0x7F => Some(1),
        0xC2..=0xDF => Some(2),
        0xE0..=0xEF => Some(3),
        0xF0..=0xF4 => Some(4),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cut_of_a_multibyte_text_is_found() {
        let text = "aé€😀z";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let keep = complete_prefix_len(&bytes[..cut]);
            assert!(text.is_char_boundary(keep), "cut {cut} kept {keep}");
            assert!(cut - keep < 4);
            let skip = leading_continuations(&bytes[cut..]);
            assert!(text.is_char_boundary(cut + skip), "cut {cut} skip {skip}");
        }
    }

    #[test]
    fn invalid_bytes_are_left_for_the_lossy_decoder() {
        assert_eq!(complete_prefix_len(b"a\xF8"), 2);
        assert_eq!(complete_prefix_len(b"\x80\x80\x80\x80"), 4);
        assert_eq!(complete_prefix_len(b""), 0);
        assert_eq!(leading_continuations(b"\x80\x80\x80\x80"), 3);
        assert_eq!(decode_lossy(b"a\xFFb"), "a\u{FFFD}b");
    }
}
