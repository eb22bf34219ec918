//! The wire protocol between dsh and a far side's `dsh serve --stdio`: length-prefixed
//! JSON frames, requests answered by id, notifications without one.
//!
//! A frame is a 4-byte big-endian length, then that many bytes of one JSON object:
//! - a request: `{"id": N, "method": "…", "params": {…}}`;
//! - its response: `{"id": N, "result": …}` or `{"id": N, "error": {"code": "…",
//!   "message": "…"}}` (`code` one of dsh's error codes);
//! - a notification: `{"method": "…", "params": {…}}`.
//!
//! The first request is always `initialize` with `{"protocol": PROTOCOL, …}` (see
//! [`ServerInfo`](crate::ServerInfo)). A length prefix rather than a line: output and file
//! contents travel in these frames, and a length can be checked against
//! [`MAX_FRAME`] before anything is allocated.

use dsh_core::{ErrorCode, HarnessError};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol's version: both sides must speak the same one.
pub const PROTOCOL: u64 = 1;

/// The largest frame either side reads or writes, in bytes. A longer length prefix is a
/// broken or foreign peer: the channel ends.
pub const MAX_FRAME: usize = 16 << 20;

/// The most JSON values (arrays, objects, and the members and elements in them) one frame
/// may hold. A parsed value costs tens of bytes whatever its text: without this bound a
/// frame of `[0,0,…]` would cost thirty times its size in memory.
pub const MAX_VALUES: usize = 1 << 18;

/// The most characters of text from the peer (an error's message, a version) that reach
/// an error of this side.
const MAX_PEER_TEXT: usize = 2048;

/// The error of a far side that does not speak this protocol.
pub(crate) fn incompatible(why: impl std::fmt::Display) -> HarnessError {
    far_broken(why.to_string())
}

/// [`incompatible`], for [`read_frame_as`].
fn far_broken(why: String) -> HarnessError {
    HarnessError::new(
        ErrorCode::RemoteIncompatible,
        format!(
            "the far side is not a dsh serve --stdio of remote protocol {PROTOCOL} (run the \
             same dsh there: --remote-dsh names it for ssh:// and docker://, a cmd: command \
             must start it itself): {why}"
        ),
    )
}

/// The error of a near side that does not speak this protocol, as the far side says it.
pub(crate) fn near_incompatible(why: impl std::fmt::Display) -> HarnessError {
    near_broken(why.to_string())
}

/// [`near_incompatible`], for [`read_frame_as`].
pub(crate) fn near_broken(why: String) -> HarnessError {
    HarnessError::new(
        ErrorCode::RemoteIncompatible,
        format!(
            "the near side does not speak this dsh's remote protocol {PROTOCOL} (use the same \
             dsh on both sides; dsh serve is started by dsh itself, not by hand): {why}"
        ),
    )
}

/// Text from the peer, made safe for an error: control characters dropped, cut to
/// [`MAX_PEER_TEXT`] characters.
pub(crate) fn peer_text(s: &str) -> String {
    let mut out: String = s
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_PEER_TEXT)
        .collect();
    if s.chars()
        .filter(|c| !c.is_control())
        .nth(MAX_PEER_TEXT)
        .is_some()
    {
        out.push('…');
    }
    out
}

/// How many JSON values `body` holds, counted from its structure outside strings (each
/// `[`, `{` and `,` starts one or more), stopping once past `limit`.
fn values_in(body: &[u8], limit: usize) -> usize {
    let (mut count, mut in_string, mut escaped) = (1usize, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' | b',' => {
                count += 1;
                if count > limit {
                    return count;
                }
            }
            _ => {}
        }
    }
    count
}

/// Reads one frame's JSON object; `None` at a clean end of the stream (between frames).
///
/// # Errors
/// `REMOTE_INCOMPATIBLE` for a frame over [`MAX_FRAME`] or [`MAX_VALUES`], one that is not
/// a JSON object, text where a frame was due (a shell's greeting), or a stream that ends
/// inside a frame; `REMOTE_DISCONNECTED` for a read error.
///
/// # Cancel safety
/// Not cancel safe: dropped mid-frame, the stream is left inside a frame.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Value>, HarnessError> {
    read_frame_as(r, far_broken).await
}

/// [`read_frame`], with `broken` making the error of a peer that broke the protocol (the
/// far side's words or the near side's).
pub(crate) async fn read_frame_as<R: AsyncRead + Unpin>(
    r: &mut R,
    broken: fn(String) -> HarnessError,
) -> Result<Option<Value>, HarnessError> {
    // Printable text where a length was due: something printed instead of framing.
    let printed = |bytes: &[u8]| {
        (!bytes.is_empty()
            && bytes
                .iter()
                .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace()))
        .then(|| {
            broken(format!(
                "it printed text where a frame was due ({:?}): a login shell's greeting, or \
                     a program other than dsh serve",
                String::from_utf8_lossy(bytes)
            ))
        })
    };
    let mut len = [0u8; 4];
    let mut got = 0;
    while got < len.len() {
        match r.read(&mut len[got..]).await {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => {
                return Err(printed(&len[..got])
                    .unwrap_or_else(|| broken("the stream ended inside a frame's length".into())))
            }
            Ok(n) => got += n,
            Err(e) => return Err(disconnected(&e.to_string())),
        }
    }
    let prefix = len;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(printed(&prefix).unwrap_or_else(|| {
            broken(format!(
                "a frame of {len} bytes, over the {MAX_FRAME}-byte limit"
            ))
        }));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            broken("the stream ended inside a frame".into())
        } else {
            disconnected(&e.to_string())
        }
    })?;
    if values_in(&body, MAX_VALUES) > MAX_VALUES {
        return Err(broken(format!(
            "a frame with more than {MAX_VALUES} JSON values"
        )));
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(v @ Value::Object(_)) => Ok(Some(v)),
        Ok(_) => Err(broken("a frame that is not a JSON object".into())),
        Err(e) => Err(broken(format!("a frame that is not JSON ({e})"))),
    }
}

/// Writes `message` as one frame and flushes it.
///
/// # Errors
/// `INVALID_ARGUMENT` for a message over [`MAX_FRAME`] (nothing is written);
/// `REMOTE_DISCONNECTED` when the stream is closed.
///
/// # Cancel safety
/// Not cancel safe: dropped mid-write, the stream is left inside a frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    message: &Value,
) -> Result<(), HarnessError> {
    let frame = encode(message)?;
    write_encoded(w, &frame).await
}

/// `message` as one frame's bytes (length prefix included).
///
/// # Errors
/// `INVALID_ARGUMENT` for a message over [`MAX_FRAME`].
pub fn encode(message: &Value) -> Result<Vec<u8>, HarnessError> {
    let body = serde_json::to_vec(message)
        .map_err(|e| HarnessError::internal("a message could not be encoded").with_source(e))?;
    if body.len() > MAX_FRAME {
        return Err(HarnessError::invalid_argument(format!(
            "a message of {} bytes is over the remote protocol's {MAX_FRAME}-byte frame",
            body.len()
        )));
    }
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Writes an [`encode`]d frame and flushes it.
///
/// # Errors
/// `REMOTE_DISCONNECTED` when the stream is closed.
///
/// # Cancel safety
/// Not cancel safe: dropped mid-write, the stream is left inside a frame.
pub async fn write_encoded<W: AsyncWrite + Unpin>(
    w: &mut W,
    frame: &[u8],
) -> Result<(), HarnessError> {
    w.write_all(frame)
        .await
        .map_err(|e| disconnected(&e.to_string()))?;
    w.flush().await.map_err(|e| disconnected(&e.to_string()))
}

/// The error of a channel that ended: `why`, and what to do.
pub(crate) fn disconnected(why: &str) -> HarnessError {
    HarnessError::new(
        ErrorCode::RemoteDisconnected,
        format!(
            "the connection to the remote world ended ({why}); nothing ran locally in its \
             place. Check the host or container, then call again."
        ),
    )
}

/// A response to request `id`: its result.
pub fn result(id: u64, result: Value) -> Value {
    json!({"id": id, "result": result})
}

/// A response to request `id`: `error`, as a code and a message.
pub fn error(id: u64, error: &HarnessError) -> Value {
    json!({"id": id, "error": {"code": error.code().as_str(), "message": error.message()}})
}

/// The error a response carries, as a [`HarnessError`] with its code (`INTERNAL` for a
/// code this dsh does not know).
pub fn error_of(error: &Value) -> HarnessError {
    let message = peer_text(error["message"].as_str().unwrap_or("no message"));
    match error["code"].as_str().and_then(ErrorCode::from_code) {
        Some(code) => HarnessError::new(code, message),
        None => HarnessError::internal(format!(
            "the far side answered with an unknown error code {}: {message}",
            peer_text(&error["code"].to_string())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_a_clean_end_is_none() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        let m = json!({"id": 1, "method": "ping", "params": {"x": "é\u{0}"}});
        write_frame(&mut a, &m).await.expect("write");
        drop(a);
        assert_eq!(read_frame(&mut b).await.expect("read"), Some(m));
        assert_eq!(read_frame(&mut b).await.expect("end"), None);
    }

    #[tokio::test]
    async fn a_foreign_or_broken_peer_is_incompatible_and_nothing_big_is_allocated() {
        for bytes in [
            // A length past the limit: refused before allocating it.
            vec![0xff, 0xff, 0xff, 0xff],
            // A stream that ends inside the length, or inside the body.
            vec![0, 0],
            vec![0, 0, 0, 9, b'{'],
            // Not an object; not JSON; a greeting where a frame was due.
            [&3u32.to_be_bytes()[..], b"[1]"].concat(),
            [&5u32.to_be_bytes()[..], b"hello"].concat(),
            b"hello there\n".to_vec(),
            // Small, but more values than a frame may hold.
            {
                let body = format!("{{\"a\":[{}0]}}", "0,".repeat(MAX_VALUES));
                [&(body.len() as u32).to_be_bytes()[..], body.as_bytes()].concat()
            },
        ] {
            let mut r: &[u8] = &bytes;
            let e = read_frame(&mut r).await.expect_err("broken");
            assert_eq!(e.code(), ErrorCode::RemoteIncompatible, "{bytes:?}: {e}");
        }
    }

    #[tokio::test]
    async fn commas_and_brackets_inside_strings_are_not_values() {
        let text = format!("{},[{{\\\"", ",".repeat(MAX_VALUES + 10));
        let m = json!({"id": 1, "result": {"content": text}});
        let frame = encode(&m).expect("encode");
        let mut r: &[u8] = &frame;
        assert_eq!(read_frame(&mut r).await.expect("read"), Some(m));
    }

    #[test]
    fn text_from_the_peer_is_cut_and_cleaned() {
        let e = error_of(
            &json!({"code": "FS_NOT_FOUND", "message": format!("a\u{1b}[2Jb{}", "x".repeat(5000))}),
        );
        assert!(
            e.message().starts_with("a[2Jbxxx"),
            "{}",
            &e.message()[..20]
        );
        assert!(e.message().chars().count() <= MAX_PEER_TEXT + 1);
    }

    #[test]
    fn an_error_keeps_its_code_across_the_wire() {
        let e = HarnessError::new(ErrorCode::FsNotFound, "nope");
        let back = error_of(&error(3, &e)["error"]);
        assert_eq!(
            (back.code(), back.message()),
            (ErrorCode::FsNotFound, "nope")
        );
        let unknown = error_of(&json!({"code": "NEW_CODE", "message": "m"}));
        assert_eq!(unknown.code(), ErrorCode::Internal);
    }
}
