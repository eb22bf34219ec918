//! `dsh-spawn-floor PROGRAM [ARG...]`: the least any launcher does. It starts PROGRAM
//! (`std::process::Command`, which is `posix_spawn` here), waits for it and exits with its
//! status; it tracks no tree, applies no sandbox and captures nothing.
//!
//! `dsh-bench` times it, built with the same profile as `dsh`, beside each spawn figure:
//! its ratio is the floor no launcher in front of a program can go below on that machine.
#![forbid(unsafe_code)]

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: dsh-spawn-floor PROGRAM [ARG...]");
        return ExitCode::from(125);
    };
    match Command::new(&program).args(args).status() {
        Ok(status) => ExitCode::from(status.code().map_or(128, |c| (c & 0xff) as u8)),
        Err(e) => {
            eprintln!("dsh-spawn-floor: {}: {e}", program.to_string_lossy());
            ExitCode::from(127)
        }
    }
}
