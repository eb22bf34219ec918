//! The official MCP Python SDK drives `dsh mcp` (`tests/mcp_sdk/drive.py`) once per
//! protocol era: `legacy` (initialize handshake, elicitation as a server request) and
//! `auto` (2026-07-28, elicitation through `InputRequiredResult` and a retry).
//!
//! Needs `DSH_MCP_PYTHON`: a Python with `mcp` installed (`.ci/run` makes one). Without
//! it the test records a skip with `dsh_testkit` (a failure where the SDKs are required: CI).
//!
//! Every tool's every result, error results included, is validated against its output
//! schema by each official SDK (`tests/mcp_sdk/every_tool.py` and `every_tool.mjs`): the
//! Python SDK of `DSH_MCP_PYTHON` (2.x) and of `DSH_MCP_PYTHON_V1` (1.x), and the
//! TypeScript SDK v1 (`@modelcontextprotocol/sdk`) and v2 (`@modelcontextprotocol/client`)
//! installed under `DSH_TS_SDK_DIR`. Each is required where the SDKs are.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

/// This checkout's `crates/dsh`: `cargo test` names it at run time; the compile-time
/// path can be another checkout's when a target directory is shared.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| env!("CARGO_MANIFEST_DIR").into(), PathBuf::from)
}

/// The value of `var`, or `None` after `dsh_testkit::skip` (a failure where the SDKs are
/// required).
fn required(var: &str, what: &str) -> Option<OsString> {
    let value = std::env::var_os(var);
    if value.is_none() {
        dsh_testkit::skip(
            dsh_testkit::Need::McpSdk,
            &format!("{var} is not set to {what} (see .ci/run)"),
        );
    }
    value
}

/// Runs `program args… DSH SCRATCH` and checks it exits 0 printing `want`.
fn drive(program: &OsString, args: &[OsString], env: &[(&str, &OsString)], want: &str) {
    let scratch = tempfile::tempdir().expect("tempdir");
    let out = Command::new(program)
        .args(args)
        .arg(env!("CARGO_BIN_EXE_dsh"))
        .arg(scratch.path())
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .output()
        .expect("run the SDK driver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(want),
        "{args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

// Regression: issue 22. An error result whose structured form broke its tool's output
// schema made the TypeScript SDK throw -32602, and clients showed that instead of dsh's
// message.
#[test]
fn every_sdk_validates_every_result_of_every_tool_against_its_output_schema() {
    let script = manifest_dir()
        .join("tests/mcp_sdk/every_tool.py")
        .into_os_string();
    for (var, version) in [("DSH_MCP_PYTHON", "2"), ("DSH_MCP_PYTHON_V1", "1")] {
        if let Some(python) = required(var, &format!("a Python with `mcp` {version}.x")) {
            drive(
                &python,
                std::slice::from_ref(&script),
                &[],
                "244 calls validated",
            );
        }
    }
    let Some(dir) = required(
        "DSH_TS_SDK_DIR",
        "a directory whose node_modules hold the TypeScript SDKs",
    ) else {
        return;
    };
    let script = manifest_dir()
        .join("tests/mcp_sdk/every_tool.mjs")
        .into_os_string();
    for sdk in ["v1", "v2"] {
        drive(
            &OsString::from("node"),
            &[script.clone(), "--sdk".into(), sdk.into()],
            &[("DSH_TS_SDK_DIR", &dir)],
            &format!("typescript-sdk {sdk}: 244 calls validated"),
        );
    }
}

#[test]
fn the_official_python_sdk_drives_dsh_mcp_in_both_protocol_eras() {
    let Some(python) = required("DSH_MCP_PYTHON", "a Python with the `mcp` package") else {
        return;
    };
    let script = manifest_dir().join("tests/mcp_sdk/drive.py");
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
