//! The tools a model calls, and the one pipeline every call goes through.
//!
//! A [`Tool`] has a name, a description, a JSON schema for its arguments and a body. The
//! [`World`] holds one provider per seam (subprocess, shell, sandbox, fs, …), the shared
//! services (the sandbox [`policy`], approval, jobs, terminals, the session log) and the
//! registered tools; every World is wired by a [`Preset`] from a [`WorldConfig`]
//! ([`world`]). [`World::call`] runs a [`ToolCall`] through the pipeline:
//!
//! 1. the arguments are parsed once and frozen (`""` is `{}`; text that is not JSON is
//!    passed as a string, which a tool's schema then refuses);
//! 2. a call cancelled already is `ABORTED_BEFORE_DISPATCH`, and nothing else runs;
//! 3. the [`PreExecute`] hooks decide allow / deny / ask (ask goes to the approval
//!    service), then the guards may deny;
//! 4. cancelled now: `ABORTED_BEFORE_DISPATCH`; else the body runs (an unknown name is
//!    `UNKNOWN_TOOL` here), and then, whatever its outcome, every write scope it opened
//!    is closed: the check after the call runs, and what it found is added to the result;
//! 5. the [`PostExecute`] hooks accept, block (the result becomes an error with their
//!    feedback) or replace the text;
//! 6. the tool's finalizer runs exactly once, on every outcome.
//!
//! The parts live in folders: [`world`] (the World, its builder and presets), [`policy`]
//! (the policy [`service`](policy::service) that decides each call's sandbox policy, the
//! one [`escalation`](policy::escalation) a call may ask for, the write scope), [`schema`]
//! (argument [`bounds`](schema::bounds), portable schemas, the
//! [`structured`](schema::structured) form of a result) and [`tools`] by family.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), dsh_core::HarnessError> {
//! use std::sync::Arc;
//! use dsh_core::{CallId, CancelToken};
//! use dsh_sandbox::SandboxMode;
//! use dsh_store::{session::SessionLog, SqliteStorage};
//! use dsh_tools::{Preset, ToolCall, WorldBuilder, WorldConfig};
//!
//! let ws = tempfile::tempdir().expect("tempdir");
//! std::fs::write(ws.path().join("notes.txt"), "hello\n").expect("write");
//! let storage = Arc::new(SqliteStorage::open(ws.path().join(".state/dsh.db"))?);
//! let log = Arc::new(SessionLog::new(storage).await?);
//! let config = WorldConfig::new(ws.path()).with_mode(SandboxMode::DangerFullAccess);
//! let world = WorldBuilder::new().preset(Preset::Local, &config, log.clone())?.build()?;
//! let session = log.create(ws.path()).await?;
//! let call = ToolCall::from_text(CallId::new("c1"), "read", r#"{"file_path": "notes.txt"}"#);
//! let result = world.call(Some(&session), call, CancelToken::new()).await;
//! assert!(!result.is_error, "{}", result.text);
//! assert!(result.text.contains("hello"));
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//! - Every call settles with a [`ToolResult`]; a body that started is always awaited, a
//!   success overtaken by a cancel is `ABORTED`, and a body that panics is `INTERNAL` (a
//!   bug in dsh, and the message says so): that call's work is dropped, and the World
//!   goes on serving other calls.
//! - A call whose policy can write gets the check after it on every outcome (result,
//!   error, cancel, timeout, panic), whatever its tool does; a background job gets it at
//!   its end, a terminal at its close.
//! - Every string argument of the built-in tools has a size bound, checked before it is
//!   used ([`schema::bounds`]); past it, the call is `INVALID_ARGS` and nothing ran.
//! - With a session, the call is logged: `tool/call` before step 3 and `tool/result`
//!   after step 6, so an approval's `approval/asked` + `approval/decided` pair sits
//!   between them; a long argument or result is kept as a head, its length and a digest
//!   (`dsh_store::log_bounds`).
//!
//! # Limits
//! Results are bounded per tool (a `read` page, 32 KiB of terminal or job output, 100
//! glob paths): what is cut is said in the text, never dropped silently. A World serves
//! one process; sessions do not outlive it.
//!
//! # Errors
//! Every error result carries `{name, code}` ([`ErrorInfo`]): `INVALID_ARGS`,
//! `UNKNOWN_TOOL`, `ABORTED_BEFORE_DISPATCH`, `ABORTED`, `INTERNAL`, the approval codes
//! (`APPROVAL_REJECTED`, …), `ESCALATION_INVALID`, and whatever the seams return
//! (`SANDBOX_UNAVAILABLE`, `FS_STALE_VERSION`, …: docs/errors.md lists them all).

#![forbid(unsafe_code)]

use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{CallId, CancelToken, ErrorCode, HarnessError};
use dsh_store::session::Session;
use serde_json::Value;

mod pipeline;
pub mod policy;
pub mod schema;
pub mod tools;
pub mod world;

pub use policy::service::{ArmedPolicy, CheckOutcome, PolicyService};
pub use schema::structured::structured_schema;
pub use world::preset::{BashMode, Preset, WorldConfig};
pub use world::{World, WorldBuilder};

pub(crate) use schema::{args_schema, invalid_args, object_schema, parse_args, without_nulls};

/// One call as a model makes it.
#[derive(Clone, Debug)]
pub struct ToolCall {
    /// The call's id (unique within the session).
    pub call_id: CallId,
    /// The tool's name.
    pub name: String,
    /// The arguments, parsed once where they arrived (an MCP request's object as it is;
    /// text through [`ToolCall::from_text`]).
    pub arguments: Value,
}

impl ToolCall {
    /// A call whose arguments are `text` as a model wrote it: `""` is `{}`, and text that
    /// is not JSON is a string (which a tool's schema then refuses).
    pub fn from_text(call_id: CallId, name: impl Into<String>, text: &str) -> ToolCall {
        let arguments = if text.trim().is_empty() {
            serde_json::json!({})
        } else {
            serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
        };
        ToolCall {
            call_id,
            name: name.into(),
            arguments,
        }
    }
}

/// What a failed call reports besides its text: a name (`AbortError`,
/// `ToolNotFoundError`, …) and the stable [`ErrorCode`] string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorInfo {
    /// The error's kind, for programs that switch on it.
    pub name: String,
    /// The stable code (`UNKNOWN_TOOL`, `SANDBOX_UNAVAILABLE`, …).
    pub code: String,
}

/// The outcome of one call, as the model and the log see it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResult {
    /// The model-visible text. An error's text starts with `Error: `.
    pub text: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// `{name, code}` of a failure.
    pub error: Option<ErrorInfo>,
    /// Structured facts for programs, beside the text in the result's
    /// [structured form](schema::structured).
    pub meta: Option<Value>,
    /// An image the model sees beside the text (`read_image`).
    pub image: Option<Image>,
}

/// An image content block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime_type: &'static str,
    /// The image bytes.
    pub data: Vec<u8>,
}

impl ToolResult {
    /// A successful result.
    pub fn ok(text: impl Into<String>) -> ToolResult {
        ToolResult {
            text: text.into(),
            is_error: false,
            error: None,
            meta: None,
            image: None,
        }
    }

    /// The error result for `e`: `Error: <message>` with its name and code.
    pub fn from_error(e: &HarnessError) -> ToolResult {
        let name = match e.code() {
            ErrorCode::Aborted | ErrorCode::AbortedBeforeDispatch => "AbortError",
            ErrorCode::UnknownTool => "ToolNotFoundError",
            ErrorCode::InvalidArgs => "ToolArgsError",
            ErrorCode::ToolDenied => "ToolDeniedError",
            ErrorCode::SandboxUnavailable => "SandboxUnavailableError",
            _ => "HarnessError",
        };
        ToolResult {
            text: format!("Error: {}", e.message()),
            is_error: true,
            error: Some(ErrorInfo {
                name: name.to_owned(),
                code: e.code().as_str().to_owned(),
            }),
            meta: None,
            image: None,
        }
    }
}

/// What a tool body returns on success.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolOutput {
    /// The model-visible text.
    pub text: String,
    /// Structured facts for programs.
    pub meta: Option<Value>,
    /// An image the model sees beside the text.
    pub image: Option<Image>,
}

/// What a tool body may use.
pub struct CallContext<'a> {
    /// The call.
    pub call_id: &'a CallId,
    /// The session, when the call belongs to one.
    pub session: Option<&'a Arc<Session>>,
    /// Cancelled when the caller gives up; a body should stop soon after.
    pub cancel: &'a CancelToken,
    /// The world the call runs in.
    pub world: &'a World,
    /// The call's write scopes: the pipeline closes them (see [`CallContext::policy`]).
    pub(crate) scopes: &'a policy::scope::CallScopes,
    /// The file the call last saw ([`saw`](CallContext::saw)): the pipeline logs it with
    /// the call's result.
    pub(crate) seen: &'a std::sync::Mutex<Option<dsh_fs::observations::Seen>>,
}

impl CallContext<'_> {
    /// The policy this call runs under: the session's standing policy, as the World's
    /// policy service gives it. When it can write (workspace-write), the check after the
    /// call is armed with it: the pipeline runs it once the body returns, whatever the
    /// outcome, and adds what it found to the result. A tool that runs a confined command
    /// never calls the check itself.
    ///
    /// # Cancel safety
    /// Cancel safe for the call: dropped before it returns, it arms no check; work the
    /// policy service put on a blocking thread (a walk, a recheck) still finishes there.
    pub async fn policy(&self) -> dsh_sandbox::SandboxPolicy {
        let standing = self.unarmed_policy(None).await;
        self.armed(standing)
    }

    /// The directory this call's relative paths and commands resolve in: its session's
    /// working directory as a root, else the World's fallback root
    /// ([`PolicyService::workspace_root`], the one rule). Every policy of the call has this
    /// root.
    pub fn workspace_root(&self) -> std::path::PathBuf {
        self.world
            .policy()
            .workspace_root(self.session.map(|s| s.header().cwd.as_path()))
    }

    /// The policy this call's reads are fenced by
    /// ([`PolicyService::read_policy`]): what a command of the call could not read, the
    /// file tools do not read. No check is armed; nothing is walked.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn read_policy(&self) -> dsh_sandbox::SandboxPolicy {
        let session = self.session.map(|s| {
            (
                &**s as &dyn dsh_core::journal::Journal,
                s.header().cwd.as_path(),
            )
        });
        self.world.policy().read_policy(session).await
    }

    /// The call's policy in `explicit` mode (else the session's or the default), the check
    /// not armed: for deciding, before [`armed`](Self::armed) arms what runs.
    pub(crate) async fn unarmed_policy(
        &self,
        explicit: Option<dsh_sandbox::SandboxMode>,
    ) -> dsh_sandbox::SandboxPolicy {
        let session = self.session.map(|s| {
            (
                &**s as &dyn dsh_core::journal::Journal,
                s.header().cwd.as_path(),
            )
        });
        self.world.policy().policy_for(session, explicit).await
    }

    /// dsh's managed variables (`DSH_HOME`, `DSH_SHELL`, `DSH_SESSION_ID`, …) for a command
    /// of this call's session, one-shot or in a terminal: the World's `ShellEnv`, the one
    /// place they are made.
    ///
    /// # Errors
    /// `SHELL_ENV_INVALID` (see `ShellEnv::collect`).
    pub fn managed_env(&self) -> Result<std::collections::BTreeMap<String, String>, HarnessError> {
        self.world
            .shell_env()
            .collect(&dsh_shell::shell_env::ExecContext {
                session_id: self.session.map(|s| s.id().clone()),
            })
    }

    /// Records that the call saw `target` at `version`: the session's read-before-edit
    /// memory has it now, and the call's logged result carries it (the newest of the call
    /// wins), so a session resumed from its log has it too.
    pub(crate) fn saw(&self, target: &dsh_fs::FsTarget, version: &dsh_fs::FsVersion) {
        self.world.observe(
            self.session.map(|s| s.id()),
            target.key(),
            dsh_fs::observations::Observation::Present(version.clone()),
        );
        *self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(dsh_fs::observations::Seen {
                key: target.key().to_path_buf(),
                version: version.clone(),
            });
    }

    /// `policy`, with the check after the call armed for it when it can write (see
    /// [`policy`](Self::policy)).
    pub(crate) fn armed(&self, policy: dsh_sandbox::SandboxPolicy) -> dsh_sandbox::SandboxPolicy {
        self.scopes.add(policy::scope::WriteScope::open(
            self.world,
            self.session,
            self.call_id,
            &policy,
        ));
        policy
    }
}

/// What a tool may do, for a client deciding how to show or gate it (MCP's annotations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolHints {
    /// It changes nothing.
    pub read_only: bool,
    /// What it changes may be lost (overwritten, deleted).
    pub destructive: bool,
    /// The same call twice does no more than once.
    pub idempotent: bool,
    /// It may reach beyond the workspace (the network, other programs).
    pub open_world: bool,
}

impl ToolHints {
    /// Reads the workspace and changes nothing.
    pub const READ_ONLY: ToolHints = ToolHints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    };
    /// May do anything the sandbox lets it: the default, true of a command.
    pub const ANYTHING: ToolHints = ToolHints {
        read_only: false,
        destructive: true,
        idempotent: false,
        open_world: true,
    };
}

/// A model-facing tool.
#[async_trait]
pub trait Tool: Send + Sync {
    /// The name models call it by.
    fn name(&self) -> &str;

    /// What it does, for the model.
    fn description(&self, world: &World) -> String;

    /// The JSON schema of its arguments.
    fn parameters(&self, world: &World) -> Value;

    /// A short name for people (MCP's `title`). Default: the name.
    fn title(&self) -> &str {
        self.name()
    }

    /// What it may do. Default: [`ToolHints::ANYTHING`].
    fn hints(&self) -> ToolHints {
        ToolHints::ANYTHING
    }

    /// The JSON schema of a successful result's structured facts ([`ToolResult::meta`],
    /// which never holds a `null`: an absent fact is left out, and never a `text` or
    /// `error` field: the [structured form](schema::structured) adds those). Default: any object.
    fn output_schema(&self) -> Value {
        serde_json::json!({"type": "object"})
    }

    /// Whether a successful result carries a [structured form](schema::structured) and the tool
    /// declares an output schema. A tool whose results hold what only content blocks can
    /// carry (an image) says no: a client that passes the structured form to its model
    /// drops the content blocks, image included. Default: true.
    fn is_structured(&self) -> bool {
        true
    }

    /// Runs the call.
    ///
    /// # Errors
    /// Any [`HarnessError`]; it becomes an error result with its code.
    ///
    /// # Cancel safety
    /// Need not be cancel safe: the pipeline awaits a started body to its end and stops it
    /// through `ctx.cancel`. A dropped body stops where it stands, undoing nothing: a
    /// one-shot command dies with it, but what it handed on goes on (text typed into a
    /// terminal, a background job, file work on a blocking thread), and an approval it was
    /// asking stays without a decision in the log.
    async fn call(&self, args: &Value, ctx: &CallContext<'_>) -> Result<ToolOutput, HarnessError>;

    /// Rewrites the final text of every result of this tool (success or error), or
    /// `None` to keep it. Called exactly once per call.
    fn finalize(&self, _result: &ToolResult) -> Option<String> {
        None
    }

    /// What a call with `args` will do, as an approval question shows it first and logs
    /// it. Taken from the arguments alone (no I/O). The default is the arguments
    /// themselves; `bash` gives its command line, `write` and `edit` their file.
    fn action(&self, args: &Value) -> dsh_approval::Action {
        dsh_approval::Action::Arguments(args.clone())
    }
}

/// A call as hooks see it.
#[derive(Clone, Debug)]
pub struct CallView {
    /// The call's id.
    pub call_id: CallId,
    /// The tool's name.
    pub name: String,
    /// The parsed, frozen arguments.
    pub arguments: Arc<Value>,
}

/// What a pre-execute hook decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreDecision {
    /// Go on.
    Allow,
    /// Refuse, saying why.
    Deny(String),
    /// Ask the approval service, with an optional reason.
    Ask(Option<String>),
}

/// A policy that sees every call before it runs.
#[async_trait]
pub trait PreExecute: Send + Sync {
    /// The decision for `call`.
    ///
    /// # Errors
    /// A failing hook makes the call an error result (the tool does not run).
    ///
    /// # Cancel safety
    /// The pipeline drops the future only with a dropped [`World::call`], and tells the
    /// hook nothing then: a hook should leave nothing half-done when dropped.
    async fn pre_execute(&self, call: &CallView) -> Result<PreDecision, HarnessError>;
}

/// What a post-execute hook decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PostDecision {
    /// Keep the result.
    Accept,
    /// Make the result an error whose text is this feedback.
    Block(String),
    /// Keep the result but replace its text.
    Replace(String),
}

/// A policy that sees every result before it is final.
#[async_trait]
pub trait PostExecute: Send + Sync {
    /// The decision for `result` of `call`.
    ///
    /// # Errors
    /// A failing hook makes the call an error result.
    ///
    /// # Cancel safety
    /// The pipeline drops the future only with a dropped [`World::call`], and tells the
    /// hook nothing then: a hook should leave nothing half-done when dropped.
    async fn post_execute(
        &self,
        call: &CallView,
        result: &ToolResult,
    ) -> Result<PostDecision, HarnessError>;
}

/// A synchronous check after the pre-execute hooks allowed a call: `Some(reason)` denies
/// it. Guards can only deny.
pub type Guard = Arc<dyn Fn(&CallView) -> Option<String> + Send + Sync>;
