//! `read`, `write` and `edit` through the whole pipeline, in a read-only session over
//! the sandboxed filesystem.

use std::sync::Arc;

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
    /// Allows each question once both have been asked, so both edits wait for their
    /// approval at once, after the read and before either writes.
    struct BothAsked(tokio::sync::Barrier);
    #[async_trait::async_trait]
    impl dsh_approval::Answerer for BothAsked {
        async fn answer(&self, _: &dsh_approval::Question) -> Option<ApprovalOutcome> {
            self.0.wait().await;
            Some(ApprovalOutcome::AllowedOnce)
        }
    }
    let f = std::sync::Arc::new(fixture(|b| b, vec![]).await);
    f.world
        .approval()
        .add_answerer(std::sync::Arc::new(BothAsked(tokio::sync::Barrier::new(2))));
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
    assert_eq!(
        f.world.policy().workspace_root(Some(&session.header().cwd)),
        real
    );
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

/// A session's workspace root is pinned where it first led: once its directory is moved
/// and a link put in its place (what a command that can write the parent could do), the
/// session's calls are refused, not run in the directory the link leads to.
#[tokio::test]
async fn a_session_whose_root_was_moved_runs_nothing() {
    let f = fixture(|b| b, vec![]).await;
    let ws = f.session.header().cwd.clone();
    let (app, elsewhere) = (ws.join("app"), ws.join("elsewhere"));
    std::fs::create_dir_all(&app).expect("mkdir");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    std::fs::write(app.join("mine.txt"), "mine\n").expect("write");
    std::fs::write(elsewhere.join("secret.txt"), "secret\n").expect("write");
    let session = f.world.sessions().create(&app).await.expect("session");
    session.begin_turn().await.expect("turn");
    let s = Some(&session);
    let r = f
        .world
        .call(
            s,
            call("read", json!({"file_path": "mine.txt"})),
            CancelToken::new(),
        )
        .await;
    assert!(r.text.contains("1: mine"), "{}", r.text);
    std::fs::rename(&app, ws.join("app.old")).expect("move");
    std::os::unix::fs::symlink(&elsewhere, &app).expect("link");
    for (name, args) in [
        ("read", json!({"file_path": "secret.txt"})),
        (
            "bash",
            json!({"command": "cat secret.txt", "description": "x"}),
        ),
    ] {
        let r = f.world.call(s, call(name, args), CancelToken::new()).await;
        assert_eq!(code(&r), Some("SANDBOX_UNAVAILABLE"), "{name}: {}", r.text);
        assert!(!r.text.contains("secret\n"), "{name}: {}", r.text);
        assert!(r.text.contains("will not follow it"), "{name}: {}", r.text);
    }
    // The record is the session log's, not this process's: a new service refuses too.
    let fresh = dsh_tools::PolicyService::new(
        dsh_sandbox::SandboxMode::ReadOnly,
        dsh_sandbox::Network::Deny,
        &ws,
    );
    let e = fresh.check_root(&session.header().cwd).expect_err("moved");
    assert_eq!(e.code(), dsh_core::ErrorCode::SandboxUnavailable);
}

/// Moves `from` aside and links its name to `to` when a call passes through it: a swap
/// timed after the check before a call (as a background job of the session could time
/// it, while the call waits for an approval).
struct SwapOnCall {
    from: std::path::PathBuf,
    to: std::path::PathBuf,
}

#[async_trait::async_trait]
impl dsh_tools::PreExecute for SwapOnCall {
    async fn pre_execute(
        &self,
        _call: &dsh_tools::CallView,
    ) -> Result<dsh_tools::PreDecision, dsh_core::HarnessError> {
        if !self.from.is_symlink() {
            std::fs::rename(&self.from, self.from.with_extension("old")).expect("move");
            std::os::unix::fs::symlink(&self.to, &self.from).expect("link");
        }
        Ok(dsh_tools::PreDecision::Allow)
    }
}

/// A swap after the check moves nothing: the call's policy and paths keep the recorded
/// root, so a write lands nowhere but there (here: refused, as the name now leads
/// outside the root).
#[tokio::test]
async fn a_swap_after_the_check_moves_no_policy() {
    let holder = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(holder.path()).expect("canonical");
    let (app, elsewhere) = (base.join("app"), base.join("elsewhere"));
    std::fs::create_dir_all(&app).expect("mkdir");
    std::fs::create_dir_all(&elsewhere).expect("mkdir");
    let swap = Arc::new(SwapOnCall {
        from: app.clone(),
        to: elsewhere.clone(),
    });
    let f = fixture(move |b| b.pre_execute(swap), vec![]).await;
    let session = f.world.sessions().create(&app).await.expect("session");
    f.world
        .set_mode(&session, dsh_sandbox::SandboxMode::WorkspaceWrite)
        .await
        .expect("mode");
    session.begin_turn().await.expect("turn");
    let r = f
        .world
        .call(
            Some(&session),
            call("write", json!({"file_path": "planted.txt", "content": "x"})),
            CancelToken::new(),
        )
        .await;
    assert!(!elsewhere.join("planted.txt").exists(), "{}", r.text);
    assert_eq!(code(&r), Some("FS_SANDBOX_DENIED"), "{}", r.text);
}
