//! [`WorldUrl`]: where a remote world's far side runs, and the command that reaches it.

use std::ffi::OsString;
use std::path::PathBuf;

use dsh_core::HarnessError;

/// Where a remote world's far side runs: the transport and the far workspace.
///
/// ```
/// use dsh_remote::WorldUrl;
/// let url: WorldUrl = "ssh://ci@build-1:2222/srv/repo".parse().unwrap();
/// assert_eq!(url.to_string(), "ssh://ci@build-1:2222/srv/repo");
/// let argv = url.argv("dsh");
/// assert_eq!(argv[0], "ssh");
/// assert!("ssh://-oProxyCommand=x/w".parse::<WorldUrl>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorldUrl {
    /// `ssh://[user@]host[:port]/path`: the system OpenSSH client, the far workspace at
    /// `path`.
    Ssh {
        /// The login name, if given.
        user: Option<String>,
        /// The host name or address.
        host: String,
        /// The port, if given.
        port: Option<u16>,
        /// The far workspace (absolute).
        path: PathBuf,
    },
    /// `docker://container/path`: `docker exec -i` into a running container, the far
    /// workspace at `path`.
    Docker {
        /// The container's name or id.
        container: String,
        /// The far workspace (absolute).
        path: PathBuf,
    },
    /// `cmd:COMMAND`: any command line, run by `/bin/sh -c`, whose stdin and stdout reach
    /// a `dsh serve --stdio` (which names its own workspace with `-C`).
    Command(String),
}

/// The error of a URL that names no world, saying what one looks like.
fn invalid(url: &str, why: &str) -> HarnessError {
    HarnessError::invalid_argument(format!(
        "invalid world URL {url:?}: {why}; a world is ssh://[user@]host[:port]/path, \
         docker://container/path or cmd:COMMAND"
    ))
}

/// Whether `s` may be a host, a user or a container name: it cannot be read as an option
/// of the transport (no leading `-`) and holds no whitespace, control character or quote.
fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && s.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':' | '[' | ']' | '%')
        })
}

/// The absolute path of a URL's path part (`/` and after).
fn far_path(url: &str, path: &str) -> Result<PathBuf, HarnessError> {
    if !path.starts_with('/') {
        return Err(invalid(url, "the far workspace must be an absolute path"));
    }
    if path.split('/').any(|c| c.starts_with('~')) {
        return Err(invalid(
            url,
            "a ~ in the far workspace is not expanded; give the absolute path",
        ));
    }
    if path.chars().any(char::is_control) {
        return Err(invalid(url, "the far workspace holds a control character"));
    }
    Ok(PathBuf::from(path))
}

impl std::str::FromStr for WorldUrl {
    type Err = HarnessError;

    /// # Errors
    /// `INVALID_ARGUMENT` for any other scheme, a missing or malformed host, user, port,
    /// container or path, or an empty command.
    fn from_str(url: &str) -> Result<WorldUrl, HarnessError> {
        if let Some(command) = url.strip_prefix("cmd:") {
            if command.trim().is_empty() {
                return Err(invalid(url, "cmd: needs a command"));
            }
            return Ok(WorldUrl::Command(command.to_owned()));
        }
        if let Some(rest) = url.strip_prefix("ssh://") {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let (user, hostport) = match authority.rsplit_once('@') {
                Some((u, h)) => (Some(u), h),
                None => (None, authority),
            };
            if user.is_some_and(|u| !plain_name(u) || u.contains(':')) {
                return Err(invalid(url, "the user is not a plain name"));
            }
            // An IPv6 address is bracketed: its colons are not the port's.
            let (host, port_text) = if hostport.starts_with('[') {
                let end = hostport
                    .find(']')
                    .ok_or_else(|| invalid(url, "an unclosed [ in the host"))?;
                hostport.split_at(end + 1)
            } else {
                hostport.split_at(hostport.find(':').unwrap_or(hostport.len()))
            };
            let port = match port_text {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .and_then(|p| p.parse::<u16>().ok())
                        .filter(|p| *p != 0)
                        .ok_or_else(|| invalid(url, "the port is not a number from 1 to 65535"))?,
                ),
            };
            if let Some(inner) = host.strip_prefix('[') {
                let inner = inner.strip_suffix(']').unwrap_or(inner);
                if inner.parse::<std::net::Ipv6Addr>().is_err() {
                    return Err(invalid(url, "the bracketed host is not an IPv6 address"));
                }
            } else if !plain_name(host) || host.contains([':', '[', ']']) {
                return Err(invalid(url, "the host is missing or not a plain name"));
            }
            // The far login shell reads the path inside single quotes, which only a POSIX
            // shell reads as dsh writes them: a backslash would mean another thing elsewhere.
            if path.contains('\\') {
                return Err(invalid(url, "a backslash in the far workspace"));
            }
            return Ok(WorldUrl::Ssh {
                user: user.map(str::to_owned),
                host: host.to_owned(),
                port,
                path: far_path(url, path)?,
            });
        }
        if let Some(rest) = url.strip_prefix("docker://") {
            let (container, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            if !plain_name(container) || container.contains(':') {
                return Err(invalid(url, "the container is missing or not a plain name"));
            }
            return Ok(WorldUrl::Docker {
                container: container.to_owned(),
                path: far_path(url, path)?,
            });
        }
        for scheme in ["ssh:", "docker:"] {
            if url.starts_with(scheme) {
                return Err(invalid(url, &format!("{scheme} is followed by //")));
            }
        }
        Err(invalid(url, "unknown scheme"))
    }
}

impl std::fmt::Display for WorldUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorldUrl::Ssh {
                user,
                host,
                port,
                path,
            } => {
                f.write_str("ssh://")?;
                if let Some(u) = user {
                    write!(f, "{u}@")?;
                }
                f.write_str(host)?;
                if let Some(p) = port {
                    write!(f, ":{p}")?;
                }
                write!(f, "{}", path.display())
            }
            WorldUrl::Docker { container, path } => {
                write!(f, "docker://{container}{}", path.display())
            }
            WorldUrl::Command(c) => write!(f, "cmd:{c}"),
        }
    }
}

/// `s` quoted for a POSIX shell (the far side's login shell reads an ssh command line).
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl WorldUrl {
    /// The argv of the transport command that starts `remote_dsh serve --stdio` on the far
    /// side, its stdin and stdout the channel: for ssh, `ssh -T -o BatchMode=yes` with
    /// keepalives and a connect timeout (the user's ssh configuration applies); for
    /// docker, `docker exec -i`;
    /// for `cmd:`, `/bin/sh -c COMMAND`.
    pub fn argv(&self, remote_dsh: &str) -> Vec<OsString> {
        match self {
            WorldUrl::Ssh {
                user,
                host,
                port,
                path,
            } => {
                let mut argv: Vec<OsString> = ["ssh", "-T", "-o", "BatchMode=yes", "-o"]
                    .into_iter()
                    .map(OsString::from)
                    .collect();
                argv.push("ServerAliveInterval=5".into());
                argv.push("-o".into());
                argv.push("ConnectTimeout=10".into());
                argv.push("-o".into());
                argv.push("ServerAliveCountMax=3".into());
                if let Some(p) = port {
                    argv.push("-p".into());
                    argv.push(p.to_string().into());
                }
                // ssh takes an IPv6 address bare.
                let bare = host.trim_start_matches('[').trim_end_matches(']');
                let target = match user {
                    Some(u) => format!("{u}@{bare}"),
                    None => bare.to_owned(),
                };
                argv.push(target.into());
                argv.push("--".into());
                // One argument: the far side's shell splits it.
                argv.push(
                    format!(
                        "{} serve --stdio -C {}",
                        sh_quote(remote_dsh),
                        sh_quote(&path.to_string_lossy())
                    )
                    .into(),
                );
                argv
            }
            WorldUrl::Docker { container, path } => {
                let mut argv: Vec<OsString> = vec!["docker".into(), "exec".into(), "-i".into()];
                argv.push(container.into());
                argv.push(remote_dsh.into());
                argv.extend(["serve", "--stdio", "-C"].map(OsString::from));
                argv.push(path.into());
                argv
            }
            WorldUrl::Command(c) => vec!["/bin/sh".into(), "-c".into(), c.into()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<WorldUrl, dsh_core::ErrorCode> {
        s.parse::<WorldUrl>().map_err(|e| e.code())
    }

    #[test]
    fn each_scheme_parses_and_prints_back() {
        for url in [
            "ssh://host/w",
            "ssh://u@host:22/srv/w",
            "ssh://[::1]:2222/w",
            "docker://dev_1/work",
            "cmd:kubectl exec -i pod -- dsh serve --stdio -C /w",
        ] {
            let parsed = parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(parsed.to_string(), url);
        }
        assert_eq!(
            parse("ssh://u@h:2200/a b"),
            Ok(WorldUrl::Ssh {
                user: Some("u".into()),
                host: "h".into(),
                port: Some(2200),
                path: "/a b".into(),
            })
        );
    }

    #[test]
    fn what_names_no_world_or_could_be_read_as_an_option_is_refused() {
        for url in [
            "http://h/w",
            "ssh://",
            "ssh://h",
            "ssh://h:0/w",
            "ssh://h:99999/w",
            "ssh://h:x/w",
            "ssh://-oProxyCommand=sh/w",
            "ssh://-l@h/w",
            "ssh://u@h/a\u{7}b",
            "ssh://h w/x",
            "ssh://[nothost]:22/w",
            "ssh://h/a\\b",
            "ssh://a]b/w",
            "ssh:/host/w",
            "ssh://host/~/w",
            "docker:///w",
            "docker://-it/w",
            "docker://c",
            "docker://c/w\n",
            "cmd:",
            "cmd:   ",
            "",
        ] {
            assert_eq!(
                parse(url),
                Err(dsh_core::ErrorCode::InvalidArgument),
                "{url:?}"
            );
        }
    }

    #[test]
    fn the_far_command_is_one_quoted_line_for_ssh_and_an_argv_for_docker() {
        let ssh = parse("ssh://h:2222/it's here").expect("url");
        let argv = ssh.argv("/opt/dsh");
        let last = argv.last().expect("command").to_string_lossy().into_owned();
        assert_eq!(last, r"'/opt/dsh' serve --stdio -C '/it'\''s here'");
        assert!(argv.iter().any(|a| a == "BatchMode=yes"));
        assert!(argv.iter().any(|a| a == "ConnectTimeout=10"));
        let at = argv.iter().position(|a| a == "-p").expect("-p");
        assert_eq!(argv[at + 1], "2222");
        let v6 = parse("ssh://u@[::1]:2222/w").expect("url").argv("dsh");
        assert!(v6.iter().any(|a| a == "u@::1"), "{v6:?}");
        let docker = parse("docker://c/w").expect("url").argv("dsh");
        assert_eq!(
            docker,
            ["docker", "exec", "-i", "c", "dsh", "serve", "--stdio", "-C", "/w"]
                .map(OsString::from)
        );
    }
}
