//! The built-in tools, by family: [`bash`] (one-shot, persistent, in the background),
//! the [`files`] tools (`read`, `write`, `edit`), [`search`] (`glob`, `grep`),
//! [`image`] (`read_image`), the [`terminal`] tools and the [`jobs`] tools.

pub mod bash;
pub mod files;
pub mod image;
pub mod jobs;
pub(crate) mod output;
pub mod search;
pub mod terminal;
