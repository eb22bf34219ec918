//! World presets: the common worlds by name, each made from one [`WorldConfig`].
//!
//! A preset is the only wiring of a World: `dsh tool`, `dsh mcp`, `dsh exec`, the bench
//! and the tests all start from [`WorldBuilder::preset`], so a policy, a runner choice or
//! an output limit reaches every consumer the same way.
//!
//! - [`Preset::Sandboxed`] (the default): the local subprocess seam, bash confined by the
//!   local sandbox (Landlock + seccomp, bubblewrap, Seatbelt), the fenced filesystem
//!   provider, and every built-in tool.
//! - [`Preset::Local`]: the same seams with no sandbox: danger-full-access only. A
//!   configuration asking for a confined mode is `CONFIG_INVALID`; a session that later
//!   asks for one is refused with `SANDBOX_UNAVAILABLE` (never run unconfined).

use std::path::PathBuf;
use std::sync::Arc;

use dsh_approval::{ApprovalPolicy, ApprovalService};
use dsh_core::HarnessError;
use dsh_fs::{FileSystem, LocalFs, SandboxedFs};
use dsh_process::{EnvAllow, LocalSubprocess, Subprocess};
use dsh_sandbox::{LocalSandbox, Network, OnPartial, Runner, Sandbox, SandboxMode};
use dsh_shell::bash::LocalBash;
use dsh_shell::shell_env::ShellEnv;
use dsh_shell::ShellConfig;
use dsh_store::session::SessionLog;

use crate::tools::bash::persistent::PersistentBashTool;
use crate::tools::bash::BashTool;
use crate::tools::files::{EditTool, ReadTool, WriteTool};
use crate::tools::image::ReadImageTool;
use crate::tools::jobs::{JobKillTool, JobListTool, JobOutputTool};
use crate::tools::search::{GlobTool, GrepTool};
use crate::tools::terminal::{
    TerminalCloseTool, TerminalListTool, TerminalOpenTool, TerminalReadTool, TerminalSendTool,
    TerminalSignalTool,
};
use crate::{PolicyService, WorldBuilder};
use dsh_jobs::{Jobs, JobsConfig};
use dsh_terminal::{BashBackend, TerminalConfig, Terminals};

/// A named World (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// No sandbox: danger-full-access only.
    Local,
    /// Confined shells and a fenced filesystem (the default).
    Sandboxed,
}

impl Preset {
    /// `local` or `sandboxed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Preset::Local => "local",
            Preset::Sandboxed => "sandboxed",
        }
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a preset World is made from: the resolved configuration (flags, config
/// files, defaults). [`WorldConfig::new`] gives the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorldConfig {
    /// The workspace: the root of calls without a session, and where the file tools
    /// resolve relative paths.
    pub workspace: PathBuf,
    /// The mode of a session that set none. Default: read-only.
    pub mode: SandboxMode,
    /// Network in confined modes. Default: denied.
    pub network: Network,
    /// Directories writable besides the workspace under workspace-write, protected as the
    /// workspace is. Default: none.
    pub writable_roots: Vec<PathBuf>,
    /// Whether a command runs where its policy is enforced only in part. Default: refused.
    pub on_partial: OnPartial,
    /// More protected paths (relative: in each call's workspace root).
    pub protected: Vec<PathBuf>,
    /// More read denials (absolute patterns), beside the defaults.
    pub deny_read: Vec<PathBuf>,
    /// More paths readable in the closed homes (absolute patterns), beside the defaults.
    pub read_allow: Vec<PathBuf>,
    /// Variables let through the credential scrub.
    pub env_allow: Vec<String>,
    /// The only sandbox runner to use. Default: the fastest that fully enforces a policy.
    pub runner: Option<Runner>,
    /// The approval policy of a session that set none. Default: ask.
    pub approval: ApprovalPolicy,
    /// The shell's timeouts and output limits.
    pub shell: ShellConfig,
    /// The state directory commands see as `DSH_HOME`. Default: none.
    pub state_dir: Option<PathBuf>,
    /// The terminal sessions' sizes, limits and readiness timings.
    pub terminal: TerminalConfig,
    /// The background job registry's settings.
    pub jobs: JobsConfig,
    /// Whether `bash` runs each command in a fresh shell or in one shell per session.
    /// Default: one-shot.
    pub bash: BashMode,
}

/// How the `bash` tool runs commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BashMode {
    /// Each command in a fresh `bash -c` (the default).
    #[default]
    OneShot,
    /// One shell per session on a terminal: `cd` and `export` carry over
    /// ([`PersistentBashTool`]).
    Persistent,
}

impl BashMode {
    /// `one-shot` or `persistent`.
    pub const fn as_str(self) -> &'static str {
        match self {
            BashMode::OneShot => "one-shot",
            BashMode::Persistent => "persistent",
        }
    }
}

impl std::str::FromStr for BashMode {
    type Err = HarnessError;

    fn from_str(s: &str) -> Result<BashMode, HarnessError> {
        match s {
            "one-shot" => Ok(BashMode::OneShot),
            "persistent" => Ok(BashMode::Persistent),
            other => Err(HarnessError::invalid_argument(format!(
                "unknown bash mode {:?}: use \"one-shot\" or \"persistent\"",
                dsh_core::visible::visible(other)
            ))),
        }
    }
}

impl WorldConfig {
    /// The defaults for `workspace`.
    pub fn new(workspace: impl Into<PathBuf>) -> WorldConfig {
        WorldConfig {
            workspace: workspace.into(),
            mode: SandboxMode::ReadOnly,
            network: Network::Deny,
            writable_roots: Vec::new(),
            on_partial: OnPartial::Refuse,
            protected: Vec::new(),
            deny_read: Vec::new(),
            read_allow: Vec::new(),
            env_allow: Vec::new(),
            runner: None,
            approval: ApprovalPolicy::Ask,
            shell: ShellConfig::default(),
            state_dir: None,
            terminal: TerminalConfig::default(),
            jobs: JobsConfig::default(),
            bash: BashMode::OneShot,
        }
    }

    /// The same configuration with `mode` as the default mode.
    pub fn with_mode(mut self, mode: SandboxMode) -> WorldConfig {
        self.mode = mode;
        self
    }

    /// The policy service this configuration makes: the one place a call's policy is
    /// resolved.
    pub fn policy_service(&self) -> PolicyService {
        PolicyService::new(self.mode, self.network, &self.workspace)
            .with_on_partial(self.on_partial)
            .with_writable_roots(self.writable_roots.iter().cloned())
            .with_protected(self.protected.iter().cloned())
            .with_deny_read(self.every_deny_read())
            .with_read_allow(self.read_allow.iter().cloned())
    }

    /// The configured read denials and the state directory, if one is configured (the
    /// defaults hold the default one).
    fn every_deny_read(&self) -> Vec<PathBuf> {
        let mut out = self.deny_read.clone();
        out.extend(
            self.state_dir
                .iter()
                .map(|d| dsh_core::path::canonical_path(d)),
        );
        out
    }

    /// The local subprocess provider this configuration makes (its `env_allow`).
    ///
    /// # Errors
    /// `CONFIG_INVALID` for a name that is not a variable name.
    pub fn subprocess(&self) -> Result<LocalSubprocess, HarnessError> {
        Ok(LocalSubprocess::new().with_env_allow(EnvAllow::new(self.env_allow.iter())?))
    }

    /// The local sandbox provider this configuration makes (its `runner`).
    pub fn sandbox(&self) -> LocalSandbox {
        let local = LocalSandbox::new();
        match self.runner {
            Some(runner) => local.force_runner(runner),
            None => local,
        }
    }
}

impl WorldBuilder {
    /// Installs `preset`'s provider for every seam that has none yet, from `config`, with
    /// `sessions` as the session log, and registers every built-in tool (`bash`, `read`,
    /// `write`, `edit`, `glob`, `grep`, `read_image`, the six terminal tools and the three
    /// job tools). A seam given a provider before
    /// keeps it: the preset's shell and filesystem are then made over that provider.
    ///
    /// # Errors
    /// `CONFIG_INVALID` for a bad shell configuration, a bad `env_allow` name, or a
    /// confined mode with [`Preset::Local`]; `IO_FAILED` when the sandbox's private
    /// directory cannot be made; `DUPLICATE_SERVICE` for a session log or approval service
    /// installed already.
    pub fn preset(
        mut self,
        preset: Preset,
        config: &WorldConfig,
        sessions: Arc<SessionLog>,
    ) -> Result<WorldBuilder, HarnessError> {
        if preset == Preset::Local && config.mode.is_confined() {
            return Err(HarnessError::config_invalid(format!(
                "the local preset has no sandbox, so its mode must be danger-full-access \
                 (it is {}); use the sandboxed preset to confine commands",
                config.mode
            )));
        }
        config.shell.validate("bash")?;
        let subprocess: Arc<dyn Subprocess> = match self.subprocess.take() {
            Some(s) => s,
            None => Arc::new(config.subprocess()?),
        };
        let sandbox: Option<Arc<dyn Sandbox>> = match (preset, self.sandbox.take()) {
            (Preset::Local, s) => s,
            (Preset::Sandboxed, Some(s)) => Some(s),
            (Preset::Sandboxed, None) => {
                let local = config.sandbox();
                // Made now, so bash and the file tools share one temp directory.
                local.private_temp_dir()?;
                Some(Arc::new(local))
            }
        };
        if self.shell.is_none() {
            let mut bash = LocalBash::with_config(subprocess.clone(), config.shell.clone())?;
            if let Some(s) = &sandbox {
                bash = bash.with_sandbox(s.clone());
            }
            self = self.shell(Arc::new(bash))?;
        }
        if self.fs.is_none() {
            let local = LocalFs::new(&config.workspace);
            let fs: Arc<dyn FileSystem> = match &sandbox {
                None => Arc::new(local),
                Some(s) => {
                    let mut fenced = SandboxedFs::new(local);
                    if let Some(temp) = s.temp_dir() {
                        fenced = fenced.with_temp_dir(temp);
                    }
                    Arc::new(fenced)
                }
            };
            self = self.fs(fs)?;
        }
        self = self.subprocess(subprocess)?;
        if let Some(s) = sandbox {
            self = self.sandbox(s)?;
        }
        if self.policy.is_none() {
            self = self.policy(config.policy_service())?;
        }
        if self.shell_env.is_none() {
            self = self.shell_env(Arc::new(ShellEnv::new(config.state_dir.clone())))?;
        }
        if self.terminals.is_none() {
            // Terminals spawn through a provider of their own: ending a connection's
            // one-shot commands at once (kill_all) leaves its terminals their hangup and
            // grace, which `World::end_terminals` gives them.
            let terminals = Terminals::new(config.terminal.clone())?;
            terminals.register(Arc::new(BashBackend::new(
                Arc::new(config.subprocess()?),
                self.sandbox.clone(),
            )))?;
            self = self.terminals(Arc::new(terminals))?;
        }
        if self.jobs.is_none() {
            self = self.jobs(Arc::new(Jobs::new(config.jobs.clone())?))?;
        }
        self = self
            .approval(Arc::new(ApprovalService::new(config.approval)))?
            .sessions(sessions)?;
        let bash: Arc<dyn crate::Tool> = match config.bash {
            BashMode::OneShot => Arc::new(BashTool),
            BashMode::Persistent => Arc::new(PersistentBashTool::new(&config.shell)),
        };
        self = self.tool(bash)?;
        for tool in builtin_tools() {
            self = self.tool(tool)?;
        }
        Ok(self)
    }
}

/// Every built-in tool but `bash`, once.
fn builtin_tools() -> [Arc<dyn crate::Tool>; 15] {
    [
        Arc::new(JobOutputTool),
        Arc::new(JobListTool),
        Arc::new(JobKillTool),
        Arc::new(TerminalOpenTool),
        Arc::new(TerminalSendTool),
        Arc::new(TerminalReadTool),
        Arc::new(TerminalSignalTool),
        Arc::new(TerminalCloseTool),
        Arc::new(TerminalListTool),
        Arc::new(ReadTool),
        Arc::new(WriteTool),
        Arc::new(EditTool),
        Arc::new(GlobTool),
        Arc::new(GrepTool),
        Arc::new(ReadImageTool),
    ]
}
