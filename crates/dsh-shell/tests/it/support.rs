//! Shared helpers for the shell tests.

use std::time::Duration;

/// Waits (up to 5 s, only to stop a hang) until `pid` is gone or a zombie; true if it is.
pub async fn wait_gone(pid: i32) -> bool {
    dsh_testkit::gone_within(pid, Duration::from_secs(5)).await
}
