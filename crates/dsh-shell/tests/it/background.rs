//! Background processes: status, consuming reads, kill.

use std::sync::Arc;

use dsh_core::{CancelToken, ErrorCode};
use dsh_process::{LocalSubprocess, Signal, Subprocess};
use dsh_shell::bash::LocalBash;
use dsh_shell::ShellConfig;
use dsh_shell::{ProcessStatus, Shell, ShellRequest};

fn bash() -> LocalBash {
    let cfg = ShellConfig {
        grace_ms: 200,
        ..ShellConfig::default()
    };
    LocalBash::with_config(Arc::new(LocalSubprocess::new()), cfg).expect("config")
}

async fn read_until(p: &dsh_shell::ShellProcess, want: &str) -> String {
    let mut all = String::new();
    for _ in 0..1000 {
        all.push_str(&p.read_output().delta);
        if all.contains(want) {
            return all;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never saw {want:?}; got {all:?}");
}

#[tokio::test]
async fn start_returns_at_once_and_completes() {
    let sh = bash();
    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined("read x; echo done"))
                .expect("resolve"),
        )
        .expect("start");
    assert_eq!(p.status(), ProcessStatus::Running);
    drop(p);
    let mut req = ShellRequest::unconfined("echo hi");
    req.stdin = Some(b"ignored".to_vec());
    let p = sh.start(sh.spec_for(req).expect("resolve")).expect("start");
    p.done().await;
    assert_eq!(
        (p.status(), p.exit_code(), p.signal()),
        (ProcessStatus::Completed, Some(0), None)
    );
}

#[tokio::test]
async fn read_output_is_consuming_and_marks_stderr() {
    let sh = bash();
    // The command waits for a gate file, so "second" cannot arrive before the first read.
    let dir = tempfile::tempdir().expect("tempdir");
    let gate = dir.path().join("gate");
    let cmd = format!(
        "echo first; while [ ! -e {} ]; do sleep 0.01; done; echo second",
        gate.display()
    );
    let p = sh
        .start(sh.spec_for(ShellRequest::unconfined(cmd)).expect("resolve"))
        .expect("start");
    let first = read_until(&p, "first\n").await;
    assert_eq!(first, "first\n");
    std::fs::write(&gate, "").expect("open the gate");
    p.done().await;
    assert_eq!(p.read_output().delta, "second\n");
    assert_eq!(p.read_output().delta, "");

    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined("echo out; echo err >&2"))
                .expect("resolve"),
        )
        .expect("start");
    p.done().await;
    assert_eq!(p.read_output().delta, "out\n[stderr]\nerr\n");
    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined("echo err >&2"))
                .expect("resolve"),
        )
        .expect("start");
    p.done().await;
    assert_eq!(p.read_output().delta, "[stderr]\nerr\n");
    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined("printf out; echo err >&2"))
                .expect("resolve"),
        )
        .expect("start");
    p.done().await;
    assert_eq!(p.read_output().delta, "out\n[stderr]\nerr\n");
}

#[tokio::test]
async fn lossy_reads_carry_both_spill_paths() {
    let cfg = ShellConfig {
        max_output_bytes: 100,
        grace_ms: 200,
        ..ShellConfig::default()
    };
    let sh = LocalBash::with_config(Arc::new(LocalSubprocess::new()), cfg).expect("cfg");
    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined("seq 1 1000; seq 1 1000 >&2"))
                .expect("resolve"),
        )
        .expect("start");
    p.done().await;
    let r = p.read_output();
    assert!(r.lossy);
    assert!(r.stdout_spill.is_some() && r.stderr_spill.is_some());
    assert!(r.delta.ends_with("1000\n"));
}

#[tokio::test]
async fn terminate_is_true_once_while_running_then_false() {
    let sh = bash();
    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined("sleep 1000"))
                .expect("resolve"),
        )
        .expect("start");
    assert!(p.terminate());
    assert_eq!(p.status(), ProcessStatus::Killed);
    assert!(!p.terminate());
    p.done().await;
    assert_eq!(
        (p.status(), p.signal()),
        (ProcessStatus::Killed, Some(Signal(15)))
    );

    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined("true"))
                .expect("resolve"),
        )
        .expect("start");
    p.done().await;
    assert!(!p.terminate());
    assert_eq!(p.status(), ProcessStatus::Completed);
}

#[tokio::test]
async fn a_term_trap_gets_sigkill_after_grace() {
    let sh = bash();
    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined(
                "trap '' TERM; echo ready; sleep 1000 & wait",
            ))
            .expect("resolve"),
        )
        .expect("start");
    read_until(&p, "ready").await;
    assert!(p.terminate());
    p.done().await;
    assert_eq!(p.signal(), Some(Signal(9)));
}

#[tokio::test]
async fn cancel_and_self_signal_both_end_killed() {
    let sh = bash();
    let cancel = CancelToken::new();
    let mut req = ShellRequest::unconfined("sleep 1000");
    req.cancel = Some(cancel.clone());
    let p = sh.start(sh.spec_for(req).expect("resolve")).expect("start");
    cancel.cancel("stop");
    p.done().await;
    assert_eq!(p.status(), ProcessStatus::Killed);

    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined("kill -TERM $$"))
                .expect("resolve"),
        )
        .expect("start");
    p.done().await;
    assert_eq!((p.status(), p.exit_code()), (ProcessStatus::Killed, None));
}

#[tokio::test]
async fn a_command_that_cannot_start_is_an_error_not_a_job() {
    let sh = bash();
    let mut req = ShellRequest::unconfined("true");
    req.workdir = Some("/no/such/dir".into());
    let e = sh
        .start(sh.spec_for(req).expect("resolve"))
        .expect_err("cwd");
    assert_eq!(e.code(), ErrorCode::ProcessCwdInvalid);
}

#[tokio::test]
async fn dropping_a_background_process_kills_it_and_shutdown_kills_the_rest() {
    let sub = Arc::new(LocalSubprocess::new());
    let sh = LocalBash::new(sub.clone());
    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined("sleep 1000"))
                .expect("resolve"),
        )
        .expect("start");
    let pid = p.pid();
    drop(p);
    let mut gone = false;
    for _ in 0..500 {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(gone, "background leader {pid} survived its handle");

    // A background process outlives its executor and dies with the subprocess service.
    let p = sh
        .start(
            sh.spec_for(ShellRequest::unconfined("trap '' TERM; sleep 1000"))
                .expect("resolve"),
        )
        .expect("start");
    drop(sh);
    assert_eq!(p.status(), ProcessStatus::Running);
    sub.shutdown().await;
    p.done().await;
    assert_eq!(p.status(), ProcessStatus::Killed);
}
