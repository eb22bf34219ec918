//! The sandbox policy service: which [`SandboxPolicy`] a call gets.
//!
//! Precedence for the mode: an explicit (approved) mode for this call, else the session's
//! last `sandbox/mode` event, else the deployment default (`read-only` unless configured).
//! The workspace root is the session's working directory, canonicalised first (so
//! `link/..` follows the link) and only then made absolute; without a session, the
//! service's fallback root. [`PolicyService::set_mode`] is the only way to change a
//! session's mode, and it leaves an event.

use std::path::{Path, PathBuf};

use dsh_core::journal::{EventKind, Journal};
use dsh_core::HarnessError;
use serde_json::{json, Value};

use crate::{root_of, Network, SandboxMode, SandboxPolicy};

/// See the [module docs](self).
#[derive(Clone, Debug)]
pub struct PolicyService {
    default_mode: SandboxMode,
    network: Network,
    fallback_root: PathBuf,
}

impl PolicyService {
    /// A service defaulting to `mode` and `network`, with `fallback_root` for calls
    /// without a session.
    pub fn new(mode: SandboxMode, network: Network, fallback_root: &Path) -> PolicyService {
        PolicyService {
            default_mode: mode,
            network,
            fallback_root: root_of(fallback_root),
        }
    }

    /// The deployment default mode.
    pub fn default_mode(&self) -> SandboxMode {
        self.default_mode
    }

    /// The session's own mode (its last `sandbox/mode` event), if it set one.
    pub async fn override_of(&self, session: &dyn Journal) -> Option<SandboxMode> {
        let e = session.last_of(EventKind::SandboxMode).await?;
        e.data.get("mode").and_then(Value::as_str)?.parse().ok()
    }

    /// The policy of a call: `explicit` mode, else the session's, else the default; the
    /// root from `session` = (journal, its cwd), else the fallback root.
    pub async fn resolve(
        &self,
        session: Option<(&dyn Journal, &Path)>,
        explicit: Option<SandboxMode>,
    ) -> SandboxPolicy {
        let session_mode = match session {
            Some((j, _)) => self.override_of(j).await,
            None => None,
        };
        let mode = explicit.or(session_mode).unwrap_or(self.default_mode);
        let root = session.map_or_else(|| self.fallback_root.clone(), |(_, cwd)| root_of(cwd));
        SandboxPolicy::for_workspace(mode, root).with_network(self.network)
    }

    /// Sets the session's mode: appends one `sandbox/mode {mode}` event.
    ///
    /// # Errors
    /// The journal's errors.
    pub async fn set_mode(
        &self,
        session: &dyn Journal,
        mode: SandboxMode,
    ) -> Result<(), HarnessError> {
        session
            .append(EventKind::SandboxMode, json!({"mode": mode.as_str()}))
            .await
            .map(|_| ())
    }

    /// The paragraph a system prompt carries about the policy. Byte-stable: host temp
    /// paths are never named.
    pub fn context_text(policy: &SandboxPolicy) -> String {
        let mode = policy.mode;
        match mode {
            SandboxMode::ReadOnly => format!(
                "Current DSH file policy: {mode}. Sandbox-enforced operations cannot modify \
                 files in this mode. Do not refuse in advance: try the tool, and follow its \
                 denial and escalation guidance if it is refused."
            ),
            SandboxMode::WorkspaceWrite => format!(
                "Current DSH file policy: {mode}. Sandbox-enforced operations may modify files \
                 under the session workspace {}. A private temporary directory ($TMPDIR) is \
                 writable too.",
                Value::String(policy.workspace_root.to_string_lossy().into_owned())
            ),
            SandboxMode::DangerFullAccess => format!(
                "Current DSH file policy: {mode}. The file sandbox does not restrict modifications."
            ),
        }
    }
}
