//! A workspace, a home, and the `dsh` and host `git` commands that use them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Whether bubblewrap works here; when it does not, false after `dsh_testkit::skip` (a
/// failure where bubblewrap is required).
pub fn bwrap_usable() -> bool {
    let works = Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--unshare-pid", "--", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        dsh_testkit::skip(dsh_testkit::Need::Bwrap, "bubblewrap does not work here");
    }
    works
}

/// A temporary home and workspace (canonical paths).
pub struct Fixture {
    _tmp: tempfile::TempDir,
    pub base: PathBuf,
    pub home: PathBuf,
    pub ws: PathBuf,
}

impl Fixture {
    pub fn new() -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(tmp.path()).expect("canonical");
        let home = base.join("home");
        let ws = base.join("ws");
        std::fs::create_dir_all(home.join(".config")).expect("home");
        std::fs::create_dir_all(&ws).expect("ws");
        Fixture {
            _tmp: tmp,
            base,
            home,
            ws,
        }
    }

    /// The environment every command here gets: this fixture's home, no system git
    /// config, a fixed git identity.
    fn env(&self, c: &mut Command) {
        c.env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE");
    }

    /// `dsh ARGS` with this fixture's environment.
    pub fn dsh(&self, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
        self.env(&mut c);
        c.args(args).output().expect("run dsh")
    }

    /// `dsh ARGS` with this fixture's environment and `vars` set over it.
    pub fn dsh_with(&self, args: &[&str], vars: &[(&str, &Path)]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
        self.env(&mut c);
        for (k, v) in vars {
            c.env(k, v);
        }
        c.args(args).output().expect("run dsh")
    }

    /// `dsh ARGS` run in `dir`.
    pub fn dsh_in(&self, dir: &Path, args: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dsh"));
        self.env(&mut c);
        c.args(args).current_dir(dir).output().expect("run dsh")
    }

    /// `dsh exec -C DIR --runner RUNNER EXTRA... -- ARGV...`; `None` when the runner is
    /// Landlock and this kernel cannot enforce it (exit 125, said so): bubblewrap is what CI
    /// requires, and its refusal is returned to be asserted on.
    pub fn exec_runner(
        &self,
        dir: &Path,
        runner: &str,
        extra: &[&str],
        argv: &[&str],
    ) -> Option<Output> {
        let dir = dir.to_str().expect("utf-8 path");
        let mut args = vec!["exec", "-C", dir, "--runner", runner];
        args.extend_from_slice(extra);
        args.push("--");
        args.extend_from_slice(argv);
        let out = self.dsh(&args);
        if out.status.code() == Some(125) && runner == "landlock" {
            println!("{runner} {extra:?} unavailable here: {}", text(&out));
            return None;
        }
        Some(out)
    }

    /// `dsh exec -C DIR --mode workspace-write EXTRA... -- bash -c SCRIPT`.
    pub fn exec_in(&self, dir: &Path, extra: &[&str], script: &str) -> Output {
        let dir = dir.to_str().expect("utf-8 path");
        let mut args = vec!["exec", "-C", dir, "--mode", "workspace-write"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "bash", "-c", script]);
        self.dsh(&args)
    }

    /// [`exec_in`](Self::exec_in) the workspace.
    pub fn exec(&self, script: &str) -> Output {
        self.exec_in(&self.ws, &[], script)
    }

    /// Host `git ARGS` in `dir` (unconfined: as the user would run it), which must succeed.
    pub fn git(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.git_status(dir, args);
        assert!(
            out.status.success(),
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Host `git ARGS` in `dir`, whatever its status.
    pub fn git_status(&self, dir: &Path, args: &[&str]) -> Output {
        let mut c = Command::new("git");
        self.env(&mut c);
        c.args(args).current_dir(dir).output().expect("run git")
    }

    /// A repository at `dir` with one commit.
    pub fn repo(&self, dir: &Path) {
        std::fs::create_dir_all(dir).expect("repo dir");
        self.git(dir, &["init", "-q", "-b", "main"]);
        std::fs::write(dir.join("README"), "hi\n").expect("file");
        self.git(dir, &["add", "README"]);
        self.git(dir, &["commit", "-qm", "init"]);
    }

    /// A file that a planted hook or fsmonitor would create: its path, to check it is
    /// absent.
    pub fn marker(&self) -> PathBuf {
        self.base.join("PWNED")
    }

    /// A shell line that creates the marker.
    pub fn plant(&self) -> String {
        format!("touch '{}'", self.marker().display())
    }
}

pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
