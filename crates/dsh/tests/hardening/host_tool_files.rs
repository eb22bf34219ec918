//! Files host tools run or read as settings without asking, which a confined command must
//! not be able to write.

use crate::support::{bwrap_usable, text, Fixture};

/// Each path, and a line a command would put there to have the host run it.
const PLANTS: &[(&str, &str)] = &[
    (".cargo/config.toml", "[build]\nrustc-wrapper = \"/tmp/x\""),
    (".cargo/config", "[build]\nrustc-wrapper = \"/tmp/x\""),
    (
        ".devcontainer/devcontainer.json",
        "{\"initializeCommand\": \"x\"}",
    ),
    (".devcontainer.json", "{\"initializeCommand\": \"x\"}"),
    (".vscode/tasks.json", "{}"),
    (".cursor/mcp.json", "{}"),
    (".codex/config.toml", "x"),
    (".gemini/settings.json", "{}"),
    (".zed/tasks.json", "[]"),
    (".windsurf/x", "x"),
    (".amazonq/mcp.json", "{}"),
    (".kiro/settings/mcp.json", "{}"),
    (".roo/mcp.json", "{}"),
    (".continue/config.json", "{}"),
    ("opencode.json", "{}"),
    (".claude/settings.json", "{}"),
    (".mcp.json", "{}"),
    (".yarnrc.yml", "yarnPath: x.js"),
    (".npmrc", "node-options=--require ./x.js"),
    ("rust-toolchain.toml", "[toolchain]\npath = \"/tmp/x\""),
    // These exist in the workspace (see below): protected where present.
    ("proj.code-workspace", "{\"tasks\": {}}"),
    (".pre-commit-config.yaml", "repos: []"),
    ("lefthook.yml", "pre-commit: {}"),
    (".envrc", "x"),
    (".gitmodules", "x"),
    // Missing, but lefthook.yml exists: lefthook would merge them.
    ("lefthook-local.yml", "pre-commit: {}"),
    // The other formats lefthook merges, too.
    ("lefthook-local.json", "{\"pre-commit\": {}}"),
];

/// The files of [`PLANTS`] the workspace holds before the command, with their content.
const PRESENT: &[&str] = &[
    "proj.code-workspace",
    ".pre-commit-config.yaml",
    "lefthook.yml",
    ".envrc",
    ".gitmodules",
];

// Regression: issue 11, finding 8.
#[test]
fn files_host_tools_run_without_asking_cannot_be_written() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    for p in PRESENT {
        std::fs::write(fx.ws.join(p), "{}\n").expect("present file");
    }
    for (path, content) in PLANTS {
        let out = fx.exec(&format!(
            "mkdir -p \"$(dirname {path})\" && printf '%s' '{}' > {path}",
            content.replace('\'', "")
        ));
        assert_ne!(out.status.code(), Some(0), "{path}: {}", text(&out));
    }
    for (path, _) in PLANTS {
        if PRESENT.contains(path) {
            let now = std::fs::read_to_string(fx.ws.join(path)).expect("read");
            assert_eq!(now, "{}\n", "{path} changed");
        } else {
            assert!(!fx.ws.join(path).exists(), "{path} exists");
        }
    }
    let mut status: Vec<String> = PRESENT.iter().map(|p| format!("?? {p}")).collect();
    status.sort();
    let mut got: Vec<String> = fx
        .git(&fx.ws, &["status", "--porcelain"])
        .lines()
        .map(str::to_owned)
        .collect();
    got.sort();
    assert_eq!(got, status);
}

// Finding 8's example: `cargo metadata`, which an editor runs on opening the folder, runs
// `build.rustc-wrapper`.
#[test]
fn cargo_metadata_on_the_host_runs_nothing_a_command_planted() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    std::fs::write(
        fx.ws.join("Cargo.toml"),
        "[package]\nname = \"p\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .expect("manifest");
    std::fs::create_dir(fx.ws.join("src")).expect("src");
    std::fs::write(fx.ws.join("src/lib.rs"), "").expect("lib");
    let wrapper = fx.ws.join("wrap.sh");
    let out = fx.exec(&format!(
        "printf '#!/bin/sh\\n{}\\nexec \"$@\"\\n' > wrap.sh && chmod +x wrap.sh && mkdir -p .cargo && \
         printf '[build]\\nrustc-wrapper = \"{}\"\\n' > .cargo/config.toml",
        fx.plant(),
        wrapper.display()
    ));
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!fx.ws.join(".cargo").exists(), "a placeholder was left");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let meta = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--no-deps",
        ])
        .current_dir(&fx.ws)
        .output();
    let meta = match meta {
        Ok(m) => m,
        // The unprivileged CI pass cannot reach root's toolchain; the refusal above is
        // what this user's run checks.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            dsh_testkit::skip(
                dsh_testkit::Need::Toolchains,
                &format!("cargo is not reachable by this user ({e}): host check left out"),
            );
            return;
        }
        Err(e) => panic!("cargo metadata: {e}"),
    };
    assert!(meta.status.success(), "{}", text(&meta));
    assert!(
        !fx.marker().exists(),
        "cargo metadata ran a planted wrapper"
    );
}
