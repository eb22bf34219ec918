//! Behaviour of the local subprocess provider with real processes.

mod support;

mod capture;
mod environment;
mod spawn;
mod tree_kill;
