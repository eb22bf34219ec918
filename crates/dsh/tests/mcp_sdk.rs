//! The official MCP Python SDK drives `dsh mcp` (`tests/mcp_sdk/drive.py`) once per
//! protocol era: `legacy` (initialize handshake, elicitation as a server request) and
//! `auto` (2026-07-28, elicitation through `InputRequiredResult` and a retry).
//!
//! Needs `DSH_MCP_PYTHON`: a Python with `mcp` installed (`.ci/run` makes one). Without
//! it the test says so and passes, unless `DSH_REQUIRE_MCP_SDK` is set (CI sets it).

use std::process::Command;

#[test]
fn the_official_python_sdk_drives_dsh_mcp_in_both_protocol_eras() {
    let Some(python) = std::env::var_os("DSH_MCP_PYTHON") else {
        assert!(
            std::env::var_os("DSH_REQUIRE_MCP_SDK").is_none(),
            "DSH_REQUIRE_MCP_SDK is set but DSH_MCP_PYTHON is not"
        );
        eprintln!("skipped: set DSH_MCP_PYTHON to a Python with the `mcp` package (see .ci/run)");
        return;
    };
    // `cargo test` names this checkout at run time; the compile-time path can be another
    // checkout's when a target directory is shared (cargo reuses the test binary).
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    );
    let script = manifest_dir.join("tests/mcp_sdk/drive.py");
    for mode in ["legacy", "auto"] {
        let scratch = tempfile::tempdir().expect("tempdir");
        let out = Command::new(&python)
            .arg(&script)
            .args([env!("CARGO_BIN_EXE_dsh"), mode])
            .arg(scratch.path())
            .output()
            .expect("run the SDK driver");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{mode}: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains(&format!("[{mode}] ok")), "{stdout}");
        let era = if mode == "auto" {
            "2026-07-28"
        } else {
            "2025-11-25"
        };
        assert!(
            stdout.contains(&format!("protocol {era}")),
            "{mode} negotiated {era}: {stdout}"
        );
    }
}
