//! The child environment: scrub, allow-list, overlay, tombstones.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use dsh_process::{EnvAllow, LocalSubprocess, OutputMode, SpawnSpec, Subprocess};
use tokio::io::AsyncReadExt;

use crate::support::bash;

#[tokio::test]
async fn ambient_credentials_and_dsh_names_are_scrubbed_and_explicit_ones_pass() {
    // The test binary's own environment is the ambient one a child would inherit.
    std::env::set_var("DSH_TEST_PLAIN", "ambient");
    std::env::set_var("MY_API_KEY", "k");
    std::env::set_var("GH_TOKEN", "t");
    std::env::set_var("DB_PASSWORD", "p");
    std::env::set_var("DSH_STALE", "stale");
    std::env::set_var("DSH_TEST_REMOVE_ME", "x");
    let sub = LocalSubprocess::new();
    let mut spec = bash(
        "echo \"${DSH_TEST_PLAIN-unset} ${MY_API_KEY-unset} ${GH_TOKEN-unset} ${DB_PASSWORD-unset} ${DSH_STALE-unset} ${DSH_FRESH-unset} ${EXPLICIT_TOKEN-unset} ${PATH:+path}\"",
    );
    spec.env.insert("DSH_FRESH".into(), Some("fresh".into()));
    spec.env
        .insert("EXPLICIT_TOKEN".into(), Some("opt-in".into()));
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    let out = p.stdout_capture().expect("cap").collected().text;
    assert_eq!(out, "unset unset unset unset unset fresh opt-in path\n");
}

#[tokio::test]
async fn a_tombstone_removes_an_ambient_variable() {
    std::env::set_var("DSH_TEST_AMBIENT_PLAIN_VAR_X", "1");
    std::env::set_var("PLAIN_AMBIENT_FOR_TOMBSTONE", "here");
    let sub = LocalSubprocess::new();
    let mut spec = bash("echo ${PLAIN_AMBIENT_FOR_TOMBSTONE-unset} ${NEW_ONE-unset}");
    spec.env.insert("PLAIN_AMBIENT_FOR_TOMBSTONE".into(), None);
    spec.env.insert("NEW_ONE".into(), Some("new".into()));
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    assert_eq!(
        p.stdout_capture().expect("cap").collected().text,
        "unset new\n"
    );
}

#[tokio::test]
async fn an_explicit_term_reaches_the_child_unchanged() {
    let sub = LocalSubprocess::new();
    let mut spec = bash("echo $TERM");
    spec.env.insert("TERM".into(), Some("xterm-test".into()));
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    assert_eq!(
        p.stdout_capture().expect("cap").collected().text,
        "xterm-test\n"
    );
}

/// Set only in the re-run of this test binary: the file where it writes what its child saw.
/// A `DSH_*` name, so the scrub keeps it from the child.
const HELPER_OUT: &str = "DSH_TEST_SCRUB_OUT";

/// The host environment of the re-run: every example of issue 11, kept and dropped, with
/// `PATH` so that `cat` is found.
fn host_env() -> Vec<(OsString, OsString)> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    let mut vars: Vec<(OsString, OsString)> = vec![("PATH".into(), path)];
    let plain: [(&[u8], &[u8]); 38] = [
        // Kept.
        (b"PWD", b"/work"),
        (b"OLDPWD", b"/"),
        (b"XAUTHORITY", b"/run/user/1000/xauth"),
        (b"HOME", b"/home/u"),
        (b"LANG", b"C.UTF-8"),
        (b"http_proxy", b"http://proxy:3128"),
        (b"NO_PROXY", b"localhost,.internal"),
        (b"TERM", b"xterm"),
        (b"EDITOR", b"vi"),
        (b"PATCH_LEVEL", b"3"),
        (b"XDG_DATA_PATH", b"/usr/share"),
        (b"GIT_AUTHOR_NAME", b"U"),
        (b"PLAIN_URL", b"http://user@host/x"),
        (b"LATIN1_CAF\xc9", b"caf\xe9"),
        // Kept because they are allow-listed.
        (b"DATABASE_URL", b"postgres://u:pw@host/db"),
        (b"SSH_AUTH_SOCK", b"/tmp/ssh-x/agent.1"),
        // Dropped by name.
        (b"DB_PASS", b"x"),
        (b"PASSWD", b"x"),
        (b"MYSQL_PWD", b"ambient"),
        (b"GITHUB_PAT", b"x"),
        (b"CREDENTIALS", b"x"),
        (b"AUTH_HEADER", b"x"),
        (b"NPM_CONFIG__AUTH", b"x"),
        (b"GOOGLE_APPLICATION_CREDENTIALS", b"/home/u/gcp.json"),
        (b"ssh_auth_sock", b"/tmp/other"),
        (b"MY_API_KEY", b"x"),
        (b"GH_TOKEN", b"x"),
        (b"DB_PASSWORD", b"x"),
        (b"AWS_SECRET_ACCESS_KEY", b"x"),
        (b"SESSION_COOKIE", b"x"),
        (b"SENTRY_DSN", b"x"),
        (b"SLACK_WEBHOOK", b"x"),
        (b"MY_KEY_\xff", b"x"),
        // Dropped by value.
        (b"HTTPS_PROXY", b"http://u:p@proxy:3128"),
        (b"MIRRORS", b"http://a;http://u:p@b"),
        (b"NOTES", b"\xff see http://u:p@[::1]:80"),
        // Dropped as DSH_* names.
        (b"DSH_STALE", b"x"),
        (b"dsh_lower", b"x"),
    ];
    for (k, v) in plain {
        vars.push((
            OsString::from_vec(k.to_vec()),
            OsString::from_vec(v.to_vec()),
        ));
    }
    vars
}

/// What the child of the re-run must see: the kept variables and the explicit overlay.
fn expected_child_env() -> BTreeMap<OsString, OsString> {
    let kept: [&[u8]; 17] = [
        b"PATH",
        b"PWD",
        b"OLDPWD",
        b"XAUTHORITY",
        b"HOME",
        b"LANG",
        b"http_proxy",
        b"NO_PROXY",
        b"TERM",
        b"EDITOR",
        b"PATCH_LEVEL",
        b"XDG_DATA_PATH",
        b"GIT_AUTHOR_NAME",
        b"PLAIN_URL",
        b"LATIN1_CAF\xc9",
        b"DATABASE_URL",
        b"SSH_AUTH_SOCK",
    ];
    let mut env: BTreeMap<OsString, OsString> = host_env()
        .into_iter()
        .filter(|(k, _)| kept.contains(&k.as_bytes()))
        .collect();
    env.insert("MYSQL_PWD".into(), "explicit".into());
    env
}

#[tokio::test]
async fn the_child_sees_plain_and_allowed_variables_and_no_credentials() {
    // Regression: issue 11 (sandbox hardening), environment scrub extended.
    // The host environment is set on a re-run of this test binary, not with `set_var`
    // here: the tests of this binary share one environment and run on many threads.
    if let Some(out) = std::env::var_os(HELPER_OUT) {
        return spawn_and_record(Path::new(&out)).await;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("child-environ");
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let test = format!("{module}::the_child_sees_plain_and_allowed_variables_and_no_credentials");
    let run = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env_clear()
        .envs(host_env())
        .env(HELPER_OUT, &out)
        .output()
        .await
        .expect("run the helper");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let environ = std::fs::read(&out).expect("the helper wrote the child's environment");
    let seen: BTreeMap<OsString, OsString> = environ
        .split(|&b| b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let eq = entry.iter().position(|&b| b == b'=').unwrap_or(entry.len());
            let value = entry.get(eq + 1..).unwrap_or_default();
            (
                OsString::from_vec(entry[..eq].to_vec()),
                OsString::from_vec(value.to_vec()),
            )
        })
        .collect();
    assert_eq!(seen, expected_child_env());
}

/// In the re-run: spawns `cat /proc/self/environ` with `DATABASE_URL` and `SSH_AUTH_SOCK`
/// allow-listed and `MYSQL_PWD` set by the overlay, and writes what it prints to `out`.
async fn spawn_and_record(out: &Path) {
    let allow = EnvAllow::new(["DATABASE_URL", "SSH_AUTH_SOCK"]).expect("valid allow-list");
    let sub = LocalSubprocess::new().with_env_allow(allow);
    let mut spec = SpawnSpec::new(["cat", "/proc/self/environ"], "/tmp");
    spec.stdout = OutputMode::Pipe;
    spec.env.insert("MYSQL_PWD".into(), Some("explicit".into()));
    let mut p = sub.spawn(spec).expect("spawn");
    let mut environ = Vec::new();
    p.take_stdout()
        .expect("stdout pipe")
        .read_to_end(&mut environ)
        .await
        .expect("read the child's environment");
    assert_eq!(p.done().await.exit_code(), Some(0));
    std::fs::write(out, environ).expect("write the child's environment");
}
