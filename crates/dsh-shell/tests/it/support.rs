//! Shared helpers for the shell tests.

use std::time::Duration;

/// Waits (up to 5 s, only to stop a hang) until `pid` is gone or a zombie; true if it is.
pub async fn wait_gone(pid: i32) -> bool {
    for _ in 0..500 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}
