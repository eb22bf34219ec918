//! A string as the session log keeps it.

use serde::de::{self, Deserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A string field of a logged event: whole; or, when it was too long to log whole, its
/// head, its length and its SHA-256 (`{"head": …, "bytes": n, "sha256": "…"}`; a summary
/// past the log's cap keeps no head); or nothing, when a summary too large kept only its
/// numbers and flags. Producers give whole strings; the log decides what to keep, so a
/// reader must expect all three.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Logged {
    /// The string as it was given.
    Whole(String),
    /// What the log kept of a long string.
    Cut {
        /// Its first bytes, cut on a character boundary (empty when none were kept).
        head: String,
        /// Its length in bytes.
        bytes: u64,
        /// The lowercase hex SHA-256 of all of it.
        sha256: String,
    },
    /// Nothing: the field was dropped from a summary (see dsh-store's `log_bounds`).
    #[default]
    Dropped,
}

impl Logged {
    /// The text: the whole string, or the head of a cut one.
    pub fn text(&self) -> &str {
        match self {
            Logged::Whole(s) => s,
            Logged::Cut { head, .. } => head,
            Logged::Dropped => "",
        }
    }

    /// The whole string, if the log kept all of it.
    pub fn whole(&self) -> Option<&str> {
        match self {
            Logged::Whole(s) => Some(s),
            Logged::Cut { .. } | Logged::Dropped => None,
        }
    }

    /// Whether the log kept nothing of it (a serialiser skips such a field).
    pub fn is_dropped(&self) -> bool {
        matches!(self, Logged::Dropped)
    }
}

impl From<String> for Logged {
    fn from(s: String) -> Self {
        Logged::Whole(s)
    }
}

impl From<&str> for Logged {
    fn from(s: &str) -> Self {
        Logged::Whole(s.to_owned())
    }
}

impl Serialize for Logged {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Logged::Whole(s) => serializer.serialize_str(s),
            Logged::Cut {
                head,
                bytes,
                sha256,
            } => {
                let mut m = serializer.serialize_map(None)?;
                if !head.is_empty() {
                    m.serialize_entry("head", head)?;
                }
                m.serialize_entry("bytes", bytes)?;
                m.serialize_entry("sha256", sha256)?;
                m.end()
            }
            Logged::Dropped => serializer.serialize_none(),
        }
    }
}

impl<'de> Deserialize<'de> for Logged {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(s) => Ok(Logged::Whole(s)),
            Value::Null => Ok(Logged::Dropped),
            Value::Object(m) => {
                let bytes = m.get("bytes").and_then(Value::as_u64);
                let sha256 = m.get("sha256").and_then(Value::as_str);
                let head = m.get("head").map(Value::as_str);
                match (bytes, sha256, head) {
                    (Some(bytes), Some(sha256), None | Some(Some(_))) => Ok(Logged::Cut {
                        head: head.flatten().unwrap_or("").to_owned(),
                        bytes,
                        sha256: sha256.to_owned(),
                    }),
                    _ => Err(de::Error::custom(
                        "a cut string has a \"bytes\" count, a \"sha256\" and at most a \"head\"",
                    )),
                }
            }
            other => Err(de::Error::custom(format!(
                "expected a string or a cut string, found {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_and_cut_strings_read_back_as_written() {
        for v in [
            json!("plain"),
            json!({"head": "ab", "bytes": 5000, "sha256": "00"}),
            json!({"bytes": 5000, "sha256": "00"}),
        ] {
            let l: Logged = serde_json::from_value(v.clone()).expect("reads");
            assert_eq!(serde_json::to_value(&l).expect("writes"), v);
        }
        let cut: Logged =
            serde_json::from_value(json!({"bytes": 9, "sha256": "00"})).expect("a cut");
        assert_eq!((cut.text(), cut.whole()), ("", None));
        assert_eq!(Logged::from("x").whole(), Some("x"));
    }

    #[test]
    fn anything_else_is_refused() {
        for v in [
            json!(5),
            json!({"head": "a"}),
            json!({"bytes": 1, "sha256": 2}),
        ] {
            assert!(serde_json::from_value::<Logged>(v.clone()).is_err(), "{v}");
        }
    }
}
