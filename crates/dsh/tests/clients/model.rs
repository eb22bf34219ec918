//! Scripted model servers: the Anthropic Messages, OpenAI Responses and Gemini APIs as
//! far as Claude Code, Codex and Gemini CLI use them, on 127.0.0.1.
//!
//! A script is a list of tool calls; the model then says "done". Which turn a main-model
//! request is on is read from the request itself (how many tool results it carries), so a
//! client retrying a request (Claude's non-streaming fallback) gets the same turn again.
//! Every request is recorded, and [`ModelServer::results`] gives, per scripted call, the
//! tool result the client put in its next main-model request: what the model saw.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

/// The model API a client speaks.
#[derive(Clone, Copy, Debug)]
pub enum Api {
    /// Anthropic Messages (`POST /v1/messages`, SSE with `event:` lines): Claude Code.
    Anthropic,
    /// OpenAI Responses (`POST /v1/responses`, SSE): Codex.
    Responses,
    /// Gemini (`POST /v1beta/models/M:streamGenerateContent?alt=sse`): Gemini CLI.
    Gemini,
}

/// One scripted turn: call dsh's tool `tool` with `args`.
#[derive(Clone, Debug)]
pub struct Call {
    /// The dsh tool name (`bash`, `read`, …), without the client's prefix.
    pub tool: &'static str,
    /// Its arguments.
    pub args: Value,
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// `POST`, `GET`, …
    pub method: String,
    /// The request target, query included.
    pub path: String,
    /// The JSON body, or `Null` when there was none (or it was not JSON).
    pub body: Value,
}

struct Shared {
    api: Api,
    script: Vec<Call>,
    requests: Mutex<Vec<Recorded>>,
    stop: AtomicBool,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

/// A scripted model API server; stopped (its threads joined) on drop.
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl ModelServer {
    /// Listens on 127.0.0.1 (a free port) and serves `script` in `api`'s dialect.
    pub fn start(api: Api, script: Vec<Call>) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the model server");
        let addr = listener.local_addr().expect("model server address");
        let shared = Arc::new(Shared {
            api,
            script,
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            workers: Mutex::new(Vec::new()),
        });
        let accept = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if shared.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let conn = Arc::clone(&shared);
                    let worker = std::thread::spawn(move || serve(&conn, stream));
                    lock(&shared.workers).push(worker);
                }
            })
        };
        ModelServer {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// Per scripted call, the tool result the client sent in the first main-model request
    /// that carried it (`None`: no request did).
    pub fn results(&self) -> Vec<Option<String>> {
        let api = self.shared.api;
        let seen: Vec<Vec<String>> = self
            .requests()
            .iter()
            .filter_map(|r| main_results(api, r))
            .collect();
        (0..self.shared.script.len())
            .map(|i| seen.iter().find_map(|rs| rs.get(i).cloned()))
            .collect()
    }

    /// A one-line-per-request summary, for failure messages.
    pub fn summary(&self) -> String {
        let api = self.shared.api;
        self.requests()
            .iter()
            .map(|r| match main_results(api, r) {
                Some(rs) => format!("{} {} (main, {} results)\n", r.method, r.path, rs.len()),
                None => format!("{} {}\n", r.method, r.path),
            })
            .collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees `stop`.
        let _ = TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for worker in std::mem::take(&mut *lock(&self.shared.workers)) {
            let _ = worker.join();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One connection: one request, one response, then close (`Connection: close`).
fn serve(shared: &Shared, stream: TcpStream) {
    // Bounded: a client that stalls mid-request cannot keep the server from stopping.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let Ok(Some((method, path, body))) = read_request(&stream) else {
        return;
    };
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let request = Recorded { method, path, body };
    lock(&shared.requests).push(request.clone());
    let reply = answer(shared.api, &shared.script, &request);
    let mut out = &stream;
    let head = format!(
        "HTTP/1.1 {}\r\ncontent-type: {}\r\ncontent-length: {}\r\ncache-control: no-cache\r\n\
         request-id: req_dsh_test\r\nconnection: close\r\n\r\n",
        reply.status,
        reply.content_type,
        reply.body.len()
    );
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(&reply.body);
    let _ = out.flush();
}

/// The method, target and body of one HTTP/1.1 request (`Content-Length` or chunked);
/// `None` when the connection closed first (the accept loop's wake-up).
fn read_request(stream: &TcpStream) -> std::io::Result<Option<(String, String, Vec<u8>)>> {
    let mut r = BufReader::new(stream);
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        let (name, value) = h.split_once(':').unwrap_or((&h, ""));
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.parse().unwrap_or(0),
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size)?;
            let hex = size.split(';').next().unwrap_or("").trim();
            let n = usize::from_str_radix(hex, 16).unwrap_or(0);
            if n == 0 {
                // Trailers, up to the blank line.
                loop {
                    let mut t = String::new();
                    if r.read_line(&mut t)? == 0 || t.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + n, 0);
            r.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
        }
    } else {
        body.resize(length, 0);
        r.read_exact(&mut body)?;
    }
    Ok(Some((method, path, body)))
}

struct Reply {
    status: &'static str,
    content_type: &'static str,
    body: Vec<u8>,
}

fn json_reply(v: &Value) -> Reply {
    Reply {
        status: "200 OK",
        content_type: "application/json",
        body: v.to_string().into_bytes(),
    }
}

fn sse_reply(body: String) -> Reply {
    Reply {
        status: "200 OK",
        content_type: "text/event-stream",
        body: body.into_bytes(),
    }
}

fn not_found() -> Reply {
    Reply {
        status: "404 Not Found",
        content_type: "application/json",
        body: br#"{"error":{"message":"not found"}}"#.to_vec(),
    }
}

/// What a scripted turn asks for: the call to make, or `None` for "done".
fn turn(script: &[Call], done: usize) -> Option<&Call> {
    script.get(done)
}

fn answer(api: Api, script: &[Call], r: &Recorded) -> Reply {
    match api {
        Api::Anthropic => anthropic(script, r),
        Api::Responses => responses(script, r),
        Api::Gemini => gemini(script, r),
    }
}

/// Whether `r` is a main-model request (one offering dsh's tools), and then the tool
/// results it carries, in order.
fn main_results(api: Api, r: &Recorded) -> Option<Vec<String>> {
    if r.method != "POST" {
        return None;
    }
    let target = r.path.split('?').next().unwrap_or("");
    match api {
        Api::Anthropic => {
            let offers_dsh = r.body["tools"].as_array().is_some_and(|ts| {
                ts.iter().any(|t| {
                    t["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("mcp__dsh__"))
                })
            });
            (target == "/v1/messages" && offers_dsh).then(|| anthropic_results(&r.body))
        }
        Api::Responses => (target == "/v1/responses").then(|| responses_results(&r.body)),
        Api::Gemini => {
            let gc = &r.body["generationConfig"];
            let aux = !gc["responseJsonSchema"].is_null()
                || !gc["responseSchema"].is_null()
                || gc["responseMimeType"] == "application/json";
            let generate =
                target.ends_with(":streamGenerateContent") || target.ends_with(":generateContent");
            let tools = r.body["tools"].as_array().is_some_and(|t| !t.is_empty());
            (generate && tools && !aux).then(|| gemini_results(&r.body))
        }
    }
}

/// Text blocks (`[{type: text|input_text, text}]`) joined, or the string itself.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

// --- Anthropic Messages (Claude Code) ---------------------------------------------

fn anthropic_results(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_result" {
                out.push(text_of(&b["content"]));
            }
        }
    }
    out
}

fn anthropic(script: &[Call], r: &Recorded) -> Reply {
    let target = r.path.split('?').next().unwrap_or("");
    if r.method == "GET" && target.starts_with("/v1/models") {
        return json_reply(&json!({
            "data": [{"type": "model", "id": "claude-sonnet-5-5", "display_name": "Claude",
                      "created_at": "2026-01-01T00:00:00Z"}],
            "has_more": false, "first_id": null, "last_id": null}));
    }
    if r.method != "POST" {
        return json_reply(&json!({}));
    }
    if target.ends_with("/count_tokens") {
        // A rough estimate, as a real count would scale with the request.
        let n = r.body["messages"].to_string().len() / 4;
        return json_reply(&json!({"input_tokens": n}));
    }
    if target != "/v1/messages" {
        return not_found();
    }
    // A side request (no dsh tools offered: a title, a summary) gets plain text.
    let done = main_results(Api::Anthropic, r).map(|rs| rs.len());
    let call = done.and_then(|n| turn(script, n));
    let model = r.body["model"].as_str().unwrap_or("claude-sonnet-5-5");
    let usage = json!({"input_tokens": 10, "output_tokens": 1,
                       "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    let (block, stop) = match call {
        Some(c) => (
            json!({"type": "tool_use", "id": format!("toolu_dsh_{}", done.unwrap_or(0)),
                   "name": format!("mcp__dsh__{}", c.tool), "input": c.args}),
            "tool_use",
        ),
        None => (json!({"type": "text", "text": "done"}), "end_turn"),
    };
    if r.body["stream"] != true {
        return json_reply(&json!({
            "id": "msg_dsh", "type": "message", "role": "assistant", "model": model,
            "content": [block], "stop_reason": stop, "stop_sequence": null, "usage": usage}));
    }
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut s = ev(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_dsh", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage}}),
    );
    if block["type"] == "tool_use" {
        let mut start = block.clone();
        start["input"] = json!({});
        s += &ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": start}),
        );
        s += &ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "input_json_delta", "partial_json": block["input"].to_string()}}),
        );
    } else {
        s += &ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": ""}}),
        );
        s += &ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                   "delta": {"type": "text_delta", "text": "done"}}),
        );
    }
    s += &ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    s += &ev(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 5}}),
    );
    s += &ev("message_stop", json!({"type": "message_stop"}));
    sse_reply(s)
}

// --- OpenAI Responses (Codex) -----------------------------------------------------

fn responses_results(body: &Value) -> Vec<String> {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| text_of(&i["output"]))
        .collect()
}

fn responses(script: &[Call], r: &Recorded) -> Reply {
    let target = r.path.split('?').next().unwrap_or("");
    if r.method == "GET" && target.ends_with("/models") {
        return json_reply(&json!({"object": "list", "data": [], "models": []}));
    }
    if r.method != "POST" || target != "/v1/responses" {
        return not_found();
    }
    let done = responses_results(&r.body).len();
    let item = match turn(script, done) {
        Some(c) => json!({"type": "function_call", "id": format!("fc_{done}"),
                          "call_id": format!("call_{done}"), "status": "completed",
                          "namespace": "mcp__dsh", "name": c.tool,
                          "arguments": c.args.to_string()}),
        None => json!({"type": "message", "role": "assistant", "id": "msg_done",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": "done", "annotations": []}]}),
    };
    let id = format!("resp_{done}");
    let usage = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": 15});
    let events = [
        json!({"type": "response.created",
               "response": {"id": id, "object": "response", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.completed",
               "response": {"id": id, "object": "response", "status": "completed",
                            "output": [item], "usage": usage}}),
    ];
    sse_reply(
        events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
            .collect(),
    )
}

// --- Gemini (Gemini CLI) ----------------------------------------------------------

fn gemini_results(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for c in body["contents"].as_array().into_iter().flatten() {
        for p in c["parts"].as_array().into_iter().flatten() {
            let resp = &p["functionResponse"]["response"];
            if p["functionResponse"].is_null() {
                continue;
            }
            // A result is `output`, an error result `error`; both are usually strings.
            out.push(match (&resp["output"], &resp["error"]) {
                (Value::String(s), _) | (_, Value::String(s)) => s.clone(),
                _ => resp.to_string(),
            });
        }
    }
    out
}

/// A JSON answer that fits an auxiliary request's response schema (the router, the
/// next-speaker and loop checks): the first enum value, false, 1, empty, "x".
fn schema_answer(schema: &Value) -> Value {
    let mut ans = serde_json::Map::new();
    for (k, v) in schema["properties"].as_object().into_iter().flatten() {
        let ty = v["type"].as_str().unwrap_or("string").to_ascii_lowercase();
        let value = if let Some(first) = v["enum"].as_array().and_then(|e| e.first()) {
            first.clone()
        } else {
            match ty.as_str() {
                "boolean" => json!(false),
                "number" | "integer" => json!(if k.contains("confidence") { 0 } else { 1 }),
                "array" => json!([]),
                "object" => json!({}),
                _ => json!("x"),
            }
        };
        ans.insert(k.clone(), value);
    }
    if ans.contains_key("next_speaker") {
        ans.insert("next_speaker".into(), json!("user"));
    }
    Value::Object(ans)
}

fn gemini(script: &[Call], r: &Recorded) -> Reply {
    let target = r.path.split('?').next().unwrap_or("");
    if r.method == "GET" {
        return json_reply(&json!({"models": []}));
    }
    if target.ends_with(":countTokens") {
        let n = r.body["contents"].to_string().len() / 4;
        return json_reply(&json!({"totalTokens": n}));
    }
    if target.ends_with(":embedContent") || target.ends_with(":batchEmbedContents") {
        return json_reply(&json!({"embedding": {"values": vec![0.0; 8]}}));
    }
    let stream = target.ends_with(":streamGenerateContent");
    if !stream && !target.ends_with(":generateContent") {
        return not_found();
    }
    let part = match main_results(Api::Gemini, r) {
        Some(rs) => match turn(script, rs.len()) {
            Some(c) => json!({"functionCall": {"name": format!("mcp_dsh_{}", c.tool),
                                               "args": c.args}}),
            None => json!({"text": "done"}),
        },
        None => {
            let gc = &r.body["generationConfig"];
            let schema = if gc["responseJsonSchema"].is_null() {
                &gc["responseSchema"]
            } else {
                &gc["responseJsonSchema"]
            };
            if schema.is_null() {
                json!({"text": "ok"})
            } else {
                json!({"text": schema_answer(schema).to_string()})
            }
        }
    };
    let chunk = json!({
        "candidates": [{"content": {"role": "model", "parts": [part]},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "scripted"});
    if stream {
        sse_reply(format!("data: {chunk}\r\n\r\n"))
    } else {
        json_reply(&chunk)
    }
}
