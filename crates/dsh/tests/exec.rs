//! `dsh exec` as a user runs it: real binary, real processes, exit statuses of timeout(1).

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn dsh() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dsh"))
}

fn exec(args: &[&str]) -> Output {
    dsh().arg("exec").args(args).output().expect("run dsh")
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

fn wait_gone(pid: i32) -> bool {
    for _ in 0..1000 {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn exit_status_is_the_programs_own() {
    let out = exec(&["--", "bash", "-c", "echo hi; exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    assert_eq!(exec(&["true"]).status.code(), Some(0));
}

#[test]
fn a_timeout_exits_124_even_when_sigkill_was_needed() {
    assert_eq!(
        exec(&["--timeout", "100", "--", "sleep", "1000"])
            .status
            .code(),
        Some(124)
    );
    // The trap is the script's first statement; the 500 ms timeout only stops a hang.
    let script = "trap '' TERM; sleep 1000 & wait";
    let out = exec(&[
        "--json",
        "--timeout",
        "500",
        "--grace",
        "100",
        "--",
        "bash",
        "-c",
        script,
    ]);
    assert_eq!(out.status.code(), Some(124));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v["signal"].as_str(),
        Some("SIGKILL"),
        "TERM was not ignored: {v}"
    );
}

#[test]
fn stdin_is_passed_through() {
    let mut child = dsh()
        .args(["exec", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn dsh");
    let mut stdin = child.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut stdin, b"piped into dsh").expect("write");
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "piped into dsh");
}

#[test]
fn a_signal_death_exits_128_plus_n() {
    assert_eq!(
        exec(&["--", "bash", "-c", "kill -KILL $$"]).status.code(),
        Some(137)
    );
    assert_eq!(
        exec(&["--", "bash", "-c", "kill -TERM $$"]).status.code(),
        Some(143)
    );
}

#[test]
fn missing_and_unexecutable_programs_exit_127_and_126() {
    let out = exec(&["--", "no-such-program-dsh"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PROCESS_NOT_FOUND"));
    assert_eq!(exec(&["--", "/etc"]).status.code(), Some(126));
}

#[test]
fn dsh_failures_exit_125_and_run_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let out = exec(&["-C", "/no/such/dir", "--", "bash", "-c", &touch]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PROCESS_CWD_INVALID"));
    let out = exec(&["--no-such-flag", "--", "bash", "-c", &touch]);
    assert_eq!(out.status.code(), Some(125));
    let out = exec(&["--timeout", "0", "--", "bash", "-c", &touch]);
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(exec(&[]).status.code(), Some(125));
    assert!(!marker.exists(), "a refused command ran");
}

#[test]
fn dash_c_sets_the_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_str().expect("utf8");
    let out = exec(&["-C", path, "--", "pwd"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), path);
}

#[test]
fn json_captures_instead_of_streaming() {
    let out = exec(&[
        "--json",
        "--",
        "bash",
        "-c",
        "echo out; echo err >&2; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(
        v,
        serde_json::json!({
            "exit_code": 3, "signal": null, "timed_out": false,
            "stdout": "out\n", "stderr": "err\n",
            "truncated": {"stdout": false, "stderr": false},
            "total_bytes": {"stdout": 4, "stderr": 4},
            "spill": {"stdout": null, "stderr": null},
        })
    );
    let out = exec(&["--json", "--timeout", "100", "--", "sleep", "1000"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        (v["timed_out"].as_bool(), v["signal"].as_str()),
        (Some(true), Some("SIGTERM"))
    );
}

#[test]
fn json_reports_truncation_and_a_kept_spill_file() {
    let out = exec(&["--json", "--", "seq", "1", "100000"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["truncated"]["stdout"], serde_json::json!(true));
    let path = v["spill"]["stdout"]["path"].as_str().expect("spill path");
    let full = std::fs::read_to_string(path).expect("spill file kept after dsh exited");
    assert_eq!(full.lines().count(), 100_000);
    assert!(v["stdout"]
        .as_str()
        .expect("text")
        .ends_with("99999\n100000\n"));
    let _ = std::fs::remove_dir_all(std::path::Path::new(path).parent().expect("dir"));
}

/// Starts `dsh` with `args` on a command that prints a pid on its first line; returns the
/// running dsh and that pid.
fn start_printing_pid(args: &[&str]) -> (std::process::Child, i32) {
    let mut child = dsh()
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn dsh");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    let pid: i32 = line.trim().parse().expect("pid");
    (child, pid)
}

/// Starts `dsh exec` on a script that prints the pid of a `setsid` escapee, then sleeps.
fn start_with_escapee() -> (std::process::Child, i32) {
    let script = "setsid sleep 1000 & echo $!; sleep 1000";
    let (child, pid) = start_printing_pid(&["exec", "--grace", "200", "--", "bash", "-c", script]);
    assert!(alive(pid));
    (child, pid)
}

#[test]
fn ctrl_c_terminates_the_whole_tree_and_exits_130() {
    let (mut child, escapee) = start_with_escapee();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    assert_eq!(child.wait().expect("wait").code(), Some(130));
    assert!(
        wait_gone(escapee),
        "the setsid escapee {escapee} survived Ctrl-C"
    );
}

#[test]
fn nothing_survives_dsh_being_sigkilled() {
    let (mut child, escapee) = start_with_escapee();
    child.kill().expect("SIGKILL dsh");
    child.wait().expect("wait");
    assert!(
        wait_gone(escapee),
        "the setsid escapee {escapee} survived dsh's death"
    );
}

#[test]
fn a_command_that_kills_its_own_reaper_leaves_nothing_behind() {
    // --no-cgroup: the subreaper-only path, where dsh exec itself adopts the orphans.
    for extra in [&["--no-cgroup"][..], &[][..]] {
        let mut args = vec!["exec"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[
            "--",
            "bash",
            "-c",
            "sleep 1000 & echo $!; kill -9 $PPID; sleep 1000",
        ]);
        let (mut child, pid) = start_printing_pid(&args);
        // Not `output()`: an escapee would hold the pipe open and hang the test.
        child.wait().expect("wait for dsh");
        let gone = wait_gone(pid);
        if !gone {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        assert!(gone, "{extra:?}: {pid} outlived dsh exec");
    }
}
