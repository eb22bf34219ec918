//! The small findings of the second hardening round: the environment scrub, escape
//! sequences on the user's terminal, line disciplines, relative `PATH` entries.

use std::process::Command;

use crate::support::{bwrap_usable, text, Fixture};

// Regression: issue 23: these names and value shapes passed the scrub.
#[test]
fn the_scrub_drops_session_tokens_jwts_and_passwords_in_values() {
    let fx = Fixture::new();
    let ws = fx.ws.to_str().expect("utf-8");
    let leaked: &[(&str, &str)] = &[
        ("BW_SESSION", "leak-bw"),
        ("OP_SESSION_my", "leak-op"),
        ("CI_JOB_JWT", "leak-jwt"),
        ("GCP_CREDS", "leak-gcp"),
        ("DB_PW", "leak-pw"),
        ("GITHUB_OAUTH", "leak-oauth"),
        ("HMAC_SALT", "leak-salt"),
        ("APP_DB", "jdbc:mysql://db/app?user=a&password=leak-jdbc"),
        ("PROXY_PLAIN", "me:leak-schemeless@proxy:3128"),
        ("REMOTE", "https://ghp_leaktoken@github.com/org/repo"),
    ];
    let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
    c.env("HOME", &fx.home).env("KEEP_ME", "plain-kept");
    for (k, v) in leaked {
        c.env(k, v);
    }
    let out = c
        .args(["exec", "-C", ws, "--", "env"])
        .output()
        .expect("dsh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("KEEP_ME=plain-kept"), "{}", text(&out));
    assert!(!stdout.contains("leak"), "{stdout}");
}

// Regression: issue 23: `dsh tool` wrote a command's OSC 52 (clipboard) and screen-clear
// sequences raw to the user's terminal.
#[test]
fn dsh_tool_shows_escape_sequences_on_a_terminal_instead_of_sending_them() {
    let fx = Fixture::new();
    let state = fx.base.join("state");
    let args = serde_json::json!({
        "command": "printf 'a\\033]52;c;cHduZWQ=\\007b\\033[2Jc\\n'",
        "description": "escapes"
    })
    .to_string();
    // `script` gives dsh a terminal for its stdout.
    let out = Command::new("script")
        .args([
            "-qec",
            r#"exec "$DSH" tool bash "$ARGS" -C "$WS" --state "$ST""#,
            "/dev/null",
        ])
        .env("HOME", &fx.home)
        .env("DSH", env!("CARGO_BIN_EXE_dsh"))
        .env("ARGS", &args)
        .env("WS", &fx.ws)
        .env("ST", &state)
        .output()
        .expect("script (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(r"a\x1b]52;c;cHduZWQ=\x07b\x1b[2Jc"),
        "{stdout:?}"
    );
    assert!(!stdout.contains('\x1b'), "{stdout:?}");
    // Piped, the text is the command's own.
    let out = fx.dsh(&[
        "tool",
        "bash",
        &args,
        "-C",
        fx.ws.to_str().expect("utf-8"),
        "--state",
        state.to_str().expect("utf-8"),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("a\x1b]52;c;"),
        "{}",
        text(&out)
    );
}

// Regression: issue 23: one-shot bash allowed `TIOCSETD` (a line discipline, a long line
// of kernel bugs) on a terminal it opened itself.
#[test]
fn no_command_sets_a_line_discipline() {
    let fx = Fixture::new();
    let script = "import fcntl, pty, struct\n\
                  m, s = pty.openpty()\n\
                  fcntl.ioctl(s, 0x5423, struct.pack('i', 0))\n\
                  print('SETD_OK')\n";
    let mut ran = 0;
    for runner in ["landlock", "bwrap"] {
        for mode in ["read-only", "workspace-write"] {
            let extra = ["--mode", mode, "--allow-partial"];
            let argv = ["/usr/bin/python3", "-c", script];
            let Some(out) = fx.exec_runner(&fx.ws, runner, &extra, &argv) else {
                continue;
            };
            ran += 1;
            assert!(
                !text(&out).contains("SETD_OK"),
                "{runner} {mode}: {}",
                text(&out)
            );
            assert!(
                text(&out).contains("Error"),
                "{runner} {mode}: {}",
                text(&out)
            );
        }
    }
    assert!(ran >= 2);
}

// Regression: issue 23: a relative PATH entry (`./bin`) let a planted `bin/ls` run in
// place of the host's; and an absolute PATH directory in the workspace was refused with
// "install bubblewrap" where bubblewrap was installed.
#[test]
fn relative_path_entries_are_a_gap_named_for_what_it_is() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    let ws = fx.ws.to_str().expect("utf-8");
    let host_path = std::env::var("PATH").unwrap_or_default();
    for (path, says) in [
        (
            format!("./bin:{host_path}"),
            "relative or empty entry \"./bin\"",
        ),
        (format!("{host_path}:"), "relative or empty entry \"\""),
        (
            format!("{ws}/bin:{host_path}"),
            "take that directory off PATH",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .env("HOME", &fx.home)
            .env("PATH", &path)
            .args(["exec", "-C", ws, "--mode", "workspace-write", "--", "true"])
            .output()
            .expect("dsh");
        assert_eq!(out.status.code(), Some(125), "{path}: {}", text(&out));
        assert!(text(&out).contains("SANDBOX_UNAVAILABLE"), "{}", text(&out));
        assert!(text(&out).contains(says), "{path}: {}", text(&out));
        assert!(
            !text(&out).contains("install bubblewrap"),
            "{path}: {}",
            text(&out)
        );
    }
}
