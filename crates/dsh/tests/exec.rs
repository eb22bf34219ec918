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

use dsh_testkit::alive;

fn wait_gone(pid: i32) -> bool {
    dsh_testkit::wait_gone(pid, Duration::from_secs(10))
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
fn a_timeout_while_the_output_drains_after_the_program_exited_is_not_one() {
    // `sh` exits at once; its background `sleep` holds the captured stdout, so the output
    // drains for up to the grace (1 s), during which the 300 ms timeout passes.
    let out = exec(&[
        "--json",
        "--mode",
        "danger-full-access",
        "--timeout",
        "300",
        "--grace",
        "1000",
        "--",
        "sh",
        "-c",
        "sleep 100 & echo hi",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["timed_out"], false, "{v}");
    assert_eq!(v["exit_code"], 0, "{v}");
    assert_eq!(v["stdout"], "hi\n", "{v}");
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
    // Unconfined, so that the marker's absence proves nothing ran.
    let full = ["--mode", "danger-full-access"];
    let out = exec(
        &[
            &full[..],
            &["-C", "/no/such/dir", "--", "bash", "-c", &touch],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("PROCESS_CWD_INVALID"));
    let out = exec(&[&full[..], &["--no-such-flag", "--", "bash", "-c", &touch]].concat());
    assert_eq!(out.status.code(), Some(125));
    let out = exec(&[&full[..], &["--timeout", "0", "--", "bash", "-c", &touch]].concat());
    assert_eq!(out.status.code(), Some(125));
    let out = exec(&["--mode", "wide-open", "--", "bash", "-c", &touch]);
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
    let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let sandbox = v
        .as_object_mut()
        .and_then(|o| o.remove("sandbox"))
        .expect("sandbox facts");
    assert_eq!(sandbox["mode"], "read-only");
    assert_eq!(sandbox["network"], "deny");
    assert_eq!(sandbox["denied"], false);
    assert!(["landlock", "bwrap"].contains(&sandbox["runner"].as_str().unwrap_or("")));
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
    // Unconfined: a confined command cannot signal its reaper at all (next test).
    for extra in [&["--no-cgroup"][..], &[][..]] {
        let mut args = vec!["exec", "--mode", "danger-full-access"];
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

/// A canonical temporary workspace.
#[test]
fn children_dsh_inherits_from_the_shell_that_execs_it_are_not_the_commands() {
    // `sh` starts a background job, then becomes dsh: the job is dsh's child from the
    // start, not an orphan of the command, and must outlive `dsh exec`.
    let script = format!(
        "sleep 1000 >/dev/null 2>&1 & echo $!; exec '{}' exec --mode danger-full-access -- true",
        env!("CARGO_BIN_EXE_dsh")
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .stderr(Stdio::inherit())
        .output()
        .expect("sh");
    assert_eq!(out.status.code(), Some(0));
    let pid: i32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the job's pid");
    let survived = alive(pid);
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    assert!(
        survived,
        "dsh exec killed a job that was never the command's"
    );
}

fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    (dir, ws)
}

#[test]
fn exec_is_read_only_by_default() {
    let (_d, ws) = workspace();
    let ws_s = ws.to_str().expect("utf-8");
    let out = exec(&["-C", ws_s, "--", "bash", "-c", "echo x > f"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(!ws.join("f").exists());
    let out = exec(&[
        "-C",
        ws_s,
        "--mode",
        "danger-full-access",
        "--",
        "bash",
        "-c",
        "echo x > f",
    ]);
    assert_eq!(out.status.code(), Some(0));
    assert!(ws.join("f").exists());
}

#[test]
fn workspace_write_and_writable_dirs_land_on_the_host() {
    let (_d, ws) = workspace();
    let (_e, extra) = workspace();
    let (ws_s, extra_s) = (ws.to_str().expect("utf-8"), extra.to_str().expect("utf-8"));
    let script = format!("echo in > f && echo more > '{extra_s}/g'");
    let out = exec(&[
        "-C",
        ws_s,
        "--mode",
        "workspace-write",
        "--writable",
        extra_s,
        "--",
        "bash",
        "-c",
        &script,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(ws.join("f")).expect("f"), "in\n");
    assert_eq!(
        std::fs::read_to_string(extra.join("g")).expect("g"),
        "more\n"
    );
    // Without the flag the extra dir is read-only.
    let out = exec(&[
        "-C",
        ws_s,
        "--mode",
        "workspace-write",
        "--",
        "bash",
        "-c",
        &script,
    ]);
    assert_ne!(out.status.code(), Some(0));
    // --writable is refused outside workspace-write, and nothing runs.
    let out = exec(&["-C", ws_s, "--writable", extra_s, "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("INVALID_ARGUMENT"));
}

#[test]
fn the_runner_can_be_forced_and_an_impossible_one_is_sandbox_unavailable() {
    let out = exec(&["--json", "--runner", "bwrap", "--", "true"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    if out.status.code() == Some(0) {
        assert_eq!(v["sandbox"]["runner"], "bwrap");
    } else {
        dsh_testkit::skip(
            dsh_testkit::Need::Bwrap,
            &format!("dsh exec could not use it: {v}"),
        );
        assert_eq!(v["error"]["code"], "SANDBOX_UNAVAILABLE");
    }
    let marker = workspace();
    let touch = format!("touch '{}/ran'", marker.1.display());
    let out = exec(&[
        "--runner",
        "seatbelt",
        "--mode",
        "workspace-write",
        "--",
        "bash",
        "-c",
        &touch,
    ]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("SANDBOX_UNAVAILABLE") && err.contains("danger-full-access"),
        "{err}"
    );
    assert!(!marker.1.join("ran").exists());
    let out = exec(&["--runner", "chroot", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn a_confined_command_cannot_signal_its_reaper() {
    // Killing the reaper takes the command down with it (PR_SET_PDEATHSIG): "survived"
    // proves the kill did not land.
    let script = "kill -9 $PPID 2>/dev/null; sleep 0.3; echo survived";
    let out = exec(&[
        "--json",
        "--mode",
        "danger-full-access",
        "--",
        "bash",
        "-c",
        script,
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_ne!(
        v["stdout"], "survived\n",
        "unconfined, the kill must land: {v}"
    );
    for runner in ["bwrap", "landlock"] {
        let out = exec(&["--json", "--runner", runner, "--", "bash", "-c", script]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        if v["error"]["code"] == "SANDBOX_UNAVAILABLE" {
            continue;
        }
        // Landlock scopes signals from ABI 6 (Linux 6.12); bwrap hides the reaper behind
        // its pid namespace.
        if runner == "landlock" && landlock_abi() < 6 {
            continue;
        }
        assert_eq!(v["stdout"], "survived\n", "{runner}: {v}");
        assert_eq!(v["exit_code"], 0, "{runner}: {v}");
    }
}

fn landlock_abi() -> i64 {
    let out = dsh().args(["doctor", "--json"]).output().expect("doctor");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    v["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "landlock-abi"))
        .and_then(|c| c["detail"].as_str())
        .and_then(|d| d.strip_prefix("ABI "))
        .and_then(|d| d.split(':').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn doctor_reports_runners_and_proves_enforcement() {
    let out = dsh().args(["doctor", "--json"]).output().expect("doctor");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let checks = v["checks"].as_array().expect("checks");
    for name in [
        "landlock",
        "bwrap",
        "landlock-abi",
        "seccomp",
        "user-namespaces",
        "openat2",
        "cgroup-v2",
        "process-limit",
    ] {
        let c = checks
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {v}"));
        if c["ok"] == false {
            assert!(
                c["fix"].is_string(),
                "{name} is not ok and says no fix: {c}"
            );
        }
    }
    if dsh_testkit::Need::Bwrap.required() {
        let bwrap = checks.iter().find(|c| c["name"] == "bwrap").expect("bwrap");
        assert_eq!(bwrap["ok"], true, "{bwrap}");
    }
    if dsh_testkit::Need::ProcessLimit.required() {
        let limit = checks.iter().find(|c| c["name"] == "process-limit");
        let limit = limit.expect("process-limit");
        assert_eq!(limit["ok"], true, "{limit}");
        assert!(
            limit["detail"]
                .as_str()
                .unwrap_or("")
                .starts_with("at most 4096"),
            "{limit}"
        );
    }
    let tests = v["self_test"].as_array().expect("self_test");
    assert!(!tests.is_empty(), "no runner was tested: {v}");
    for t in tests {
        assert_eq!(t["ok"], true, "{t}");
        assert!(
            t["detail"].as_str().unwrap_or("").starts_with("refused"),
            "{t}"
        );
    }
    assert_eq!(v["healthy"], true);
    assert_eq!(out.status.code(), Some(0));
    let text = dsh().arg("doctor").output().expect("doctor");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("self-test") && text.contains("modes"),
        "{text}"
    );
}

/// `dsh doctor` names the config files it read and says which are absent (the defaults
/// apply), rather than calling a missing file valid.
#[test]
fn doctor_says_which_config_files_exist() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical");
    let (xdg, ws) = (root.join("xdg"), root.join("ws"));
    std::fs::create_dir_all(xdg.join("dsh")).expect("xdg");
    std::fs::create_dir_all(&ws).expect("ws");
    let detail = || {
        let out = dsh()
            .args(["doctor", "--json"])
            .current_dir(&ws)
            .env("XDG_CONFIG_HOME", &xdg)
            .output()
            .expect("doctor");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let check = v["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "config").cloned())
            .expect("a config check");
        assert_eq!(check["ok"], true, "{check}");
        check["detail"].as_str().unwrap_or_default().to_owned()
    };
    let user = xdg.join("dsh/config.toml");
    let d = detail();
    assert!(d.starts_with("no config file ("), "{d}");
    assert!(
        d.contains(&user.display().to_string()) && d.contains("absent"),
        "{d}"
    );
    std::fs::write(&user, "mode = \"read-only\"\n").expect("config");
    let d = detail();
    assert!(d.starts_with(&format!("valid ({})", user.display())), "{d}");
    assert!(
        d.contains(&format!("{} absent", ws.join(".dsh/config.toml").display())),
        "{d}"
    );
}
