//! Behaviour of the bash executor with real processes.

mod support;

mod background;
mod pwsh;
mod run;
mod sandbox;
mod sandbox_seam;
