//! The sandboxed provider: the per-call fence, protected paths, the kernel-checked
//! containment under a symlink swap race, and a writer killed mid-write.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dsh_core::ErrorCode;
use dsh_fs::{EditRequest, FileSystem, LocalFs, SandboxedFs};
use dsh_sandbox::{SandboxMode, SandboxPolicy};

struct Setup {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
    temp: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    let (ws, outside, temp) = (root.join("ws"), root.join("outside"), root.join("tmp"));
    for d in [&ws, &outside, &temp] {
        std::fs::create_dir(d).expect("mkdir");
    }
    std::fs::write(outside.join("secret"), "outside\n").expect("write");
    Setup {
        _dir: dir,
        ws,
        outside,
        temp,
    }
}

/// The fenced provider and the policy of `mode` its calls pass.
struct Fenced {
    fs: SandboxedFs,
    policy: SandboxPolicy,
}

impl std::ops::Deref for Fenced {
    type Target = SandboxedFs;
    fn deref(&self) -> &SandboxedFs {
        &self.fs
    }
}

fn fenced(s: &Setup, mode: SandboxMode) -> Fenced {
    Fenced {
        fs: SandboxedFs::new(LocalFs::new(&s.ws)).with_temp_dir(&s.temp),
        policy: dsh_protect::workspace_policy(mode, &s.ws),
    }
}

/// Danger-full-access, which the local provider's writes pass.
fn full_access(root: &std::path::Path) -> SandboxPolicy {
    SandboxPolicy::danger_full_access(root)
}

fn code<T: std::fmt::Debug>(r: Result<T, dsh_core::HarnessError>) -> ErrorCode {
    r.expect_err("must fail").code()
}

#[tokio::test]
async fn read_only_refuses_every_write_and_edit_but_reads() {
    let s = setup();
    let fs = fenced(&s, SandboxMode::ReadOnly);
    let t = fs.target_of("new.txt", None).await.expect("resolve");
    let e = fs
        .write_text(&t, "x", None, &fs.policy)
        .await
        .expect_err("denied");
    assert_eq!(e.code(), ErrorCode::FsSandboxDenied);
    assert!(
        e.message()
            .contains("file access denied under read-only mode"),
        "{}",
        e.message()
    );
    assert!(!s.ws.join("new.txt").exists());
    let secret = fs
        .target_of(s.outside.join("secret").to_str().expect("utf-8"), None)
        .await
        .expect("resolve");
    let req = EditRequest {
        old: "outside".into(),
        new: "x".into(),
        replace_all: false,
    };
    assert_eq!(
        code(fs.edit_text(&secret, &req, None, &fs.policy).await),
        ErrorCode::FsSandboxDenied
    );
    assert_eq!(
        fs.read_text(&secret, 100, &fs.policy)
            .await
            .expect("reads are free")
            .0,
        "outside\n"
    );
}

#[tokio::test]
async fn workspace_write_lands_inside_only() {
    let s = setup();
    let fs = fenced(&s, SandboxMode::WorkspaceWrite);
    let nested = fs.target_of("a/b/c.txt", None).await.expect("resolve");
    fs.write_text(&nested, "deep", None, &fs.policy)
        .await
        .expect("nested write");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("a/b/c.txt")).expect("read"),
        "deep"
    );
    let tmp = fs
        .target_of(s.temp.join("x/t.txt").to_str().expect("utf-8"), None)
        .await
        .expect("resolve");
    fs.write_text(&tmp, "t", None, &fs.policy)
        .await
        .expect("the temp dir is writable");

    std::os::unix::fs::symlink(&s.outside, s.ws.join("link")).expect("link");
    for path in [
        s.outside.join("new").to_string_lossy().into_owned(),
        "../outside/new".to_owned(),
        "../sibling.txt".to_owned(),
        "link/new".to_owned(),
        "link/newdir/deep.txt".to_owned(),
        "link/secret".to_owned(),
    ] {
        let t = fs.target_of(&path, None).await.expect("resolve");
        assert_eq!(
            code(fs.write_text(&t, "x", None, &fs.policy).await),
            ErrorCode::FsSandboxDenied,
            "{path}"
        );
    }
    assert!(!s.outside.join("new").exists() && !s.outside.join("newdir").exists());
    assert_eq!(
        std::fs::read_to_string(s.outside.join("secret")).expect("read"),
        "outside\n"
    );

    // Protected paths stay read-only, and a missing one cannot be created.
    for p in [
        ".git/hooks/pre-commit",
        ".git/config",
        ".dsh/config.toml",
        ".cargo/config.toml",
        ".mcp.json",
    ] {
        let t = fs.target_of(p, None).await.expect("resolve");
        assert_eq!(
            code(fs.write_text(&t, "x", None, &fs.policy).await),
            ErrorCode::FsSandboxDenied,
            "{p}"
        );
    }
    assert!(!s.ws.join(".git").exists() && !s.ws.join(".dsh").exists());
    // A per-call policy wins for that call only.
    let outside = fs
        .target_of(s.outside.join("granted").to_str().expect("utf-8"), None)
        .await
        .expect("resolve");
    let full = dsh_protect::workspace_policy(SandboxMode::DangerFullAccess, &s.ws);
    fs.write_text(&outside, "ok", None, &full)
        .await
        .expect("danger-full-access");
    assert_eq!(
        code(fs.write_text(&outside, "again", None, &fs.policy).await),
        ErrorCode::FsSandboxDenied
    );
    let ro = dsh_protect::workspace_policy(SandboxMode::ReadOnly, &s.ws);
    assert_eq!(
        code(fs.write_text(&nested, "x", None, &ro).await),
        ErrorCode::FsSandboxDenied
    );
    let root = fs.target_of(".", None).await.expect("resolve");
    assert_eq!(
        code(fs.write_text(&root, "x", None, &fs.policy).await),
        ErrorCode::FsNotRegularFile
    );
}

#[test]
fn a_symlink_swap_race_never_reaches_outside() {
    let s = setup();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    let fs = Arc::new(fenced(&s, SandboxMode::WorkspaceWrite));
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, ws, outside) = (stop.clone(), s.ws.clone(), s.outside.clone());
        std::thread::spawn(move || {
            let victim = ws.join("victim");
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = std::fs::remove_file(&victim);
                let _ = std::fs::write(&victim, "inside");
                let _ = std::fs::remove_file(&victim);
                let _ = std::os::unix::fs::symlink(outside.join("secret"), &victim);
                flips += 1;
            }
            flips
        })
    };
    // What a write may meet in the race, and nothing else: the symlink refused, the name
    // gone (removed meanwhile), or removed right after it was published.
    let (mut written, mut refused, mut gone) = (0, 0, 0);
    rt.block_on(async {
        for i in 0..10_000 {
            let t = match fs.target_of("victim", None).await {
                Ok(t) => t,
                Err(e) if e.code() == ErrorCode::FsNotFound => continue,
                Err(e) => panic!("resolve: {e}"),
            };
            match fs
                .write_text(&t, &format!("write {i}"), None, &fs.policy)
                .await
            {
                Ok(_) => written += 1,
                Err(e) if e.code() == ErrorCode::FsSandboxDenied => refused += 1,
                Err(e) if e.code() == ErrorCode::FsNotFound => gone += 1,
                Err(e) if e.code() == ErrorCode::FsIoError && e.message().contains("vanished") => {
                    gone += 1
                }
                Err(e) => panic!("write met {}: {e}", e.code()),
            }
        }
    });
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().expect("flipper");
    assert_eq!(
        std::fs::read_to_string(s.outside.join("secret")).expect("read"),
        "outside\n"
    );
    assert!(flips > 100, "the race did not run ({flips} flips)");
    assert!(
        refused > 0 && written + gone > 0,
        "the race did not meet both sides: {written} written, {refused} refused, {gone} gone"
    );
}

#[test]
fn a_writer_killed_mid_write_leaves_old_or_new_never_a_mix() {
    if let Some(path) = std::env::var_os("DSH_TEST_FS_WRITER") {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        rt.block_on(async {
            let path = PathBuf::from(path);
            let fs = LocalFs::new(path.parent().expect("parent"));
            let t = fs
                .target_of(path.to_str().expect("utf-8"), None)
                .await
                .expect("resolve");
            let big = "N".repeat(4 << 20);
            loop {
                fs.write_text(&t, &big, None, &full_access(&path))
                    .await
                    .expect("write");
                println!("wrote");
            }
        });
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let target = std::fs::canonicalize(dir.path())
        .expect("canonical")
        .join("file");
    let old = "O".repeat(4 << 20);
    std::fs::write(&target, &old).expect("write");
    for delay in [5u64, 20, 60] {
        let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                "a_writer_killed_mid_write_leaves_old_or_new_never_a_mix",
                "--nocapture",
            ])
            .env("DSH_TEST_FS_WRITER", &target)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(delay));
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
        let now = std::fs::read_to_string(&target).expect("read");
        assert!(
            now == old || now.bytes().all(|b| b == b'N') && now.len() == 4 << 20,
            "a mix after {delay} ms"
        );
        // Whatever staging the killed writer left is hidden (dot-prefixed) and not the file.
        for e in std::fs::read_dir(target.parent().expect("dir"))
            .expect("list")
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(name == "file" || name.starts_with(".file."), "{name}");
        }
    }
}

async fn write_denied(fs: &Fenced, path: &str) -> ErrorCode {
    let t = fs.target_of(path, None).await.expect("resolve");
    code(fs.write_text(&t, "pwned", None, &fs.policy).await)
}

#[tokio::test]
async fn protected_paths_reached_through_symlinks_are_refused() {
    let s = setup();
    let ws = &s.ws;
    for d in [".git", "tools/hooks", "cfg", "real"] {
        std::fs::create_dir_all(ws.join(d)).expect("mkdir");
    }
    std::fs::write(ws.join("tools/hooks/pre-commit"), "#!/bin/sh\n").expect("write");
    let link = |to: &str, at: &str| std::os::unix::fs::symlink(to, ws.join(at)).expect("link");
    link("../tools/hooks", ".git/hooks");
    link("cfg", ".claude");
    link("vsc", ".vscode"); // dangling: where it leads is protected too
    link("real", "alias");
    let fs = fenced(&s, SandboxMode::WorkspaceWrite);
    for p in [
        ".git/hooks/pre-commit",
        ".git/hooks/post-checkout",
        "tools/hooks/pre-commit",
        ".claude/settings.json",
        "cfg/settings.json",
        ".vscode/tasks.json",
        "vsc/tasks.json",
    ] {
        assert_eq!(
            write_denied(&fs, p).await,
            ErrorCode::FsSandboxDenied,
            "{p}"
        );
    }
    let hook = fs
        .target_of(".git/hooks/pre-commit", None)
        .await
        .expect("resolve");
    let req = EditRequest {
        old: "#!/bin/sh".into(),
        new: "#!/bin/sh\ncurl evil".into(),
        replace_all: false,
    };
    assert_eq!(
        code(fs.edit_text(&hook, &req, None, &fs.policy).await),
        ErrorCode::FsSandboxDenied
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("tools/hooks/pre-commit")).expect("read"),
        "#!/bin/sh\n"
    );
    let hooks: Vec<_> = std::fs::read_dir(ws.join("tools/hooks"))
        .expect("list")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(hooks, ["pre-commit"]);
    assert_eq!(std::fs::read_dir(ws.join("cfg")).expect("list").count(), 0);
    assert!(!ws.join("vsc").exists());

    // A link to an unprotected directory still works, for writes and edits.
    let via = fs.target_of("alias/x.txt", None).await.expect("resolve");
    fs.write_text(&via, "one", None, &fs.policy)
        .await
        .expect("write");
    let one = EditRequest {
        old: "one".into(),
        new: "two".into(),
        replace_all: false,
    };
    fs.edit_text(&via, &one, None, &fs.policy)
        .await
        .expect("edit");
    assert_eq!(
        std::fs::read_to_string(ws.join("real/x.txt")).expect("read"),
        "two"
    );
}

#[test]
fn a_directory_swapped_with_a_link_to_a_protected_one_is_never_written_through() {
    let s = setup();
    let ws = s.ws.clone();
    std::fs::create_dir_all(ws.join(".git/hooks")).expect("mkdir");
    std::fs::create_dir(ws.join("d")).expect("mkdir");
    std::os::unix::fs::symlink(".git/hooks", ws.join("dlink")).expect("link");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    let fs = fenced(&s, SandboxMode::WorkspaceWrite);
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, ws) = (stop.clone(), ws.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    ws.join("d"),
                    rustix::fs::CWD,
                    ws.join("dlink"),
                    rustix::fs::RenameFlags::EXCHANGE,
                );
                swaps += 1;
            }
            swaps
        })
    };
    let written = rt.block_on(async {
        let mut written = 0;
        for i in 0..2_000 {
            let Ok(t) = fs.target_of(&format!("d/pwn{i}"), None).await else {
                continue;
            };
            if fs.write_text(&t, "x", None, &fs.policy).await.is_ok() {
                written += 1;
            }
        }
        written
    });
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    let planted: Vec<_> = std::fs::read_dir(ws.join(".git/hooks"))
        .expect("list")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        planted.is_empty(),
        "{} written, planted {planted:?}",
        written
    );
    assert!(swaps > 100, "the race did not run ({swaps} swaps)");
}

// The fence never decides a policy: a workspace-write policy nobody decided (nothing
// protected yet) writes nothing.
#[tokio::test]
async fn an_undecided_workspace_write_policy_writes_nothing() {
    let s = setup();
    let fs = SandboxedFs::new(LocalFs::new(&s.ws)).with_temp_dir(&s.temp);
    let undecided = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &s.ws);
    let t = fs
        .target_of(".vscode/tasks.json", None)
        .await
        .expect("resolve");
    let e = fs
        .write_text(&t, "{}", None, &undecided)
        .await
        .expect_err("undecided");
    assert_eq!(e.code(), ErrorCode::Internal, "{}", e.message());
    assert!(!s.ws.join(".vscode").exists());
    let decided = dsh_protect::workspace_policy(SandboxMode::WorkspaceWrite, &s.ws);
    let t = fs.target_of("notes.txt", None).await.expect("resolve");
    fs.write_text(&t, "x", None, &decided)
        .await
        .expect("a decided policy writes");
}

// Read denial travels with the policy: the provider holds no list of its own, so one
// provider reads a file under one call's policy and refuses it under another's.
#[tokio::test]
async fn a_read_is_fenced_by_its_calls_policy() {
    let s = setup();
    let fs = SandboxedFs::new(LocalFs::new(&s.ws)).with_temp_dir(&s.temp);
    std::fs::write(s.ws.join("id.pem"), "key\n").expect("write");
    let t = fs.target_of("id.pem", None).await.expect("resolve");
    let open = SandboxPolicy::new(SandboxMode::ReadOnly, &s.ws);
    let denying = open.clone().with_deny_read([s.ws.join("*.pem")]);
    assert_eq!(fs.read_text(&t, 100, &open).await.expect("read").0, "key\n");
    let e = fs.read_text(&t, 100, &denying).await.expect_err("denied");
    assert_eq!(e.code(), ErrorCode::FsSandboxDenied, "{}", e.message());
    let root = fs.target_of(".", None).await.expect("root");
    let q = dsh_fs::GlobQuery {
        pattern: "*.pem".into(),
        limit: 10,
    };
    let cancel = dsh_core::CancelToken::new();
    let found = fs.glob(&root, &q, &open, &cancel).await.expect("glob");
    assert_eq!(found.paths, [s.ws.join("id.pem")]);
    let found = fs.glob(&root, &q, &denying, &cancel).await.expect("glob");
    assert!(found.paths.is_empty(), "{:?}", found.paths);
    // What the file tools never read, whatever the policy says.
    let own = fs
        .target_of("/proc/self/environ", None)
        .await
        .expect("resolve");
    let full = SandboxPolicy::danger_full_access(&s.ws);
    let e = fs
        .read_bytes(&own, 1 << 20, &full)
        .await
        .expect_err("/proc");
    assert_eq!(e.code(), ErrorCode::FsSandboxDenied, "{}", e.message());
}

// The local provider fences nothing, so a confined call's read is refused, never done
// unconfined.
#[tokio::test]
async fn the_local_provider_refuses_a_confined_read() {
    let s = setup();
    let fs = LocalFs::new(&s.ws);
    let t = fs
        .target_of(s.outside.join("secret").to_str().expect("utf-8"), None)
        .await
        .expect("resolve");
    let confined = SandboxPolicy::new(SandboxMode::ReadOnly, &s.ws);
    let e = fs
        .read_text(&t, 100, &confined)
        .await
        .expect_err("confined");
    assert_eq!(e.code(), ErrorCode::SandboxUnavailable, "{}", e.message());
    let full = full_access(&s.ws);
    assert_eq!(
        fs.read_text(&t, 100, &full).await.expect("read").0,
        "outside\n"
    );
}

// The provider's own floor: a policy that carries no lists (a bare or danger-full-access
// one) still gets the default denials and closed homes from the fenced provider, so no
// caller's policy opens the credential stores to the file tools.
#[tokio::test]
async fn a_policy_without_lists_still_meets_the_default_denials() {
    let s = setup();
    let fs = SandboxedFs::new(LocalFs::new(&s.ws)).with_temp_dir(&s.temp);
    let shadow = fs.target_of("/etc/shadow", None).await.expect("resolve");
    for policy in [
        SandboxPolicy::bare(SandboxMode::ReadOnly, &s.ws),
        full_access(&s.ws),
    ] {
        assert!(policy.deny_read.is_empty() && policy.closed_dirs.is_empty());
        let e = fs
            .read_bytes(&shadow, 1 << 20, &policy)
            .await
            .expect_err("a default denial");
        assert_eq!(e.code(), ErrorCode::FsSandboxDenied, "{}", e.message());
    }
}
