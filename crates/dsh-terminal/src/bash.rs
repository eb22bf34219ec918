//! [`BashBackend`]: `bash` on a PTY, with a prompt dsh controls, under the terminal's
//! sandbox policy.

use std::ffi::OsString;
use std::sync::Arc;

use async_trait::async_trait;
use dsh_core::{CancelToken, HarnessError};
use dsh_process::{SpawnSpec, Subprocess, TerminalSize};
use dsh_sandbox::{sandbox_unavailable, Sandbox};

use crate::registry::{SpawnRequest, TerminalBackend};
use crate::terminal::{Terminal, PROMPT};
use crate::TerminalConfig;

/// The shell's prompt command: the marker (`ESC ] 133;D;<status> BEL`), then the prompt
/// set again, so a `PS1` the model changes heals at the next prompt.
const PROMPT_COMMAND: &str = "printf '\\033]133;D;%s\\007' \"$?\"; PS1='dsh> '";

/// Starts `bash --noprofile --norc -i` terminals (type `shell`).
///
/// The shell gets the scrubbed environment of the subprocess seam plus: `TERM=xterm`,
/// `PAGER=cat`, `GIT_PAGER=cat`, dsh's managed variables (the request's `env`), `DSH_PTY_SESSION_ID`,
/// `PS1='dsh> '` and a `PROMPT_COMMAND` that prints the prompt marker. (The reference
/// sets `TERM=dumb`; dsh renders full-screen programs as a screen, and `dumb` would make
/// `top`, `less` or `vim` refuse to draw one.)
///
/// Under a confined policy the shell is wrapped by the sandbox (fail closed: without a
/// sandbox a confined terminal is `SANDBOX_UNAVAILABLE`, never an unconfined shell); the
/// policy is the one resolved when the terminal opens, for its whole life.
pub struct BashBackend {
    subprocess: Arc<dyn Subprocess>,
    sandbox: Option<Arc<dyn Sandbox>>,
    shell: OsString,
}

impl std::fmt::Debug for BashBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BashBackend")
            .field("shell", &self.shell)
            .field("sandbox", &self.sandbox.is_some())
            .finish_non_exhaustive()
    }
}

impl BashBackend {
    /// A backend spawning through `subprocess`, confining through `sandbox` (needed for
    /// every mode but danger-full-access).
    pub fn new(subprocess: Arc<dyn Subprocess>, sandbox: Option<Arc<dyn Sandbox>>) -> BashBackend {
        BashBackend {
            subprocess,
            sandbox,
            shell: OsString::from("/bin/bash"),
        }
    }

    /// Uses `shell` (a path to bash) instead of `/bin/bash`.
    pub fn with_shell(mut self, shell: impl Into<OsString>) -> BashBackend {
        self.shell = shell.into();
        self
    }

    fn spawn_spec(
        &self,
        request: &SpawnRequest,
        config: &TerminalConfig,
    ) -> Result<(SpawnSpec, Option<dsh_sandbox::Confinement>), HarnessError> {
        let plain: Vec<OsString> = [
            self.shell.clone(),
            "--noprofile".into(),
            "--norc".into(),
            "-i".into(),
        ]
        .into();
        let policy = &request.policy;
        let confinement = if policy.mode.is_confined() {
            let Some(sandbox) = &self.sandbox else {
                return Err(sandbox_unavailable(
                    policy.mode,
                    "the terminal backend has no sandbox configured",
                    None,
                ));
            };
            Some(sandbox.confine_on_terminal(&plain, policy)?)
        } else {
            None
        };
        let argv = confinement.as_ref().map_or(plain, |c| c.argv.clone());
        let cwd = request
            .cwd
            .clone()
            .unwrap_or_else(|| policy.workspace_root.clone());
        let mut spec = SpawnSpec::new(argv, cwd);
        let mut set = |k: &str, v: &str| {
            spec.env.insert(k.to_owned(), Some(v.to_owned()));
        };
        set("TERM", "xterm");
        set("PAGER", "cat");
        set("GIT_PAGER", "cat");
        // dsh's own variables only: nothing a caller passes can set `LD_PRELOAD`,
        // `BASH_ENV` or what the backend sets after them.
        for (k, v) in request
            .env
            .iter()
            .filter(|(k, _)| dsh_process::env::is_dsh_name(k))
        {
            set(k, v);
        }
        set("DSH_PTY_SESSION_ID", request.id.as_str());
        set("PS1", PROMPT);
        set("PROMPT_COMMAND", PROMPT_COMMAND);
        set("BASH_SILENCE_DEPRECATION_WARNING", "1");
        if let Some(c) = &confinement {
            spec = spec.confined_by(c);
        }
        spec.terminal = Some(TerminalSize {
            rows: config.rows,
            cols: config.cols,
        });
        spec.grace = config.dispose_grace;
        Ok((spec, confinement))
    }
}

#[async_trait]
impl TerminalBackend for BashBackend {
    fn kind(&self) -> &str {
        "shell"
    }

    async fn spawn(
        &self,
        request: SpawnRequest,
        config: &TerminalConfig,
        cancel: &CancelToken,
    ) -> Result<(Terminal, String), HarnessError> {
        if let Some(reason) = cancel.reason() {
            return Err(HarnessError::aborted_before_start("terminal_open", reason));
        }
        let (spec, confinement) = self.spawn_spec(&request, config)?;
        let process = self.subprocess.spawn(spec)?;
        let terminal = Terminal::start(process, config.clone())?.holding(confinement);
        match terminal.initialize(config.timeout, cancel).await {
            Ok(motd) => Ok((terminal, motd)),
            Err(e) => {
                // Rolled back: the shell and anything it started are gone before this
                // returns.
                let _ = terminal.close().await;
                Err(e)
            }
        }
    }
}
