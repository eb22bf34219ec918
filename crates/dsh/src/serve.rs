//! `dsh serve --stdio`: the far side of a remote world, speaking dsh's remote protocol on
//! stdin and stdout (see `dsh_remote`). It ends when its stdin ends.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use dsh_core::HarnessError;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Speak the protocol on stdin and stdout (the only transport: the near side's ssh,
    /// docker exec or command carries them).
    #[arg(long, required = true)]
    stdio: bool,
    /// The far workspace (default: the current directory).
    #[arg(short = 'C', value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn main(args: ServeArgs) -> ExitCode {
    debug_assert!(args.stdio);
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        eprintln!(
            "dsh serve: its stdin is a terminal; dsh serve speaks a binary protocol to another \
             dsh, which starts it over ssh, docker exec or a cmd: command (try \
             `dsh doctor --world URL`)"
        );
        return ExitCode::from(2);
    }
    match crate::block_on("serve", 1, run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

async fn run(args: &ServeArgs) -> Result<(), HarnessError> {
    let ws = crate::tool::workspace_root(args.dir.as_deref()).map_err(|e| {
        HarnessError::new(
            e.code(),
            format!(
                "the far workspace, {}, here; fix the world URL's path",
                e.message()
            ),
        )
    })?;
    let info = dsh_remote::ServerInfo::of_this_process();
    let far = Far { ws };
    dsh_remote::serve(tokio::io::stdin(), tokio::io::stdout(), &info, &far).await
}

/// What this far side answers past the handshake, for its workspace `ws`.
struct Far {
    ws: PathBuf,
}

#[async_trait::async_trait]
impl dsh_remote::Handler for Far {
    async fn handle(
        &self,
        method: &str,
        _params: &serde_json::Value,
    ) -> Option<Result<serde_json::Value, HarnessError>> {
        match method {
            // `dsh doctor --world URL`: this machine's report, made here.
            "doctor" => Some(Ok(crate::doctor::report(&self.ws).await)),
            _ => None,
        }
    }
}
