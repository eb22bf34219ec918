//! `glob` and `grep` on a real tree: ignore files, hidden and binary files, caps, and
//! patterns that stay inert.

use dsh_core::CancelToken;
use serde_json::json;

use crate::support::{call, code, fixture};

fn tree(ws: &std::path::Path) {
    let w = |p: &str, c: &[u8]| {
        let path = ws.join(p);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, c).expect("write");
    };
    w(
        "src/main.rs",
        b"fn main() {\n    println!(\"needle\");\n}\n",
    );
    w("src/lib/mod.rs", b"// needle here too\npub fn f() {}\n");
    w("notes.md", b"a needle in the notes\n");
    w(".hidden/secret.rs", b"needle hidden\n");
    w("target/built.rs", b"needle ignored\n");
    w(".gitignore", b"target/\n");
    w(".git/config.rs", b"needle in git\n");
    w("blob.bin", b"needle\0binary\n");
}

#[tokio::test]
async fn glob_honours_ignores_lists_hidden_and_keeps_patterns_inert() {
    let f = fixture(|b| b, vec![]).await;
    let ws = f.session.header().cwd.clone();
    tree(&ws);
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    let r = f
        .world
        .call(
            s,
            call("glob", json!({"pattern": "*.rs"})),
            CancelToken::new(),
        )
        .await;
    let mut got: Vec<&str> = r.text.lines().collect();
    got.sort_unstable();
    assert_eq!(
        got,
        [".hidden/secret.rs", "src/lib/mod.rs", "src/main.rs"],
        "{}",
        r.text
    );
    let r = f
        .world
        .call(
            s,
            call("glob", json!({"pattern": "src/**/*.rs"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text.lines().count(), 2, "{}", r.text);
    let r = f
        .world
        .call(
            s,
            call("glob", json!({"pattern": "*.rs", "path": "src/lib"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text, "src/lib/mod.rs");
    let r = f
        .world
        .call(
            s,
            call("glob", json!({"pattern": "$(touch pwned)"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text, "No files found");
    assert!(!ws.join("pwned").exists());
    let r = f
        .world
        .call(
            s,
            call("glob", json!({"pattern": "[unclosed"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), Some("SEARCH_INVALID_PATTERN"));
    let r = f
        .world
        .call(s, call("glob", json!({"pattern": " "})), CancelToken::new())
        .await;
    assert_eq!(r.text, "Error: pattern must be a non-empty string");
    for i in 0..105 {
        std::fs::write(ws.join(format!("many-{i:03}.txt")), "x").expect("write");
    }
    let r = f
        .world
        .call(
            s,
            call("glob", json!({"pattern": "many-*.txt"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(
        r.text.lines().filter(|l| l.starts_with("many-")).count(),
        100
    );
    assert!(r.text.ends_with("(Showing 100 of 105 paths. The complete result could not be saved; narrow pattern or path to see more.)"), "{}", r.text);
}

#[tokio::test]
async fn grep_groups_matches_and_skips_ignored_hidden_and_binary_files() {
    let f = fixture(|b| b, vec![]).await;
    let ws = f.session.header().cwd.clone();
    tree(&ws);
    f.session.begin_turn().await.expect("turn");
    let s = Some(&f.session);
    let r = f
        .world
        .call(
            s,
            call("grep", json!({"pattern": "needle"})),
            CancelToken::new(),
        )
        .await;
    assert!(r.text.starts_with("Found 3 matches\n\n"), "{}", r.text);
    assert!(
        r.text
            .contains("src/main.rs\nLine 2:     println!(\"needle\");"),
        "{}",
        r.text
    );
    for hidden in ["secret.rs", "built.rs", ".git", "blob.bin"] {
        assert!(!r.text.contains(hidden), "{hidden}: {}", r.text);
    }
    let r = f
        .world
        .call(
            s,
            call(
                "grep",
                json!({"pattern": "needle", "include": "*.{md,txt}"}),
            ),
            CancelToken::new(),
        )
        .await;
    assert_eq!(
        r.text,
        "Found 1 match\n\nnotes.md\nLine 1: a needle in the notes"
    );
    for (include, msg) in [
        (" ", "non-empty"),
        ("!*.rs", "negated"),
        ("*.rs,*.md", "comma"),
    ] {
        let r = f
            .world
            .call(
                s,
                call("grep", json!({"pattern": "x", "include": include})),
                CancelToken::new(),
            )
            .await;
        assert!(r.text.contains(msg), "{include}: {}", r.text);
    }
    let r = f
        .world
        .call(
            s,
            call("grep", json!({"pattern": "(unclosed"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(code(&r), Some("SEARCH_INVALID_PATTERN"));
    let r = f
        .world
        .call(
            s,
            call("grep", json!({"pattern": "zzz-nothing"})),
            CancelToken::new(),
        )
        .await;
    assert_eq!(r.text, "No matches found");
    let r = f
        .world
        .call(
            s,
            call("grep", json!({"pattern": " in "})),
            CancelToken::new(),
        )
        .await;
    assert!(
        r.text.starts_with("Found 1 match"),
        "a whitespace pattern is a pattern: {}",
        r.text
    );
    std::fs::write(ws.join("long.txt"), format!("{}é tail\n", "x".repeat(1999))).expect("write");
    let r = f
        .world
        .call(
            s,
            call("grep", json!({"pattern": "tail", "include": "long.txt"})),
            CancelToken::new(),
        )
        .await;
    assert!(
        r.text
            .ends_with(&format!("Line 1: {} (line truncated)", "x".repeat(1999))),
        "{}",
        &r.text[..80]
    );
    std::fs::write(ws.join("lots.txt"), "hit\n".repeat(300)).expect("write");
    let r = f
        .world
        .call(
            s,
            call("grep", json!({"pattern": "^hit$"})),
            CancelToken::new(),
        )
        .await;
    assert!(
        r.text.starts_with("Found 250 of 300 matches"),
        "{}",
        &r.text[..60]
    );
    assert!(r.text.ends_with("(Showing 250 of 300 matches. The complete result could not be saved; narrow pattern or path to see more.)"));
}

#[tokio::test]
async fn grep_over_the_cap_keeps_the_first_matches_in_path_order_whichever_thread_ran() {
    let f = fixture(|b| b, vec![]).await;
    let ws = f.session.header().cwd.clone();
    // 40 files of 10 matches: 400 found, 250 shown, the same ones on every run.
    for i in 0..40 {
        let body: String = (0..10).map(|l| format!("hit {i} {l}\n")).collect();
        std::fs::write(ws.join(format!("f{i:02}.txt")), body).expect("write");
    }
    f.session.begin_turn().await.expect("turn");
    let mut first = None;
    for _ in 0..5 {
        let r = f
            .world
            .call(
                Some(&f.session),
                call("grep", json!({"pattern": "hit"})),
                CancelToken::new(),
            )
            .await;
        assert!(r.text.starts_with("Found 250 of 400 matches"), "{}", r.text);
        assert!(
            r.text.contains("f00.txt\nLine 1: hit 0 0\nLine 2: hit 0 1"),
            "{}",
            r.text
        );
        assert!(
            r.text.contains("f24.txt\nLine 1: hit 24 0") && !r.text.contains("f25.txt"),
            "{}",
            r.text
        );
        match &first {
            None => first = Some(r.text),
            Some(t) => assert_eq!(t, &r.text, "the same answer every time"),
        }
    }
}

#[tokio::test]
async fn grep_skips_a_file_whose_read_would_wait_forever() {
    // `/proc/kmsg` is a regular file whose read blocks until the kernel logs something
    // (root only). Without it here, the test has nothing to show.
    if std::fs::File::open("/proc/kmsg").is_err() {
        dsh_testkit::skip(
            dsh_testkit::Need::KernelInterface,
            "/proc/kmsg cannot be opened here (root only)",
        );
        return;
    }
    let f = fixture(|b| b, vec![]).await;
    f.session.begin_turn().await.expect("turn");
    let r = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        f.world.call(
            Some(&f.session),
            call(
                "grep",
                json!({"pattern": "dsh-no-such-kernel-line", "path": "/proc/kmsg"}),
            ),
            CancelToken::new(),
        ),
    )
    .await
    .expect("grep returned instead of waiting on /proc/kmsg");
    // The file tools read nothing under /proc (issue 23: it is dsh's own process): the
    // answer is a refusal, at once.
    assert!(r.is_error, "{}", r.text);
    assert!(r.text.contains("denies reading"), "{}", r.text);
}
