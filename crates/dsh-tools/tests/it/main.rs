//! The tools crate with real processes, sandboxes, files and SQLite.

mod files;
mod pipeline;
mod search;
mod support;
