//! The child environment: the host's, scrubbed of credentials and `DSH_*`, plus the
//! caller's overlay.
//!
//! # Precedence
//! For each variable, the first rule that applies decides:
//! 1. An entry of the spawn's [`EnvOverlay`] sets or removes the name, whatever the rules
//!    below say (so a caller can opt a credential, or a `DSH_*` name, back in).
//! 2. A host `DSH_*` name ([`is_dsh_name`], any case) is dropped: dsh manages those, and
//!    the allow-list cannot let one through.
//! 3. A host name in the host program's [`EnvAllow`] (exact, case-sensitive) is kept, its
//!    value unchecked.
//! 4. A host variable with a credential-shaped name ([`is_sensitive_name`]) or a
//!    credential-shaped value ([`is_sensitive_value`]: a password in a URL or a
//!    `user:pw@host`, a token in a URL's user part, `password=` and its kind, a JWT, a
//!    private key) is dropped.
//! 5. Every other host variable is kept as it is.
//!
//! # Limits
//! The rules are a heuristic on the shape of names and values, not a boundary: a
//! credential under a plain name in a plain value (`MYSQL=hunter2`) reaches the child.
//! They err towards dropping: `KEYBOARD`, `BYPASS_CACHE`, the `*_ASKPASS` helpers and the
//! desktop's `SESSION_MANAGER` are dropped too; [`EnvAllow`] lets such a name through.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use dsh_core::HarnessError;

/// The prefix of every environment variable dsh manages itself. Ambient `DSH_*` values
/// never reach a child; only explicit ones do.
pub const DSH_ENV_PREFIX: &str = "DSH_";

/// An environment overlay: `Some(value)` sets a name, `None` removes it (a tombstone).
/// Explicit entries win over the scrub, so a caller can opt a credential back in.
pub type EnvOverlay = BTreeMap<String, Option<String>>;

/// Substrings that make a name credential-shaped, anywhere in it. `PASS` also covers
/// `PASSWORD` and `PASSWD`; `CRED` covers `CREDS` and the `*_CREDENTIALS` file pointers
/// (`GOOGLE_APPLICATION_CREDENTIALS`, `AWS_SHARED_CREDENTIALS_FILE`); `OAUTH` and `JWT`
/// the tokens CI systems and forges hand out (`CI_JOB_JWT`, `GITHUB_OAUTH`).
const SENSITIVE_PARTS: [&str; 12] = [
    "KEY", "PASS", "SECRET", "TOKEN", "CRED", "PRIVATE", "COOKIE", "DSN", "WEBHOOK", "OAUTH",
    "JWT", "BEARER",
];

/// Words that make a name credential-shaped only as a whole word: as substrings they
/// would catch `PATH`, `OLDPWD`, `XAUTHORITY`, `BASALT` and `XDG_SESSION_TYPE`'s kin.
/// `SESSION` is a password manager's unlocked session (`BW_SESSION`, `OP_SESSION_my`).
const SENSITIVE_WORDS: [&str; 7] = ["AUTH", "PAT", "PWD", "PW", "SALT", "HMAC", "SESSION"];

/// Names with a sensitive word that are the desktop's, not a credential: kept.
const DESKTOP_PREFIXES: [&str; 3] = ["XDG_", "DBUS_", "DESKTOP_"];

/// True when `name` looks like a credential, compared case-insensitively:
/// - it contains `KEY`, `PASS` (so `PASSWORD`, `PASSWD`), `SECRET`, `TOKEN`, `CRED`,
///   `PRIVATE`, `COOKIE`, `DSN`, `WEBHOOK`, `OAUTH`, `JWT` or `BEARER` anywhere; or
/// - it has `AUTH`, `PAT`, `PWD`, `PW`, `SALT`, `HMAC` or `SESSION` as a whole word
///   (`AUTH_HEADER`, `NPM_CONFIG__AUTH`, `SSH_AUTH_SOCK`, `GITHUB_PAT`, `MYSQL_PWD`,
///   `DB_PW`, `HMAC_SALT`, `BW_SESSION`, `OP_SESSION_my`), except the name `PWD` itself,
///   which shells set to the working directory, and the desktop's `XDG_*`, `DBUS_*` and
///   `DESKTOP_*` names. Words are separated by `_` and by any other byte that is not an
///   ASCII letter or digit, so `PATH`, `PATCH_LEVEL`, `OLDPWD` and `XAUTHORITY` are not
///   matched.
///
/// The name is judged by its bytes, so a name that is not UTF-8 is judged too.
pub fn is_sensitive_name(name: impl AsRef<OsStr>) -> bool {
    let upper = name.as_ref().as_bytes().to_ascii_uppercase();
    let has_part = SENSITIVE_PARTS
        .iter()
        .any(|part| contains(&upper, part.as_bytes()));
    let desktop = DESKTOP_PREFIXES
        .iter()
        .any(|p| upper.starts_with(p.as_bytes()));
    let has_word = upper != b"PWD"
        && !desktop
        && upper
            .split(|b| !b.is_ascii_alphanumeric())
            .any(|word| SENSITIVE_WORDS.iter().any(|w| word == w.as_bytes()));
    has_part || has_word
}

/// True when `value` holds a credential by its shape, anywhere in it:
/// - a URL with a password (`scheme://user:pass@host`, `scheme://:pass@host`): every
///   `://` is read as the start of an authority, which ends at the next `/`, `?` or `#`
///   (or the end of the value); its userinfo is what precedes its last `@`; a password is
///   a `:` in the userinfo followed by at least one byte;
/// - a URL whose user part is a token (`https://ghp_x@github.com`): a user of 20 bytes
///   or more, or one starting as a forge's or cloud's token does (`ghp_`, `glpat-`,
///   `sk-`, `AKIA`, …);
/// - the same without a scheme (`user:pw@host:5432`, `u:p@tcp(db:3306)/x`), in any word
///   of the value (words split at whitespace, `,` and `;`);
/// - a `name=value` pair whose name is credential-shaped ([`is_sensitive_name`]:
///   `jdbc:…?password=x`, `…;Pwd=x`, `token=x`) with a non-empty value;
/// - a JWT (`eyJ…` with two dots) or a PEM private key.
///
/// So `http://user@host`, `http://user:@host`, `http://[::1]:8080` and
/// `git@github.com:org/repo` are not matched. A password holding a raw `/`, `?` or `#`
/// (not percent-encoded) in a URL is not a URL password; URL parsers end the authority
/// there too.
///
/// The value is judged by its bytes, so a value that is not UTF-8 is judged too.
pub fn is_sensitive_value(value: impl AsRef<OsStr>) -> bool {
    let bytes = value.as_ref().as_bytes();
    let mut rest = bytes;
    while let Some(at) = find(rest, b"://") {
        rest = &rest[at + 3..];
        let end = rest
            .iter()
            .position(|b| matches!(b, b'/' | b'?' | b'#'))
            .unwrap_or(rest.len());
        if has_password(&rest[..end]) || has_token_user(&rest[..end]) {
            return true;
        }
    }
    let words = bytes.split(|b| b.is_ascii_whitespace() || matches!(b, b',' | b';'));
    for word in words {
        if find(word, b"://").is_none() && has_password(schemeless_authority(word)) {
            return true;
        }
        if is_jwt(word) {
            return true;
        }
    }
    has_sensitive_pair(bytes) || contains(bytes, b"PRIVATE KEY-----")
}

/// The authority of a word without a scheme: up to the first `/` after its last `@`.
fn schemeless_authority(word: &[u8]) -> &[u8] {
    let Some(at) = word.iter().rposition(|&b| b == b'@') else {
        return &[];
    };
    // The userinfo is a plain `user:pw`: no `/` in it (a path is no userinfo).
    if word[..at].contains(&b'/') {
        return &[];
    }
    let end = word[at..]
        .iter()
        .position(|&b| b == b'/')
        .map_or(word.len(), |p| at + p);
    &word[..end]
}

/// Token prefixes forges and clouds put on their credentials.
const TOKEN_PREFIXES: [&str; 12] = [
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
    "sk-",
    "sk_live_",
    "AKIA",
];

/// True when the URL authority's userinfo is a user alone that looks like a token.
fn has_token_user(authority: &[u8]) -> bool {
    let Some(at) = authority.iter().rposition(|&b| b == b'@') else {
        return false;
    };
    let user = &authority[..at];
    !user.contains(&b':')
        && (user.len() >= 20
            || TOKEN_PREFIXES
                .iter()
                .any(|p| user.starts_with(p.as_bytes())))
}

/// True when `word` is a JWT: `eyJ`, then base64url with exactly two dots.
fn is_jwt(word: &[u8]) -> bool {
    let word = word
        .rsplit(|&b| b == b'=' || b == b':')
        .next()
        .unwrap_or(word);
    word.starts_with(b"eyJ")
        && word.len() > 30
        && word.iter().filter(|&&b| b == b'.').count() == 2
        && word
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// True when `value` holds `NAME=VALUE` with a credential-shaped `NAME` and a non-empty
/// `VALUE`.
fn has_sensitive_pair(value: &[u8]) -> bool {
    for (i, _) in value.iter().enumerate().filter(|(_, &b)| b == b'=') {
        let start = value[..i]
            .iter()
            .rposition(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.')))
            .map_or(0, |p| p + 1);
        let name = &value[start..i];
        let follows = value
            .get(i + 1)
            .is_some_and(|b| !matches!(b, b'&' | b';' | b',' | b' '));
        // In a pair, `Pwd=` is a connection string's password, not a working directory.
        let credential =
            name.eq_ignore_ascii_case(b"PWD") || is_sensitive_name(OsStr::from_bytes(name));
        if !name.is_empty() && follows && credential {
            return true;
        }
    }
    false
}

/// True when the URL authority `authority` has a userinfo with a non-empty password.
fn has_password(authority: &[u8]) -> bool {
    let Some(at) = authority.iter().rposition(|&b| b == b'@') else {
        return false;
    };
    let userinfo = &authority[..at];
    userinfo
        .iter()
        .position(|&b| b == b':')
        .is_some_and(|colon| colon + 1 < userinfo.len())
}

/// True when `name` is a `DSH_*` name, case-insensitively.
pub fn is_dsh_name(name: impl AsRef<OsStr>) -> bool {
    let name = name.as_ref().as_bytes();
    name.len() >= DSH_ENV_PREFIX.len()
        && name[..DSH_ENV_PREFIX.len()].eq_ignore_ascii_case(DSH_ENV_PREFIX.as_bytes())
}

/// True when the scrub removes the host variable `name=value` (rules 2 to 4 of the
/// module's precedence): a `DSH_*` name always; otherwise a name not in `allow` whose
/// name or value is sensitive.
pub fn is_scrubbed(name: &OsStr, value: &OsStr, allow: &EnvAllow) -> bool {
    if is_dsh_name(name) {
        return true;
    }
    if allow.contains(name) {
        return false;
    }
    is_sensitive_name(name) || is_sensitive_value(value)
}

/// `vars` without the variables the scrub removes ([`is_scrubbed`]), in their order.
pub fn scrub<I>(vars: I, allow: &EnvAllow) -> Vec<(OsString, OsString)>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    vars.into_iter()
        .filter(|(name, value)| !is_scrubbed(name, value, allow))
        .collect()
}

/// The host environment after the [`scrub`]. `PATH`, `HOME`, `PWD`, locale, terminal and
/// password-less proxy variables survive.
pub fn scrubbed_host_env(allow: &EnvAllow) -> Vec<(OsString, OsString)> {
    scrub(std::env::vars_os(), allow)
}

/// The environment a child gets: [`scrubbed_host_env`] overlaid with `overlay`, sorted by
/// name.
pub fn child_env(overlay: &EnvOverlay, allow: &EnvAllow) -> Vec<(OsString, OsString)> {
    let mut env: BTreeMap<OsString, OsString> = scrubbed_host_env(allow).into_iter().collect();
    for (k, v) in overlay {
        match v {
            Some(v) => env.insert(k.into(), v.into()),
            None => env.remove(OsStr::new(k)),
        };
    }
    env.into_iter().collect()
}

/// Host variables the host program lets through the scrub by name, e.g. a
/// `DATABASE_URL` with a password that the user's commands need.
///
/// Each entry is an exact name, matched case-sensitively against the host variable's
/// name as given (`SSH_AUTH_SOCK` does not let `ssh_auth_sock` through); there are no
/// patterns. A let-through variable keeps its value unchecked. `DSH_*` names cannot be
/// entries. The default is empty: the scrub applies to every name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvAllow {
    names: BTreeSet<OsString>,
}

impl EnvAllow {
    /// An allow-list of `names` (duplicates are merged).
    ///
    /// # Errors
    /// `CONFIG_INVALID`, naming the entry, for a `DSH_*` name in any case (dsh manages
    /// those), an empty name, or a name holding `=` or a NUL byte (no environment
    /// variable has one).
    pub fn new<I, S>(names: I) -> Result<EnvAllow, HarnessError>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let mut set = BTreeSet::new();
        for name in names {
            let name = name.into();
            check_allowable(&name)?;
            set.insert(name);
        }
        Ok(EnvAllow { names: set })
    }

    /// True when `name` is an entry, compared exactly (case-sensitively).
    pub fn contains(&self, name: impl AsRef<OsStr>) -> bool {
        self.names.contains(name.as_ref())
    }

    /// The entries, sorted by their bytes.
    pub fn names(&self) -> impl Iterator<Item = &OsStr> {
        self.names.iter().map(OsString::as_os_str)
    }

    /// True when there are no entries.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

fn check_allowable(name: &OsStr) -> Result<(), HarnessError> {
    let shown = crate::program::quoted(name);
    let why = if is_dsh_name(name) {
        "is a DSH_* name, which dsh manages itself"
    } else if name.is_empty() {
        "is empty"
    } else if name.as_bytes().iter().any(|&b| b == b'=' || b == 0) {
        "holds `=` or a NUL byte, which no environment variable name has"
    } else {
        return Ok(());
    };
    Err(HarnessError::config_invalid(format!(
        "env_allow entry {shown} {why}; remove it from env_allow"
    )))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    find(haystack, needle).is_some()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt;

    use dsh_core::ErrorCode;

    use super::*;

    fn os(bytes: &[u8]) -> OsString {
        OsString::from_vec(bytes.to_vec())
    }

    fn names(vars: &[(OsString, OsString)]) -> Vec<&OsStr> {
        vars.iter().map(|(k, _)| k.as_os_str()).collect()
    }

    #[test]
    fn names_with_a_credential_part_anywhere_are_sensitive_in_any_case() {
        for n in [
            // The parts dropped before issue 11.
            "API_KEY",
            "my_token",
            "DB_PASSWORD",
            "aws_secret_access",
            "KEYBOARD",
            // Regression: issue 11 (sandbox hardening), environment scrub extended.
            "DB_PASS",
            "PASSWD",
            "db_passwd",
            "CREDENTIALS",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "AWS_SHARED_CREDENTIALS_FILE",
            "SSH_PRIVATE_KEY_FILE",
            "private",
            "SESSION_COOKIE",
            "SENTRY_DSN",
            "slack_webhook_url",
            // Names that must not pass the scrub (issue 23).
            "CI_JOB_JWT",
            "GCP_CREDS",
            "GITHUB_OAUTH",
            "BEARER",
        ] {
            assert!(is_sensitive_name(n), "{n}");
        }
    }

    #[test]
    fn session_salt_pw_and_hmac_are_sensitive_as_words_but_not_the_desktops() {
        // Regression: issue 23.
        for n in [
            "BW_SESSION",
            "OP_SESSION_my",
            "DB_PW",
            "HMAC_SALT",
            "app.salt",
        ] {
            assert!(is_sensitive_name(n), "{n}");
        }
        for n in [
            "XDG_SESSION_TYPE",
            "XDG_SESSION_ID",
            "DBUS_SESSION_BUS_ADDRESS",
            "DESKTOP_SESSION",
            "BASALT",
            "PWRITE",
        ] {
            assert!(!is_sensitive_name(n), "{n}");
        }
    }

    #[test]
    fn auth_pat_and_pwd_are_sensitive_only_as_whole_words() {
        // Regression: issue 11 (sandbox hardening), environment scrub extended.
        for n in [
            "AUTH_HEADER",
            "NPM_CONFIG__AUTH",
            "npm_config__auth",
            "SSH_AUTH_SOCK",
            "GITHUB_PAT",
            "gh_pat",
            "MYSQL_PWD",
            "DB_PWD",
            "AUTH",
            "PAT",
            "app.github.pat",
        ] {
            assert!(is_sensitive_name(n), "{n}");
        }
        for n in [
            "PATH",
            "XDG_DATA_PATH",
            "LD_LIBRARY_PATH",
            "PATCH_LEVEL",
            "PWD",
            "pwd",
            "OLDPWD",
            "XAUTHORITY",
            "GIT_AUTHOR_NAME",
        ] {
            assert!(!is_sensitive_name(n), "{n}");
        }
    }

    #[test]
    fn plain_names_are_not_sensitive() {
        for n in [
            "PATH",
            "HOME",
            "LANG",
            "LC_ALL",
            "TERM",
            "EDITOR",
            "SHELL",
            "USER",
            "TMPDIR",
            "http_proxy",
            "HTTPS_PROXY",
            "NO_PROXY",
            "DATABASE_URL",
        ] {
            assert!(!is_sensitive_name(n), "{n}");
        }
    }

    #[test]
    fn names_that_are_not_utf8_are_judged_by_their_bytes() {
        assert!(is_sensitive_name(os(b"MY_KEY_\xff")));
        assert!(is_sensitive_name(os(b"\xff_PAT")));
        assert!(!is_sensitive_name(os(b"LATIN1_CAF\xc9")));
        assert!(is_dsh_name(os(b"DSH_\xff")));
    }

    #[test]
    fn values_holding_a_url_with_a_password_are_sensitive() {
        // Regression: issue 11 (sandbox hardening), environment scrub extended.
        for v in [
            "postgres://u:pw@host/db",
            "http://u:p@proxy:3128",
            "redis://:pass@cache:6379/0",
            "https://x-access-token:ghp_abc@github.com/org/repo.git",
            "HTTP://U:P@HOST",
            "http://u:p@[::1]:3128/",
            "http://u:p@[fe80::1%25eth0]",
            "http://u:p@ss@host",
            "mongodb://u:p@h1:27017,h2:27017/db?replicaSet=rs0",
            "http://u:p%2Fq@host",
            // Inside a longer value: a list, a key=url pair, after a plain URL.
            "http://mirror-a;http://u:p@mirror-b",
            "https://a.example https://u:p@b.example/simple",
            "url=postgres://u:pw@host/db",
            "://u:p@host",
            // Shapes that must not pass the scrub (issue 23).
            "jdbc:mysql://db:3306/app?user=app&password=hunter2",
            "jdbc:sqlserver://db;user=app;Pwd=hunter2",
            "u:pw@host:5432",
            "user:pass@tcp(host:3306)/db",
            "https://ghp_tok@github.com/org/repo",
            "https://0123456789abcdef0123@example.com",
            "token=abc",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJlLXh4eA",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nabc",
        ] {
            assert!(is_sensitive_value(v), "{v}");
        }
    }

    #[test]
    fn values_without_a_url_password_are_not_sensitive() {
        for v in [
            "",
            "http://proxy:3128",
            "http://user@host",
            "http://user:@host",
            "ssh://git@github.com:22/org/repo",
            "http://[::1]:8080/",
            "http://[::1]:8080/path@x:y",
            "https://host/search?q=a:b@c",
            "https://host/#frag:x@y",
            "http://user@h1;http://h2:80",
            "localhost,127.0.0.1,.internal",
            "/usr/local/bin:/usr/bin:/bin",
            "en_US.UTF-8",
            "git@github.com:org/repo.git",
            "https://x-access-tok@github.com",
            "rs=0:di=01;34:ln=01;36:*.tar=01;31",
            "--color=auto --max-count=3",
            "user@example.com",
        ] {
            assert!(!is_sensitive_value(v), "{v}");
        }
    }

    #[test]
    fn values_that_are_not_utf8_are_judged_by_their_bytes() {
        assert!(is_sensitive_value(os(b"\xff http://u:p@h")));
        assert!(is_sensitive_value(os(b"http://u:p\xff@h")));
        assert!(!is_sensitive_value(os(b"\xff\xfe http://h")));
    }

    #[test]
    fn dsh_names_are_recognised_in_any_case() {
        assert!(is_dsh_name("DSH_HOME"));
        assert!(is_dsh_name("dsh_home"));
        assert!(is_dsh_name("DSH_"));
        assert!(!is_dsh_name("DS"));
        assert!(!is_dsh_name("DSH"));
        assert!(!is_dsh_name("XDSH_A"));
    }

    /// Every example of issue 11, as a host environment.
    fn host() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("PWD", "/work"),
            ("OLDPWD", "/"),
            ("XAUTHORITY", "/run/user/1000/xauth"),
            ("HOME", "/home/u"),
            ("LANG", "C.UTF-8"),
            ("http_proxy", "http://proxy:3128"),
            ("TERM", "xterm"),
            ("EDITOR", "vi"),
            ("PATCH_LEVEL", "3"),
            ("GIT_AUTHOR_NAME", "U"),
            ("DB_PASS", "x"),
            ("PASSWD", "x"),
            ("MYSQL_PWD", "x"),
            ("GITHUB_PAT", "x"),
            ("CREDENTIALS", "x"),
            ("AUTH_HEADER", "x"),
            ("NPM_CONFIG__AUTH", "x"),
            ("DATABASE_URL", "postgres://u:pw@host/db"),
            ("HTTPS_PROXY", "http://u:p@proxy:3128"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-x/agent.1"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/home/u/gcp.json"),
            ("MY_API_KEY", "x"),
            ("DSH_STALE", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    #[test]
    fn the_scrub_keeps_plain_variables_and_drops_credentials_in_order() {
        let kept = scrub(host(), &EnvAllow::default());
        assert_eq!(
            names(&kept),
            [
                "PATH",
                "PWD",
                "OLDPWD",
                "XAUTHORITY",
                "HOME",
                "LANG",
                "http_proxy",
                "TERM",
                "EDITOR",
                "PATCH_LEVEL",
                "GIT_AUTHOR_NAME",
            ]
        );
    }

    #[test]
    fn an_allowed_name_passes_the_name_and_value_rules_but_not_the_dsh_rule() {
        let allow = EnvAllow::new(["DATABASE_URL", "SSH_AUTH_SOCK"]).expect("valid");
        let kept = scrub(host(), &allow);
        assert_eq!(
            names(&kept),
            [
                "PATH",
                "PWD",
                "OLDPWD",
                "XAUTHORITY",
                "HOME",
                "LANG",
                "http_proxy",
                "TERM",
                "EDITOR",
                "PATCH_LEVEL",
                "GIT_AUTHOR_NAME",
                "DATABASE_URL",
                "SSH_AUTH_SOCK",
            ]
        );
        assert!(kept.contains(&("DATABASE_URL".into(), "postgres://u:pw@host/db".into())));
        assert!(is_scrubbed(
            OsStr::new("DSH_STALE"),
            OsStr::new("x"),
            &allow
        ));
    }

    #[test]
    fn the_allow_list_matches_names_exactly_and_case_sensitively() {
        let allow = EnvAllow::new(["ssh_auth_sock", "GITHUB"]).expect("valid");
        let sock = OsStr::new("/tmp/agent");
        assert!(is_scrubbed(OsStr::new("SSH_AUTH_SOCK"), sock, &allow));
        assert!(is_scrubbed(OsStr::new("GITHUB_PAT"), sock, &allow));
        assert!(!is_scrubbed(OsStr::new("ssh_auth_sock"), sock, &allow));
    }

    #[test]
    fn the_allow_list_refuses_dsh_empty_and_impossible_names() {
        for (name, why) in [
            ("DSH_HOME", "is a DSH_* name"),
            ("dsh_home", "is a DSH_* name"),
            ("", "is empty"),
            ("A=B", "holds `=`"),
            ("A\0B", "holds `=` or a NUL byte"),
        ] {
            let e = EnvAllow::new([name]).expect_err(name);
            assert_eq!(e.code(), ErrorCode::ConfigInvalid, "{name}");
            assert!(e.message().contains(why), "{}", e.message());
            assert!(
                e.message().starts_with("env_allow entry \""),
                "{}",
                e.message()
            );
        }
    }

    #[test]
    fn the_allow_list_merges_duplicates_and_lists_its_names_sorted() {
        let allow = EnvAllow::new(["B", "A", "B"]).expect("valid");
        assert_eq!(allow.names().collect::<Vec<_>>(), ["A", "B"]);
        assert!(!allow.is_empty());
        assert!(EnvAllow::default().is_empty());
    }

    #[test]
    fn overlay_sets_and_tombstones_remove() {
        let mut o = EnvOverlay::new();
        o.insert("DSH_X".into(), Some("1".into()));
        o.insert("PATH".into(), None);
        let env = child_env(&o, &EnvAllow::default());
        assert!(env.iter().any(|(k, v)| k == "DSH_X" && v == "1"));
        assert!(!env.iter().any(|(k, _)| k == "PATH"));
    }
}
