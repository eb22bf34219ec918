//! What the session log keeps of an event, so that a session's log stays bounded whatever
//! the model sends or the tools return.
//!
//! The log is an audit trail, not a copy of every byte that passed: replaying a session
//! needs ids, outcomes and the facts tools record in `meta` (a file's key and version),
//! never a whole 1 MB argument. Two bounds apply, both to every event of every kind:
//!
//! - **Per value.** A string longer than [`LOG_HEAD_BYTES`] is logged as its head, its
//!   length and its SHA-256 ([`cut`]): `{"head": …, "bytes": n, "sha256": "…"}`. An event
//!   whose data is still larger than [`EVENT_MAX_BYTES`] after that (many long strings) is
//!   summarised, as below.
//! - **Per session.** Once a session's stored events reach its cap
//!   ([`DEFAULT_LOG_CAP_BYTES`] unless [`SessionLog::with_cap`](crate::session::SessionLog::with_cap)
//!   says otherwise), one `log/capped` event is written and every later event is
//!   [`summarise`]d: same type, sequence number and time; every field kept, except that a
//!   string longer than [`SUMMARY_STRING_BYTES`] becomes `{"bytes": n, "sha256": "…"}`
//!   (no head); and `"summarised": {"bytes": n}` gives the size the data had. A summary
//!   still larger than [`SUMMARY_MAX_BYTES`] keeps only its top-level numbers, booleans,
//!   short strings and its `error` object. Ids (`turn`, `callId`), names, outcomes
//!   (`isError`, `error.code`), modes and a tool result's `meta.key` and `meta.version` are
//!   short, so they survive; text does not.
//!
//! # Limits
//! The cap bounds the large events, not their number: past it each event still costs its
//! summary (a few hundred bytes), so that nothing runs that the log does not show.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// The longest string logged whole: 4 KiB (a command line or a path fits; a file's
/// content mostly does not). A longer one is logged as a [`cut`] with a 4 KiB head.
pub const LOG_HEAD_BYTES: usize = 4096;

/// The largest data an event is logged with before the cap, once its strings are cut: 64
/// KiB. Larger data is [`summarise`]d. No event dsh writes comes near it; it bounds the
/// log even if a future event carries many long strings.
pub const EVENT_MAX_BYTES: usize = 64 << 10;

/// The default size cap of one session's log: 64 MiB of stored events (their JSON), a
/// guess at room enough for a long working session. The event that reaches it is logged
/// as usual; every later one is summarised. At about 4.5 KiB for a call with a large
/// argument, that is some 14 000 such calls, or far more ordinary ones.
pub const DEFAULT_LOG_CAP_BYTES: u64 = 64 << 20;

/// The longest string a summarised event keeps whole: 256 bytes, enough for ids, error
/// codes, modes, versions and ordinary paths.
pub const SUMMARY_STRING_BYTES: usize = 256;

/// The largest summary kept with its nested fields: 2 KiB. A larger one keeps only its
/// top-level scalars and `error`.
pub const SUMMARY_MAX_BYTES: usize = 2048;

/// `s` as logged when it is too long to log whole: `{"head": <its first head_bytes bytes,
/// cut on a character boundary>, "bytes": <its length in bytes>, "sha256": <the lowercase
/// hex SHA-256 of all of it>}`; with `head_bytes` 0 there is no `head`.
pub fn cut(s: &str, head_bytes: usize) -> Value {
    let mut v = Map::new();
    if head_bytes > 0 {
        let mut end = head_bytes.min(s.len());
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        v.insert("head".into(), Value::String(s[..end].to_owned()));
    }
    v.insert("bytes".into(), json!(s.len()));
    v.insert("sha256".into(), Value::String(sha256_hex(s.as_bytes())));
    Value::Object(v)
}

/// The text a logged string value stands for: the string itself, or the head of a
/// [`cut`] (empty when the cut has no head). `None` for anything else.
pub fn logged_text(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s),
        Value::Object(m) if m.contains_key("sha256") && m.contains_key("bytes") => {
            Some(m.get("head").and_then(Value::as_str).unwrap_or(""))
        }
        _ => None,
    }
}

/// `data` with every string longer than [`LOG_HEAD_BYTES`] cut to its head, or its
/// [`summarise`]d form if it is still over [`EVENT_MAX_BYTES`].
pub fn bound(data: &Value) -> Value {
    let bounded = cut_strings(data, LOG_HEAD_BYTES, LOG_HEAD_BYTES);
    if json_len(&bounded) > EVENT_MAX_BYTES {
        summarise(data)
    } else {
        bounded
    }
}

/// The summary of `data` (see the [module docs](self)).
pub fn summarise(data: &Value) -> Value {
    let mut s = cut_strings(data, SUMMARY_STRING_BYTES, 0);
    if json_len(&s) > SUMMARY_MAX_BYTES {
        if let Value::Object(m) = &mut s {
            m.retain(|k, v| k == "error" || !(v.is_object() || v.is_array()));
        }
    }
    // Whatever remains over the limit (an error object of many long strings, say) is cut
    // to sizes only.
    if json_len(&s) > SUMMARY_MAX_BYTES {
        s = json!({});
    }
    let summarised = json!({"bytes": json_len(data)});
    match &mut s {
        Value::Object(m) => {
            m.insert("summarised".into(), summarised);
            s
        }
        _ => json!({"value": s, "summarised": summarised}),
    }
}

/// `v` with each string longer than `keep` bytes replaced by its [`cut`] with a
/// `head`-byte head.
fn cut_strings(v: &Value, keep: usize, head: usize) -> Value {
    match v {
        Value::String(s) if s.len() > keep => cut(s, head),
        Value::Array(items) => {
            Value::Array(items.iter().map(|i| cut_strings(i, keep, head)).collect())
        }
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let key = if k.len() > keep {
                        format!("{}…", &k[..floor_char_boundary(k, keep)])
                    } else {
                        k.clone()
                    };
                    (key, cut_strings(v, keep, head))
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// The length of `v` as JSON text, without building the text.
pub(crate) fn json_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Writing a Value to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_at_the_head_size_is_logged_whole_and_one_byte_more_is_cut() {
        let whole = "a".repeat(LOG_HEAD_BYTES);
        assert_eq!(bound(&json!({"t": whole})), json!({"t": whole}));
        let long = "a".repeat(LOG_HEAD_BYTES + 1);
        let v = bound(&json!({"t": long}));
        assert_eq!(v["t"]["head"], json!(whole));
        assert_eq!(v["t"]["bytes"], json!(LOG_HEAD_BYTES + 1));
        assert_eq!(v["t"]["sha256"], json!(sha256_hex(long.as_bytes())));
    }

    #[test]
    fn the_digest_is_sha256() {
        // FIPS 180-2, appendix B.1.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_head_is_cut_on_a_character_boundary() {
        // "é" is two bytes: a head of 4096 bytes would split the 2049th.
        let s = format!("a{}", "é".repeat(3000));
        let v = cut(&s, LOG_HEAD_BYTES);
        assert_eq!(v["head"], json!(format!("a{}", "é".repeat(2047))));
        assert_eq!(v["bytes"], json!(6001));
        assert_eq!(
            logged_text(&v),
            Some(format!("a{}", "é".repeat(2047)).as_str())
        );
        assert_eq!(logged_text(&json!("plain")), Some("plain"));
        assert_eq!(logged_text(&json!(5)), None);
    }

    #[test]
    fn strings_are_cut_wherever_they_are_nested() {
        let long = "x".repeat(LOG_HEAD_BYTES * 2);
        let v = bound(&json!({"meta": {"list": [long, "short"]}, "n": 1}));
        assert_eq!(v["meta"]["list"][0]["bytes"], json!(LOG_HEAD_BYTES * 2));
        assert_eq!(v["meta"]["list"][1], json!("short"));
        assert_eq!(v["n"], json!(1));
    }

    #[test]
    fn an_event_with_many_long_strings_is_summarised() {
        let long = "x".repeat(LOG_HEAD_BYTES + 1);
        let many: Vec<String> = vec![long; 20];
        let v = bound(&json!({"callId": "c1", "many": many}));
        assert!(json_len(&v) <= SUMMARY_MAX_BYTES + 64, "{v}");
        assert_eq!(v["callId"], json!("c1"));
        assert!(v["summarised"]["bytes"].as_u64() > Some(20 * 4096));
    }

    #[test]
    fn a_summary_keeps_ids_outcome_and_meta_facts_and_drops_text() {
        let data = json!({
            "turn": 3, "callId": "mcp-7", "name": "write", "isError": false,
            "text": "y".repeat(1000),
            "meta": {"key": "/w/f.txt", "version": "v1:2:3", "path": "/w/f.txt"},
        });
        let s = summarise(&data);
        assert_eq!(
            s,
            json!({
                "turn": 3, "callId": "mcp-7", "name": "write", "isError": false,
                "text": {"bytes": 1000, "sha256": sha256_hex("y".repeat(1000).as_bytes())},
                "meta": {"key": "/w/f.txt", "version": "v1:2:3", "path": "/w/f.txt"},
                "summarised": {"bytes": json_len(&data)},
            })
        );
    }

    #[test]
    fn a_summary_too_large_with_its_nested_fields_keeps_top_level_scalars_and_the_error() {
        let keys: Map<String, Value> = (0..200)
            .map(|i| (format!("k{i}"), json!("v".repeat(200))))
            .collect();
        let data = json!({
            "callId": "c", "isError": true, "meta": keys,
            "error": {"name": "X", "code": "INVALID_ARGS"},
        });
        let s = summarise(&data);
        assert_eq!(
            s,
            json!({
                "callId": "c", "isError": true,
                "error": {"name": "X", "code": "INVALID_ARGS"},
                "summarised": {"bytes": json_len(&data)},
            })
        );
    }

    #[test]
    fn json_len_is_the_length_of_the_text() {
        let v = json!({"a": ["é", 1, null], "b": "q\"uote"});
        assert_eq!(json_len(&v), v.to_string().len());
    }
}
