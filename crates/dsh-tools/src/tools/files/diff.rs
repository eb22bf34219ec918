//! The one-hunk summary of a change that `write` and `edit` report.

use serde_json::{json, Value};

/// A one-hunk summary of a change: the lines removed and added between the common head
/// and tail of `before` and `after` (as [`str::lines`] counts them).
///
/// Whole lines the two texts share at the start and at the end are skipped by comparing
/// bytes, so a one-line edit of a 100 MiB file costs two memory scans, not two line lists.
pub(super) fn line_diff(before: &str, after: &str) -> Value {
    let (b, a) = (before.as_bytes(), after.as_bytes());
    // Cut both after the last newline of their common prefix...
    let common = common_prefix(b, a);
    let head_cut = b[..common]
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |i| i + 1);
    let head_lines = b[..head_cut].iter().filter(|&&c| c == b'\n').count();
    // When one text is a prefix of the other, their first lines past the cut may still be
    // equal lines ("a" and "a\nb"): count what is left line by line.
    if common == b.len() || common == a.len() {
        let (head, removed, added) = lines_changed(&before[head_cut..], &after[head_cut..]);
        return json!({"firstLine": head_lines + head + 1, "removed": removed, "added": added});
    }
    // Otherwise the first lines past the cut differ. Cut again before the first line start
    // of their common suffix (within what is left).
    let (br, ar) = (&b[head_cut..], &a[head_cut..]);
    let common = common_suffix(br, ar);
    let at_line_start = |s: &[u8], i: usize| i == 0 || s[i - 1] == b'\n';
    let tail_cut = (0..=common)
        .find(|&k| {
            at_line_start(br, br.len() - common + k) && at_line_start(ar, ar.len() - common + k)
        })
        .map_or(0, |k| common - k);
    // The middles start and end on line boundaries, so their lines are the rest.
    let mid_b = &before[head_cut..before.len() - tail_cut];
    let mid_a = &after[head_cut..after.len() - tail_cut];
    let (head, removed, added) = lines_changed(mid_b, mid_a);
    if (removed, added) == (0, 0) {
        // The middles differ only in what `lines` ignores (a `\r` before a `\n`): the
        // line-by-line head runs on into the tail, so count the whole.
        let (head, removed, added) = lines_changed(before, after);
        return json!({"firstLine": head + 1, "removed": removed, "added": added});
    }
    json!({
        "firstLine": head_lines + head + 1,
        "removed": removed,
        "added": added,
    })
}

/// The length of the longest common prefix of `a` and `b` (compared a page at a time).
pub(super) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 4096 <= n && a[i..i + 4096] == b[i..i + 4096] {
        i += 4096;
    }
    i + a[i..n]
        .iter()
        .zip(&b[i..n])
        .take_while(|(x, y)| x == y)
        .count()
}

/// The length of the longest common suffix of `a` and `b`.
pub(super) fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut i = 0;
    while i + 4096 <= n && a[n - i - 4096..n - i] == b[n - i - 4096..n - i] {
        i += 4096;
    }
    i + a[..n - i]
        .iter()
        .rev()
        .zip(b[..n - i].iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// `(common head lines, removed, added)` between `before` and `after`, line by line.
pub(super) fn lines_changed(before: &str, after: &str) -> (usize, usize, usize) {
    let b: Vec<&str> = before.lines().collect();
    let a: Vec<&str> = after.lines().collect();
    let head = b.iter().zip(&a).take_while(|(x, y)| x == y).count();
    let tail = b[head..]
        .iter()
        .rev()
        .zip(a[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    (head, b.len() - head - tail, a.len() - head - tail)
}

#[cfg(test)]
mod tests {
    use super::{line_diff, lines_changed};
    use serde_json::json;

    /// Every text of up to 5 characters over `a`, `\r` and `\n`.
    fn texts() -> Vec<String> {
        let mut all = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..5 {
            last = last
                .iter()
                .flat_map(|t| ["a", "b", "\n"].map(|c| format!("{t}{c}")))
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    #[test]
    fn line_diff_agrees_on_long_texts_around_page_boundaries() {
        let before: String = (0..3000).map(|i| format!("line {i}\n")).collect();
        for at in [0, 1, 4095, 4096, 4097, 8191, 8192, 12_000, before.len() - 1] {
            let at = (0..=at)
                .rev()
                .find(|&i| before.is_char_boundary(i))
                .unwrap_or(0);
            for (cut, insert) in [(1, ""), (0, "x"), (0, "\n"), (1, "new\nlines\n"), (7, "")] {
                let end = (at + cut).min(before.len());
                let after = format!("{}{insert}{}", &before[..at], &before[end..]);
                let (head, removed, added) = lines_changed(&before, &after);
                let want = json!({"firstLine": head + 1, "removed": removed, "added": added});
                assert_eq!(
                    line_diff(&before, &after),
                    want,
                    "at {at}, cut {cut}, insert {insert:?}"
                );
                let (head, removed, added) = lines_changed(&after, &before);
                let want = json!({"firstLine": head + 1, "removed": removed, "added": added});
                assert_eq!(line_diff(&after, &before), want, "reversed, at {at}");
            }
        }
    }

    #[test]
    fn line_diff_agrees_with_the_line_by_line_count_on_every_small_pair() {
        let all = texts();
        for b in &all {
            for a in &all {
                let (head, removed, added) = lines_changed(b, a);
                let want = json!({"firstLine": head + 1, "removed": removed, "added": added});
                assert_eq!(line_diff(b, a), want, "{b:?} -> {a:?}");
            }
        }
    }
}
