//! Placeholders shared by concurrent dsh processes on one workspace.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{bwrap_usable, text, Fixture};

/// Protected paths a command tries to create while another dsh process comes and goes.
const TARGETS: [&str; 6] = [
    ".mcp.json",
    ".npmrc",
    ".cargo/config.toml",
    ".vscode/tasks.json",
    ".claude/settings.json",
    ".cursor/mcp.json",
];

// Regression: issue 11, finding 4 (a second dsh process removed the first one's
// placeholders while its command ran, and the command could then create the paths).
#[test]
fn a_second_dsh_process_never_unprotects_the_first_ones_command() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let rounds: usize = std::env::var("DSH_PLACEHOLDER_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let attempt: String = TARGETS
        .iter()
        .map(|t| {
            format!("(mkdir -p \"$(dirname {t})\" && echo x > {t}) 2>/dev/null && echo WROTE {t}; ")
        })
        .collect();
    for round in 0..rounds {
        let (ready, go) = (format!("ready-{round}"), format!("go-{round}"));
        // The first command waits (inside the sandbox) until the second has come and gone,
        // then tries every target.
        let first = format!(
            "touch {ready}; while [ ! -e {go} ]; do sleep 0.005; done; {attempt} rm -f {ready} {go}"
        );
        let ws = fx.ws.to_str().expect("utf-8");
        let a = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .args([
                "exec",
                "-C",
                ws,
                "--mode",
                "workspace-write",
                "--",
                "bash",
                "-c",
                &first,
            ])
            .env("HOME", &fx.home)
            .env("XDG_CONFIG_HOME", fx.home.join(".config"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the first dsh");
        let start = Instant::now();
        while !fx.ws.join(&ready).exists() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the first command never started"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        // Half the rounds, the second command starts before the first one's placeholders are
        // all in use; it always ends before the first one tries.
        let second = fx.exec(if round % 2 == 0 { "true" } else { "sleep 0.01" });
        assert_eq!(
            second.status.code(),
            Some(0),
            "round {round}: {}",
            text(&second)
        );
        std::fs::write(fx.ws.join(&go), "").expect("go");
        let out = a.wait_with_output().expect("first dsh");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("WROTE"),
            "round {round}: a protected path became writable: {}",
            text(&out)
        );
        for t in TARGETS {
            let top = t.split('/').next().unwrap_or(t);
            assert!(
                !fx.ws.join(top).exists(),
                "round {round}: {top} was left behind"
            );
        }
    }
    assert_eq!(fx.git(&fx.ws, &["status", "--porcelain"]), "");
}

// A dsh killed while its command ran leaves its placeholders; the next command adopts and
// removes them.
#[test]
fn placeholders_left_by_a_killed_dsh_are_cleaned_up_by_the_next_command() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let ws = fx.ws.to_str().expect("utf-8");
    let mut a = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .args([
            "exec",
            "-C",
            ws,
            "--mode",
            "workspace-write",
            "--",
            "bash",
            "-c",
            "touch up; sleep 1000",
        ])
        .env("HOME", &fx.home)
        .env("XDG_CONFIG_HOME", fx.home.join(".config"))
        .spawn()
        .expect("spawn dsh");
    let start = Instant::now();
    while !fx.ws.join("up").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        fx.ws.join(".mcp.json").exists(),
        "no placeholder while the command runs"
    );
    a.kill().expect("SIGKILL dsh");
    let _ = a.wait();
    // Its reaper takes the command down with it; the placeholders stay, marked.
    assert!(fx.ws.join(".mcp.json").exists());
    let out = fx.exec("rm up");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        !fx.ws.join(".mcp.json").exists(),
        "a left placeholder was not adopted"
    );
    assert_eq!(fx.git(&fx.ws, &["status", "--porcelain"]), "");
}
