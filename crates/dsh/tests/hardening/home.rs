//! Secrets denied by construction: a home directory is readable only through an allow-list,
//! so a token file dsh never heard of is denied all the same; no other terminal and none of
//! dsh's own state (another session's log) is readable either.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::support::{text, Fixture};

const SECRET: &str = "s3cr3t-by-construction";

/// Files in the fixture's home that hold secrets no deny list named (each found by an
/// attacker with the default settings), and one dsh has never heard of.
const UNLISTED: &[&str] = &[
    ".aws/sso/cache/0123abcd.json",
    ".aws/cli/cache/token.json",
    ".config/git/credentials",
    ".kube/cache/oidc-login/token",
    ".gemini/oauth_creds.json",
    ".config/github-copilot/apps.json",
    ".config/containers/auth.json",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".config/rclone/rclone.conf",
    ".terraformrc",
    ".bash_history",
    ".some-new-tool/token",
];

fn fixture_with_unlisted_secrets() -> Fixture {
    let fx = Fixture::new();
    for path in UNLISTED {
        let p = fx.home.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
        std::fs::write(&p, format!("{SECRET}\n")).expect("secret");
    }
    // On the default allow-list: settings every git run reads, holding no secret.
    std::fs::write(fx.home.join(".gitconfig"), "[user]\n\tname = plain-name\n").expect("cfg");
    std::fs::create_dir_all(fx.home.join(".config/git")).expect("git dir");
    std::fs::write(fx.home.join(".config/git/ignore"), "plain-ignore\n").expect("ignore");
    fx
}

// Regression: issue 23: the default read-only sandbox and the read tool read live AWS SSO
// tokens, git's credential store and OAuth refresh tokens that no deny list named.
#[test]
fn a_home_is_readable_only_through_the_allow_list_under_every_runner_and_mode() {
    let fx = fixture_with_unlisted_secrets();
    let home = fx.home.display().to_string();
    let files: Vec<String> = UNLISTED.iter().map(|p| format!("{home}/{p}")).collect();
    let script = format!(
        "cat {} 2>&1; cat {home}/.gitconfig {home}/.config/git/ignore; \
         echo LS:$(ls -A {home} | tr '\\n' ,); git config user.name; echo ran",
        files.join(" ")
    );
    let mut ran = 0;
    for runner in ["landlock", "bwrap"] {
        for mode in ["read-only", "workspace-write"] {
            let extra = ["--mode", mode, "--allow-partial"];
            let Some(out) = fx.exec_runner(&fx.ws, runner, &extra, &["bash", "-c", &script]) else {
                continue;
            };
            ran += 1;
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("ran"), "{runner} {mode}: {}", text(&out));
            assert!(!stdout.contains(SECRET), "{runner} {mode}: {}", text(&out));
            for p in UNLISTED {
                assert!(
                    stdout.contains(&format!("{home}/{p}: ")),
                    "{runner} {mode}: no refusal for {p}: {}",
                    text(&out)
                );
            }
            assert!(
                stdout.contains("plain-name"),
                "{runner} {mode}: {}",
                text(&out)
            );
            assert!(
                stdout.contains("plain-ignore"),
                "{runner} {mode}: {}",
                text(&out)
            );
            if runner == "bwrap" {
                // The closed home shows only what the allow-list names.
                assert!(
                    stdout.contains("LS:.config,.gitconfig,\n"),
                    "{runner} {mode}: {stdout}"
                );
            }
        }
    }
    assert!(ran >= 2, "bubblewrap must run here");
}

#[test]
fn the_file_tools_refuse_a_home_outside_the_allow_list_and_read_allow_opens_a_path() {
    let fx = fixture_with_unlisted_secrets();
    let ws = fx.ws.to_str().expect("utf-8");
    let state = fx.base.join("state");
    let state = state.to_str().expect("utf-8");
    std::os::unix::fs::symlink(fx.home.join(".terraformrc"), fx.ws.join("alias")).expect("link");
    for path in [
        fx.home
            .join(".aws/sso/cache/0123abcd.json")
            .display()
            .to_string(),
        fx.home.join(".some-new-tool/token").display().to_string(),
        "alias".to_owned(),
    ] {
        let args = serde_json::json!({"file_path": path}).to_string();
        let out = fx.dsh(&["tool", "read", &args, "-C", ws, "--state", state]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{path}: {}", text(&out));
        assert!(!stdout.contains(SECRET), "{path}: {stdout}");
        assert!(stdout.contains("read_allow"), "{path}: {stdout}");
    }
    let args = serde_json::json!({"file_path": fx.home.join(".gitconfig").display().to_string()})
        .to_string();
    let out = fx.dsh(&["tool", "read", &args, "-C", ws, "--state", state]);
    assert!(text(&out).contains("plain-name"), "{}", text(&out));
    // A search of the home finds what is allowed and opens nothing else.
    let args = serde_json::json!({"pattern": "plain|s3cr3t", "path": fx.home.display().to_string(), "include": "**"})
        .to_string();
    let out = fx.dsh(&["tool", "grep", &args, "-C", ws, "--state", state]);
    assert!(!text(&out).contains(SECRET), "{}", text(&out));
    for dir in [".aws", ".some-new-tool"] {
        let args = serde_json::json!({"pattern": "s3cr3t", "path": fx.home.join(dir).display().to_string()})
            .to_string();
        let out = fx.dsh(&["tool", "grep", &args, "-C", ws, "--state", state]);
        assert!(!text(&out).contains(SECRET), "{dir}: {}", text(&out));
        assert!(text(&out).contains("read_allow"), "{dir}: {}", text(&out));
    }
    // The user opens one path: the read tool and commands both read it; the rest stays
    // closed.
    std::fs::create_dir_all(fx.home.join(".config/dsh")).expect("config dir");
    std::fs::write(
        fx.home.join(".config/dsh/config.toml"),
        "read_allow = [\"~/.terraformrc\"]\n",
    )
    .expect("config");
    let args = serde_json::json!({"file_path": fx.home.join(".terraformrc").display().to_string()})
        .to_string();
    let out = fx.dsh(&["tool", "read", &args, "-C", ws, "--state", state]);
    assert!(text(&out).contains(SECRET), "{}", text(&out));
    let home = fx.home.display().to_string();
    let out = fx.dsh(&[
        "exec",
        "-C",
        ws,
        "--",
        "bash",
        "-c",
        &format!("cat {home}/.terraformrc; cat {home}/.bash_history 2>&1; true"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches(SECRET).count(), 1, "{}", text(&out));
    // A workspace's own config cannot open the home.
    std::fs::create_dir_all(fx.ws.join(".dsh")).expect("ws config dir");
    std::fs::write(
        fx.ws.join(".dsh/config.toml"),
        "read_allow = [\"~/.bash_history\"]\n",
    )
    .expect("ws config");
    let out = fx.dsh(&["exec", "-C", ws, "--", "true"]);
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(text(&out).contains("trusted_workspaces"), "{}", text(&out));
}

// Regression: issue 23: under Landlock a confined command read what the user typed into
// another terminal (`cat /dev/pts/N`: a sudo password).
#[test]
fn no_command_opens_another_terminal_under_either_runner() {
    let fx = Fixture::new();
    let mut holder = Command::new("python3")
        .args([
            "-c",
            "import os, pty, sys, time\n\
             m, s = pty.openpty()\n\
             print(os.ttyname(s), flush=True)\n\
             os.write(m, b'typed-password\\n')\n\
             time.sleep(60)\n",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 holds a terminal");
    let mut line = String::new();
    BufReader::new(holder.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("its name");
    let tty = line.trim().to_owned();
    assert!(tty.starts_with("/dev/pts/"), "{tty}");
    let script = format!("exec 3<{tty} && echo OPENED && timeout 1 head -c 64 <&3; echo ran");
    let mut ran = 0;
    for runner in ["landlock", "bwrap"] {
        let Some(out) = fx.exec_runner(&fx.ws, runner, &[], &["bash", "-c", &script]) else {
            continue;
        };
        ran += 1;
        assert!(text(&out).contains("ran"), "{runner}: {}", text(&out));
        assert!(!text(&out).contains("OPENED"), "{runner}: {}", text(&out));
        assert!(
            !text(&out).contains("typed-password"),
            "{runner}: {}",
            text(&out)
        );
    }
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(ran > 0);
}

// Regression: issue 23: from any sandbox a command read dsh's own session database, and
// with it another session's tool results (a key one session had read).
#[test]
fn session_b_cannot_read_session_a_log() {
    let fx = Fixture::new();
    let ws = fx.ws.to_str().expect("utf-8");
    // The state directory outside the home, as `--state` puts it: denied by name.
    let state = fx.base.join("state");
    let state_s = state.to_str().expect("utf-8");
    let a = serde_json::json!({"command": "echo sk_live_$((6*7))abcdef", "description": "echo"})
        .to_string();
    let out = fx.dsh(&[
        "tool",
        "--session",
        "a",
        "bash",
        &a,
        "-C",
        ws,
        "--state",
        state_s,
    ]);
    assert!(text(&out).contains("sk_live_42abcdef"), "{}", text(&out));
    let steal = format!(
        "grep -ra sk_live_42 {state_s} 2>&1; cat {state_s}/*.db 2>&1 | grep -a -c sk_live_42; echo ran"
    );
    let b = serde_json::json!({"command": steal, "description": "steal"}).to_string();
    let out = fx.dsh(&[
        "tool",
        "--session",
        "b",
        "bash",
        &b,
        "-C",
        ws,
        "--state",
        state_s,
    ]);
    assert!(text(&out).contains("ran"), "{}", text(&out));
    assert!(!text(&out).contains("sk_live_42abcdef"), "{}", text(&out));
    // And through the read tool.
    let db = std::fs::read_dir(&state)
        .expect("state")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "db"))
        .expect("a session database");
    let args = serde_json::json!({"file_path": db.display().to_string()}).to_string();
    let out = fx.dsh(&[
        "tool",
        "--session",
        "b",
        "read",
        &args,
        "-C",
        ws,
        "--state",
        state_s,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(!text(&out).contains("sk_live_42abcdef"), "{}", text(&out));
}

// A link at an allowed name must not open a whole home: a `bin -> ~` on PATH inside the
// workspace, or `~/.cache/pip -> ~/.aws` planted in a writable root; nor may a session
// started in a home read all of it.
#[test]
fn no_link_a_command_could_make_and_no_root_in_a_home_opens_its_secrets() {
    let fx = fixture_with_unlisted_secrets();
    let ws = fx.ws.to_str().expect("utf-8");
    let home = fx.home.display().to_string();
    let state = fx.base.join("state");
    let state = state.to_str().expect("utf-8");
    std::os::unix::fs::symlink(&fx.home, fx.ws.join("bin")).expect("link");
    let host_path = std::env::var("PATH").unwrap_or_default();
    let path = format!("{ws}/bin:{host_path}");
    let cat = format!("cat {home}/.terraformrc {home}/.aws/sso/cache/0123abcd.json 2>&1; echo ran");
    for runner in ["landlock", "bwrap"] {
        let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .env("HOME", &fx.home)
            .env("PATH", &path)
            .args([
                "exec", "-C", ws, "--runner", runner, "--", "bash", "-c", &cat,
            ])
            .output()
            .expect("dsh");
        if out.status.code() == Some(125) && runner == "landlock" {
            continue;
        }
        assert!(text(&out).contains("ran"), "{runner}: {}", text(&out));
        assert!(!text(&out).contains(SECRET), "{runner}: {}", text(&out));
    }
    let args = serde_json::json!({"file_path": format!("{home}/.terraformrc")}).to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
        .env("HOME", &fx.home)
        .env("PATH", &path)
        .args(["tool", "read", &args, "-C", ws, "--state", state])
        .output()
        .expect("dsh");
    assert!(!text(&out).contains(SECRET), "{}", text(&out));
    // A link planted in a writable root inside the home opens nothing in the next calls.
    let cache = fx.home.join(".cache");
    std::fs::create_dir_all(&cache).expect("cache");
    let cache_s = cache.to_str().expect("utf-8");
    let out = fx.exec_in(
        &fx.ws,
        &["--writable", cache_s],
        &format!("ln -s {home}/.aws {cache_s}/pip && echo planted"),
    );
    assert!(text(&out).contains("planted"), "{}", text(&out));
    for mode in ["read-only", "workspace-write"] {
        let out = fx.dsh(&[
            "exec",
            "-C",
            ws,
            "--mode",
            mode,
            "--",
            "bash",
            "-c",
            &format!("cat {home}/.aws/sso/cache/0123abcd.json {cache_s}/pip/sso/cache/0123abcd.json 2>&1; echo ran"),
        ]);
        assert!(text(&out).contains("ran"), "{mode}: {}", text(&out));
        assert!(!text(&out).contains(SECRET), "{mode}: {}", text(&out));
    }
    // A session started in the home reads the user's files there, not the dot-entries.
    std::fs::write(fx.home.join("notes.txt"), "plain-notes\n").expect("notes");
    let h = fx.home.to_str().expect("utf-8");
    let cat = format!("cat notes.txt {home}/.bash_history .some-new-tool/token 2>&1; echo ran");
    for runner in ["landlock", "bwrap"] {
        let Some(out) = fx.exec_runner(&fx.home, runner, &[], &["bash", "-c", &cat]) else {
            continue;
        };
        assert!(
            text(&out).contains("plain-notes"),
            "{runner}: {}",
            text(&out)
        );
        assert!(!text(&out).contains(SECRET), "{runner}: {}", text(&out));
    }
    let args = serde_json::json!({"file_path": format!("{home}/.bash_history")}).to_string();
    let out = fx.dsh(&["tool", "read", &args, "-C", h, "--state", state]);
    assert!(!text(&out).contains(SECRET), "{}", text(&out));
}

// A session's log kept with `--state DIR` must not be read from another session. A store
// in a home is closed to every session by construction (one outside every home is denied
// to its own session's commands only: see docs/reading.md).
#[test]
fn a_session_store_in_a_home_is_closed_to_every_other_session() {
    let fx = Fixture::new();
    let ws = fx.ws.to_str().expect("utf-8");
    let elsewhere = fx.home.join("stores/agent");
    let elsewhere_s = elsewhere.to_str().expect("utf-8");
    let a =
        serde_json::json!({"command": "echo sk_live_$((6*7))zz", "description": "a"}).to_string();
    let out = fx.dsh(&["tool", "bash", &a, "-C", ws, "--state", elsewhere_s]);
    assert!(text(&out).contains("sk_live_42zz"), "{}", text(&out));
    // Another session, with another store.
    let steal = format!("grep -rac sk_live_42zz {elsewhere_s} 2>&1; echo ran");
    let b = serde_json::json!({"command": steal, "description": "b"}).to_string();
    let other = fx.base.join("other-store");
    let out = fx.dsh(&[
        "tool",
        "bash",
        &b,
        "-C",
        ws,
        "--state",
        other.to_str().expect("utf-8"),
    ]);
    assert!(text(&out).contains("ran"), "{}", text(&out));
    assert!(!text(&out).contains(":1"), "{}", text(&out));
    let out = fx.dsh(&["exec", "-C", ws, "--", "bash", "-c", &steal]);
    assert!(text(&out).contains("ran"), "{}", text(&out));
    assert!(!text(&out).contains(":1"), "{}", text(&out));
}

// `/proc/<pid>/environ` must not be read through the read tool, which runs in dsh's own
// process, unconfined (its environment holds what the scrub keeps from commands).
#[test]
fn the_file_tools_read_nothing_of_proc_or_dev() {
    let fx = Fixture::new();
    let ws = fx.ws.to_str().expect("utf-8");
    let state = fx.base.join("state");
    let state = state.to_str().expect("utf-8");
    for path in ["/proc/self/environ", "/proc/1/cmdline", "/dev/zero"] {
        let args = serde_json::json!({"file_path": path}).to_string();
        let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
            .env("HOME", &fx.home)
            .env("DSH_TEST_SECRET_IN_ENV", "s3cr3t-in-env")
            .args(["tool", "read", &args, "-C", ws, "--state", state])
            .output()
            .expect("dsh");
        assert_eq!(out.status.code(), Some(1), "{path}: {}", text(&out));
        assert!(
            !text(&out).contains("s3cr3t-in-env"),
            "{path}: {}",
            text(&out)
        );
    }
    let args = serde_json::json!({"pattern": "s3cr3t", "path": "/proc/self"}).to_string();
    let out = fx.dsh(&["tool", "grep", &args, "-C", ws, "--state", state]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

// The model is told why a command could not read a path in a closed home, and which key
// opens it: the command itself only sees the file missing (bubblewrap) or refused.
#[test]
fn a_command_refused_a_home_path_gets_a_marker_naming_read_allow() {
    let fx = fixture_with_unlisted_secrets();
    let ws = fx.ws.to_str().expect("utf-8");
    let state = fx.base.join("state");
    let state = state.to_str().expect("utf-8");
    let token = fx.home.join(".aws/sso/cache/0123abcd.json");
    let args = serde_json::json!({
        "command": format!("cat '{}'", token.display()),
        "description": "read a token"
    })
    .to_string();
    let out = fx.dsh(&["tool", "bash", &args, "-C", ws, "--state", state]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(SECRET), "{stdout}");
    assert!(
        stdout.contains(&format!("[sandbox: reading {} is denied", token.display())),
        "{stdout}"
    );
    assert!(stdout.contains("read_allow"), "{stdout}");
    // A wider mode would not open it: none is suggested (a new user followed that advice).
    assert!(!stdout.contains("file access denied"), "{stdout}");
    assert!(!stdout.contains("--mode workspace-write"), "{stdout}");
}
