//! Finding the executable a command names, with the errors a person can act on.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use dsh_core::{ErrorCode, HarnessError};

/// The executable file `command` names.
///
/// - An absolute path must be an executable regular file.
/// - A bare name is searched in `path_var` (`:`-separated); relative entries, and the
///   empty entry, resolve against `relative_base`.
/// - A relative path with a `/` resolves against `relative_base` when `allow_relative`,
///   and is refused otherwise (no guessing which directory was meant).
///
/// # Errors
/// `INVALID_ARGUMENT` for an empty command or a refused relative path;
/// `PROCESS_NOT_EXECUTABLE` for a path that is not an executable file;
/// `PROCESS_NOT_FOUND` for a bare name missing from `PATH` or a missing path.
pub(crate) fn find_program(
    command: &OsStr,
    path_var: Option<&OsStr>,
    relative_base: &Path,
    allow_relative: bool,
) -> Result<PathBuf, HarnessError> {
    if command.is_empty() {
        return Err(HarnessError::invalid_argument(
            "executable must be non-empty",
        ));
    }
    let shown = quoted(command);
    let p = Path::new(command);
    if command.as_bytes().contains(&b'/') {
        let candidate = if p.is_absolute() {
            p.to_path_buf()
        } else if allow_relative {
            relative_base.join(p)
        } else {
            return Err(HarnessError::invalid_argument(format!(
                "command {shown} is a relative path; use an absolute path or a bare PATH name"
            )));
        };
        return match check(&candidate) {
            Check::Executable => Ok(candidate),
            Check::Missing => Err(HarnessError::new(
                ErrorCode::ProcessNotFound,
                format!("command {shown} does not exist"),
            )),
            Check::NotExecutable => Err(HarnessError::new(
                ErrorCode::ProcessNotExecutable,
                format!("command {shown} is not an executable file"),
            )),
        };
    }
    let path_var = path_var
        .map(OsStr::to_os_string)
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    for dir in path_var.as_bytes().split(|b| *b == b':') {
        let dir = Path::new(OsStr::from_bytes(dir));
        let dir = if dir.is_absolute() {
            dir.to_path_buf()
        } else {
            relative_base.join(dir)
        };
        let candidate = dir.join(p);
        if check(&candidate) == Check::Executable {
            return Ok(candidate);
        }
    }
    Err(HarnessError::new(
        ErrorCode::ProcessNotFound,
        format!("command {shown} was not found on PATH"),
    ))
}

#[derive(PartialEq, Eq)]
enum Check {
    Executable,
    NotExecutable,
    Missing,
}

fn check(p: &Path) -> Check {
    match std::fs::metadata(p) {
        Err(_) => Check::Missing,
        Ok(m) if !m.is_file() => Check::NotExecutable,
        Ok(_) => match rustix::fs::access(p, rustix::fs::Access::EXEC_OK) {
            Ok(()) => Check::Executable,
            Err(_) => Check::NotExecutable,
        },
    }
}

/// The command as a JSON string, so odd bytes and quotes show unambiguously.
pub(crate) fn quoted(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<PathBuf, HarnessError>) -> (ErrorCode, String) {
        let e = r.expect_err("should fail");
        (e.code(), e.message().to_owned())
    }

    #[test]
    fn resolves_absolute_and_path_names() {
        let base = Path::new("/");
        assert_eq!(
            find_program("/bin/sh".as_ref(), None, base, false).ok(),
            Some(PathBuf::from("/bin/sh"))
        );
        let got = find_program(
            "sh".as_ref(),
            Some("/nonexistent:/bin".as_ref()),
            base,
            false,
        )
        .ok();
        assert_eq!(got, Some(PathBuf::from("/bin/sh")));
    }

    #[test]
    fn relative_path_entries_resolve_against_the_base() {
        let got = find_program("sh".as_ref(), Some("bin".as_ref()), Path::new("/"), false).ok();
        assert_eq!(got, Some(PathBuf::from("/bin/sh")));
    }

    #[test]
    fn each_miss_has_its_pinned_error() {
        let base = Path::new("/");
        assert_eq!(
            code(find_program("".as_ref(), None, base, false)),
            (
                ErrorCode::InvalidArgument,
                "executable must be non-empty".into()
            )
        );
        assert_eq!(
            code(find_program("bin/sh".as_ref(), None, base, false)),
            (
                ErrorCode::InvalidArgument,
                "command \"bin/sh\" is a relative path; use an absolute path or a bare PATH name"
                    .into()
            )
        );
        assert_eq!(
            code(find_program("/bin".as_ref(), None, base, false)),
            (
                ErrorCode::ProcessNotExecutable,
                "command \"/bin\" is not an executable file".into()
            )
        );
        assert_eq!(
            code(find_program("/no/such/prog".as_ref(), None, base, false)),
            (
                ErrorCode::ProcessNotFound,
                "command \"/no/such/prog\" does not exist".into()
            )
        );
        assert_eq!(
            code(find_program(
                "no-such-prog-dsh".as_ref(),
                Some("/bin".as_ref()),
                base,
                false
            )),
            (
                ErrorCode::ProcessNotFound,
                "command \"no-such-prog-dsh\" was not found on PATH".into()
            )
        );
        let plain = std::env::temp_dir().join(format!("dsh-resolve-{}", std::process::id()));
        std::fs::write(&plain, "data").expect("write");
        let got = code(find_program(plain.as_os_str(), None, base, false)).0;
        let _ = std::fs::remove_file(&plain);
        assert_eq!(got, ErrorCode::ProcessNotExecutable);
    }

    #[test]
    fn relative_paths_resolve_against_the_base_when_allowed() {
        let got = find_program("bin/sh".as_ref(), None, Path::new("/"), true).ok();
        assert_eq!(got, Some(PathBuf::from("/bin/sh")));
    }
}
