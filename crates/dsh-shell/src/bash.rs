//! [`LocalBash`]: the shell seam as an unconfined `bash -c` on this machine.
//!
//! A [`ShellExecutor`] with the [`Bash`] dialect: each call runs `bash -c COMMAND`, a
//! non-login, non-interactive shell that reads no rc files (bash still honours an ambient
//! `BASH_ENV`), with `NO_COLOR=1 TERM=dumb PAGER=cat GIT_PAGER=cat`.

use std::ffi::OsString;

use crate::executor::{Dialect, ShellExecutor};

/// Variables every bash command gets unless the request overrides them: no colour codes,
/// a dumb terminal, and no pager waiting for a keypress.
pub const ENV_OVERRIDES: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// The bash dialect: `bash -c COMMAND`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bash;

impl Dialect for Bash {
    fn name(&self) -> &str {
        "bash"
    }

    fn argv(&self, command: &str) -> Vec<OsString> {
        vec!["bash".into(), "-c".into(), command.into()]
    }

    fn env_overrides(&self) -> &[(&str, &str)] {
        &ENV_OVERRIDES
    }
}

/// The shell seam as unconfined `bash -c` on this machine.
///
/// # Requires
/// `bash` on the `PATH` of the child environment.
pub type LocalBash = ShellExecutor<Bash>;
