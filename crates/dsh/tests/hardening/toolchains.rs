//! What must still work with the homes closed: the user's own toolchains, run on a real
//! project in read-only and workspace-write with the default allow-list.
//!
//! This test runs with the real `HOME` (the toolchains are installed there). A tool
//! missing here is a skip `dsh_testkit` records (a failure where the toolchains are
//! required: CI installs them all), and is left out.

use std::path::Path;
use std::process::Command;

use crate::support::text;

/// Each tool, and a line a command runs with it that prints `<TOOL>_OK` when it works,
/// in read-only and in workspace-write.
const TOOLS: &[(&str, &str, &str)] = &[
    (
        "git",
        "git status --short >/dev/null && git log --oneline -1 >/dev/null && echo GIT_OK",
        "git add -A && git -c user.name=t -c user.email=t@t commit -qm x --allow-empty && echo GIT_OK",
    ),
    (
        "cargo",
        "cargo metadata --offline --no-deps --format-version 1 >/dev/null && echo CARGO_OK",
        "cargo build --offline -q && ./target/debug/compat",
    ),
    (
        "python3",
        "python3 t.py && python3 -c 'import json, hashlib' && python3 -m pip --version >/dev/null && echo PYTHON3_OK",
        "python3 -m venv .venv && .venv/bin/python t.py && .venv/bin/pip --version >/dev/null && echo PYTHON3_OK",
    ),
    (
        "node",
        "node -e 'console.log(\"NODE_OK\")'",
        "node -e 'require(\"fs\").writeFileSync(\"n.txt\", \"x\"); console.log(\"NODE_OK\")'",
    ),
    (
        "npm",
        "npm --version >/dev/null && npm run -s t >/dev/null && echo NPM_OK",
        "npm run -s t >/dev/null && echo NPM_OK",
    ),
    ("make", "make -s hello", "make -s hello"),
    (
        "cc",
        "cc --version >/dev/null && echo CC_OK",
        "printf 'int main(void){return 0;}' > a.c && cc a.c -o a && ./a && echo CC_OK",
    ),
];

/// Whether `tool` is on `PATH`.
fn found(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A small project every tool above has something to do in, committed.
fn project(ws: &Path) {
    let write = |p: &str, s: &str| {
        let p = ws.join(p);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
        std::fs::write(p, s).expect("file");
    };
    write(
        "Cargo.toml",
        "[package]\nname = \"compat\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    write("src/main.rs", "fn main() { println!(\"CARGO_OK\"); }\n");
    write("Makefile", "hello:\n\t@echo MAKE_OK\n");
    write(
        "package.json",
        "{\"name\":\"compat\",\"version\":\"1.0.0\",\"scripts\":{\"t\":\"node -e 0\"}}\n",
    );
    write("t.py", "print('ok')\n");
    write(".gitignore", "target/\n.venv/\n");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(ws)
            .output()
            .expect("git");
        assert!(out.status.success(), "git {args:?}: {}", text(&out));
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "init",
    ]);
}

#[test]
fn toolchains_in_the_users_home_work_in_both_modes() {
    let mut present = Vec::new();
    for (tool, _, _) in TOOLS {
        if found(tool) {
            present.push(*tool);
        } else {
            dsh_testkit::skip(
                dsh_testkit::Need::Toolchains,
                &format!("{tool} is not on PATH here: left out"),
            );
        }
    }
    assert!(present.contains(&"git"), "git is needed");
    let tmp = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(tmp.path())
        .expect("canonical")
        .join("ws");
    std::fs::create_dir_all(&ws).expect("ws");
    project(&ws);
    let w = ws.to_str().expect("utf-8");
    for (mode, pick) in [("read-only", 1), ("workspace-write", 2)] {
        for (tool, ro, ww) in TOOLS.iter().filter(|t| present.contains(&t.0)) {
            let line = if pick == 1 { ro } else { ww };
            // The project's own target folder: the one this test's cargo builds in (CI
            // names one outside the workspace) is not the command's to write.
            let out = Command::new(env!("CARGO_BIN_EXE_dsh"))
                .env_remove("CARGO_TARGET_DIR")
                .env_remove("CARGO_BUILD_TARGET_DIR")
                .args(["exec", "-C", w, "--mode", mode, "--", "bash", "-c", line])
                .output()
                .expect("dsh");
            let want = format!("{}_OK", tool.to_uppercase());
            assert!(
                String::from_utf8_lossy(&out.stdout).contains(&want),
                "{tool} in {mode}: {}",
                text(&out)
            );
        }
    }
}
