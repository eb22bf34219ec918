//! The configuration's resolver paths and its trust rule, through the real binary: a mode
//! or a network setting reaches `bash`, the file tools and `dsh exec` the same way whether
//! it comes from a flag, the user's config or the workspace's; a workspace's config that
//! would widen the sandbox is refused, and nothing runs, unless the user trusts it.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::Output;

use crate::support::{bwrap_usable, text, Fixture};

/// Where a setting comes from in one case.
struct Case {
    name: &'static str,
    user: &'static str,
    workspace: &'static str,
    flags: &'static [&'static str],
    /// `None`: the config is refused and nothing runs; `Some(allowed)` otherwise.
    expect: Option<bool>,
}

fn write_configs(fx: &Fixture, user: &str, workspace: &str) {
    let user = user.replace("$WS", &fx.ws.display().to_string());
    std::fs::create_dir_all(fx.home.join(".config/dsh")).expect("user config dir");
    std::fs::write(fx.home.join(".config/dsh/config.toml"), user).expect("user config");
    std::fs::create_dir_all(fx.ws.join(".dsh")).expect(".dsh");
    std::fs::write(fx.ws.join(".dsh/config.toml"), workspace).expect("workspace config");
}

/// `dsh tool NAME JSON` in the workspace with `flags`; approvals rejected.
fn tool(fx: &Fixture, name: &str, json: &str, flags: &[&str]) -> Output {
    let ws = fx.ws.to_str().expect("utf-8");
    let state = fx.base.join("state");
    let state = state.to_str().expect("utf-8");
    let mut args = vec![
        "tool", name, json, "-C", ws, "--state", state, "--answer", "reject",
    ];
    args.extend_from_slice(flags);
    fx.dsh(&args)
}

/// `dsh exec -C WS FLAGS -- bash -c SCRIPT`.
fn exec(fx: &Fixture, flags: &[&str], script: &str) -> Output {
    let ws = fx.ws.to_str().expect("utf-8");
    let mut args = vec!["exec", "-C", ws];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "bash", "-c", script]);
    fx.dsh(&args)
}

/// A refused configuration: `CONFIG_INVALID` naming the workspace's file and
/// `trusted_workspaces`, with `status`.
fn assert_refused(out: &Output, status: i32, what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "{what}: {}", text(out));
    assert!(stderr.contains("CONFIG_INVALID"), "{what}: {stderr}");
    assert!(stderr.contains(".dsh/config.toml:1:"), "{what}: {stderr}");
    assert!(
        stderr.contains("trusted_workspaces = ["),
        "{what}: {stderr}"
    );
}

#[test]
fn a_mode_reaches_bash_the_file_tools_and_exec_alike_from_every_source() {
    if !bwrap_usable() {
        return;
    }
    let cases = [
        Case {
            name: "defaults",
            user: "",
            workspace: "",
            flags: &[],
            expect: Some(false),
        },
        Case {
            name: "flag",
            user: "",
            workspace: "",
            flags: &["--mode", "workspace-write"],
            expect: Some(true),
        },
        Case {
            name: "user config",
            user: "mode = \"workspace-write\"\n",
            workspace: "",
            flags: &[],
            expect: Some(true),
        },
        Case {
            name: "workspace config narrows the user's",
            user: "mode = \"workspace-write\"\n",
            workspace: "mode = \"read-only\"\n",
            flags: &[],
            expect: Some(false),
        },
        Case {
            name: "workspace config may not widen",
            user: "",
            workspace: "mode = \"workspace-write\"\n",
            flags: &[],
            expect: None,
        },
        Case {
            name: "a trusted workspace may widen",
            user: "trusted_workspaces = [\"$WS\"]\n",
            workspace: "mode = \"workspace-write\"\n",
            flags: &[],
            expect: Some(true),
        },
    ];
    for case in cases {
        let fx = Fixture::new();
        write_configs(&fx, case.user, case.workspace);
        let what = case.name;
        let out = exec(&fx, case.flags, "echo x > by_exec");
        let bash = tool(
            &fx,
            "bash",
            r#"{"command": "echo x > by_bash", "description": "write"}"#,
            case.flags,
        );
        let write = tool(
            &fx,
            "write",
            r#"{"file_path": "by_write", "content": "x"}"#,
            case.flags,
        );
        match case.expect {
            None => {
                assert_refused(&out, 125, what);
                assert_refused(&bash, 1, what);
                assert_refused(&write, 1, what);
            }
            Some(allowed) => {
                for (file, out) in [("by_exec", &out), ("by_bash", &bash), ("by_write", &write)] {
                    assert_eq!(
                        fx.ws.join(file).exists(),
                        allowed,
                        "{what}: {file}: {}",
                        text(out)
                    );
                }
            }
        }
        for file in ["by_exec", "by_bash", "by_write"] {
            if case.expect.is_none() {
                assert!(!fx.ws.join(file).exists(), "{what}: {file} ran");
            }
        }
    }
}

/// Accepts connections on 127.0.0.1 until dropped; how many came is read by
/// [`Listener::accepted`].
struct Listener {
    port: u16,
    socket: TcpListener,
}

impl Listener {
    fn new() -> Listener {
        let socket = TcpListener::bind("127.0.0.1:0").expect("bind");
        socket.set_nonblocking(true).expect("nonblocking");
        let port = socket.local_addr().expect("addr").port();
        Listener { port, socket }
    }

    /// Connections accepted since the last call.
    fn accepted(&self) -> usize {
        let mut n = 0;
        while let Ok((mut s, _)) = self.socket.accept() {
            let _ = s.read(&mut [0u8; 1]);
            n += 1;
        }
        n
    }
}

#[test]
fn a_network_setting_reaches_bash_and_exec_alike_from_every_source() {
    if !bwrap_usable() {
        return;
    }
    let cases = [
        Case {
            name: "defaults",
            user: "",
            workspace: "",
            flags: &[],
            expect: Some(false),
        },
        Case {
            name: "flag",
            user: "",
            workspace: "",
            flags: &["--network", "allow"],
            expect: Some(true),
        },
        Case {
            name: "user config",
            user: "network = \"allow\"\n",
            workspace: "",
            flags: &[],
            expect: Some(true),
        },
        Case {
            name: "workspace config narrows the user's",
            user: "network = \"allow\"\n",
            workspace: "network = \"deny\"\n",
            flags: &[],
            expect: Some(false),
        },
        Case {
            name: "a flag beats the workspace config",
            user: "network = \"allow\"\n",
            workspace: "network = \"deny\"\n",
            flags: &["--network", "allow"],
            expect: Some(true),
        },
        Case {
            name: "workspace config may not widen",
            user: "",
            workspace: "network = \"allow\"\n",
            flags: &[],
            expect: None,
        },
        Case {
            name: "a trusted workspace may widen",
            user: "trusted_workspaces = [\"$WS\"]\n",
            workspace: "network = \"allow\"\n",
            flags: &[],
            expect: Some(true),
        },
    ];
    let listener = Listener::new();
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{} && echo connected",
        listener.port
    );
    let json = serde_json::json!({ "command": script, "description": "connect" }).to_string();
    for case in cases {
        let fx = Fixture::new();
        write_configs(&fx, case.user, case.workspace);
        let what = case.name;
        listener.accepted();
        let out = exec(&fx, case.flags, &script);
        let by_exec = listener.accepted();
        let bash = tool(&fx, "bash", &json, case.flags);
        let by_bash = listener.accepted();
        match case.expect {
            None => {
                assert_refused(&out, 125, what);
                assert_refused(&bash, 1, what);
                assert_eq!((by_exec, by_bash), (0, 0), "{what}: a command ran");
            }
            Some(allowed) => {
                let n = usize::from(allowed);
                assert_eq!(by_exec, n, "{what}: exec: {}", text(&out));
                assert_eq!(by_bash, n, "{what}: bash: {}", text(&bash));
                for out in [&out, &bash] {
                    let said = String::from_utf8_lossy(&out.stdout).contains("connected");
                    assert_eq!(said, allowed, "{what}: {}", text(out));
                }
            }
        }
    }
}

#[test]
fn the_shell_limits_of_a_config_reach_bash() {
    let fx = Fixture::new();
    write_configs(
        &fx,
        "timeout_ms = 300\nmax_output_bytes = 100\n",
        "max_output_bytes = 50\n",
    );
    let out = tool(
        &fx,
        "bash",
        r#"{"command": "head -c 5000 /dev/zero | tr '\\0' a", "description": "print"}"#,
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kept = stdout
        .lines()
        .next()
        .unwrap_or_default()
        .matches('a')
        .count();
    assert!(kept > 0 && kept <= 50, "kept {kept}: {}", text(&out));
    let out = tool(
        &fx,
        "bash",
        r#"{"command": "sleep 5", "description": "wait"}"#,
        &[],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("timed out") || stdout.contains("timeout"),
        "{}",
        text(&out)
    );
    // A workspace may not raise a cap.
    write_configs(&fx, "", "max_output_bytes = 1000000\n");
    let out = tool(
        &fx,
        "bash",
        r#"{"command": "true", "description": "nothing"}"#,
        &[],
    );
    assert_refused(&out, 1, "raised cap");
}

#[test]
fn config_show_says_where_each_value_came_from() {
    let fx = Fixture::new();
    write_configs(
        &fx,
        "mode = \"workspace-write\"\nnetwork = \"allow\"\nprotected = [\"mine\"]\n",
        "network = \"deny\"\nprotected = [\"theirs\"]\n",
    );
    let ws = fx.ws.to_str().expect("utf-8");
    let out = fx.dsh(&["config", "show", "-C", ws, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let values = &v["values"];
    assert_eq!(values["mode"]["value"], "workspace-write", "{v}");
    assert_eq!(values["mode"]["from"], "user", "{v}");
    let user_file = fx.home.join(".config/dsh/config.toml");
    assert_eq!(
        values["mode"]["file"].as_str().map(Path::new),
        Some(user_file.as_path()),
        "{v}"
    );
    assert_eq!(values["network"]["value"], "deny", "{v}");
    assert_eq!(values["network"]["from"], "workspace", "{v}");
    assert_eq!(values["timeout_ms"]["from"], "default", "{v}");
    let protected: Vec<(String, String)> = values["protected"]
        .as_array()
        .expect("list")
        .iter()
        .map(|e| {
            (
                e["value"].as_str().unwrap_or_default().to_owned(),
                e["from"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        protected,
        vec![
            ("mine".to_owned(), "user".to_owned()),
            ("theirs".to_owned(), "workspace".to_owned())
        ]
    );
    assert_eq!(v["files"]["workspace"]["trusted"], false, "{v}");
    // The text form says the same, one key per line.
    let out = fx.dsh(&["config", "show", "-C", ws]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let network = stdout
        .lines()
        .find(|l| l.starts_with("network "))
        .unwrap_or_default();
    assert!(
        network.contains("deny") && network.contains("(workspace "),
        "{stdout}"
    );
    // A bad file is the same CONFIG_INVALID every command gives.
    write_configs(&fx, "", "\nmode = \"sideways\"\n");
    let out = fx.dsh(&["config", "show", "-C", ws]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("CONFIG_INVALID") && stderr.contains(".dsh/config.toml:2: mode:"),
        "{stderr}"
    );
}

#[test]
fn writable_roots_reach_bash_the_file_tools_and_exec_alike() {
    if !bwrap_usable() {
        return;
    }
    for (what, workspace, allowed) in [
        ("user config", "", true),
        (
            "workspace config narrows it",
            "writable_roots = []\n",
            false,
        ),
    ] {
        let fx = Fixture::new();
        let extra = fx.base.join("extra");
        std::fs::create_dir_all(&extra).expect("extra");
        let user = format!(
            "mode = \"workspace-write\"\nwritable_roots = [{}]\n",
            serde_json::json!(extra.display().to_string())
        );
        write_configs(&fx, &user, workspace);
        let target = |name: &str| extra.join(name).display().to_string();
        let out = exec(&fx, &[], &format!("echo x > '{}'", target("by_exec")));
        let bash = tool(
            &fx,
            "bash",
            &serde_json::json!({
                "command": format!("echo x > '{}'", target("by_bash")),
                "description": "write",
            })
            .to_string(),
            &[],
        );
        let write = tool(
            &fx,
            "write",
            &serde_json::json!({"file_path": target("by_write"), "content": "x"}).to_string(),
            &[],
        );
        for (file, out) in [("by_exec", &out), ("by_bash", &bash), ("by_write", &write)] {
            assert_eq!(
                extra.join(file).exists(),
                allowed,
                "{what}: {file}: {}",
                text(out)
            );
        }
    }
}

/// Regression (found while adding trusted_workspaces): dsh's own config moves with
/// `$XDG_CONFIG_HOME`; a workspace holding that directory must not let a confined
/// command write the file that says which workspaces are trusted, even where the user
/// accepts the partial enforcement such a root otherwise gets.
#[test]
fn the_user_config_where_xdg_puts_it_stays_out_of_reach() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    let xdg = fx.ws.join("cfg");
    std::fs::create_dir_all(&xdg).expect("xdg");
    let ws = fx.ws.to_str().expect("utf-8");
    let script =
        "mkdir -p cfg/dsh && printf 'trusted_workspaces = [\"/\"]\\n' > cfg/dsh/config.toml";
    let out = fx.dsh_with(
        &[
            "exec",
            "-C",
            ws,
            "--mode",
            "workspace-write",
            "--allow-partial",
            "--",
            "bash",
            "-c",
            script,
        ],
        &[("XDG_CONFIG_HOME", &xdg)],
    );
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        std::fs::read_to_string(xdg.join("dsh/config.toml")).map_or(true, |t| t.is_empty()),
        "the command wrote the user's config: {}",
        text(&out)
    );
}

/// `dsh config show -C WS`: status and stderr.
fn show(fx: &Fixture) -> (Option<i32>, String) {
    let out = fx.dsh(&["config", "show", "-C", fx.ws.to_str().expect("utf-8")]);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A trusted workspace's config that is a link could be rewritten through the link's
/// target by a confined command and then widen the next run to no sandbox; a link to
/// `/dev/zero` would grow without bound, a FIFO would hang dsh. Each is refused, at once.
#[test]
fn a_config_file_that_is_a_link_a_fifo_or_a_device_is_refused() {
    let fx = Fixture::new();
    write_configs(&fx, "trusted_workspaces = [\"$WS\"]\n", "");
    let file = fx.ws.join(".dsh/config.toml");
    std::fs::create_dir_all(fx.ws.join("docs")).expect("docs");
    std::fs::write(fx.ws.join("docs/dsh.toml"), "mode = \"workspace-write\"\n").expect("doc");
    std::fs::remove_file(&file).expect("rm");
    std::os::unix::fs::symlink("../docs/dsh.toml", &file).expect("link");
    let (code, stderr) = show(&fx);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("CONFIG_INVALID") && stderr.contains("symbolic link"),
        "{stderr}"
    );
    // A linked `.dsh` is the same.
    std::fs::remove_dir_all(fx.ws.join(".dsh")).expect("rm .dsh");
    std::fs::rename(fx.ws.join("docs/dsh.toml"), fx.ws.join("docs/config.toml")).expect("mv");
    std::os::unix::fs::symlink("docs", fx.ws.join(".dsh")).expect("link");
    let (code, stderr) = show(&fx);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("symbolic link"), "{stderr}");
    std::fs::remove_file(fx.ws.join(".dsh")).expect("rm link");
    std::fs::create_dir(fx.ws.join(".dsh")).expect(".dsh");
    let fifo = std::process::Command::new("mkfifo")
        .arg(&file)
        .status()
        .expect("mkfifo");
    assert!(fifo.success());
    let (code, stderr) = show(&fx);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
    std::fs::remove_file(&file).expect("rm fifo");
    // The user's own config may be a link (dotfiles), but not to a device.
    let user = fx.home.join(".config/dsh/config.toml");
    std::fs::remove_file(&user).expect("rm user");
    std::os::unix::fs::symlink("/dev/zero", &user).expect("link");
    let (code, stderr) = show(&fx);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("not a regular file"), "{stderr}");
    std::fs::remove_file(&user).expect("rm user");
    std::fs::write(fx.base.join("mine.toml"), "mode = \"workspace-write\"\n").expect("mine");
    std::os::unix::fs::symlink(fx.base.join("mine.toml"), &user).expect("link");
    let (code, stderr) = show(&fx);
    assert_eq!(code, Some(0), "{stderr}");
    // And a file of a few lines, not gigabytes.
    std::fs::write(&file, "# x\n".repeat(300_000)).expect("big");
    let (code, stderr) = show(&fx);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("larger than"), "{stderr}");
}

/// A trusted workspace inside another workspace (or a writable root) keeps its `.dsh`
/// protected: a command run in the outer one must not plant a config there that the next
/// run in the trusted one obeys.
#[test]
fn a_trusted_workspace_inside_a_writable_root_keeps_its_config_out_of_reach() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    let sub = fx.ws.join("sub");
    std::fs::create_dir_all(&sub).expect("sub");
    write_configs(
        &fx,
        &format!(
            "trusted_workspaces = [{}]\n",
            serde_json::json!(sub.display().to_string())
        ),
        "",
    );
    let out = exec(
        &fx,
        &["--mode", "workspace-write"],
        "mkdir -p sub/.dsh; printf 'mode = \"danger-full-access\"\\n' > sub/.dsh/config.toml",
    );
    assert!(!sub.join(".dsh/config.toml").exists(), "{}", text(&out));
    // With a .dsh already there, its file stays as it was.
    std::fs::create_dir_all(sub.join(".dsh")).expect(".dsh");
    std::fs::write(sub.join(".dsh/config.toml"), "network = \"deny\"\n").expect("cfg");
    let out = exec(
        &fx,
        &["--mode", "workspace-write"],
        "printf 'mode = \"danger-full-access\"\\n' > sub/.dsh/config.toml; mv sub/.dsh sub/old",
    );
    assert_eq!(
        std::fs::read_to_string(sub.join(".dsh/config.toml")).expect("kept"),
        "network = \"deny\"\n",
        "{}",
        text(&out)
    );
}

/// A relative writable root of a trusted workspace's config that leads outside through a
/// link a command could plant is refused: it would make a directory outside writable.
#[test]
fn a_relative_writable_root_that_leads_outside_the_workspace_is_refused() {
    let fx = Fixture::new();
    write_configs(
        &fx,
        "trusted_workspaces = [\"$WS\"]\n",
        "mode = \"workspace-write\"\nwritable_roots = [\"build/out\"]\n",
    );
    std::fs::create_dir_all(fx.ws.join("build/out")).expect("out");
    assert_eq!(show(&fx).0, Some(0), "{}", show(&fx).1);
    let victim = fx.base.join("victim");
    std::fs::create_dir_all(&victim).expect("victim");
    std::fs::remove_dir(fx.ws.join("build/out")).expect("rm");
    std::os::unix::fs::symlink(&victim, fx.ws.join("build/out")).expect("link");
    let (code, stderr) = show(&fx);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(".dsh/config.toml:2: writable_roots:"),
        "{stderr}"
    );
    assert!(stderr.contains("leads outside the workspace"), "{stderr}");
}

/// A protected path reached through a link (`link/sub/x`, `link -> ../victim`) must not
/// make the link's target writable under `--allow-partial`: the bind that keeps a carve
/// in place would follow the link.
#[test]
fn a_protected_path_through_a_link_never_makes_its_target_writable() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    let victim = fx.base.join("victim");
    std::fs::create_dir_all(victim.join("sub")).expect("victim");
    std::os::unix::fs::symlink("../victim", fx.ws.join("link")).expect("link");
    write_configs(&fx, "", "protected = [\"link/sub/x\"]\n");
    let script = format!("echo pwned > '{}'", victim.join("sub/g").display());
    let out = exec(
        &fx,
        &["--mode", "workspace-write", "--allow-partial"],
        &script,
    );
    assert!(!victim.join("sub/g").exists(), "{}", text(&out));
}

/// A trusted workspace two levels inside a configured writable root cannot have the
/// directory above it renamed and a new config planted where it was; nor can a root
/// nested in another have a link put above it.
#[test]
fn a_root_inside_another_cannot_be_carried_away() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    let app = fx.ws.join("org/app");
    std::fs::create_dir_all(app.join(".dsh")).expect("app");
    std::fs::write(app.join(".dsh/config.toml"), "network = \"deny\"\n").expect("cfg");
    write_configs(
        &fx,
        &format!(
            "writable_roots = [{ws}]\ntrusted_workspaces = [{app}]\n",
            ws = serde_json::json!(fx.ws.display().to_string()),
            app = serde_json::json!(app.display().to_string()),
        ),
        "",
    );
    let app_dir = app.to_str().expect("utf-8");
    let script = format!(
        "cd '{}' && mv org org.old; mkdir -p org/app/.dsh && printf 'mode = \"danger-full-access\"\\n' > org/app/.dsh/config.toml",
        fx.ws.display()
    );
    let out = fx.dsh(&[
        "exec",
        "-C",
        app_dir,
        "--mode",
        "workspace-write",
        "--",
        "bash",
        "-c",
        &script,
    ]);
    assert!(!fx.ws.join("org.old").exists(), "renamed: {}", text(&out));
    assert_eq!(
        std::fs::read_to_string(app.join(".dsh/config.toml")).expect("kept"),
        "network = \"deny\"\n",
        "{}",
        text(&out)
    );
}

/// Every link of a trusted path that is a chain of links is protected, not only the
/// first: a command must not swap a later one to a directory with its own config.
#[test]
fn every_link_on_the_way_to_a_trusted_workspace_is_out_of_reach() {
    if !bwrap_usable() {
        return;
    }
    let fx = Fixture::new();
    let projects = fx.ws.join("projects");
    std::fs::create_dir_all(projects.join("app-v2")).expect("app");
    std::os::unix::fs::symlink("app-v2", projects.join("current")).expect("current");
    let code = fx.base.join("code");
    std::fs::create_dir_all(&code).expect("code");
    std::os::unix::fs::symlink(projects.join("current"), code.join("app")).expect("app");
    write_configs(
        &fx,
        &format!(
            "trusted_workspaces = [{}]\n",
            serde_json::json!(code.join("app").display().to_string())
        ),
        "",
    );
    let out = exec(
        &fx,
        &["--mode", "workspace-write"],
        "mkdir -p projects/evil/.dsh && printf 'mode = \"danger-full-access\"\\n' > projects/evil/.dsh/config.toml; ln -sfn evil projects/current",
    );
    assert_eq!(
        std::fs::read_link(projects.join("current")).expect("link"),
        Path::new("app-v2"),
        "the link was swapped: {}",
        text(&out)
    );
}

/// A workspace config with a second name is refused: it could be rewritten through that
/// name once trusted.
#[test]
fn a_workspace_config_with_a_second_name_is_refused() {
    let fx = Fixture::new();
    write_configs(&fx, "", "network = \"deny\"\n");
    std::fs::hard_link(fx.ws.join(".dsh/config.toml"), fx.ws.join("NOTES")).expect("link");
    let (code, stderr) = show(&fx);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("another name"), "{stderr}");
}
