//! The filesystem seam's contract, run against every provider: what `resolve`, `stat`,
//! `lstat`, the reads, `list_dir`, `write_text`, `edit_text`, `glob` and `grep` return and
//! refuse, on real files. A provider elsewhere (the remote one) runs the same suite; a
//! difference between providers is a bug in one of them.

use std::path::{Path, PathBuf};

use dsh_core::{CancelToken, ErrorCode};
use dsh_fs::{
    EditRequest, FileSystem, FsKind, GlobQuery, GrepQuery, LineLimits, LocalFs, SandboxedFs,
    WriteIntent,
};
use dsh_sandbox::{SandboxMode, SandboxPolicy};

/// A workspace with a few files, a nested ignored directory, a hidden file, a binary file,
/// a link and a `.git` directory, each modified at a known time.
fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = std::fs::canonicalize(dir.path()).expect("canonical");
    let files: &[(&str, &[u8])] = &[
        ("a.txt", b"alpha\nbeta\nalpha beta\n"),
        ("src/lib.rs", b"fn alpha() {}\n"),
        ("src/main.rs", b"fn main() { alpha(); }\n"),
        ("build/out.txt", b"alpha in an ignored file\n"),
        (".hidden.txt", b"alpha hidden\n"),
        ("blob.bin", b"alpha\0binary\n"),
        (".git/config", b"alpha in git\n"),
        (".gitignore", b"build/\n"),
    ];
    for (i, (name, bytes)) in files.iter().enumerate() {
        let p = ws.join(name);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
        std::fs::write(&p, bytes).expect("write");
        // Oldest first in this order.
        let t =
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000 + i as u64);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .and_then(|f| f.set_modified(t))
            .expect("mtime");
    }
    std::os::unix::fs::symlink("a.txt", ws.join("link.txt")).expect("link");
    (dir, ws)
}

fn code<T: std::fmt::Debug>(r: Result<T, dsh_core::HarnessError>) -> ErrorCode {
    r.expect_err("an error").code()
}

/// The suite: `fs` over the workspace `ws`, writing under `policy`.
async fn conforms(fs: &dyn FileSystem, ws: &Path, policy: &SandboxPolicy) {
    let cancel = CancelToken::new();
    // resolve: relative against the given directory; nothing for an empty path.
    let a = fs.target_of("a.txt", Some(ws)).await.expect("resolve");
    assert_eq!(a.key(), ws.join("a.txt"));
    assert_eq!(
        code(fs.target_of("", Some(ws)).await),
        ErrorCode::FsNotFound
    );
    assert_eq!(
        code(fs.target_of("a.txt/x", Some(ws)).await),
        ErrorCode::FsNotFound
    );

    // stat and lstat.
    let info = fs.stat(&a).await.expect("stat").expect("there");
    assert_eq!((info.kind, info.size), (FsKind::File, Some(22)));
    let missing = fs.target_of("nope.txt", Some(ws)).await.expect("resolve");
    assert!(fs.stat(&missing).await.expect("stat").is_none());
    let link = fs
        .lstat("link.txt", Some(ws))
        .await
        .expect("lstat")
        .expect("there");
    assert_eq!(link.kind, FsKind::Symlink);

    // Reads.
    let (text, version) = fs.read_text(&a, 1 << 20, policy).await.expect("read");
    assert_eq!(text, "alpha\nbeta\nalpha beta\n");
    assert_eq!(version, info.version);
    assert_eq!(
        code(fs.read_text(&a, 4, policy).await),
        ErrorCode::FsTooLarge
    );
    assert_eq!(
        code(fs.read_text(&missing, 1 << 20, policy).await),
        ErrorCode::FsNotFound
    );
    let src = fs.target_of("src", Some(ws)).await.expect("resolve");
    assert_eq!(
        code(fs.read_text(&src, 1 << 20, policy).await),
        ErrorCode::FsNotRegularFile
    );
    let blob = fs.target_of("blob.bin", Some(ws)).await.expect("resolve");
    assert_eq!(
        code(fs.read_text(&blob, 1 << 20, policy).await),
        ErrorCode::FsNotText
    );
    let (bytes, _) = fs.read_bytes(&blob, 1 << 20, policy).await.expect("bytes");
    assert_eq!(bytes, b"alpha\0binary\n");
    let limits = LineLimits {
        offset: 2,
        limit: 1,
        max_line_chars: 2000,
        max_bytes: 1 << 20,
    };
    let window = fs
        .read_lines(&a, limits, policy, &cancel)
        .await
        .expect("lines");
    assert_eq!(window.lines, vec![(2, "beta".to_owned())]);
    assert_eq!(window.total_lines.count(), 3);

    // list_dir: sorted by name.
    let names: Vec<String> = fs
        .list_dir(&src)
        .await
        .expect("list")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["lib.rs", "main.rs"]);
    assert_eq!(code(fs.list_dir(&a).await), ErrorCode::FsNotDirectory);

    // Writes and edits, guarded by versions.
    let new = fs.target_of("new.txt", Some(ws)).await.expect("resolve");
    let w = fs
        .write_text(
            &new,
            "one\ntwo\n",
            Some(WriteIntent::CreateIfAbsent),
            policy,
        )
        .await
        .expect("create");
    assert!(w.created);
    assert_eq!(
        code(
            fs.write_text(&new, "x", Some(WriteIntent::CreateIfAbsent), policy)
                .await
        ),
        ErrorCode::FsNotObserved
    );
    let edit = EditRequest {
        old: "two".into(),
        new: "three".into(),
        replace_all: false,
    };
    let e = fs
        .edit_text(&new, &edit, Some(&w.version), policy)
        .await
        .expect("edit");
    assert_eq!(e.replaced, 1);
    let (text, version) = fs.read_text(&new, 1 << 20, policy).await.expect("read");
    assert_eq!((text.as_str(), &version), ("one\nthree\n", &e.version));
    assert_eq!(
        code(fs.edit_text(&new, &edit, Some(&w.version), policy).await),
        ErrorCode::FsStaleVersion
    );
    let again = EditRequest {
        old: "alpha".into(),
        new: "x".into(),
        replace_all: false,
    };
    assert_eq!(
        code(fs.edit_text(&a, &again, None, policy).await),
        ErrorCode::FsAmbiguousEdit
    );
    let absent = EditRequest {
        old: "gamma".into(),
        new: "x".into(),
        replace_all: false,
    };
    assert_eq!(
        code(fs.edit_text(&a, &absent, None, policy).await),
        ErrorCode::FsEditNotFound
    );
    assert_eq!(
        code(
            fs.write_text(
                &a,
                "x",
                Some(WriteIntent::ReplaceIfVersion(w.version.clone())),
                policy
            )
            .await
        ),
        ErrorCode::FsStaleVersion
    );
    std::fs::remove_file(ws.join("new.txt")).expect("clean");

    // glob: ignore files honoured, hidden files listed, VCS directories never entered,
    // oldest first, the total beside the first `limit`.
    let root = fs.target_of(".", Some(ws)).await.expect("root");
    let q = |pattern: &str, limit: usize| GlobQuery {
        pattern: pattern.into(),
        limit,
    };
    let found = fs
        .glob(&root, &q("*.txt", 10), policy, &cancel)
        .await
        .expect("glob");
    assert_eq!(found.paths, [ws.join("a.txt"), ws.join(".hidden.txt")]);
    assert_eq!(found.total, 2);
    let found = fs
        .glob(&root, &q("src/*.rs", 1), policy, &cancel)
        .await
        .expect("glob");
    assert_eq!((found.paths, found.total), (vec![ws.join("src/lib.rs")], 2));
    let config = fs
        .glob(&root, &q("config", 10), policy, &cancel)
        .await
        .expect("glob");
    assert_eq!(config.total, 0, "{:?}", config.paths);
    assert_eq!(
        code(fs.glob(&root, &q("[", 10), policy, &cancel).await),
        ErrorCode::SearchInvalidPattern
    );

    // grep: first matches in path and line order, hidden, binary, ignored and VCS files
    // skipped, `include` filtering, lines cut on a character boundary.
    let g = |pattern: &str, include: Option<&str>, limit: usize| GrepQuery {
        pattern: pattern.into(),
        include: include.map(Into::into),
        limit,
        max_line_bytes: 2000,
    };
    let found = fs
        .grep(&root, &g("alpha", None, 10), policy, &cancel)
        .await
        .expect("grep");
    let hits: Vec<(PathBuf, u64)> = found
        .matches
        .iter()
        .map(|m| (m.path.clone(), m.line))
        .collect();
    assert_eq!(
        hits,
        [
            (ws.join("a.txt"), 1),
            (ws.join("a.txt"), 3),
            (ws.join("src/lib.rs"), 1),
            (ws.join("src/main.rs"), 1)
        ]
    );
    assert_eq!(found.total, 4);
    assert_eq!(found.matches[1].text, "alpha beta");
    let found = fs
        .grep(&root, &g("alpha", Some("*.rs"), 1), policy, &cancel)
        .await
        .expect("grep");
    assert_eq!(found.matches.len(), 1);
    assert_eq!(
        (found.matches[0].path.clone(), found.total),
        (ws.join("src/lib.rs"), 2)
    );
    let cut = GrepQuery {
        max_line_bytes: 3,
        ..g("alpha beta", None, 10)
    };
    let found = fs.grep(&root, &cut, policy, &cancel).await.expect("grep");
    assert_eq!(found.matches[0].text, "alp (line truncated)");
    assert_eq!(
        code(fs.grep(&root, &g("(", None, 10), policy, &cancel).await),
        ErrorCode::SearchInvalidPattern
    );
    // A file as the root: that file is searched (regression: it found nothing).
    let found = fs
        .grep(&a, &g("beta", None, 10), policy, &cancel)
        .await
        .expect("grep");
    assert_eq!(found.total, 2, "{:?}", found.matches);
    let found = fs
        .glob(&a, &q("*.txt", 10), policy, &cancel)
        .await
        .expect("glob");
    assert_eq!(found.paths, [ws.join("a.txt")]);
    let stopped = CancelToken::new();
    stopped.cancel("test");
    assert_eq!(
        code(
            fs.grep(&root, &g("alpha", None, 10), policy, &stopped)
                .await
        ),
        ErrorCode::SearchAborted
    );
    assert_eq!(
        code(fs.glob(&root, &q("*", 10), policy, &stopped).await),
        ErrorCode::SearchAborted
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_provider_conforms() {
    let (_dir, ws) = workspace();
    let policy = SandboxPolicy::danger_full_access(&ws);
    conforms(&LocalFs::new(&ws), &ws, &policy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandboxed_provider_conforms() {
    let (_dir, ws) = workspace();
    let policy = dsh_protect::workspace_policy(SandboxMode::WorkspaceWrite, &ws);
    conforms(&SandboxedFs::new(LocalFs::new(&ws)), &ws, &policy).await;
}

/// What only a fenced provider does: a file whose reads it denies is never searched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_grep_never_opens_a_denied_file() {
    let (_dir, ws) = workspace();
    std::fs::write(ws.join("secret.pem"), "alpha key\n").expect("secret");
    let fenced = SandboxedFs::new(LocalFs::new(&ws));
    let pem = SandboxPolicy::new(SandboxMode::ReadOnly, &ws).with_deny_read([ws.join("*.pem")]);
    let root = fenced.target_of(".", Some(&ws)).await.expect("root");
    let q = GrepQuery {
        pattern: "alpha key".into(),
        include: None,
        limit: 10,
        max_line_bytes: 2000,
    };
    let found = fenced
        .grep(&root, &q, &pem, &CancelToken::new())
        .await
        .expect("grep");
    assert_eq!(found.total, 0, "{:?}", found.matches);
    // A denied name that is a link (a dotfiles `~/.gnupg -> dots/gnupg`) denies its
    // target too, for reading and searching; the denied name as the root is refused,
    // saying so.
    std::fs::create_dir_all(ws.join("dots/gnupg")).expect("dots");
    std::fs::write(ws.join("dots/gnupg/key"), "alpha key\n").expect("key");
    std::os::unix::fs::symlink("dots/gnupg", ws.join(".gnupg")).expect("link");
    let gpg = SandboxedFs::new(LocalFs::new(&ws));
    let gnupg_denied =
        SandboxPolicy::new(SandboxMode::ReadOnly, &ws).with_deny_read([ws.join(".gnupg")]);
    let found = gpg
        .grep(&root, &q, &gnupg_denied, &CancelToken::new())
        .await
        .expect("grep");
    let paths: Vec<_> = found.matches.iter().map(|m| m.path.clone()).collect();
    assert!(!paths.contains(&ws.join("dots/gnupg/key")), "{paths:?}");
    let gnupg = gpg.target_of(".gnupg", Some(&ws)).await.expect("resolve");
    let e = gpg
        .grep(&gnupg, &q, &gnupg_denied, &CancelToken::new())
        .await
        .expect_err("a denied root");
    assert_eq!(e.code(), ErrorCode::FsSandboxDenied);
    let key = gpg
        .target_of("dots/gnupg/key", Some(&ws))
        .await
        .expect("resolve");
    let e = gpg
        .read_text(&key, 1 << 20, &gnupg_denied)
        .await
        .expect_err("its target");
    assert_eq!(e.code(), ErrorCode::FsSandboxDenied);
    // And a hard link elsewhere to a file inside a denied directory.
    std::fs::hard_link(ws.join("dots/gnupg/key"), ws.join("notes.txt")).expect("hard link");
    let other = gpg
        .target_of("notes.txt", Some(&ws))
        .await
        .expect("resolve");
    let e = gpg
        .read_text(&other, 1 << 20, &gnupg_denied)
        .await
        .expect_err("another name");
    assert_eq!(e.code(), ErrorCode::FsSandboxDenied);
    let found = gpg
        .grep(&root, &q, &gnupg_denied, &CancelToken::new())
        .await
        .expect("grep");
    let paths: Vec<_> = found.matches.iter().map(|m| m.path.clone()).collect();
    assert!(!paths.contains(&ws.join("notes.txt")), "{paths:?}");
    std::fs::remove_file(ws.join("notes.txt")).expect("clean");
    std::fs::remove_file(ws.join("dots/gnupg/key")).expect("clean");
    let local = LocalFs::new(&ws);
    let found = local
        .grep(
            &root,
            &q,
            &SandboxPolicy::danger_full_access(&ws),
            &CancelToken::new(),
        )
        .await
        .expect("grep");
    assert_eq!(found.total, 1);
}
