//! The user's credential stores are not readable by a confined command, whatever its mode
//! and runner, nor by the file tools.

use crate::support::{text, Fixture};

const SECRET: &str = "s3cr3t-do-not-show";

fn fixture_with_credentials() -> Fixture {
    let fx = Fixture::new();
    for (path, dir) in [
        (".ssh/id_ed25519", true),
        (".aws/credentials", true),
        (".config/gh/hosts.yml", true),
        (".netrc", false),
        (".docker/config.json", true),
        (".kube/config", true),
    ] {
        let p = fx.home.join(path);
        if dir {
            std::fs::create_dir_all(p.parent().expect("parent")).expect("dir");
        }
        std::fs::write(&p, format!("{SECRET}\n")).expect("secret");
    }
    // On the allow-list of the closed home: readable.
    std::fs::create_dir_all(fx.home.join(".config/git")).expect("git config dir");
    std::fs::write(fx.home.join(".config/git/config"), "region = plain\n").expect("git config");
    fx
}

// Regression: issue 11, finding 10.
#[test]
fn credential_stores_are_unreadable_under_every_runner_and_mode() {
    let fx = fixture_with_credentials();
    let ws = fx.ws.to_str().expect("utf-8");
    let home = fx.home.display().to_string();
    let script = format!(
        "cat {home}/.ssh/id_ed25519 {home}/.aws/credentials {home}/.config/gh/hosts.yml \
         {home}/.netrc {home}/.docker/config.json {home}/.kube/config 2>&1; \
         cat {home}/.config/git/config; ln -s {home}/.ssh/id_ed25519 {ws}/l 2>/dev/null; cat {ws}/l 2>&1; true"
    );
    let mut ran = 0;
    for runner in ["landlock", "bwrap"] {
        for mode in ["read-only", "workspace-write"] {
            let out = fx.dsh(&[
                "exec",
                "-C",
                ws,
                "--mode",
                mode,
                "--runner",
                runner,
                "--allow-partial",
                "--",
                "bash",
                "-c",
                &script,
            ]);
            if out.status.code() == Some(125) {
                println!("{runner} {mode} unavailable here: {}", text(&out));
                continue;
            }
            ran += 1;
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(!stdout.contains(SECRET), "{runner} {mode}: {}", text(&out));
            assert!(
                stdout.contains("region = plain"),
                "{runner} {mode}: {}",
                text(&out)
            );
            // Each read refused (denied, or not there in the closed home).
            for f in [
                ".ssh/id_ed25519",
                ".aws/credentials",
                ".netrc",
                ".kube/config",
            ] {
                assert!(
                    stdout.contains(&format!("{home}/{f}: ")),
                    "{runner} {mode}: {f}: {}",
                    text(&out)
                );
            }
        }
    }
    assert!(ran > 0, "no runner works here");
}

#[test]
fn the_file_tools_refuse_credential_stores() {
    let fx = fixture_with_credentials();
    let ws = fx.ws.to_str().expect("utf-8");
    let state = fx.base.join("state");
    let state = state.to_str().expect("utf-8");
    let key = fx.home.join(".ssh/id_ed25519");
    std::os::unix::fs::symlink(&key, fx.ws.join("alias")).expect("link");
    // Another name for a denied file: denied by its identity.
    std::fs::hard_link(fx.home.join(".aws/credentials"), fx.ws.join("backup")).expect("hard link");
    for path in [
        key.display().to_string(),
        "alias".to_owned(),
        "backup".to_owned(),
    ] {
        let args = serde_json::json!({"file_path": path}).to_string();
        let out = fx.dsh(&["tool", "read", &args, "-C", ws, "--state", state]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{path}: {}", text(&out));
        assert!(!stdout.contains(SECRET), "{path}: {stdout}");
        assert!(stdout.contains("deny_read"), "{path}: {stdout}");
    }
    for dir in [".ssh", ".aws", ".config/gh"] {
        let path = fx.home.join(dir).display().to_string();
        let args = serde_json::json!({"pattern": SECRET, "path": path}).to_string();
        let out = fx.dsh(&["tool", "grep", &args, "-C", ws, "--state", state]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            !stdout.contains(SECRET),
            "grep searched a denied file in {dir}: {stdout}"
        );
        assert_eq!(out.status.code(), Some(1), "{dir}: {}", text(&out));
        assert!(
            stdout.contains("deny_read") || stdout.contains("read_allow"),
            "{dir}: {}",
            text(&out)
        );
    }
    // What is not denied is still searched.
    let args = serde_json::json!({"pattern": "region", "path": fx.home.join(".config/git").display().to_string()}).to_string();
    let out = fx.dsh(&["tool", "grep", &args, "-C", ws, "--state", state]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("config"),
        "{}",
        text(&out)
    );
}

// A folder above a denied path inside a writable root renamed (`mv gh gh2` under
// `--writable ~/.config`) must not let the next command read the file under its new name.
#[test]
fn a_folder_above_a_denied_path_cannot_be_renamed_away_from_it() {
    if !crate::support::bwrap_usable() {
        return;
    }
    let fx = fixture_with_credentials();
    let config = fx.home.join(".config").display().to_string();
    // A writable ~/.config is a gap (refused unless accepted): accepted here.
    let out = fx.exec_in(
        &fx.ws,
        &["--writable", &config, "--allow-partial"],
        &format!("mv {config}/gh {config}/gh2; cat {config}/gh2/hosts.yml; echo ran"),
    );
    assert!(text(&out).contains("ran"), "{}", text(&out));
    assert!(!text(&out).contains(SECRET), "{}", text(&out));
    assert!(fx.home.join(".config/gh/hosts.yml").exists());
    let out = fx.exec_in(
        &fx.ws,
        &["--writable", &config, "--allow-partial"],
        &format!("cat {config}/gh2/hosts.yml {config}/gh/hosts.yml; echo ran"),
    );
    assert!(text(&out).contains("ran"), "{}", text(&out));
    assert!(!text(&out).contains(SECRET), "{}", text(&out));
}

// Under the faster Landlock grants, another name for a file inside a denied folder
// (`ln ~/.ssh/id_ed25519 /tmp/x`) in a folder on the way to a home must not get its inode
// granted (the key would then read under its own name too); nor may a denied file
// bind-mounted as root over an entry on the way open anything (the listing shows the
// inode beneath a mount).
#[test]
fn another_name_or_a_mount_of_a_denied_file_on_the_way_opens_nothing_under_landlock() {
    let fx = fixture_with_credentials();
    let key = fx.home.join(".ssh/id_ed25519");
    // The fixture's base holds the home: a folder on the way to the closed home.
    std::fs::hard_link(&key, fx.base.join("innocent")).expect("hard link");
    let root = rustix::process::geteuid().is_root();
    let mount_point = fx.base.join("mounted");
    if root {
        std::fs::write(&mount_point, "").expect("mount point");
        let m = std::process::Command::new("mount")
            .args(["--bind"])
            .arg(fx.home.join(".netrc"))
            .arg(&mount_point)
            .status()
            .expect("mount");
        assert!(m.success(), "mount --bind failed as root");
    } else {
        println!("not root: the bind-mount half is left out (mounting needs root)");
    }
    let script = format!(
        "cat '{}' '{}' 2>&1; echo ran",
        key.display(),
        fx.home.join(".netrc").display()
    );
    let out = fx.exec_runner(
        &fx.ws,
        "landlock",
        &["--mode", "read-only"],
        &["bash", "-c", &script],
    );
    if root {
        let _ = std::process::Command::new("umount")
            .arg(&mount_point)
            .status();
    }
    let Some(out) = out else { return };
    assert!(text(&out).contains("ran"), "{}", text(&out));
    assert!(!text(&out).contains(SECRET), "{}", text(&out));
}
