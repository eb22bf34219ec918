//! Finding and proving bubblewrap: the program on `PATH` and a probe run with a timeout.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bwrap;

/// Runs the bwrap probe; the resolved program, or why it fails and how to fix it.
pub(super) fn probe_bwrap(program: &Path, timeout: Duration) -> Result<PathBuf, String> {
    let path = find_program(program).ok_or_else(|| {
        format!(
            "{} not found (install it: apt-get install bubblewrap)",
            program.display()
        )
    })?;
    let argv = bwrap::probe_argv(&path);
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        // Its own group, so a timeout kills whatever it started too.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    // SAFETY: the group of our own unreaped child: its id cannot be reused.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                }
                let _ = child.wait();
                return Err(format!(
                    "its probe did not finish within {} ms",
                    timeout.as_millis()
                ));
            }
            Err(e) => return Err(format!("cannot wait for its probe: {e}")),
        }
    };
    if status.success() {
        return Ok(path);
    }
    let mut err = String::new();
    if let Some(mut s) = child.stderr.take() {
        let _ = s.by_ref().take(4096).read_to_string(&mut err);
    }
    let line = err.lines().next().unwrap_or("").trim().to_owned();
    let hint = if line.contains("setting up uid map")
        || line.contains("No permissions to create new namespace")
        || line.contains("Operation not permitted")
    {
        " (unprivileged user namespaces are disabled: allow them, e.g. on Ubuntu 24.04 \
         `sysctl kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for bwrap)"
    } else {
        ""
    };
    Err(format!("its probe failed ({status}): {line}{hint}"))
}

/// `program` if it has a slash, else its first executable match on `PATH`.
pub(super) fn find_program(program: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if program.as_os_str().as_bytes().contains(&b'/') {
        return is_executable(program).then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| is_executable(p))
}

pub(super) fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
