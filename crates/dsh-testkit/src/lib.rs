//! What dsh's tests need from the machine, asked in one place, and the helpers they share.
//!
//! A test that needs something this machine may lack (bubblewrap, Landlock, cgroups, a
//! process limit, `pwsh`, an MCP SDK, an agent client…) asks [`skip`] when it is missing,
//! and returns only if that is allowed:
//!
//! ```no_run
//! use dsh_testkit::{skip, Need};
//! # fn bwrap_works() -> Result<(), String> { Ok(()) }
//! if let Err(why) = bwrap_works() {
//!     skip(Need::Bwrap, &why); // panics when the environment requires bubblewrap
//!     return;
//! }
//! ```
//!
//! # Guarantees
//! - A missing need is a failure when `DSH_REQUIRE_<NEED>` is set (the need's
//!   [`var`](Need::var)), or when `DSH_REQUIRE_ALL` is set and `DSH_ALLOW_MISSING` (a
//!   comma-separated list of [`Need::name`]s) does not name it. CI sets `DSH_REQUIRE_ALL`:
//!   no test passes there without what it tests, but what CI cannot install.
//! - Every allowed skip is said on stdout and, when `DSH_SKIP_LOG` names a file, appended
//!   to it as one line `<need>\t<test>\t<why>`: CI prints that file and checks it against
//!   the skips it expects.
//!
//! A test never returns early in silence: it asks here.

use std::io::Write;
use std::time::{Duration, Instant};

/// Something a test needs from the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// A working bubblewrap (`bwrap`).
    Bwrap,
    /// Landlock, as dsh's runner uses it.
    Landlock,
    /// A cgroup dsh may make per command.
    Cgroups,
    /// A process limit (a cgroup with the pids controller).
    ProcessLimit,
    /// PowerShell (`pwsh`).
    Pwsh,
    /// The official MCP client SDKs (`DSH_MCP_PYTHON`, `DSH_TS_SDK_DIR`).
    McpSdk,
    /// The agent clients (`DSH_CLIENTS_BIN`).
    Clients,
    /// The toolchains a command runs in a closed home (cargo, node, npm, pip…).
    Toolchains,
    /// The host tools whose files a command must not arm (maven, mercurial, direnv,
    /// pre-commit, yarn).
    HostTools,
    /// A program of util-linux or procps the test drives (`ipcmk`, …).
    SystemTool,
    /// A kernel interface the test reads (`/proc/kmsg`, …).
    KernelInterface,
}

impl Need {
    /// Every need.
    pub const ALL: [Need; 11] = [
        Need::Bwrap,
        Need::Landlock,
        Need::Cgroups,
        Need::ProcessLimit,
        Need::Pwsh,
        Need::McpSdk,
        Need::Clients,
        Need::Toolchains,
        Need::HostTools,
        Need::SystemTool,
        Need::KernelInterface,
    ];

    /// Its name in `DSH_ALLOW_MISSING` and the skip log (`bwrap`, `process-limit`, …).
    pub fn name(self) -> &'static str {
        match self {
            Need::Bwrap => "bwrap",
            Need::Landlock => "landlock",
            Need::Cgroups => "cgroups",
            Need::ProcessLimit => "process-limit",
            Need::Pwsh => "pwsh",
            Need::McpSdk => "mcp-sdk",
            Need::Clients => "clients",
            Need::Toolchains => "toolchains",
            Need::HostTools => "host-tools",
            Need::SystemTool => "system-tool",
            Need::KernelInterface => "kernel-interface",
        }
    }

    /// The variable that makes it required on its own (`DSH_REQUIRE_BWRAP`, …).
    pub fn var(self) -> &'static str {
        match self {
            Need::Bwrap => "DSH_REQUIRE_BWRAP",
            Need::Landlock => "DSH_REQUIRE_LANDLOCK",
            Need::Cgroups => "DSH_REQUIRE_CGROUPS",
            Need::ProcessLimit => "DSH_REQUIRE_PROCESS_LIMIT",
            Need::Pwsh => "DSH_REQUIRE_PWSH",
            Need::McpSdk => "DSH_REQUIRE_MCP_SDK",
            Need::Clients => "DSH_REQUIRE_CLIENTS",
            Need::Toolchains => "DSH_REQUIRE_TOOLCHAINS",
            Need::HostTools => "DSH_REQUIRE_HOST_TOOLS",
            Need::SystemTool => "DSH_REQUIRE_SYSTEM_TOOLS",
            Need::KernelInterface => "DSH_REQUIRE_KERNEL_INTERFACES",
        }
    }

    /// Whether the environment requires it (see the [crate docs](crate)).
    pub fn required(self) -> bool {
        if std::env::var_os(self.var()).is_some() {
            return true;
        }
        if std::env::var_os("DSH_REQUIRE_ALL").is_none() {
            return false;
        }
        let allowed = std::env::var("DSH_ALLOW_MISSING").unwrap_or_default();
        !allowed.split(',').any(|n| n.trim() == self.name())
    }
}

/// The test goes on without `need` (missing here, because of `why`): a failure when the
/// environment requires it, else the skip is said and recorded (see the [crate
/// docs](crate)). The caller returns, or leaves out what needed it, after this.
///
/// # Panics
/// When `need` is required.
pub fn skip(need: Need, why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("(unnamed test)")
        .to_owned();
    if need.required() {
        panic!(
            "{test} needs {} ({} or DSH_REQUIRE_ALL is set), which is missing here: {why}",
            need.name(),
            need.var()
        );
    }
    println!(
        "skipped ({}): {why}; set {} to make this a failure",
        need.name(),
        need.var()
    );
    if let Some(log) = std::env::var_os("DSH_SKIP_LOG") {
        let line = format!(
            "{}\t{test}\t{}\n",
            need.name(),
            why.replace(['\n', '\t'], " ")
        );
        // One `write` per line on an O_APPEND file: lines of parallel tests never mix.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!("cannot record the skip in {}: {e}", log.to_string_lossy());
        }
    }
}

/// [`skip`] when `result` is an error, keeping its value otherwise: `None` means the test
/// goes on without `need`.
pub fn need<T, E: std::fmt::Display>(need: Need, result: Result<T, E>) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(why) => {
            skip(need, &why.to_string());
            None
        }
    }
}

/// Whether process `pid` is alive: it exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may hold any byte.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state != "Z" && state != "X")
}

/// Waits until process `pid` is gone (or a zombie), at most `limit` (only to stop a hang);
/// whether it is. Blocks the thread: in an async test, [`gone_within`].
pub fn wait_gone(pid: i32, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    !alive(pid)
}

/// [`wait_gone`] without blocking the thread.
///
/// # Cancel safety
/// Cancel safe: it only looks.
pub async fn gone_within(pid: i32, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    !alive(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_variables_are_distinct() {
        for a in Need::ALL {
            for b in Need::ALL {
                if a != b {
                    assert_ne!(a.name(), b.name());
                    assert_ne!(a.var(), b.var());
                }
            }
        }
    }

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_gone() {
        assert!(alive(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let pid = child.id() as i32;
        child.wait().expect("wait");
        assert!(wait_gone(pid, Duration::from_secs(5)));
    }
}
