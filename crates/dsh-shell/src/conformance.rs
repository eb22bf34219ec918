//! The behaviour every [`Shell`] provider owes, as checks its tests run.
//!
//! A provider's test file calls [`check_all`] with the provider and the [`Scripts`] of its
//! shell language, then adds only what is specific to it. Each check starts real
//! processes; a failure is an `Err` naming the check and what was seen, so the caller's
//! `assert!` prints it.

use std::time::Duration;

use dsh_core::{CancelToken, ErrorCode};

use crate::{ProcessStatus, Shell, ShellRequest};

/// Command lines in the provider's shell language, one per behaviour the checks need.
#[derive(Clone, Debug)]
pub struct Scripts {
    /// Exits with status 3.
    pub exit_3: String,
    /// Writes `out` and a newline to stdout, then `err` and a newline to stderr.
    pub out_and_err: String,
    /// Copies stdin to stdout.
    pub cat_stdin: String,
    /// Runs for 1000 seconds.
    pub sleep_long: String,
}

impl Scripts {
    /// The scripts in bash.
    pub fn bash() -> Scripts {
        Scripts {
            exit_3: "exit 3".into(),
            out_and_err: "echo out; echo err >&2".into(),
            cat_stdin: "cat".into(),
            sleep_long: "sleep 1000".into(),
        }
    }

    /// The scripts in PowerShell.
    pub fn pwsh() -> Scripts {
        Scripts {
            exit_3: "exit 3".into(),
            out_and_err: "[Console]::Out.WriteLine('out'); [Console]::Error.WriteLine('err')"
                .into(),
            cat_stdin: "[Console]::Out.Write([Console]::In.ReadToEnd())".into(),
            sleep_long: "Start-Sleep -Seconds 1000".into(),
        }
    }
}

/// Runs every check, stopping at the first failure.
///
/// # Errors
/// The first failed check, by name, with what it saw.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the check under way, which kills whatever
/// command it started.
pub async fn check_all(shell: &dyn Shell, scripts: &Scripts) -> Result<(), String> {
    a_nonzero_exit_is_a_result(shell, scripts).await?;
    streams_are_captured_apart(shell, scripts).await?;
    stdin_reaches_the_command(shell, scripts).await?;
    a_timeout_is_timed_out_not_aborted(shell, scripts).await?;
    a_cancel_is_aborted_not_timed_out(shell, scripts).await?;
    a_pre_cancelled_run_is_refused(shell, scripts).await?;
    a_background_process_is_read_once_and_terminated(shell, scripts).await?;
    Ok(())
}

fn request(command: &str) -> ShellRequest {
    ShellRequest::unconfined(command)
}

/// A non-zero exit is `Ok` with its code, neither timed out nor aborted.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the run, which kills the command's process tree.
pub async fn a_nonzero_exit_is_a_result(shell: &dyn Shell, s: &Scripts) -> Result<(), String> {
    let r = run(shell, request(&s.exit_3)).await?;
    expect(
        "a_nonzero_exit_is_a_result",
        (r.exit_code, r.timed_out, r.aborted),
        (Some(3), false, false),
    )
}

/// stdout and stderr are captured separately.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the run, which kills the command's process tree.
pub async fn streams_are_captured_apart(shell: &dyn Shell, s: &Scripts) -> Result<(), String> {
    let r = run(shell, request(&s.out_and_err)).await?;
    let got = (
        r.stdout.text.replace("\r\n", "\n"),
        r.stderr.text.replace("\r\n", "\n"),
    );
    expect(
        "streams_are_captured_apart",
        got,
        ("out\n".to_owned(), "err\n".to_owned()),
    )
}

/// Request stdin reaches the command, then end-of-file.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the run, which kills the command's process tree.
pub async fn stdin_reaches_the_command(shell: &dyn Shell, s: &Scripts) -> Result<(), String> {
    let mut req = request(&s.cat_stdin);
    req.stdin = Some(b"piped".to_vec());
    let r = run(shell, req).await?;
    expect(
        "stdin_reaches_the_command",
        r.stdout.text,
        "piped".to_owned(),
    )
}

/// The executor's own timer is reported as `timed_out`, not `aborted`.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the run, which kills the command's process tree.
pub async fn a_timeout_is_timed_out_not_aborted(
    shell: &dyn Shell,
    s: &Scripts,
) -> Result<(), String> {
    let mut req = request(&s.sleep_long);
    req.timeout_ms = Some(200.0);
    let r = run(shell, req).await?;
    expect(
        "a_timeout_is_timed_out_not_aborted",
        (r.timed_out, r.aborted, r.timeout_ms),
        (true, false, 200),
    )
}

/// The caller's cancel is reported as `aborted`, not `timed_out`.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the run, which kills the command's process tree.
pub async fn a_cancel_is_aborted_not_timed_out(
    shell: &dyn Shell,
    s: &Scripts,
) -> Result<(), String> {
    let cancel = CancelToken::new();
    let mut req = request(&s.sleep_long);
    req.cancel = Some(cancel.clone());
    let spec = shell.spec_for(req).map_err(|e| format!("spec_for: {e}"))?;
    let run = shell.run(spec);
    tokio::pin!(run);
    // Cancel once the run is under way (it cannot finish on its own).
    let r = tokio::select! {
        r = &mut run => r,
        () = tokio::time::sleep(Duration::from_millis(50)) => {
            cancel.cancel("check");
            run.await
        }
    }
    .map_err(|e| format!("a_cancel_is_aborted_not_timed_out: run failed: {e}"))?;
    expect(
        "a_cancel_is_aborted_not_timed_out",
        (r.aborted, r.timed_out),
        (true, false),
    )
}

/// A run whose cancel already fired is refused with `ABORTED`, and nothing runs.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the run, which kills anything it started.
pub async fn a_pre_cancelled_run_is_refused(shell: &dyn Shell, s: &Scripts) -> Result<(), String> {
    let cancel = CancelToken::new();
    cancel.cancel("too late");
    let mut req = request(&s.exit_3);
    req.cancel = Some(cancel);
    let spec = shell.spec_for(req).map_err(|e| format!("spec_for: {e}"))?;
    match shell.run(spec).await {
        Err(e) if e.code() == ErrorCode::Aborted => Ok(()),
        other => Err(format!("a_pre_cancelled_run_is_refused: got {other:?}")),
    }
}

/// A background process's output is delivered once, and terminate ends it as killed.
///
/// # Cancel safety
/// Cancel safe: dropping the future drops the background process it waits on, which
/// kills its process tree.
pub async fn a_background_process_is_read_once_and_terminated(
    shell: &dyn Shell,
    s: &Scripts,
) -> Result<(), String> {
    let name = "a_background_process_is_read_once_and_terminated";
    let spec = shell
        .spec_for(request(&s.out_and_err))
        .map_err(|e| format!("spec_for: {e}"))?;
    let p = shell
        .start(spec)
        .map_err(|e| format!("{name}: start failed: {e}"))?;
    p.done().await;
    expect(
        name,
        p.read_output().delta.replace("\r\n", "\n"),
        "out\n[stderr]\nerr\n".to_owned(),
    )?;
    expect(name, p.read_output().delta, String::new())?;
    let spec = shell
        .spec_for(request(&s.sleep_long))
        .map_err(|e| format!("spec_for: {e}"))?;
    let p = shell
        .start(spec)
        .map_err(|e| format!("{name}: start failed: {e}"))?;
    expect(name, (p.terminate(), p.terminate()), (true, false))?;
    p.done().await;
    expect(name, p.status(), ProcessStatus::Killed)
}

async fn run(shell: &dyn Shell, req: ShellRequest) -> Result<crate::RunResult, String> {
    let spec = shell.spec_for(req).map_err(|e| format!("spec_for: {e}"))?;
    shell
        .run(spec)
        .await
        .map_err(|e| format!("run failed: {e}"))
}

fn expect<T: PartialEq + std::fmt::Debug>(check: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{check}: expected {want:?}, got {got:?}"))
    }
}
