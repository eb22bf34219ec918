//! Bounding what a terminal or job tool returns: its tail, with the lines that say what
//! it is kept whole.

/// The most bytes of one terminal or job tool result: 32 KiB, so a result, escaped as JSON
/// in its structured form, stays within what agent clients pass to the model inline (see
/// [`crate::tools::files::READ_MAX_BYTES`]).
pub const MAX_RESULT_BYTES: usize = 32 << 10;

/// The marker a bounded result ends with.
const TRUNCATED: &str = "\n[output truncated]";

/// The last `n` bytes of `s` at most, starting at a character boundary.
pub(crate) fn tail_of(s: &str, n: usize) -> &str {
    let mut from = s.len().saturating_sub(n);
    while !s.is_char_boundary(from) {
        from += 1;
    }
    &s[from..]
}

/// `text` bounded to `cap` bytes: the tail of `body`, then `suffix` whole (and the
/// truncation marker when anything was cut or `truncated` says output was dropped
/// upstream). If `suffix` and the marker alone exceed the cap, their tail.
pub(crate) fn bounded(body: &str, suffix: &str, truncated: bool, cap: usize) -> String {
    let marker = if truncated { TRUNCATED } else { "" };
    if body.len() + suffix.len() + marker.len() <= cap {
        return format!("{body}{suffix}{marker}");
    }
    let fixed = suffix.len() + TRUNCATED.len();
    if fixed >= cap {
        return tail_of(&format!("{suffix}{TRUNCATED}"), cap).to_owned();
    }
    format!("{}{suffix}{TRUNCATED}", tail_of(body, cap - fixed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_result_keeps_the_tail_and_the_status_lines() {
        assert_eq!(bounded("abc", "\n[x]", false, 100), "abc\n[x]");
        assert_eq!(
            bounded("abc", "\n[x]", true, 100),
            "abc\n[x]\n[output truncated]"
        );
        let cut = bounded(&"é".repeat(100), "\n[x]", false, 30);
        assert!(cut.len() <= 30, "{cut}");
        assert!(cut.ends_with("\n[x]\n[output truncated]"), "{cut}");
        assert!(cut.starts_with('é'), "{cut}");
        let tiny = bounded("abc", "\n[wait: timeout]", false, 10);
        assert_eq!(tiny, "truncated]");
    }
}
