//! Behaviour of the bash executor with real processes.

mod background;
mod pwsh;
mod run;
