//! A command on a terminal of its own (`SpawnSpec::terminal`): real PTYs, real shells.

use std::time::{Duration, Instant};

use dsh_process::{LocalSubprocess, Outcome, Pty, Signal, SpawnSpec, Subprocess, TerminalSize};

const SIZE: TerminalSize = TerminalSize {
    rows: 40,
    cols: 160,
};

/// Reads from `pty` until `want` has appeared in everything read so far, or 10 s pass.
async fn read_until(pty: &Pty, seen: &mut String, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while !seen.contains(want) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, pty.read(&mut buf)).await {
            Ok(Ok(0)) => panic!("end of output before {want:?}: {seen:?}"),
            Ok(Ok(n)) => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            Ok(Err(e)) => panic!("read: {e}"),
            Err(_) => panic!("no {want:?} within 10 s: {seen:?}"),
        }
    }
}

/// Everything `pty` gives until end-of-output (within 10 s).
async fn read_to_end(pty: &Pty) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), pty.read(&mut buf)).await {
            Ok(Ok(0)) => return String::from_utf8_lossy(&seen).into_owned(),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => panic!("read: {e}"),
            Err(_) => panic!("no end of output within 10 s: {seen:?}"),
        }
    }
}

/// Polls `f` every 20 ms for up to 10 s until it holds.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn shell() -> SpawnSpec {
    let mut spec = SpawnSpec::new(["bash", "--noprofile", "--norc", "-i"], "/");
    spec.env.insert("PS1".into(), Some("P> ".into()));
    spec.env.insert("TERM".into(), Some("dumb".into()));
    spec.terminal = Some(SIZE);
    spec
}

#[tokio::test]
async fn a_shell_on_a_terminal_has_job_control_and_the_kernel_shows_who_reads() {
    let sub = LocalSubprocess::new();
    let mut p = sub.spawn(shell()).expect("spawn");
    let pty = p.take_terminal().expect("a terminal");
    assert_eq!(pty.size().expect("size"), SIZE);
    let mut seen = String::new();
    read_until(&pty, &mut seen, "P> ").await;
    // The shell leads its session and owns the foreground, waiting for a line.
    eventually("the shell waits for input", || {
        pty.foreground()
            .is_some_and(|f| f.pgid == p.pid() && f.input_waiting)
    })
    .await;
    // No "no job control" complaint: the terminal is its controlling terminal.
    assert!(!seen.contains("job control"), "{seen:?}");

    pty.write_all(b"cat\r").await.expect("write");
    // `cat` becomes the foreground group and blocks reading the terminal.
    eventually("cat waits for input", || {
        pty.foreground()
            .is_some_and(|f| f.pgid != p.pid() && f.input_waiting)
    })
    .await;
    let before = pty.foreground().expect("cat");
    pty.write_all(b"pong\r").await.expect("write");
    read_until(&pty, &mut seen, "pong\r\npong").await;
    eventually("cat read the line and waits again", || {
        pty.foreground()
            .is_some_and(|f| f.pgid == before.pgid && f.input_waiting && f.reads > before.reads)
    })
    .await;
    // A real SIGINT to the foreground group ends `cat`, not the shell.
    let target = pty.signal_foreground(libc::SIGINT).expect("SIGINT");
    assert_eq!(target, before.pgid);
    eventually("the shell has the foreground again", || {
        pty.foreground_group() == Some(p.pid())
    })
    .await;
    assert!(!p.leader_exited(), "the shell lives on");

    pty.resize(TerminalSize { rows: 10, cols: 33 })
        .expect("resize");
    pty.write_all(b"stty size\r").await.expect("write");
    read_until(&pty, &mut seen, "10 33").await;
    pty.write_all(b"exit 7\r").await.expect("write");
    assert_eq!(p.done().await, Outcome::Exited(7));
}

#[tokio::test]
async fn closing_the_terminal_hangs_up_its_session() {
    let sub = LocalSubprocess::new();
    let mut spec = shell();
    spec.argv = ["sleep", "100"].map(Into::into).to_vec();
    let mut p = sub.spawn(spec).expect("spawn");
    let pty = p.take_terminal().expect("a terminal");
    eventually("sleep runs", || pty.foreground_group() == Some(p.pid())).await;
    drop(pty);
    let outcome = tokio::time::timeout(Duration::from_secs(10), p.done())
        .await
        .expect("sleep ends");
    assert_eq!(outcome, Outcome::Signaled(Signal(libc::SIGHUP)));
}

#[tokio::test]
async fn a_command_starts_with_default_signal_dispositions_whatever_dsh_ignores() {
    // Ignore SIGINT and SIGQUIT in this test process, as `nohup` or a shell's `&` would.
    // SAFETY: changing this process's dispositions; no handler runs.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
    let sub = LocalSubprocess::new();
    for terminal in [None, Some(SIZE)] {
        let mut spec = SpawnSpec::new(["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"], "/");
        spec.stdout = dsh_process::OutputMode::Collect(dsh_process::CaptureLimits {
            max_bytes: 4096,
            max_spill_bytes: None,
        });
        spec.terminal = terminal;
        let mut p = sub.spawn(spec).expect("spawn");
        let text = match p.take_terminal() {
            Some(pty) => read_to_end(&pty).await,
            None => {
                p.done().await;
                p.collected().0.text
            }
        };
        assert!(
            text.contains("SigBlk:\t0000000000000000"),
            "{terminal:?}: {text}"
        );
        assert!(
            text.contains("SigIgn:\t0000000000000000"),
            "{terminal:?}: {text}"
        );
    }
}

#[tokio::test]
async fn a_repl_waiting_in_select_or_poll_counts_as_reading_the_terminal() {
    let sub = LocalSubprocess::new();
    let mut spec = shell();
    spec.argv = ["python3", "-i", "-q"].map(Into::into).to_vec();
    let mut p = sub.spawn(spec).expect("spawn");
    let pty = p.take_terminal().expect("a terminal");
    let mut seen = String::new();
    read_until(&pty, &mut seen, ">>> ").await;
    eventually("python waits for input", || {
        pty.foreground().is_some_and(|f| f.input_waiting)
    })
    .await;
    let before = pty.foreground().expect("python");
    pty.write_all(b"x = 41\r").await.expect("write");
    eventually("python read the line and waits again", || {
        pty.foreground()
            .is_some_and(|f| f.input_waiting && f.reads > before.reads)
    })
    .await;
    pty.write_all(b"print(x + 1)\r").await.expect("write");
    read_until(&pty, &mut seen, "42").await;
}
