//! The child environment: the host's, scrubbed of credentials and `DSH_*`, plus the
//! caller's overlay.

use std::collections::BTreeMap;
use std::ffi::OsString;

/// The prefix of every environment variable dsh manages itself. Ambient `DSH_*` values
/// never reach a child; only explicit ones do.
pub const DSH_ENV_PREFIX: &str = "DSH_";

/// An environment overlay: `Some(value)` sets a name, `None` removes it (a tombstone).
/// Explicit entries win over the scrub, so a caller can opt a credential back in.
pub type EnvOverlay = BTreeMap<String, Option<String>>;

/// True when `name` looks like a credential: it contains `KEY`, `PASSWORD`, `SECRET` or
/// `TOKEN`, case-insensitively (a substring test on the name, as in the reference).
pub fn is_sensitive_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["KEY", "PASSWORD", "SECRET", "TOKEN"]
        .iter()
        .any(|p| upper.contains(p))
}

/// True when `name` is a `DSH_*` name, case-insensitively.
pub fn is_dsh_name(name: &str) -> bool {
    name.len() >= DSH_ENV_PREFIX.len()
        && name.as_bytes()[..DSH_ENV_PREFIX.len()].eq_ignore_ascii_case(DSH_ENV_PREFIX.as_bytes())
}

/// The host environment without credential-shaped names and without `DSH_*`. `PATH`,
/// `HOME`, locale and proxy variables survive. Names that are not UTF-8 are kept as they
/// are (they cannot match the patterns, which are ASCII).
pub fn scrubbed_host_env() -> Vec<(OsString, OsString)> {
    std::env::vars_os()
        .filter(|(k, _)| match k.to_str() {
            Some(k) => !is_sensitive_name(k) && !is_dsh_name(k),
            None => true,
        })
        .collect()
}

/// The environment a child gets: [`scrubbed_host_env`] overlaid with `overlay`.
pub fn child_env(overlay: &EnvOverlay) -> Vec<(OsString, OsString)> {
    let mut env: BTreeMap<OsString, OsString> = scrubbed_host_env().into_iter().collect();
    for (k, v) in overlay {
        match v {
            Some(v) => env.insert(k.into(), v.into()),
            None => env.remove(std::ffi::OsStr::new(k)),
        };
    }
    env.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_and_dsh_names_are_recognised() {
        for n in [
            "API_KEY",
            "my_token",
            "DB_PASSWORD",
            "aws_secret_access",
            "KEYBOARD",
        ] {
            assert!(is_sensitive_name(n), "{n}");
        }
        for n in ["PATH", "HOME", "LANG", "http_proxy"] {
            assert!(!is_sensitive_name(n), "{n}");
        }
        assert!(is_dsh_name("DSH_HOME"));
        assert!(is_dsh_name("dsh_home"));
        assert!(!is_dsh_name("DS"));
        assert!(!is_dsh_name("XDSH_A"));
    }

    #[test]
    fn overlay_sets_and_tombstones_remove() {
        let mut o = EnvOverlay::new();
        o.insert("DSH_X".into(), Some("1".into()));
        o.insert("PATH".into(), None);
        let env = child_env(&o);
        assert!(env.iter().any(|(k, v)| k == "DSH_X" && v == "1"));
        assert!(!env.iter().any(|(k, _)| k == "PATH"));
    }
}
