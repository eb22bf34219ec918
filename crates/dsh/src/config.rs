//! The configuration files: the user's (`$XDG_CONFIG_HOME/dsh/config.toml`, else
//! `~/.config/dsh/config.toml`) and the workspace's (`.dsh/config.toml` in the workspace).
//!
//! Keys (each optional):
//!
//! | key | type | where | meaning |
//! |---|---|---|---|
//! | `allow_partial` | bool | user | run where the sandbox is enforced only in part (default false: refused) |
//! | `protected` | list of paths | both | more protected paths (relative: in the workspace root) |
//! | `deny_read` | list of paths | both | more paths confined commands and the file tools may not read (`~/` allowed; `*` in the last component) |
//! | `env_allow` | list of names | user | environment variables let through the credential scrub |
//!
//! The workspace's file travels with the repository, so it may only narrow the sandbox:
//! more protected paths and more read denials. A key that would widen it there is
//! `CONFIG_INVALID`, as are unknown keys, wrong types and bad values, each naming the file,
//! the line and the key; nothing runs. Flags add to what the files say.

use std::path::{Path, PathBuf};

use dsh_core::HarnessError;
use serde::Deserialize;

/// The configuration in force for one workspace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Whether partial enforcement is accepted (user config only).
    pub allow_partial: bool,
    /// More protected paths: absolute, or relative to the workspace root.
    pub protected: Vec<PathBuf>,
    /// More read denials: absolute patterns.
    pub deny_read: Vec<PathBuf>,
    /// Names let through the environment scrub (user config only).
    pub env_allow: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    allow_partial: Option<bool>,
    protected: Option<Vec<String>>,
    deny_read: Option<Vec<String>>,
    env_allow: Option<Vec<String>>,
}

/// Which file a value came from: what it may set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    User,
    Workspace,
}

/// The user's config file, where dsh looks for it.
pub fn user_config_path() -> Option<PathBuf> {
    match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => Some(PathBuf::from(x).join("dsh/config.toml")),
        None => dsh_sandbox::home_dir().map(|h| h.join(".config/dsh/config.toml")),
    }
}

/// The configuration for `workspace`: the user's file, then the workspace's (see the
/// [module docs](self)). Missing files are empty.
///
/// # Errors
/// `CONFIG_INVALID` naming the file, line and key.
pub fn load(workspace: &Path) -> Result<Config, HarnessError> {
    let mut config = Config::default();
    if let Some(user) = user_config_path() {
        apply(&mut config, &user, Origin::User, workspace)?;
    }
    let ws = workspace.join(".dsh/config.toml");
    apply(&mut config, &ws, Origin::Workspace, workspace)?;
    Ok(config)
}

fn apply(
    config: &mut Config,
    path: &Path,
    origin: Origin,
    workspace: &Path,
) -> Result<(), HarnessError> {
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| {
            HarnessError::config_invalid(format!("{}: not UTF-8 text", path.display()))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(
                HarnessError::config_invalid(format!("{}: cannot read it", path.display()))
                    .with_source(e),
            )
        }
    };
    let file: File = toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let at = line.map(|l| format!(":{l}")).unwrap_or_default();
        HarnessError::config_invalid(format!(
            "{}{at}: {}; the keys are allow_partial, protected, deny_read and env_allow",
            path.display(),
            e.message().trim_end()
        ))
    })?;
    let invalid = |key: &str, why: &str| {
        HarnessError::config_invalid(format!(
            "{}:{}: {key}: {why}",
            path.display(),
            line_of(&text, key)
        ))
    };
    let widening = |key: &str| {
        invalid(
            key,
            &format!(
                "a workspace's config travels with its repository, so it may only narrow the \
                 sandbox; set {key} in your own config ({}) instead",
                user_config_path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "~/.config/dsh/config.toml".into())
            ),
        )
    };
    if let Some(v) = file.allow_partial {
        if origin == Origin::Workspace {
            return Err(widening("allow_partial"));
        }
        config.allow_partial = v;
    }
    if let Some(names) = file.env_allow {
        if origin == Origin::Workspace {
            return Err(widening("env_allow"));
        }
        for n in names {
            if n.is_empty() || n.contains('=') || n.contains('\0') {
                return Err(invalid(
                    "env_allow",
                    &format!("{n:?} is not a variable name"),
                ));
            }
            config.env_allow.push(n);
        }
    }
    for p in file.protected.unwrap_or_default() {
        let path = path_value(&p).ok_or_else(|| {
            invalid(
                "protected",
                &format!("{p:?} is not a plain path (no empty, `.` or `..` parts)"),
            )
        })?;
        config.protected.push(path);
    }
    for p in file.deny_read.unwrap_or_default() {
        let path = path_value(&p).ok_or_else(|| {
            invalid(
                "deny_read",
                &format!("{p:?} is not a plain path (no empty, `.` or `..` parts)"),
            )
        })?;
        let path = match (path.is_absolute(), origin) {
            (true, _) => path,
            (false, Origin::Workspace) => workspace.join(path),
            (false, Origin::User) => {
                return Err(invalid(
                    "deny_read",
                    &format!("{p:?} must be absolute or start with ~/"),
                ))
            }
        };
        config.deny_read.push(path);
    }
    Ok(())
}

/// A path value: `~/` expanded; `None` for an empty one, one with a NUL byte, or one with
/// a `.` or `..` component (`protected = ["../.."]` must not reach outside the workspace).
fn path_value(v: &str) -> Option<PathBuf> {
    use std::path::Component;
    if v.trim().is_empty() || v.contains('\0') {
        return None;
    }
    let p = dsh_sandbox::deny_read::expand_home(v)?;
    p.components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        .then_some(p)
}

/// The line (1-based) where `key` is set in `text`, or 1.
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .map_or(1, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_ws(text: &str) -> Result<Config, HarnessError> {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(d.path().join(".dsh")).expect("dir");
        std::fs::write(d.path().join(".dsh/config.toml"), text).expect("write");
        let mut c = Config::default();
        apply(
            &mut c,
            &d.path().join(".dsh/config.toml"),
            Origin::Workspace,
            d.path(),
        )
        .map(|()| c)
    }

    #[test]
    fn a_workspace_config_may_narrow() {
        let c = load_ws("protected = [\"secrets\"]\ndeny_read = [\"keys/*\"]\n").expect("ok");
        assert_eq!(c.protected, vec![PathBuf::from("secrets")]);
        assert_eq!(c.deny_read.len(), 1);
        assert!(c.deny_read[0].ends_with("keys/*"));
    }

    #[test]
    fn a_workspace_config_may_not_widen() {
        for (text, key, line) in [
            ("# c\nallow_partial = true\n", "allow_partial", 2),
            ("env_allow = [\"AWS_SECRET_ACCESS_KEY\"]\n", "env_allow", 1),
        ] {
            let e = load_ws(text).expect_err("must fail");
            assert_eq!(e.code().as_str(), "CONFIG_INVALID");
            let m = e.message();
            assert!(m.contains(&format!("config.toml:{line}: {key}:")), "{m}");
            assert!(m.contains("may only narrow"), "{m}");
        }
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_file_and_line() {
        let e = load_ws("\nmode = \"danger-full-access\"\n").expect_err("must fail");
        assert!(e.message().contains("config.toml:2:"), "{}", e.message());
        assert!(e.message().contains("mode"), "{}", e.message());
        let e = load_ws("protected = \"x\"\n").expect_err("must fail");
        assert!(e.message().contains("config.toml:1:"), "{}", e.message());
        let e = load_ws("protected = [\"\"]\n").expect_err("must fail");
        assert!(e.message().contains("protected:"), "{}", e.message());
        // Regression: a review found `protected = ["../../x"]` made the carve bind the
        // workspace's parents, up to `/`, writable.
        for bad in ["../../x", "a/../../b", "./x"] {
            let e = load_ws(&format!("protected = [\"{bad}\"]\n")).expect_err(bad);
            assert!(e.message().contains("not a plain path"), "{}", e.message());
        }
    }
}
