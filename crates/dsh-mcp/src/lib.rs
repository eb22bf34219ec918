//! dsh over MCP: every tool of a [`World`](dsh_tools::World) served to any agent, one
//! session per connection, on the official Rust SDK (`rmcp`, pinned exactly).
//!
//! [`DshServer`] answers `tools/list` with each tool's name, description, JSON schema and
//! honest annotations (read-only, destructive, idempotent, open-world hints), and
//! `tools/call` by running the call through the World's pipeline in the connection's
//! session: the result's text is a text block, an image (`read_image`) an image block; an
//! error result is `isError` with its text and `{name, code}` in the structured content. A
//! call to an unknown tool is a JSON-RPC error. A client's `notifications/cancelled`
//! cancels the call, which kills its processes. A client that sent a progress token gets
//! a progress notification every second while a call runs.
//!
//! Approvals (an escalation, a policy's `ask`) are asked of the client's user by
//! elicitation ([`elicitation`] says how, for old and new protocol versions); a client
//! without elicitation gets `unavailable` and the call fails closed, saying so.
//!
//! A call that hits a bug in dsh (a panic) gets an `INTERNAL` error result saying so; the
//! server, the other calls and their processes carry on. Every string argument has a size
//! bound (`dsh_tools::schema::bounds`), and the session log keeps a head, the length and a digest
//! of large values (`dsh_store::log_bounds`).
//!
//! [`LineTransport`] frames the protocol on stdio: every bad request gets an answer, a
//! message over 16 MiB a JSON-RPC error instead of silence. Calls run concurrently up to
//! what the open-file limit allows, and queue beyond it. When the connection ends,
//! [`DshServer::close`] cancels and awaits every call. Nothing but protocol goes to
//! stdout; diagnostics go to stderr.
//!
//! `dsh mcp` wires it to stdin and stdout; one exchange (see docs/mcp.md for a whole
//! session by hand):
//!
//! ```text
//! -> {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo hi","description":"greet"}}}
//! <- {"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi\n"}],"structuredContent":{"text":"hi\n","exitCode":0,…},"isError":false}}
//! ```
//!
//! # Guarantees
//! - Every request gets one answer, a bad one included; a message over 16 MiB is a
//!   JSON-RPC error, never a silent drop or an unbounded buffer.
//! - When the connection ends (EOF, a broken pipe, a signal), every call is cancelled
//!   and awaited, its processes killed, its jobs and terminals ended.
//! - A model sees a result's text whichever part of it a client shows: the text block,
//!   or the structured content, which carries the same text.
//! - An approval is never granted without a person: no elicitation, no approval.
//!
//! # Limits
//! One session per connection; stdio only (no HTTP transport).
//!
//! # Errors
//! Tool errors are results (`isError`, with `{name, code}`: docs/errors.md); protocol
//! errors are JSON-RPC errors: an unknown tool, malformed params, `MCP_MESSAGE_TOO_LARGE`
//! beyond the frame bound, `MCP_CLOSING` once the connection is ending.

#![forbid(unsafe_code)]

pub mod elicitation;
mod notices;
pub mod tasks;
mod transport;
pub mod workspace;

pub use elicitation::ElicitingAnswerer;
pub use transport::{LineTransport, MAX_MESSAGE_BYTES};
pub use workspace::{Opened, Opener, Workspace};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dsh_approval::ApprovalOutcome;
use dsh_core::{CallId, CancelToken, ErrorCode, HarnessError};
use dsh_tools::{ToolCall, ToolResult};
use elicitation::{Ask, Desk, Flight};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ClientResult, ContentBlock, CustomRequest, CustomResult, Implementation, InputRequest,
    InputRequests, InputRequiredResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{PeerRequestOptions, RequestContext, ServiceError};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};

/// The MCP server of one connection. See the [crate docs](crate).
#[derive(Clone)]
pub struct DshServer {
    workspace: Workspace,
    opener: Opener,
    opened: Arc<tokio::sync::OnceCell<Opened>>,
    desk: Arc<Desk>,
    calls: Arc<AtomicU64>,
    /// Calls that may run at once; more wait their turn.
    slots: Arc<tokio::sync::Semaphore>,
    /// The same for the job tools, which open no descriptors: a `job_output` that waits
    /// for a job must not keep other calls from running.
    job_slots: Arc<tokio::sync::Semaphore>,
    /// The same for the searches (`grep`, `glob`): each takes a thread per core and a
    /// lazy DFA per thread, so a few at once bound the memory any set of patterns takes.
    search_slots: Arc<tokio::sync::Semaphore>,
    log_level: Arc<notices::LogLevel>,
    /// Job ends the model has not seen, for the next tool result.
    inbox: Arc<notices::Inbox>,
    /// The connection's MCP tasks.
    tasks: rmcp::task_manager::TaskManager,
    task_ids: Arc<tasks::TaskIds>,
    /// How long a `bash` call runs before it becomes a task (clients that declared tasks).
    task_after: Duration,
    /// The server instructions: what the model is told of its sandbox.
    instructions: Arc<str>,
}

impl DshServer {
    /// A server that, at the connection's first tool request, settles its [`Workspace`]
    /// and opens its World and session there with `opener` (the session's turn must be
    /// open for approvals to be asked). The World gets an [`ElicitingAnswerer`], so
    /// `opener` must make a World for this connection alone.
    pub fn new(workspace: Workspace, opener: Opener) -> DshServer {
        DshServer {
            workspace,
            opener,
            opened: Arc::new(tokio::sync::OnceCell::new()),
            desk: Arc::new(Desk::default()),
            calls: Arc::new(AtomicU64::new(1)),
            slots: Arc::new(tokio::sync::Semaphore::new(call_slots())),
            job_slots: Arc::new(tokio::sync::Semaphore::new(JOB_CALL_SLOTS)),
            search_slots: Arc::new(tokio::sync::Semaphore::new(SEARCH_CALL_SLOTS)),
            log_level: Arc::default(),
            inbox: Arc::default(),
            tasks: rmcp::task_manager::TaskManager::new(),
            task_ids: Arc::default(),
            task_after: tasks::TASK_AFTER,
            instructions: Arc::from(DEFAULT_INSTRUCTIONS),
        }
    }

    /// Sets the server instructions clients show the model (the session's sandbox, as
    /// [`dsh_tools::PolicyService::brief`] words it). Default: a generic paragraph.
    pub fn with_instructions(mut self, instructions: String) -> DshServer {
        self.instructions = Arc::from(instructions);
        self
    }

    /// Makes a `bash` call still running after `after` a task, for a client that declared
    /// the tasks extension. Default: [`tasks::TASK_AFTER`].
    pub fn with_task_after(mut self, after: Duration) -> DshServer {
        self.task_after = after;
        self
    }

    /// The connection's World and session, once a tool request has opened them.
    pub fn opened(&self) -> Option<Opened> {
        self.opened.get().cloned()
    }

    /// Ends the connection's calls: a call parked for an approval gets `cancelled`, a
    /// running one is cancelled (its processes killed); waits up to 10 s for them to be
    /// logged. Call it when the connection is over, before closing the session.
    ///
    /// # Cancel safety
    /// Once polled, no new call starts and every call is cancelled. Dropped while it
    /// waits, the calls may not be logged yet and the MCP tasks are not shut down: call it
    /// again to finish.
    pub async fn close(&self) {
        self.slots.close();
        self.job_slots.close();
        self.search_slots.close();
        self.desk.close(CLOSE_LIMIT).await;
        self.tasks.shutdown();
    }

    /// The client's input ended: no new call starts, every call is cancelled, and every
    /// process tree the connection started is killed at once (no grace: nobody is left to
    /// read what a graceful end would print), so the MCP layer's own wait for in-flight
    /// calls ends as soon as they are logged. Returns at once; hand it to
    /// [`LineTransport::on_end_of_input`].
    pub fn input_ended(&self) {
        self.slots.close();
        self.job_slots.close();
        self.search_slots.close();
        self.desk.cancel_all();
        if let Some((world, session)) = self.opened() {
            let terminals = world.clone();
            let jobs = world.clone();
            // Background jobs die with the rest (kill_all); their records settle and go.
            tokio::spawn(async move { jobs.end_jobs(Some(session.id())).await });
            tokio::spawn(async move { world.subprocess().kill_all().await });
            // Terminals get the hangup a vanished terminal gives, and their trees are
            // killed after the grace.
            tokio::spawn(async move { terminals.end_terminals().await });
        }
    }

    async fn open(&self, context: &RequestContext<RoleServer>) -> Result<&Opened, McpError> {
        self.opened
            .get_or_try_init(|| async {
                let dir = self.workspace.choose_root(context).await;
                let (world, session) = (self.opener)(dir).await?;
                // Only a client that declared elicitation can put a question to its user;
                // elsewhere no answerer is installed, so nothing offers the model an
                // escalation and the denials say how the user can widen the session.
                let can_elicit = context
                    .client_capabilities()
                    .is_some_and(|c| c.elicitation.is_some());
                if can_elicit {
                    let answerer = ElicitingAnswerer::new(self.desk.clone());
                    world.approval().add_answerer(Arc::new(answerer));
                }
                notices::forward(
                    &world,
                    &session,
                    context.peer.clone(),
                    self.log_level.clone(),
                    self.inbox.clone(),
                );
                notices::forward_unsettled(&world, context.peer.clone(), self.log_level.clone());
                Ok((world, session))
            })
            .await
            .map_err(|e: HarnessError| {
                McpError::internal_error(e.to_string(), Some(json!({"code": e.code().as_str()})))
            })
    }
}

/// The instructions of a server nobody described the sandbox to.
const DEFAULT_INSTRUCTIONS: &str = "dsh runs your commands and file operations in a sandbox \
    the kernel enforces. Check the `[exit code: N]` marker of every bash result. A sandbox \
    denial shows as `[sandbox: file access denied under <mode> mode]`; do not work around it.";

/// How many job tool calls (`job_output`, `job_list`, `job_kill`) may run at once, apart
/// from the other calls: each is a task and a little memory, no descriptor.
const JOB_CALL_SLOTS: usize = 256;

/// How many searches (`grep`, `glob`) of one connection run at once; more wait their turn.
const SEARCH_CALL_SLOTS: usize = 2;

impl DshServer {
    /// The run slots a call of `tool` takes.
    fn slots_for(&self, tool: &str) -> Arc<tokio::sync::Semaphore> {
        if matches!(tool, "job_output" | "job_list" | "job_kill") {
            self.job_slots.clone()
        } else if matches!(tool, "grep" | "glob") {
            self.search_slots.clone()
        } else {
            self.slots.clone()
        }
    }
}

/// How long [`DshServer::close`] waits for the calls it cancels.
const CLOSE_LIMIT: Duration = Duration::from_secs(10);

/// How many calls may run at once: what the open-file limit allows at about 16
/// descriptors a call (pipes, a reaper, spill files), between 4 and 64. Beyond it calls
/// queue rather than fail with "too many open files".
fn call_slots() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1024);
    usize::try_from(soft.saturating_sub(64) / 16).map_or(64, |n| n.clamp(4, 64))
}

/// A fingerprint of a call's arguments (a retry must repeat them): the first 8 bytes of
/// their SHA-256, which a client cannot steer to match other arguments (SipHash with
/// fixed keys, `DefaultHasher::new`, it could) and which costs less on a 16 MiB message.
fn hash(arguments: &Value) -> u64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(arguments.to_string().as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

/// A tool's hints as MCP annotations.
fn annotations(hints: dsh_tools::ToolHints) -> ToolAnnotations {
    let mut a = ToolAnnotations::new();
    a.read_only_hint = Some(hints.read_only);
    a.destructive_hint = Some(hints.destructive);
    a.idempotent_hint = Some(hints.idempotent);
    a.open_world_hint = Some(hints.open_world);
    a
}

/// Standard base64 (with padding) of `data`.
fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

impl ServerHandler for DshServer {
    // Logging carries the job notices (see `notices`); rmcp marks it deprecated.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_logging()
                .enable_tasks()
                .build(),
        );
        config.server_info = Implementation::new("dsh", env!("CARGO_PKG_VERSION"));
        config.instructions = Some(self.instructions.to_string());
        config
    }

    /// `tasks/get`: a task of this connection, with the call's result once it ended.
    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        self.tasks
            .get_task(&request.task_id)
            .map(rmcp::model::GetTaskResult::new)
    }

    /// `tasks/cancel`: cancels the call (its process tree is killed); the task then
    /// settles `cancelled`.
    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id)
    }

    /// `logging/setLevel`: job notices (`info`) go out only at `info` or below.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.log_level.set(request.level);
        Ok(())
    }

    /// A known method whose params the SDK could not read arrives here: that is
    /// `-32602`, not "method not found".
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let known = ["tools/call", "tools/list", "initialize", "ping"];
        if known.contains(&request.method.as_str()) {
            return Err(McpError::invalid_params(
                format!(
                    "invalid params for {}: check the request against the MCP schema \
                     (tools/call needs a string `name` and an object `arguments`)",
                    request.method
                ),
                None,
            ));
        }
        Err(McpError::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            format!("unknown method \"{}\"", request.method),
            None,
        ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let (world, _) = self.open(&context).await?;
        let tools = world
            .schemas()
            .into_iter()
            .map(|(name, description, schema)| {
                let schema = match schema {
                    Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                let Some(tool) = world.tool(&name) else {
                    return Tool::new(name, description, Arc::new(schema));
                };
                let listed = Tool::new(name, description, Arc::new(schema))
                    .with_title(tool.title())
                    .with_annotations(annotations(tool.hints()));
                if !tool.is_structured() {
                    return listed;
                }
                let output = match dsh_tools::structured_schema(&tool.output_schema()) {
                    Value::Object(map) => map,
                    _ => serde_json::Map::new(),
                };
                listed.with_raw_output_schema(Arc::new(output))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let (world, session) = self.open(&context).await?;
        if world.tool(&name).is_none() {
            return Err(McpError::invalid_params(
                format!("unknown tool \"{name}\""),
                Some(json!({"code": ErrorCode::UnknownTool.as_str()})),
            ));
        }
        // Parsed once, by the transport: the tool gets this object as it is.
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let flight = match &request.request_state {
            Some(state) => {
                // A retry repeats the arguments, or leaves them out.
                let repeated = arguments
                    .as_object()
                    .is_some_and(|a| !a.is_empty())
                    .then(|| hash(&arguments));
                let Some((flight, reply)) = self.desk.resume(state, &name, repeated) else {
                    return Err(McpError::invalid_params(
                        "this requestState names no waiting call of this tool with these \
                         arguments (it was answered, expired, or belongs to another \
                         connection); call the tool again",
                        Some(json!({"code": ErrorCode::McpRequestStateUnknown.as_str()})),
                    ));
                };
                let response = request
                    .input_responses
                    .as_ref()
                    .and_then(|r| r.get(elicitation::INPUT_KEY));
                let mut flight = flight;
                // The call runs again: it takes a run slot back first.
                flight.slot = self.slots_for(&name).acquire_owned().await.ok();
                let _ = reply.send(elicitation::outcome_of_response(response));
                flight
            }
            None => {
                let slot = tokio::select! {
                    biased;
                    () = context.ct.cancelled() => None,
                    slot = self.slots_for(&name).acquire_owned() => slot.ok(),
                };
                let Some(slot) = slot else {
                    return Err(McpError::internal_error(
                        "the call was cancelled before it started",
                        Some(json!({"code": ErrorCode::AbortedBeforeDispatch.as_str()})),
                    ));
                };
                let call_id = format!("mcp-{}", self.calls.fetch_add(1, Ordering::Relaxed));
                let cancel = CancelToken::new();
                let Some((asks, running)) = self.desk.route(&call_id, &cancel) else {
                    return Err(McpError::internal_error(
                        "the connection is closing; no new calls",
                        Some(json!({"code": ErrorCode::McpClosing.as_str()})),
                    ));
                };
                let fingerprint = hash(&arguments);
                let call = ToolCall {
                    call_id: CallId::new(call_id.clone()),
                    name: name.clone(),
                    arguments,
                };
                let (world, session, token) = (world.clone(), session.clone(), cancel.clone());
                let task = tokio::spawn(async move {
                    let result = world.call(Some(&session), call, token).await;
                    drop(running);
                    result
                });
                Flight {
                    call_id,
                    tool: name,
                    arguments: fingerprint,
                    task,
                    asks,
                    cancel,
                    slot: Some(slot),
                }
            }
        };
        self.drive(flight, &context).await
    }
}

/// How a leg of a call ends.
enum Leg {
    Done(Result<ToolResult, tokio::task::JoinError>),
    Park(Ask),
    /// It ran past the task threshold: it goes on as a task.
    Task,
}

impl DshServer {
    /// Runs `flight` until it ends or asks a question this leg cannot answer in place.
    async fn drive(
        &self,
        mut flight: Flight,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let watch = {
            let (ct, cancel) = (context.ct.clone(), flight.cancel.clone());
            tokio::spawn(async move {
                ct.cancelled().await;
                cancel.cancel(dsh_core::CancelReason::ClientCancelled);
            })
        };
        let progress = context.meta.get_progress_token().map(|token| {
            let peer = context.peer.clone();
            tokio::spawn(async move {
                let mut tick = 0u32;
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    tick += 1;
                    let mut p = ProgressNotificationParam::new(token.clone(), f64::from(tick));
                    p.message = Some(format!("running for {tick} s"));
                    if peer.notify_progress(p).await.is_err() {
                        return;
                    }
                }
            })
        });
        let as_task = tasks::eligible(&flight.tool, context) && self.task_ids.has_room(&self.tasks);
        let threshold = tokio::time::sleep(self.task_after);
        tokio::pin!(threshold);
        let leg = loop {
            tokio::select! {
                // A finished call wins over a question it left behind.
                biased;
                done = &mut flight.task => break Leg::Done(done),
                () = &mut threshold, if as_task => break Leg::Task,
                Some(ask) = flight.asks.recv() => {
                    // The call was cancelled, or stopped waiting: nobody to ask for.
                    if ask.reply.is_closed() || context.ct.is_cancelled() {
                        let _ = ask.reply.send(ApprovalOutcome::Cancelled);
                        continue;
                    }
                    let can_elicit = context.client_capabilities().is_some_and(|c| c.elicitation.is_some());
                    let modern = context
                        .protocol_version()
                        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
                    if !can_elicit {
                        let _ = ask.reply.send(ApprovalOutcome::Unavailable);
                    } else if modern {
                        break Leg::Park(ask);
                    } else {
                        // A call cancelled meanwhile (its client's input ended) stops
                        // waiting for the answer.
                        let answer = tokio::select! {
                            a = elicit(context, &ask) => a,
                            () = flight.cancel.cancelled() => ApprovalOutcome::Cancelled,
                        };
                        let _ = ask.reply.send(answer);
                    }
                }
            }
        };
        watch.abort();
        if let Some(p) = progress {
            // Waited for, not only told: a notification it is sending on another thread
            // must be out before the result, or a client reads progress for a token it has
            // already closed.
            p.abort();
            let _ = p.await;
        }
        match leg {
            Leg::Park(ask) => {
                let mut requests = InputRequests::new();
                requests.insert(
                    elicitation::INPUT_KEY.to_owned(),
                    InputRequest::Elicitation(elicitation::request(&ask.question)),
                );
                let state = self.desk.park(flight, ask.reply);
                Ok(InputRequiredResult::new(Some(requests), Some(state)).into())
            }
            Leg::Done(done) => {
                // A cancelled request's answer is never sent (rmcp drops it): its notices
                // wait for the next result.
                let (mut notices, mut structured) = (Vec::new(), true);
                if let Some((world, session)) = self.opened() {
                    structured = world.tool(&flight.tool).is_none_or(|t| t.is_structured());
                    if let Some(jobs) = world.jobs().filter(|_| !context.ct.is_cancelled()) {
                        notices = self.inbox.take(jobs, &world.owner(Some(session.id())));
                    }
                }
                Ok(finish(&self.desk, &flight, done, &notices, structured).into())
            }
            Leg::Task => {
                let desk = self.desk.clone();
                let task = tasks::spawn(
                    &self.tasks,
                    &self.task_ids,
                    self.desk.clone(),
                    flight,
                    // Only `bash` becomes a task, and its results are structured.
                    move |flight, done| finish(&desk, &flight, done, &[], true),
                );
                Ok(CallToolResponse::Task(task))
            }
        }
    }
}

/// The MCP result of a call that ended, carrying `notices` after its text; its route is
/// forgotten.
fn finish(
    desk: &Desk,
    flight: &Flight,
    done: Result<ToolResult, tokio::task::JoinError>,
    notices: &[String],
    structured: bool,
) -> CallToolResult {
    desk.unroute(&flight.call_id);
    // The pipeline turns a panic in a tool body into its result; this catches one
    // anywhere else in the call's task (a hook, the log).
    let result = done.unwrap_or_else(|e| {
        ToolResult::from_error(&match e.try_into_panic() {
            Ok(payload) => HarnessError::panicked("the tool call", payload.as_ref()),
            Err(e) => HarnessError::internal(format!(
                "the tool call's task was cancelled ({e}); the server is shutting down"
            )),
        })
    });
    to_mcp(&result, notices, structured)
}

/// Asks the client (protocol before 2026-07-28) with an `elicitation/create` request. A
/// client that does not answer within [`elicitation::PARK_LIMIT`], or a call cancelled
/// meanwhile, withdraws the request (`notifications/cancelled`) and is `cancelled`.
async fn elicit(context: &RequestContext<RoleServer>, ask: &Ask) -> ApprovalOutcome {
    let request = elicitation::server_request(&ask.question, context.protocol_version().as_ref());
    let options = PeerRequestOptions::with_timeout(elicitation::PARK_LIMIT);
    let handle = match context
        .peer
        .send_request_with_option(request, options)
        .await
    {
        Ok(h) => h,
        Err(_) => return ApprovalOutcome::Unavailable,
    };
    let (peer, id) = (handle.peer.clone(), handle.id.clone());
    tokio::select! {
        r = handle.await_response() => match r {
            Ok(ClientResult::ElicitResult(r)) => elicitation::outcome(&r),
            // The answer to the request sent without `mode` (before 2025-11-25).
            Ok(ClientResult::CustomResult(r)) => elicitation::outcome_of_response(Some(&r.0)),
            Err(ServiceError::Timeout { .. }) => ApprovalOutcome::Expired,
            // No answer, or not an answer to this: nobody approved.
            _ => ApprovalOutcome::Unavailable,
        },
        () = context.ct.cancelled() => {
            let cancel =
                CancelledNotificationParam::new(Some(id), Some("the tool call was cancelled".into()));
            let _ = peer.notify_cancelled(cancel).await;
            ApprovalOutcome::Cancelled
        }
    }
}

/// A tool result as MCP content: the text, then each notice, then the image if any; and
/// the [structured form](dsh_tools::structured) with the same words, whichever part a
/// client passes to its model. A tool that is not `structured` (its content holds an
/// image, which such a client would drop) gets the structured form on an error only.
fn to_mcp(result: &ToolResult, notices: &[String], structured: bool) -> CallToolResult {
    let mut content = vec![ContentBlock::text(result.text.clone())];
    content.extend(notices.iter().map(|n| ContentBlock::text(n.clone())));
    if let Some(img) = &result.image {
        content.push(ContentBlock::image(base64(&img.data), img.mime_type));
    }
    let mut out = if result.is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    out.structured_content = (structured || result.is_error).then(|| result.structured(notices));
    out
}

#[cfg(test)]
mod tests {
    use super::base64;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
    }
}
