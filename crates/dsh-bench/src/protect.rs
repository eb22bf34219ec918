//! Protection: a workspace-write call in a repository of 100 000 files against one in an
//! empty one, through a long-lived World and through `dsh exec`.

use crate::measure::{argv, bench_world, compare, median, ms, ratio_figure, timed_call};
use crate::Figure;
use dsh_sandbox::SandboxMode;
use std::path::Path;

/// Files in the large repository of the protection figures: the 100 000.
pub(crate) const BIG_REPO_FILES: usize = 100_000;

/// A git repository at `root` holding `files` small files in directories of 50 (about
/// 2 000 directories for 100 000 files, as a source tree has), each in its index (about
/// 9 MiB for 100 000 files: the check after a command reads the index for submodules).
pub(crate) fn write_repo(root: &Path, files: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(root.join(".git/objects"))?;
    std::fs::create_dir_all(root.join(".git/refs"))?;
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n")?;
    let mut names = Vec::with_capacity(files);
    for i in 0..files {
        let rel = format!("src/m{}/s{}", i / 2_000, (i / 50) % 40);
        let dir = root.join(&rel);
        if i % 50 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(dir.join(format!("f{i}.txt")), "x\n")?;
        names.push(format!("{rel}/f{i}.txt"));
    }
    names.sort();
    std::fs::write(root.join(".git/index"), index_v2(&names))
}

/// A version 2 git index naming `names` (sorted) as regular files, with zeroed stat data
/// and object ids.
pub(crate) fn index_v2(names: &[String]) -> Vec<u8> {
    let mut out = b"DIRC".to_vec();
    out.extend(2u32.to_be_bytes());
    out.extend(u32::try_from(names.len()).unwrap_or(u32::MAX).to_be_bytes());
    for name in names {
        let start = out.len();
        out.extend([0u8; 24]);
        out.extend(0o100644u32.to_be_bytes());
        out.extend([0u8; 12 + 20]);
        out.extend(
            u16::try_from(name.len().min(0xfff))
                .unwrap_or(0xfff)
                .to_be_bytes(),
        );
        out.extend(name.as_bytes());
        // One to eight NULs, to a multiple of eight bytes.
        let size = (out.len() - start + 8) & !7;
        out.resize(start + size, 0);
    }
    out.extend([0u8; 20]);
    out
}

/// What the walk for nested repositories costs a workspace-write command: a `bash` call
/// of `true` through a long-lived World (the walk is made once, then kept current by
/// inotify) in a repository of 100 000 files against the same in an empty repository,
/// interleaved; and `dsh exec --mode workspace-write -- true`, which walks afresh every
/// time, in the same two.
pub(crate) async fn protection_walk(dsh: &Path, runs: usize) -> Vec<Figure> {
    let (
        Some((_big_dir, big_ws, big, big_session, _)),
        Some((_small_dir, small_ws, small, small_session, _)),
    ) = (
        bench_world(SandboxMode::WorkspaceWrite).await,
        bench_world(SandboxMode::WorkspaceWrite).await,
    )
    else {
        return Vec::new();
    };
    if let Err(e) = write_repo(&big_ws, BIG_REPO_FILES).and_then(|()| write_repo(&small_ws, 0)) {
        eprintln!(
            "dsh-bench: cannot write the repositories ({e}); the protection figures are skipped"
        );
        return Vec::new();
    }
    // The first call of each World walks its workspace.
    let first = timed_call(&big, &big_session, "w0".into(), "true").await;
    timed_call(&small, &small_session, "w0".into(), "true").await;
    eprintln!(
        "dsh-bench: first workspace-write call in the {BIG_REPO_FILES}-file repository (the walk): {}",
        ms(first)
    );
    for i in 0..10 {
        timed_call(&big, &big_session, format!("x{i}"), "true").await;
        timed_call(&small, &small_session, format!("x{i}"), "true").await;
    }
    let (mut ours, mut base) = (Vec::new(), Vec::new());
    for i in 0..runs {
        ours.push(timed_call(&big, &big_session, format!("b{i}"), "true").await);
        base.push(timed_call(&small, &small_session, format!("b{i}"), "true").await);
    }
    let mut out = vec![ratio_figure(
        "protect: ww bash, 100k repo (World)",
        median(ours),
        median(base),
        "<= 1.1x empty repo",
        Some(1.1),
    )];
    let exec = |ws: &Path| {
        let mut v = vec![dsh.as_os_str().to_owned(), "exec".into(), "-C".into()];
        v.push(ws.as_os_str().to_owned());
        v.extend(argv(&["--mode", "workspace-write", "--", "true"]));
        v
    };
    let (o, b) = compare(runs.min(100), &exec(&big_ws), &exec(&small_ws));
    out.push(ratio_figure(
        "protect: ww dsh exec, 100k repo",
        o,
        b,
        "(walks every time)",
        None,
    ));
    out
}
