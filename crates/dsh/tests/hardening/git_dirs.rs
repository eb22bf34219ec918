//! Git dirs a confined command must not be able to arm: hook folders named by
//! `core.hooksPath`, `config.worktree`, `.git` pointer files, nested and bare repositories,
//! the git dirs of `--writable` roots, and repositories the command makes itself.

use crate::support::{bwrap_usable, text, Fixture};

// Regression: issue 11, finding 1 (husky sets core.hooksPath = .husky/_, whose stubs run
// the scripts in .husky).
#[test]
fn hook_folders_named_by_core_hooks_path_stay_read_only() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    std::fs::create_dir_all(fx.ws.join(".husky/_")).expect("husky");
    std::fs::create_dir_all(fx.ws.join("tools/githooks")).expect("hooks");
    fx.git(&fx.ws, &["config", "core.hooksPath", ".husky/_"]);
    // A second hooks path, in a file the repository's config includes.
    std::fs::write(
        fx.ws.join("shared.gitconfig"),
        "[core]\n\thooksPath = tools/githooks\n",
    )
    .expect("shared");
    fx.git(&fx.ws, &["config", "include.path", "../shared.gitconfig"]);
    let hook = format!("#!/bin/sh\n{}\n", fx.plant());
    for target in [
        ".husky/pre-commit",
        ".husky/_/pre-commit",
        "tools/githooks/pre-commit",
        "shared.gitconfig",
    ] {
        let script = format!(
            "{{ echo '#!/bin/sh'; echo \"touch {}\"; }} > {target} && chmod +x {target} && \
             git update-index --skip-worktree {target}",
            fx.marker().display()
        );
        let out = fx.exec(&script);
        assert_ne!(out.status.code(), Some(0), "{target}: {}", text(&out));
        if target != "shared.gitconfig" {
            assert!(!fx.ws.join(target).exists(), "{target} was written");
        }
    }
    // Through the file tools too.
    let args = serde_json::json!({"file_path": ".husky/pre-commit", "content": hook}).to_string();
    let out = fx.dsh(&[
        "tool",
        "write",
        &args,
        "-C",
        fx.ws.to_str().expect("utf-8"),
        "--mode",
        "workspace-write",
        "--state",
        fx.base.join("state").to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("file access denied"),
        "{}",
        text(&out)
    );
    assert!(!fx.ws.join(".husky/pre-commit").exists());
    // The host's next commit runs no planted hook.
    fx.git(&fx.ws, &["commit", "-q", "--allow-empty", "-m", "next"]);
    assert!(!fx.marker().exists(), "a planted hook ran on the host");
}

// Regression: issue 11, finding 2 (`git sparse-checkout set` turns on worktreeConfig).
#[test]
fn config_worktree_cannot_name_an_fsmonitor() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    fx.git(&fx.ws, &["config", "extensions.worktreeConfig", "true"]);
    let out = fx.exec(&format!(
        "git config --file .git/config.worktree core.fsmonitor \"{}; false\"",
        fx.plant()
    ));
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    fx.git(&fx.ws, &["status", "--short"]);
    assert!(!fx.marker().exists(), "a planted fsmonitor ran on the host");
    assert!(
        !fx.ws.join(".git/config.worktree").exists(),
        "its placeholder was left"
    );
}

// Regression: issue 11, finding 3.
#[test]
fn pointer_files_nested_and_bare_repositories_stay_read_only() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    let sub_origin = fx.base.join("sub-origin");
    fx.repo(&sub_origin);
    fx.repo(&fx.ws);
    fx.git(
        &fx.ws,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            sub_origin.to_str().expect("utf-8"),
            "sub",
        ],
    );
    fx.git(&fx.ws, &["commit", "-qm", "submodule"]);
    fx.repo(&fx.ws.join("vendor/foo"));
    for d in ["srv/r.git/objects", "srv/r.git/refs", "srv/r.git/hooks"] {
        std::fs::create_dir_all(fx.ws.join(d)).expect("bare");
    }
    std::fs::write(fx.ws.join("srv/r.git/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
    std::fs::write(fx.ws.join("srv/r.git/config"), "[core]\n\tbare = true\n").expect("config");
    let fsmonitor = format!("[core]\\n\\tfsmonitor = \"{}; false\"\\n", fx.plant());
    for cmd in [
        // Redirect the submodule's pointer to a git dir of the command's making.
        format!("mkdir -p evil && cp -r .git/modules/sub/. evil/ && printf '{fsmonitor}' >> evil/config && echo 'gitdir: ../evil' > sub/.git"),
        format!("printf '{fsmonitor}' >> .git/modules/sub/config"),
        format!("printf '{fsmonitor}' >> vendor/foo/.git/config"),
        "echo x > vendor/foo/.git/hooks/pre-commit".to_owned(),
        "echo x > srv/r.git/hooks/post-receive".to_owned(),
        format!("printf '{fsmonitor}' >> srv/r.git/config"),
    ] {
        let out = fx.exec(&cmd);
        assert_ne!(out.status.code(), Some(0), "`{cmd}`: {}", text(&out));
    }
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("sub/.git")).expect("pointer"),
        "gitdir: ../.git/modules/sub\n"
    );
    fx.git(&fx.ws, &["status", "--short"]);
    fx.git(&fx.ws.join("vendor/foo"), &["status", "--short"]);
    fx.git(&fx.ws.join("sub"), &["status", "--short"]);
    assert!(!fx.marker().exists(), "a planted fsmonitor ran on the host");
}

// Regression: issue 11, finding 5.
#[test]
fn every_writable_root_gets_the_protected_paths() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let other = fx.base.join("other");
    fx.repo(&other);
    let o = other.to_str().expect("utf-8");
    for cmd in [
        format!("echo x > {o}/.git/hooks/pre-commit"),
        format!("echo '[core] fsmonitor = x' >> {o}/.git/config"),
        format!("mkdir -p {o}/.vscode && echo '{{}}' > {o}/.vscode/tasks.json"),
    ] {
        let out = fx.exec_in(&fx.ws, &["--writable", o], &cmd);
        assert_ne!(out.status.code(), Some(0), "`{cmd}`: {}", text(&out));
    }
    assert!(!other.join(".git/hooks/pre-commit").exists());
    assert!(
        !other.join(".vscode").exists(),
        "a placeholder was left in the other root"
    );
    let out = fx.exec_in(&fx.ws, &["--writable", o], &format!("echo ok > {o}/file"));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}

// Build 2 of issue 11: a repository made during a command is reported, then protected.
#[test]
fn a_repository_the_command_makes_is_reported_and_protected_afterwards() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx.exec("git init -q nested && git -C nested config core.fsmonitor x");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}/nested/.git", fx.ws.display())),
        "{stderr}"
    );
    let out = fx.exec("git -C nested config core.fsmonitor y");
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    // --json says it too.
    let ws = fx.ws.to_str().expect("utf-8");
    let out = fx.dsh(&[
        "exec",
        "-C",
        ws,
        "--mode",
        "workspace-write",
        "--json",
        "--",
        "git",
        "init",
        "-q",
        "second",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v["sandbox"]["appeared"],
        serde_json::json!([format!("{ws}/second/.git")]),
        "{v}"
    );
}

// Build 2 through the tool pipeline: the model is told, and the session log says so.
#[test]
fn the_bash_tool_reports_a_new_repository_and_logs_it() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let state = fx.base.join("state");
    let args =
        serde_json::json!({"command": "git init -q made", "description": "init"}).to_string();
    let out = fx.dsh(&[
        "tool",
        "bash",
        &args,
        "-C",
        fx.ws.to_str().expect("utf-8"),
        "--mode",
        "workspace-write",
        "--session",
        "s1",
        "--state",
        state.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("{}/made/.git", fx.ws.display())),
        "{stdout}"
    );
    let log = fx.dsh(&[
        "session",
        "show",
        "s1",
        "--json",
        "--state",
        state.to_str().expect("utf-8"),
    ]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.contains("\"sandbox/new-git-dir\""), "{log}");
    assert!(log.contains("made/.git"), "{log}");
}
