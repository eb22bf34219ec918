//! The pwsh provider: same executor, PowerShell dialect.

use std::sync::Arc;

use dsh_core::ErrorCode;
use dsh_process::LocalSubprocess;
use dsh_shell::pwsh::{LocalPwsh, Pwsh};
use dsh_shell::{Shell, ShellConfig, ShellRequest};

#[test]
fn messages_name_pwsh() {
    let sh = LocalPwsh::new(Arc::new(LocalSubprocess::new()));
    let mut req = ShellRequest::unconfined("Write-Output hi");
    req.timeout_ms = Some(0.0);
    let e = sh.spec_for(req).expect_err("bad timeout");
    assert_eq!(
        e.message(),
        "pwsh: request.timeout_ms must be a positive finite number"
    );
    let cfg = ShellConfig {
        grace_ms: 0,
        ..ShellConfig::default()
    };
    let e = LocalPwsh::with_config(Arc::new(LocalSubprocess::new()), cfg).expect_err("bad config");
    assert_eq!(
        e.message(),
        "pwsh: grace_ms must be a positive finite number"
    );
}

#[tokio::test]
async fn a_missing_pwsh_is_an_error_and_a_present_one_runs() {
    let missing = Pwsh::new("/nonexistent/pwsh");
    let sh = LocalPwsh::with_dialect(
        Arc::new(LocalSubprocess::new()),
        missing,
        ShellConfig::default(),
    )
    .expect("config");
    let e = sh
        .run(
            sh.spec_for(ShellRequest::unconfined("exit 0"))
                .expect("resolve"),
        )
        .await
        .expect_err("missing");
    assert_eq!(e.code(), ErrorCode::ProcessNotFound);

    let sh = LocalPwsh::new(Arc::new(LocalSubprocess::new()));
    match sh
        .run(
            sh.spec_for(ShellRequest::unconfined("Write-Output 'hé'; exit 3"))
                .expect("resolve"),
        )
        .await
    {
        Ok(r) => {
            assert_eq!(
                (r.stdout.text.replace("\r\n", "\n"), r.exit_code),
                ("hé\n".to_owned(), Some(3))
            );
        }
        Err(e) if e.code() == ErrorCode::ProcessNotFound => println!("pwsh is not installed: {e}"),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[tokio::test]
async fn local_pwsh_passes_the_shell_conformance_checks_where_pwsh_is_installed() {
    let sh = LocalPwsh::new(Arc::new(LocalSubprocess::new()));
    // Only a missing pwsh skips: any other error is a failure of the test.
    match sh
        .run(
            sh.spec_for(ShellRequest::unconfined("exit 0"))
                .expect("resolve"),
        )
        .await
    {
        Err(e) if e.code() == ErrorCode::ProcessNotFound => {
            dsh_testkit::skip(
                dsh_testkit::Need::Pwsh,
                &format!("pwsh is not installed: {e}"),
            );
            return;
        }
        Err(e) => panic!("pwsh is there but did not run: {e}"),
        Ok(_) => {}
    }
    let result =
        dsh_shell::conformance::check_all(&sh, &dsh_shell::conformance::Scripts::pwsh()).await;
    assert_eq!(result, Ok(()));
}
