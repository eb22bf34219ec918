//! Behaviour of the local subprocess provider with real processes.

mod support;

mod capture;
mod environment;
mod process_limit;
mod spawn;
mod tree_kill;
