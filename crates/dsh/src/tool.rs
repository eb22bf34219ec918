//! `dsh tool`: one tool call through the whole pipeline, in a session; and the World the
//! CLI builds for it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use dsh_approval::{ApprovalOutcome, ApprovalPolicy, ScriptedAnswerer, TerminalAnswerer};
use dsh_core::{CallId, CancelToken, ErrorCode, HarnessError, SessionId};
use dsh_sandbox::{Network, SandboxMode};
use dsh_store::session::{Session, SessionLog};
use dsh_store::SqliteStorage;
use dsh_tools::{Preset, ToolCall, World, WorldBuilder};

use crate::config::{Config, Flags};

/// Exit status of `dsh tool` when the call's result is an error, or dsh itself failed.
const EXIT_ERROR: u8 = 1;

#[derive(Args, Debug)]
pub struct ToolArgs {
    /// The tool to call (`bash`, `read`, `write`, `edit`, `glob`, `grep`, `read_image`, …;
    /// `dsh mcp` lists them all).
    #[arg(value_name = "NAME")]
    name: String,
    /// The arguments as a JSON object, or `-` to read them from stdin (default `{}`).
    #[arg(value_name = "JSON")]
    json: Option<String>,
    /// The workspace (the session's working directory when it is created).
    #[arg(short = 'C', value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Set the session's sandbox mode first (read-only, workspace-write,
    /// danger-full-access); logged as a `sandbox/mode` event.
    #[arg(long, value_name = "MODE", value_parser = parse_flag::<SandboxMode>)]
    mode: Option<SandboxMode>,
    /// Network in confined modes (deny or allow; default: the config's, else deny).
    #[arg(long, value_name = "deny|allow", value_parser = parse_flag::<Network>)]
    network: Option<Network>,
    /// Run commands even where the sandbox can be enforced only in part (default: refused
    /// with SANDBOX_UNAVAILABLE); each result says what is missing.
    #[arg(long)]
    allow_partial: bool,
    /// Set the session's approval policy first (ask or never); logged.
    #[arg(long, value_name = "ask|never", value_parser = parse_flag::<ApprovalPolicy>)]
    approval: Option<ApprovalPolicy>,
    /// Answer the next approval request without asking (`allow` or `reject`); repeatable,
    /// used in order. Otherwise approvals are asked on the terminal, or unavailable without
    /// one.
    #[arg(long, value_name = "allow|reject", value_parser = parse_answer)]
    answer: Vec<ApprovalOutcome>,
    /// Run in this session (created if absent); default: a new one.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Where sessions are kept (default `$XDG_STATE_HOME/dsh` or `~/.local/state/dsh`).
    #[arg(long, value_name = "DIR")]
    state: Option<PathBuf>,
}

impl ToolArgs {
    /// The flags that override the config files (`--mode` sets the session's mode instead).
    fn flags(&self) -> Flags {
        Flags {
            network: self.network,
            allow_partial: self.allow_partial,
            ..Flags::default()
        }
    }
}

/// A flag value parsed by its type's `FromStr`, the error being that type's message.
pub(crate) fn parse_flag<T: std::str::FromStr<Err = HarnessError>>(s: &str) -> Result<T, String> {
    s.parse().map_err(|e: HarnessError| e.message().to_owned())
}

fn parse_answer(s: &str) -> Result<ApprovalOutcome, String> {
    match s {
        "allow" => Ok(ApprovalOutcome::AllowedOnce),
        "reject" => Ok(ApprovalOutcome::Rejected),
        _ => Err(format!("unknown answer \"{s}\"; expected allow or reject")),
    }
}

/// The store of sessions at `state` (default location when `None`).
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the new store, whose thread finishes the open
/// it had queued and ends.
pub async fn session_log(state: Option<&Path>) -> Result<Arc<SessionLog>, HarnessError> {
    let dir = state.map_or_else(dsh_store::default_state_dir, Path::to_path_buf);
    let storage = Arc::new(SqliteStorage::open(dir.join("dsh.db"))?);
    Ok(Arc::new(SessionLog::new(storage).await?))
}

/// The CLI's World: the sandboxed preset made from `config` (see [`crate::config`]),
/// approvals from `answers`, then the terminal when `terminal`.
///
/// # Errors
/// As [`WorldBuilder::preset`].
pub fn world(
    sessions: Arc<SessionLog>,
    config: &Config,
    answers: Vec<ApprovalOutcome>,
    state: &Path,
    terminal: bool,
) -> Result<World, HarnessError> {
    let world = WorldBuilder::new()
        .preset(
            Preset::Sandboxed,
            &config.world_config(Some(state.to_path_buf())),
            sessions,
        )?
        .build()?;
    if !answers.is_empty() {
        world
            .approval()
            .add_answerer(Arc::new(ScriptedAnswerer::new(answers)));
    }
    if terminal {
        world.approval().add_answerer(Arc::new(TerminalAnswerer));
    }
    Ok(world)
}

pub fn main(args: ToolArgs) -> ExitCode {
    match crate::block_on("tool", EXIT_ERROR, run(args)) {
        Ok(code) => ExitCode::from(code),
        Err(code) => code,
    }
}

/// The workspace root: `-C DIR`, else the current directory; absolute, and a directory.
pub(crate) fn workspace_root(dir: Option<&Path>) -> Result<PathBuf, HarnessError> {
    let cwd = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().map_err(|e| {
            HarnessError::new(
                ErrorCode::ProcessCwdInvalid,
                "the current directory is unusable; pass -C DIR",
            )
            .with_source(e)
        })?,
    };
    let cwd = std::path::absolute(&cwd).unwrap_or(cwd);
    if !cwd.is_dir() {
        return Err(HarnessError::new(
            ErrorCode::ProcessCwdInvalid,
            format!("-C {}: not a directory", cwd.display()),
        ));
    }
    Ok(cwd)
}

/// Applies `--mode` and `--approval` to `session`, logging a mode only when it changes it.
pub(crate) async fn apply_flags(
    world: &World,
    session: &Session,
    mode: Option<SandboxMode>,
    approval: Option<ApprovalPolicy>,
) -> Result<(), HarnessError> {
    if let Some(mode) = mode {
        // Logged only when it changes the mode; refused while terminals hold it.
        world.set_mode(session, mode).await?;
    }
    if let Some(policy) = approval {
        world.approval().set_policy(session, policy).await?;
    }
    Ok(())
}

async fn run(args: ToolArgs) -> Result<u8, HarnessError> {
    let raw = match args.json.as_deref() {
        Some("-") => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s).map_err(|e| {
                HarnessError::new(ErrorCode::IoFailed, "cannot read the arguments from stdin")
                    .with_source(e)
            })?;
            s
        }
        Some(j) => j.to_owned(),
        None => "{}".to_owned(),
    };
    // The configuration first: it says where the workspace really is (links resolved
    // once, here), and nothing is logged for a configuration that is refused.
    let config = crate::config::load(&workspace_root(args.dir.as_deref())?, &args.flags())?;
    let cwd = config.workspace.clone();
    let state = args
        .state
        .clone()
        .unwrap_or_else(dsh_store::default_state_dir);
    let sessions = session_log(Some(&state)).await?;
    let session: Arc<Session> = match &args.session {
        Some(id) => {
            sessions
                .open_or_create(SessionId::new(id.as_str()), &cwd)
                .await?
        }
        None => sessions.create(&cwd).await?,
    };
    eprintln!("dsh tool: session {}", session.id());
    // A terminal answers only where stdin is one: elsewhere nobody can be asked, and the
    // model is not offered an escalation.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdin());
    let world = world(
        sessions.clone(),
        &config,
        args.answer.clone(),
        &state,
        terminal,
    )?;
    world
        .policy()
        .on_unsettled(Arc::new(|text: &str| eprintln!("dsh tool: {text}")));
    apply_flags(&world, &session, args.mode, args.approval).await?;
    session.begin_turn().await?;
    let interrupt = CancelToken::new();
    let watcher = {
        let interrupt = interrupt.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupt.cancel(dsh_core::CancelReason::Signal(2));
            }
        })
    };
    let call = ToolCall::from_text(
        CallId::new(format!("c{}", dsh_core::spill::random_hex(8))),
        args.name.clone(),
        &raw,
    );
    let result = world.call(Some(&session), call, interrupt.clone()).await;
    watcher.abort();
    // Nothing the call started outlives this process; ended here (not by dsh's exit),
    // what a background job or a terminal made still gets its check.
    match world.end_session(&session).await {
        Ok(found) => {
            for line in found {
                eprintln!("dsh tool: {line}");
            }
        }
        Err(e) => eprintln!("dsh tool: {e}"),
    }
    let reason = if interrupt.is_cancelled() {
        "aborted"
    } else if result.is_error {
        "error"
    } else {
        "completed"
    };
    session.end_turn(reason).await?;
    // A command's escape sequences never reach the user's terminal raw (a clipboard
    // write, a cleared screen); piped, the text is passed as it is.
    let text = if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        dsh_core::visible::for_terminal(&result.text)
    } else {
        result.text.clone()
    };
    if text.ends_with('\n') {
        crate::emit(&text);
    } else {
        crate::emit(&format!("{text}\n"));
    }
    Ok(if result.is_error { EXIT_ERROR } else { 0 })
}
