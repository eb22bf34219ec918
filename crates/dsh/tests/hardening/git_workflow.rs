//! What protection must not break: everyday git under workspace-write, in a repository with
//! husky, a submodule, a linked worktree and a sparse checkout.

use crate::support::{bwrap_usable, text, Fixture};

#[test]
fn everyday_git_works_in_a_repository_with_every_protected_layout() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    let sub_origin = fx.base.join("sub-origin");
    fx.repo(&sub_origin);
    fx.repo(&fx.ws);
    // husky: hooks in .husky/_ that run the project's .husky scripts.
    std::fs::create_dir_all(fx.ws.join(".husky/_")).expect("husky");
    std::fs::write(
        fx.ws.join(".husky/_/pre-commit"),
        "#!/bin/sh\n. \"$(dirname \"$0\")/../pre-commit\"\n",
    )
    .expect("stub");
    std::fs::write(
        fx.ws.join(".husky/pre-commit"),
        "#!/bin/sh\necho husky ran >&2\n",
    )
    .expect("hook");
    for h in [".husky/_/pre-commit", ".husky/pre-commit"] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(fx.ws.join(h), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    fx.git(&fx.ws, &["config", "core.hooksPath", ".husky/_"]);
    fx.git(
        &fx.ws,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            sub_origin.to_str().expect("utf-8"),
            "sub",
        ],
    );
    std::fs::create_dir_all(fx.ws.join("docs")).expect("docs");
    std::fs::write(fx.ws.join("docs/a.md"), "a\n").expect("doc");
    fx.git(&fx.ws, &["add", "-A"]);
    fx.git(&fx.ws, &["commit", "-qm", "layout"]);
    let wt = fx.base.join("wt");
    fx.git(
        &fx.ws,
        &[
            "worktree",
            "add",
            "-q",
            wt.to_str().expect("utf-8"),
            "-b",
            "wt-branch",
        ],
    );
    fx.git(
        &fx.ws,
        &["sparse-checkout", "set", "--no-cone", "/*", "!/docs/"],
    );
    assert!(
        !fx.ws.join("docs/a.md").exists(),
        "the sparse checkout did not apply"
    );

    let script = "set -e
        echo b > b.txt && git add b.txt && git commit -qm b
        git checkout -q -b feature
        echo c >> b.txt && git stash -q && git stash pop -q && git commit -qam c
        git checkout -q main && echo d > d.txt && git add d.txt && git commit -qm d
        git checkout -q feature && git rebase -q main
        git submodule update -q
        git -C sub log --oneline | wc -l
        git status --porcelain
        echo done";
    let out = fx.exec(script);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.ends_with("1\ndone\n"),
        "a dirty tree or a missing step: {stdout}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("husky ran"),
        "{}",
        text(&out)
    );
    assert_eq!(
        fx.git(&fx.ws, &["log", "--format=%s", "-3"]),
        "c\nd\nb\n",
        "the rebase did not land"
    );
    // A commit in the linked worktree, confined to it.
    let out = fx.exec_in(
        &wt,
        &[],
        "echo w > w.txt && git add w.txt && git commit -qm w && echo ok",
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "ok\n",
        "{}",
        text(&out)
    );
    assert_eq!(fx.git(&wt, &["log", "--format=%s", "-1"]), "w\n");
    // Nothing of the protection is left on the host.
    assert_eq!(fx.git(&fx.ws, &["status", "--porcelain"]), "");
    assert_eq!(fx.git(&wt, &["status", "--porcelain"]), "");
}
