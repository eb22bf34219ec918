//! Git dirs a confined command must not be able to arm: hook folders named by
//! `core.hooksPath`, `config.worktree`, `.git` pointer files, nested and bare repositories,
//! the git dirs of `--writable` roots, and repositories the command makes itself.

use std::path::{Path, PathBuf};

use crate::support::{bwrap_usable, text, Fixture};

/// The `NAME.dsh-quarantine-*` dsh set aside in `dir`, if any.
fn aside(dir: &Path, name: &str) -> Option<PathBuf> {
    let prefix = format!("{name}.dsh-quarantine-");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
}

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

// Build 2 of issue 11: a repository made during a command is reported, the programs in it
// are set aside before the host's git can run them, and it is protected afterwards.
#[test]
fn a_repository_the_command_makes_is_reported_disarmed_and_protected_afterwards() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx.exec(&format!(
        "git init -q nested && git -C nested config core.fsmonitor \"{}; false\" && \
         git -C nested remote add origin https://example.com/x.git",
        fx.plant()
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}/nested/.git", fx.ws.display())),
        "{stderr}"
    );
    assert!(stderr.contains("core.fsmonitor"), "{stderr}");
    let config = std::fs::read_to_string(fx.ws.join("nested/.git/config")).expect("config");
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(
        config.contains("https://example.com/x.git"),
        "its data is kept: {config}"
    );
    assert!(
        aside(&fx.ws.join("nested/.git"), "config").is_some(),
        "the original config was not kept"
    );
    fx.git(&fx.ws.join("nested"), &["status", "--short"]);
    assert!(
        !fx.marker().exists(),
        "the new repository's fsmonitor ran on the host"
    );
    let out = fx.exec("git -C nested config core.fsmonitor y");
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    // --json says it too; a plain `git init` is reported and left as it is.
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
    assert_eq!(v["sandbox"]["quarantined"], serde_json::json!([]), "{v}");
}

// A bare repository git accepts with objects and refs as symlinks, and one made with the
// file tools alone, are both disarmed.
#[test]
fn repositories_of_unusual_shape_or_made_by_the_file_tools_are_disarmed() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx.exec(&format!(
        "mkdir -p docs/site && cd docs/site && git init -q --bare . && mv objects .o && \
         ln -s .o objects && mv refs .r && ln -s .r refs && git config core.bare false && \
         git config core.worktree \"$PWD/wt\" && mkdir wt && \
         git config core.fsmonitor \"{}; false\"",
        fx.plant()
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // (core.worktree is set aside too: git may refuse to run there at all.)
    let _ = fx.git_status(&fx.ws.join("docs/site/wt"), &["status", "--short"]);
    let config = std::fs::read_to_string(fx.ws.join("docs/site/config")).expect("config");
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(
        !fx.marker().exists(),
        "a symlinked bare repository's fsmonitor ran"
    );
    // With writes alone: config first, then what makes it a repository.
    let ws = fx.ws.to_str().expect("utf-8");
    let state = fx.base.join("state");
    let state = state.to_str().expect("utf-8");
    let config = format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {ws}/site/wt\n\tfsmonitor = \"{}; false\"\n",
        fx.plant()
    );
    for (path, content) in [
        ("site/config", config.as_str()),
        ("site/wt/.keep", ""),
        ("site/objects/info/.keep", ""),
        ("site/refs/heads/.keep", ""),
        ("site/HEAD", "ref: refs/heads/main\n"),
    ] {
        let args = serde_json::json!({"file_path": path, "content": content}).to_string();
        let out = fx.dsh(&[
            "tool",
            "write",
            &args,
            "-C",
            ws,
            "--mode",
            "workspace-write",
            "--state",
            state,
        ]);
        assert_eq!(out.status.code(), Some(0), "{path}: {}", text(&out));
        if path == "site/HEAD" {
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(stdout.contains("core.fsmonitor"), "{stdout}");
        }
    }
    let _ = fx.git_status(&fx.ws.join("site/wt"), &["status", "--short"]);
    let config = std::fs::read_to_string(fx.ws.join("site/config")).expect("config");
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(
        !fx.marker().exists(),
        "a repository made by writes ran its fsmonitor"
    );
}

// `.cargo/config.toml` planted in a subdirectory, which cargo reads when run there, is set
// aside.
#[test]
fn tool_settings_made_in_a_subdirectory_are_set_aside() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx.exec(
        "mkdir -p crates/x/.cargo && printf '[build]\\nrustc-wrapper = \"/tmp/w\"\\n' > crates/x/.cargo/config.toml",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!fx.ws.join("crates/x/.cargo/config.toml").exists());
    let kept = aside(&fx.ws.join("crates/x"), ".cargo").expect("kept aside");
    assert!(kept.join("config.toml").exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tool settings"), "{stderr}");
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
    assert!(log.contains("\"sandbox/checked\""), "{log}");
    assert!(log.contains("made/.git"), "{log}");
}

// A FIFO where dsh reads a git dir's small files must not hang every later call, nor a
// sparse 2 GB `gitdir` cost 2 GB of memory per call.
#[test]
fn fifos_and_huge_files_where_git_keeps_its_facts_do_not_stall_dsh() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx.exec(
        "mkdir -p .git/worktrees/x .git/worktrees/y && mkfifo .git/worktrees/x/gitdir && \
         truncate -s 2G .git/worktrees/y/gitdir && mkfifo shared.gitconfig && \
         rm .git/index && mkfifo .git/index",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    fx.git(&fx.ws, &["config", "include.path", "../shared.gitconfig"]);
    let start = std::time::Instant::now();
    let ws = fx.ws.to_str().expect("utf-8");
    let out = fx.dsh(&[
        "exec",
        "-C",
        ws,
        "--mode",
        "workspace-write",
        "--timeout",
        "20000",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Only a bound against a hang: the call itself takes milliseconds.
    assert!(start.elapsed() < std::time::Duration::from_secs(60));
}

// A new git dir's `commondir` redirected to a directory with the config and hooks, and a
// `.git` file pointed at a repository in `$TMPDIR`, are undone.
#[test]
fn redirects_to_config_elsewhere_are_undone() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let fsmonitor = format!("[core]\\n\\tfsmonitor = \\\"{}; false\\\"\\n", fx.plant());
    let out = fx.exec(&format!(
        "mkdir -p c/objects c/refs sub/.git && printf '{fsmonitor}' > c/config && \
         echo 'ref: refs/heads/main' > sub/.git/HEAD && echo ../../c > sub/.git/commondir && \
         git init -q --bare \"$TMPDIR/evil\" && printf '{fsmonitor}' >> \"$TMPDIR/evil/config\" && \
         mkdir -p sub2 && echo \"gitdir: $TMPDIR/evil\" > sub2/.git"
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(fx.ws.join("sub/.git/commondir")).expect("commondir"),
        ".\n"
    );
    assert!(!fx.ws.join("sub2/.git").exists(), "{}", text(&out));
    for dir in ["sub", "sub2"] {
        let _ = fx.git_status(&fx.ws.join(dir), &["status", "--short"]);
    }
    assert!(!fx.marker().exists(), "a redirected config ran on the host");
}

// dsh's old placeholder mark set on the user's `.git` must not make the next call empty
// it.
#[test]
fn nothing_a_command_sets_makes_dsh_remove_a_users_files() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx.exec(
        "python3 -c 'import os; [os.setxattr(p, \"user.dsh.placeholder\", b\"1\") for p in (\".git\", \"README\")]'",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = fx.exec("true");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(fx.ws.join(".git/HEAD").exists() && fx.ws.join("README").exists());
    assert_eq!(fx.git(&fx.ws, &["log", "--format=%s"]), "init\n");
}

// A new repository hidden in a directory its owner cannot list (non-root) is still seen
// by the check.
#[test]
fn a_repository_hidden_in_an_unlistable_directory_is_found() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx.exec(&format!(
        "mkdir -p b/inner && git init -q b/inner/r && \
         git -C b/inner/r config core.fsmonitor \"{}; false\" && chmod 311 b",
        fx.plant()
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("core.fsmonitor"), "{stderr}");
    let _ = fx.git_status(&fx.ws.join("b/inner/r"), &["status", "--short"]);
    assert!(
        !fx.marker().exists(),
        "the hidden repository's fsmonitor ran"
    );
}

/// The repository `repo` (relative to the workspace) is named in `out`'s report, and the
/// host's `git status` there runs nothing planted.
fn assert_reported_and_disarmed(fx: &Fixture, out: &std::process::Output, repo: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}/{repo}/.git", fx.ws.display())),
        "{repo} not reported: {stderr}"
    );
    let _ = fx.git_status(&fx.ws.join(repo), &["status", "--short"]);
    assert!(
        !fx.marker().exists(),
        "the fsmonitor of {repo} ran on the host"
    );
}

// A directory made, a repository with an fsmonitor made in it, and the directory moved,
// all in one command; and a directory that existed before moved after arming a repository
// in it. The check reads the moves and walks where the directories went.
#[test]
fn repositories_in_directories_moved_during_the_command_are_found() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    std::fs::create_dir_all(fx.ws.join("existing")).expect("existing");
    let out = fx.exec(&format!(
        "mkdir -p x/sub && git init -q x/sub && git -C x/sub config core.fsmonitor \"{p}; false\" \
         && mv x y && git init -q existing/r && git -C existing/r config core.fsmonitor \
         \"{p}; false\" && mv existing moved",
        p = fx.plant()
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for repo in ["y/sub", "moved/r"] {
        assert_reported_and_disarmed(&fx, &out, repo);
    }
}

// None of these hides a new repository: (1) a directory moved away and a repository made
// at its path, (2) a repository beneath a directory given git's shape, and (3) the
// workspace root itself given git's shape, which must not blind every later check.
#[test]
fn no_shape_or_order_of_directories_hides_a_new_repository() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    fx.git(&fx.ws, &["init", "-q", "vend"]);
    let arm = |dir: &str| {
        format!(
            "git init -q {dir} && git -C {dir} config core.fsmonitor \"{}; false\"",
            fx.plant()
        )
    };
    let out = fx.exec(&format!(
        "mkdir -p z e && mv e z/e && mkdir -p e/.cargo && {} && \
         mkdir -p p && {} && mkdir p/objects p/refs && echo 'ref: refs/heads/main' > p/HEAD && \
         echo 'ref: refs/heads/main' > HEAD && mkdir objects refs && {}",
        arm("e/r"),
        arm("p/q"),
        arm("x")
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for repo in ["e/r", "p/q", "x"] {
        assert_reported_and_disarmed(&fx, &out, repo);
    }
    // A repository that was there before stays protected in the next command.
    let out = fx.exec(&format!(
        "git -C vend config core.fsmonitor \"{}; false\"",
        fx.plant()
    ));
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    let _ = fx.git_status(&fx.ws.join("vend"), &["status", "--short"]);
    assert!(
        !fx.marker().exists(),
        "the fsmonitor of vend ran on the host"
    );
}

// A repository beneath a `node_modules` package (where the walk does not go), named a
// submodule in the workspace's index, is disarmed: the host's `git status` at the top
// would enter it and run its fsmonitor. Every index format git writes is tried.
#[test]
fn a_repository_the_index_names_as_a_submodule_is_disarmed_wherever_it_is() {
    if !bwrap_usable() {
        return;
    }
    for (i, setup) in [
        "true",
        "git update-index --index-version 4",
        "git update-index --split-index",
        "git -c index.threads=2 -c index.recordOffsetTable=true \
         -c index.recordEndOfIndexEntries=true update-index --index-version 4",
    ]
    .iter()
    .enumerate()
    {
        let fx = Fixture::new();
        fx.repo(&fx.ws);
        let dir = format!("node_modules/p{i}/lib");
        let out = fx.exec(&format!(
            "{setup} && mkdir -p {dir} && (cd {dir} && git init -q && \
             git config core.fsmonitor \"{}; false\" && git commit -q --allow-empty -m x) && \
             git update-index --add --cacheinfo 160000,$(git -C {dir} rev-parse HEAD),{dir}",
            fx.plant()
        ));
        assert_eq!(out.status.code(), Some(0), "{setup}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("{}/{dir}/.git", fx.ws.display())),
            "{setup}: {stderr}"
        );
        let _ = fx.git_status(&fx.ws, &["status", "--short"]);
        assert!(
            !fx.marker().exists(),
            "{setup}: a submodule's fsmonitor ran on the host"
        );
        // Named in the index before the command: its config stays read-only.
        let out = fx.exec(&format!("git -C {dir} config core.fsmonitor y"));
        assert_ne!(out.status.code(), Some(0), "{setup}: {}", text(&out));
    }
}

// A directory made a second worktree of the workspace's own git dir (`sub/.git` naming
// `../.git`), with a repository beneath `sub/node_modules` named in the index: the host's
// git enters `sub`, reads the same index against it, and recurses, so the index is read
// against every worktree. And a gitlink through a link (which git does not enter) must not
// wedge later commands.
#[test]
fn an_index_read_against_every_worktree_of_its_git_dir_finds_their_submodules() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx.exec(&format!(
        "mkdir -p sub/node_modules/p && (cd sub/node_modules/p && git init -q && \
         git config core.fsmonitor \"{}; false\" && git commit -q --allow-empty -m x) && \
         printf 'gitdir: ../.git\\n' > sub/.git && \
         git update-index --add --cacheinfo 160000,$(git rev-parse HEAD),sub && \
         git update-index --add --cacheinfo \
           160000,$(git -C sub/node_modules/p rev-parse HEAD),node_modules/p",
        fx.plant()
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let _ = fx.git_status(&fx.ws, &["status", "--short"]);
    assert!(
        !fx.marker().exists(),
        "a submodule's fsmonitor ran on the host"
    );

    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx.exec(
        "mkdir -p node_modules/p && git -C node_modules/p init -q && \
         git -C node_modules/p commit -q --allow-empty -m x && ln -s node_modules/p lnk && \
         git update-index --add --cacheinfo 160000,$(git -C lnk rev-parse HEAD),lnk",
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = fx.exec("true");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
}
