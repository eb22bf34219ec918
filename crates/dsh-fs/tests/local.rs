//! The local provider on real files: resolution, bounded reads, atomic guarded writes and
//! edits, bad input.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_core::{CancelToken, ErrorCode};
use dsh_fs::{EditRequest, FileSystem, FsKind, LocalFs, TotalLines, WriteIntent, COUNT_AHEAD};

fn setup() -> (tempfile::TempDir, PathBuf, LocalFs) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    let fs = LocalFs::new(&root);
    (dir, root, fs)
}

/// The policy every read, write and edit of the local provider passes: it confines
/// nothing.
fn full() -> dsh_sandbox::SandboxPolicy {
    dsh_sandbox::SandboxPolicy::danger_full_access(Path::new("/"))
}

fn code<T: std::fmt::Debug>(r: Result<T, dsh_core::HarnessError>) -> ErrorCode {
    r.expect_err("must fail").code()
}

fn edit(old: &str, new: &str, all: bool) -> EditRequest {
    EditRequest {
        old: old.into(),
        new: new.into(),
        replace_all: all,
    }
}

#[tokio::test]
async fn resolution_gives_aliases_one_key_and_refuses_bad_paths() {
    let (_d, root, fs) = setup();
    std::fs::write(root.join("real.txt"), "x").expect("write");
    std::os::unix::fs::symlink(root.join("real.txt"), root.join("alias.txt")).expect("link");
    let a = fs.target_of("real.txt", None).await.expect("real");
    let b = fs.target_of("alias.txt", None).await.expect("alias");
    assert_eq!(a.key(), b.key());
    assert_eq!(b.display(), root.join("alias.txt"));
    assert_eq!(
        fs.stat(&a).await.expect("stat"),
        fs.stat(&b).await.expect("stat")
    );
    assert_eq!(
        fs.lstat("alias.txt", None)
            .await
            .expect("lstat")
            .expect("some")
            .kind,
        FsKind::Symlink
    );

    let missing = fs
        .target_of("new/dir/../file.txt", None)
        .await
        .expect("missing");
    assert_eq!(missing.key(), root.join("new/file.txt"));
    assert_eq!(fs.stat(&missing).await.expect("stat"), None);

    for bad in ["", "   ", "a\0b"] {
        assert_eq!(
            code(fs.target_of(bad, None).await),
            ErrorCode::FsNotFound,
            "{bad:?}"
        );
    }
    assert_eq!(
        code(fs.target_of(&"a/".repeat(3000), None).await),
        ErrorCode::FsNotFound
    );
    assert_eq!(
        code(fs.target_of("real.txt/inside", None).await),
        ErrorCode::FsNotFound
    );
}

#[tokio::test]
async fn reads_are_bounded_and_refuse_what_is_not_text() {
    let (_d, root, fs) = setup();
    let t = |n: &str| {
        let fs = &fs;
        let n = n.to_owned();
        async move { fs.target_of(&n, None).await.expect("resolve") }
    };
    std::fs::write(root.join("h"), "hello").expect("write");
    assert_eq!(
        fs.read_bytes(&t("h").await, 5, &full())
            .await
            .expect("exact")
            .0,
        b"hello"
    );
    assert_eq!(
        code(fs.read_bytes(&t("h").await, 4, &full()).await),
        ErrorCode::FsTooLarge
    );
    std::fs::write(root.join("nul"), b"h\0i").expect("write");
    assert_eq!(
        code(fs.read_text(&t("nul").await, 100, &full()).await),
        ErrorCode::FsNotText
    );
    assert_eq!(
        fs.read_bytes(&t("nul").await, 100, &full())
            .await
            .expect("raw")
            .0,
        b"h\0i"
    );
    std::fs::write(root.join("bad"), b"h\xffi").expect("write");
    assert_eq!(
        code(fs.read_text(&t("bad").await, 100, &full()).await),
        ErrorCode::FsNotText
    );
    std::fs::create_dir(root.join("dir")).expect("dir");
    assert_eq!(
        code(fs.read_text(&t("dir").await, 100, &full()).await),
        ErrorCode::FsNotRegularFile
    );
    assert_eq!(
        code(fs.read_text(&t("nope").await, 100, &full()).await),
        ErrorCode::FsNotFound
    );
    // A FIFO must not block the read.
    let fifo = root.join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .expect("mkfifo");
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        fs.read_text(&t("fifo").await, 100, &full()),
    )
    .await;
    assert_eq!(code(r.expect("did not block")), ErrorCode::FsNotRegularFile);
    let mem = fs.target_of("/proc/self/mem", None).await.expect("resolve");
    let c = code(fs.read_text(&mem, 4096, &full()).await);
    assert!(c.as_str().starts_with("FS_"), "{c:?}");
}

#[tokio::test]
async fn a_same_size_rewrite_changes_the_version() {
    let (_d, root, fs) = setup();
    let p = root.join("v");
    std::fs::write(&p, "aaaa").expect("write");
    let t = fs.target_of("v", None).await.expect("resolve");
    let v1 = fs.stat(&t).await.expect("stat").expect("some").version;
    let mtime = std::fs::metadata(&p)
        .expect("meta")
        .modified()
        .expect("mtime");
    std::fs::write(&p, "bbbb").expect("rewrite");
    std::fs::File::options()
        .write(true)
        .open(&p)
        .expect("open")
        .set_modified(mtime)
        .expect("restore mtime");
    let v2 = fs.stat(&t).await.expect("stat").expect("some").version;
    assert_ne!(v1, v2);
}

#[tokio::test]
async fn listings_are_sorted_and_broken_links_have_no_version() {
    let (_d, root, fs) = setup();
    std::fs::write(root.join("zeta.md"), "z").expect("w");
    std::fs::write(root.join("alpha.md"), "a").expect("w");
    std::fs::create_dir(root.join("dir-skill")).expect("d");
    std::os::unix::fs::symlink(root.join("gone"), root.join("broken-link")).expect("l");
    let t = fs.target_of(".", None).await.expect("root");
    let entries = fs.list_dir(&t).await.expect("list");
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["alpha.md", "broken-link", "dir-skill", "zeta.md"]);
    assert_eq!(
        (entries[1].kind, entries[1].version.is_none()),
        (FsKind::Other, true)
    );
    assert_eq!(
        (entries[2].kind, entries[2].size),
        (FsKind::Directory, None)
    );
    assert_eq!(entries[0].size, Some(1));
    let file = fs.target_of("zeta.md", None).await.expect("file");
    assert_eq!(code(fs.list_dir(&file).await), ErrorCode::FsNotDirectory);
}

/// This process's umask, read without changing it.
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .expect("Umask line (Linux 4.7+)");
    u32::from_str_radix(line.trim(), 8).expect("octal")
}

fn no_staging(dir: &Path) {
    let residue: Vec<_> = std::fs::read_dir(dir)
        .expect("read_dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmpdir"))
        .collect();
    assert!(residue.is_empty(), "staging residue: {residue:?}");
}

#[tokio::test]
async fn writes_are_atomic_guarded_and_keep_modes() {
    let (_d, root, fs) = setup();
    let t = fs.target_of("sub/new.txt", None).await.expect("resolve");
    let out = fs
        .write_text(&t, "one\r\n", Some(WriteIntent::CreateIfAbsent), &full())
        .await
        .expect("create");
    assert!(out.created && out.before.is_none());
    assert_eq!(out.after, "one\n");
    assert_eq!(
        std::fs::read(root.join("sub/new.txt")).expect("read"),
        b"one\r\n",
        "bytes verbatim"
    );
    let mode = std::fs::metadata(root.join("sub/new.txt"))
        .expect("meta")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o666 & !umask(), "a new file gets the usual mode");
    assert_eq!(
        t.key(),
        root.join("sub/new.txt"),
        "the key of a missing file does not change once it exists"
    );

    assert_eq!(
        code(
            fs.write_text(&t, "x", Some(WriteIntent::CreateIfAbsent), &full())
                .await
        ),
        ErrorCode::FsNotObserved
    );
    let stale = fs
        .write_text(
            &t,
            "x",
            Some(WriteIntent::ReplaceIfVersion(
                dsh_fs::FsVersion::from_token("0:0:0:0:0"),
            )),
            &full(),
        )
        .await;
    assert_eq!(code(stale), ErrorCode::FsStaleVersion);
    std::fs::set_permissions(
        root.join("sub/new.txt"),
        std::fs::Permissions::from_mode(0o640),
    )
    .expect("chmod");
    let v = fs.stat(&t).await.expect("stat").expect("some").version;
    let out = fs
        .write_text(&t, "two", Some(WriteIntent::ReplaceIfVersion(v)), &full())
        .await
        .expect("replace");
    assert_eq!((out.created, out.before.as_deref()), (false, Some("one\n")));
    assert_eq!(
        out.version,
        fs.stat(&t).await.expect("stat").expect("some").version
    );
    let mode = std::fs::metadata(root.join("sub/new.txt"))
        .expect("meta")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o640, "a replacement keeps the mode");

    std::fs::remove_file(root.join("sub/new.txt")).expect("rm");
    let gone = fs
        .write_text(
            &t,
            "x",
            Some(WriteIntent::ReplaceIfVersion(out.version)),
            &full(),
        )
        .await;
    assert_eq!(code(gone), ErrorCode::FsStaleVersion);
    assert!(!root.join("sub/new.txt").exists(), "never recreated");
    let d = fs.target_of("sub", None).await.expect("dir");
    assert_eq!(
        code(fs.write_text(&d, "x", None, &full()).await),
        ErrorCode::FsNotRegularFile
    );
    no_staging(&root.join("sub"));
    assert_eq!(fs.lock_entries(), 0);
}

#[tokio::test]
async fn edits_check_the_version_first_match_literally_and_keep_crlf_and_bom() {
    let (_d, root, fs) = setup();
    std::fs::write(root.join("e"), "a\r\nold\r\nb\r\n").expect("write");
    let t = fs.target_of("e", None).await.expect("resolve");
    let v = fs.stat(&t).await.expect("stat").expect("some").version;
    let wrong = dsh_fs::FsVersion::from_token("nope");
    assert_eq!(
        code(
            fs.edit_text(&t, &edit("absent text", "x", false), Some(&wrong), &full())
                .await
        ),
        ErrorCode::FsStaleVersion
    );
    let out = fs
        .edit_text(&t, &edit("old", "NEW $1", false), Some(&v), &full())
        .await
        .expect("edit");
    assert_eq!(
        (out.first_line, out.before.as_str(), out.after.as_str()),
        (2, "old\n", "NEW $1\n"),
        "the lines the edit touched"
    );
    assert_eq!(
        std::fs::read(root.join("e")).expect("read"),
        b"a\r\nNEW $1\r\nb\r\n"
    );
    assert_eq!(
        code(fs.edit_text(&t, &edit("", "x", false), None, &full()).await),
        ErrorCode::FsEditNotFound
    );
    assert_eq!(
        code(
            fs.edit_text(&t, &edit("zzz", "x", false), None, &full())
                .await
        ),
        ErrorCode::FsEditNotFound
    );
    std::fs::write(root.join("many"), "x x x").expect("write");
    let m = fs.target_of("many", None).await.expect("resolve");
    assert_eq!(
        code(
            fs.edit_text(&m, &edit("x", "y", false), None, &full())
                .await
        ),
        ErrorCode::FsAmbiguousEdit
    );
    assert_eq!(
        fs.edit_text(&m, &edit("x", "y", true), None, &full())
            .await
            .expect("all")
            .replaced,
        3
    );
    std::fs::write(root.join("bom"), "\u{feff}hello").expect("write");
    let b = fs.target_of("bom", None).await.expect("resolve");
    fs.edit_text(&b, &edit("hello", "bye", false), None, &full())
        .await
        .expect("edit");
    assert_eq!(
        std::fs::read_to_string(root.join("bom")).expect("read"),
        "\u{feff}bye"
    );
    std::fs::write(root.join("bin"), b"text\0more").expect("write");
    let bin = fs.target_of("bin", None).await.expect("resolve");
    assert_eq!(
        code(
            fs.edit_text(&bin, &edit("text", "x", false), None, &full())
                .await
        ),
        ErrorCode::FsNotText
    );
    let missing = fs.target_of("missing", None).await.expect("resolve");
    assert_eq!(
        code(
            fs.edit_text(&missing, &edit("a", "b", false), None, &full())
                .await
        ),
        ErrorCode::FsStaleVersion
    );
    // Through a symlink: the referent changes, the link stays.
    std::os::unix::fs::symlink(root.join("many"), root.join("link")).expect("link");
    let l = fs.target_of("link", None).await.expect("resolve");
    fs.edit_text(&l, &edit("y y y", "z", false), None, &full())
        .await
        .expect("edit via link");
    assert_eq!(
        std::fs::read_to_string(root.join("many")).expect("read"),
        "z"
    );
    assert!(std::fs::symlink_metadata(root.join("link"))
        .expect("meta")
        .file_type()
        .is_symlink());
    no_staging(&root);
}

#[tokio::test]
async fn an_edit_keeps_the_line_breaks_of_the_bytes_it_does_not_replace() {
    let (_d, root, fs) = setup();
    let edited = |name: &'static str, content: &'static str, req: EditRequest| {
        let (root, fs) = (&root, &fs);
        async move {
            std::fs::write(root.join(name), content).expect("write");
            let t = fs.target_of(name, None).await.expect("resolve");
            let out = fs.edit_text(&t, &req, None, &full()).await.expect("edit");
            let bytes = std::fs::read_to_string(root.join(name)).expect("read");
            (bytes, out.before, out.after)
        }
    };
    // LF by majority: the `\r\n`s of lines the edit does not touch stay.
    let (bytes, ..) = edited(
        "lf",
        "one\nx=\"a\r\n\";\r\nfour\n",
        edit("one", "ONE", false),
    )
    .await;
    assert_eq!(bytes, "ONE\nx=\"a\r\n\";\r\nfour\n");
    // CRLF by majority: an untouched LF line stays LF; the new text's breaks are CRLF.
    let (bytes, ..) = edited("crlf", "a\r\nb\r\nlf\nc\r\n", edit("a", "A\nA2", false)).await;
    assert_eq!(bytes, "A\r\nA2\r\nb\r\nlf\nc\r\n");
    // An occurrence matched across a `\r\n` replaces it, and nothing after it.
    let (bytes, before, after) = edited(
        "across",
        "a\r\nb\r\nlf\nc\r\nb\r\nlf\n",
        edit("b\nlf", "B\nLF", true),
    )
    .await;
    assert_eq!(bytes, "a\r\nB\r\nLF\nc\r\nB\r\nLF\n");
    assert_eq!(
        (before.as_str(), after.as_str()),
        ("b\nlf\nc\nb\nlf\n", "B\nLF\nc\nB\nLF\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edits_from_one_version_one_wins_one_is_stale() {
    let (_d, root, fs) = setup();
    let fs = Arc::new(fs);
    for round in 0..20 {
        std::fs::write(root.join("race"), "base").expect("write");
        let t = fs.target_of("race", None).await.expect("resolve");
        let v = fs.stat(&t).await.expect("stat").expect("some").version;
        let (ea, eb) = (edit("base", "A", false), edit("base", "B", false));
        let policy = full();
        let (a, b) = tokio::join!(
            fs.edit_text(&t, &ea, Some(&v), &policy),
            fs.edit_text(&t, &eb, Some(&v), &policy),
        );
        let wins = usize::from(a.is_ok()) + usize::from(b.is_ok());
        assert_eq!(wins, 1, "round {round}");
        let loser = a.err().or(b.err()).expect("one lost");
        assert_eq!(loser.code(), ErrorCode::FsStaleVersion);
        let now = std::fs::read_to_string(root.join("race")).expect("read");
        assert!(now == "A" || now == "B", "{now}");
    }
}

fn limits(offset: u64, limit: u64) -> dsh_fs::LineLimits {
    dsh_fs::LineLimits {
        offset,
        limit,
        max_line_chars: 10,
        max_bytes: 60,
    }
}

#[tokio::test]
async fn line_windows_cut_long_lines_stop_at_the_byte_cap_and_count_every_line() {
    let (_d, root, fs) = setup();
    let go = CancelToken::new();
    std::fs::write(
        root.join("w"),
        "one\r\ntwo\nthree-is-much-longer-than-ten\nfour\n",
    )
    .expect("write");
    let t = fs.target_of("w", None).await.expect("resolve");
    let w = fs
        .read_lines(&t, limits(1, 10), &full(), &go)
        .await
        .expect("window");
    assert_eq!(
        w.total_lines,
        TotalLines::Exact(4),
        "a final line break opens no line"
    );
    assert_eq!(
        w.lines[0],
        (1, "one".to_owned()),
        "the \\r before the break goes"
    );
    assert_eq!(
        w.lines[2],
        (3, "three-is-m... (line truncated to 10 chars)".to_owned())
    );
    let w = fs
        .read_lines(&t, limits(2, 1), &full(), &go)
        .await
        .expect("window");
    assert_eq!(w.lines, [(2, "two".to_owned())]);
    std::fs::write(root.join("many"), "0123456789\n".repeat(20)).expect("write");
    let m = fs.target_of("many", None).await.expect("resolve");
    let w = fs
        .read_lines(&m, limits(1, 20), &full(), &go)
        .await
        .expect("window");
    assert!(w.truncated_by_bytes);
    assert_eq!((w.lines.len(), w.total_lines), (5, TotalLines::Exact(20)));
    assert_eq!(
        code(fs.read_lines(&m, limits(21, 1), &full(), &go).await),
        ErrorCode::FsNotFound
    );
    std::fs::write(root.join("empty"), "").expect("write");
    let e = fs.target_of("empty", None).await.expect("resolve");
    assert_eq!(
        fs.read_lines(&e, limits(1, 5), &full(), &go)
            .await
            .expect("empty")
            .total_lines,
        TotalLines::Exact(0)
    );
    std::fs::write(
        root.join("late-bad"),
        [b"ok\n".repeat(5000).as_slice(), b"\xff\n"].concat(),
    )
    .expect("write");
    let b = fs.target_of("late-bad", None).await.expect("resolve");
    assert_eq!(
        code(fs.read_lines(&b, limits(1, 1), &full(), &go).await),
        ErrorCode::FsNotText
    );
    // A multi-byte character split across read chunks is decoded whole.
    let text = format!("{}é\n", "a".repeat(64 * 1024 - 1));
    std::fs::write(root.join("split"), &text).expect("write");
    let s = fs.target_of("split", None).await.expect("resolve");
    let w = fs
        .read_lines(
            &s,
            dsh_fs::LineLimits {
                offset: 1,
                limit: 1,
                max_line_chars: 100_000,
                max_bytes: 1 << 20,
            },
            &full(),
            &go,
        )
        .await
        .expect("split");
    assert!(w.lines[0].1.ends_with('é'));
}

/// `lines` short lines, then a hole to `len` bytes (NULs past the binary sample are
/// text, with no line break): no disk space is used.
fn sparse(path: &Path, lines: usize, len: u64) {
    std::fs::write(path, "a line of text\n".repeat(lines)).expect("write");
    std::fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .expect("set_len");
}

#[tokio::test]
async fn a_window_reads_its_lines_and_a_bounded_rest_never_the_whole_file() {
    let (_d, root, fs) = setup();
    let go = CancelToken::new();
    let wide = |offset, limit| dsh_fs::LineLimits {
        offset,
        limit,
        max_line_chars: 2000,
        max_bytes: 51_200,
    };
    // 10 KB of text, then an 8 GiB line: reading it all would take many seconds.
    sparse(&root.join("huge"), 640, 8 << 30);
    let t = fs.target_of("huge", None).await.expect("resolve");
    let w = fs
        .read_lines(&t, wide(1, 1), &full(), &go)
        .await
        .expect("window");
    assert_eq!(w.lines, [(1, "a line of text".to_owned())]);
    assert_eq!(
        w.total_lines,
        TotalLines::AtLeast(641),
        "counted to COUNT_AHEAD past the window: the text and the start of the long line"
    );
    // A cut line is not read to its end: not at all when it is the window's last, else
    // for COUNT_AHEAD bytes, and the window ends in it.
    let cut = format!("{}... (line truncated to 2000 chars)", "\0".repeat(2000));
    for limit in [1, 5] {
        let w = fs
            .read_lines(&t, wide(641, limit), &full(), &go)
            .await
            .expect("window");
        assert_eq!(w.lines, [(641, cut.clone())], "limit {limit}");
        assert_eq!(w.total_lines, TotalLines::AtLeast(641), "limit {limit}");
        assert!(!w.truncated_by_bytes);
    }
    // The count is exact when the rest fits in COUNT_AHEAD, a lower bound when not.
    let lines = usize::try_from(COUNT_AHEAD / 15).expect("fits");
    std::fs::write(root.join("fits"), "a line of text\n".repeat(lines)).expect("write");
    let f = fs.target_of("fits", None).await.expect("resolve");
    let w = fs
        .read_lines(&f, wide(1, 1), &full(), &go)
        .await
        .expect("window");
    assert_eq!(w.total_lines, TotalLines::Exact(lines as u64));
    std::fs::write(root.join("long"), "a line of text\n".repeat(lines * 2)).expect("write");
    let l = fs.target_of("long", None).await.expect("resolve");
    let w = fs
        .read_lines(&l, wide(1, 1), &full(), &go)
        .await
        .expect("window");
    assert!(
        matches!(w.total_lines, TotalLines::AtLeast(n) if n >= lines as u64 && n < 2 * lines as u64),
        "{:?}",
        w.total_lines
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_window_stops_reading() {
    let (_d, root, fs) = setup();
    sparse(&root.join("huge"), 640, 8 << 30);
    let t = fs.target_of("huge", None).await.expect("resolve");
    let cancelled = CancelToken::new();
    cancelled.cancel("test");
    assert_eq!(
        code(fs.read_lines(&t, limits(1, 1), &full(), &cancelled).await),
        ErrorCode::FsAborted
    );
    // Line 642 lies past 8 GiB of line 641, which must be read through: a cancel stops
    // that.
    let cancel = CancelToken::new();
    let later = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        later.cancel("test");
    });
    assert_eq!(
        code(fs.read_lines(&t, limits(642, 1), &full(), &cancel).await),
        ErrorCode::FsAborted
    );
}

#[tokio::test]
async fn an_lf_edit_is_written_in_pieces_keeping_the_bom_and_reports_the_lines_it_touched() {
    let (_d, root, fs) = setup();
    std::fs::write(root.join("p"), "\u{feff}a\nold x old\nb\nold\nz").expect("write");
    let t = fs.target_of("p", None).await.expect("resolve");
    let out = fs
        .edit_text(&t, &edit("old", "NEW", true), None, &full())
        .await
        .expect("edit");
    assert_eq!(
        std::fs::read_to_string(root.join("p")).expect("read"),
        "\u{feff}a\nNEW x NEW\nb\nNEW\nz"
    );
    assert_eq!(
        (
            out.replaced,
            out.first_line,
            out.before.as_str(),
            out.after.as_str()
        ),
        (3, 2, "old x old\nb\nold\n", "NEW x NEW\nb\nNEW\n")
    );
    // On the first line, the lines touched start after the BOM.
    std::fs::write(root.join("q"), "\u{feff}x old\ny\n").expect("write");
    let q = fs.target_of("q", None).await.expect("resolve");
    let out = fs
        .edit_text(&q, &edit("old", "new", false), None, &full())
        .await
        .expect("edit");
    assert_eq!(
        (out.first_line, out.before.as_str(), out.after.as_str()),
        (1, "x old\n", "x new\n")
    );
    // A last line without a newline is a line too.
    let out = fs
        .edit_text(&t, &edit("z", "end", false), None, &full())
        .await
        .expect("edit");
    assert_eq!(
        (out.first_line, out.before.as_str(), out.after.as_str()),
        (5, "z", "end")
    );
}

#[tokio::test]
async fn edits_of_large_lf_files_write_exactly_what_str_replace_gives() {
    let (_d, root, fs) = setup();
    // 3 MiB of lines with multi-byte characters; markers near the 1 MiB read boundaries.
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 3 << 20 {
        text.push_str(&format!("line {i} — été {}\n", "x".repeat(i % 90)));
        i += 1;
    }
    for at in [(1 << 20) - 4, (2 << 20) + 1, 100] {
        let at = (0..=at)
            .rev()
            .find(|&k| text.is_char_boundary(k))
            .expect("boundary");
        text.insert_str(at, "MARK");
    }
    for (old, new, all) in [
        ("MARK", "M\nA\nR\nK", true),
        ("M\nA\nR\nK", "", true),
        ("line 7 —", "LINE SEVEN", false),
    ] {
        std::fs::write(root.join("big"), &text).expect("write");
        let t = fs.target_of("big", None).await.expect("resolve");
        let out = fs.edit_text(&t, &edit(old, new, all), None, &full()).await;
        let want = if all {
            text.replace(old, new)
        } else {
            text.replacen(old, new, 1)
        };
        if text.contains(old) {
            let out = out.expect("edit");
            assert_eq!(
                std::fs::read_to_string(root.join("big")).expect("read"),
                want,
                "{old:?}"
            );
            assert_eq!(
                out.replaced,
                if all { text.matches(old).count() } else { 1 }
            );
            let first = text.find(old).expect("found");
            assert_eq!(
                out.first_line,
                text[..first].matches('\n').count() + 1,
                "{old:?}"
            );
            assert!(out.before.contains(old) && !out.before.is_empty());
        } else {
            assert_eq!(code(out), ErrorCode::FsEditNotFound);
        }
        text = std::fs::read_to_string(root.join("big")).expect("read");
    }
}

#[test]
fn a_new_file_gets_0666_less_the_umask() {
    if let Some(path) = std::env::var_os("DSH_TEST_FS_CREATE") {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("rt");
        rt.block_on(async {
            let fs = LocalFs::new("/");
            let t = fs
                .target_of(path.to_str().expect("utf-8"), None)
                .await
                .expect("resolve");
            fs.write_text(&t, "x", Some(WriteIntent::CreateIfAbsent), &full())
                .await
                .expect("create");
        });
        return;
    }
    let (_d, root, _fs) = setup();
    for (umask, want) in [("027", 0o640), ("002", 0o664), ("077", 0o600)] {
        let path = root.join(format!("new-{umask}"));
        let status = std::process::Command::new("/bin/sh")
            .args(["-c", &format!("umask {umask} && exec \"$0\" \"$@\"")])
            .arg(std::env::current_exe().expect("exe"))
            .args(["--exact", "a_new_file_gets_0666_less_the_umask"])
            .env("DSH_TEST_FS_CREATE", &path)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("spawn");
        assert!(status.success());
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, want, "umask {umask}");
    }
}

#[tokio::test]
async fn names_up_to_name_max_can_be_written_and_edited() {
    let (_d, root, fs) = setup();
    for name in ["n".repeat(255), format!("a{}", "é".repeat(127))] {
        let t = fs.target_of(&name, None).await.expect("resolve");
        fs.write_text(&t, "one", Some(WriteIntent::CreateIfAbsent), &full())
            .await
            .expect("create");
        let v = fs.stat(&t).await.expect("stat").expect("some").version;
        fs.write_text(&t, "two", Some(WriteIntent::ReplaceIfVersion(v)), &full())
            .await
            .expect("replace");
        fs.edit_text(&t, &edit("two", "three", false), None, &full())
            .await
            .expect("edit");
        assert_eq!(
            std::fs::read_to_string(root.join(&name)).expect("read"),
            "three"
        );
    }
    no_staging(&root);
}

// There is no default policy: the local provider confines nothing, so a write or an edit
// asked under a confined mode is refused, and the file is left as it was.
#[tokio::test]
async fn a_confined_policy_is_refused_and_nothing_is_written() {
    let (_dir, root, fs) = setup();
    std::fs::write(root.join("f.txt"), "old").expect("file");
    let t = fs.target_of("f.txt", None).await.expect("resolve");
    for mode in [
        dsh_sandbox::SandboxMode::ReadOnly,
        dsh_sandbox::SandboxMode::WorkspaceWrite,
    ] {
        let policy = dsh_sandbox::SandboxPolicy::bare(mode, &root);
        assert_eq!(
            code(fs.write_text(&t, "new", None, &policy).await),
            ErrorCode::SandboxUnavailable
        );
        assert_eq!(
            code(
                fs.edit_text(&t, &edit("old", "new", false), None, &policy)
                    .await
            ),
            ErrorCode::SandboxUnavailable
        );
    }
    assert_eq!(
        std::fs::read_to_string(root.join("f.txt")).expect("read"),
        "old"
    );
}

// A write whose caller stops waiting runs to its end and lands whole, holding the
// target's lock meanwhile; its lock entry is forgotten once its work ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_write_lands_whole_and_leaves_no_lock_entry() {
    let (_d, root, fs) = setup();
    let t = fs.target_of("big.txt", None).await.expect("target");
    let content = "x".repeat(64 << 20);
    let policy = full();
    let write = fs.write_text(&t, &content, None, &policy);
    // Dropped while its blocking work runs (64 MiB and an fsync take longer than this).
    let r = tokio::time::timeout(std::time::Duration::from_millis(1), write).await;
    assert!(r.is_err(), "the write finished before it could be dropped");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while fs.lock_entries() != 0 {
        assert!(std::time::Instant::now() < deadline, "the lock entry stays");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(
        std::fs::metadata(root.join("big.txt"))
            .expect("written")
            .len(),
        64 << 20
    );
    // The target takes the next write at once.
    fs.write_text(&t, "small\n", None, &full())
        .await
        .expect("write");
    assert_eq!(fs.lock_entries(), 0);
}
