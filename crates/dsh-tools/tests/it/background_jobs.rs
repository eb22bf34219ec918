//! Background `bash` and the job tools, with real commands: `run_in_background`,
//! `job_output`, `job_list`, `job_kill`, the limit, ownership and bad input.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_core::CancelToken;
use dsh_sandbox::SandboxMode;
use dsh_store::session::{Session, SessionLog};
use dsh_store::SqliteStorage;
use dsh_tools::{Preset, ToolResult, World, WorldBuilder, WorldConfig};
use serde_json::{json, Value};

use crate::support::{call, code};

async fn world(ws: &std::path::Path, mode: SandboxMode) -> (World, Arc<Session>, Arc<SessionLog>) {
    let storage = Arc::new(SqliteStorage::open(ws.join("state/dsh.db")).expect("sqlite"));
    let sessions = Arc::new(SessionLog::new(storage).await.expect("log"));
    let session = sessions.create(ws).await.expect("session");
    let config = WorldConfig::new(ws).with_mode(mode);
    let preset = if mode.is_confined() {
        Preset::Sandboxed
    } else {
        Preset::Local
    };
    let world = WorldBuilder::new()
        .preset(preset, &config, sessions.clone())
        .and_then(WorldBuilder::build)
        .expect("world");
    (world, session, sessions)
}

async fn tool(world: &World, session: &Arc<Session>, name: &str, args: Value) -> ToolResult {
    world
        .call(Some(session), call(name, args), CancelToken::new())
        .await
}

/// `job_output` of `id` after waiting for its end.
async fn wait_output(world: &World, session: &Arc<Session>, id: &str) -> ToolResult {
    tool(
        world,
        session,
        "job_output",
        json!({"job_id": id, "wait": true}),
    )
    .await
}

async fn background(world: &World, session: &Arc<Session>, command: &str) -> ToolResult {
    tool(
        world,
        session,
        "bash",
        json!({"command": command, "description": "t", "run_in_background": true}),
    )
    .await
}

/// Reads job `id` until its program has printed `P=<pid>`; returns the pid. (The echoed
/// command line may hold "P=" too: only digits after it count.)
async fn printed_pid(world: &World, session: &Arc<Session>, id: &str) -> u32 {
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = text.split("P=").skip(1).find_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        if let Some(pid) = found {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid yet: {text:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let r = tool(world, session, "job_output", json!({"job_id": id})).await;
        text.push_str(&r.text);
    }
}

fn alive(pid: u32) -> bool {
    dsh_testkit::alive(pid as i32)
}

async fn gone_within(pid: u32, limit: Duration) -> bool {
    dsh_testkit::gone_within(pid as i32, limit).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_command_is_acknowledged_at_once_and_read_when_it_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world(&ws, SandboxMode::DangerFullAccess).await;
    // The command waits for a file this test makes only after the acknowledgement: the
    // call cannot have waited for it.
    let go = ws.join("go");
    let command = format!(
        "while [ ! -e '{}' ]; do sleep 0.02; done; echo done",
        go.display()
    );
    let r = background(&world, &session, &command).await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.text, "started background job bash-1");
    let r = tool(&world, &session, "job_output", json!({"job_id": "bash-1"})).await;
    assert_eq!(r.text, "(no new output)\n[status: running]");
    std::fs::write(&go, "").expect("go");
    let r = wait_output(&world, &session, "bash-1").await;
    assert_eq!(r.text, "done\n[status: completed, exit code: 0]", "{r:?}");
    // Consumed: nothing new, the status stays.
    let r = tool(&world, &session, "job_output", json!({"job_id": "bash-1"})).await;
    assert_eq!(r.text, "(no new output)\n[status: completed, exit code: 0]");
    let r = tool(&world, &session, "job_list", json!({})).await;
    assert_eq!(r.text, format!("bash-1 [bash] completed — {command}"));
    // A wait on a finished job returns at once; a kill of it says it had finished.
    let r = tool(
        &world,
        &session,
        "job_output",
        json!({"job_id": "bash-1", "wait": true, "timeout_ms": 1}),
    )
    .await;
    assert!(
        r.text.ends_with("[status: completed, exit code: 0]"),
        "{r:?}"
    );
    let r = tool(&world, &session, "job_kill", json!({"job_id": "bash-1"})).await;
    assert_eq!(
        r.text,
        "job bash-1 had already finished [status: completed, exit code: 0]"
    );
    // stderr and a failing exit.
    let r = background(&world, &session, "echo out; echo err >&2; exit 3").await;
    assert_eq!(r.text, "started background job bash-2");
    let r = wait_output(&world, &session, "bash-2").await;
    assert_eq!(
        r.text, "out\n[stderr]\nerr\n[status: completed, exit code: 3]",
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_kill_ends_the_whole_tree_daemons_and_term_ignorers_included() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world(&ws, SandboxMode::DangerFullAccess).await;
    let r = background(
        &world,
        &session,
        "setsid sh -c 'echo D=$$; exec sleep 1000' & (trap '' TERM; echo T=$BASHPID; exec sleep 1001) & wait",
    )
    .await;
    assert_eq!(r.text, "started background job bash-1");
    let mut text = String::new();
    for _ in 0..100 {
        let r = tool(&world, &session, "job_output", json!({"job_id": "bash-1"})).await;
        if let Some((body, _)) = r.text.rsplit_once('\n') {
            if body != "(no new output)" {
                text.push_str(body);
                text.push('\n');
            }
        }
        if text.contains("D=") && text.contains("T=") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = |k: &str| -> u32 {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("{k} in {text:?}"))
    };
    let (daemon, stubborn) = (pid("D="), pid("T="));
    assert!(alive(daemon) && alive(stubborn));
    let r = tool(
        &world,
        &session,
        "job_kill",
        json!({"job_id": "bash-1", "reason": "not needed"}),
    )
    .await;
    assert_eq!(r.text, "requested cancellation of job bash-1");
    assert_eq!(
        r.meta.as_ref().expect("meta")["outcome"],
        "cancellation-requested"
    );
    assert!(
        gone_within(daemon, Duration::from_secs(10)).await,
        "the setsid daemon survived"
    );
    assert!(
        gone_within(stubborn, Duration::from_secs(10)).await,
        "the TERM ignorer survived"
    );
    let r = wait_output(&world, &session, "bash-1").await;
    assert!(
        r.text.ends_with("[status: killed, signal: SIGTERM]"),
        "{r:?}"
    );
    let r = tool(&world, &session, "job_kill", json!({"job_id": "bash-1"})).await;
    assert!(
        r.text
            .starts_with("job bash-1 had already finished [status: killed"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eleventh_job_is_refused_until_one_settles() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world(&ws, SandboxMode::DangerFullAccess).await;
    for n in 1..=10 {
        let r = background(&world, &session, "sleep 100").await;
        assert_eq!(r.text, format!("started background job bash-{n}"));
    }
    let r = background(&world, &session, "sleep 100").await;
    assert!(r.is_error);
    assert_eq!(code(&r), Some("JOB_LIMIT"));
    assert!(r.text.contains("job_kill"), "{}", r.text);
    tool(&world, &session, "job_kill", json!({"job_id": "bash-3"})).await;
    wait_output(&world, &session, "bash-3").await;
    // No number was used by the refusal.
    let r = background(&world, &session, "true").await;
    assert_eq!(r.text, "started background job bash-11");
    world.end_jobs(Some(session.id())).await;
    let r = tool(&world, &session, "job_list", json!({})).await;
    assert_eq!(r.text, "(no background jobs)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_coded_error_or_the_pinned_rendering() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, log) = world(&ws, SandboxMode::DangerFullAccess).await;
    let r = tool(&world, &session, "job_output", json!({"job_id": ""})).await;
    assert_eq!(
        r.text,
        "Error: invalid job_id: expected a non-empty string, got \"\""
    );
    assert_eq!(code(&r), Some("INVALID_ARGS"));
    for name in ["job_output", "job_kill"] {
        let r = tool(&world, &session, name, json!({"job_id": "bash-99"})).await;
        assert_eq!(code(&r), Some("NO_JOB"), "{name}: {r:?}");
        assert!(r.text.contains("unknown job"), "{r:?}");
    }
    background(&world, &session, "sleep 0.3; echo late").await;
    for bad in [json!(-5), json!(0), json!("x")] {
        let r = tool(
            &world,
            &session,
            "job_output",
            json!({"job_id": "bash-1", "wait": true, "timeout_ms": bad}),
        )
        .await;
        assert!(r.is_error, "{bad}: {r:?}");
    }
    // A huge timeout is clamped, and the wait ends when the job does.
    let wait = tool(
        &world,
        &session,
        "job_output",
        json!({"job_id": "bash-1", "wait": true, "timeout_ms": 1e300}),
    );
    let r = tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("the wait ends when the job does");
    assert_eq!(r.text, "late\n[status: completed, exit code: 0]", "{r:?}");
    // Another session sees nothing of this one's jobs.
    let other = log.create(&ws).await.expect("session");
    let r = tool(&world, &other, "job_list", json!({})).await;
    assert_eq!(r.text, "(no background jobs)");
    for name in ["job_output", "job_kill"] {
        let r = tool(&world, &other, name, json!({"job_id": "bash-1"})).await;
        assert_eq!(code(&r), Some("FOREIGN_JOB"), "{name}: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_workspace_write_job_makes_is_checked_when_it_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world(&ws, SandboxMode::WorkspaceWrite).await;
    // After the call returned, the job plants a repository whose hook the host's git
    // would run.
    let r = background(
        &world,
        &session,
        "sleep 0.3; git init -q sub && printf '#!/bin/sh\\necho pwned\\n' > sub/.git/hooks/pre-commit",
    )
    .await;
    assert_eq!(r.text, "started background job bash-1", "{r:?}");
    let r = wait_output(&world, &session, "bash-1").await;
    assert!(
        r.text.contains("[sandbox: this call made"),
        "the check after the job did not run: {r:?}"
    );
    assert!(
        r.text.ends_with("[status: completed, exit code: 0]"),
        "{r:?}"
    );
    assert!(
        !ws.join("sub/.git/hooks/pre-commit").exists(),
        "the planted hook is still where git would run it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_terminal_send_is_a_pty_send_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world(&ws, SandboxMode::DangerFullAccess).await;
    let r = tool(&world, &session, "terminal_open", json!({"type": "shell"})).await;
    assert!(!r.is_error, "{r:?}");
    let send = |text: &str, background: bool| json!({"sessionId": "pty-1", "text": text, "run_in_background": background});
    // A refused send starts no job and uses no number.
    let r = tool(
        &world,
        &session,
        "terminal_send",
        json!({"sessionId": "pty-9", "text": "x", "run_in_background": true}),
    )
    .await;
    assert_eq!(code(&r), Some("NO_SESSION"), "{r:?}");
    let r = tool(
        &world,
        &session,
        "terminal_send",
        send("sleep 0.5; echo hi", true),
    )
    .await;
    assert_eq!(r.text, "started background job pty-send-1", "{r:?}");
    // The terminal is busy with it meanwhile.
    let r = tool(&world, &session, "terminal_send", send("echo no", false)).await;
    assert_eq!(code(&r), Some("SEND_ACTIVE"), "{r:?}");
    // Its output streams: complete lines as they come, each once, the rest at the end.
    let r = tool(
        &world,
        &session,
        "job_output",
        json!({"job_id": "pty-send-1"}),
    )
    .await;
    assert!(r.text.ends_with("[status: running]"), "{r:?}");
    assert!(!r.text.lines().any(|l| l == "hi"), "{r:?}");
    let mut shown = r.text.trim_end_matches("[status: running]").to_owned();
    let r = wait_output(&world, &session, "pty-send-1").await;
    assert!(
        r.text.ends_with("[status: completed, wait: stdin_read]"),
        "{r:?}"
    );
    shown.push_str(&r.text);
    assert_eq!(shown.matches("\nhi\n").count(), 1, "{shown:?}");
    assert_eq!(shown.matches("echo hi").count(), 1, "{shown:?}");
    // A kill interrupts the program; the shell lives on.
    let r = tool(&world, &session, "terminal_send", send("sleep 100", true)).await;
    assert_eq!(r.text, "started background job pty-send-2", "{r:?}");
    let r = tool(&world, &session, "job_list", json!({})).await;
    assert!(
        r.text
            .contains("pty-send-2 [pty-send] running — pty-1: sleep 100"),
        "{r:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = tool(
        &world,
        &session,
        "job_kill",
        json!({"job_id": "pty-send-2"}),
    )
    .await;
    assert_eq!(r.text, "requested cancellation of job pty-send-2");
    let r = wait_output(&world, &session, "pty-send-2").await;
    assert!(
        r.text.ends_with("[status: killed, wait: stdin_read]"),
        "{r:?}"
    );
    let r = tool(&world, &session, "terminal_send", send("echo alive", false)).await;
    assert!(r.text.contains("\nalive\n"), "{r:?}");
}

/// `job_output` of a running background send shows the lines printed so far, before the
/// send settles, and the final read only what came after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_terminal_send_shows_its_output_as_it_comes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world(&ws, SandboxMode::WorkspaceWrite).await;
    let r = tool(&world, &session, "terminal_open", json!({"type": "shell"})).await;
    assert!(!r.is_error, "{r:?}");
    // The sleep goes on until the test has seen the first line: no race with a timer.
    std::fs::write(ws.join("go"), "").expect("go");
    let r = tool(
        &world,
        &session,
        "terminal_send",
        json!({"sessionId": "pty-1", "run_in_background": true,
               "text": "printf 'first-%s\\n' line; while [ -e go ]; do sleep 0.05; done; printf 'second-%s\\n' line"}),
    )
    .await;
    assert_eq!(r.text, "started background job pty-send-1", "{r:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut early = String::new();
    while !early.contains("first-line\n") {
        assert!(Instant::now() < deadline, "no first line yet: {early:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let r = tool(
            &world,
            &session,
            "job_output",
            json!({"job_id": "pty-send-1"}),
        )
        .await;
        assert!(r.text.ends_with("\n[status: running]"), "{r:?}");
        early.push_str(r.text.trim_end_matches("[status: running]"));
    }
    assert!(!early.contains("second-line"), "{early:?}");
    std::fs::remove_file(ws.join("go")).expect("rm go");
    let r = wait_output(&world, &session, "pty-send-1").await;
    assert!(
        r.text.ends_with("[status: completed, wait: stdin_read]"),
        "{r:?}"
    );
    assert!(r.text.contains("second-line\n"), "{r:?}");
    assert!(
        !r.text.contains("first-line"),
        "a line was shown twice: {r:?}"
    );
    // Nothing after the end.
    let r = tool(
        &world,
        &session,
        "job_output",
        json!({"job_id": "pty-send-1"}),
    )
    .await;
    assert!(
        r.text.starts_with("(no new output)\n[status: completed"),
        "{r:?}"
    );
}

/// `job_kill` of a background send whose program ignores the interrupt (and SIGTERM)
/// still ends it: SIGTERM, then SIGKILL, each after a grace, past the send's own
/// deadline; the shell lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_kill_ends_a_terminal_program_that_ignores_the_interrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world(&ws, SandboxMode::DangerFullAccess).await;
    let r = tool(&world, &session, "terminal_open", json!({"type": "shell"})).await;
    assert!(!r.is_error, "{r:?}");
    let r = tool(
        &world,
        &session,
        "terminal_send",
        json!({"sessionId": "pty-1", "run_in_background": true, "timeout_ms": 3000,
               "text": "bash -c 'trap \"\" INT TERM; echo P=$$; exec sleep 1000'"}),
    )
    .await;
    assert_eq!(r.text, "started background job pty-send-1", "{r:?}");
    let pid = printed_pid(&world, &session, "pty-send-1").await;
    let r = tool(
        &world,
        &session,
        "job_kill",
        json!({"job_id": "pty-send-1"}),
    )
    .await;
    assert_eq!(r.text, "requested cancellation of job pty-send-1", "{r:?}");
    let r = wait_output(&world, &session, "pty-send-1").await;
    assert!(
        r.text.ends_with("[status: killed, wait: stdin_read]"),
        "the shell did not get the terminal back: {r:?}"
    );
    assert!(
        gone_within(pid, Duration::from_secs(2)).await,
        "{pid} still runs"
    );
    let r = tool(
        &world,
        &session,
        "terminal_send",
        json!({"sessionId": "pty-1", "text": "echo alive"}),
    )
    .await;
    assert!(r.text.contains("\nalive\n"), "{r:?}");
}

/// `job_kill` of a background send typed into a REPL interrupts what it runs, never the
/// REPL itself: its state survives, and the next send still goes to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_kill_of_a_send_into_a_repl_leaves_the_repl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world(&ws, SandboxMode::DangerFullAccess).await;
    let r = tool(&world, &session, "terminal_open", json!({"type": "shell"})).await;
    assert!(!r.is_error, "{r:?}");
    let send = |text: &str, background: bool| json!({"sessionId": "pty-1", "text": text, "run_in_background": background});
    let r = tool(&world, &session, "terminal_send", send("python3 -q", false)).await;
    assert!(r.text.contains("[wait: stdin_read]"), "{r:?}");
    // The REPL ignores the interrupt from now on, so nothing but a kill would stop it.
    let r = tool(
        &world,
        &session,
        "terminal_send",
        send(
            "import signal, time; x = 41; signal.signal(signal.SIGINT, signal.SIG_IGN)",
            false,
        ),
    )
    .await;
    assert!(r.text.contains("[wait: stdin_read]"), "{r:?}");
    let r = tool(
        &world,
        &session,
        "terminal_send",
        send("time.sleep(6); print('slept')", true),
    )
    .await;
    assert_eq!(r.text, "started background job pty-send-1", "{r:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = tool(
        &world,
        &session,
        "job_kill",
        json!({"job_id": "pty-send-1"}),
    )
    .await;
    assert_eq!(r.text, "requested cancellation of job pty-send-1", "{r:?}");
    let r = wait_output(&world, &session, "pty-send-1").await;
    assert!(r.text.contains("[status: killed"), "{r:?}");
    // Still the REPL, with its state, once the sleep is over.
    let r = tool(
        &world,
        &session,
        "terminal_send",
        json!({"sessionId": "pty-1", "text": "print(x + 1)", "timeout_ms": 20000}),
    )
    .await;
    assert!(r.text.lines().any(|l| l == "42"), "the REPL is gone: {r:?}");
}

/// `job_kill` ends what a background send started even when no single program holds
/// out: a shell loop whose items shrug off the interrupt stops, and a program that waits
/// for input after ignoring it does not take the next send's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_kill_stops_a_shell_loop_and_a_program_waiting_for_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world(&ws, SandboxMode::DangerFullAccess).await;
    let r = tool(&world, &session, "terminal_open", json!({"type": "shell"})).await;
    assert!(!r.is_error, "{r:?}");
    // A job an earlier send started, forking all along: the kills must leave it alone.
    let r = tool(
        &world,
        &session,
        "terminal_send",
        // `timeout` puts each child in a group of its own.
        json!({"sessionId": "pty-1", "text": "(while :; do timeout 20 sleep 0.1; echo rc=$? >> ticks; done) &"}),
    )
    .await;
    assert!(r.text.contains("[wait: stdin_read]"), "{r:?}");
    // Another whose children are orphans at once, each in a group of its own.
    let r = tool(
        &world,
        &session,
        "terminal_send",
        json!({"sessionId": "pty-1", "text": "(while :; do (timeout 20 sh -c 'trap \"echo TERM >> terms\" TERM; sleep 1.5 & wait' &); sleep 0.3; done) &"}),
    )
    .await;
    assert!(r.text.contains("[wait: stdin_read]"), "{r:?}");
    let ticks = || {
        std::fs::read_to_string(ws.join("ticks"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let cases = [
        // Each item catches the interrupt and the loop goes on to the next.
        "for i in 1 2 3 4 5 6 7 8 9; do python3 -c 'import time\ntry: time.sleep(1)\nexcept KeyboardInterrupt: pass'; echo item-$i; done",
        // Ignores the interrupt, then asks.
        "bash -c 'trap \"\" INT; sleep 1.5; read -p \"Proceed? \" a; echo got=$a'",
        // Catches the interrupt and goes on; then a quiet moment; then a stubborn one.
        "python3 -c 'import time\ntry: time.sleep(5)\nexcept KeyboardInterrupt: time.sleep(5)'; \
         for ((j=0;j<200000;j++)); do :; done; \
         python3 -c 'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(40)'",
        // The same, killed after a long quiet: the quiet moment must not end the kill.
        "python3 -c 'import time\ntry: time.sleep(30)\nexcept KeyboardInterrupt: time.sleep(0.8)'; \
         for ((j=0;j<900000;j++)); do :; done; \
         python3 -c 'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(40)'",
    ];
    for (n, text) in cases.iter().enumerate() {
        let id = format!("pty-send-{}", n + 1);
        let r = tool(
            &world,
            &session,
            "terminal_send",
            json!({"sessionId": "pty-1", "run_in_background": true, "text": text}),
        )
        .await;
        assert_eq!(r.text, format!("started background job {id}"), "{r:?}");
        let quiet = if n == 3 { 2500 } else { 300 };
        tokio::time::sleep(Duration::from_millis(quiet)).await;
        let r = tool(&world, &session, "job_kill", json!({"job_id": id})).await;
        assert!(!r.is_error, "{r:?}");
        let r = wait_output(&world, &session, &id).await;
        assert!(
            r.text.ends_with("[status: killed, wait: stdin_read]"),
            "{text}: the shell did not get the terminal back: {r:?}"
        );
        // The loop stopped at the kill (its items take a second each).
        assert!(!r.text.contains("item-5"), "{text}: it ran on: {r:?}");
        let r = tool(
            &world,
            &session,
            "terminal_send",
            json!({"sessionId": "pty-1", "text": "echo alive"}),
        )
        .await;
        assert!(r.text.lines().any(|l| l == "alive"), "{text}: {r:?}");
        assert!(
            !r.text.contains("got=") && !r.text.contains("item-"),
            "{text}: {r:?}"
        );
    }
    let seen = ticks();
    assert!(seen > 0, "the earlier job never ran");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(ticks() > seen, "the kills ended the earlier send's job");
    let log = std::fs::read_to_string(ws.join("ticks")).expect("ticks");
    assert!(
        log.lines().all(|l| l == "rc=0"),
        "the kills reached the earlier job's children: {log}"
    );
    assert!(
        !ws.join("terms").exists(),
        "the kills reached the earlier job's orphans"
    );
}

/// A send typed into a nested shell is the nested shell's to run: `job_kill` ends what it
/// started there, and the nested shell lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_kill_ends_what_a_send_into_a_nested_shell_started() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world(&ws, SandboxMode::DangerFullAccess).await;
    let r = tool(&world, &session, "terminal_open", json!({"type": "shell"})).await;
    assert!(!r.is_error, "{r:?}");
    let level = |r: &ToolResult| -> u32 {
        r.text
            .lines()
            .find_map(|l| l.strip_prefix("level-")?.parse().ok())
            .unwrap_or_else(|| panic!("no level: {r:?}"))
    };
    let r = tool(
        &world,
        &session,
        "terminal_send",
        json!({"sessionId": "pty-1", "text": "echo level-$SHLVL"}),
    )
    .await;
    let outer = level(&r);
    let r = tool(
        &world,
        &session,
        "terminal_send",
        json!({"sessionId": "pty-1", "text": "bash --norc -i", "timeout_ms": 3000}),
    )
    .await;
    assert!(!r.is_error, "{r:?}");
    let r = tool(
        &world,
        &session,
        "terminal_send",
        json!({"sessionId": "pty-1", "run_in_background": true,
               "text": "python3 -c 'import os, signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); print(\"P=%d\" % os.getpid(), flush=True); time.sleep(100)'"}),
    )
    .await;
    assert_eq!(r.text, "started background job pty-send-1", "{r:?}");
    let pid = printed_pid(&world, &session, "pty-send-1").await;
    let r = tool(
        &world,
        &session,
        "job_kill",
        json!({"job_id": "pty-send-1"}),
    )
    .await;
    assert!(!r.is_error, "{r:?}");
    let r = wait_output(&world, &session, "pty-send-1").await;
    assert!(r.text.contains("[status: killed"), "{r:?}");
    assert!(
        gone_within(pid, Duration::from_secs(2)).await,
        "{pid} still runs"
    );
    let r = tool(
        &world,
        &session,
        "terminal_send",
        json!({"sessionId": "pty-1", "text": "echo level-$SHLVL", "timeout_ms": 5000}),
    )
    .await;
    assert_eq!(level(&r), outer + 1, "not the nested shell: {r:?}");
}
