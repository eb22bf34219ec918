//! [`LocalPwsh`]: the shell seam as an unconfined PowerShell 7 (`pwsh`) on this machine.
//!
//! A [`ShellExecutor`] with the [`Pwsh`] dialect: each call runs
//! `pwsh -NoLogo -NoProfile -NonInteractive -Command PREAMBLE+COMMAND`, the command as one
//! argv element with no quoting layer, with `NO_COLOR=1 PAGER=cat GIT_PAGER=cat` (no
//! `TERM`: PowerShell renders for the console it finds).
//!
//! # Limits
//! [`ENCODING_PREAMBLE`] sits on the command's first line (so PowerShell's line numbers
//! stay right); a command that must begin with `param(...)`, `#requires` or `using`
//! therefore fails.

use std::ffi::OsString;

use crate::executor::{Dialect, ShellExecutor};

/// Prepended to every command: UTF-8 without a byte-order mark for both the console and
/// the pipeline, so output decodes the same on every platform.
pub const ENCODING_PREAMBLE: &str =
    "[Console]::OutputEncoding = [System.Text.UTF8Encoding]::new($false); \
     $OutputEncoding = [System.Text.UTF8Encoding]::new($false); ";

/// Variables every pwsh command gets unless the request overrides them.
pub const ENV_OVERRIDES: [(&str, &str); 3] =
    [("NO_COLOR", "1"), ("PAGER", "cat"), ("GIT_PAGER", "cat")];

/// The PowerShell dialect, with the `pwsh` to run.
#[derive(Clone, Debug)]
pub struct Pwsh {
    program: OsString,
}

impl Pwsh {
    /// Runs `program` (an absolute path, or a name looked up on `PATH`).
    pub fn new(program: impl Into<OsString>) -> Pwsh {
        Pwsh {
            program: program.into(),
        }
    }
}

impl Default for Pwsh {
    /// `pwsh`, looked up on the child's `PATH`.
    fn default() -> Self {
        Pwsh::new("pwsh")
    }
}

impl Dialect for Pwsh {
    fn name(&self) -> &str {
        "pwsh"
    }

    fn argv(&self, command: &str) -> Vec<OsString> {
        let mut script = String::with_capacity(ENCODING_PREAMBLE.len() + command.len());
        script.push_str(ENCODING_PREAMBLE);
        script.push_str(command);
        vec![
            self.program.clone(),
            "-NoLogo".into(),
            "-NoProfile".into(),
            "-NonInteractive".into(),
            "-Command".into(),
            script.into(),
        ]
    }

    fn env_overrides(&self) -> &[(&str, &str)] {
        &ENV_OVERRIDES
    }
}

/// The shell seam as unconfined PowerShell on this machine.
///
/// # Requires
/// `pwsh` (PowerShell 7) on the `PATH` of the child environment, or the path given to
/// [`Pwsh::new`].
pub type LocalPwsh = ShellExecutor<Pwsh>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_is_the_flags_then_preamble_and_command_as_one_element() {
        let cmd = "Write-Output '你好'; $x = \"a b\"";
        let argv = Pwsh::default().argv(cmd);
        let expected: Vec<OsString> = vec![
            "pwsh".into(),
            "-NoLogo".into(),
            "-NoProfile".into(),
            "-NonInteractive".into(),
            "-Command".into(),
            format!("{ENCODING_PREAMBLE}{cmd}").into(),
        ];
        assert_eq!(argv, expected);
        assert!(ENCODING_PREAMBLE.ends_with("; ") && !ENCODING_PREAMBLE.contains('\n'));
    }

    #[test]
    fn a_configured_path_is_used_verbatim() {
        assert_eq!(
            Pwsh::new("/opt/pwsh/pwsh").argv("x")[0],
            OsString::from("/opt/pwsh/pwsh")
        );
    }

    #[test]
    fn no_term_override() {
        assert!(!Pwsh::default()
            .env_overrides()
            .iter()
            .any(|(k, _)| *k == "TERM"));
    }
}
