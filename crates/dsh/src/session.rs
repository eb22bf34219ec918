//! `dsh session list` and `dsh session show ID`: the audit log, readable.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use dsh_core::journal::{Event, EventKind};
use dsh_core::{HarnessError, SessionId};
use serde_json::{json, Value};

#[derive(Args, Debug)]
pub struct SessionArgs {
    #[command(subcommand)]
    command: SessionCommand,
    /// Where sessions are kept (default `$XDG_STATE_HOME/dsh` or `~/.local/state/dsh`).
    #[arg(long, value_name = "DIR", global = true)]
    state: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum SessionCommand {
    /// Every session: id, creation time, workspace.
    List {
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// One session's events: time, event, tool, outcome.
    Show {
        /// The session id.
        id: String,
        /// One JSON object per event, one per line.
        #[arg(long)]
        json: bool,
    },
}

pub fn main(args: SessionArgs) -> ExitCode {
    match crate::block_on("session", 1, run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

async fn run(args: SessionArgs) -> Result<(), HarnessError> {
    let log = crate::tool::session_log(args.state.as_deref()).await?;
    match args.command {
        SessionCommand::List { json } => {
            for h in log.list().await? {
                if json {
                    let v = json!({"id": h.id.as_str(), "created": h.created_ms, "cwd": h.cwd.to_string_lossy()});
                    crate::emit(&format!("{v}\n"));
                } else {
                    crate::emit(&format!(
                        "{}  {}  {}\n",
                        h.id,
                        utc(h.created_ms),
                        h.cwd.display()
                    ));
                }
            }
        }
        SessionCommand::Show { id, json } => {
            let session = log.open(&SessionId::new(id)).await?;
            for e in session.events().await {
                if json {
                    crate::emit(&format!("{}\n", e.to_json()));
                } else {
                    crate::emit(&format!("{}\n", line(&e)));
                }
            }
        }
    }
    Ok(())
}

/// One readable line: `seq  time  event  tool  outcome`.
fn line(e: &Event) -> String {
    let d = &e.data;
    let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let detail = match e.kind {
        EventKind::TurnStart => format!("turn {}", d["turn"]),
        EventKind::TurnEnd => format!(
            "turn {} {}",
            d["turn"],
            d["reason"]["kind"].as_str().unwrap_or("")
        ),
        EventKind::ToolCall => format!("{} {} {}", s("name"), s("callId"), s("arguments")),
        EventKind::ToolResult => {
            let outcome = match d.get("error") {
                Some(err) => format!("error {}", err["code"].as_str().unwrap_or("")),
                None => "ok".into(),
            };
            let first = s("text").lines().last().unwrap_or("").to_owned();
            format!("{} {} {outcome}: {first}", s("name"), s("callId"))
        }
        EventKind::SandboxMode => s("mode"),
        EventKind::ApprovalPolicy => s("policy"),
        EventKind::ApprovalAsked => format!("{} {} {}", s("toolName"), s("callId"), s("reason")),
        EventKind::ApprovalDecided => s("outcome"),
    };
    format!(
        "{:>5}  {}  {:<16}  {}",
        e.seq,
        utc(e.time_ms),
        e.kind.as_str(),
        shorten(detail.trim_end(), DETAIL_CHARS)
    )
}

/// How much of an event's detail a line shows; `--json` has it all.
const DETAIL_CHARS: usize = 240;

/// `s` if it has at most `max` characters, else its first `max` and how much was left out.
fn shorten(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_owned(),
        Some((cut, _)) => format!(
            "{}… ({} bytes in all; --json shows them)",
            &s[..cut],
            s.len()
        ),
    }
}

/// `YYYY-MM-DD HH:MM:SS` UTC for milliseconds since the epoch.
fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::{shorten, utc};

    #[test]
    fn long_details_are_shortened_on_a_char_boundary() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(
            shorten("aé€z", 2),
            "aé… (7 bytes in all; --json shows them)"
        );
    }

    #[test]
    fn utc_renders_known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_764_553_620_000), "2025-12-01 01:47:00");
    }
}
