//! The configuration: flags > the workspace's `.dsh/config.toml` > the user's
//! (`$XDG_CONFIG_HOME/dsh/config.toml`, else `~/.config/dsh/config.toml`) > defaults.
//!
//! Keys (each optional):
//!
//! | key | type | meaning |
//! |---|---|---|
//! | `mode` | `read-only`, `workspace-write`, `danger-full-access` | the mode of a session that set none (default read-only) |
//! | `network` | `deny`, `allow` | network in confined modes (default deny) |
//! | `writable_roots` | list of directories | writable besides the workspace under workspace-write |
//! | `approval` | `ask`, `never` | the approval policy of a session that set none (default ask) |
//! | `runner` | `bwrap`, `landlock`, `seatbelt` | the only sandbox runner to use (default: the fastest that fully enforces) |
//! | `timeout_ms` | integer | a command's timeout when the call names none (default 120000) |
//! | `max_timeout_ms` | integer | the cap on any command's timeout (default 600000) |
//! | `max_output_bytes` | integer | output a result shows per stream (default 16000) |
//! | `max_spill_bytes` | integer | the spill file cap per stream (default 64 MiB) |
//! | `allow_partial` | bool | run where the sandbox is enforced only in part (default false: refused) |
//! | `protected` | list of paths | more protected paths (relative: in the workspace root) |
//! | `deny_read` | list of paths | more paths confined commands and the file tools may not read (`~/` allowed; `*` in the last component) |
//! | `read_allow` | list of paths | more paths confined commands and the file tools may read in the home directories, which are otherwise closed but for the workspace, the writable roots and the defaults (`~/` allowed; `*` in the last component) |
//! | `env_allow` | list of names | environment variables let through the credential scrub |
//! | `bash` | `one-shot`, `persistent` | each `bash` call in a fresh shell, or one shell per session whose `cd` and `export` carry over (default one-shot; either may come from a workspace: it changes no sandbox) |
//! | `trusted_workspaces` | list of directories | user config only: workspaces whose own config may widen the sandbox |
//!
//! **The trust rule.** The workspace's file travels with the repository, so unless the
//! user's config lists that workspace in `trusted_workspaces` it may only narrow: a
//! stricter mode, network deny, fewer writable roots, `approval = "never"`, lower caps
//! (`max_timeout_ms`, `max_output_bytes`, `max_spill_bytes`), more protected paths and
//! more read denials; `timeout_ms` is free below the cap. A key that would widen
//! (`allow_partial`, `env_allow`, `read_allow` and `runner` always do) is refused naming
//! `trusted_workspaces`. Unknown keys, wrong types and bad values are `CONFIG_INVALID`
//! naming the file, the line and the key; nothing runs. Flags are the user's own and win.

use std::path::{Path, PathBuf};

use dsh_approval::ApprovalPolicy;
use dsh_core::{HarnessError, MAX_TIMER_DELAY_MS};
use dsh_sandbox::{Network, OnPartial, Runner, SandboxMode};
use dsh_shell::ShellConfig;
use dsh_tools::{BashMode, WorldConfig};
use serde::Deserialize;
use serde_json::{json, Value};
use toml::Spanned;

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// dsh's default.
    Default,
    /// The user's config file.
    User(PathBuf),
    /// The workspace's config file.
    Workspace(PathBuf),
    /// A command-line flag.
    Flag,
}

impl Source {
    /// `default`, `user`, `workspace` or `flag`.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::User(_) => "user",
            Source::Workspace(_) => "workspace",
            Source::Flag => "flag",
        }
    }

    /// The file, for a value from one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Source::User(p) | Source::Workspace(p) => Some(p),
            Source::Default | Source::Flag => None,
        }
    }
}

/// A value and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Set<T> {
    /// The value in force.
    pub value: T,
    /// Where it came from.
    pub from: Source,
}

impl<T> Set<T> {
    fn default(value: T) -> Set<T> {
        Set {
            value,
            from: Source::Default,
        }
    }

    fn flag(value: T) -> Set<T> {
        Set {
            value,
            from: Source::Flag,
        }
    }
}

/// What the command line says; `None` and empty lists leave the files' values.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--mode` (where it is the default mode rather than the session's).
    pub mode: Option<SandboxMode>,
    /// `--network`.
    pub network: Option<Network>,
    /// `--writable`, replacing the configured roots when given.
    pub writable_roots: Vec<PathBuf>,
    /// `--runner`.
    pub runner: Option<Runner>,
    /// `--allow-partial`.
    pub allow_partial: bool,
    /// `--protect`, added to the configured paths.
    pub protected: Vec<PathBuf>,
    /// `--bash`.
    pub bash: Option<BashMode>,
}

/// The configuration in force for one workspace, each value with its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The workspace it is for.
    pub workspace: PathBuf,
    /// The user's config file, where dsh looks for it.
    pub user_file: Option<PathBuf>,
    /// Whether the user's config trusts this workspace's config to widen the sandbox.
    pub trusted: bool,
    pub mode: Set<SandboxMode>,
    pub network: Set<Network>,
    pub writable_roots: Set<Vec<PathBuf>>,
    pub approval: Set<ApprovalPolicy>,
    pub runner: Set<Option<Runner>>,
    pub timeout_ms: Set<u64>,
    pub max_timeout_ms: Set<u64>,
    pub max_output_bytes: Set<u64>,
    pub max_spill_bytes: Set<u64>,
    pub allow_partial: Set<bool>,
    pub bash: Set<BashMode>,
    /// Added by each source in turn: absolute, or relative to the workspace root.
    pub protected: Vec<Set<PathBuf>>,
    /// Added by each source in turn: absolute patterns.
    pub deny_read: Vec<Set<PathBuf>>,
    /// Added by each source in turn: absolute patterns.
    pub read_allow: Vec<Set<PathBuf>>,
    pub env_allow: Vec<Set<String>>,
    pub trusted_workspaces: Vec<Set<PathBuf>>,
}

/// One config file as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    mode: Option<Spanned<String>>,
    network: Option<Spanned<String>>,
    writable_roots: Option<Spanned<Vec<String>>>,
    approval: Option<Spanned<String>>,
    runner: Option<Spanned<String>>,
    timeout_ms: Option<Spanned<i64>>,
    max_timeout_ms: Option<Spanned<i64>>,
    max_output_bytes: Option<Spanned<i64>>,
    max_spill_bytes: Option<Spanned<i64>>,
    allow_partial: Option<Spanned<bool>>,
    bash: Option<Spanned<String>>,
    protected: Option<Spanned<Vec<String>>>,
    deny_read: Option<Spanned<Vec<String>>>,
    read_allow: Option<Spanned<Vec<String>>>,
    env_allow: Option<Spanned<Vec<String>>>,
    trusted_workspaces: Option<Spanned<Vec<String>>>,
}

/// One key of the config files, as docs/reference.md lists it (generated from this
/// table; a test holds the table to the file format and the page to the table).
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "all but the name are read by the reference page's test"
    )
)]
pub(crate) struct Key {
    /// The key.
    pub name: &'static str,
    /// What it takes.
    pub values: &'static str,
    /// What a workspace's file not listed in `trusted_workspaces` may do with it.
    pub workspace: &'static str,
    /// What it means.
    pub meaning: &'static str,
}

/// Every key of the config files, in the order of [`File`].
pub(crate) const KEYS: &[Key] = &[
    Key {
        name: "mode",
        values: "`read-only`, `workspace-write`, `danger-full-access`",
        workspace: "narrow: a stricter mode",
        meaning: "the sandbox mode of calls that name none",
    },
    Key {
        name: "network",
        values: "`deny`, `allow`",
        workspace: "narrow: `deny`",
        meaning: "whether confined commands reach the network",
    },
    Key {
        name: "writable_roots",
        values: "paths (relative: inside the workspace)",
        workspace: "narrow: fewer",
        meaning: "directories writable besides the workspace under workspace-write",
    },
    Key {
        name: "approval",
        values: "`ask`, `never`",
        workspace: "narrow: `never`",
        meaning: "whether a model may ask a person to widen one call",
    },
    Key {
        name: "runner",
        values: "`bwrap`, `landlock`, `seatbelt`",
        workspace: "no",
        meaning: "the sandbox runner (default: the fastest that enforces the policy in full)",
    },
    Key {
        name: "timeout_ms",
        values: "milliseconds, at least 1",
        workspace: "yes (the cap bounds it)",
        meaning: "a bash command's timeout when the call names none",
    },
    Key {
        name: "max_timeout_ms",
        values: "milliseconds, 1 to 2147483647",
        workspace: "narrow: lower",
        meaning: "the cap on any bash timeout",
    },
    Key {
        name: "max_output_bytes",
        values: "bytes, at least 1",
        workspace: "narrow: lower",
        meaning: "bash output a result shows per stream",
    },
    Key {
        name: "max_spill_bytes",
        values: "bytes, at least 1",
        workspace: "narrow: lower",
        meaning: "the cap of a bash command's spill file per stream",
    },
    Key {
        name: "allow_partial",
        values: "`true`, `false`",
        workspace: "no",
        meaning:
            "run where the sandbox is enforced only in part (each result says what is missing)",
    },
    Key {
        name: "bash",
        values: "`one-shot`, `persistent`",
        workspace: "yes",
        meaning: "one shell per command, or one shell per session",
    },
    Key {
        name: "protected",
        values: "paths (relative: in the workspace)",
        workspace: "narrow: more",
        meaning: "more paths that stay read-only under workspace-write",
    },
    Key {
        name: "deny_read",
        values: "paths, `*` and `?` in the last part, `~/` for the home",
        workspace: "narrow: more",
        meaning: "more paths no confined command or file tool may read",
    },
    Key {
        name: "read_allow",
        values: "paths, as `deny_read`",
        workspace: "no",
        meaning: "more paths of the closed homes confined commands and file tools may read",
    },
    Key {
        name: "env_allow",
        values: "variable names",
        workspace: "no",
        meaning: "names let through the credential scrub of a command's environment",
    },
    Key {
        name: "trusted_workspaces",
        values: "paths",
        workspace: "no (the user's file only)",
        meaning: "workspaces whose own config may widen, not only narrow",
    },
];

/// The keys, as an error names them: `mode, network, …, env_allow and trusted_workspaces`.
fn key_names() -> String {
    let names: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
    match names.split_last() {
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The user's config file, where dsh looks for it.
pub fn user_config_path() -> Option<PathBuf> {
    // A relative value is to be ignored (the XDG spec): it would name a file in whatever
    // directory dsh runs in, a repository's own.
    match std::env::var_os("XDG_CONFIG_HOME").filter(|v| Path::new(v).is_absolute()) {
        Some(x) => Some(PathBuf::from(x).join("dsh/config.toml")),
        None => dsh_sandbox::home_dir().map(|h| h.join(".config/dsh/config.toml")),
    }
}

/// The configuration for `workspace` (see the [module docs](self)): the defaults, the
/// user's file, the workspace's file under the trust rule, then `flags`. Missing files
/// are empty.
///
/// # Errors
/// `CONFIG_INVALID` naming the file, line and key.
pub fn load(workspace: &Path, flags: &Flags) -> Result<Config, HarnessError> {
    // The workspace is opened once: trust is decided for the directory that handle is,
    // and its config read through it, so a link swapped meanwhile (`-C link`) changes
    // neither. `Config::workspace` is where it really is.
    let dir = rustix::fs::openat(
        rustix::fs::CWD,
        workspace,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| {
        HarnessError::new(
            dsh_core::ErrorCode::ProcessCwdInvalid,
            format!("{}: not a directory dsh can open", workspace.display()),
        )
        .with_source(std::io::Error::from(e))
    })?;
    let here = real_path(&dir).unwrap_or_else(|| dsh_core::path::canonical_path(workspace));
    let user_file = user_config_path();
    let mut config = Config::defaults(&here, user_file.clone());
    if let Some(user) = &user_file {
        Layer::read(user, Source::User(user.clone()), None)?.apply(&mut config)?;
    }
    config.decide_trust(&here);
    let ws = here.join(".dsh/config.toml");
    Layer::read(&ws, Source::Workspace(ws.clone()), Some(&dir))?.apply(&mut config)?;
    config.apply_flags(flags)?;
    Ok(config)
}

/// The path the open directory `dir` has now, where `/proc` says.
fn real_path(dir: &rustix::fd::OwnedFd) -> Option<PathBuf> {
    use rustix::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
        .ok()
        .filter(|p| p.is_absolute())
}

impl Config {
    /// Whether the user's config trusts the workspace that really is at `here`.
    fn decide_trust(&mut self, here: &Path) {
        self.trusted = self
            .trusted_workspaces
            .iter()
            .any(|t| dsh_core::path::canonical_path(&t.value) == here);
    }

    /// dsh's defaults for `workspace`, the user's file being `user_file`.
    fn defaults(workspace: &Path, user_file: Option<PathBuf>) -> Config {
        let shell = ShellConfig::default();
        Config {
            workspace: workspace.to_path_buf(),
            user_file,
            trusted: false,
            mode: Set::default(SandboxMode::ReadOnly),
            network: Set::default(Network::Deny),
            writable_roots: Set::default(Vec::new()),
            approval: Set::default(ApprovalPolicy::Ask),
            runner: Set::default(None),
            timeout_ms: Set::default(shell.timeout_ms),
            max_timeout_ms: Set::default(shell.max_timeout_ms),
            max_output_bytes: Set::default(shell.max_output_bytes as u64),
            max_spill_bytes: Set::default(shell.max_spill_bytes),
            allow_partial: Set::default(false),
            bash: Set::default(BashMode::OneShot),
            protected: Vec::new(),
            deny_read: Vec::new(),
            read_allow: Vec::new(),
            env_allow: Vec::new(),
            trusted_workspaces: Vec::new(),
        }
    }
}

/// A number key: its name, its value in the file, its slot, its largest value.
type Cap<'a> = (
    &'static str,
    &'a Option<Spanned<i64>>,
    fn(&mut Config) -> &mut Set<u64>,
    u64,
);

/// One file being applied.
struct Layer {
    text: String,
    file: File,
    from: Source,
}

impl Layer {
    /// The file at `path` (empty when absent): see [`read_config_file`].
    fn read(
        path: &Path,
        from: Source,
        workspace: Option<&rustix::fd::OwnedFd>,
    ) -> Result<Layer, HarnessError> {
        let text = read_config_file(path, workspace)?;
        let file: File = toml::from_str(&text).map_err(|e| {
            let at = e
                .span()
                .map(|s| format!(":{}", line_at(&text, s.start)))
                .unwrap_or_default();
            HarnessError::config_invalid(format!(
                "{}{at}: {}; the keys are {}",
                path.display(),
                e.message().trim_end(),
                key_names()
            ))
        })?;
        Ok(Layer { text, file, from })
    }

    fn path(&self) -> &Path {
        self.from.file().unwrap_or(Path::new("config.toml"))
    }

    /// `CONFIG_INVALID`: `FILE:LINE: KEY: WHY`.
    fn invalid(&self, key: &str, at: usize, why: &str) -> HarnessError {
        HarnessError::config_invalid(format!(
            "{}:{}: {key}: {why}",
            self.path().display(),
            line_at(&self.text, at)
        ))
    }

    /// `CONFIG_INVALID` for a key that would widen the sandbox from an untrusted
    /// workspace: `what` says how.
    fn widening(&self, config: &Config, key: &str, at: usize, what: &str) -> HarnessError {
        let user = config.user_file.as_ref().map_or_else(
            || "~/.config/dsh/config.toml".into(),
            |p| p.display().to_string(),
        );
        self.invalid(
            key,
            at,
            &format!(
                "{what}, which would widen the sandbox; a workspace's config travels with its \
                 repository, so it may only narrow the sandbox unless your own config ({user}) \
                 trusts this workspace: trusted_workspaces = [{}]",
                Value::String(config.workspace.display().to_string())
            ),
        )
    }

    /// Whether this layer may widen: the user's file, or a trusted workspace's.
    fn may_widen(&self, config: &Config) -> bool {
        matches!(self.from, Source::User(_)) || config.trusted
    }

    fn set<T>(&self, slot: &mut Set<T>, value: T) {
        *slot = self.entry(value);
    }

    /// Applies every key of this file to `config`; the first invalid or widening key is
    /// the error, and then `config` may hold the keys applied before it.
    fn apply(self, config: &mut Config) -> Result<(), HarnessError> {
        let widen = self.may_widen(config);
        self.apply_mode_and_network(config, widen)?;
        self.apply_writable_roots(config, widen)?;
        self.apply_choices(config, widen)?;
        self.apply_limits(config, widen)?;
        self.apply_lists(config, widen)?;
        Ok(())
    }

    /// Applies `mode` and `network`; `widen`: whether this file may widen the sandbox.
    fn apply_mode_and_network(&self, config: &mut Config, widen: bool) -> Result<(), HarnessError> {
        let f = &self.file;
        if let Some(v) = &f.mode {
            let mode: SandboxMode = self.parsed("mode", v)?;
            if !widen && rank(mode) > rank(config.mode.value) {
                return Err(self.widening(
                    config,
                    "mode",
                    v.span().start,
                    &format!("mode {mode} is wider than {}", config.mode.value),
                ));
            }
            self.set(&mut config.mode, mode);
        }
        if let Some(v) = &f.network {
            let network: Network = self.parsed("network", v)?;
            if !widen && network == Network::Allow && config.network.value == Network::Deny {
                return Err(self.widening(
                    config,
                    "network",
                    v.span().start,
                    "network allow lets confined commands reach the network",
                ));
            }
            self.set(&mut config.network, network);
        }
        Ok(())
    }

    /// Applies `writable_roots`; `widen`: whether this file may widen the sandbox.
    fn apply_writable_roots(&self, config: &mut Config, widen: bool) -> Result<(), HarnessError> {
        let f = &self.file;
        if let Some(v) = &f.writable_roots {
            let at = v.span().start;
            let mut roots = Vec::new();
            let workspace = dsh_core::path::canonical_path(&config.workspace);
            for r in v.get_ref() {
                let path = self.path_value("writable_roots", at, r, &config.workspace)?;
                if !path.is_dir() {
                    return Err(self.invalid(
                        "writable_roots",
                        at,
                        &format!("{r:?} is not a directory"),
                    ));
                }
                // Where it really is, now: a relative root is the repository's own
                // directory, and a command must not be able to repoint it elsewhere with a
                // link before the next run.
                let real = dsh_core::path::canonical_path(&path);
                let relative = plain_path(r).is_some_and(|p| p.is_relative());
                if relative && !real.starts_with(&workspace) {
                    return Err(self.invalid(
                        "writable_roots",
                        at,
                        &format!(
                            "{r:?} leads outside the workspace (to {}) through a link; name a \
                             root outside the workspace by its absolute path",
                            real.display()
                        ),
                    ));
                }
                roots.push(real);
            }
            if !widen {
                let below: Vec<PathBuf> = config
                    .writable_roots
                    .value
                    .iter()
                    .map(|r| dsh_core::path::canonical_path(r))
                    .collect();
                if let Some(new) = roots
                    .iter()
                    .find(|r| !below.contains(&dsh_core::path::canonical_path(r)))
                {
                    return Err(self.widening(
                        config,
                        "writable_roots",
                        at,
                        &format!("{} is not a writable root already", new.display()),
                    ));
                }
            }
            self.set(&mut config.writable_roots, roots);
        }
        Ok(())
    }

    /// Applies `approval`, `bash` and `runner`; `widen`: whether this file may widen the sandbox.
    fn apply_choices(&self, config: &mut Config, widen: bool) -> Result<(), HarnessError> {
        let f = &self.file;
        if let Some(v) = &f.approval {
            let policy: ApprovalPolicy = self.parsed("approval", v)?;
            if !widen
                && policy == ApprovalPolicy::Ask
                && config.approval.value == ApprovalPolicy::Never
            {
                return Err(self.widening(
                    config,
                    "approval",
                    v.span().start,
                    "approval ask lets a model ask for a wider sandbox",
                ));
            }
            self.set(&mut config.approval, policy);
        }
        if let Some(v) = &f.bash {
            // Either mode runs under the same sandbox: no trust needed.
            let mode: BashMode = self.parsed("bash", v)?;
            self.set(&mut config.bash, mode);
        }
        if let Some(v) = &f.runner {
            let runner: Runner = self.parsed("runner", v)?;
            if !widen && config.runner.value != Some(runner) {
                return Err(self.widening(
                    config,
                    "runner",
                    v.span().start,
                    "a runner choice can leave part of a policy unenforced",
                ));
            }
            self.set(&mut config.runner, Some(runner));
        }
        Ok(())
    }

    /// Applies the caps (`timeout_ms`, `max_timeout_ms`, `max_output_bytes`, `max_spill_bytes`) and `allow_partial`; `widen`: whether this file may widen the sandbox.
    fn apply_limits(&self, config: &mut Config, widen: bool) -> Result<(), HarnessError> {
        let f = &self.file;
        let caps: [Cap; 4] = [
            ("timeout_ms", &f.timeout_ms, |c| &mut c.timeout_ms, u64::MAX),
            (
                "max_timeout_ms",
                &f.max_timeout_ms,
                |c| &mut c.max_timeout_ms,
                MAX_TIMER_DELAY_MS,
            ),
            (
                "max_output_bytes",
                &f.max_output_bytes,
                |c| &mut c.max_output_bytes,
                usize::MAX as u64,
            ),
            (
                "max_spill_bytes",
                &f.max_spill_bytes,
                |c| &mut c.max_spill_bytes,
                u64::MAX,
            ),
        ];
        for (key, value, slot, max) in caps {
            let Some(v) = value else { continue };
            let at = v.span().start;
            let n = u64::try_from(*v.get_ref())
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| {
                    self.invalid(key, at, &format!("must be an integer from 1 to {max}"))
                })?;
            let below = slot(config).value;
            // timeout_ms is only a default: the cap bounds it whatever it says.
            if !widen && key != "timeout_ms" && n > below {
                return Err(self.widening(config, key, at, &format!("{key} {n} is above {below}")));
            }
            self.set(slot(config), n);
        }
        if let Some(v) = &f.allow_partial {
            if !widen && *v.get_ref() && !config.allow_partial.value {
                return Err(self.widening(
                    config,
                    "allow_partial",
                    v.span().start,
                    "allow_partial runs commands the sandbox enforces only in part",
                ));
            }
            self.set(&mut config.allow_partial, *v.get_ref());
        }
        Ok(())
    }

    /// Applies the lists (`env_allow`, `protected`, `deny_read`, `read_allow`, `trusted_workspaces`); `widen`: whether this file may widen the sandbox.
    fn apply_lists(&self, config: &mut Config, widen: bool) -> Result<(), HarnessError> {
        let f = &self.file;
        if let Some(v) = &f.env_allow {
            let at = v.span().start;
            if !widen && !v.get_ref().is_empty() {
                return Err(self.widening(
                    config,
                    "env_allow",
                    at,
                    "env_allow lets credentials through to commands",
                ));
            }
            for n in v.get_ref() {
                if n.is_empty() || n.contains('=') || n.contains('\0') {
                    return Err(self.invalid(
                        "env_allow",
                        at,
                        &format!("{n:?} is not a variable name"),
                    ));
                }
                config.env_allow.push(self.entry(n.clone()));
            }
        }
        if let Some(v) = &f.protected {
            for p in v.get_ref() {
                let path = plain_path(p).ok_or_else(|| {
                    self.invalid(
                        "protected",
                        v.span().start,
                        &format!("{p:?} is not a plain path (no empty, `.` or `..` parts)"),
                    )
                })?;
                config.protected.push(self.entry(path));
            }
        }
        if let Some(v) = &f.deny_read {
            for p in v.get_ref() {
                let path = self.path_value("deny_read", v.span().start, p, &config.workspace)?;
                config.deny_read.push(self.entry(path));
            }
        }
        if let Some(v) = &f.read_allow {
            let at = v.span().start;
            if !widen && !v.get_ref().is_empty() {
                return Err(self.widening(
                    config,
                    "read_allow",
                    at,
                    "read_allow opens paths of the home directory to commands",
                ));
            }
            for p in v.get_ref() {
                let path = self.path_value("read_allow", at, p, &config.workspace)?;
                config.read_allow.push(self.entry(path));
            }
        }
        if let Some(v) = &f.trusted_workspaces {
            let at = v.span().start;
            if !matches!(self.from, Source::User(_)) {
                return Err(self.invalid(
                    "trusted_workspaces",
                    at,
                    "only your own config may say which workspaces are trusted",
                ));
            }
            for p in v.get_ref() {
                let path = self.path_value("trusted_workspaces", at, p, &config.workspace)?;
                config.trusted_workspaces.push(self.entry(path));
            }
        }
        Ok(())
    }

    /// A word value (`mode = "read-only"`) as its type reads it; `CONFIG_INVALID` with the
    /// type's own message otherwise.
    fn parsed<T: std::str::FromStr<Err = HarnessError>>(
        &self,
        key: &str,
        v: &Spanned<String>,
    ) -> Result<T, HarnessError> {
        v.get_ref()
            .parse()
            .map_err(|e: HarnessError| self.invalid(key, v.span().start, e.message()))
    }

    fn entry<T>(&self, value: T) -> Set<T> {
        Set {
            value,
            from: self.from.clone(),
        }
    }

    /// A path value: plain (see [`plain_path`]); relative ones are in the workspace for
    /// the workspace's file and refused in the user's (which is not tied to one).
    fn path_value(
        &self,
        key: &str,
        at: usize,
        raw: &str,
        workspace: &Path,
    ) -> Result<PathBuf, HarnessError> {
        let path = plain_path(raw).ok_or_else(|| {
            self.invalid(
                key,
                at,
                &format!("{raw:?} is not a plain path (no empty, `.` or `..` parts)"),
            )
        })?;
        match (path.is_absolute(), &self.from) {
            (true, _) => Ok(path),
            (false, Source::Workspace(_)) => Ok(workspace.join(path)),
            _ => Err(self.invalid(
                key,
                at,
                &format!("{raw:?} must be absolute or start with ~/"),
            )),
        }
    }
}

impl Config {
    /// Applies the command line: the user's own choice, so it may widen.
    fn apply_flags(&mut self, flags: &Flags) -> Result<(), HarnessError> {
        if let Some(m) = flags.mode {
            self.mode = Set::flag(m);
        }
        if let Some(n) = flags.network {
            self.network = Set::flag(n);
        }
        if !flags.writable_roots.is_empty() {
            let mut roots = Vec::new();
            for dir in &flags.writable_roots {
                if !dir.is_dir() {
                    return Err(HarnessError::invalid_argument(format!(
                        "--writable {}: not a directory",
                        dir.display()
                    )));
                }
                roots.push(std::path::absolute(dir).unwrap_or_else(|_| dir.clone()));
            }
            self.writable_roots = Set::flag(roots);
        }
        if let Some(r) = flags.runner {
            self.runner = Set::flag(Some(r));
        }
        if let Some(b) = flags.bash {
            self.bash = Set::flag(b);
        }
        if flags.allow_partial {
            self.allow_partial = Set::flag(true);
        }
        for p in &flags.protected {
            if !is_plain(p) {
                return Err(HarnessError::invalid_argument(format!(
                    "--protect {}: not a plain path (no `.` or `..` parts)",
                    p.display()
                )));
            }
            self.protected.push(Set::flag(p.clone()));
        }
        Ok(())
    }

    /// The World configuration this makes, with `state_dir` as `DSH_HOME`.
    pub fn world_config(&self, state_dir: Option<PathBuf>) -> WorldConfig {
        let mut shell = ShellConfig {
            timeout_ms: self.timeout_ms.value,
            max_timeout_ms: self.max_timeout_ms.value,
            max_spill_bytes: self.max_spill_bytes.value,
            ..ShellConfig::default()
        };
        shell.max_output_bytes = usize::try_from(self.max_output_bytes.value).unwrap_or(usize::MAX);
        // A trusted workspace's config may widen the sandbox, so no command may write it:
        // its `.dsh` is protected wherever a writable root holds it (as it lies, and where
        // a link leads), and so is a trusted path that is itself a link.
        let mut protected: Vec<PathBuf> = self.protected.iter().map(|s| s.value.clone()).collect();
        for t in &self.trusted_workspaces {
            let path = &t.value;
            protected.push(path.join(".dsh"));
            protected.push(dsh_core::path::canonical_path(path).join(".dsh"));
            // Every link on the way: replacing one would point the trusted path elsewhere.
            protected.extend(dsh_core::path::links_on_the_way(path));
        }
        WorldConfig {
            workspace: self.workspace.clone(),
            mode: self.mode.value,
            network: self.network.value,
            writable_roots: self.writable_roots.value.clone(),
            on_partial: if self.allow_partial.value {
                OnPartial::Accept
            } else {
                OnPartial::Refuse
            },
            protected,
            deny_read: self.deny_read.iter().map(|s| s.value.clone()).collect(),
            read_allow: self.read_allow.iter().map(|s| s.value.clone()).collect(),
            env_allow: self.env_allow.iter().map(|s| s.value.clone()).collect(),
            runner: self.runner.value,
            approval: self.approval.value,
            shell,
            state_dir,
            terminal: dsh_terminal::TerminalConfig::default(),
            jobs: dsh_jobs::JobsConfig::default(),
            bash: self.bash.value,
        }
    }

    /// Every value with its source, as `dsh config show --json` prints it.
    pub fn to_json(&self) -> Value {
        fn one(value: Value, from: &Source) -> Value {
            let mut v = json!({"value": value, "from": from.name()});
            if let Some(f) = from.file() {
                v["file"] = json!(f.display().to_string());
            }
            v
        }
        fn list<T>(items: &[Set<T>], show: impl Fn(&T) -> String) -> Value {
            Value::Array(
                items
                    .iter()
                    .map(|s| one(json!(show(&s.value)), &s.from))
                    .collect(),
            )
        }
        let path = |p: &PathBuf| p.display().to_string();
        let ws_file = self.workspace.join(".dsh/config.toml");
        json!({
            "workspace": self.workspace.display().to_string(),
            "files": {
                "user": self.user_file.as_ref().map(|p| json!({
                    "path": p.display().to_string(),
                    "exists": p.is_file(),
                })),
                "workspace": {
                    "path": ws_file.display().to_string(),
                    "exists": ws_file.is_file(),
                    "trusted": self.trusted,
                },
            },
            "values": {
                "mode": one(json!(self.mode.value.as_str()), &self.mode.from),
                "network": one(json!(self.network.value.as_str()), &self.network.from),
                "writable_roots": one(
                    json!(self.writable_roots.value.iter().map(path).collect::<Vec<_>>()),
                    &self.writable_roots.from,
                ),
                "approval": one(json!(self.approval.value.as_str()), &self.approval.from),
                "runner": one(
                    self.runner.value.map_or(Value::Null, |r| json!(r.as_str())),
                    &self.runner.from,
                ),
                "timeout_ms": one(json!(self.timeout_ms.value), &self.timeout_ms.from),
                "max_timeout_ms": one(json!(self.max_timeout_ms.value), &self.max_timeout_ms.from),
                "max_output_bytes": one(json!(self.max_output_bytes.value), &self.max_output_bytes.from),
                "max_spill_bytes": one(json!(self.max_spill_bytes.value), &self.max_spill_bytes.from),
                "allow_partial": one(json!(self.allow_partial.value), &self.allow_partial.from),
                "bash": one(json!(self.bash.value.as_str()), &self.bash.from),
                "protected": list(&self.protected, |p| p.display().to_string()),
                "deny_read": list(&self.deny_read, |p| p.display().to_string()),
                "read_allow": list(&self.read_allow, |p| p.display().to_string()),
                "env_allow": list(&self.env_allow, Clone::clone),
                "trusted_workspaces": list(&self.trusted_workspaces, |p| p.display().to_string()),
            },
        })
    }
}

/// The largest config file dsh reads.
const FILE_MAX: u64 = 1 << 20;

/// The text of the config file at `path`, empty when it is missing: a regular file of at
/// most [`FILE_MAX`] bytes of UTF-8, opened without waiting (a FIFO or a device is refused,
/// never read). With `workspace` (the open workspace directory), `path` names its
/// `.dsh/config.toml`, read through that handle; neither `.dsh` nor the file may be a
/// link, and the file has one name: a link's target, or a second name, need not be
/// protected, so a confined command could rewrite what a trusted workspace's config says.
///
/// # Errors
/// `CONFIG_INVALID` naming the file.
fn read_config_file(
    path: &Path,
    workspace: Option<&rustix::fd::OwnedFd>,
) -> Result<String, HarnessError> {
    use rustix::fs::{openat, Mode, OFlags, CWD};
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let invalid = |why: &str| HarnessError::config_invalid(format!("{}: {why}", path.display()));
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
    let in_workspace = workspace.is_some();
    let opened = match workspace {
        Some(ws) => openat(
            ws,
            ".dsh",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .and_then(|d| openat(&d, "config.toml", flags | OFlags::NOFOLLOW, Mode::empty())),
        None => openat(CWD, path, flags, Mode::empty()),
    };
    let fd = match opened {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(String::new()),
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) if in_workspace => {
            return Err(invalid(
                "it (or .dsh) is a symbolic link; dsh reads a workspace's config only as a \
                 regular file in a .dsh directory (a link's target may be writable to \
                 commands): put the file there",
            ))
        }
        Err(e) => {
            return Err(invalid("cannot open it").with_source(std::io::Error::from(e)));
        }
    };
    let mut file = std::fs::File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| invalid("cannot read it").with_source(e))?;
    if !meta.is_file() {
        return Err(invalid("not a regular file"));
    }
    if in_workspace && meta.nlink() > 1 {
        return Err(invalid(
            "it has another name (a hard link), through which a command could rewrite it; \
             copy it to a file of its own",
        ));
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(FILE_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| invalid("cannot read it").with_source(e))?;
    if bytes.len() as u64 > FILE_MAX {
        return Err(invalid(&format!(
            "larger than {} KiB; a config file is a few lines",
            FILE_MAX >> 10
        )));
    }
    String::from_utf8(bytes).map_err(|_| invalid("not UTF-8 text"))
}

/// Strictness order of the modes: a higher rank is wider.
fn rank(mode: SandboxMode) -> u8 {
    match mode {
        SandboxMode::ReadOnly => 0,
        SandboxMode::WorkspaceWrite => 1,
        SandboxMode::DangerFullAccess => 2,
    }
}

/// A path value: `~/` expanded; `None` for an empty one, one with a NUL byte, or one with
/// a `.` or `..` component (`protected = ["../.."]` must not reach outside the workspace).
fn plain_path(v: &str) -> Option<PathBuf> {
    if v.trim().is_empty() || v.contains('\0') {
        return None;
    }
    let p = dsh_sandbox::deny_read::expand_home(v)?;
    is_plain(&p).then_some(p)
}

/// Whether `p` has no `.` or `..` component.
fn is_plain(p: &Path) -> bool {
    use std::path::Component;
    p.components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

/// The line (1-based) of byte offset `at` in `text`.
fn line_at(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration of a workspace whose `.dsh/config.toml` is `text`, over
    /// `user` as the user's file (trusted: whether it lists the workspace).
    fn load_with(user: &str, text: &str) -> Result<Config, HarnessError> {
        let d = tempfile::tempdir().expect("tempdir");
        let ws = d.path().join("ws");
        std::fs::create_dir_all(ws.join(".dsh")).expect("dir");
        std::fs::write(ws.join(".dsh/config.toml"), text).expect("write");
        let user_file = d.path().join("user.toml");
        std::fs::write(&user_file, user.replace("$WS", &ws.display().to_string())).expect("write");
        let mut c = Config::defaults(&ws, Some(user_file.clone()));
        Layer::read(&user_file, Source::User(user_file.clone()), None)?.apply(&mut c)?;
        c.decide_trust(&dsh_core::path::canonical_path(&ws));
        let file = ws.join(".dsh/config.toml");
        let dir = rustix::fs::openat(
            rustix::fs::CWD,
            &ws,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .expect("open ws");
        Layer::read(&file, Source::Workspace(file.clone()), Some(&dir))?.apply(&mut c)?;
        Ok(c)
    }

    fn load_ws(text: &str) -> Result<Config, HarnessError> {
        load_with("", text)
    }

    #[test]
    fn a_workspace_config_may_narrow() {
        let c = load_ws("protected = [\"secrets\"]\ndeny_read = [\"keys/*\"]\n").expect("ok");
        assert_eq!(
            c.protected
                .iter()
                .map(|s| s.value.clone())
                .collect::<Vec<_>>(),
            vec![PathBuf::from("secrets")]
        );
        assert_eq!(c.deny_read.len(), 1);
        assert!(c.deny_read[0].value.ends_with("keys/*"));
        let c = load_with(
            "mode = \"workspace-write\"\nnetwork = \"allow\"\nmax_output_bytes = 100000\n",
            "mode = \"read-only\"\nnetwork = \"deny\"\napproval = \"never\"\n\
             max_output_bytes = 1000\ntimeout_ms = 900000\n",
        )
        .expect("narrowing applies");
        assert_eq!(c.mode.value, SandboxMode::ReadOnly);
        assert_eq!(c.mode.from.name(), "workspace");
        assert_eq!(c.network.value, Network::Deny);
        assert_eq!(c.approval.value, ApprovalPolicy::Never);
        assert_eq!(c.max_output_bytes.value, 1000);
        assert_eq!(c.timeout_ms.value, 900_000);
    }

    #[test]
    fn the_bash_mode_comes_from_any_file_and_a_bad_one_is_named() {
        let c = load_with("", "bash = \"persistent\"\n").expect("untrusted may set it");
        assert_eq!(c.bash.value, BashMode::Persistent);
        assert_eq!(c.bash.from.name(), "workspace");
        assert_eq!(c.world_config(None).bash, BashMode::Persistent);
        let e = load_with("", "\nbash = \"forever\"\n").expect_err("bad");
        assert!(
            e.message().contains("config.toml:2: bash:"),
            "{}",
            e.message()
        );
        assert!(e.message().contains("persistent"), "{}", e.message());
    }

    #[test]
    fn a_workspace_config_may_not_widen() {
        for (text, key, line) in [
            ("# c\nallow_partial = true\n", "allow_partial", 2),
            ("env_allow = [\"AWS_SECRET_ACCESS_KEY\"]\n", "env_allow", 1),
            ("\n\nmode = \"danger-full-access\"\n", "mode", 3),
            ("mode = \"workspace-write\"\n", "mode", 1),
            ("network = \"allow\"\n", "network", 1),
            ("writable_roots = [\"/\"]\n", "writable_roots", 1),
            ("runner = \"landlock\"\n", "runner", 1),
            ("max_timeout_ms = 600001\n", "max_timeout_ms", 1),
            ("max_spill_bytes = 1099511627776\n", "max_spill_bytes", 1),
        ] {
            let e = load_ws(text).expect_err(text);
            assert_eq!(e.code().as_str(), "CONFIG_INVALID");
            let m = e.message();
            assert!(m.contains(&format!("config.toml:{line}: {key}:")), "{m}");
            assert!(m.contains("may only narrow"), "{m}");
            assert!(m.contains("trusted_workspaces = ["), "{m}");
        }
        // The user's own approval = "never" makes a workspace's "ask" a widening.
        let e = load_with("approval = \"never\"\n", "approval = \"ask\"\n").expect_err("ask");
        assert!(
            e.message().contains("config.toml:1: approval:"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn a_trusted_workspace_may_widen_and_only_the_user_says_which() {
        let c = load_with(
            "trusted_workspaces = [\"$WS\"]\n",
            "mode = \"danger-full-access\"\nnetwork = \"allow\"\nallow_partial = true\n",
        )
        .expect("trusted");
        assert!(c.trusted);
        assert_eq!(c.mode.value, SandboxMode::DangerFullAccess);
        assert_eq!(c.network.value, Network::Allow);
        assert!(c.allow_partial.value);
        let e = load_ws("trusted_workspaces = [\"/\"]\n").expect_err("self-trust");
        assert!(
            e.message()
                .contains("trusted_workspaces: only your own config"),
            "{}",
            e.message()
        );
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_file_and_line() {
        let e = load_ws("\nmode = \"danger-full-access\"\n").expect_err("must fail");
        assert!(e.message().contains("config.toml:2:"), "{}", e.message());
        assert!(e.message().contains("mode"), "{}", e.message());
        let e = load_ws("\nmodes = \"read-only\"\n").expect_err("must fail");
        assert!(e.message().contains("config.toml:2:"), "{}", e.message());
        assert!(e.message().contains("modes"), "{}", e.message());
        let e = load_ws("protected = \"x\"\n").expect_err("must fail");
        assert!(e.message().contains("config.toml:1:"), "{}", e.message());
        let e = load_ws("protected = [\"\"]\n").expect_err("must fail");
        assert!(e.message().contains("protected:"), "{}", e.message());
        let e = load_ws("\nmode = \"sideways\"\n").expect_err("must fail");
        assert!(
            e.message().contains("config.toml:2: mode:"),
            "{}",
            e.message()
        );
        for bad in [
            "timeout_ms = 0",
            "timeout_ms = -5",
            "max_timeout_ms = 2147483648",
            "timeout_ms = \"5\"",
        ] {
            let e = load_with("", &format!("\n{bad}\n")).expect_err(bad);
            assert!(
                e.message().contains("config.toml:2:"),
                "{bad}: {}",
                e.message()
            );
        }
        // `protected = ["../../x"]` is refused: the carve would bind the workspace's
        // parents, up to `/`, writable.
        for bad in ["../../x", "a/../../b", "./x"] {
            let e = load_ws(&format!("protected = [\"{bad}\"]\n")).expect_err(bad);
            assert!(e.message().contains("not a plain path"), "{}", e.message());
        }
    }

    // The table of keys is the file format: the keys a file may hold are the table's,
    // in its order.
    #[test]
    fn the_keys_table_is_the_file_format() {
        let e = toml::from_str::<File>("not_a_key = 1").expect_err("unknown key");
        let msg = e.message().to_owned();
        let expected: Vec<&str> = msg
            .split("expected one of ")
            .nth(1)
            .expect("serde names the fields")
            .split(", ")
            .map(|k| k.trim().trim_matches('`'))
            .collect();
        let table: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
        assert_eq!(expected, table, "{msg}");
    }

    const REFERENCE_BEGIN: &str = "<!-- generated from crates/dsh/src/config.rs (KEYS): DSH_BLESS=1 cargo test -p dsh --bin dsh config -->\n";
    const REFERENCE_END: &str = "<!-- end of the generated keys -->\n";

    /// The generated block of docs/reference.md: every key with what it takes, its
    /// default as `dsh config show --json` prints it, what a workspace's file may do.
    fn reference_block() -> String {
        let defaults = Config::defaults(Path::new("/ws"), None).to_json();
        let mut out = String::from(REFERENCE_BEGIN);
        out.push_str(
            "\n| key | takes | default | in a workspace's file | means |\n|---|---|---|---|---|\n",
        );
        for k in KEYS {
            let v = &defaults["values"][k.name];
            let default = match v.get("value") {
                Some(serde_json::Value::Null) => "none".to_owned(),
                Some(x) => format!("`{x}`"),
                None => "`[]`".to_owned(),
            };
            out.push_str(&format!(
                "| `{}` | {} | {default} | {} | {} |\n",
                k.name, k.values, k.workspace, k.meaning
            ));
        }
        out.push('\n');
        out.push_str(REFERENCE_END);
        out
    }

    #[test]
    fn the_documented_keys_are_the_code() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/reference.md");
        let doc = std::fs::read_to_string(&path).expect("docs/reference.md");
        let (Some(b), Some(e)) = (doc.find(REFERENCE_BEGIN), doc.find(REFERENCE_END)) else {
            panic!("docs/reference.md has no generated block of keys (markers missing)");
        };
        let want = reference_block();
        if doc[b..e + REFERENCE_END.len()] != want {
            if std::env::var_os("DSH_BLESS").is_some() {
                let new = format!("{}{want}{}", &doc[..b], &doc[e + REFERENCE_END.len()..]);
                std::fs::write(&path, new).expect("write docs/reference.md");
                return;
            }
            panic!(
                "docs/reference.md's keys differ from the code: run \
                 DSH_BLESS=1 cargo test -p dsh --bin dsh config"
            );
        }
    }
}
