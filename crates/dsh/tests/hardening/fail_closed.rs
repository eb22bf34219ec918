//! A mode the runners can enforce only in part is refused unless the user accepts it.

use crate::support::{text, Fixture};

fn landlock_usable() -> bool {
    let fx = Fixture::new();
    let ws = fx.ws.to_str().expect("utf-8");
    let out = fx.dsh(&["exec", "-C", ws, "--runner", "landlock", "--", "true"]);
    if out.status.code() != Some(0) {
        dsh_testkit::skip(dsh_testkit::Need::Landlock, &text(&out));
        return false;
    }
    true
}

// Regression: issue 11, finding 6 (where bubblewrap could not run, workspace-write fell back
// to Landlock without protected paths, said only as `"enforcement": "partial"`).
#[test]
fn workspace_write_without_bubblewrap_is_refused_unless_the_gap_is_accepted() {
    if !landlock_usable() {
        return;
    }
    let fx = Fixture::new();
    fx.repo(&fx.ws);
    let ws = fx.ws.to_str().expect("utf-8");
    let plant = "echo x > .git/hooks/pre-commit";
    let out = fx.dsh(&[
        "exec",
        "-C",
        ws,
        "--mode",
        "workspace-write",
        "--runner",
        "landlock",
        "--",
        "bash",
        "-c",
        plant,
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("SANDBOX_UNAVAILABLE"), "{stderr}");
    assert!(stderr.contains("protected paths"), "{stderr}");
    assert!(stderr.contains("--allow-partial"), "{stderr}");
    assert!(
        !fx.ws.join(".git/hooks/pre-commit").exists(),
        "it ran anyway"
    );
    // Accepted: it runs, and says what is missing.
    let out = fx.dsh(&[
        "exec",
        "-C",
        ws,
        "--mode",
        "workspace-write",
        "--runner",
        "landlock",
        "--allow-partial",
        "--json",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["sandbox"]["enforcement"], "partial", "{v}");
    assert!(
        v["sandbox"]["partial_reason"]
            .as_str()
            .is_some_and(|r| r.contains("protected paths")),
        "{v}"
    );
    // The user's config can accept it too; a workspace's config cannot.
    std::fs::create_dir_all(fx.home.join(".config/dsh")).expect("config dir");
    std::fs::write(
        fx.home.join(".config/dsh/config.toml"),
        "allow_partial = true\n",
    )
    .expect("config");
    let out = fx.dsh(&[
        "exec",
        "-C",
        ws,
        "--mode",
        "workspace-write",
        "--runner",
        "landlock",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    std::fs::remove_file(fx.home.join(".config/dsh/config.toml")).expect("rm");
    std::fs::create_dir_all(fx.ws.join(".dsh")).expect(".dsh");
    std::fs::write(fx.ws.join(".dsh/config.toml"), "allow_partial = true\n").expect("ws config");
    let out = fx.dsh(&[
        "exec",
        "-C",
        ws,
        "--mode",
        "workspace-write",
        "--runner",
        "landlock",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("CONFIG_INVALID"), "{stderr}");
    assert!(
        stderr.contains(".dsh/config.toml:1: allow_partial"),
        "{stderr}"
    );
}
