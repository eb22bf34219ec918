//! How a terminal send's output is shown: in the call's result, and read by `job_output`
//! from a send running in the background.

use dsh_terminal::SendResult;

use crate::tools::output::{bounded, MAX_RESULT_BYTES};

pub(super) fn render_send(r: &SendResult) -> String {
    let suffix = format!("\n[wait: {}]\n[session: {}]", r.wait.as_str(), r.status);
    bounded(viewport_or_none(r), &suffix, r.truncated, MAX_RESULT_BYTES)
}

fn viewport_or_none(r: &SendResult) -> &str {
    if r.viewport.is_empty() {
        "(no new output)"
    } else {
        r.viewport.as_str()
    }
}

/// A send's output as a background send's job shows it: the viewport (or `(no new
/// output)`), with `[output truncated]` when output was dropped, bounded to
/// [`MAX_RESULT_BYTES`] less room for the status line.
pub(crate) fn render_viewport(r: &SendResult) -> String {
    bounded(
        viewport_or_none(r),
        "",
        r.truncated,
        MAX_RESULT_BYTES - 1024,
    )
}

/// What one read of a running background send shows (the spec's `renderSendRead`): the
/// lines since the last read, then `[output truncated]` (on its own line) when some were
/// dropped; empty when nothing came.
pub(crate) fn render_send_read(delta: &dsh_terminal::SendDelta) -> String {
    let mut text = delta.text.clone();
    if delta.dropped {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str("[output truncated]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_read_marks_dropped_output_on_its_own_line() {
        let read = |text: &str, dropped| {
            render_send_read(&dsh_terminal::SendDelta {
                text: text.into(),
                dropped,
            })
        };
        assert_eq!(read("a\n", false), "a\n");
        assert_eq!(read("", false), "");
        assert_eq!(read("a\n", true), "a\n[output truncated]");
        assert_eq!(read("", true), "[output truncated]");
    }
}
