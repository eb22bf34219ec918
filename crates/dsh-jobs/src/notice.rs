//! The completion notice: what the owner is told when a job ends unseen.

use crate::JobSnapshot;

/// The bound dsh puts on a notice when the job has no output limit of its own: a label
/// can be a 64 KiB command line.
pub const NOTICE_MAX_BYTES: usize = 4096;

const TRUNCATED: &str = "\n[notice truncated]";
const DONE: &str = "\nDone; job_output.";

/// `background job <id> (<kind>: <label>) finished [status: …]. Read its output with
/// job_output.`, within `limit` bytes: cut, it keeps `background job <id>`, as much of
/// the rest as fits, `\n[notice truncated]` and `\nDone; job_output.`; with less room it
/// drops the marker, then cuts the id line, then keeps only the tail of the last line
/// (8 bytes: `_output.`).
pub fn completion_notice(job: &JobSnapshot, limit: usize) -> String {
    let prefix = format!("background job {}", job.id);
    let text = format!(
        "{prefix} ({}: {}) finished {}. Read its output with job_output.",
        job.kind,
        label(&job.label),
        job.status_line()
    );
    if text.len() <= limit {
        return text;
    }
    if prefix.len() + TRUNCATED.len() + DONE.len() <= limit {
        let room = limit - prefix.len() - TRUNCATED.len() - DONE.len();
        let detail = head(&text[prefix.len()..], room);
        return format!("{prefix}{detail}{TRUNCATED}{DONE}");
    }
    if prefix.len() + DONE.len() <= limit {
        return format!("{prefix}{DONE}");
    }
    if DONE.len() <= limit {
        return format!("{}{DONE}", head(&prefix, limit - DONE.len()));
    }
    tail(DONE, limit).to_owned()
}

/// A label as a notice shows it: a command line's control characters escaped (none
/// reaches a client as it is), and at most 200 characters, so the status line after it
/// survives.
fn label(label: &str) -> String {
    let (shown, used) = dsh_core::visible::visible_prefix(label, 200);
    if used < label.len() {
        format!("{shown}…")
    } else {
        shown
    }
}

/// The longest head of `s` of at most `max` bytes that ends on a character boundary.
fn head(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The longest tail of `s` of at most `max` bytes that starts on a character boundary.
fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobId, JobStatus};

    fn job(id: &str, label: &str) -> JobSnapshot {
        JobSnapshot {
            id: JobId::new(id),
            kind: "pty-send".into(),
            label: label.into(),
            output_limit_bytes: None,
            owner_session: None,
            status: JobStatus::Completed,
            detail: Some("exit code: 0".into()),
            started_at_ms: 0,
            finished_at_ms: Some(1),
            reported: false,
        }
    }

    #[test]
    fn the_notice_is_whole_when_it_fits() {
        assert_eq!(
            completion_notice(&job("bash-1", "make"), 4096),
            "background job bash-1 (pty-send: make) finished [status: completed, exit code: 0]. \
             Read its output with job_output."
        );
    }

    #[test]
    fn a_cut_notice_follows_the_pinned_steps() {
        let j = job("pty-send-100", &"x".repeat(500));
        assert_eq!(
            completion_notice(&j, 64),
            "background job pty-send-100\n[notice truncated]\nDone; job_output."
        );
        let at_80 = completion_notice(&j, 80);
        assert_eq!(at_80.len(), 80);
        assert!(at_80.starts_with("background job pty-send-100 (pty-send: xxx"));
        assert!(at_80.ends_with("\n[notice truncated]\nDone; job_output."));
        assert_eq!(
            completion_notice(&j, 50),
            "background job pty-send-100\nDone; job_output."
        );
        assert_eq!(completion_notice(&j, 30), "background j\nDone; job_output.");
        assert_eq!(completion_notice(&j, 8), "_output.");
        assert_eq!(completion_notice(&j, 0), "");
    }

    #[test]
    fn cuts_keep_whole_characters() {
        let j = job("bash-2", &"é".repeat(100));
        for limit in 40..120 {
            let n = completion_notice(&j, limit);
            assert!(n.len() <= limit, "{limit}: {n}");
        }
    }
}
