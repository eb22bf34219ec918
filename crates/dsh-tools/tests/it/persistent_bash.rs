//! `bash = "persistent"`: one shell per session on a terminal, real bash.

use std::sync::Arc;

use dsh_core::CancelToken;
use dsh_sandbox::SandboxMode;
use dsh_store::session::SessionLog;
use dsh_store::SqliteStorage;
use dsh_tools::{BashMode, Preset, World, WorldBuilder, WorldConfig};
use serde_json::json;

use crate::support::call;

async fn world(ws: &std::path::Path) -> (World, Arc<dsh_store::session::Session>, Arc<SessionLog>) {
    world_with(ws, |_| {}).await
}

/// An unconfined World with persistent bash, its config changed by `configure` first, a
/// session in it, and its session log.
async fn world_with(
    ws: &std::path::Path,
    configure: impl FnOnce(&mut WorldConfig),
) -> (World, Arc<dsh_store::session::Session>, Arc<SessionLog>) {
    let storage = Arc::new(SqliteStorage::open(ws.join("state/dsh.db")).expect("sqlite"));
    let sessions = Arc::new(SessionLog::new(storage).await.expect("log"));
    let session = sessions.create(ws).await.expect("session");
    let mut config = WorldConfig::new(ws).with_mode(SandboxMode::DangerFullAccess);
    config.bash = BashMode::Persistent;
    configure(&mut config);
    let world = WorldBuilder::new()
        .preset(Preset::Local, &config, sessions.clone())
        .and_then(WorldBuilder::build)
        .expect("world");
    (world, session, sessions)
}

/// A sandboxed workspace-write World with persistent bash, and a session in it.
async fn workspace_write_world(ws: &std::path::Path) -> (World, Arc<dsh_store::session::Session>) {
    let storage = Arc::new(SqliteStorage::open(ws.join("state/dsh.db")).expect("sqlite"));
    let sessions = Arc::new(SessionLog::new(storage).await.expect("log"));
    let session = sessions.create(ws).await.expect("session");
    let mut config = WorldConfig::new(ws).with_mode(SandboxMode::WorkspaceWrite);
    config.bash = BashMode::Persistent;
    let world = WorldBuilder::new()
        .preset(Preset::Sandboxed, &config, sessions)
        .and_then(WorldBuilder::build)
        .expect("world");
    (world, session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cd_and_export_carry_over_and_exit_codes_show_as_one_shot_bash_shows_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, sessions) = world(&ws).await;
    let run = |command: &str| {
        let c = call("bash", json!({"command": command, "description": "t"}));
        let (w, s) = (&world, session.clone());
        async move { w.call(Some(&s), c, CancelToken::new()).await }
    };
    let r = run("cd /tmp && export V=1").await;
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.text, "(no output)");
    let r = run("pwd; echo V=$V").await;
    assert_eq!(r.text, "/tmp\nV=1\n", "{r:?}");
    let r = run("echo 'multi\nline'; false").await;
    assert_eq!(r.text, "multi\nline\n[exit code: 1]", "{r:?}");
    // A long output keeps its end.
    let r = run("seq 1 20000").await;
    assert!(
        r.text.starts_with("<response clipped>"),
        "{}",
        &r.text[..100]
    );
    assert!(
        r.text.ends_with("\n20000\n"),
        "{}",
        &r.text[r.text.len() - 50..]
    );
    // `exit` resets: the next call starts afresh in the workspace.
    let r = run("echo bye; exit 9").await;
    assert!(r.text.contains("bye\n[shell exited: code 9]"), "{r:?}");
    assert!(
        r.text.contains("next bash call starts from the workspace"),
        "{r:?}"
    );
    assert!(!r.text.contains("[exit code: 9]"), "{r:?}");
    let r = run("pwd; echo V=$V.").await;
    assert_eq!(r.text, format!("{}\nV=.\n", ws.display()), "{r:?}");
    // A timeout resets too, and says what was printed.
    let c = call(
        "bash",
        json!({"command": "echo partial; sleep 30", "description": "t", "timeout_ms": 1500}),
    );
    let r = world.call(Some(&session), c, CancelToken::new()).await;
    assert!(
        r.text.starts_with("Your command timed out after 2 seconds"),
        "{r:?}"
    );
    assert!(r.text.contains("partial"), "{r:?}");
    assert!(
        r.text.contains("next bash call starts from the workspace"),
        "{r:?}"
    );
    // Another session has its own shell.
    let other = sessions.create(&ws).await.expect("session");
    let r = run("export W=2").await;
    assert!(!r.is_error, "{r:?}");
    let c = call("bash", json!({"command": "echo W=$W.", "description": "t"}));
    let r = world.call(Some(&other), c, CancelToken::new()).await;
    assert_eq!(r.text, "W=.\n", "{r:?}");
    world.end_terminals().await.expect("end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sessions_mode_cannot_change_while_it_has_terminals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, sessions) = world(&ws).await;
    let open = call("terminal_open", json!({"type": "shell"}));
    let r = world.call(Some(&session), open, CancelToken::new()).await;
    assert!(!r.is_error, "{r:?}");
    // The same mode is always fine; another is refused while the terminal is open.
    world
        .set_mode(&session, SandboxMode::DangerFullAccess)
        .await
        .expect("same mode");
    let e = world
        .set_mode(&session, SandboxMode::ReadOnly)
        .await
        .expect_err("held by the terminal");
    assert_eq!(e.code(), dsh_core::ErrorCode::InvalidArgument);
    assert!(e.message().contains("terminal_close"), "{}", e.message());
    // Another session is not held.
    let other = sessions.create(&ws).await.expect("session");
    world
        .set_mode(&other, SandboxMode::ReadOnly)
        .await
        .expect("another session");
    let close = call("terminal_close", json!({"sessionId": "pty-1"}));
    let r = world.call(Some(&session), close, CancelToken::new()).await;
    assert!(!r.is_error, "{r:?}");
    world
        .set_mode(&session, SandboxMode::ReadOnly)
        .await
        .expect("free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_made_in_the_persistent_shell_is_reported_and_protected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session) = workspace_write_world(&ws).await;
    let c = call(
        "bash",
        json!({"command": "git init -q nested && echo made", "description": "t"}),
    );
    let r = world.call(Some(&session), c, CancelToken::new()).await;
    assert!(r.text.starts_with("made\n"), "{r:?}");
    assert!(
        r.text.contains(&format!("{}/nested/.git", ws.display())) && r.text.contains("protected"),
        "the check after a one-shot call runs after a persistent one too: {r:?}"
    );
    // The next call runs under a policy that protects the new repository, so it gets a
    // fresh shell: the one opened before could still write the repository's config.
    let c = call(
        "bash",
        json!({"command": "git -C nested config core.fsmonitor 'touch pwned'", "description": "t"}),
    );
    let r = world.call(Some(&session), c, CancelToken::new()).await;
    assert!(r.text.starts_with(dsh_shell::render::FRESH_SHELL), "{r:?}");
    assert!(
        !r.text.contains("this call made"),
        "the repository is reported once, by the call that made it: {r:?}"
    );
    let config = std::fs::read_to_string(ws.join("nested/.git/config")).expect("config");
    assert!(!config.contains("fsmonitor"), "{config}");
    // A write the sandbox refuses is said as one-shot bash says it.
    let c = call(
        "bash",
        json!({"command": "echo x > nested/.git/hooks/pre-commit", "description": "t"}),
    );
    let r = world.call(Some(&session), c, CancelToken::new()).await;
    assert!(
        r.text
            .contains("[sandbox: file access denied under workspace-write mode]"),
        "{r:?}"
    );
    assert_eq!(r.meta.as_ref().expect("meta")["sandbox"]["denied"], true);
    world.end_terminals().await.expect("end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_background_job_of_a_terminal_made_is_checked_when_it_closes() {
    // A background job that makes a repository after the terminal's last send is checked
    // when the terminal closes: unchecked, the host's git would run its fsmonitor.
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session) = workspace_write_world(&ws).await;
    let run = |name: &str, args: serde_json::Value| {
        let c = call(name, args);
        let (w, s) = (&world, session.clone());
        async move { w.call(Some(&s), c, CancelToken::new()).await }
    };
    let r = run("terminal_open", json!({"type": "shell"})).await;
    assert!(!r.is_error, "{r:?}");
    let r = run(
        "terminal_send",
        json!({"sessionId": "pty-1", "text": "(sleep 1; git init -q late) >/dev/null 2>&1 &"}),
    )
    .await;
    assert!(!r.text.contains("late/.git"), "{r:?}");
    tokio::time::sleep(std::time::Duration::from_millis(2000)).await;
    let r = run("terminal_close", json!({"sessionId": "pty-1"})).await;
    assert!(
        r.text.contains(&format!("{}/late/.git", ws.display())),
        "{r:?}"
    );
    // Persistent bash: a command left waiting for input resets the shell, so no later
    // command is typed into it.
    let r = run(
        "bash",
        json!({"command": "read answer", "description": "t"}),
    )
    .await;
    assert!(r.text.contains("waits for input"), "{r:?}");
    assert!(
        r.text.contains("next bash call starts from the workspace"),
        "{r:?}"
    );
    let r = run("bash", json!({"command": "echo fresh", "description": "t"})).await;
    assert_eq!(r.text, "fresh\n", "{r:?}");
    world.end_terminals().await.expect("end");
}

// The configuration reaches persistent bash as it reaches one-shot bash: a call without
// `timeout_ms` gets `timeout_ms`, no call gets past `max_timeout_ms`, and a result shows
// at most `max_output_bytes` characters of output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_timeouts_and_output_budget_apply() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world_with(&ws, |config| {
        config.shell.timeout_ms = 1_000;
        config.shell.max_timeout_ms = 2_000;
        config.shell.max_output_bytes = 100;
    })
    .await;
    let run = |args: serde_json::Value| {
        let (w, s) = (&world, session.clone());
        async move {
            w.call(Some(&s), call("bash", args), CancelToken::new())
                .await
        }
    };
    let r = run(json!({"command": "sleep 30", "description": "t"})).await;
    assert!(
        r.text.starts_with("Your command timed out after 1 seconds"),
        "{r:?}"
    );
    let r = run(json!({"command": "sleep 30", "description": "t", "timeout_ms": 600000})).await;
    assert!(
        r.text.starts_with("Your command timed out after 2 seconds"),
        "{r:?}"
    );
    let r = run(json!({"command": "seq 1 1000", "description": "t"})).await;
    assert!(r.text.contains("only its last 100 are shown"), "{r:?}");
    assert!(r.text.ends_with("1000\n"), "{r:?}");
}

// dsh's managed variables come from one place: a command in a terminal, in persistent
// bash and in one-shot bash sees the same `DSH_HOME`, `DSH_SHELL` and `DSH_SESSION_ID`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shell_sees_the_same_managed_variables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let storage = Arc::new(SqliteStorage::open(ws.join("state/dsh.db")).expect("sqlite"));
    let sessions = Arc::new(SessionLog::new(storage).await.expect("log"));
    let session = sessions.create(&ws).await.expect("session");
    let show = "echo \"[$DSH_HOME][$DSH_SHELL][$DSH_SESSION_ID]\"";
    let mut seen = Vec::new();
    for bash in [BashMode::OneShot, BashMode::Persistent] {
        let mut config = WorldConfig::new(&ws).with_mode(SandboxMode::DangerFullAccess);
        config.bash = bash;
        config.state_dir = Some(ws.join("state"));
        let world = WorldBuilder::new()
            .preset(Preset::Local, &config, sessions.clone())
            .and_then(WorldBuilder::build)
            .expect("world");
        let r = world
            .call(
                Some(&session),
                call("bash", json!({"command": show, "description": "t"})),
                CancelToken::new(),
            )
            .await;
        seen.push(r.text.trim().to_owned());
        let r = world
            .call(
                Some(&session),
                call("terminal_open", json!({"type": "shell"})),
                CancelToken::new(),
            )
            .await;
        assert!(!r.is_error, "{r:?}");
        let id = r.meta.as_ref().expect("meta")["sessionId"]
            .as_str()
            .expect("id")
            .to_owned();
        let r = world
            .call(
                Some(&session),
                call("terminal_send", json!({"sessionId": id, "text": show})),
                CancelToken::new(),
            )
            .await;
        let line = r
            .text
            .lines()
            .find(|l| l.starts_with('[') && !l.contains("$DSH"))
            .expect("the variables' line")
            .to_owned();
        seen.push(line);
        world.end_terminals().await.expect("end terminals");
    }
    let want = format!(
        "[{}][1][{}]",
        ws.join("state").display(),
        session.id().as_str()
    );
    assert_eq!(
        seen,
        vec![want.clone(), want.clone(), want.clone(), want],
        "{seen:?}"
    );
}

// A cap above the terminals' own (600 s) is not an error: the send waits the terminals'
// cap at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_cap_past_the_terminals_own_still_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session, _log) = world_with(&ws, |config| {
        config.shell.timeout_ms = 1_200_000;
        config.shell.max_timeout_ms = 1_800_000;
    })
    .await;
    for args in [
        json!({"command": "echo hi", "description": "t"}),
        json!({"command": "echo hi", "description": "t", "timeout_ms": 1_500_000}),
    ] {
        let r = world
            .call(Some(&session), call("bash", args), CancelToken::new())
            .await;
        assert_eq!(r.text, "hi\n", "{r:?}");
    }
}

/// A background job of the persistent shell that plants a repository with a hook between
/// two calls is checked at the next call, against the policy the shell ran under, even
/// though that call gets a fresh shell under a policy that already knows the repository.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_shells_background_job_made_between_calls_is_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let (world, session) = workspace_write_world(&ws).await;
    let run = |command: &str| {
        let c = call("bash", json!({"command": command, "description": "t"}));
        let (w, s) = (&world, session.clone());
        async move { w.call(Some(&s), c, CancelToken::new()).await }
    };
    let plant = "(sleep 1; git init -q late; printf '#!/bin/sh\\necho pwned\\n' > \
                 late/.git/hooks/pre-commit.new; chmod +x late/.git/hooks/pre-commit.new; \
                 mv late/.git/hooks/pre-commit.new late/.git/hooks/pre-commit) \
                 >/dev/null 2>&1 & echo started";
    let r = run(plant).await;
    assert!(r.text.ends_with("started\n"), "{r:?}");
    let hook = ws.join("late/.git/hooks/pre-commit");
    let planted = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !hook.exists() {
        assert!(std::time::Instant::now() < planted, "the job never planted");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let r = run("true").await;
    assert!(
        r.text.contains(&format!("{}/late/.git", ws.display())),
        "{r:?}"
    );
    assert!(
        !hook.exists(),
        "the planted hook is still where git runs it"
    );
    world.end_terminals().await.expect("end");
}
