//! The second round of files host tools trust: each attack run as an attacker did, then
//! the host tool the user would run (`mvn -v`, `yarn --version`, `direnv`, `git commit`
//! with pre-commit, `hg status`, `git push`, `git status`), which must run nothing planted.
//!
//! A host tool missing here is a skip `dsh_testkit` records (a failure where the host tools
//! are required: CI installs them all); the attack is still made and refused, and only the
//! host run is left out.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{bwrap_usable, text, Fixture};

/// Whether `tool` is on `PATH`; when it is not, a skip of its host run (see `dsh_testkit`).
fn host_has(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        dsh_testkit::skip(
            dsh_testkit::Need::HostTools,
            &format!("{tool} is not on PATH: its host run is left out"),
        );
    }
    found
}

/// `PROGRAM ARGS` on the host in `dir` with the fixture's home, whatever its status.
fn host(fx: &Fixture, dir: &Path, program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("HOME", &fx.home)
        .env("XDG_CONFIG_HOME", fx.home.join(".config"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

// Regression: issue 23: `.mvn/jvm.config` took `-javaagent:` on any `mvn`, `mvn -v` too.
#[test]
fn maven_and_gradle_settings_a_command_makes_run_nothing() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    let out = fx.exec(
        "mkdir -p .mvn sub/.mvn gradle/wrapper && \
         echo '-javaagent:/nonexistent/planted-agent.jar' > .mvn/jvm.config && \
         echo '-javaagent:/nonexistent/planted-agent.jar' > sub/.mvn/jvm.config && \
         echo 'org.gradle.jvmargs=-javaagent:/nonexistent/planted.jar' > gradle.properties && \
         echo 'distributionUrl=file:///tmp/planted.zip' > gradle/wrapper/gradle-wrapper.properties && \
         echo made",
    );
    assert!(text(&out).contains("made"), "{}", text(&out));
    for f in [
        ".mvn/jvm.config",
        "sub/.mvn/jvm.config",
        "gradle.properties",
        "gradle/wrapper/gradle-wrapper.properties",
    ] {
        let left = std::fs::read_to_string(fx.ws.join(f)).unwrap_or_default();
        assert!(
            !left.contains("planted"),
            "{f} kept: {left}: {}",
            text(&out)
        );
    }
    // One the user keeps is read-only.
    std::fs::create_dir_all(fx.ws.join("app/.mvn")).expect("mvn dir");
    std::fs::write(fx.ws.join("app/.mvn/jvm.config"), "-Xmx512m\n").expect("jvm.config");
    let out = fx.exec("echo ' -javaagent:/nonexistent/planted-agent.jar' >> app/.mvn/jvm.config");
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    if host_has("mvn") {
        for dir in [fx.ws.clone(), fx.ws.join("sub"), fx.ws.join("app")] {
            let v = host(&fx, &dir, "mvn", &["-v"]);
            assert!(
                v.status.success(),
                "mvn -v in {}: {}",
                dir.display(),
                text(&v)
            );
            assert!(!text(&v).contains("planted"), "{}", text(&v));
        }
    }
}

// Regression: issue 23: a protected config named a writable program (yarn's `yarnPath`,
// what an allowed `.envrc` loads or puts on PATH).
#[test]
fn what_a_protected_config_points_a_tool_at_cannot_be_written() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    std::fs::write(fx.ws.join(".yarnrc"), "yarn-path \"./tools/yarn.js\"\n").expect("yarnrc");
    std::fs::write(
        fx.ws.join(".yarnrc.yml"),
        "yarnPath: .yarn/releases/yarn-4.js\nplugins:\n  - path: .yarn/plugins/p.cjs\n",
    )
    .expect("yarnrc.yml");
    std::fs::write(
        fx.ws.join(".envrc"),
        "source_env lib.sh\nPATH_add bin\ndotenv\n",
    )
    .expect("envrc");
    let plant = fx.plant();
    for (path, content) in [
        (
            "tools/yarn.js",
            format!(
                "require('fs').writeFileSync('{}', '')",
                fx.marker().display()
            ),
        ),
        (".yarn/releases/yarn-4.js", "x".to_owned()),
        (".yarn/plugins/p.cjs", "x".to_owned()),
        ("lib.sh", plant.clone()),
        ("bin/ls", format!("#!/bin/sh\n{plant}\n")),
        (".env", "X=1".to_owned()),
    ] {
        let dir = Path::new(path)
            .parent()
            .expect("parent")
            .display()
            .to_string();
        let out = fx.exec(&format!(
            "mkdir -p '{dir}' 2>/dev/null; printf '%s' \"$0\" > {path} && chmod +x {path} && echo WROTE",
        ).replace("\"$0\"", &format!("'{}'", content.replace('\'', "'\\''"))));
        assert!(!text(&out).contains("WROTE"), "{path}: {}", text(&out));
    }
    if host_has("yarn") {
        let _ = host(&fx, &fx.ws, "yarn", &["--version"]);
        assert!(!fx.marker().exists(), "yarn ran a planted yarn-path");
    }
    if host_has("direnv") {
        let allow = host(&fx, &fx.ws, "direnv", &["allow", "."]);
        assert!(allow.status.success(), "{}", text(&allow));
        let _ = host(&fx, &fx.ws, "direnv", &["exec", ".", "ls"]);
        assert!(!fx.marker().exists(), "direnv ran what a command planted");
    }
}

// Regression: issue 23: a pre-commit hook installed with `--allow-missing-config` ran the
// config a command made.
#[test]
fn a_hook_managers_config_is_protected_while_its_hook_is_installed() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    // The hook pre-commit installs, as it writes it (when pre-commit is here, by itself).
    if host_has("pre-commit") {
        let i = host(
            &fx,
            &fx.ws,
            "pre-commit",
            &["install", "--allow-missing-config"],
        );
        assert!(i.status.success(), "{}", text(&i));
    } else {
        let hook = fx.ws.join(".git/hooks/pre-commit");
        std::fs::write(
            &hook,
            "#!/usr/bin/env bash\n# File generated by pre-commit\nexit 0\n",
        )
        .expect("hook");
    }
    let config = format!(
        "repos:\n- repo: local\n  hooks:\n  - id: x\n    name: x\n    entry: sh -c \"{}\"\n    language: system\n    always_run: true\n",
        fx.plant()
    );
    std::fs::write(fx.base.join("cfg"), &config).expect("cfg");
    let out = fx.exec(&format!(
        "cp '{}' .pre-commit-config.yaml && echo WROTE",
        fx.base.join("cfg").display()
    ));
    assert!(!text(&out).contains("WROTE"), "{}", text(&out));
    assert!(!fx.ws.join(".pre-commit-config.yaml").exists());
    if host_has("pre-commit") {
        let _ = host(&fx, &fx.ws, "git", &["commit", "--allow-empty", "-qm", "x"]);
        assert!(
            !fx.marker().exists(),
            "the commit ran a planted pre-commit hook"
        );
    }
}

// Regression: issue 23: the user's own `.hg/hgrc`, and a new nested `.hg`, ran hooks on
// `hg status`.
#[test]
fn mercurial_and_jujutsu_configs_a_command_writes_run_nothing() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    let hg = host_has("hg");
    if hg {
        let i = host(&fx, &fx.ws, "hg", &["init"]);
        assert!(i.status.success(), "{}", text(&i));
    } else {
        std::fs::create_dir_all(fx.ws.join(".hg/store")).expect("hg dir");
        std::fs::write(fx.ws.join(".hg/requires"), "store\n").expect("requires");
    }
    std::fs::create_dir_all(fx.ws.join(".jj/repo")).expect("jj");
    let hook = format!("[hooks]\\npre-status = {}\\n", fx.plant());
    let out = fx.exec(&format!(
        "printf '{hook}' > .hg/hgrc; mkdir -p sub/.hg nest/.jj/repo; \
         printf '{hook}' > sub/.hg/hgrc; printf 'store\\n' > sub/.hg/requires; \
         printf '[ui]\\npager = \"{}\"\\n' > .jj/repo/config.toml; \
         cp .jj/repo/config.toml nest/.jj/repo/config.toml; echo done",
        fx.plant()
    ));
    assert!(text(&out).contains("done"), "{}", text(&out));
    for f in [
        ".hg/hgrc",
        "sub/.hg/hgrc",
        ".jj/repo/config.toml",
        "nest/.jj/repo/config.toml",
    ] {
        let left = std::fs::read_to_string(fx.ws.join(f)).unwrap_or_default();
        assert!(!left.contains("PWNED"), "{f} kept: {left}: {}", text(&out));
    }
    if hg {
        let _ = host(&fx, &fx.ws, "hg", &["status"]);
        let _ = host(&fx, &fx.ws.join("sub"), "hg", &["status"]);
        assert!(!fx.marker().exists(), "hg ran a planted hook");
    }
}

// Regression: issue 23: `.git/remotes/origin` named a bare repository hidden inside
// `.git/`, whose hook ran on the user's `git push`.
#[test]
fn a_remote_named_outside_the_config_cannot_be_planted() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx.exec(&format!(
        "git init -q --bare .git/x.git; printf '#!/bin/sh\\n{}\\n' > .git/x.git/hooks/pre-receive; \
         chmod +x .git/x.git/hooks/pre-receive; \
         mkdir -p .git/remotes && printf 'URL: .git/x.git\\nPush: refs/heads/*:refs/heads/*\\n' \
         > .git/remotes/origin && echo WROTE; \
         printf '.git/x.git\\n' > .git/branches/origin && echo WROTE2",
        fx.plant()
    ));
    assert!(!text(&out).contains("WROTE"), "{}", text(&out));
    let _ = fx.git_status(&fx.ws, &["push", "origin", "main"]);
    assert!(!fx.marker().exists(), "git push ran a planted hook");
    // A remote the user set up on this disk is protected as a repository.
    let remote = fx.base.join("ws/remote.git");
    fx.git(
        &fx.ws,
        &["init", "-q", "--bare", remote.to_str().expect("utf-8")],
    );
    fx.git(&fx.ws, &["remote", "add", "local", "remote.git"]);
    let out = fx.exec(&format!(
        "printf '#!/bin/sh\\n{}\\n' > remote.git/hooks/post-receive && echo WROTE",
        fx.plant()
    ));
    assert!(!text(&out).contains("WROTE"), "{}", text(&out));
}

// Regression: issue 23: `git init vendor/x && ln vendor/x/.git/config vendor/x/notes.txt`
// in one call, an append to notes.txt in the next: the config's path was mounted
// read-only, its other name was not.
#[test]
fn a_protected_file_is_protected_under_every_name() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let out = fx
        .exec("git init -q vendor/x && ln vendor/x/.git/config vendor/x/notes.txt && echo linked");
    assert!(text(&out).contains("linked"), "{}", text(&out));
    let out = fx.exec(&format!(
        "printf '[core]\\n\\tfsmonitor = \"{}; false\"\\n' >> vendor/x/notes.txt; echo appended",
        fx.plant()
    ));
    assert!(text(&out).contains("appended"), "{}", text(&out));
    let config = std::fs::read_to_string(fx.ws.join("vendor/x/.git/config")).expect("config");
    assert!(!config.contains("fsmonitor"), "{config}");
    let _ = fx.git_status(&fx.ws.join("vendor/x"), &["status", "--short"]);
    assert!(!fx.marker().exists(), "git status ran the fsmonitor");
    // A second name made before the session (of the workspace's own config): refused.
    std::fs::hard_link(fx.ws.join(".git/config"), fx.ws.join("config-backup")).expect("ln");
    let out = fx.exec("echo ran");
    assert_eq!(out.status.code(), Some(125), "{}", text(&out));
    assert!(
        text(&out).contains("another name (a hard link)"),
        "{}",
        text(&out)
    );
}

// A command cannot write what these read indirectly: an hgrc hg reads through
// `.hg/sharedpath` and `.hg/requires`, or through an hgrc's `%include`; a file direnv
// sources because its `.envrc` names it with `source` or in a later command of a line;
// the config a pre-commit hook installed with `-c` runs; the target of a hook that is a
// link; and a pre-receive hook a local bare remote with a relative `core.hooksPath` runs.
#[test]
fn what_hg_direnv_pre_commit_and_git_reach_indirectly_cannot_be_written() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    std::fs::create_dir_all(fx.ws.join(".hg/store")).expect("hg");
    std::fs::write(fx.ws.join(".hg/requires"), "store\n").expect("requires");
    std::fs::write(fx.ws.join(".hg/hgrc"), "%include ../project.hgrc\n").expect("hgrc");
    std::fs::write(fx.ws.join("project.hgrc"), "[ui]\n").expect("project.hgrc");
    std::fs::write(
        fx.ws.join(".envrc"),
        "source scripts/env.sh\ntest -f .env.local && dotenv .env.local\nPATH_add \"$PWD/bin2\"\n",
    )
    .expect("envrc");
    std::fs::create_dir_all(fx.ws.join("scripts")).expect("scripts");
    std::fs::write(fx.ws.join("scripts/env.sh"), "export A=1\n").expect("env.sh");
    std::fs::create_dir_all(fx.ws.join("ci")).expect("ci");
    std::fs::write(
        fx.ws.join(".git/hooks/pre-commit"),
        "#!/usr/bin/env bash\n# File generated by pre-commit\nARGS=(hook-impl --config=ci/pre-commit.yaml --hook-type=pre-commit)\n",
    )
    .expect("hook");
    std::fs::write(fx.ws.join("scripts/post-checkout"), "#!/bin/sh\n").expect("hook target");
    std::os::unix::fs::symlink(
        "../../scripts/post-checkout",
        fx.ws.join(".git/hooks/post-checkout"),
    )
    .expect("hook link");
    let remote = fx.ws.join("remote.git");
    fx.git(
        &fx.ws,
        &["init", "-q", "--bare", remote.to_str().expect("utf-8")],
    );
    fx.git(&remote, &["config", "core.hooksPath", "hooks2"]);
    std::fs::create_dir_all(remote.join("hooks2")).expect("hooks2");
    fx.git(&fx.ws, &["remote", "add", "origin", "./remote.git"]);
    let plant = fx.plant();
    for (path, content) in [
        (".hg/sharedpath", "/tmp".to_owned()),
        (".hg/requires", "share-safe\nshared\n".to_owned()),
        ("project.hgrc", format!("[hooks]\npre-status = {plant}\n")),
        ("scripts/env.sh", plant.clone()),
        (".env.local", "A=1".to_owned()),
        ("bin2/git", format!("#!/bin/sh\n{plant}\n")),
        ("ci/pre-commit.yaml", "repos: []".to_owned()),
        ("scripts/post-checkout", format!("#!/bin/sh\n{plant}\n")),
        (
            "remote.git/hooks2/pre-receive",
            format!("#!/bin/sh\n{plant}\n"),
        ),
    ] {
        std::fs::write(fx.base.join("content"), &content).expect("content");
        let dir = Path::new(path)
            .parent()
            .expect("parent")
            .display()
            .to_string();
        let out = fx.exec(&format!(
            "mkdir -p '{dir}' 2>/dev/null; cat '{}' > {path} && echo WROTE",
            fx.base.join("content").display()
        ));
        // Refused, or (a new setting) set aside by the check after the call.
        let left = std::fs::read_to_string(fx.ws.join(path)).unwrap_or_default();
        assert!(
            !text(&out).contains("WROTE") || left != content,
            "{path}: {}",
            text(&out)
        );
    }
}
