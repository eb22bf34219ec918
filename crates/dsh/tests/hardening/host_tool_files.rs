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
    (".pre-commit-config.yaml", "repos: []"),
    ("lefthook.yml", "pre-commit: {}"),
    (".yarnrc.yml", "yarnPath: x.js"),
    (".npmrc", "node-options=--require ./x.js"),
    ("rust-toolchain.toml", "[toolchain]\npath = \"/tmp/x\""),
    (".envrc", "x"),
    ("proj.code-workspace", "{\"tasks\": {}}"),
];

// Regression: issue 11, finding 8.
#[test]
fn files_host_tools_run_without_asking_cannot_be_written() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    // An existing workspace file matching a protected pattern.
    std::fs::write(fx.ws.join("proj.code-workspace"), "{}\n").expect("code-workspace");
    for (path, content) in PLANTS {
        let out = fx.exec(&format!(
            "mkdir -p \"$(dirname {path})\" && printf '%s' '{}' > {path}",
            content.replace('\'', "")
        ));
        assert_ne!(out.status.code(), Some(0), "{path}: {}", text(&out));
    }
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("proj.code-workspace")).expect("read"),
        "{}\n"
    );
    for (path, _) in PLANTS {
        if *path != "proj.code-workspace" {
            assert!(!fx.ws.join(path).exists(), "{path} exists");
        }
    }
    assert_eq!(
        fx.git(&fx.ws, &["status", "--porcelain"]),
        "?? proj.code-workspace\n"
    );
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
        .output()
        .expect("cargo metadata");
    assert!(meta.status.success(), "{}", text(&meta));
    assert!(
        !fx.marker().exists(),
        "cargo metadata ran a planted wrapper"
    );
}
