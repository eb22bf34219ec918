//! `dsh config show [-C DIR] [--json]`: the configuration in force for a workspace, and
//! where each value came from (see [`crate::config`]).
//!
//! A file that is not valid makes the command fail with `CONFIG_INVALID` naming the file,
//! line and key, exactly as every other command would.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use dsh_core::visible::visible;
use dsh_core::HarnessError;
use serde_json::Value;

use crate::config::Flags;

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// The effective configuration: each key, its value, and where it came from
    /// (default, user, workspace).
    Show {
        /// The workspace (default: the current directory).
        #[arg(short = 'C', value_name = "DIR")]
        dir: Option<PathBuf>,
        /// One JSON object: `workspace`, `files`, and `values` (each `{value, from, file}`;
        /// lists that add up, such as `protected`, one such object per entry).
        #[arg(long)]
        json: bool,
    },
}

pub fn main(args: ConfigArgs) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dsh config: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(args: ConfigArgs) -> Result<(), HarnessError> {
    let ConfigCommand::Show { dir, json } = args.command;
    let workspace = crate::tool::workspace_root(dir.as_deref())?;
    let config = crate::config::load(&workspace, &Flags::default())?;
    let v = config.to_json();
    if json {
        outln!("{v}");
        return Ok(());
    }
    outln!("workspace: {}", visible(&workspace.display().to_string()));
    let files = &v["files"];
    match config.user_file.as_ref() {
        Some(p) => outln!(
            "user config: {}{}",
            visible(&p.display().to_string()),
            if p.is_file() { "" } else { " (none)" }
        ),
        None => outln!("user config: none (no home directory)"),
    }
    outln!(
        "workspace config: {}{}{}",
        visible(files["workspace"]["path"].as_str().unwrap_or_default()),
        if files["workspace"]["exists"] == true {
            ""
        } else {
            " (none)"
        },
        if config.trusted {
            " (trusted: it may widen the sandbox)"
        } else {
            ""
        }
    );
    outln!("");
    let Some(values) = v["values"].as_object() else {
        return Ok(());
    };
    for (key, entry) in values {
        match entry {
            Value::Array(items) if items.is_empty() => outln!("{key:<18} (none)"),
            Value::Array(items) => {
                for item in items {
                    outln!("{key:<18} {}", line(item));
                }
            }
            one => outln!("{key:<18} {}", line(one)),
        }
    }
    Ok(())
}

/// `VALUE  (from SOURCE FILE)`, printable.
fn line(entry: &Value) -> String {
    let value = match &entry["value"] {
        Value::String(s) => s.clone(),
        Value::Null => "(none)".to_owned(),
        Value::Array(a) if a.is_empty() => "(none)".to_owned(),
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    };
    let from = entry["from"].as_str().unwrap_or_default();
    let file = entry["file"]
        .as_str()
        .map(|f| format!(" {f}"))
        .unwrap_or_default();
    visible(&format!("{value:<24} ({from}{file})"))
}
