//! `dsh mcp`: serve every tool over MCP on stdio; one connection is one session.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use dsh_approval::ApprovalPolicy;
use dsh_core::HarnessError;
use dsh_mcp::{DshServer, Opener, Workspace};
use dsh_sandbox::{Network, SandboxMode};
use rmcp::ServiceExt;

#[derive(Args, Debug)]
pub struct McpArgs {
    /// The workspace: the session's working directory (default: the client's first MCP
    /// root, else the current directory).
    #[arg(short = 'C', value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The session's sandbox mode (default read-only).
    #[arg(long, value_name = "MODE", value_parser = crate::tool::parse_flag::<SandboxMode>)]
    mode: Option<SandboxMode>,
    /// Network in confined modes (deny or allow; default: the config's, else deny).
    #[arg(long, value_name = "deny|allow", value_parser = crate::tool::parse_flag::<Network>)]
    network: Option<Network>,
    /// Run commands even where the sandbox can be enforced only in part (default: refused
    /// with SANDBOX_UNAVAILABLE); each result says what is missing.
    #[arg(long)]
    allow_partial: bool,
    /// The session's approval policy (ask or never).
    #[arg(long, value_name = "ask|never", value_parser = crate::tool::parse_flag::<ApprovalPolicy>)]
    approval: Option<ApprovalPolicy>,
    /// How `bash` runs commands: one-shot (each in a fresh shell, the default) or
    /// persistent (one shell per session: `cd` and `export` carry over).
    #[arg(long, value_name = "one-shot|persistent", value_parser = crate::tool::parse_flag::<dsh_tools::BashMode>)]
    bash: Option<dsh_tools::BashMode>,
    /// Where sessions are kept (default `$XDG_STATE_HOME/dsh` or `~/.local/state/dsh`).
    #[arg(long, value_name = "DIR")]
    state: Option<PathBuf>,
    /// For a client that declared the MCP tasks extension: a `bash` call still running
    /// after this many milliseconds becomes a task the client polls (default 10000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    task_after_ms: Option<u64>,
}

pub fn main(args: McpArgs) -> ExitCode {
    match crate::block_on("mcp", 1, run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

async fn run(args: McpArgs) -> Result<(), HarnessError> {
    let explicit = args.dir.is_some();
    let dir = crate::tool::workspace_root(args.dir.as_deref())?;
    let state = args
        .state
        .clone()
        .unwrap_or_else(dsh_store::default_state_dir);
    let sessions = crate::tool::session_log(Some(&state)).await?;
    let (mode, approval) = (args.mode, args.approval);
    let flags = crate::config::Flags {
        network: args.network,
        allow_partial: args.allow_partial,
        bash: args.bash,
        ..crate::config::Flags::default()
    };
    // What the model is told of its sandbox, from the configuration of the workspace as
    // known now (the client's roots, asked later, may name another). A config that does
    // not load is reported at the first tool request, as before.
    let instructions = crate::config::load(&dir, &flags).ok().map(|config| {
        dsh_tools::PolicyService::brief(
            mode.unwrap_or(config.mode.value),
            config.network.value,
            explicit.then_some(config.workspace.as_path()),
            &config.writable_roots.value,
        )
    });
    let opener: Opener = Arc::new(move |cwd: PathBuf| {
        let (sessions, state, flags) = (sessions.clone(), state.clone(), flags.clone());
        Box::pin(async move {
            // The workspace is known only now (the client's roots may name it).
            let config = crate::config::load(&cwd, &flags)?;
            // Where it really is, resolved once: a link a command swaps later does not move
            // the session.
            let cwd = config.workspace.clone();
            let session = sessions.create(&cwd).await?;
            eprintln!("dsh mcp: session {} in {}", session.id(), cwd.display());
            let world = Arc::new(crate::tool::world(
                sessions,
                &config,
                Vec::new(),
                &state,
                false,
            )?);
            crate::tool::apply_flags(&world, &session, mode, approval).await?;
            session.begin_turn().await?;
            Ok((world, session))
        })
    });
    let mut server = DshServer::new(Workspace { dir, explicit }, opener);
    if let Some(instructions) = instructions {
        server = server.with_instructions(instructions);
    }
    if let Some(ms) = args.task_after_ms {
        server = server.with_task_after(std::time::Duration::from_millis(ms));
    }
    let served = server
        .clone()
        .serve({
            let (r, w) = rmcp::transport::stdio_pipes();
            let ending = server.clone();
            dsh_mcp::LineTransport::new(r, w).on_end_of_input(move || ending.input_ended())
        })
        .await;
    let outcome = match served {
        Ok(running) => {
            // SIGTERM, SIGINT or SIGHUP end the connection as the client's EOF does, so
            // what ends it still runs the checks below (a job's tree killed by dsh's own
            // death would never be checked).
            let token = running.cancellation_token();
            let ending = server.clone();
            // It lives through the cleanup below: a second signal, or a cleanup stuck
            // (a client that stopped reading holds a write), ends dsh at once; every
            // tree still dies with it (its reaper sees dsh gone).
            tokio::spawn(async move {
                if ended_by_signal().await {
                    ending.input_ended();
                    token.cancel();
                    tokio::select! {
                        _ = ended_by_signal() => {}
                        () = tokio::time::sleep(SIGNAL_CLEANUP_LIMIT) => {
                            eprintln!("dsh mcp: the cleanup after the signal took too long");
                        }
                    }
                    std::process::exit(143);
                }
            });
            running
                .waiting()
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    server.close().await;
    if let Some((world, session)) = server.opened() {
        // The client is gone: nothing the session started may outlive it.
        match world.end_session(&session).await {
            Ok(found) => {
                for line in found {
                    eprintln!("dsh mcp: {line}");
                }
            }
            Err(e) => eprintln!("dsh mcp: {e}"),
        }
        world.subprocess().shutdown().await;
        session.end_turn("completed").await?;
    }
    outcome.map_err(|e| HarnessError::internal(format!("the MCP connection failed: {e}")))
}

/// How long the cleanup after SIGTERM, SIGINT or SIGHUP may take before dsh exits
/// anyway: the calls' 10 s and the trees' grace.
const SIGNAL_CLEANUP_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Completes when dsh gets SIGTERM, SIGINT or SIGHUP (true), or never when those cannot
/// be watched (false).
async fn ended_by_signal() -> bool {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        return false;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = hup.recv() => {}
    }
    eprintln!("dsh mcp: ending on a signal");
    true
}
