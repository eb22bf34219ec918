//! The model-visible text of shell results: pinned markers out, exit status back in.
//!
//! [`render_result`] turns a foreground [`RunResult`] into the text a model reads (spec
//! §11.1); [`render_process_read`] and [`process_outcome`] do the same for a background
//! process's reads and final state; [`parse_exit_status`] reads the exit marker back out of
//! rendered text (spec §5.3), for presenters replaying a session log. Every provider (bash
//! today, pwsh later) renders through this module, so the markers are written once.
//!
//! ```
//! use dsh_shell::render::{parse_exit_status, ExitMarker};
//!
//! let parsed = parse_exit_status("oops\n[exit code: 3]");
//! assert_eq!(parsed.body, "oops");
//! assert_eq!(parsed.status, ExitMarker::Code(3));
//! ```
//!
//! # Guarantees
//! - The pinned markers are reproduced byte for byte; each is a constant (or a constant
//!   prefix) here.
//! - Markers come after the body, one per line, in a fixed order, with no trailing newline.
//!   A clean, untruncated exit adds nothing.
//! - [`parse_exit_status`] reads back the exit or signal marker that [`render_result`]
//!   wrote last (all but `[exit code: unknown]`, which reads as exit 0).
//!
//! # Limits
//! - Parsing is a text heuristic: output whose last line looks like a marker is read as one.
//!
//! # Errors
//! None: rendering and parsing are total.

use std::borrow::Cow;
use std::path::Path;

use dsh_process::{CollectedOutput, Signal, SpillInfo};

use crate::{join_streams, ProcessRead, ProcessStatus, RunResult};

/// The whole body when a run printed nothing on either stream.
pub const NO_OUTPUT: &str = "(no output)";

/// Stands in for a spill path when no spill file exists.
pub const SPILL_UNAVAILABLE: &str = "(unavailable)";

/// Starts the truncation marker when the spill file holds the whole stream (or none
/// exists): `[output truncated; full output: <path|(unavailable)>]`.
pub const TRUNCATED_FULL_PREFIX: &str = "[output truncated; full output: ";

/// Starts the truncation marker when the spill file holds only the start of the stream:
/// `[output truncated; first <bytes> bytes in: <path>]`.
pub const TRUNCATED_PARTIAL_PREFIX: &str = "[output truncated; first ";

/// Sits between the byte count and the path in the partial truncation marker.
pub const TRUNCATED_PARTIAL_INFIX: &str = " bytes in: ";

/// Starts the exit marker: `[exit code: <N>]`.
pub const EXIT_CODE_PREFIX: &str = "[exit code: ";

/// The exit marker when the provider learnt neither an exit code nor a signal.
pub const EXIT_CODE_UNKNOWN: &str = "[exit code: unknown]";

/// Starts the signal marker: `[killed by signal: <SIGNAME>]`.
pub const SIGNAL_PREFIX: &str = "[killed by signal: ";

/// Starts the timeout marker: `[timed out after <N>ms]`.
pub const TIMEOUT_PREFIX: &str = "[timed out after ";

/// Ends the timeout marker.
pub const TIMEOUT_SUFFIX: &str = "ms]";

/// Ends every bracketed marker.
pub const MARKER_END: &str = "]";

/// Starts the notice on a background read that skipped output:
/// `[some output was dropped from memory; full output: <p1, p2|(unavailable)>]`.
pub const LOSSY_PREFIX: &str = "[some output was dropped from memory; full output: ";

/// Joins two spill paths in the lossy notice.
pub const LOSSY_PATH_SEPARATOR: &str = ", ";

/// Starts every background outcome line: `[status: …]`.
pub const STATUS_PREFIX: &str = "[status: ";

/// The outcome line of a background process that is still running.
pub const STATUS_RUNNING: &str = "[status: running]";

/// The outcome detail of a process killed with no signal recorded (it never started, or
/// was stopped before it could exit).
pub const KILLED_BEFORE_EXIT: &str = "killed before exit";

/// The text that acknowledges a background start: `started background job <id>`.
pub const BACKGROUND_ACK_PREFIX: &str = "started background job ";

/// `[exit code: <code>]`.
pub fn exit_code_marker(code: i64) -> String {
    format!("{EXIT_CODE_PREFIX}{code}{MARKER_END}")
}

/// `[killed by signal: <name>]`, e.g. `[killed by signal: SIGTERM]`.
pub fn signal_marker(name: &str) -> String {
    format!("{SIGNAL_PREFIX}{name}{MARKER_END}")
}

/// `[timed out after <timeout_ms>ms]`.
pub fn timeout_marker(timeout_ms: u64) -> String {
    format!("{TIMEOUT_PREFIX}{timeout_ms}{TIMEOUT_SUFFIX}")
}

/// `started background job <job_id>`.
pub fn background_ack(job_id: &str) -> String {
    format!("{BACKGROUND_ACK_PREFIX}{job_id}")
}

/// The marker appended to a truncated stream, without its leading newline.
///
/// - a complete spill file: `[output truncated; full output: <path>]`;
/// - no spill file: `[output truncated; full output: (unavailable)]`;
/// - an incomplete spill file (the stream passed the spill cap):
///   `[output truncated; first <bytes> bytes in: <path>]`.
///
/// The third form differs from the reference, which deletes such a file and so never has
/// to word it: dsh keeps the head of the stream, and calling it "full output" would send
/// the model looking for bytes that are not there.
pub fn truncation_marker(spill: Option<&SpillInfo>) -> String {
    match spill {
        Some(info) if info.complete => {
            format!("{TRUNCATED_FULL_PREFIX}{}{MARKER_END}", info.path.display())
        }
        Some(info) => format!(
            "{TRUNCATED_PARTIAL_PREFIX}{}{TRUNCATED_PARTIAL_INFIX}{}{MARKER_END}",
            info.bytes,
            info.path.display()
        ),
        None => format!("{TRUNCATED_FULL_PREFIX}{SPILL_UNAVAILABLE}{MARKER_END}"),
    }
}

/// Renders a foreground result for the model with no leading markers; see
/// [`render_result_with`].
pub fn render_result(result: &RunResult) -> String {
    render_result_with(result, &[])
}

/// Renders a foreground result for the model (spec §11.1).
///
/// The body is stdout, then `[stderr]\n` and stderr when stderr is non-empty (see
/// [`join_streams`]); a truncated stream carries its [`truncation_marker`] right after its
/// text. An empty body is exactly `(no output)`. Then the markers, one per line, in this
/// order: `leading_markers` as given (the sandbox denial and escalation hint, which belong
/// to the sandbox layer); `[timed out after Nms]` when the timeout fired, whatever the
/// exit status; `[killed by signal: S]` when a signal killed the shell, else
/// `[exit code: N]` for a non-zero exit. With any marker the body ends with `\n` before
/// them; the text never ends with a newline added here.
///
/// Differs from the reference: a result with neither an exit code nor a signal gets
/// `[exit code: unknown]` where the reference would print `[exit code: null]`.
///
/// A run in a persistent shell ([`RunResult::persistent`]) renders as spec §13 pins it:
/// its output (clipped by its provider, [`clipped_tail`]), then `[exit code: N]` for a
/// non-zero status (the marker alone when there is no output); a reset shell gets its
/// cause and [`SHELL_RESET_NOTE`] instead, a line each, with empty parts dropped.
pub fn render_result_with(result: &RunResult, leading_markers: &[String]) -> String {
    if let Some(run) = &result.persistent {
        return render_persistent(result, run, leading_markers);
    }
    let stdout = stream_text(&result.stdout);
    let stderr = stream_text(&result.stderr);
    let mut text = truncation_notice(&result.stdout, &result.stderr).unwrap_or_default();
    text.push_str(&join_streams(&stdout, &stderr));
    if text.is_empty() {
        text.push_str(NO_OUTPUT);
    }

    let mut markers: Vec<Cow<'_, str>> = leading_markers
        .iter()
        .map(|m| Cow::from(m.as_str()))
        .collect();
    if result.timed_out {
        markers.push(timeout_marker(result.timeout_ms).into());
    }
    if let Some(marker) = exit_marker(result.exit_code, result.signal) {
        markers.push(marker.into());
    }

    if !markers.is_empty() {
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&markers.join("\n"));
    }
    text
}

/// Ends a persistent shell's result when the shell was reset (spec §13: tests grep
/// `next bash call starts from the workspace`).
pub const SHELL_RESET_NOTE: &str = "[the shell was reset: the next bash call starts from the \
                                    workspace with a fresh working directory and environment]";

/// Says a program waited for input a persistent shell cannot give.
pub const WAITS_FOR_INPUT: &str = "[the command waits for input, which bash cannot give; use \
                                   terminal_open for interactive programs]";

/// Opens a persistent shell's result when the run replaced a shell whose sandbox policy
/// was another ([`FreshShell::PolicyChanged`](crate::FreshShell::PolicyChanged)).
pub const FRESH_SHELL: &str = "[a fresh shell: the sandbox policy changed since the last \
                               bash call (a repository or tool setting it protects appeared, \
                               or the mode changed), so this command ran in the workspace with \
                               a fresh environment; cd and export again what you need]";

/// Opens a persistent shell's result when the last run was cancelled and closed its shell
/// ([`FreshShell::AfterCancel`](crate::FreshShell::AfterCancel)).
pub const FRESH_AFTER_CANCEL: &str = "[a fresh shell: the last bash call was cancelled, which \
                                      closed its shell, so this command ran in the workspace \
                                      with a fresh environment; cd and export again what you \
                                      need]";

/// Says a persistent shell's command was cancelled before it finished.
pub const CANCELLED: &str = "[the command was cancelled]";

/// Starts the clip notes of a persistent shell's output (spec §13).
pub const RESPONSE_CLIPPED: &str = "<response clipped><NOTE>";

/// `output` within `max_chars` characters (its end), with the notes spec §13 gives a
/// persistent shell's output: the start dropped by the terminal's scrollback
/// (`lost_start`), then the cut, which suggests `grep -n`.
pub fn clipped_tail(output: &str, lost_start: bool, max_chars: usize) -> String {
    let chars = output.chars().count();
    let mut text = String::new();
    if lost_start && !output.is_empty() {
        text.push_str(RESPONSE_CLIPPED);
        text.push_str(
            "The start of this output was dropped by the terminal's scrollback limit.</NOTE>\n",
        );
    }
    if chars > max_chars {
        // With its start dropped, only what was kept is known.
        let had = if lost_start { "more than " } else { "" };
        text.push_str(&format!(
            "{RESPONSE_CLIPPED}The output had {had}{chars} characters; only its last \
             {max_chars} are shown. Redirect long output to a file and search it with \
             `grep -n`.</NOTE>\n"
        ));
        text.extend(output.chars().skip(chars - max_chars));
    } else {
        text.push_str(output);
    }
    text
}

/// A persistent shell's result (see [`render_result_with`]).
fn render_persistent(
    result: &RunResult,
    run: &crate::PersistentRun,
    leading_markers: &[String],
) -> String {
    let output = result.stdout.text.as_str();
    let fresh = run.fresh.map(|why| {
        match why {
            crate::FreshShell::PolicyChanged => FRESH_SHELL,
            crate::FreshShell::AfterCancel => FRESH_AFTER_CANCEL,
        }
        .to_owned()
    });
    let Some(reset) = &run.reset else {
        let mut body = output.to_owned();
        let markers: Vec<String> = leading_markers
            .iter()
            .cloned()
            .chain(
                result
                    .exit_code
                    .filter(|&c| c != 0)
                    .map(|c| exit_code_marker(c.into())),
            )
            .collect();
        if !markers.is_empty() {
            if !body.is_empty() && !body.ends_with('\n') {
                body.push('\n');
            }
            body.push_str(&markers.join("\n"));
        }
        if body.is_empty() {
            body.push_str(NO_OUTPUT);
        }
        return match fresh {
            Some(line) => format!("{line}\n{body}"),
            None => body,
        };
    };
    let mut parts: Vec<String> = fresh
        .into_iter()
        .chain(leading_markers.iter().cloned())
        .collect();
    match reset {
        crate::ShellReset::Aborted => {
            parts.push(output.to_owned());
            parts.push(CANCELLED.to_owned());
        }
        crate::ShellReset::TimedOut => {
            let secs = (result.timeout_ms as f64 / 1000.0).round();
            parts.push(format!(
                "Your command timed out after {secs} seconds or experienced an OOM error. \
                 Below is partial output:"
            ));
            parts.push(output.to_owned());
        }
        crate::ShellReset::Exited { code, signal } => {
            parts.push(output.to_owned());
            parts.push(match (code, signal) {
                (_, Some(s)) => format!("[shell killed by signal: {s}]"),
                (Some(c), None) => format!("[shell exited: code {c}]"),
                (None, None) => "[shell exited]".to_owned(),
            });
        }
        crate::ShellReset::WaitsForInput => {
            parts.push(output.to_owned());
            parts.push(WAITS_FOR_INPUT.to_owned());
        }
    }
    parts.push(SHELL_RESET_NOTE.to_owned());
    let parts: Vec<&str> = parts
        .iter()
        .map(String::as_str)
        .filter(|p| !p.is_empty())
        .collect();
    parts.join("\n")
}

/// Starts the notice that opens a result with a cut stream: `[output truncated: …]`.
pub const TRUNCATION_NOTICE_PREFIX: &str = "[output truncated: ";

/// The line that opens a result whose streams were cut (with its newline), so a client
/// that shows only the start of a long result (a preview) still shows where the rest is:
/// `[output truncated: this shows the last N bytes of stdout of T; the rest is in PATH
/// (page it with read's offset and limit, or search it with grep)]`. `None` when neither
/// stream was cut. The pinned marker after each cut stream stays as it is.
pub fn truncation_notice(stdout: &CollectedOutput, stderr: &CollectedOutput) -> Option<String> {
    let parts: Vec<String> = [("stdout", stdout), ("stderr", stderr)]
        .into_iter()
        .filter(|(_, o)| o.truncated)
        .map(|(name, o)| {
            let kept = o.text.len();
            let whole = o.total_bytes;
            let place = match &o.spill {
                Some(s) if s.complete => format!("the whole stream is in {}", s.path.display()),
                Some(s) => format!("its first {} bytes are in {}", s.bytes, s.path.display()),
                None => "the rest was not kept".to_owned(),
            };
            format!("the last {kept} of {whole} bytes of {name} are shown; {place}")
        })
        .collect();
    if parts.is_empty() {
        return None;
    }
    let kept_somewhere = [stdout, stderr]
        .iter()
        .any(|o| o.truncated && o.spill.is_some());
    let how = if kept_somewhere {
        " (page it with the read tool's offset and limit, or search it with grep)"
    } else {
        ""
    };
    // The session's spill files stay under a cap: older ones may have gone for these.
    let dropped: Vec<String> = [stdout, stderr]
        .iter()
        .filter_map(|o| o.spill.as_ref())
        .flat_map(|s| s.dropped.iter().map(|p| p.display().to_string()))
        .collect();
    let dropped = if dropped.is_empty() {
        String::new()
    } else {
        format!(
            "; to keep this session's spill files under their cap, older ones were deleted: {}",
            dropped.join(", ")
        )
    };
    Some(format!(
        "{TRUNCATION_NOTICE_PREFIX}{}{how}{dropped}{MARKER_END}\n",
        parts.join("; ")
    ))
}

fn stream_text(output: &CollectedOutput) -> Cow<'_, str> {
    if output.truncated {
        let marker = truncation_marker(output.spill.as_ref());
        Cow::Owned(format!("{}\n{marker}", output.text))
    } else {
        Cow::Borrowed(&output.text)
    }
}

fn exit_marker(exit_code: Option<i32>, signal: Option<Signal>) -> Option<String> {
    match (signal, exit_code) {
        (Some(signal), _) => Some(signal_marker(&signal.name())),
        (None, Some(0)) => None,
        (None, Some(code)) => Some(exit_code_marker(code.into())),
        (None, None) => Some(EXIT_CODE_UNKNOWN.to_owned()),
    }
}

/// How a rendered command ended, as read back from its text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitMarker {
    /// It exited with this code (0 when the text carried no marker).
    Code(u64),
    /// A signal killed it; the name as written (`SIGTERM`).
    Signal(String),
}

/// Rendered text split into its body and the exit status its final marker gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedExitStatus<'a> {
    /// The text without the consumed marker and the newline before it; every other
    /// marker (timeout, sandbox) stays.
    pub body: &'a str,
    /// The exit status.
    pub status: ExitMarker,
}

/// Reads the exit status from rendered text (spec §5.3).
///
/// 1. A final line `[killed by signal: X]`, preceded by `\n`, where `X` is non-empty and
///    holds no `]` → [`ExitMarker::Signal`]`(X)`.
/// 2. Otherwise a final line `[exit code: <digits>]`, preceded by `\n` → `Code(N)`. Only
///    ASCII decimal digits count; a value too large for `u64` is not a marker.
/// 3. Otherwise `Code(0)` with the body unchanged.
///
/// A marker must be at the very end and must follow a newline: marker-like text on the
/// first line or followed by anything is ordinary output. `[exit code: unknown]` (see
/// [`render_result_with`]) is not a marker, so it reads as exit 0 with the line kept in
/// the body.
pub fn parse_exit_status(text: &str) -> ParsedExitStatus<'_> {
    // A marker holds no newline, so it can only be the text after the last one.
    if let Some(newline) = text.rfind('\n') {
        let body = &text[..newline];
        let last_line = &text[newline + 1..];
        if let Some(name) = bracketed(last_line, SIGNAL_PREFIX) {
            if !name.is_empty() && !name.contains(']') {
                return ParsedExitStatus {
                    body,
                    status: ExitMarker::Signal(name.to_owned()),
                };
            }
        }
        if let Some(digits) = bracketed(last_line, EXIT_CODE_PREFIX) {
            if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(code) = digits.parse::<u64>() {
                    return ParsedExitStatus {
                        body,
                        status: ExitMarker::Code(code),
                    };
                }
            }
        }
    }
    ParsedExitStatus {
        body: text,
        status: ExitMarker::Code(0),
    }
}

fn bracketed<'t>(line: &'t str, prefix: &str) -> Option<&'t str> {
    line.strip_prefix(prefix)?.strip_suffix(MARKER_END)
}

/// Renders one consuming read of a background process for the model.
///
/// The delta verbatim, then the notices one per line: first, when the read was lossy,
/// `[some output was dropped from memory; full output: <paths>]` (the stdout and stderr
/// spill paths that exist, joined by `, `, or `(unavailable)`), then `notices` as given
/// (the sandbox facts, which belong to the sandbox layer). A `\n` separates delta and
/// notices only when the delta is non-empty and does not end with one. An empty delta
/// with no notices gives an empty string (the jobs tool words that case itself).
pub fn render_process_read(read: &ProcessRead, notices: &[String]) -> String {
    let mut lines: Vec<Cow<'_, str>> = Vec::with_capacity(notices.len() + 1);
    if read.lossy {
        lines.push(lossy_notice(read).into());
    }
    lines.extend(notices.iter().map(|n| Cow::from(n.as_str())));

    let mut text = read.delta.clone();
    if !lines.is_empty() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&lines.join("\n"));
    }
    text
}

fn lossy_notice(read: &ProcessRead) -> String {
    let spills: Vec<&SpillInfo> = [&read.stdout_spill, &read.stderr_spill]
        .into_iter()
        .flatten()
        .collect();
    if spills.iter().any(|s| !s.complete) {
        // The stream passed the spill cap: the file has its head only; saying "full
        // output" would send the model looking for bytes that are not there.
        let kept: Vec<String> = spills
            .iter()
            .map(|s| format!("{} (first {} bytes)", display_path(&s.path), s.bytes))
            .collect();
        return format!(
            "{LOSSY_CAPPED_PREFIX}{}{MARKER_END}",
            kept.join(LOSSY_PATH_SEPARATOR)
        );
    }
    let paths: Vec<String> = spills
        .iter()
        .map(|spill| display_path(&spill.path))
        .collect();
    let paths = if paths.is_empty() {
        SPILL_UNAVAILABLE.to_owned()
    } else {
        paths.join(LOSSY_PATH_SEPARATOR)
    };
    format!("{LOSSY_PREFIX}{paths}{MARKER_END}")
}

/// The lossy notice when a spill file holds only the head of its stream.
const LOSSY_CAPPED_PREFIX: &str =
    "[some output was dropped from memory and the spill file reached its cap; kept: ";

fn display_path(path: &Path) -> String {
    path.display().to_string()
}

/// The final-state line of a background process, as the jobs tool shows it.
///
/// - `Killed` with a signal: `[status: killed, signal: SIGTERM]`;
/// - `Killed` without one: `[status: killed, killed before exit]`;
/// - `Completed`: `[status: completed, exit code: N]`, with `N` = 0 when no code was
///   recorded (as the reference does);
/// - `Running`: `[status: running]`.
pub fn process_outcome(
    status: ProcessStatus,
    exit_code: Option<i32>,
    signal: Option<Signal>,
) -> String {
    match outcome_detail(status, exit_code, signal) {
        None => STATUS_RUNNING.to_owned(),
        Some((end, detail)) => format!("{STATUS_PREFIX}{end}, {detail}{MARKER_END}"),
    }
}

/// How a settled background process ended, as the job registry records it: `killed` with
/// `signal: <S>` (or `killed before exit`), or `completed` with `exit code: <N>`; `None`
/// while it runs.
pub fn outcome_detail(
    status: ProcessStatus,
    exit_code: Option<i32>,
    signal: Option<Signal>,
) -> Option<(&'static str, String)> {
    match status {
        ProcessStatus::Running => None,
        ProcessStatus::Killed => Some((
            "killed",
            match signal {
                Some(signal) => format!("signal: {signal}"),
                None => KILLED_BEFORE_EXIT.to_owned(),
            },
        )),
        ProcessStatus::Completed => Some((
            "completed",
            format!("exit code: {}", exit_code.unwrap_or(0)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    // Linux numbering; dsh-process names signals with libc's constants.
    const SIGKILL: Signal = Signal(9);
    const SIGTERM: Signal = Signal(15);

    fn output(text: &str) -> CollectedOutput {
        CollectedOutput {
            text: text.to_owned(),
            truncated: false,
            total_bytes: text.len() as u64,
            spill: None,
        }
    }

    fn truncated(text: &str, spill: Option<SpillInfo>) -> CollectedOutput {
        CollectedOutput {
            text: text.to_owned(),
            truncated: true,
            total_bytes: 1_000_000,
            spill,
        }
    }

    fn spill(path: &str, bytes: u64, complete: bool) -> SpillInfo {
        SpillInfo {
            dropped: Vec::new(),
            path: PathBuf::from(path),
            bytes,
            complete,
        }
    }

    fn result(stdout: &str, stderr: &str, exit_code: Option<i32>) -> RunResult {
        RunResult {
            exit_code,
            signal: None,
            timed_out: false,
            aborted: false,
            timeout_ms: 120_000,
            stdout: output(stdout),
            stderr: output(stderr),
            sandbox: None,
            persistent: None,
        }
    }

    fn timed_out(r: RunResult, timeout_ms: u64) -> RunResult {
        RunResult {
            timed_out: true,
            timeout_ms,
            ..r
        }
    }

    fn killed(r: RunResult, signal: Signal) -> RunResult {
        RunResult {
            exit_code: None,
            signal: Some(signal),
            ..r
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn parsed(body: &str, status: ExitMarker) -> ParsedExitStatus<'_> {
        ParsedExitStatus { body, status }
    }

    fn persistent(
        output: &str,
        exit_code: Option<i32>,
        reset: Option<crate::ShellReset>,
        fresh: Option<crate::FreshShell>,
    ) -> RunResult {
        RunResult::in_persistent_shell(
            output.to_owned(),
            exit_code,
            10_000,
            None,
            crate::PersistentRun {
                shell_id: "pty-1".into(),
                reset,
                fresh,
            },
        )
    }

    // --- a persistent shell's results (spec §13) -------------------------------------

    #[test]
    fn a_persistent_shells_status_is_the_marker_alone_without_output() {
        assert_eq!(
            render_result(&persistent("", Some(7), None, None)),
            "[exit code: 7]"
        );
        assert_eq!(
            render_result(&persistent("", Some(0), None, None)),
            NO_OUTPUT
        );
        assert_eq!(
            render_result(&persistent("hi", Some(1), None, None)),
            "hi\n[exit code: 1]"
        );
        assert_eq!(
            render_result(&persistent(
                "hi\n",
                Some(0),
                None,
                Some(crate::FreshShell::PolicyChanged)
            )),
            format!("{FRESH_SHELL}\nhi\n")
        );
    }

    #[test]
    fn a_reset_persistent_shell_says_why_and_what_comes_next() {
        use crate::ShellReset;
        let exited = ShellReset::Exited {
            code: Some(9),
            signal: None,
        };
        assert_eq!(
            render_result(&persistent("bye", None, Some(exited), None)),
            format!("bye\n[shell exited: code 9]\n{SHELL_RESET_NOTE}")
        );
        let killed = ShellReset::Exited {
            code: None,
            signal: Some("SIGTERM".into()),
        };
        assert_eq!(
            render_result(&persistent("", None, Some(killed), None)),
            format!("[shell killed by signal: SIGTERM]\n{SHELL_RESET_NOTE}")
        );
        let r = persistent("partial", None, Some(ShellReset::TimedOut), None);
        assert!(r.timed_out && !r.aborted);
        assert_eq!(
            render_result(&r),
            format!(
                "Your command timed out after 10 seconds or experienced an OOM error. Below \
                 is partial output:\npartial\n{SHELL_RESET_NOTE}"
            )
        );
        assert!(SHELL_RESET_NOTE.contains("next bash call starts from the workspace"));
        let r = persistent("", None, Some(ShellReset::WaitsForInput), None);
        assert_eq!(
            render_result(&r),
            format!("{WAITS_FOR_INPUT}\n{SHELL_RESET_NOTE}")
        );
    }

    #[test]
    fn a_persistent_shells_output_keeps_its_end_with_notes() {
        let long = "x".repeat(16_005) + "END";
        let r = clipped_tail(&long, false, 16_000);
        assert!(r.starts_with(RESPONSE_CLIPPED), "{}", &r[..80]);
        assert!(r.ends_with("END") && r.contains("grep -n"));
        let lost = clipped_tail("tail", true, 100);
        assert!(lost.starts_with(RESPONSE_CLIPPED) && lost.ends_with("</NOTE>\ntail"));
        assert_eq!(clipped_tail("", true, 100), "");
    }

    // --- render_result -------------------------------------------------------------

    #[test]
    fn clean_exit_renders_stdout_verbatim_with_no_marker() {
        assert_eq!(render_result(&result("hi\n", "", Some(0))), "hi\n");
    }

    #[test]
    fn clean_exit_without_trailing_newline_gains_none() {
        assert_eq!(render_result(&result("hi", "", Some(0))), "hi");
    }

    #[test]
    fn empty_output_renders_as_no_output() {
        assert_eq!(render_result(&result("", "", Some(0))), "(no output)");
    }

    #[test]
    fn stderr_follows_stdout_in_its_own_section() {
        assert_eq!(
            render_result(&result("out\n", "err\n", Some(0))),
            "out\n[stderr]\nerr\n"
        );
    }

    #[test]
    fn stderr_section_is_separated_from_unterminated_stdout() {
        assert_eq!(
            render_result(&result("out", "err", Some(0))),
            "out\n[stderr]\nerr"
        );
    }

    #[test]
    fn stderr_only_has_no_leading_newline() {
        assert_eq!(
            render_result(&result("", "err\n", Some(0))),
            "[stderr]\nerr\n"
        );
    }

    #[test]
    fn nonzero_exit_appends_exit_marker_on_its_own_line() {
        assert_eq!(
            render_result(&result("failing\n", "", Some(3))),
            "failing\n[exit code: 3]"
        );
    }

    #[test]
    fn exit_marker_after_unterminated_output_gets_a_newline_first() {
        assert_eq!(
            render_result(&result("failing", "", Some(3))),
            "failing\n[exit code: 3]"
        );
    }

    #[test]
    fn nonzero_exit_with_no_output_keeps_no_output_body() {
        assert_eq!(
            render_result(&result("", "", Some(1))),
            "(no output)\n[exit code: 1]"
        );
    }

    #[test]
    fn exit_marker_follows_the_stderr_section() {
        assert_eq!(
            render_result(&result("", "boom", Some(2))),
            "[stderr]\nboom\n[exit code: 2]"
        );
    }

    #[test]
    fn timeout_kill_shows_timeout_then_signal_markers() {
        let r = killed(timed_out(result("", "", None), 100), SIGTERM);
        assert_eq!(
            render_result(&r),
            "(no output)\n[timed out after 100ms]\n[killed by signal: SIGTERM]"
        );
    }

    #[test]
    fn timed_out_command_that_trapped_and_exited_zero_keeps_only_timeout_marker() {
        // Regression: spec §11.1 step 4.3 and checklist 53.
        let r = timed_out(result("trapped\n", "", Some(0)), 100);
        assert_eq!(render_result(&r), "trapped\n[timed out after 100ms]");
    }

    #[test]
    fn timed_out_command_with_nonzero_exit_shows_both_markers() {
        let r = timed_out(result("slow\n", "", Some(143)), 100);
        assert_eq!(
            render_result(&r),
            "slow\n[timed out after 100ms]\n[exit code: 143]"
        );
    }

    #[test]
    fn signal_without_timeout_shows_only_signal_marker() {
        let r = killed(result("x\n", "", None), SIGKILL);
        assert_eq!(render_result(&r), "x\n[killed by signal: SIGKILL]");
    }

    #[test]
    fn signal_marker_wins_over_an_exit_code() {
        let r = RunResult {
            signal: Some(SIGTERM),
            ..result("x", "", Some(143))
        };
        assert_eq!(render_result(&r), "x\n[killed by signal: SIGTERM]");
    }

    #[test]
    fn missing_exit_code_and_signal_renders_unknown_exit() {
        assert_eq!(
            render_result(&result("x\n", "", None)),
            "x\n[exit code: unknown]"
        );
    }

    #[test]
    fn negative_exit_code_is_printed_as_given() {
        assert_eq!(
            render_result(&result("x\n", "", Some(-1))),
            "x\n[exit code: -1]"
        );
    }

    #[test]
    fn leading_markers_come_first_in_the_given_order() {
        let r = killed(timed_out(result("out\n", "", None), 5), SIGTERM);
        let leading = strings(&[
            "[sandbox: file access denied under workspace-write mode]",
            "[sandbox: escalation hint]",
        ]);
        assert_eq!(
            render_result_with(&r, &leading),
            "out\n\
             [sandbox: file access denied under workspace-write mode]\n\
             [sandbox: escalation hint]\n\
             [timed out after 5ms]\n\
             [killed by signal: SIGTERM]"
        );
    }

    #[test]
    fn denial_marker_comes_before_the_exit_marker() {
        let leading = strings(&["[sandbox: file access denied under read-only mode]"]);
        assert_eq!(
            render_result_with(&result("touch: denied", "", Some(1)), &leading),
            "touch: denied\n[sandbox: file access denied under read-only mode]\n[exit code: 1]"
        );
    }

    #[test]
    fn leading_marker_alone_is_rendered_after_a_clean_exit() {
        let leading = strings(&["[sandbox: note]"]);
        assert_eq!(
            render_result_with(&result("", "", Some(0)), &leading),
            "(no output)\n[sandbox: note]"
        );
    }

    #[test]
    fn truncated_stream_names_its_complete_spill_file() {
        let r = RunResult {
            stdout: truncated(
                "line-0099\nline-0100\n",
                Some(spill("/tmp/s/stdout-1", 1_000_000, true)),
            ),
            ..result("", "", Some(0))
        };
        assert_eq!(
            render_result(&r),
            "[output truncated: the last 20 of 1000000 bytes of stdout are shown; the whole \
             stream is in /tmp/s/stdout-1 (page it with the read tool's offset and limit, or search it with grep)]\n\
             line-0099\nline-0100\n\n[output truncated; full output: /tmp/s/stdout-1]"
        );
    }

    #[test]
    fn truncated_stream_without_spill_file_says_unavailable() {
        let r = RunResult {
            stdout: truncated("tail", None),
            ..result("", "", Some(0))
        };
        assert_eq!(
            render_result(&r),
            "[output truncated: the last 4 of 1000000 bytes of stdout are shown; the rest \
             was not kept]\ntail\n[output truncated; full output: (unavailable)]"
        );
    }

    #[test]
    fn truncated_stream_with_incomplete_spill_names_only_the_bytes_it_holds() {
        // Differs from the reference on purpose: the file holds the head only.
        let r = RunResult {
            stdout: truncated("tail", Some(spill("/tmp/s/stdout-1", 67_108_864, false))),
            ..result("", "", Some(0))
        };
        assert_eq!(
            render_result(&r),
            "[output truncated: the last 4 of 1000000 bytes of stdout are shown; its first \
             67108864 bytes are in /tmp/s/stdout-1 (page it with the read tool's offset and limit, or search it with grep)]\n\
             tail\n[output truncated; first 67108864 bytes in: /tmp/s/stdout-1]"
        );
    }

    #[test]
    fn each_truncated_stream_carries_its_own_marker_before_the_exit_marker() {
        let r = RunResult {
            stdout: truncated("out", Some(spill("/s/out", 10, true))),
            stderr: truncated("err", None),
            ..result("", "", Some(4))
        };
        assert_eq!(
            render_result(&r),
            "[output truncated: the last 3 of 1000000 bytes of stdout are shown; the whole \
             stream is in /s/out; the last 3 of 1000000 bytes of stderr are shown; the rest was \
             not kept (page it with the read tool's offset and limit, or search it with grep)]\n\
             out\n[output truncated; full output: /s/out]\n\
             [stderr]\nerr\n[output truncated; full output: (unavailable)]\n\
             [exit code: 4]"
        );
    }

    #[test]
    fn truncated_empty_stderr_still_opens_a_stderr_section() {
        // The marker makes the stderr text non-empty, as in the reference.
        let r = RunResult {
            stderr: truncated("", None),
            ..result("out\n", "", Some(0))
        };
        assert_eq!(
            render_result(&r),
            "[output truncated: the last 0 of 1000000 bytes of stderr are shown; the rest \
             was not kept]\nout\n[stderr]\n\n[output truncated; full output: (unavailable)]"
        );
    }

    #[test]
    fn marker_builders_match_the_pinned_text() {
        assert_eq!(exit_code_marker(3), "[exit code: 3]");
        assert_eq!(signal_marker("SIGTERM"), "[killed by signal: SIGTERM]");
        assert_eq!(timeout_marker(100), "[timed out after 100ms]");
        assert_eq!(background_ack("bash-1"), "started background job bash-1");
        assert_eq!(
            truncation_marker(None),
            "[output truncated; full output: (unavailable)]"
        );
    }

    // --- parse_exit_status ----------------------------------------------------------

    #[test]
    fn text_without_marker_parses_as_exit_zero_with_body_unchanged() {
        assert_eq!(
            parse_exit_status("hi\n\n"),
            parsed("hi\n\n", ExitMarker::Code(0))
        );
    }

    #[test]
    fn empty_text_parses_as_exit_zero() {
        assert_eq!(parse_exit_status(""), parsed("", ExitMarker::Code(0)));
    }

    #[test]
    fn final_exit_marker_is_stripped_and_read() {
        assert_eq!(
            parse_exit_status("oops\n[exit code: 3]"),
            parsed("oops", ExitMarker::Code(3))
        );
    }

    #[test]
    fn exit_marker_without_leading_newline_is_ordinary_output() {
        assert_eq!(
            parse_exit_status("[exit code: 5]"),
            parsed("[exit code: 5]", ExitMarker::Code(0))
        );
    }

    #[test]
    fn final_signal_marker_takes_precedence_over_an_earlier_exit_marker() {
        assert_eq!(
            parse_exit_status("x\n[exit code: 1]\n[killed by signal: SIGKILL]"),
            parsed(
                "x\n[exit code: 1]",
                ExitMarker::Signal("SIGKILL".to_owned())
            )
        );
    }

    #[test]
    fn signal_marker_without_leading_newline_is_ordinary_output() {
        assert_eq!(
            parse_exit_status("[killed by signal: SIGTERM]"),
            parsed("[killed by signal: SIGTERM]", ExitMarker::Code(0))
        );
    }

    #[test]
    fn timeout_marker_stays_in_the_body() {
        assert_eq!(
            parse_exit_status("slow\n[timed out after 100ms]\n[exit code: 143]"),
            parsed("slow\n[timed out after 100ms]", ExitMarker::Code(143))
        );
    }

    #[test]
    fn marker_followed_by_more_text_is_ordinary_output() {
        for text in [
            "x\n[exit code: 3]\n",
            "x\n[exit code: 3] ",
            "x\n[killed by signal: SIGTERM]\n",
        ] {
            assert_eq!(
                parse_exit_status(text),
                parsed(text, ExitMarker::Code(0)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn exit_marker_accepts_only_decimal_digits() {
        for text in [
            "x\n[exit code: -1]",
            "x\n[exit code: +1]",
            "x\n[exit code: ]",
            "x\n[exit code: 1a]",
            "x\n[exit code:  1]",
            "x\n[exit code: unknown]",
            "x\n[exit code: ١]",
        ] {
            assert_eq!(
                parse_exit_status(text),
                parsed(text, ExitMarker::Code(0)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn exit_code_too_large_for_u64_is_not_a_marker() {
        let text = "x\n[exit code: 18446744073709551616]";
        assert_eq!(parse_exit_status(text), parsed(text, ExitMarker::Code(0)));
        assert_eq!(
            parse_exit_status("x\n[exit code: 18446744073709551615]"),
            parsed("x", ExitMarker::Code(u64::MAX))
        );
    }

    #[test]
    fn signal_name_with_a_bracket_or_empty_is_not_a_marker() {
        for text in ["x\n[killed by signal: SIG]TERM]", "x\n[killed by signal: ]"] {
            assert_eq!(
                parse_exit_status(text),
                parsed(text, ExitMarker::Code(0)),
                "{text:?}"
            );
        }
    }

    #[test]
    fn marker_on_the_second_line_of_empty_first_line_is_read() {
        assert_eq!(
            parse_exit_status("\n[exit code: 7]"),
            parsed("", ExitMarker::Code(7))
        );
    }

    #[test]
    fn rendered_results_parse_back_to_their_exit_status() {
        let cases = [
            (
                result("failing\n", "", Some(3)),
                ExitMarker::Code(3),
                "failing",
            ),
            (
                killed(timed_out(result("", "", None), 100), SIGTERM),
                ExitMarker::Signal("SIGTERM".to_owned()),
                "(no output)\n[timed out after 100ms]",
            ),
            (result("ok\n", "", Some(0)), ExitMarker::Code(0), "ok\n"),
        ];
        for (r, status, body) in cases {
            let text = render_result(&r);
            assert_eq!(parse_exit_status(&text), parsed(body, status), "{text:?}");
        }
    }

    // --- render_process_read ----------------------------------------------------------

    fn read(delta: &str, lossy: bool) -> ProcessRead {
        ProcessRead {
            delta: delta.to_owned(),
            lossy,
            stdout_spill: None,
            stderr_spill: None,
        }
    }

    #[test]
    fn process_read_without_notices_is_the_delta_verbatim() {
        assert_eq!(render_process_read(&read("a\nb", false), &[]), "a\nb");
    }

    #[test]
    fn empty_process_read_without_notices_is_empty() {
        assert_eq!(render_process_read(&read("", false), &[]), "");
    }

    #[test]
    fn lossy_read_names_the_spill_path() {
        let r = ProcessRead {
            stdout_spill: Some(spill("/s/stdout", 10, true)),
            ..read("tail\n", true)
        };
        assert_eq!(
            render_process_read(&r, &[]),
            "tail\n[some output was dropped from memory; full output: /s/stdout]"
        );
    }

    #[test]
    fn lossy_read_joins_both_spill_paths_stdout_first() {
        let r = ProcessRead {
            stdout_spill: Some(spill("/s/stdout", 10, true)),
            stderr_spill: Some(spill("/s/stderr", 10, true)),
            ..read("tail\n", true)
        };
        assert_eq!(
            render_process_read(&r, &[]),
            "tail\n[some output was dropped from memory; full output: /s/stdout, /s/stderr]"
        );
    }

    #[test]
    fn a_spill_file_at_its_cap_is_not_called_the_full_output() {
        let r = ProcessRead {
            stdout_spill: Some(spill("/s/stdout", 64, false)),
            stderr_spill: Some(spill("/s/stderr", 10, true)),
            ..read("tail\n", true)
        };
        assert_eq!(
            render_process_read(&r, &[]),
            "tail\n[some output was dropped from memory and the spill file reached its cap; \
             kept: /s/stdout (first 64 bytes), /s/stderr (first 10 bytes)]"
        );
    }

    #[test]
    fn lossy_read_without_spill_files_says_unavailable() {
        assert_eq!(
            render_process_read(&read("tail\n", true), &[]),
            "tail\n[some output was dropped from memory; full output: (unavailable)]"
        );
    }

    #[test]
    fn lossy_notice_is_separated_from_an_unterminated_delta() {
        assert_eq!(
            render_process_read(&read("tail", true), &[]),
            "tail\n[some output was dropped from memory; full output: (unavailable)]"
        );
    }

    #[test]
    fn empty_delta_gets_the_notice_alone() {
        assert_eq!(
            render_process_read(&read("", true), &[]),
            "[some output was dropped from memory; full output: (unavailable)]"
        );
    }

    #[test]
    fn given_notices_follow_the_lossy_notice_one_per_line() {
        let notices = strings(&[
            "[sandbox: file access denied under read-only mode]",
            "[sandbox: hint]",
        ]);
        assert_eq!(
            render_process_read(&read("x", true), &notices),
            "x\n\
             [some output was dropped from memory; full output: (unavailable)]\n\
             [sandbox: file access denied under read-only mode]\n\
             [sandbox: hint]"
        );
    }

    #[test]
    fn given_notice_after_terminated_delta_adds_no_blank_line() {
        let notices = strings(&["[sandbox: runner failed]"]);
        assert_eq!(
            render_process_read(&read("x\n", false), &notices),
            "x\n[sandbox: runner failed]"
        );
        assert_eq!(
            render_process_read(&read("", false), &notices),
            "[sandbox: runner failed]"
        );
    }

    // --- process_outcome -------------------------------------------------------------

    #[test]
    fn killed_process_with_signal_names_the_signal() {
        assert_eq!(
            process_outcome(ProcessStatus::Killed, None, Some(SIGTERM)),
            "[status: killed, signal: SIGTERM]"
        );
    }

    #[test]
    fn killed_process_without_signal_was_killed_before_exit() {
        assert_eq!(
            process_outcome(ProcessStatus::Killed, None, None),
            "[status: killed, killed before exit]"
        );
    }

    #[test]
    fn completed_process_shows_its_exit_code() {
        assert_eq!(
            process_outcome(ProcessStatus::Completed, Some(3), None),
            "[status: completed, exit code: 3]"
        );
        assert_eq!(
            process_outcome(ProcessStatus::Completed, Some(0), None),
            "[status: completed, exit code: 0]"
        );
    }

    #[test]
    fn completed_process_without_exit_code_shows_zero() {
        assert_eq!(
            process_outcome(ProcessStatus::Completed, None, None),
            "[status: completed, exit code: 0]"
        );
    }

    #[test]
    fn running_process_says_running() {
        assert_eq!(
            process_outcome(ProcessStatus::Running, None, None),
            "[status: running]"
        );
    }
}
