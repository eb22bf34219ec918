//! Files at scale: `grep` over a 1 GiB tree against `rg`, and `edit` of a 100 MiB file
//! against `cp`.

use crate::measure::{bench_world, median, ratio_figure, time_once, timed_tool};
use crate::Figure;
use dsh_sandbox::SandboxMode;
use std::path::Path;
use std::process::Command;
use std::process::Stdio;

/// Writes `files` files of `size` bytes of text lines under `root` (16 directories); every
/// 97th file has one `NEEDLE<n>` line in its middle.
pub(crate) fn write_tree(root: &Path, files: usize, size: usize) -> std::io::Result<()> {
    use std::io::Write;
    let line = b"the quick brown fox jumps over the lazy dog, again and again and again\n";
    let mut block = Vec::with_capacity(size);
    while block.len() + line.len() <= size {
        block.extend_from_slice(line);
    }
    for i in 0..files {
        let dir = root.join(format!("d{:02}", i % 16));
        std::fs::create_dir_all(&dir)?;
        let mut f =
            std::io::BufWriter::new(std::fs::File::create(dir.join(format!("f{i:04}.txt")))?);
        let half = block.len() / 2 / line.len() * line.len();
        f.write_all(&block[..half])?;
        if i % 97 == 0 {
            writeln!(f, "NEEDLE{i}")?;
        }
        f.write_all(&block[half..])?;
        f.flush()?;
    }
    Ok(())
}

/// `grep` over 1 GiB against `rg`, and `edit` of 100 MiB against `cp`.
pub(crate) async fn files_at_scale() -> Vec<Figure> {
    let Some((_dir, ws, world, session, _shell)) = bench_world(SandboxMode::WorkspaceWrite).await
    else {
        return Vec::new();
    };
    let mut figures = Vec::new();
    const RUNS: usize = 5;
    let tree = ws.join("tree");
    if let Err(e) = write_tree(&tree, 1024, 1 << 20) {
        eprintln!("dsh-bench: cannot write the 1 GiB tree ({e}); the grep figure is skipped");
    } else if Command::new("rg")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_err()
    {
        eprintln!(
            "dsh-bench: no `rg` binary (apt-get install ripgrep); the grep figure is skipped"
        );
    } else {
        let grep_args = serde_json::json!({"pattern": "NEEDLE[0-9]+", "path": "tree"});
        let rg = || {
            let mut c = Command::new("rg");
            c.args(["NEEDLE[0-9]+", "tree"])
                .current_dir(&ws)
                .stdout(Stdio::null());
            time_once(&mut c)
        };
        let (mut ours, mut base) = (Vec::new(), Vec::new());
        for i in 0..=RUNS {
            let o = timed_tool(&world, &session, format!("g{i}"), "grep", grep_args.clone()).await;
            let b = rg();
            // The first round warms the page cache for both.
            if i > 0 {
                ours.push(o);
                base.push(b);
            }
        }
        let (o, b) = (median(ours), median(base));
        figures.push(ratio_figure(
            "grep: 1 GiB tree",
            o,
            b,
            "<= 1.5x rg",
            Some(1.5),
        ));
    }
    let _ = std::fs::remove_dir_all(&tree);
    let big = ws.join("big.txt");
    let written = {
        let mut content = vec![b'x'; 100 << 20];
        for i in (99..content.len()).step_by(100) {
            content[i] = b'\n';
        }
        let mid = content.len() / 2;
        content[mid..mid + 8].copy_from_slice(b"MARK_A_\n");
        std::fs::write(&big, &content)
    };
    if let Err(e) = written {
        eprintln!("dsh-bench: cannot write the 100 MiB file ({e}); the edit figure is skipped");
        return figures;
    }
    let cp = || {
        let mut c = Command::new("cp");
        c.args(["big.txt", "big.copy"]).current_dir(&ws);
        time_once(&mut c)
    };
    // For context: a copy that, like the edit, makes its file durable before it returns.
    let dd = || {
        let mut c = Command::new("dd");
        c.args([
            "if=big.txt",
            "of=big.copy",
            "bs=1M",
            "conv=fsync",
            "status=none",
        ])
        .current_dir(&ws);
        time_once(&mut c)
    };
    let (mut ours, mut base, mut durable) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..=RUNS {
        // The edit tool edits only what this session has read.
        let read = serde_json::json!({"file_path": "big.txt", "limit": 1});
        timed_tool(&world, &session, format!("r{i}"), "read", read).await;
        let (from, to) = if i % 2 == 0 {
            ("MARK_A_", "MARK_B_")
        } else {
            ("MARK_B_", "MARK_A_")
        };
        let edit =
            serde_json::json!({"file_path": "big.txt", "old_string": from, "new_string": to});
        let o = timed_tool(&world, &session, format!("e{i}"), "edit", edit).await;
        let b = cp();
        let d = dd();
        if i > 0 {
            ours.push(o);
            base.push(b);
            durable.push(d);
        }
    }
    let (o, b, d) = (median(ours), median(base), median(durable));
    figures.push(ratio_figure(
        "edit: 100 MiB file",
        o,
        b,
        "<= 2x cp",
        Some(2.0),
    ));
    figures.push(ratio_figure(
        "edit: same, vs copy + fsync",
        o,
        d,
        "(context)",
        None,
    ));
    figures
}
