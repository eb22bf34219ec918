//! The ways a confined command could get code run on the host later, tried as an attacker
//! would through the real `dsh` binary, and what must still work: each finding of the
//! sandbox-hardening issue has a test here that fails on a dsh without its fix.
//!
//! The tests need bubblewrap (the runner that enforces workspace-write in full): without
//! it each records a skip with `dsh_testkit` (a failure where bubblewrap is required). Each test
//! runs dsh with its own `HOME` and `XDG_CONFIG_HOME`, so the user's files and git config
//! play no part.

mod check_limits;
mod config_files;
mod deny_read;
mod doctor;
mod fail_closed;
mod git_dirs;
mod git_workflow;
mod home;
mod host_tool_files;
mod host_tools;
mod placeholders;
mod small;
mod support;
mod toolchains;
