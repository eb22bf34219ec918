//! Spawn validation, argv, stdin, exit status and the drain bound.

use std::time::{Duration, Instant};

use dsh_core::{CancelToken, ErrorCode};
use dsh_process::{LocalSubprocess, Outcome, Signal, SpawnSpec, StdinMode, Subprocess};

use crate::support::{bash, collect};

fn text(p: &dsh_process::Process) -> (String, String) {
    (
        p.stdout_capture()
            .map(|c| c.collected().text)
            .unwrap_or_default(),
        p.stderr_capture()
            .map(|c| c.collected().text)
            .unwrap_or_default(),
    )
}

#[tokio::test]
async fn echo_reports_exit_zero_and_its_output() {
    let sub = LocalSubprocess::new();
    let p = sub.spawn(bash("echo hello; echo oops >&2")).expect("spawn");
    assert_eq!(p.done().await, Outcome::Exited(0));
    assert_eq!(text(&p), ("hello\n".into(), "oops\n".into()));
}

#[tokio::test]
async fn nonzero_exit_is_an_outcome_not_an_error() {
    let sub = LocalSubprocess::new();
    let p = sub.spawn(bash("exit 42")).expect("spawn");
    assert_eq!(p.done().await, Outcome::Exited(42));
}

#[tokio::test]
async fn argv_is_not_shell_interpreted() {
    let sub = LocalSubprocess::new();
    let mut spec = SpawnSpec::new(["printf", "%s", "$HOME"], "/");
    spec.stdout = collect(100, None);
    let p = sub.spawn(spec).expect("spawn");
    assert_eq!(p.done().await, Outcome::Exited(0));
    assert_eq!(text(&p).0, "$HOME");
}

#[tokio::test]
async fn cwd_is_honoured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sub = LocalSubprocess::new();
    let mut spec = bash("pwd");
    spec.cwd = dir.path().to_path_buf();
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    assert_eq!(
        text(&p).0.trim_end(),
        dir.path().canonicalize().expect("canon").to_string_lossy()
    );
}

#[tokio::test]
async fn invalid_specs_are_refused_before_anything_runs() {
    let sub = LocalSubprocess::new();
    for grace in [Duration::ZERO, Duration::from_millis(2_147_483_648)] {
        let mut spec = bash("true");
        spec.grace = grace;
        let e = sub.spawn(spec).expect_err("grace");
        assert_eq!(
            (e.code(), e.message()),
            (
                ErrorCode::InvalidArgument,
                "subprocess grace_ms must be a positive finite number no greater than 2147483647"
            )
        );
    }
    let mut spec = bash("true");
    let cancel = CancelToken::new();
    cancel.cancel("too late");
    spec.cancel = Some(cancel);
    let e = sub.spawn(spec).expect_err("aborted");
    assert_eq!(
        (e.code(), e.message()),
        (ErrorCode::Aborted, "aborted before spawn: too late")
    );

    for argv in [vec![], vec![""]] {
        let e = sub.spawn(SpawnSpec::new(argv, "/")).expect_err("argv");
        assert_eq!(
            (e.code(), e.message()),
            (
                ErrorCode::InvalidArgument,
                "invalid argv: expected a non-empty program name at argv[0]"
            )
        );
    }
    let mut spec = bash("true");
    spec.cwd = "/no/such/dir".into();
    assert_eq!(
        sub.spawn(spec).expect_err("cwd").code(),
        ErrorCode::ProcessCwdInvalid
    );
    let e = sub
        .spawn(SpawnSpec::new(["no-such-program-dsh"], "/"))
        .expect_err("missing");
    assert_eq!(e.code(), ErrorCode::ProcessNotFound);
    let e = sub.spawn(SpawnSpec::new(["/etc"], "/")).expect_err("dir");
    assert_eq!(e.code(), ErrorCode::ProcessNotExecutable);
}

#[tokio::test]
async fn script_with_a_missing_interpreter_is_not_executable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("s");
    std::fs::write(&script, "#!/no/such/interpreter\n").expect("write");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let sub = LocalSubprocess::new();
    let e = sub
        .spawn(SpawnSpec::new([script], "/"))
        .expect_err("interp");
    assert_eq!(e.code(), ErrorCode::ProcessNotExecutable);
}

#[tokio::test]
async fn stdin_modes_give_eof_data_or_a_pipe() {
    let sub = LocalSubprocess::new();
    let p = sub.spawn(bash("cat; echo rc=$?")).expect("spawn");
    p.done().await;
    assert_eq!(text(&p).0, "rc=0\n");

    let mut spec = bash("cat");
    spec.stdin = StdinMode::Data(b"piped data".to_vec());
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    assert_eq!(text(&p).0, "piped data");

    // A child that never reads 1 MiB of stdin still reports its own status.
    let mut spec = bash("exit 7");
    spec.stdin = StdinMode::Data(vec![b'x'; 1 << 20]);
    let p = sub.spawn(spec).expect("spawn");
    assert_eq!(p.done().await, Outcome::Exited(7));

    let mut spec = bash("read line; echo got:$line");
    spec.stdin = StdinMode::Pipe;
    let mut p = sub.spawn(spec).expect("spawn");
    let mut w = p.take_stdin().expect("stdin pipe");
    tokio::io::AsyncWriteExt::write_all(&mut w, b"hi\n")
        .await
        .expect("write");
    drop(w);
    p.done().await;
    assert_eq!(text(&p).0, "got:hi\n");
}

#[tokio::test]
async fn fd0_is_a_character_device_without_stdin() {
    let sub = LocalSubprocess::new();
    let p = sub
        .spawn(bash("[ -c /dev/stdin ] && echo chardev"))
        .expect("spawn");
    p.done().await;
    assert_eq!(text(&p).0, "chardev\n");
}

#[tokio::test]
async fn a_self_kill_reports_the_signal() {
    let sub = LocalSubprocess::new();
    let p = sub.spawn(bash("kill -TERM $$")).expect("spawn");
    assert_eq!(p.done().await, Outcome::Signaled(Signal(libc::SIGTERM)));
    assert_eq!(Signal(libc::SIGTERM).to_string(), "SIGTERM");
}

#[tokio::test]
async fn cancel_terminates_with_sigterm() {
    let sub = LocalSubprocess::new();
    let cancel = CancelToken::new();
    let mut spec = bash("echo started; sleep 1000");
    spec.cancel = Some(cancel.clone());
    let p = sub.spawn(spec).expect("spawn");
    let cap = p.stdout_capture().expect("cap").clone();
    crate::support::wait_for_text(&cap, "started").await;
    cancel.cancel("stop");
    assert_eq!(p.done().await, Outcome::Signaled(Signal(libc::SIGTERM)));
}

#[tokio::test]
async fn done_settles_within_grace_when_a_descendant_holds_the_pipe() {
    let sub = LocalSubprocess::new();
    let mut spec = bash("sleep 60 & echo out");
    spec.grace = Duration::from_millis(100);
    let start = Instant::now();
    let p = sub.spawn(spec).expect("spawn");
    assert_eq!(p.done().await, Outcome::Exited(0));
    let took = start.elapsed();
    assert_eq!(text(&p).0, "out\n");
    // Settlement waited for the drain bound, not for `sleep 60` (a hang guard, not timing).
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[tokio::test]
async fn a_stream_of_exactly_max_bytes_is_not_truncated() {
    let sub = LocalSubprocess::new();
    let mut spec = bash("head -c 500 /dev/zero | tr '\\0' a");
    spec.stdout = collect(500, Some(10_000));
    let p = sub.spawn(spec).expect("spawn");
    p.done().await;
    let c = p.stdout_capture().expect("cap").collected();
    assert_eq!((c.text.len(), c.truncated, c.spill), (500, false, None));
}

#[tokio::test]
async fn a_nul_byte_in_argv_or_env_is_refused_before_anything_runs() {
    use std::os::unix::ffi::OsStringExt;
    let sub = LocalSubprocess::new();
    let bad = std::ffi::OsString::from_vec(b"a\0b".to_vec());
    let e = sub
        .spawn(SpawnSpec::new([std::ffi::OsString::from("echo"), bad], "/"))
        .expect_err("nul");
    assert_eq!(
        (e.code(), e.message()),
        (ErrorCode::InvalidArgument, "argv[1] contains a NUL byte")
    );
    let mut spec = bash("true");
    spec.env.insert("X".into(), Some("a\0b".into()));
    let e = sub.spawn(spec).expect_err("nul env");
    assert_eq!(e.message(), "environment variable X contains a NUL byte");
}

#[tokio::test]
async fn find_program_searches_the_child_path_and_refuses_relative_paths() {
    let sub = LocalSubprocess::new();
    let mut env = dsh_process::EnvOverlay::new();
    env.insert("PATH".into(), Some("/nonexistent:/bin".into()));
    let found = sub.find_program("sh".as_ref(), &env).expect("sh on PATH");
    assert_eq!(found, std::path::PathBuf::from("/bin/sh"));
    let e = sub
        .find_program("bin/sh".as_ref(), &env)
        .expect_err("relative");
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
    let e = sub.find_program("".as_ref(), &env).expect_err("empty");
    assert_eq!(e.message(), "executable must be non-empty");
}

#[tokio::test]
async fn a_huge_argument_is_a_clear_error_not_a_hang() {
    let sub = LocalSubprocess::new();
    let huge = "a".repeat(200 * 1024);
    let e = sub
        .spawn(SpawnSpec::new(["echo", huge.as_str()], "/"))
        .expect_err("E2BIG");
    assert_eq!(e.code(), ErrorCode::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("too large to execute"),
        "{}",
        e.message()
    );
}
