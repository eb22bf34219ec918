//! A remote world's channel with the real `dsh serve --stdio` on the far side, reached
//! over `cmd:` (and an unreachable `ssh://`): the handshake, answers by id, and a coded
//! error, never a hang or a local run, for every far side that is not a dsh of this
//! protocol or goes away.

use std::path::Path;

use dsh_core::ErrorCode;
use dsh_remote::{Channel, WorldUrl};
use serde_json::json;

fn dsh() -> &'static str {
    env!("CARGO_BIN_EXE_dsh")
}

fn far_side(dir: &Path) -> WorldUrl {
    format!("cmd:exec '{}' serve --stdio -C '{}'", dsh(), dir.display())
        .parse()
        .expect("url")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_names_the_far_dsh_and_requests_are_answered_by_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let far = Channel::connect(&far_side(dir.path()), "dsh")
        .await
        .expect("connect");
    let info = far.info();
    assert_eq!(info.protocol, dsh_remote::wire::PROTOCOL);
    assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(
        info.binary_sha256,
        dsh_remote::binary_sha256(Path::new(dsh())).expect("hash")
    );
    assert_eq!(
        (info.os.as_str(), info.arch.as_str()),
        (std::env::consts::OS, std::env::consts::ARCH)
    );
    let (a, b) = tokio::join!(
        far.request("ping", json!({})),
        far.request("ping", json!({}))
    );
    assert_eq!((a.expect("a"), b.expect("b")), (json!({}), json!({})));
    // A request this far side does not know is refused, and the channel goes on.
    let e = far
        .request("fs/teleport", json!({}))
        .await
        .expect_err("unknown");
    assert_eq!(e.code(), ErrorCode::RemoteIncompatible, "{e}");
    far.request("ping", json!({}))
        .await
        .expect("still answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_far_side_that_goes_away_fails_each_request_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let far = Channel::connect(&far_side(dir.path()), "dsh")
        .await
        .expect("connect");
    let pid = far.transport_pid().expect("pid");
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("kill");
    for _ in 0..2 {
        let e = far.request("ping", json!({})).await.expect_err("gone");
        assert_eq!(e.code(), ErrorCode::RemoteDisconnected, "{e}");
        assert!(e.message().contains("nothing ran locally"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_a_dsh_far_side_is_a_coded_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    let cases: Vec<(String, ErrorCode, &str)> = vec![
        // A transport that echoes the handshake back.
        (
            "cmd:exec cat".into(),
            ErrorCode::RemoteIncompatible,
            "answer was due",
        ),
        // A far side that prints a greeting: not a frame.
        (
            "cmd:echo hello; sleep 30".into(),
            ErrorCode::RemoteIncompatible,
            "over the",
        ),
        // No dsh there.
        (
            "cmd:exec no-such-dsh-here serve --stdio".into(),
            ErrorCode::RemoteIncompatible,
            "there is no dsh",
        ),
        // The transport fails, and says why.
        (
            "cmd:echo 'ssh: connect to host h port 22: Connection refused' >&2; exit 255".into(),
            ErrorCode::RemoteDisconnected,
            "Connection refused",
        ),
        // The far workspace is not there.
        (
            format!(
                "cmd:exec '{}' serve --stdio -C '{}'",
                dsh(),
                missing.display()
            ),
            ErrorCode::RemoteDisconnected,
            "not a directory",
        ),
    ];
    for (url, code, says) in cases {
        let url: WorldUrl = url.parse().expect("url");
        let e = Channel::connect(&url, "dsh")
            .await
            .expect_err("not a dsh far side");
        assert_eq!(e.code(), code, "{url}: {e}");
        assert!(e.message().contains(says), "{url}: {e}");
    }
}

/// An ssh world to a port nobody listens on: the system client's refusal, coded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_ssh_host_is_a_coded_error_naming_the_cause() {
    if let Err(e) = std::process::Command::new("ssh").arg("-V").output() {
        dsh_testkit::skip(
            dsh_testkit::Need::SystemTool,
            &format!("no ssh client: {e}"),
        );
        return;
    }
    let url: WorldUrl = "ssh://127.0.0.1:1/w".parse().expect("url");
    let e = Channel::connect(&url, "dsh")
        .await
        .expect_err("unreachable");
    assert_eq!(e.code(), ErrorCode::RemoteDisconnected, "{e}");
    assert!(e.message().contains("status 255"), "{e}");
}

#[test]
fn dsh_serve_ends_when_its_input_ends() {
    let mut child = std::process::Command::new(dsh())
        .args(["serve", "--stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdin.take());
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}");
}
