//! Terminal sessions with real bash, real programs and real PTYs: readiness tiers,
//! persistence, cancel, close, ownership, limits, the screen, the sandbox.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use dsh_core::{CancelReason, CancelToken, ErrorCode, SessionId};
use dsh_process::LocalSubprocess;
use dsh_sandbox::{LocalSandbox, OnPartial, Runner, Sandbox, SandboxMode};
use dsh_terminal::{
    BashBackend, CloseOutcome, OpenRequest, Opened, Owner, SendRequest, SendResult, TerminalConfig,
    TerminalSignal, TerminalStatus, Terminals, WaitReason,
};

/// Short silence and deadline, so the slow tiers are quick to reach in tests.
fn config() -> TerminalConfig {
    TerminalConfig {
        idle_silence: Duration::from_millis(700),
        ..TerminalConfig::default()
    }
}

fn service(config: TerminalConfig, sandbox: Option<Arc<dyn Sandbox>>) -> Terminals {
    service_on(config, sandbox, LocalSubprocess::new())
}

fn service_on(
    config: TerminalConfig,
    sandbox: Option<Arc<dyn Sandbox>>,
    sub: LocalSubprocess,
) -> Terminals {
    let t = Terminals::new(config).expect("config");
    t.register(Arc::new(BashBackend::new(Arc::new(sub), sandbox)))
        .expect("backend");
    t
}

fn open_request(ws: &Path, mode: SandboxMode) -> OpenRequest {
    OpenRequest {
        kind: "shell".into(),
        name: None,
        cwd: None,
        policy: dsh_protect::workspace_policy(mode, ws),
        env: std::collections::BTreeMap::from([("DSH_SHELL".to_owned(), "1".to_owned())]),
    }
}

/// An unconfined shell session of `owner`.
async fn open_unconfined(t: &Terminals, owner: &Owner, ws: &Path) -> Opened {
    t.open(
        owner,
        open_request(ws, SandboxMode::DangerFullAccess),
        &CancelToken::new(),
    )
    .await
    .expect("open")
}

/// An unconfined shell session of `owner`: its id.
async fn open_shell(t: &Terminals, owner: &Owner, ws: &Path) -> String {
    let opened = open_unconfined(t, owner, ws).await;
    opened.snapshot.id.as_str().to_owned()
}

async fn send(t: &Terminals, owner: &Owner, id: &str, text: &str) -> SendResult {
    send_with(t, owner, id, text, Duration::from_secs(20)).await
}

async fn send_with(
    t: &Terminals,
    owner: &Owner,
    id: &str,
    text: &str,
    timeout: Duration,
) -> SendResult {
    t.send(
        owner,
        id,
        SendRequest {
            text: text.into(),
            submit: true,
            timeout,
        },
        &CancelToken::new(),
    )
    .await
    .unwrap_or_else(|e| panic!("send {text:?}: {e}"))
}

fn alive(pid: u32) -> bool {
    dsh_testkit::alive(pid as i32)
}

#[tokio::test]
async fn a_shell_keeps_its_state_between_sends_and_settles_on_its_prompt() {
    let ws = tempfile::tempdir().expect("ws");
    let t = service(config(), None);
    let owner = Owner::new(SessionId::new("s1"));
    let opened = open_unconfined(&t, &owner, ws.path()).await;
    assert_eq!(opened.snapshot.id.as_str(), "pty-1");
    assert_eq!(opened.motd, "dsh> ");
    assert_eq!(opened.snapshot.status, TerminalStatus::Running);
    let id = opened.snapshot.id.as_str().to_owned();

    let r = send(&t, &owner, &id, "echo hi").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    assert!(r.viewport.contains("\nhi\n"), "{r:?}");
    let r = send(&t, &owner, &id, "cd /tmp && export V=1").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    let r = send(&t, &owner, &id, "pwd; echo V=$V; echo $DSH_PTY_SESSION_ID").await;
    assert!(r.viewport.contains("/tmp\nV=1\npty-1\n"), "{r:?}");
    // A PS1 the model changes heals at the next prompt.
    let r = send(&t, &owner, &id, "PS1='x$ '").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");

    // A second session does not see the first one's variable.
    let other = t
        .open(
            &owner,
            open_request(ws.path(), SandboxMode::DangerFullAccess),
            &CancelToken::new(),
        )
        .await
        .expect("open");
    assert_eq!(other.snapshot.id.as_str(), "pty-2");
    let r = send(&t, &owner, other.snapshot.id.as_str(), "echo V=$V.").await;
    assert!(r.viewport.contains("V=.\n"), "{r:?}");
    let page = t.read(&owner, &id, 0, 500).expect("read");
    assert!(page.text.contains("V=1"), "{page:?}");
    assert_eq!(t.list(&owner).len(), 2);
    t.dispose_owner(&owner).await.expect("dispose");
    assert!(t.list(&owner).is_empty());
}

#[tokio::test]
async fn programs_waiting_for_input_settle_stdin_read_from_the_kernel() {
    let ws = tempfile::tempdir().expect("ws");
    let t = service(config(), None);
    let owner = Owner::new(SessionId::new("s1"));
    let id = open_shell(&t, &owner, ws.path()).await;
    let id = id.as_str();
    // python3 -i: the same group answers and waits again within one poll interval.
    let r = send(&t, &owner, id, "python3 -i -q").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    let r = send(&t, &owner, id, "x = 41").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    let r = send(&t, &owner, id, "print(x + 1)").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    assert!(r.viewport.contains("42"), "{r:?}");
    let r = send(&t, &owner, id, "exit()").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    // `read v` in bash (a builtin: the shell's own group reads).
    let r = send(&t, &owner, id, "read v").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    let r = send(&t, &owner, id, "answer").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    let r = send(&t, &owner, id, "echo got=$v").await;
    assert!(r.viewport.contains("got=answer"), "{r:?}");
    // `cat` echoes a line and waits for the next.
    let r = send(&t, &owner, id, "cat").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    let r = send(&t, &owner, id, "ping").await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    assert!(r.viewport.contains("ping"), "{r:?}");
    t.dispose().await.expect("dispose");
}

#[tokio::test]
async fn silence_settles_inferred_idle_and_endless_output_settles_timeout() {
    let ws = tempfile::tempdir().expect("ws");
    let t = service(config(), None);
    let owner = Owner::new(SessionId::new("s1"));
    let id = open_shell(&t, &owner, ws.path()).await;
    let id = id.as_str();
    let r = send(&t, &owner, id, "echo started; sleep 30").await;
    assert_eq!(r.wait, WaitReason::InferredIdle, "{r:?}");
    assert!(r.viewport.contains("started"), "{r:?}");
    // Cancel: a real SIGINT to the foreground group brings the prompt back.
    let cancel = CancelToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.cancel(CancelReason::ClientCancelled);
    });
    let r = t
        .send(
            &owner,
            id,
            SendRequest {
                text: String::new(),
                submit: true,
                timeout: Duration::from_secs(20),
            },
            &cancel,
        )
        .await
        .expect("send");
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    let r = send_with(
        &t,
        &owner,
        id,
        "while :; do echo tick; sleep 0.1; done",
        Duration::from_millis(1500),
    )
    .await;
    assert_eq!(r.wait, WaitReason::Timeout, "{r:?}");
    assert!(r.viewport.contains("tick"), "{r:?}");
    assert_eq!(
        t.signal(&owner, id, TerminalSignal::Int)
            .map(|_| ())
            .err()
            .map(|e| e.code()),
        None
    );
    // After the interrupt the shell holds the terminal: SIGKILL to it is refused.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e2 = t
        .signal(&owner, id, TerminalSignal::Kill)
        .expect_err("shell");
    assert_eq!(e2.code(), ErrorCode::InvalidArgument, "{e2}");
    t.dispose().await.expect("dispose");
}

#[tokio::test]
async fn close_ends_the_whole_tree_daemons_and_term_ignorers_included() {
    let ws = tempfile::tempdir().expect("ws");
    let t = service(config(), None);
    let owner = Owner::new(SessionId::new("s1"));
    let id = open_shell(&t, &owner, ws.path()).await;
    let id = id.as_str();
    let r = send(
        &t,
        &owner,
        id,
        "setsid sh -c 'echo D=$$; exec sleep 1000' & (trap '' TERM HUP; exec sleep 1001) & \
         echo T=$!; sleep 0.3",
    )
    .await;
    let pid = |k: &str| -> u32 {
        r.viewport
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("{k}: {r:?}"))
    };
    let (daemon, stubborn) = (pid("D="), pid("T="));
    assert!(
        alive(daemon) && alive(stubborn),
        "{daemon} {stubborn}: {r:?}"
    );
    assert_eq!(
        t.close(&owner, id).await.expect("close"),
        CloseOutcome::Closed
    );
    assert!(!alive(daemon), "the setsid daemon survived");
    assert!(!alive(stubborn), "the TERM-ignoring child survived");
    let e = t.read(&owner, id, 0, 10).expect_err("closed");
    assert_eq!(e.code(), ErrorCode::NoSession);
}

#[tokio::test]
async fn another_owner_can_neither_see_nor_touch_a_session_and_the_limit_holds() {
    let ws = tempfile::tempdir().expect("ws");
    let t = service(
        TerminalConfig {
            max_terminals: 2,
            ..config()
        },
        None,
    );
    let a = Owner::new(SessionId::new("a"));
    let b = Owner::new(SessionId::new("b"));
    let open = |o: &Owner| {
        let req = open_request(ws.path(), SandboxMode::DangerFullAccess);
        let o = o.clone();
        let t = &t;
        async move { t.open(&o, req, &CancelToken::new()).await }
    };
    let id = open(&a).await.expect("open").snapshot.id;
    let id = id.as_str();
    assert_eq!(
        t.read(&b, id, 0, 1).expect_err("foreign").code(),
        ErrorCode::ForeignSession
    );
    assert_eq!(
        t.signal(&b, id, TerminalSignal::Int)
            .expect_err("foreign")
            .code(),
        ErrorCode::ForeignSession
    );
    assert_eq!(
        t.close(&b, id).await.expect_err("foreign").code(),
        ErrorCode::ForeignSession
    );
    assert!(t.list(&b).is_empty());
    assert_eq!(
        t.read(&a, "pty-99", 0, 1).expect_err("unknown").code(),
        ErrorCode::NoSession
    );
    open(&a).await.expect("second");
    let e = open(&a).await.expect_err("third");
    assert_eq!(e.code(), ErrorCode::TerminalLimit);
    assert!(e.message().contains("terminal_close"), "{}", e.message());
    // Another owner has its own allowance.
    open(&b).await.expect("b's first");
    let mut named = open_request(ws.path(), SandboxMode::DangerFullAccess);
    named.name = Some("dev".into());
    t.open(&b, named.clone(), &CancelToken::new())
        .await
        .expect("named");
    t.close(&b, t.list(&b)[0].id.as_str()).await.expect("close");
    let e = t
        .open(&b, named, &CancelToken::new())
        .await
        .expect_err("dup");
    assert_eq!(e.code(), ErrorCode::DuplicateName);
    let mut bad = open_request(ws.path(), SandboxMode::DangerFullAccess);
    bad.kind = "pwsh".into();
    assert_eq!(
        t.open(&b, bad, &CancelToken::new())
            .await
            .expect_err("type")
            .code(),
        ErrorCode::NoBackend
    );
    t.dispose_owner(&a).await.expect("dispose a");
    assert_eq!(
        open(&a).await.expect_err("disposed").code(),
        ErrorCode::OwnerNotLive
    );
    t.dispose().await.expect("dispose");
    assert_eq!(
        open(&b).await.expect_err("disposing").code(),
        ErrorCode::ServiceDisposing
    );
}

#[tokio::test]
async fn a_full_screen_program_is_shown_as_its_screen() {
    let ws = tempfile::tempdir().expect("ws");
    let t = service(config(), None);
    let owner = Owner::new(SessionId::new("s1"));
    let id = open_shell(&t, &owner, ws.path()).await;
    let id = id.as_str();
    // Enter the alternate screen, draw at given positions, then read stdin.
    let r = send(
        &t,
        &owner,
        id,
        r"printf '\033[?1049h\033[2J\033[3;5HMENU\033[5;5H> one\033[6;7Htwo'; read choice",
    )
    .await;
    assert_eq!(r.wait, WaitReason::StdinRead, "{r:?}");
    assert_eq!(r.viewport, "\n\n    MENU\n\n    > one\n      two", "{r:?}");
    assert!(!r.viewport.contains('\u{1b}'));
    t.dispose().await.expect("dispose");
}

/// Each runner that works here, forced; a missing one is a skip `dsh_testkit` records (a
/// failure where it is required).
fn sandboxes() -> Vec<(Runner, Arc<LocalSandbox>)> {
    let mut out = Vec::new();
    for runner in [Runner::Landlock, Runner::Bwrap] {
        let sandbox = LocalSandbox::new().force_runner(runner);
        let status = sandbox
            .runners()
            .into_iter()
            .find(|s| s.runner == runner)
            .map(|s| s.available);
        match status {
            Some(Ok(_)) => out.push((runner, Arc::new(sandbox))),
            Some(Err(why)) => dsh_testkit::skip(need_of(runner), &format!("{runner}: {why}")),
            None => dsh_testkit::skip(
                need_of(runner),
                &format!("{runner} is not a runner of this platform"),
            ),
        }
    }
    out
}

/// What a test under `runner` needs of the machine.
fn need_of(runner: Runner) -> dsh_testkit::Need {
    match runner {
        Runner::Bwrap => dsh_testkit::Need::Bwrap,
        _ => dsh_testkit::Need::Landlock,
    }
}

#[tokio::test]
async fn a_read_only_terminal_cannot_write_and_keeps_job_control() {
    for (runner, sandbox) in sandboxes() {
        let ws = tempfile::tempdir().expect("ws");
        let t = service(config(), Some(sandbox));
        let owner = Owner::new(SessionId::new("s1"));
        let mut req = open_request(ws.path(), SandboxMode::ReadOnly);
        req.policy = req.policy.with_on_partial(OnPartial::Accept);
        let id = t
            .open(&owner, req, &CancelToken::new())
            .await
            .unwrap_or_else(|e| panic!("{runner}: open: {e}"))
            .snapshot
            .id;
        let id = id.as_str();
        let r = send(&t, &owner, id, "touch x; echo rc=$?").await;
        assert!(r.viewport.contains("rc=1"), "{runner}: {r:?}");
        assert!(!ws.path().join("x").exists(), "{runner}");
        // Job control works inside the sandbox: a foreground child is interrupted.
        let r = send(&t, &owner, id, "cat").await;
        assert_eq!(r.wait, WaitReason::StdinRead, "{runner}: {r:?}");
        let pg = t.signal(&owner, id, TerminalSignal::Int).expect("SIGINT");
        assert!(
            pg > 1,
            "{runner}: a host pgid, not one from inside a namespace: {pg}"
        );
        let r = send(&t, &owner, id, "echo back").await;
        assert!(r.viewport.contains("back"), "{runner}: {r:?}");
        assert!(!r.viewport.contains("no job control"), "{runner}: {r:?}");
        t.dispose().await.expect("dispose");
    }
}

#[tokio::test]
async fn a_confined_session_without_a_sandbox_is_refused() {
    let ws = tempfile::tempdir().expect("ws");
    let t = service(config(), None);
    let owner = Owner::new(SessionId::new("s1"));
    let e = t
        .open(
            &owner,
            open_request(ws.path(), SandboxMode::ReadOnly),
            &CancelToken::new(),
        )
        .await
        .expect_err("no sandbox");
    assert_eq!(e.code(), ErrorCode::SandboxUnavailable);
    assert!(t.list(&owner).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_sessions_answer_at_once_and_the_sixty_fifth_is_refused() {
    let ws = tempfile::tempdir().expect("ws");
    let t = Arc::new(service(config(), None));
    let owner = Owner::new(SessionId::new("s1"));
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (t, owner) = (t.clone(), owner.clone());
        let req = open_request(ws.path(), SandboxMode::DangerFullAccess);
        opening.spawn(async move { t.open(&owner, req, &CancelToken::new()).await });
    }
    let mut ids = Vec::new();
    while let Some(r) = opening.join_next().await {
        ids.push(r.expect("task").expect("open").snapshot.id);
    }
    let e = t
        .open(
            &owner,
            open_request(ws.path(), SandboxMode::DangerFullAccess),
            &CancelToken::new(),
        )
        .await
        .expect_err("the 65th");
    assert_eq!(e.code(), ErrorCode::TerminalLimit);
    let mut sending = tokio::task::JoinSet::new();
    for id in ids.clone() {
        let (t, owner) = (t.clone(), owner.clone());
        sending.spawn(async move {
            let r = send(&t, &owner, id.as_str(), "echo I am $DSH_PTY_SESSION_ID").await;
            (id, r)
        });
    }
    while let Some(joined) = sending.join_next().await {
        let (id, r) = joined.expect("task");
        assert!(r.viewport.contains(&format!("I am {id}")), "{id}: {r:?}");
    }
    let pids: Vec<u32> = t.list(&owner).iter().filter_map(|s| s.pid).collect();
    assert_eq!(pids.len(), 64);
    t.dispose().await.expect("dispose");
    assert!(pids.iter().all(|p| !alive(*p)), "a shell outlived dispose");
}

/// This process's resident memory, in KiB.
/// The processes whose session is `sid`, seen from outside through /proc.
fn session_members(sid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name: state ppid pgrp session.
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if fields.first() != Some(&"Z") && fields.get(3) == Some(&sid.to_string().as_str()) {
            members.push(pid);
        }
    }
    members
}

#[tokio::test]
async fn a_fork_bomb_stops_at_the_process_limit_and_close_ends_it() {
    const LIMIT: u32 = 48;
    let sub = LocalSubprocess::new().with_process_limit(Some(LIMIT));
    if let Err(why) = sub.process_limit_status() {
        dsh_testkit::skip(dsh_testkit::Need::ProcessLimit, &why.to_string());
        return;
    }
    let ws = tempfile::tempdir().expect("ws");
    let t = service_on(config(), None, sub);
    let owner = Owner::new(SessionId::new("s1"));
    let opened = open_unconfined(&t, &owner, ws.path()).await;
    let id = opened.snapshot.id.as_str().to_owned();
    let sid = opened.snapshot.pid.expect("pid");
    // The classic bomb: the function backgrounds two copies of itself, so the prompt comes
    // back at once while the copies multiply.
    let r = send_with(&t, &owner, &id, ":(){ :|:& };:", Duration::from_secs(3)).await;
    assert!(r.viewport.len() < 1 << 20, "{}", r.viewport.len());
    // Let it run into the limit, then count from outside: never more than the limit.
    let mut peak = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        peak = peak.max(session_members(sid).len());
    }
    assert!(peak > 8, "the bomb never multiplied ({peak} processes)");
    assert!(
        peak <= LIMIT as usize,
        "{peak} processes under a limit of {LIMIT}"
    );
    // dsh still answers, and close ends every copy.
    assert_eq!(
        t.close(&owner, &id).await.expect("close"),
        CloseOutcome::Closed
    );
    let left = session_members(sid);
    assert!(left.is_empty(), "survivors after close: {left:?}");
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[tokio::test]
async fn a_program_printing_a_gigabyte_costs_bounded_memory_and_never_hangs() {
    let ws = tempfile::tempdir().expect("ws");
    let cfg = config();
    let t = service(cfg.clone(), None);
    let owner = Owner::new(SessionId::new("s1"));
    let id = open_shell(&t, &owner, ws.path()).await;
    let id = id.as_str();
    let before = rss_kib();
    let r = send_with(
        &t,
        &owner,
        id,
        // An unterminated OSC first: neither the sanitizer nor the screen may keep its
        // body (the emulator's OSC buffer could otherwise grow dsh to 1 GB).
        "printf '\\033]0;'; head -c 100000000 /dev/zero | tr '\\0' x; printf '\\007'; \
         yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 1073741824",
        Duration::from_secs(6),
    )
    .await;
    assert!(
        r.viewport.len() <= cfg.max_read_bytes,
        "{}",
        r.viewport.len()
    );
    assert!(r.truncated, "{:?}", r.wait);
    let page = t.read(&owner, id, 0, 1_000_000).expect("read");
    assert!(page.text.len() <= cfg.max_read_bytes);
    assert!(page.truncated);
    let grown = rss_kib().saturating_sub(before);
    // Scrollback (4 MiB), a send's output (256 KiB), the screen: far below this.
    assert!(grown < 32 << 10, "dsh grew by {grown} KiB");
    t.close(&owner, id).await.expect("close");
}

#[tokio::test]
async fn an_interrupt_discards_input_the_interrupted_program_never_read() {
    // A line typed while `sleep` holds the terminal must not be run by the shell once
    // SIGINT ends `sleep` (a keyboard Ctrl-C discards it).
    let ws = tempfile::tempdir().expect("ws");
    let t = service(config(), None);
    let owner = Owner::new(SessionId::new("s1"));
    let id = open_shell(&t, &owner, ws.path()).await;
    let id = id.as_str();
    let marker = ws.path().join("typeahead");
    let r = send_with(&t, &owner, id, "sleep 1000", Duration::from_millis(500)).await;
    assert_eq!(r.wait, WaitReason::Timeout, "{r:?}");
    let typed = format!("touch {}", marker.display());
    let r = send_with(&t, &owner, id, &typed, Duration::from_millis(300)).await;
    assert_eq!(r.wait, WaitReason::Timeout, "{r:?}");
    t.signal(&owner, id, TerminalSignal::Int).expect("SIGINT");
    let r = send(&t, &owner, id, "echo back").await;
    assert!(r.viewport.contains("back"), "{r:?}");
    assert!(!marker.exists(), "the shell ran input typed for sleep");
    // A cancelled send's text is discarded the same way.
    let r = send_with(&t, &owner, id, "sleep 1000", Duration::from_millis(500)).await;
    assert_eq!(r.wait, WaitReason::Timeout, "{r:?}");
    let cancel = CancelToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.cancel(CancelReason::ClientCancelled);
    });
    let _ = t
        .send(
            &owner,
            id,
            SendRequest {
                text: typed.clone(),
                submit: true,
                timeout: Duration::from_secs(10),
            },
            &cancel,
        )
        .await
        .expect("send");
    let r = send(&t, &owner, id, "echo again").await;
    assert!(r.viewport.contains("again"), "{r:?}");
    assert!(!marker.exists(), "the shell ran a cancelled send's text");
    t.dispose().await.expect("dispose");
}

/// Waits until `reader` has taken text containing `needle`; returns everything taken.
async fn take_until(reader: &dsh_terminal::SendReader, needle: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut taken = String::new();
    while !taken.contains(needle) {
        assert!(
            std::time::Instant::now() < deadline,
            "no {needle:?} yet: {taken:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        let delta = reader.take(usize::MAX);
        assert!(!delta.dropped, "{delta:?}");
        assert!(
            delta.text.is_empty() || delta.text.ends_with('\n'),
            "{delta:?}"
        );
        taken.push_str(&delta.text);
    }
    taken
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_send_is_read_as_it_comes_each_line_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let t = service(config(), None);
    let owner = Owner::new(SessionId::new("s1"));
    let id = open_shell(&t, &owner, &ws).await;
    std::fs::write(ws.join("go"), "").expect("go");
    // A progress line rewritten with carriage returns, then a held line, then the rest.
    let text = "printf 'one\\n10%%\\r50%%\\r100%%\\n'; printf 'partial'; \
                while [ -e go ]; do sleep 0.05; done; printf ' done\\nthree\\n'";
    let send = t
        .start_send(
            &owner,
            &id,
            SendRequest {
                text: text.into(),
                submit: true,
                timeout: Duration::from_secs(20),
            },
            CancelToken::new(),
        )
        .expect("start");
    let reader = send.reader();
    let running = tokio::spawn(send);
    let early = take_until(&reader, "100%\n").await;
    // The progress line as its last rewrite left it (the typed command is echoed first).
    let lines: Vec<&str> = early.lines().skip(1).collect();
    assert_eq!(lines, ["one", "100%"], "{early:?}");
    // The line being written is not taken until it ends.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(reader.take(usize::MAX).text, "", "a partial line was taken");
    std::fs::remove_file(ws.join("go")).expect("rm go");
    let r = running.await.expect("join").expect("send");
    assert_eq!(r.wait, WaitReason::StdinRead);
    assert!(r.viewport.contains("partial done\nthree\n"), "{r:?}");
    assert!(
        !r.viewport.lines().any(|l| l == "one" || l == "100%"),
        "shown twice: {r:?}"
    );
    // Settled: the reader takes nothing, not even the next send's output.
    let next = t
        .start_send(
            &owner,
            &id,
            SendRequest {
                text: "echo next-send".into(),
                submit: true,
                timeout: Duration::from_secs(20),
            },
            CancelToken::new(),
        )
        .expect("start next");
    let next_reader = next.reader();
    let next = next.await.expect("next");
    assert!(next.viewport.contains("\nnext-send\n"), "{next:?}");
    assert_eq!(reader.take(usize::MAX), dsh_terminal::SendDelta::default());
    assert_eq!(
        next_reader.take(usize::MAX),
        dsh_terminal::SendDelta::default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_send_says_when_output_was_dropped_between_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let t = service(
        TerminalConfig {
            max_read_bytes: 4096,
            ..config()
        },
        None,
    );
    let owner = Owner::new(SessionId::new("s1"));
    let id = open_shell(&t, &owner, &ws).await;
    std::fs::write(ws.join("go"), "").expect("go");
    let send = t
        .start_send(
            &owner,
            &id,
            SendRequest {
                text: "seq 1 5000; while [ -e go ]; do sleep 0.05; done; echo end".into(),
                submit: true,
                timeout: Duration::from_secs(20),
            },
            CancelToken::new(),
        )
        .expect("start");
    let reader = send.reader();
    let running = tokio::spawn(send);
    // Wait for the last number, then read: its head was dropped, and said so once; a
    // bounded take leaves the rest for the next.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let first = loop {
        let shown = t.read(&owner, &id, 0, 5).expect("read");
        if shown.text.contains("\n5000") {
            break reader.take(1000);
        }
        assert!(std::time::Instant::now() < deadline, "{shown:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(first.dropped, "{first:?}");
    assert!(
        first.text.len() <= 1000 && first.text.len() > 900,
        "{}",
        first.text.len()
    );
    assert!(first.text.ends_with('\n'), "{first:?}");
    let rest = reader.take(usize::MAX);
    assert!(!rest.dropped, "{rest:?}");
    assert!(rest.text.ends_with("4999\n5000\n"), "{rest:?}");
    let taken = format!("{}{}", first.text, rest.text);
    assert!(taken.len() <= 4096, "{}", taken.len());
    let numbers: Vec<u32> = taken
        .lines()
        .skip(1)
        .map(|l| l.parse().expect("a number"))
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "not contiguous"
    );
    std::fs::remove_file(ws.join("go")).expect("rm go");
    let r = running.await.expect("join").expect("send");
    assert!(r.viewport.contains("end\n"), "{r:?}");
}

/// Runs a slow foreground send on session `id` while `stale` (the reader of a send that
/// ended) keeps trying to take: the foreground send must keep all its lines.
async fn foreground_keeps_its_output(
    t: &Arc<Terminals>,
    owner: &Owner,
    id: &str,
    stale: &dsh_terminal::SendReader,
    tag: &str,
) {
    let text = format!("for i in 1 2 3; do echo {tag}-$i; sleep 0.2; done");
    let running = {
        let (t, owner, id) = (t.clone(), owner.clone(), id.to_owned());
        tokio::spawn(async move { send(&t, &owner, &id, &text).await })
    };
    while !running.is_finished() {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let taken = stale.take(usize::MAX);
        assert_eq!(taken, dsh_terminal::SendDelta::default(), "stolen");
    }
    let r = running.await.expect("join");
    for i in 1..=3 {
        let line = format!("{tag}-{i}");
        assert_eq!(
            r.viewport.lines().filter(|l| *l == line).count(),
            1,
            "{r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_send_that_never_ran_leaves_later_output_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let t = Arc::new(service(config(), None));
    let owner = Owner::new(SessionId::new("s1"));
    let id = open_shell(&t, &owner, &ws).await;
    let request = |text: &str| SendRequest {
        text: text.into(),
        submit: true,
        timeout: Duration::from_secs(20),
    };
    // Aborted before it typed anything (a kill that raced the start).
    let cancel = CancelToken::new();
    cancel.cancel(CancelReason::ClientCancelled);
    let aborted = t
        .start_send(&owner, &id, request("echo never"), cancel)
        .expect("start");
    let aborted_reader = aborted.reader();
    let e = aborted.await.expect_err("aborted");
    assert_eq!(e.code(), ErrorCode::Aborted, "{e}");
    foreground_keeps_its_output(&t, &owner, &id, &aborted_reader, "after-abort").await;
    // Dropped before it ran.
    let dropped = t
        .start_send(&owner, &id, request("echo never"), CancelToken::new())
        .expect("start");
    let dropped_reader = dropped.reader();
    drop(dropped);
    foreground_keeps_its_output(&t, &owner, &id, &dropped_reader, "after-drop").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_is_marked_truncated_only_when_its_own_output_was_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let t = service(
        TerminalConfig {
            scrollback_lines: 100,
            ..config()
        },
        None,
    );
    let owner = Owner::new(SessionId::new("s1"));
    let id = open_shell(&t, &owner, &ws).await;
    // 1000 lines: the scrollback drops most, the send's own output keeps them all.
    let r = send(&t, &owner, &id, "seq 1 1000").await;
    assert!(r.viewport.contains("\n1\n2\n") && r.viewport.contains("\n1000\n"));
    assert!(!r.truncated, "{r:?}");
    assert!(t.read(&owner, &id, 0, 1000).expect("read").truncated);
    let r = send(&t, &owner, &id, "echo small").await;
    assert!(!r.truncated, "a later send said it was cut: {r:?}");
}

/// A backend whose terminals never finish starting.
struct Stuck;

#[async_trait::async_trait]
impl dsh_terminal::TerminalBackend for Stuck {
    fn kind(&self) -> &str {
        "stuck"
    }
    async fn spawn(
        &self,
        _: dsh_terminal::SpawnRequest,
        _: &TerminalConfig,
        _: &CancelToken,
    ) -> Result<(dsh_terminal::Terminal, String), dsh_core::HarnessError> {
        std::future::pending().await
    }
}

// An open whose future is dropped while the terminal starts gives back what it reserved:
// its name, its place under the owner's limit, and the owner is no longer opening one.
#[tokio::test]
async fn a_dropped_open_gives_back_its_name_and_its_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = Terminals::new(TerminalConfig {
        max_terminals: 1,
        ..config()
    })
    .expect("config");
    t.register(Arc::new(Stuck)).expect("backend");
    t.register(Arc::new(BashBackend::new(
        Arc::new(LocalSubprocess::new()),
        None,
    )))
    .expect("backend");
    let owner = Owner::new(SessionId::new("s1"));
    let mut stuck = open_request(dir.path(), SandboxMode::DangerFullAccess);
    stuck.kind = "stuck".into();
    stuck.name = Some("dev".into());
    let cancel = CancelToken::new();
    let mut opening = Box::pin(t.open(&owner, stuck, &cancel));
    // Polled until it is inside the backend's spawn (it never leaves it), then dropped.
    assert!(futures_poll_once(opening.as_mut()).await.is_none());
    assert!(t.has_owner_activity(&owner), "opening");
    drop(opening);
    assert!(
        !t.has_owner_activity(&owner),
        "the reservation was given back"
    );
    let mut again = open_request(dir.path(), SandboxMode::DangerFullAccess);
    again.name = Some("dev".into());
    let opened = t
        .open(&owner, again, &CancelToken::new())
        .await
        .expect("the name and the place are free again");
    assert_eq!(opened.snapshot.name.as_deref(), Some("dev"));
    t.dispose().await.expect("dispose");
}

/// Polls `f` once: its output if it is ready.
async fn futures_poll_once<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
    let mut f = f;
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}
