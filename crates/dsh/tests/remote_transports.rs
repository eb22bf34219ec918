//! The ssh and docker transports' command lines, run for real through stand-ins for
//! `ssh` and `docker` that start the far command here: the far command line survives a
//! POSIX shell (quotes and spaces in the far workspace), and a far side without dsh is
//! `REMOTE_INCOMPATIBLE`. (Real sshd and dockerd come with the seams over the channel.)
//!
//! One test in this file: it puts the stand-ins first on this process's `PATH`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use dsh_core::ErrorCode;
use dsh_remote::{Channel, WorldUrl};
use serde_json::json;

/// Writes an executable script `name` in `dir`.
fn script(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, body).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_and_docker_command_lines_reach_the_far_dsh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    // ssh's last argument is the far command line, read by the far login shell.
    script(
        &bin,
        "ssh",
        "#!/bin/sh\nfor last; do :; done\nexec /bin/sh -c \"$last\"\n",
    );
    // docker exec -i CONTAINER PROGRAM ARGS…
    script(
        &bin,
        "docker",
        "#!/bin/sh\n[ \"$1 $2\" = \"exec -i\" ] || exit 2\nshift 3\nexec \"$@\"\n",
    );
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::set_var("PATH", format!("{}:{path}", bin.display()));
    let far_ws = dir.path().join("it's a far workspace");
    std::fs::create_dir(&far_ws).expect("far workspace");
    let dsh = env!("CARGO_BIN_EXE_dsh");
    for scheme in ["ssh://far-host", "docker://far-box"] {
        let url: WorldUrl = format!("{scheme}{}", far_ws.display())
            .parse()
            .expect("url");
        let far = Channel::connect(&url, dsh)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(far.info().version, env!("CARGO_PKG_VERSION"));
        assert_eq!(
            far.request("ping", json!({})).await.expect("ping"),
            json!({})
        );
        let report = far.request("doctor", json!({})).await.expect("doctor");
        assert_eq!(
            report["workspace"],
            far_ws.display().to_string(),
            "{url}: the far workspace arrived whole"
        );
        drop(far);
        // No dsh there: the far shell's 127 means exactly that for ssh and docker.
        let e = Channel::connect(&url, "/nonexistent/dsh")
            .await
            .expect_err("no dsh there");
        assert_eq!(e.code(), ErrorCode::RemoteIncompatible, "{url}: {e}");
        assert!(
            e.message()
                .contains("there is no /nonexistent/dsh on the far side"),
            "{url}: {e}"
        );
    }
}
