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
            "printed text where a frame was due",
        ),
        // A command not found: for `cmd:` it may be the transport itself, here.
        (
            "cmd:exec /nonexistent/dsh serve --stdio".into(),
            ErrorCode::RemoteDisconnected,
            "status 127",
        ),
        // The transport fails, and says why.
        (
            "cmd:echo 'ssh: connect to host h port 22: Connection refused' >&2; exit 255".into(),
            ErrorCode::RemoteDisconnected,
            "Connection refused",
        ),
        // The far workspace is not there: the far dsh's own code.
        (
            format!(
                "cmd:exec '{}' serve --stdio -C '{}'",
                dsh(),
                missing.display()
            ),
            ErrorCode::ProcessCwdInvalid,
            "not a directory",
        ),
        // The transport exits while something it started holds its output.
        (
            "cmd:sleep 1000 & exit 3".into(),
            ErrorCode::RemoteDisconnected,
            "status 3",
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

/// `dsh doctor --world URL` prints the far side's report, made there: the same checks as
/// the local one, or a coded error naming why it could not ask.
#[test]
fn dsh_doctor_reports_the_far_side() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!(
        "cmd:exec '{}' serve --stdio -C '{}'",
        dsh(),
        dir.path().display()
    );
    let far = std::process::Command::new(dsh())
        .args(["doctor", "--json", "--world", &url])
        .output()
        .expect("doctor");
    let here = std::process::Command::new(dsh())
        .args(["doctor", "--json"])
        .current_dir(dir.path())
        .output()
        .expect("doctor");
    let parse = |out: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let (far_report, local) = (parse(&far), parse(&here));
    let names = |r: &serde_json::Value| -> Vec<String> {
        r["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .map(|c| c["name"].as_str().expect("name").to_owned())
            .collect()
    };
    assert_eq!(names(&far_report), names(&local));
    assert_eq!(
        far_report["workspace"],
        dir.path().display().to_string(),
        "made in the far workspace"
    );
    assert_eq!(far.status.code(), here.status.code());
    assert_eq!(
        far_report["world"]["same_binary"], true,
        "{}",
        far_report["world"]
    );
    assert_eq!(far_report["world"]["version"], env!("CARGO_PKG_VERSION"));
    let text = std::process::Command::new(dsh())
        .args(["doctor", "--world", &url])
        .output()
        .expect("doctor");
    let shown = String::from_utf8_lossy(&text.stdout);
    assert!(
        shown.starts_with(&format!("dsh doctor: what {url} can enforce")),
        "{shown}"
    );
    assert!(shown.contains("the same as this one"), "{shown}");
    // A cmd: world starts its own dsh: naming one is a mistake, said before connecting.
    let out = std::process::Command::new(dsh())
        .args([
            "doctor",
            "--json",
            "--world",
            &url,
            "--remote-dsh",
            "/nope/dsh",
        ])
        .output()
        .expect("doctor");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(answer["error"]["code"], "INVALID_ARGUMENT", "{answer}");
    for (world, code) in [
        ("http://h/w", "INVALID_ARGUMENT"),
        ("cmd:exec cat", "REMOTE_INCOMPATIBLE"),
        ("cmd:exit 3", "REMOTE_DISCONNECTED"),
    ] {
        let out = std::process::Command::new(dsh())
            .args(["doctor", "--world", world])
            .output()
            .expect("doctor");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{world}: {err}");
        assert!(err.contains(code), "{world}: {err}");
        assert!(out.stdout.is_empty(), "{world}: no report of this machine");
    }
}

/// A far side that never answers the handshake is given up on, and what the transport
/// started here is killed with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_far_side_is_given_up_on_and_killed() {
    let marker = format!("1002.{}", std::process::id());
    let url: WorldUrl = format!("cmd:sleep {marker}; true").parse().expect("url");
    let e = Channel::connect_within(&url, "dsh", std::time::Duration::from_millis(500))
        .await
        .expect_err("silent");
    assert_eq!(e.code(), ErrorCode::RemoteDisconnected, "{e}");
    assert!(e.message().contains("no answer to the handshake"), "{e}");
    let gone = (0..500).any(|_| {
        let alive = std::fs::read_dir("/proc")
            .expect("proc")
            .flatten()
            .any(|p| {
                std::fs::read(p.path().join("cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains(&marker))
                    .unwrap_or(false)
                    && !std::fs::read_to_string(p.path().join("stat"))
                        .unwrap_or_default()
                        .contains(") Z")
            });
        if alive {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        !alive
    });
    assert!(gone, "the transport's sleep outlived its channel");
}

/// A request dropped while its frame is on its way leaves the channel whole: the frame
/// goes whole or not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_request_leaves_the_channel_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let far = Channel::connect(&far_side(dir.path()), "dsh")
        .await
        .expect("connect");
    let big = "x".repeat(8 << 20);
    for _ in 0..3 {
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(1),
            far.request("no/such", json!({ "data": big })),
        )
        .await;
    }
    assert_eq!(
        far.request("ping", json!({})).await.expect("answered"),
        json!({})
    );
}
