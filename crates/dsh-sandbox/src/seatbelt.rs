//! The macOS Seatbelt (`sandbox-exec`) profile, as a pure function.
//!
//! The profile denies by default, then allows what a command needs to run (exec, fork,
//! reads, sysctl and Mach lookups, ptys), writes to `/dev/null`, and under workspace-write
//! writes beneath each writable root. Protected paths are denied afterwards (later rules
//! win in SBPL), which also keeps a missing one from being created. The network is allowed
//! only with [`crate::Network::Allow`]. Reading data in a closed home is denied, then
//! allowed again beneath each allowed path and root (a home's metadata stays readable, so
//! paths through it resolve); reading a denied path (see [`deny_read`](crate::deny_read))
//! is denied last.
//!
//! Paths never appear in the profile text: each is a `-D NAME=PATH` parameter read with
//! `(param "NAME")`, so no path can break out of its string.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::{Network, SandboxMode, SandboxPolicy};

/// A profile and the parameters it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Profile {
    /// The SBPL text.
    pub text: String,
    /// `(name, path)` pairs passed as `-D name=path`.
    pub params: Vec<(String, PathBuf)>,
}

const BASE: &str = "(version 1)
(deny default)
(allow process-exec)
(allow process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(allow file-read*)
(allow file-ioctl)
(allow sysctl-read)
(allow mach-lookup)
(allow ipc-posix-shm*)
(allow pseudo-tty)
(allow file-write* (literal \"/dev/null\"))
";

/// The profile for `policy` (a confined mode); `temp` is the private temp directory,
/// writable under workspace-write; `denied` the paths the policy denies for reading,
/// expanded ([`deny_read::expand`](crate::deny_read::expand)); `home` its home rule.
pub fn profile(
    policy: &SandboxPolicy,
    temp: Option<&Path>,
    denied: &[PathBuf],
    home: &crate::deny_read::HomeRule,
) -> Profile {
    let mut text = String::from(BASE);
    let mut params = Vec::new();
    if !home.homes.is_empty() {
        let list = |kind: &str, paths: Vec<PathBuf>, params: &mut Vec<(String, PathBuf)>| {
            let mut out = String::new();
            for (i, p) in paths.into_iter().enumerate() {
                let name = format!("{kind}_{i}");
                out.push_str(&format!(" (subpath (param \"{name}\"))"));
                params.push((name, p));
            }
            out
        };
        let closed = list("CLOSED", home.homes.clone(), &mut params);
        text.push_str(&format!(
            "(deny file-read*{closed})\n(allow file-read-metadata{closed})\n"
        ));
        let mut open: Vec<PathBuf> = home.allowed.iter().map(|(_, c)| c.clone()).collect();
        open.extend(temp.map(Path::to_path_buf));
        let open = list("OPEN", open, &mut params);
        if !open.is_empty() {
            text.push_str(&format!("(allow file-read*{open})\n"));
        }
    }
    if policy.mode == SandboxMode::WorkspaceWrite {
        let mut roots = policy.writable_dirs();
        roots.extend(temp.map(Path::to_path_buf));
        if !roots.is_empty() {
            text.push_str("(allow file-write*");
            for (i, root) in roots.into_iter().enumerate() {
                let name = format!("WRITABLE_{i}");
                text.push_str(&format!(" (subpath (param \"{name}\"))"));
                params.push((name, root));
            }
            text.push_str(")\n");
        }
        if !policy.protected.is_empty() {
            text.push_str("(deny file-write*");
            for (i, p) in policy.protected.iter().enumerate() {
                let name = format!("PROTECTED_{i}");
                text.push_str(&format!(" (subpath (param \"{name}\"))"));
                params.push((name, p.clone()));
            }
            text.push_str(")\n");
        }
    }
    if !denied.is_empty() {
        text.push_str("(deny file-read*");
        for (i, p) in denied.iter().enumerate() {
            let name = format!("DENY_READ_{i}");
            text.push_str(&format!(" (subpath (param \"{name}\"))"));
            params.push((name, p.clone()));
        }
        text.push_str(")\n");
    }
    if policy.network == Network::Allow {
        text.push_str("(allow network*)\n(allow system-socket)\n");
    }
    Profile { text, params }
}

/// `sandbox-exec -p PROFILE -D NAME=PATH ... -- ARGV`, for [`profile`].
pub fn argv(
    policy: &SandboxPolicy,
    temp: Option<&Path>,
    denied: &[PathBuf],
    home: &crate::deny_read::HomeRule,
    argv: &[OsString],
) -> Vec<OsString> {
    let p = profile(policy, temp, denied, home);
    let mut out: Vec<OsString> = vec!["sandbox-exec".into(), "-p".into(), p.text.into()];
    for (name, path) in p.params {
        out.push("-D".into());
        let mut kv = OsString::from(format!("{name}="));
        kv.push(path.as_os_str());
        out.push(kv);
    }
    out.push("--".into());
    out.extend(argv.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(mode: SandboxMode, network: Network) -> SandboxPolicy {
        SandboxPolicy::bare(mode, Path::new("/ws \"quoted\""))
            .with_network(network)
            .with_protected(["/ws \"quoted\"/.git/hooks".into()])
    }

    #[test]
    fn read_only_denies_by_default_and_grants_no_root() {
        let p = profile(
            &policy(SandboxMode::ReadOnly, Network::Deny),
            Some(Path::new("/t")),
            &[],
            &Default::default(),
        );
        assert!(p.text.starts_with("(version 1)\n(deny default)\n"));
        assert!(p
            .text
            .contains("(allow file-write* (literal \"/dev/null\"))"));
        assert!(!p.text.contains("subpath"));
        assert!(!p.text.contains("network"));
        assert!(p.params.is_empty());
    }

    #[test]
    fn workspace_write_grants_roots_then_denies_protected_via_params() {
        let p = profile(
            &policy(SandboxMode::WorkspaceWrite, Network::Allow),
            Some(Path::new("/t")),
            &[],
            &Default::default(),
        );
        assert!(p.text.contains(
            "(allow file-write* (subpath (param \"WRITABLE_0\")) (subpath (param \"WRITABLE_1\")))"
        ));
        let allow = p
            .text
            .find("(allow file-write* (subpath")
            .expect("must succeed");
        let deny = p
            .text
            .find("(deny file-write* (subpath (param \"PROTECTED_0\")))")
            .expect("must succeed");
        assert!(deny > allow, "protected must come after the grant to win");
        assert!(p.text.contains("(allow network*)"));
        // Paths only travel as parameters, so quotes in them cannot break the profile.
        assert!(!p.text.contains("quoted"));
        assert_eq!(
            p.params,
            vec![
                ("WRITABLE_0".into(), "/ws \"quoted\"".into()),
                ("WRITABLE_1".into(), "/t".into()),
                ("PROTECTED_0".into(), "/ws \"quoted\"/.git/hooks".into()),
            ]
        );
    }

    #[test]
    fn a_closed_home_is_denied_then_opened_beneath_each_allowed_path_then_denials_win() {
        let home = crate::deny_read::HomeRule {
            homes: vec!["/Users/u".into()],
            allowed: vec![("/Users/u/.cargo/bin".into(), "/Users/u/.cargo/bin".into())],
        };
        let p = profile(
            &policy(SandboxMode::ReadOnly, Network::Deny),
            None,
            &[PathBuf::from("/Users/u/.ssh")],
            &home,
        );
        let closed = p
            .text
            .find("(deny file-read* (subpath (param \"CLOSED_0\")))")
            .expect("closed");
        let open = p
            .text
            .find("(allow file-read* (subpath (param \"OPEN_0\")))")
            .expect("open");
        let denied = p
            .text
            .find("(deny file-read* (subpath (param \"DENY_READ_0\")))")
            .expect("denied");
        assert!(closed < open && open < denied, "{}", p.text);
        assert!(p.params.contains(&("CLOSED_0".into(), "/Users/u".into())));
        assert!(p
            .params
            .contains(&("OPEN_0".into(), "/Users/u/.cargo/bin".into())));
    }

    #[test]
    fn the_argv_passes_parameters_before_the_command() {
        let a = argv(
            &policy(SandboxMode::WorkspaceWrite, Network::Deny),
            None,
            &[],
            &Default::default(),
            &["true".into()],
        );
        let s: Vec<String> = a.iter().map(|x| x.to_string_lossy().into_owned()).collect();
        assert_eq!(s[0], "sandbox-exec");
        assert_eq!(s[1], "-p");
        assert_eq!(s[3], "-D");
        assert_eq!(s[4], "WRITABLE_0=/ws \"quoted\"");
        assert_eq!(&s[s.len() - 2..], ["--", "true"]);
    }
}
