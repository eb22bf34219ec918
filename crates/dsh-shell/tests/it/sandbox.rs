//! Confined bash with real runners (Landlock + seccomp, bubblewrap): what the kernel lets
//! through and what it refuses. Each test runs under every runner available here; a
//! missing one is a skip recorded by `dsh_testkit` (a failure where it is required).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_core::ErrorCode;
use dsh_process::LocalSubprocess;
use dsh_sandbox::{LocalSandbox, Network, OnPartial, Runner, Sandbox, SandboxMode, SandboxPolicy};
use dsh_shell::bash::LocalBash;
use dsh_shell::{RunResult, Shell, ShellRequest};

/// Each runner that works here, forced, with a name for messages.
fn sandboxes() -> Vec<(Runner, Arc<LocalSandbox>)> {
    let mut out = Vec::new();
    for runner in [Runner::Landlock, Runner::Bwrap] {
        let sandbox = LocalSandbox::new().force_runner(runner);
        let status = sandbox
            .runners()
            .into_iter()
            .find(|s| s.runner == runner)
            .map(|s| s.available);
        match status {
            Some(Ok(_)) => out.push((runner, Arc::new(sandbox))),
            Some(Err(why)) => dsh_testkit::skip(need_of(runner), &format!("{runner}: {why}")),
            None => dsh_testkit::skip(
                need_of(runner),
                &format!("{runner} is not a runner of this platform"),
            ),
        }
    }
    out
}

/// What a test under `runner` needs of the machine.
fn need_of(runner: Runner) -> dsh_testkit::Need {
    match runner {
        Runner::Bwrap => dsh_testkit::Need::Bwrap,
        _ => dsh_testkit::Need::Landlock,
    }
}

/// The workspace's policy for a test of `runner`. Landlock enforces workspace-write only
/// in part (no protected carve-outs, no metadata outside the roots), which dsh refuses
/// unless the user accepts it: these tests accept it, to check what Landlock does enforce;
/// the refusal is tested on its own.
fn policy_for(runner: Runner, mode: SandboxMode, ws: &Path) -> SandboxPolicy {
    let policy = dsh_protect::workspace_policy(mode, ws);
    if runner == Runner::Landlock {
        policy.with_on_partial(OnPartial::Accept)
    } else {
        policy
    }
}

fn bash(sandbox: Arc<dyn Sandbox>) -> LocalBash {
    LocalBash::new(Arc::new(LocalSubprocess::new())).with_sandbox(sandbox)
}

async fn run(shell: &LocalBash, command: &str, policy: &SandboxPolicy) -> RunResult {
    let mut request = ShellRequest::new(command, policy.clone());
    request.workdir = Some(policy.workspace_root.clone());
    let spec = shell.spec_for(request).expect("resolve");
    shell.run(spec).await.expect("run")
}

/// A workspace directory (canonical) with a sibling outside it.
struct Dirs {
    _base: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

fn dirs() -> Dirs {
    let base = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(base.path()).expect("canonical");
    let ws = root.join("ws");
    let outside = root.join("outside");
    std::fs::create_dir(&ws).expect("ws");
    std::fs::create_dir(&outside).expect("outside");
    std::fs::write(outside.join("file"), "outside\n").expect("outside file");
    Dirs {
        _base: base,
        ws,
        outside,
    }
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

#[tokio::test]
async fn read_only_refuses_every_write_and_allows_reads() {
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let shell = bash(sandbox.clone());
        let policy = policy_for(runner, SandboxMode::ReadOnly, &d.ws);
        let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
        let targets = [
            d.ws.join("new"),
            PathBuf::from("/tmp/dsh-ro-probe"),
            PathBuf::from(&home).join(".dsh-ro-probe"),
            PathBuf::from("/dev/shm/dsh-ro-probe"),
            d.outside.join("file"),
        ];
        for t in &targets {
            let r = run(&shell, &format!("echo x > {}", q(t)), &policy).await;
            assert_ne!(r.exit_code, Some(0), "{runner}: wrote {}", t.display());
            let facts = r.sandbox.expect("facts");
            assert!(
                facts.denied,
                "{runner}: {}: {:?}",
                t.display(),
                r.stderr.text
            );
            assert_eq!(facts.runner, Some(runner));
        }
        assert!(!d.ws.join("new").exists());
        assert_eq!(
            std::fs::read_to_string(d.outside.join("file")).expect("must succeed"),
            "outside\n"
        );
        let r = run(&shell, "echo x > \"$TMPDIR/t\"", &policy).await;
        assert_ne!(
            r.exit_code,
            Some(0),
            "{runner}: TMPDIR is writable in read-only"
        );
        let r = run(
            &shell,
            &format!(
                "echo hi > /dev/null && cat {} && ls / >/dev/null",
                q(&d.outside.join("file"))
            ),
            &policy,
        )
        .await;
        assert_eq!(r.exit_code, Some(0), "{runner}: {}", r.stderr.text);
        assert_eq!(r.stdout.text, "outside\n");
        assert!(!r.sandbox.expect("facts").denied);
    }
}

#[tokio::test]
async fn workspace_write_lands_inside_and_nowhere_else() {
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let shell = bash(sandbox.clone());
        let policy = policy_for(runner, SandboxMode::WorkspaceWrite, &d.ws);
        let r = run(
            &shell,
            "mkdir -p sub && echo in > sub/f && echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"",
            &policy,
        )
        .await;
        assert_eq!(r.exit_code, Some(0), "{runner}: {}", r.stderr.text);
        assert_eq!(
            std::fs::read_to_string(d.ws.join("sub/f")).expect("must succeed"),
            "in\n"
        );
        let tmp = sandbox.temp_dir().expect("temp dir");
        assert_eq!(
            std::fs::read_to_string(tmp.join("t")).expect("must succeed"),
            "t\n",
            "{runner}"
        );

        std::os::unix::fs::symlink(&d.outside, d.ws.join("out-link")).expect("must succeed");
        std::fs::write(d.ws.join("mine"), "mine\n").expect("must succeed");
        let escapes = [
            format!("echo x > {}", q(&d.outside.join("new"))),
            format!("echo x > {}", q(&d.ws.join("../sibling"))),
            "echo x > out-link/new".to_owned(),
            "echo x >> out-link/file".to_owned(),
            format!("ln {} hard && echo x >> hard", q(&d.outside.join("file"))),
            format!("mv mine {}", q(&d.outside)),
            "echo x > /tmp/dsh-ww-probe".to_owned(),
        ];
        for cmd in &escapes {
            let r = run(&shell, cmd, &policy).await;
            assert_ne!(r.exit_code, Some(0), "{runner}: `{cmd}` succeeded");
        }
        assert_eq!(
            std::fs::read_to_string(d.outside.join("file")).expect("must succeed"),
            "outside\n"
        );
        assert!(!d.outside.join("new").exists());
        assert!(!d.outside.join("mine").exists());
        assert!(d.ws.join("mine").exists());
        assert!(!d
            .ws
            .parent()
            .expect("must succeed")
            .join("sibling")
            .exists());
        assert!(!Path::new("/tmp/dsh-ww-probe").exists());
    }
}

#[tokio::test]
async fn confined_commands_have_no_new_privs_and_no_capabilities() {
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let shell = bash(sandbox);
        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let policy = policy_for(runner, mode, &d.ws);
            let r = run(
                &shell,
                "grep -E '^(NoNewPrivs|CapEff|CapPrm|CapAmb):' /proc/self/status",
                &policy,
            )
            .await;
            assert_eq!(r.exit_code, Some(0), "{runner}: {}", r.stderr.text);
            let text = r.stdout.text;
            assert!(text.contains("NoNewPrivs:\t1"), "{runner} {mode}: {text}");
            for cap in ["CapEff", "CapPrm", "CapAmb"] {
                assert!(
                    text.contains(&format!("{cap}:\t0000000000000000")),
                    "{runner} {mode}: {text}"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_process_left_inside_the_sandbox_is_gone_when_the_command_returns() {
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let shell = bash(sandbox);
        let policy = policy_for(runner, SandboxMode::ReadOnly, &d.ws);
        let marker = format!("1000.{}", std::process::id());
        let r = run(
            &shell,
            &format!("setsid sleep {marker} & disown; echo started"),
            &policy,
        )
        .await;
        assert_eq!(r.stdout.text, "started\n", "{runner}: {}", r.stderr.text);
        assert!(
            !sleeper_alive(&marker),
            "{runner}: the sleeper outlived its command"
        );
    }
}

fn sleeper_alive(marker: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        cmd.starts_with("sleep ") && cmd.contains(marker) && !stat.contains(") Z")
    })
}

#[tokio::test]
async fn with_no_runner_the_command_is_refused_and_nothing_runs() {
    let d = dirs();
    let sandbox = Arc::new(LocalSandbox::new().without_bwrap().without_landlock());
    let shell = bash(sandbox);
    let policy = dsh_protect::workspace_policy(SandboxMode::WorkspaceWrite, &d.ws);
    let mut request = ShellRequest::new("touch ran", policy);
    request.workdir = Some(d.ws.clone());
    let spec = shell.spec_for(request).expect("must succeed");
    let e = shell.run(spec).await.expect_err("must fail");
    assert_eq!(e.code(), ErrorCode::SandboxUnavailable);
    assert!(
        e.message().contains("danger-full-access"),
        "{}",
        e.message()
    );
    assert!(!d.ws.join("ran").exists());
}

#[tokio::test]
async fn git_commits_work_but_hooks_and_config_stay_read_only() {
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(args)
                .current_dir(&d.ws)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "git {args:?}");
        };
        git(&["init", "-q"]);
        let shell = bash(sandbox);
        let policy = policy_for(runner, SandboxMode::WorkspaceWrite, &d.ws);
        let r = run(
            &shell,
            "echo a > a.txt && git add a.txt && git -c user.name=t -c user.email=t@t commit -qm first && git log --oneline | wc -l",
            &policy,
        )
        .await;
        let facts = r.sandbox.clone().expect("facts");
        if runner == Runner::Landlock {
            // Landlock cannot carve protected paths out of a writable root, and says so.
            assert!(
                !facts.enforcement.as_ref().expect("must succeed").is_full(),
                "{facts:?}"
            );
            continue;
        }
        assert!(
            facts.enforcement.as_ref().expect("must succeed").is_full(),
            "{facts:?}"
        );
        assert_eq!(r.exit_code, Some(0), "{runner}: {}", r.stderr.text);
        assert_eq!(r.stdout.text.trim(), "1");
        let config_before = std::fs::read(d.ws.join(".git/config")).expect("must succeed");
        for cmd in [
            "echo 'exit 0' > .git/hooks/pre-commit",
            "echo '[core] fsmonitor = evil' >> .git/config",
            "mkdir -p .cargo && echo x > .cargo/config.toml",
            "mkdir -p .claude && echo '{}' > .claude/settings.json",
            "mkdir -p .vscode && echo '{}' > .vscode/tasks.json",
        ] {
            let r = run(&shell, cmd, &policy).await;
            assert_ne!(r.exit_code, Some(0), "{runner}: `{cmd}` succeeded");
            assert!(
                r.sandbox.expect("must succeed").denied,
                "{runner}: `{cmd}`: {}",
                r.stderr.text
            );
        }
        assert!(!d.ws.join(".git/hooks/pre-commit").exists());
        assert_eq!(
            std::fs::read(d.ws.join(".git/config")).expect("must succeed"),
            config_before
        );
        // Ways around the read-only mounts: carry them away by renaming their directory,
        // or redirect git to another config and hooks with a new `commondir`.
        for cmd in [
            "mv .git .git-old",
            "mkdir -p evil/hooks && printf '[core]\\n\\tfsmonitor = evil\\n' > evil/config && echo ../evil > .git/commondir",
        ] {
            let r = run(&shell, cmd, &policy).await;
            assert_ne!(r.exit_code, Some(0), "{runner}: `{cmd}` succeeded");
        }
        assert!(d.ws.join(".git/HEAD").exists(), "{runner}: .git was moved");
        assert!(!d.ws.join(".git-old").exists());
        // git in the sandbox still works with the `commondir` placeholder in place.
        let r = run(
            &shell,
            "git status --porcelain >/dev/null && git log --oneline | wc -l",
            &policy,
        )
        .await;
        assert_eq!(r.exit_code, Some(0), "{runner}: {}", r.stderr.text);
        assert_eq!(r.stdout.text.trim(), "1");
        // The placeholders that kept missing paths uncreatable are gone again.
        assert!(
            !d.ws.join(".git/commondir").exists(),
            "{runner}: .git/commondir left behind"
        );
        for name in [".cargo", ".claude", ".vscode", ".mcp.json"] {
            assert!(
                !d.ws.join(name).exists(),
                "{runner}: placeholder {name} was left behind"
            );
        }
    }
}

/// A Python client run inside the sandbox that tries every way out and prints one line
/// per attempt: `NAME ok` or `NAME blocked`.
const NET_PROBE: &str = r#"
import socket, sys
port, udp_port, unix_path, abstract = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError:
        print(name, "blocked")
def tcp(host, fam):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2); s.connect((host, port)); s.send(b"x")
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("127.0.0.1", udp_port))
def unix(addr):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(2); s.connect(addr); s.send(b"x")
def dns():
    socket.getaddrinfo("example.com", 80)
def pair():
    a, b = socket.socketpair(); a.send(b"1"); a.sendmsg([b"2"]); assert b.recv(2) == b"12"
attempt("tcp4", lambda: tcp("127.0.0.1", socket.AF_INET))
attempt("tcp6", lambda: tcp("::1", socket.AF_INET6))
attempt("udp", udp)
attempt("unix", lambda: unix(unix_path))
attempt("abstract", lambda: unix("\0" + abstract))
attempt("dns", dns)
attempt("pair", pair)
"#;

#[tokio::test]
async fn network_deny_cuts_every_way_out_and_allow_lets_it_through() {
    use std::os::linux::net::SocketAddrExt;
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let tcp4 = std::net::TcpListener::bind("127.0.0.1:0").expect("must succeed");
        let port = tcp4.local_addr().expect("must succeed").port();
        let tcp6 = std::net::TcpListener::bind(("::1", port)).ok();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("must succeed");
        let unix_path = d.outside.join("daemon.sock");
        let _unix = std::os::unix::net::UnixListener::bind(&unix_path).expect("must succeed");
        let abstract_name = format!("dsh-test-{}-{runner}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .expect("must succeed");
        let _abstract = std::os::unix::net::UnixListener::bind_addr(&addr).expect("must succeed");
        std::fs::write(d.ws.join("probe.py"), NET_PROBE).expect("must succeed");
        let cmd = format!(
            "python3 probe.py {port} {} {} {abstract_name} 2>&1; (echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo devtcp ok || echo devtcp blocked",
            udp.local_addr().expect("must succeed").port(),
            q(&unix_path),
        );
        let shell = bash(sandbox);
        let denied = policy_for(runner, SandboxMode::ReadOnly, &d.ws);
        let r = run(&shell, &cmd, &denied).await;
        let out = r.stdout.text;
        for name in ["tcp4", "udp", "unix", "abstract", "dns", "devtcp"] {
            assert!(
                out.contains(&format!("{name} blocked")),
                "{runner}: {name}: {out}"
            );
        }
        if tcp6.is_some() {
            assert!(out.contains("tcp6 blocked"), "{runner}: {out}");
        }
        assert!(
            out.contains("pair ok"),
            "{runner}: socketpair must work inside: {out}"
        );
        udp.set_nonblocking(true).expect("must succeed");
        assert!(
            udp.recv(&mut [0u8; 8]).is_err(),
            "{runner}: a datagram got out"
        );

        let allowed = denied.clone().with_network(Network::Allow);
        let r = run(&shell, &cmd, &allowed).await;
        let out = r.stdout.text;
        for name in ["tcp4", "unix", "abstract", "devtcp", "pair"] {
            assert!(
                out.contains(&format!("{name} ok")),
                "{runner} (allowed): {name}: {out}"
            );
        }
    }
}

#[tokio::test]
async fn kernel_settings_stay_read_only_even_for_a_root_command() {
    // As root without the read-only /proc/sys, this write would succeed (writing back the
    // value it read, so a failing test changes nothing): `core_pattern` names a program
    // the kernel runs as root on the host.
    let rewrite = "v=$(cat /proc/sys/kernel/core_pattern) && printf '%s\\n' \"$v\" > /proc/sys/kernel/core_pattern";
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let shell = bash(sandbox);
        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let policy = policy_for(runner, mode, &d.ws);
            let r = run(&shell, rewrite, &policy).await;
            assert_ne!(
                r.exit_code,
                Some(0),
                "{runner} {mode}: a sysctl took a write"
            );
        }
    }
}

#[tokio::test]
async fn clone3_is_unavailable_so_no_child_is_born_in_another_cgroup() {
    // clone3 with no arguments: EINVAL from the kernel, ENOSYS from the filter (its
    // CLONE_INTO_CGROUP would start a child outside the command's cgroup and process
    // limit). Threads and fork still work: libc falls back to clone.
    let probe =
        "python3 -c 'import ctypes, os, threading; libc = ctypes.CDLL(None, use_errno=True); \
                 r = libc.syscall(435, 0, 0); e = ctypes.get_errno(); \
                 t = threading.Thread(target=lambda: None); t.start(); t.join(); \
                 pid = os.fork(); pid or os._exit(0); os.waitpid(pid, 0); print(r, e)'";
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let shell = bash(sandbox);
        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let policy = policy_for(runner, mode, &d.ws);
            let r = run(&shell, probe, &policy).await;
            assert_eq!(
                r.stdout.text,
                "-1 38\n", // ENOSYS
                "{runner} {mode}: {}",
                r.stderr.text
            );
        }
    }
    let d = dirs();
    let unconfined = LocalBash::new(Arc::new(LocalSubprocess::new()));
    let policy = dsh_protect::workspace_policy(SandboxMode::DangerFullAccess, &d.ws);
    let open = run(&unconfined, probe, &policy).await;
    assert_eq!(open.stdout.text, "-1 22\n", "{}", open.stderr.text); // EINVAL
}

#[tokio::test]
async fn file_metadata_outside_the_writable_roots_cannot_change() {
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let file = d.outside.join("file");
        let before = std::fs::metadata(&file).expect("stat");
        let shell = bash(sandbox);
        let attempts = [
            format!("chmod 4755 {}", q(&file)),
            format!("touch -d 2000-01-01 {}", q(&file)),
            format!(
                "python3 -c 'import os, sys; os.setxattr(sys.argv[1], \"user.dsh\", b\"x\")' {}",
                q(&file)
            ),
        ];
        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let policy = policy_for(runner, mode, &d.ws);
            for cmd in &attempts {
                let r = run(&shell, cmd, &policy).await;
                let facts = r.sandbox.expect("facts");
                if runner == Runner::Landlock && mode == SandboxMode::WorkspaceWrite {
                    // Landlock cannot govern metadata outside the roots, and says so.
                    let why = format!("{:?}", facts.enforcement);
                    assert!(why.contains("chmod"), "{runner} {mode}: {why}");
                    continue;
                }
                assert_ne!(r.exit_code, Some(0), "{runner} {mode}: `{cmd}` succeeded");
            }
        }
        let after = std::fs::metadata(&file).expect("stat");
        use std::os::unix::fs::MetadataExt;
        if runner == Runner::Bwrap {
            assert_eq!(before.mode(), after.mode(), "{runner}");
            assert_eq!(before.mtime(), after.mtime(), "{runner}");
        }
    }
}

#[tokio::test]
async fn the_users_keyrings_and_host_ipc_are_out_of_reach() {
    // A System V shared memory segment of the host.
    let made = std::process::Command::new("ipcmk")
        .args(["-M", "4096"])
        .output();
    let Ok(made) = made.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()) else {
        dsh_testkit::skip(
            dsh_testkit::Need::SystemTool,
            "ipcmk (util-linux) is missing",
        );
        return;
    };
    let id: i64 = made
        .split(':')
        .next_back()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("ipcmk said {made:?}"));
    // add_key into the thread keyring (gone with the thread even if it got through), and
    // shmat of the host segment: each prints its errno, 0 when it worked.
    let probe = format!(
        "python3 -c '
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
add_key = {{\"x86_64\": 248, \"aarch64\": 217}}[platform.machine()]
r = libc.syscall(add_key, b\"user\", b\"dsh-probe\", b\"x\", 1, -1)
print(\"add_key\", 0 if r >= 0 else ctypes.get_errno())
libc.shmat.restype = ctypes.c_void_p
p = libc.shmat({id}, None, 0)
print(\"shmat\", 0 if p not in (None, ctypes.c_void_p(-1).value) else ctypes.get_errno())
'"
    );
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let shell = bash(sandbox);
        for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
            let policy = policy_for(runner, mode, &d.ws);
            let r = run(&shell, &probe, &policy).await;
            assert_eq!(r.exit_code, Some(0), "{runner} {mode}: {}", r.stderr.text);
            for line in r.stdout.text.lines() {
                assert!(!line.ends_with(" 0"), "{runner} {mode}: {line} worked");
            }
            assert_eq!(r.stdout.text.lines().count(), 2, "{}", r.stdout.text);
        }
    }
    // The same probe unconfined reaches both: the test can fail.
    let out = std::process::Command::new("sh")
        .args(["-c", &probe])
        .output()
        .expect("sh");
    let _ = std::process::Command::new("ipcrm")
        .args(["-m", &id.to_string()])
        .status();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("shmat 0"), "unconfined: {text}");
}

#[tokio::test]
async fn a_protected_path_behind_a_symlink_is_refused_unless_the_gap_is_accepted() {
    for (runner, sandbox) in sandboxes() {
        if runner != Runner::Bwrap {
            continue;
        }
        let d = dirs();
        std::fs::create_dir(d.ws.join("cfg")).expect("cfg");
        std::os::unix::fs::symlink("cfg", d.ws.join(".vscode")).expect("symlink");
        let shell = bash(sandbox);
        let policy = policy_for(runner, SandboxMode::WorkspaceWrite, &d.ws);
        let mut request = ShellRequest::new("touch ran", policy.clone());
        request.workdir = Some(d.ws.clone());
        let e = shell
            .run(shell.spec_for(request).expect("resolve"))
            .await
            .expect_err("a partial sandbox must be refused");
        assert_eq!(e.code(), ErrorCode::SandboxUnavailable);
        assert!(
            e.message().contains(".vscode is a symlink"),
            "{}",
            e.message()
        );
        assert!(e.message().contains("--allow-partial"), "{}", e.message());
        assert!(!d.ws.join("ran").exists());
        let accepted = policy.with_on_partial(OnPartial::Accept);
        let r = run(&shell, "true", &accepted).await;
        let facts = r.sandbox.expect("facts");
        let why = format!("{:?}", facts.enforcement);
        assert!(why.contains(".vscode is a symlink"), "{runner}: {why}");
    }
    // Chosen automatically, the runner with the fewest gaps wins: bubblewrap (the link)
    // over Landlock (no carve-outs at all, no metadata).
    let d = dirs();
    std::fs::create_dir(d.ws.join("cfg")).expect("cfg");
    std::os::unix::fs::symlink("cfg", d.ws.join(".vscode")).expect("symlink");
    let sandbox = LocalSandbox::new();
    let policy = dsh_protect::workspace_policy(SandboxMode::WorkspaceWrite, &d.ws);
    if let Ok((runner, _)) = sandbox.choose(&policy) {
        let bwrap_works = sandbox
            .runners()
            .iter()
            .any(|s| s.runner == Runner::Bwrap && s.available.is_ok());
        if bwrap_works {
            assert_eq!(runner, Runner::Bwrap);
        }
    }
}

#[tokio::test]
async fn placeholders_are_removed_only_where_they_were_made() {
    for (runner, sandbox) in sandboxes() {
        if runner != Runner::Bwrap {
            continue;
        }
        let d = dirs();
        // `.git` is a link, so its placeholders are made through it; the command then
        // points it at a directory outside that holds an empty `hooks` of its own.
        std::fs::create_dir(d.ws.join("x")).expect("x");
        std::os::unix::fs::symlink("x", d.ws.join(".git")).expect("symlink");
        let victim = d.outside.join("victim");
        std::fs::create_dir_all(victim.join("hooks")).expect("victim");
        let shell = bash(sandbox);
        // A symlinked protected path is a gap (tested above): accepted here.
        let policy = policy_for(runner, SandboxMode::WorkspaceWrite, &d.ws)
            .with_on_partial(OnPartial::Accept);
        let r = run(&shell, &format!("ln -sfn {} .git", q(&victim)), &policy).await;
        assert_eq!(r.exit_code, Some(0), "{}", r.stderr.text);
        assert!(
            victim.join("hooks").is_dir(),
            "{runner}: dsh removed a directory outside the workspace"
        );
    }
}

#[tokio::test]
async fn no_set_id_file_can_be_made_and_plain_modes_still_work() {
    for (runner, sandbox) in sandboxes() {
        let d = dirs();
        let shell = bash(sandbox);
        let policy = policy_for(runner, SandboxMode::WorkspaceWrite, &d.ws);
        let r = run(
            &shell,
            "cp /bin/true t && chmod 755 t && ./t && echo plain-ok",
            &policy,
        )
        .await;
        assert_eq!(r.stdout.text, "plain-ok\n", "{runner}: {}", r.stderr.text);
        for cmd in [
            "chmod 4755 t",
            "chmod g+s t",
            "python3 -c 'import os; os.open(\"u\", os.O_CREAT | os.O_WRONLY, 0o4755)'",
        ] {
            let r = run(&shell, cmd, &policy).await;
            assert_ne!(r.exit_code, Some(0), "{runner}: `{cmd}` succeeded");
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.ws.join("t"))
            .expect("t")
            .permissions()
            .mode();
        assert_eq!(mode & 0o6000, 0, "{runner}: mode {mode:o}");
        assert!(
            !d.ws.join("u").exists()
                || std::fs::metadata(d.ws.join("u"))
                    .expect("u")
                    .permissions()
                    .mode()
                    & 0o6000
                    == 0
        );
    }
}

#[tokio::test]
async fn a_dangling_protected_link_does_not_stop_every_command() {
    for (runner, sandbox) in sandboxes() {
        if runner != Runner::Bwrap {
            continue;
        }
        let d = dirs();
        std::os::unix::fs::symlink(d.outside.join("gone"), d.ws.join(".vscode")).expect("link");
        let shell = bash(sandbox);
        // A symlinked protected path is a gap (tested above): accepted here.
        let policy = policy_for(runner, SandboxMode::WorkspaceWrite, &d.ws)
            .with_on_partial(OnPartial::Accept);
        let r = run(&shell, "echo ran", &policy).await;
        assert_eq!(r.stdout.text, "ran\n", "{runner}: {}", r.stderr.text);
    }
}
