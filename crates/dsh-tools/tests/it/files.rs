//! `read`, `write` and `edit` through the whole pipeline, in a read-only session over
//! the sandboxed filesystem.

use dsh_approval::ApprovalOutcome;
use dsh_core::CancelToken;
use serde_json::json;

use crate::support::{call, code, fixture};

#[tokio::test]
async fn read_renders_the_envelope_and_its_footers() {
    let f = fixture(|b| b, vec![]).await;
    let ws = f.session.header().cwd.clone();
    std::fs::write(ws.join("f.txt"), "a\r\nb\nc\n").expect("write");
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    let r = f
        .world
        .call(
            s,
            call("read", json!({"file_path": "f.txt"})),
            CancelToken::new(),
        )
        .await;
    let path = ws.join("f.txt");
    assert_eq!(
        r.text,
        format!("<path>{}</path>\n<type>file</type>\n<content>\n1: a\n2: b\n3: c\n\n(End of file - total 3 lines)\n</content>", path.display())
    );
    let r = f
        .world
        .call(
            s,
            call(
                "read",
                json!({"file_path": "f.txt", "offset": 2, "limit": 1}),
            ),
            CancelToken::new(),
        )
        .await;
    assert!(
        r.text
            .contains("2: b\n\n(Showing lines 2-2 of 3. Use offset=3 to continue.)"),
        "{}",
        r.text
    );
    let r = f
        .world
        .call(
            s,
            call("read", json!({"file_path": "f.txt", "limit": 2001})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text, "Error: limit must be less than or equal to 2000");
    let r = f
        .world
        .call(
            s,
            call("read", json!({"file_path": "f.txt", "offset": 0})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text, "Error: offset must be a positive integer");
    let r = f
        .world
        .call(
            s,
            call("read", json!({"file_path": "f.txt", "offset": 9})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), Some("FS_NOT_FOUND"));
    std::fs::write(ws.join("pic.PNG"), b"\x89PNG").expect("write");
    let r = f
        .world
        .call(
            s,
            call("read", json!({"file_path": "pic.PNG"})),
            CancelToken::new(),
        )
        .await;
    assert!(r.text.contains("use read_image"), "{}", r.text);
    std::fs::write(ws.join("bin"), b"a\0b").expect("write");
    let r = f
        .world
        .call(
            s,
            call("read", json!({"file_path": "bin"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), Some("FS_NOT_TEXT"));
}

#[tokio::test]
async fn read_of_a_huge_file_says_its_total_is_a_lower_bound() {
    let f = fixture(|b| b, vec![]).await;
    let ws = f.session.header().cwd.clone();
    // 10 KB of lines, then 8 GiB of one line (a hole: no disk space).
    let path = ws.join("huge.txt");
    std::fs::write(&path, "a line of text\n".repeat(640)).expect("write");
    std::fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|h| h.set_len(8 << 30))
        .expect("set_len");
    f.session.begin_turn().await.expect("turn");
    let r = f
        .world
        .call(
            Some(&f.session),
            call("read", json!({"file_path": "huge.txt", "limit": 1})),
            CancelToken::new(),
        )
        .await;
    assert!(
        r.text.ends_with(
            "1: a line of text\n\n(Showing lines 1-1 of at least 641. Use offset=2 to continue.)\n</content>"
        ),
        "{}",
        r.text
    );
    let meta = r.meta.as_ref().expect("meta");
    assert_eq!(
        (&meta["totalLines"], &meta["totalLinesExact"]),
        (&json!(641), &json!(false))
    );
    // A window that ends in the long line: no line after it was seen, none is promised.
    let r = f
        .world
        .call(
            Some(&f.session),
            call(
                "read",
                json!({"file_path": "huge.txt", "offset": 641, "limit": 1}),
            ),
            CancelToken::new(),
        )
        .await;
    assert!(
        r.text.ends_with(
            "(Showing lines 641-641. Line 641 runs on for more than 1 MiB; the file was not read past that.)\n</content>"
        ),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn writes_need_a_read_and_the_sandbox_needs_an_approved_escalation() {
    let f = fixture(
        |b| b,
        vec![
            ApprovalOutcome::AllowedOnce,
            ApprovalOutcome::AllowedOnce,
            ApprovalOutcome::Rejected,
        ],
    )
    .await;
    let ws = f.session.header().cwd.clone();
    std::fs::write(ws.join("f.txt"), "old\n").expect("write");
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    let write = |content: &str| json!({"file_path": "f.txt", "content": content});
    let escalated = |content: &str| json!({"file_path": "f.txt", "content": content, "sandbox_permissions": "workspace-write", "justification": "the task rewrites f"});
    // Read-only: denied with the marker and the hint.
    let r = f
        .world
        .call(s, call("write", write("new\n")), CancelToken::new())
        .await;
    assert_eq!(code(&r), Some("FS_SANDBOX_DENIED"));
    assert!(r.text.starts_with("Error: [sandbox: file access denied under read-only mode]\n[sandbox: escalation available — retry this exact operation once"), "{}", r.text);
    // Escalated but unread: only creation is allowed, and this file exists.
    let r = f
        .world
        .call(s, call("write", escalated("new\n")), CancelToken::new())
        .await;
    assert_eq!(code(&r), Some("FS_NOT_OBSERVED"));
    assert!(
        r.text.ends_with("— read the file, then retry"),
        "{}",
        r.text
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).expect("read"),
        "old\n"
    );
    // Read, then the escalated write replaces it.
    f.world
        .call(
            s,
            call("read", json!({"file_path": "f.txt"})),
            CancelToken::new(),
        )
        .await;
    let r = f
        .world
        .call(s, call("write", escalated("new\n")), CancelToken::new())
        .await;
    assert!(
        r.text.ends_with("<content>\nUpdated file\n</content>"),
        "{}",
        r.text
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).expect("read"),
        "new\n"
    );
    // Rejected: nothing is written.
    let r = f
        .world
        .call(s, call("write", escalated("third\n")), CancelToken::new())
        .await;
    assert_eq!(code(&r), Some("APPROVAL_REJECTED"));
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).expect("read"),
        "new\n"
    );
}

#[tokio::test]
async fn edits_need_a_read_keep_crlf_and_catch_stale_versions() {
    let f = fixture(|b| b, vec![ApprovalOutcome::AllowedOnce; 4]).await;
    let ws = f.session.header().cwd.clone();
    std::fs::write(ws.join("e.txt"), "one\r\ntwo\r\n").expect("write");
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    let edit = |old: &str, new: &str| {
        json!({"file_path": "e.txt", "old_string": old, "new_string": new,
               "sandbox_permissions": "workspace-write", "justification": "fix the file"})
    };
    let r = f
        .world
        .call(s, call("edit", edit("one", "ONE")), CancelToken::new())
        .await;
    assert_eq!(code(&r), Some("FS_NOT_OBSERVED"), "{}", r.text);
    f.world
        .call(
            s,
            call("read", json!({"file_path": "e.txt"})),
            CancelToken::new(),
        )
        .await;
    let r = f
        .world
        .call(s, call("edit", edit("one", "ONE")), CancelToken::new())
        .await;
    assert_eq!(
        r.text,
        format!(
            "The file {} has been updated successfully.",
            ws.join("e.txt").display()
        )
    );
    assert_eq!(
        std::fs::read(ws.join("e.txt")).expect("read"),
        b"ONE\r\ntwo\r\n"
    );
    // Our own edit refreshed the version: a second edit needs no new read.
    let r = f
        .world
        .call(s, call("edit", edit("two", "TWO")), CancelToken::new())
        .await;
    assert!(!r.is_error, "{}", r.text);
    let diff = &r.meta.as_ref().expect("meta")["diff"];
    assert_eq!(
        diff,
        &json!({"firstLine": 2, "removed": 1, "added": 1}),
        "line 2 changed"
    );
    std::fs::write(ws.join("e.txt"), "changed elsewhere\n").expect("write");
    let r = f
        .world
        .call(s, call("edit", edit("TWO", "2")), CancelToken::new())
        .await;
    assert_eq!(code(&r), Some("FS_STALE_VERSION"));
    assert!(
        r.text.ends_with("— re-read the file, then retry"),
        "{}",
        r.text
    );
    let r = f
        .world
        .call(
            s,
            call(
                "edit",
                json!({"file_path": "e.txt", "old_string": "x", "new_string": "x"}),
            ),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text, "Error: old_string and new_string must differ");
}

#[tokio::test]
async fn read_image_returns_the_image_and_refuses_what_is_not_one() {
    let f = fixture(|b| b, vec![]).await;
    let ws = f.session.header().cwd.clone();
    let png = [b"\x89PNG\r\n\x1a\n".as_slice(), &[0u8; 32]].concat();
    std::fs::write(ws.join("a.png"), &png).expect("write");
    std::fs::write(ws.join("fake.png"), [0xFF, 0xD8, 0xFF, 0xE0, 0, 0]).expect("write");
    std::fs::write(
        ws.join("huge.gif"),
        [b"GIF89a".as_slice(), &vec![0u8; 6 << 20]].concat(),
    )
    .expect("write");
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    let r = f
        .world
        .call(
            s,
            call("read_image", json!({"file_path": "a.png"})),
            CancelToken::new(),
        )
        .await;
    let img = r.image.clone().expect("an image block");
    assert_eq!((img.mime_type, img.data), ("image/png", png.clone()));
    assert!(
        r.text.contains("[image: image/png, 40 bytes]"),
        "{}",
        r.text
    );
    let r = f
        .world
        .call(
            s,
            call("read_image", json!({"file_path": "fake.png"})),
            CancelToken::new(),
        )
        .await;
    assert!(r.text.contains("the file is image/jpeg"), "{}", r.text);
    let r = f
        .world
        .call(
            s,
            call("read_image", json!({"file_path": "notes.txt"})),
            CancelToken::new(),
        )
        .await;
    assert!(
        r.text.contains("only accepts PNG/JPEG/WebP/GIF"),
        "{}",
        r.text
    );
    let r = f
        .world
        .call(
            s,
            call("read_image", json!({"file_path": "huge.gif"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), Some("FS_TOO_LARGE"));
    let logged = f.session.events().await.expect("events");
    let first = logged
        .iter()
        .find(|e| e.data.get("image").is_some())
        .expect("logged");
    assert_eq!(
        first.data["image"]["bytes"], 40,
        "the log records the image, not its bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_edits_from_one_read_one_wins_one_is_stale() {
    let f = std::sync::Arc::new(fixture(|b| b, vec![ApprovalOutcome::AllowedOnce; 2]).await);
    let ws = f.session.header().cwd.clone();
    std::fs::write(ws.join("c.txt"), "base\n").expect("write");
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    f.world
        .call(
            s,
            call("read", json!({"file_path": "c.txt"})),
            CancelToken::new(),
        )
        .await;
    let edit = |new: &'static str| {
        let f = f.clone();
        tokio::spawn(async move {
            let args = json!({"file_path": "c.txt", "old_string": "base", "new_string": new,
                              "sandbox_permissions": "workspace-write", "justification": "race"});
            f.world
                .call(Some(&f.session), call("edit", args), CancelToken::new())
                .await
        })
    };
    let (a, b) = (edit("A"), edit("B"));
    let (a, b) = (a.await.expect("a"), b.await.expect("b"));
    let codes = [code(&a), code(&b)];
    assert_eq!(
        codes.iter().filter(|c| c.is_none()).count(),
        1,
        "{a:?} {b:?}"
    );
    assert!(codes.contains(&Some("FS_STALE_VERSION")), "{a:?} {b:?}");
    let now = std::fs::read_to_string(ws.join("c.txt")).expect("read");
    assert!(now == "A\n" || now == "B\n", "{now}");
}

/// One rule for a call's workspace root: a session whose working directory is spelled
/// through a link gets the same root from `read`, `bash` and `glob`: the directory the
/// link leads to.
#[tokio::test]
async fn every_tool_resolves_in_the_same_workspace_root() {
    let f = fixture(|b| b, vec![]).await;
    let ws = f.session.header().cwd.clone();
    let real = ws.join("real");
    std::fs::create_dir_all(real.join("sub")).expect("mkdir");
    std::fs::write(real.join("a.txt"), "alpha\n").expect("write");
    std::os::unix::fs::symlink(&real, ws.join("link")).expect("symlink");
    let spelled = ws.join("link");
    let session = f.world.sessions().create(&spelled).await.expect("session");
    session.begin_turn().await.expect("turn");
    let s = Some(&session);
    let run =
        |name: &str, args: serde_json::Value| f.world.call(s, call(name, args), CancelToken::new());
    let r = run("read", json!({"file_path": "a.txt"})).await;
    assert!(
        r.text
            .starts_with(&format!("<path>{}</path>", real.join("a.txt").display())),
        "{}",
        r.text
    );
    let r = run("bash", json!({"command": "pwd -P", "description": "where"})).await;
    assert!(
        r.text.starts_with(&real.display().to_string()),
        "{}",
        r.text
    );
    let r = run("glob", json!({"pattern": "*.txt"})).await;
    assert_eq!(r.text.lines().next(), Some("a.txt"), "{}", r.text);
    assert_eq!(f.world.policy().workspace_root(Some(&spelled)), real);
}

/// What a file tool saw is logged typed with its result (`seen`), the record a resumed
/// session's read-before-edit memory is seeded from; a result that saw no file has none.
#[tokio::test]
async fn a_file_tools_result_logs_what_it_saw() {
    use dsh_core::journal::{EventKind, Record};
    let f = fixture(|b| b, vec![]).await;
    let ws = f.session.header().cwd.clone();
    std::fs::write(ws.join("f.txt"), "a\n").expect("write");
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    for args in [
        json!({"file_path": "f.txt"}),
        json!({"file_path": "none.txt"}),
    ] {
        f.world
            .call(s, call("read", args), CancelToken::new())
            .await;
    }
    let seen: Vec<_> = f
        .session
        .events()
        .await
        .expect("events")
        .iter()
        .filter(|e| e.kind == EventKind::ToolResult)
        .map(|e| match e.record().expect("typed") {
            Record::ToolResult(r) => r.seen,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(seen.len(), 2);
    let first = seen[0].as_ref().expect("the read saw f.txt");
    assert_eq!(
        first.key.whole(),
        Some(ws.join("f.txt").to_str().expect("utf-8"))
    );
    assert!(first.version.whole().is_some_and(|v| !v.is_empty()));
    assert_eq!(seen[1], None, "a missing file is not logged as seen");
}
