//! The tools crate with real processes, sandboxes, files and SQLite.

mod approval_action;
mod background_jobs;
mod bounds;
mod files;
mod panics;
mod persistent_bash;
mod pipeline;
mod policy_service;
mod presets;
mod search;
mod support;
mod write_scope;
