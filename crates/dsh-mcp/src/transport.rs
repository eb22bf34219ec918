//! Line-delimited JSON-RPC on a byte stream, with a size cap and an answer for every bad
//! request.
//!
//! rmcp's own stdio framing drops a line longer than its cap, and a line that is not
//! JSON, without a word to the client, which then waits forever. [`LineTransport`]
//! answers instead: a line over [`MAX_MESSAGE_BYTES`] gets `-32600` (with the request's
//! id when it can be read from the line's head, and `MCP_MESSAGE_TOO_LARGE` in the error
//! data) and is skipped without being buffered whole; a line that is not JSON gets `-32700`
//! with a null id; JSON that is not a JSON-RPC message gets `-32600`, except a malformed
//! notification, which JSON-RPC forbids answering, and a malformed response, which reaches
//! the SDK as an error response so that the request it answers fails rather than waits.
//! Nothing but JSON-RPC is written, and every answer is written before end of input ends
//! the session.

use std::sync::Arc;

use rmcp::model::{ErrorData, JsonRpcError, JsonRpcMessage, JsonRpcVersion2_0, RequestId};
use rmcp::service::{RxJsonRpcMessage, ServiceRole, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The largest message read: 16 MiB. Larger data belongs in a file the tools can read.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// JSON-RPC over newline-delimited lines of `R` and `W`: a size cap, and an answer (or an
/// error to the SDK) for every bad line; see [`MAX_MESSAGE_BYTES`].
///
/// `receive` is cancel-safe (the SDK polls it in a `select!`): a line read in part stays
/// in `line` until the next call finishes it.
pub struct LineTransport<R, W> {
    reader: BufReader<R>,
    writer: Arc<Mutex<W>>,
    /// The line being read (empty once it is over the cap: `id` reads it instead).
    line: Vec<u8>,
    /// The bytes of the line being read so far.
    total: usize,
    /// The top-level `"id"` of the line, scanned as it streams past once it is over the
    /// cap (clients put `id` anywhere, the TypeScript SDK last).
    id: IdScanner,
    /// Answers being written (waited for at end of input, so none is lost).
    answers: Vec<tokio::task::JoinHandle<()>>,
    /// Told once when input ends.
    on_end: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send + Sync + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    /// A transport reading requests from `reader` and writing answers to `writer`.
    pub fn new(reader: R, writer: W) -> Self {
        LineTransport {
            reader: BufReader::with_capacity(1 << 16, reader),
            writer: Arc::new(Mutex::new(writer)),
            line: Vec::new(),
            total: 0,
            id: IdScanner::default(),
            answers: Vec::new(),
            on_end: None,
        }
    }

    /// Calls `f` once, as soon as the input ends (EOF or a read error), before the SDK
    /// hears of it: the SDK then waits for calls in flight, which `f` can end (see
    /// [`DshServer::input_ended`](crate::DshServer::input_ended)).
    pub fn on_end_of_input(mut self, f: impl FnOnce() + Send + Sync + 'static) -> Self {
        self.on_end = Some(Box::new(f));
        self
    }

    /// Reads one line into `self.line` (without its newline). `Ok(None)` at end of input;
    /// `Ok(Some(n))` when the line had `n` bytes and more than [`MAX_MESSAGE_BYTES`] (then
    /// `self.line` is empty and `self.id` has scanned it). Cancel-safe: the only await is
    /// `fill_buf`, and what a call consumed is in `self.line`, `self.total` and `self.id`
    /// for the next one.
    async fn read_line(&mut self) -> std::io::Result<Option<Option<usize>>> {
        loop {
            let buf = self.reader.fill_buf().await?;
            if buf.is_empty() {
                let total = std::mem::take(&mut self.total);
                return Ok((total > 0 || !self.line.is_empty()).then(|| oversize(total)));
            }
            let (chunk, done) = match memchr(buf) {
                Some(i) => (&buf[..i], i + 1),
                None => (buf, buf.len()),
            };
            let was_over = self.total > MAX_MESSAGE_BYTES;
            self.total += chunk.len();
            if was_over {
                self.id.feed(chunk);
            } else if self.total > MAX_MESSAGE_BYTES {
                // Over the cap: scan what was kept and what follows, keep nothing.
                self.id.feed(&self.line);
                self.id.feed(chunk);
                self.line = Vec::new();
            } else {
                self.line.extend_from_slice(chunk);
            }
            let found = done > chunk.len();
            self.reader.consume(done);
            if found {
                return Ok(Some(oversize(std::mem::take(&mut self.total))));
            }
        }
    }

    /// Writes `message` as a line, in a task of its own so that a cancelled `receive`
    /// cannot cut it in half.
    fn answer(&mut self, message: Value) {
        let mut bytes = message.to_string().into_bytes();
        bytes.push(b'\n');
        let writer = self.writer.clone();
        self.answers.retain(|h| !h.is_finished());
        self.answers.push(tokio::spawn(async move {
            let mut w = writer.lock().await;
            // A writer that fails means the client is gone; the next read ends the session.
            let _ = w.write_all(&bytes).await;
            let _ = w.flush().await;
        }));
    }

    /// Waits for the answers still being written. Cancel-safe: an answer written is
    /// dropped from the list only once it is done.
    async fn flush_answers(&mut self) {
        while let Some(last) = self.answers.last_mut() {
            let _ = last.await;
            self.answers.pop();
        }
    }
}

fn oversize(total: usize) -> Option<usize> {
    (total > MAX_MESSAGE_BYTES).then_some(total)
}

/// The first newline of `buf` (vectorised: a message may be 16 MiB).
fn memchr(buf: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', buf)
}

/// Finds the top-level `"id"` of a JSON object streamed through [`feed`](Self::feed), in
/// one pass and constant memory, whatever comes before or after it (an id nested in
/// `params` is not it). Only a string or number id is reported.
#[derive(Default)]
struct IdScanner {
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1, where the next string is a key.
    expect_key: bool,
    /// The key being read at depth 1 (its first bytes: enough to tell `id`).
    key: Option<Vec<u8>>,
    /// The last key read at depth 1 was `id`; its value comes after the `:`.
    id_key: bool,
    /// The id's text, while it is read.
    value: Option<Vec<u8>>,
    found: Option<Value>,
}

/// Longer than any id worth echoing: a longer one is not reported.
const MAX_ID_BYTES: usize = 1024;

impl IdScanner {
    fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.found.is_some() {
                return;
            }
            self.step(b);
        }
    }

    fn step(&mut self, b: u8) {
        if let Some(v) = &mut self.value {
            if v.len() >= MAX_ID_BYTES {
                self.value = None;
            } else if !(self.depth == 1 && !self.in_string && matches!(b, b',' | b'}')) {
                v.push(b);
            }
        }
        if self.in_string {
            if let Some(k) = &mut self.key {
                if k.len() < 4 {
                    k.push(b);
                } else {
                    k.push(b'?');
                    k.truncate(4);
                }
            }
            if self.escaped {
                self.escaped = false;
            } else if b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.in_string = false;
                if let Some(k) = self.key.take() {
                    self.id_key = k == b"id\"";
                }
            }
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.expect_key {
                    self.key = Some(Vec::new());
                    self.expect_key = false;
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                if self.depth == 1 && b == b'{' {
                    self.expect_key = true;
                } else if self.value.is_some() && self.depth > 1 {
                    // An object or array is not an id.
                    self.value = None;
                }
            }
            b'}' | b']' => {
                if self.depth == 1 {
                    self.finish_value();
                }
                self.depth = self.depth.saturating_sub(1);
            }
            b':' if self.depth == 1 && self.id_key => {
                self.id_key = false;
                self.value = Some(Vec::new());
            }
            b',' if self.depth == 1 => {
                self.finish_value();
                self.expect_key = true;
            }
            _ => {}
        }
    }

    fn finish_value(&mut self) {
        if let Some(text) = self.value.take() {
            self.found = serde_json::from_slice::<Value>(text.trim_ascii())
                .ok()
                .filter(|v| v.is_string() || v.is_number());
        }
    }

    /// The id found so far; one still being read when the line was cut counts if whole.
    fn id(mut self) -> Option<Value> {
        if self.found.is_none() && self.depth == 1 && !self.in_string {
            self.finish_value();
        }
        self.found
    }
}

/// The top-level id of the JSON text `bytes` (see [`IdScanner`]).
#[cfg(test)]
fn id_of(bytes: &[u8]) -> Option<Value> {
    let mut scanner = IdScanner::default();
    scanner.feed(bytes);
    scanner.id()
}

fn error(id: Value, code: i64, message: String, data: Option<Value>) -> Value {
    let mut e = json!({"code": code, "message": message});
    if let Some(d) = data {
        e["data"] = d;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": e})
}

/// `request` without `params._meta.progressToken` (and without `_meta` once it is empty).
fn without_progress_token(request: &mut Value) {
    let Some(params) = request.get_mut("params").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(meta) = params.get_mut("_meta").and_then(Value::as_object_mut) else {
        return;
    };
    meta.remove("progressToken");
    if meta.is_empty() {
        params.remove("_meta");
    }
}

impl<Role, R, W> Transport<Role> for LineTransport<R, W>
where
    Role: ServiceRole,
    R: AsyncRead + Unpin + Send + Sync + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<Role>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let writer = self.writer.clone();
        let is_request = matches!(item, rmcp::model::JsonRpcMessage::Request(_));
        async move {
            let mut bytes = if is_request {
                // A request of the server's (an elicitation, roots/list) asks for no progress:
                // the SDK gives every request a progress token, which a client may take for
                // a promise of progress notifications that never come.
                let mut v = serde_json::to_value(&item).map_err(std::io::Error::other)?;
                without_progress_token(&mut v);
                serde_json::to_vec(&v).map_err(std::io::Error::other)?
            } else {
                serde_json::to_vec(&item).map_err(std::io::Error::other)?
            };
            bytes.push(b'\n');
            let mut w = writer.lock().await;
            w.write_all(&bytes).await?;
            w.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<Role>> {
        loop {
            let read = self.read_line().await;
            // The line is complete (or input ended): take it, so the next call starts afresh.
            let line = std::mem::take(&mut self.line);
            let oversized = match read {
                Ok(Some(o)) => o,
                Ok(None) | Err(_) => {
                    if let Some(f) = self.on_end.take() {
                        f();
                    }
                    self.flush_answers().await;
                    return None;
                }
            };
            if let Some(total) = oversized {
                let id = std::mem::take(&mut self.id).id().unwrap_or(Value::Null);
                let message = format!(
                    "the message is {total} bytes; dsh mcp reads messages of at most {} MiB: \
                     put large data in a file and pass its path",
                    MAX_MESSAGE_BYTES >> 20
                );
                self.answer(error(
                    id,
                    -32600,
                    message,
                    Some(json!({"code": dsh_core::ErrorCode::McpMessageTooLarge.as_str()})),
                ));
                continue;
            }
            let line = line.strip_suffix(b"\r").unwrap_or(&line);
            let line = line
                .strip_prefix(b"\xEF\xBB\xBF".as_slice())
                .unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<RxJsonRpcMessage<Role>>(line) {
                Ok(message) => return Some(message),
                Err(e) => {
                    let Ok(value) = serde_json::from_slice::<Value>(line) else {
                        self.answer(error(
                            Value::Null,
                            -32700,
                            format!("parse error: {e}"),
                            None,
                        ));
                        continue;
                    };
                    let id = value.get("id").cloned();
                    match id {
                        // A malformed notification is ignored: JSON-RPC 2.0 §4.1 forbids
                        // answering one.
                        None if value.get("method").is_some() => continue,
                        // A malformed response to one of our requests must not be answered
                        // (its id is ours): the request it answers fails instead.
                        Some(id)
                            if value.get("method").is_none()
                                && (value.get("result").is_some()
                                    || value.get("error").is_some()) =>
                        {
                            let Ok(id) = serde_json::from_value::<RequestId>(id) else {
                                continue;
                            };
                            let error =
                                ErrorData::internal_error(format!("malformed response: {e}"), None);
                            return Some(JsonRpcMessage::Error(JsonRpcError {
                                jsonrpc: JsonRpcVersion2_0,
                                id: Some(id),
                                error,
                            }));
                        }
                        id => {
                            let message = format!("invalid request: {e}");
                            self.answer(error(id.unwrap_or(Value::Null), -32600, message, None));
                        }
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writer.lock().await.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_found_at_the_top_level_only() {
        assert_eq!(
            id_of(br#"{"jsonrpc":"2.0","id":7,"method":"x"#),
            Some(json!(7))
        );
        assert_eq!(
            id_of(br#"{"params":{"id":1},"id":"a\"b","#),
            Some(json!("a\"b"))
        );
        assert_eq!(
            id_of(br#"{"method":"tools/call","params":{"id":3,"x":"#),
            None
        );
        assert_eq!(id_of(br#"{ "id" : -12 ,"#), Some(json!(-12)));
        assert_eq!(id_of(br#"{"id":null,"#), None);
        // Last, as the TypeScript SDK writes it, after a value that mentions "id".
        assert_eq!(
            id_of(br#"{"method":"m","params":{"t":"\"id\":9","a":[{"id":2}]},"jsonrpc":"2.0","id":42}"#),
            Some(json!(42))
        );
        assert_eq!(id_of(br#"{"idx":1,"xid":2,"id":"k"}"#), Some(json!("k")));
        assert_eq!(id_of(br#"{"id":{"a":1}}"#), None);
        assert_eq!(id_of(br#"{"id":[1]}"#), None);
    }

    #[test]
    fn the_id_is_found_across_chunks_of_any_size() {
        let text = br#"{"params":{"x":"a\\\"b"},"id" : "q\"z" }"#;
        for size in 1..text.len() {
            let mut scanner = IdScanner::default();
            for chunk in text.chunks(size) {
                scanner.feed(chunk);
            }
            assert_eq!(scanner.id(), Some(json!("q\"z")), "chunks of {size}");
        }
    }

    fn transport(
        input: &'static [u8],
    ) -> (
        LineTransport<&'static [u8], tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
    ) {
        let (w, r) = tokio::io::duplex(1 << 20);
        (LineTransport::new(input, w), r)
    }

    async fn answers(mut out: tokio::io::DuplexStream) -> Vec<Value> {
        let mut s = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut out, &mut s)
            .await
            .expect("read");
        s.lines()
            .map(|l| serde_json::from_str(l).expect("json"))
            .collect()
    }

    #[tokio::test]
    async fn every_bad_line_is_answered_and_good_ones_pass() {
        let input: &'static [u8] = Box::leak(
            format!(
                "{{not json\n\n{{\"jsonrpc\":\"2.0\",\"id\":4}}\n\
                 {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/who-knows\"}}\n\
                 {{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{{\"name\":\"{big}\"}}}}\n\
                 {{\"method\":\"tools/call\",\"params\":{{\"name\":\"{big}\"}},\"jsonrpc\":\"2.0\",\"id\":10}}\n\
                 {{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}}\r\n",
                big = "x".repeat(MAX_MESSAGE_BYTES)
            )
            .into_bytes()
            .into_boxed_slice(),
        );
        let (mut t, out) = transport(input);
        // Notifications, known or not, are the SDK's to handle (it ignores unknown ones).
        for want in ["notifications/who-knows", "ping"] {
            let got = Transport::<rmcp::RoleServer>::receive(&mut t)
                .await
                .expect("a message");
            let got = serde_json::to_string(&got).expect("json");
            assert!(got.contains(want), "{got}");
        }
        assert!(Transport::<rmcp::RoleServer>::receive(&mut t)
            .await
            .is_none());
        drop(t);
        let a = answers(out).await;
        assert_eq!(a.len(), 4, "{a:?}");
        assert_eq!(
            (a[0]["id"].clone(), a[0]["error"]["code"].clone()),
            (Value::Null, json!(-32700))
        );
        assert_eq!(
            (a[1]["id"].clone(), a[1]["error"]["code"].clone()),
            (json!(4), json!(-32600))
        );
        assert_eq!(
            (a[2]["id"].clone(), a[2]["error"]["code"].clone()),
            (json!(9), json!(-32600))
        );
        assert_eq!(a[2]["error"]["data"]["code"], "MCP_MESSAGE_TOO_LARGE");
        // The id after 16 MiB of params (the TypeScript SDK's order) is still found.
        assert_eq!(
            (a[3]["id"].clone(), a[3]["error"]["code"].clone()),
            (json!(10), json!(-32600))
        );
    }

    #[tokio::test]
    async fn a_receive_cancelled_mid_line_loses_nothing() {
        let (mut input, r) = tokio::io::duplex(1 << 16);
        let (w, _out) = tokio::io::duplex(1 << 16);
        let mut t = LineTransport::new(r, w);
        input
            .write_all(br#"{"jsonrpc":"2.0","id":1,"#)
            .await
            .expect("write");
        let wait = std::time::Duration::from_millis(50);
        let cut = tokio::time::timeout(wait, Transport::<rmcp::RoleServer>::receive(&mut t)).await;
        assert!(cut.is_err(), "half a line is not a message");
        input
            .write_all(b"\"method\":\"ping\"}\n")
            .await
            .expect("write");
        let whole = std::time::Duration::from_secs(5);
        let got = tokio::time::timeout(whole, Transport::<rmcp::RoleServer>::receive(&mut t)).await;
        let got = got.expect("the line was not lost").expect("the ping");
        let got = serde_json::to_string(&got).expect("json");
        assert!(got.contains("ping") && got.contains("\"id\":1"), "{got}");
    }

    #[tokio::test]
    async fn a_malformed_response_fails_its_request_and_is_not_answered() {
        let (mut t, out) =
            transport(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":\"E1\"}}\n");
        let got = Transport::<rmcp::RoleServer>::receive(&mut t)
            .await
            .expect("an error");
        match got {
            JsonRpcMessage::Error(e) => assert_eq!(e.id, Some(RequestId::Number(3))),
            other => panic!("{other:?}"),
        }
        assert!(Transport::<rmcp::RoleServer>::receive(&mut t)
            .await
            .is_none());
        drop(t);
        assert!(answers(out).await.is_empty(), "nothing is written back");
    }

    #[tokio::test]
    async fn random_bytes_never_panic_and_every_line_is_consumed() {
        // A fixed pseudo-random stream of lines drawn from JSON-ish bytes and junk.
        let alphabet = b"{}[]\":,\\ idjsonrpcmethod0123456789-+.eE\xff\xc3\r\t";
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut input = Vec::new();
        for _ in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 80) as usize;
            for k in 0..len {
                let r = state.rotate_left(k as u32 * 7);
                input.push(alphabet[(r % alphabet.len() as u64) as usize]);
            }
            input.push(b'\n');
        }
        let input: &'static [u8] = Box::leak(input.into_boxed_slice());
        let (mut t, out) = transport(input);
        let reader = tokio::spawn(answers(out));
        while Transport::<rmcp::RoleServer>::receive(&mut t)
            .await
            .is_some()
        {}
        drop(t);
        let written = reader.await.expect("answers");
        assert!(
            written.iter().all(|a| a["jsonrpc"] == "2.0"),
            "only JSON-RPC is written"
        );
    }
}
