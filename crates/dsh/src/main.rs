//! `dsh`: run commands with bounded output and no process left behind.
//!
//! Subcommands:
//! - `dsh exec [-C DIR] [--mode MODE] [--network deny|allow] [--writable DIR]...
//!   [--runner RUNNER] [--timeout MS] [--json] -- PROGRAM [ARG...]` runs one argv in the
//!   sandbox (see [`exec`]).
//! - `dsh doctor [--json]` reports what this machine can enforce (see [`doctor`]).
//! - `dsh tool NAME [JSON | -] [-C DIR] [--mode M] [--approval ask|never] [--session ID]`
//!   runs one tool call through the pipeline in a session (see [`tool`]).
//! - `dsh session list | show ID [--json]` prints the audit log (see [`session`]).
//! - `dsh config show [-C DIR] [--json]` prints the configuration in force and where each
//!   value came from (see [`config`]).
//! - `dsh mcp [-C DIR] [--mode M] [--network N] [--approval P]` serves every tool over MCP
//!   on stdio (see [`mcp`]).
//! - `dsh serve --stdio [-C DIR]` is the far side of a remote world (see [`serve`]).
#![forbid(unsafe_code)]

/// `println!` through [`emit`]: a closed stdout ends the process quietly.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::emit(&format!("{}\n", format_args!($($arg)*)))
    };
}

mod config;
mod config_show;
mod doctor;
mod exec;
mod mcp;
mod orphans;
mod serve;
mod session;
mod tool;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The execution layer of an AI agent.
#[derive(Parser, Debug)]
#[command(name = "dsh", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run PROGRAM with ARGs (no shell), streaming its output; exit with its status.
    ///
    /// Exit status follows timeout(1) and env(1): the program's own status; 124 when
    /// --timeout passed (even if SIGKILL was needed); 128+N when a signal N killed it;
    /// 126 when PROGRAM cannot be executed; 127 when it is not found; 125 when dsh itself
    /// fails (bad -C, bad flag): then nothing ran.
    Exec(exec::ExecArgs),
    /// Report what this machine can enforce (sandbox runners, Landlock ABI, seccomp, user
    /// namespaces, openat2, cgroup v2), prove it with a self-test, and say how to fix what
    /// is missing. Exit status 0 when healthy, 1 otherwise.
    Doctor(doctor::DoctorArgs),
    /// Run one tool call (`bash`, …) through the whole pipeline (policy hooks, approval,
    /// sandbox, session log) in a session, and print the text the model would see. Exit
    /// status 0 for a normal result (a non-zero exit of the command included), 1 for an
    /// error result. A background job (`bash` with `run_in_background`) does not outlive
    /// the call's `dsh tool` process: it is killed when the process exits; use `dsh mcp`,
    /// where jobs live as long as the connection.
    Tool(tool::ToolArgs),
    /// Read the session log: `dsh session list`, `dsh session show ID [--json]`.
    Session(session::SessionArgs),
    /// Serve every tool over MCP on stdio (one connection, one session); add it to your
    /// agent's MCP configuration as the command `dsh mcp -C <workspace>`.
    Mcp(mcp::McpArgs),
    /// The configuration: `dsh config show [-C DIR] [--json]` prints each value in force
    /// and where it came from (flags > .dsh/config.toml > ~/.config/dsh/config.toml >
    /// defaults).
    Config(config_show::ConfigArgs),
    /// The far side of a remote world: speak dsh's remote protocol on stdin and stdout
    /// (`dsh serve --stdio -C DIR`), as the near side's ssh or docker exec starts it.
    Serve(serve::ServeArgs),
}

/// Writes `text` to stdout. A reader that went away (`dsh session show ID | head`) ends
/// the process quietly with status 0, as `grep` and `rg` do, instead of a panic.
pub(crate) fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

/// Runs `work` on a two-worker tokio runtime. A runtime that cannot start, or an error
/// from `work`, is printed as `dsh COMMAND: …` and becomes exit status `fail`. Once `work`
/// is done, blocking file work that is still running (a read or search of a cancelled
/// call, which cannot be interrupted) gets a second to finish: it must not keep dsh alive.
pub(crate) fn block_on<T>(
    command: &str,
    fail: u8,
    work: impl std::future::Future<Output = Result<T, dsh_core::HarnessError>>,
) -> Result<T, ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("dsh {command}: cannot start the async runtime: {e}");
            ExitCode::from(fail)
        })?;
    let result = runtime.block_on(work);
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result.map_err(|e| {
        eprintln!("dsh {command}: {e}");
        ExitCode::from(fail)
    })
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                exec::EXIT_DSH_FAILED
            } else {
                0
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Exec(args) => exec::main(args),
        Command::Doctor(args) => doctor::main(args),
        Command::Tool(args) => tool::main(args),
        Command::Session(args) => session::main(args),
        Command::Mcp(args) => mcp::main(args),
        Command::Config(args) => config_show::main(args),
        Command::Serve(args) => serve::main(args),
    }
}
