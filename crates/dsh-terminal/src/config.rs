//! The terminal settings, validated.

use std::time::Duration;

use dsh_core::HarnessError;

/// The most rows or columns of a terminal.
pub const MAX_SIDE: u16 = 1000;

/// How terminals are sized, bounded and judged ready. Every field has the
/// reference's default; [`TerminalConfig::validate`] refuses a value that cannot work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TerminalConfig {
    /// Rows of a new terminal, at most [`MAX_SIDE`](crate::MAX_SIDE). Default 40.
    pub rows: u16,
    /// Columns of a new terminal, at most [`MAX_SIDE`](crate::MAX_SIDE). Default 160.
    pub cols: u16,
    /// Lines a terminal keeps. Default 10 000.
    pub scrollback_lines: usize,
    /// Bytes a terminal keeps. Default 4 MiB.
    pub scrollback_max_bytes: usize,
    /// The most bytes of one read page, one send's output, and one pending escape
    /// sequence. Default 256 KiB.
    pub max_read_bytes: usize,
    /// How often a send looks at the terminal. Default 50 ms.
    pub poll_interval: Duration,
    /// The earliest a send accepts "blocked reading the terminal" as its answer.
    /// Default 150 ms.
    pub exact_probe_after: Duration,
    /// Silence after which a send settles `inferred_idle`. Default 3 s.
    pub idle_silence: Duration,
    /// Extra silence allowed once a prompt marker was seen while a child still held the
    /// terminal. Default 500 ms.
    pub handoff_grace: Duration,
    /// A send's deadline unless the call gives its own. Default 30 s.
    pub timeout: Duration,
    /// The longest deadline a call may ask for. Default 600 s.
    pub max_timeout: Duration,
    /// SIGTERM→SIGKILL grace when a terminal is closed (after the hangup). Default
    /// 500 ms, so a terminal is gone within a second of its client.
    pub dispose_grace: Duration,
    /// The most terminals one owner may have open. Default 64.
    pub max_terminals: usize,
}

impl Default for TerminalConfig {
    fn default() -> Self {
        TerminalConfig {
            rows: 40,
            cols: 160,
            scrollback_lines: 10_000,
            scrollback_max_bytes: 4 << 20,
            max_read_bytes: 256 << 10,
            poll_interval: Duration::from_millis(50),
            exact_probe_after: Duration::from_millis(150),
            idle_silence: Duration::from_millis(3000),
            handoff_grace: Duration::from_millis(500),
            timeout: Duration::from_millis(30_000),
            max_timeout: Duration::from_millis(600_000),
            dispose_grace: Duration::from_millis(500),
            max_terminals: 64,
        }
    }
}

impl TerminalConfig {
    /// Checks the settings together.
    ///
    /// # Errors
    /// `CONFIG_INVALID` naming the first field that cannot work: a zero size, count or
    /// duration; `max_read_bytes` above `scrollback_max_bytes`; `handoff_grace` below
    /// `poll_interval`; `timeout` above `max_timeout`.
    pub fn validate(&self) -> Result<(), HarnessError> {
        let bad = |field: &str, why: &str| {
            Err(HarnessError::config_invalid(format!(
                "terminal setting {field}: {why}"
            )))
        };
        if self.rows == 0 || self.cols == 0 {
            return bad("rows/cols", "must be at least 1");
        }
        if self.rows > MAX_SIDE || self.cols > MAX_SIDE {
            return bad(
                "rows/cols",
                "must be at most 1000 (the screen is kept in memory)",
            );
        }
        for (field, n) in [
            ("scrollback_lines", self.scrollback_lines),
            ("scrollback_max_bytes", self.scrollback_max_bytes),
            ("max_read_bytes", self.max_read_bytes),
            ("max_terminals", self.max_terminals),
        ] {
            if n == 0 {
                return bad(field, "must be at least 1");
            }
        }
        for (field, d) in [
            ("poll_interval", self.poll_interval),
            ("exact_probe_after", self.exact_probe_after),
            ("idle_silence", self.idle_silence),
            ("handoff_grace", self.handoff_grace),
            ("timeout", self.timeout),
            ("max_timeout", self.max_timeout),
            ("dispose_grace", self.dispose_grace),
        ] {
            if d.is_zero() {
                return bad(field, "must be a positive duration");
            }
        }
        if self.max_read_bytes > self.scrollback_max_bytes {
            return bad("max_read_bytes", "must not exceed scrollback_max_bytes");
        }
        if self.handoff_grace < self.poll_interval {
            return bad("handoff_grace", "must be at least one poll_interval");
        }
        if self.timeout > self.max_timeout {
            return bad("timeout", "must not exceed max_timeout");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_hold_and_each_impossible_value_is_named() {
        assert!(TerminalConfig::default().validate().is_ok());
        let cases: Vec<(TerminalConfig, &str)> = vec![
            (
                TerminalConfig {
                    rows: 0,
                    ..TerminalConfig::default()
                },
                "rows/cols",
            ),
            (
                TerminalConfig {
                    max_read_bytes: 8 << 20,
                    ..TerminalConfig::default()
                },
                "max_read_bytes",
            ),
            (
                TerminalConfig {
                    handoff_grace: Duration::from_millis(10),
                    ..TerminalConfig::default()
                },
                "handoff_grace",
            ),
            (
                TerminalConfig {
                    poll_interval: Duration::ZERO,
                    ..TerminalConfig::default()
                },
                "poll_interval",
            ),
        ];
        for (c, field) in cases {
            let e = c.validate().expect_err(field);
            assert_eq!(e.code(), dsh_core::ErrorCode::ConfigInvalid);
            assert!(e.message().contains(field), "{}", e.message());
        }
    }
}
