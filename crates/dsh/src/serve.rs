//! `dsh serve --stdio`: the far side of a remote world, speaking dsh's remote protocol on
//! stdin and stdout (see `dsh_remote`). It ends when its stdin ends.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use dsh_core::{ErrorCode, HarnessError};

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
    match crate::block_on("serve", 1, run(&args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

async fn run(args: &ServeArgs) -> Result<(), HarnessError> {
    if let Some(dir) = &args.dir {
        if !dir.is_dir() {
            return Err(HarnessError::new(
                ErrorCode::ProcessCwdInvalid,
                format!(
                    "the far workspace {} is not a directory here; fix the world URL's path",
                    dir.display()
                ),
            ));
        }
    }
    let info = dsh_remote::ServerInfo::of_this_process();
    dsh_remote::serve(tokio::io::stdin(), tokio::io::stdout(), &info).await
}
