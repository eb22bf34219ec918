//! [`World`]: one provider per seam, the shared services, and the tools.

pub mod preset;

use std::collections::BTreeMap;
use std::sync::Arc;

use dsh_approval::ApprovalService;
use dsh_core::{ErrorCode, HarnessError, SessionId};
use dsh_fs::FileSystem;
use dsh_process::Subprocess;
use dsh_sandbox::Sandbox;

use crate::PolicyService;
use dsh_fs::observations::{Observation, Observations};
use dsh_jobs::Jobs;
use dsh_shell::shell_env::ShellEnv;
use dsh_shell::Shell;
use dsh_store::session::{Session, SessionLog};
use dsh_terminal::{Owner, Terminals};
use serde_json::Value;

use crate::{Guard, PostExecute, PreExecute, Tool};

/// Everything a tool call runs with. Built once by a [`WorldBuilder`]; consumers (the
/// CLI, the MCP server) hold it and call [`World::call`](crate::World::call).
pub struct World {
    pub(crate) subprocess: Arc<dyn Subprocess>,
    pub(crate) shell: Arc<dyn Shell>,
    pub(crate) sandbox: Option<Arc<dyn Sandbox>>,
    pub(crate) policy: Arc<PolicyService>,
    pub(crate) approval: Arc<ApprovalService>,
    pub(crate) sessions: Arc<SessionLog>,
    pub(crate) shell_env: Arc<ShellEnv>,
    pub(crate) fs: Option<Arc<dyn FileSystem>>,
    pub(crate) terminals: Option<Arc<Terminals>>,
    pub(crate) jobs: Option<Arc<Jobs>>,
    /// The owner of each session's terminals and jobs (and of calls without a session).
    pub(crate) owners: std::sync::Mutex<std::collections::HashMap<Option<SessionId>, Owner>>,
    /// What each session last saw of each file: the read-before-edit memory.
    pub(crate) observations: std::sync::Mutex<Observations>,
    /// Each session's mode change the model has not been told of: (from, to).
    pub(crate) mode_changes: std::sync::Mutex<
        std::collections::HashMap<SessionId, (dsh_sandbox::SandboxMode, dsh_sandbox::SandboxMode)>,
    >,
    pub(crate) tools: BTreeMap<String, Arc<dyn Tool>>,
    pub(crate) pre: Vec<Arc<dyn PreExecute>>,
    pub(crate) post: Vec<Arc<dyn PostExecute>>,
    pub(crate) guards: Vec<Guard>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("confines", &self.confines())
            .finish_non_exhaustive()
    }
}

impl World {
    /// The subprocess seam.
    pub fn subprocess(&self) -> &Arc<dyn Subprocess> {
        &self.subprocess
    }

    /// The shell seam.
    pub fn shell(&self) -> &Arc<dyn Shell> {
        &self.shell
    }

    /// The sandbox, when this world confines its commands.
    pub fn sandbox(&self) -> Option<&Arc<dyn Sandbox>> {
        self.sandbox.as_ref()
    }

    /// Whether this world confines what its tools do (a sandbox is composed): the one fact
    /// every tool asks, for its description, its escalation arguments and where relative
    /// paths resolve.
    pub fn confines(&self) -> bool {
        self.sandbox.is_some()
    }

    /// The sandbox policy service.
    pub fn policy(&self) -> &PolicyService {
        &self.policy
    }

    /// The sandbox policy service, to keep beyond a call (a background job checks what it
    /// made when it ends).
    pub(crate) fn policy_arc(&self) -> Arc<PolicyService> {
        self.policy.clone()
    }

    /// The approval service.
    pub fn approval(&self) -> &Arc<ApprovalService> {
        &self.approval
    }

    /// The session log.
    pub fn sessions(&self) -> &Arc<SessionLog> {
        &self.sessions
    }

    /// The `DSH_*` facts registry.
    pub fn shell_env(&self) -> &Arc<ShellEnv> {
        &self.shell_env
    }

    /// The filesystem seam, when the world has one.
    pub fn fs(&self) -> Option<&Arc<dyn FileSystem>> {
        self.fs.as_ref()
    }

    /// The terminal registry, when the world has one.
    pub fn terminals(&self) -> Option<&Arc<Terminals>> {
        self.terminals.as_ref()
    }

    /// The background job registry, when the world has one.
    pub fn jobs(&self) -> Option<&Arc<Jobs>> {
        self.jobs.as_ref()
    }

    /// The owner of `session`'s terminals and background jobs (one per session for this
    /// world's life; calls without a session share one).
    pub fn owner(&self, session: Option<&SessionId>) -> Owner {
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        owners
            .entry(session.cloned())
            .or_insert_with(|| {
                Owner::new(session.cloned().unwrap_or_else(|| SessionId::new("none")))
            })
            .clone()
    }

    /// Ends `session`'s background jobs: each still running is cancelled (its tree gets
    /// SIGTERM, then SIGKILL after the grace) and awaited, and the session starts no more.
    ///
    /// # Cancel safety
    /// Dropping the future stops only the waiting, as [`Jobs::end_owner`]: the jobs were
    /// already asked to stop and still settle.
    pub async fn end_jobs(&self, session: Option<&SessionId>) {
        if let Some(j) = &self.jobs {
            j.end_owner(&self.owner(session)).await;
        }
    }

    /// Ends what `session` started that outlives a call: its background jobs
    /// ([`end_jobs`](Self::end_jobs), each checked as it ends) and the terminals
    /// ([`end_terminals_checked`](Self::end_terminals_checked)). Returns the lines saying
    /// what the terminals' check found.
    ///
    /// # Errors
    /// `end_terminals_checked`'s.
    ///
    /// # Cancel safety
    /// Not cancel safe: it stops at the step it was on (see [`end_jobs`](Self::end_jobs)
    /// and [`end_terminals_checked`](Self::end_terminals_checked)), and the steps after it
    /// do not run.
    pub async fn end_session(&self, session: &Arc<Session>) -> Result<Vec<String>, HarnessError> {
        self.end_jobs(Some(session.id())).await;
        self.end_terminals_checked(Some(session)).await
    }

    /// Closes every terminal of this world (the hangup, then SIGTERM and SIGKILL after
    /// the grace to each tree); returns once every tree is gone. Nothing opens after it.
    ///
    /// # Errors
    /// `TERMINAL_FAILED` naming how many sessions could not be closed.
    ///
    /// # Cancel safety
    /// Not cancel safe: as [`Terminals::dispose`], the closes under way are aborted and the
    /// terminals stay listed; a later call closes them.
    pub async fn end_terminals(&self) -> Result<(), HarnessError> {
        match &self.terminals {
            Some(t) => t.dispose().await,
            None => Ok(()),
        }
    }

    /// [`end_terminals`](Self::end_terminals), then the check after a command for every
    /// policy `session`'s terminals ran under: what a background job of a terminal made
    /// that the host's tools would run is set aside and protected before the session ends
    /// (a terminal's jobs outlive its last send). Returns the lines saying what was found.
    ///
    /// # Errors
    /// `end_terminals`' errors; the session log's.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped while the terminals close, as
    /// [`end_terminals`](Self::end_terminals), and nothing is checked; dropped during the
    /// checks, the one under way runs to its end in a task of its own (set aside and
    /// logged) and the remaining ones do not run.
    pub async fn end_terminals_checked(
        &self,
        session: Option<&Arc<Session>>,
    ) -> Result<Vec<String>, HarnessError> {
        let Some(t) = &self.terminals else {
            return Ok(Vec::new());
        };
        let owner = self.owner(session.map(|s| s.id()));
        let policies = t.policies(&owner);
        let ended = self.end_terminals().await;
        // The session's end closes a write scope for each policy its terminals ran under.
        let call_id = dsh_core::CallId::new("terminals-ended");
        // Each policy is checked, whatever logging the one before did.
        let scopes = policies
            .iter()
            .filter_map(|p| crate::policy::scope::WriteScope::open(self, session, &call_id, p));
        let (found, log_error) = crate::policy::scope::close_each(scopes).await;
        match log_error {
            Some(e) => Err(e),
            None => ended.map(|()| found.into_iter().map(|(line, _)| line).collect()),
        }
    }

    /// Whether a wider mode can be asked for in `session`: an answerer is installed (a
    /// terminal, a client that declared elicitation, a script) and the session's approval
    /// policy is `ask`. Where it cannot, nothing offers the model an escalation.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn can_ask(&self, session: Option<&Session>) -> bool {
        if !self.approval.has_answerer() {
            return false;
        }
        match session {
            Some(s) => self.approval.effective_policy(s).await == dsh_approval::ApprovalPolicy::Ask,
            None => false,
        }
    }

    /// Sets `session`'s sandbox mode (one `sandbox/mode` event), unless the session has
    /// terminals open or opening and the mode would change: a terminal keeps the policy
    /// it opened with, so the session's mode may not move away from it.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when terminals hold the mode; the journal's errors.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped during the append, the `sandbox/mode` event may or may not
    /// be logged (see [`Session::append`]), and the model is not told of the change.
    pub async fn set_mode(
        &self,
        session: &Session,
        mode: dsh_sandbox::SandboxMode,
    ) -> Result<(), HarnessError> {
        let current = self
            .policy
            .override_of(session)
            .await
            .unwrap_or(self.policy.default_mode());
        if current == mode {
            return Ok(());
        }
        if let Some(t) = &self.terminals {
            if t.has_owner_activity(&self.owner(Some(session.id()))) {
                return Err(HarnessError::invalid_argument(format!(
                    "the sandbox mode cannot change from \"{current}\" to \"{mode}\" while \
                     persistent terminal sessions are open or being created; wait for them and \
                     close them (terminal_close), then change the mode"
                )));
            }
        }
        // A session the model has worked in was told its old mode: its next result says so.
        // A session with no call yet is told its mode from the start (the instructions).
        let worked = session
            .last_of(dsh_core::journal::EventKind::ToolCall)
            .await
            .is_some();
        self.policy.set_mode(session, mode).await?;
        if !worked {
            return Ok(());
        }
        let mut changes = self.mode_changes.lock().unwrap_or_else(|p| p.into_inner());
        let from = changes
            .remove(session.id())
            .map_or(current, |(from, _)| from);
        if from != mode {
            changes.insert(session.id().clone(), (from, mode));
        }
        Ok(())
    }

    /// The line telling the model `session`'s mode changed since it was last told, once.
    pub(crate) fn take_mode_change(&self, session: &SessionId) -> Option<String> {
        let (from, to) = self
            .mode_changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session)?;
        Some(format!(
            "[sandbox: this session's mode changed from {from} to {to}: {}]",
            to.meaning()
        ))
    }

    fn observations(&self) -> std::sync::MutexGuard<'_, Observations> {
        self.observations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn observe(
        &self,
        session: Option<&SessionId>,
        key: &std::path::Path,
        o: Observation,
    ) {
        if let Some(s) = session {
            self.observations().observe(s, key, o);
        }
    }

    /// What `session` last saw at `key`: this World's memory, seeded from the session's
    /// log the first time the World meets the session (see [`dsh_fs::observations`]).
    pub(crate) async fn observed(
        &self,
        session: &Session,
        key: &std::path::Path,
    ) -> Option<Observation> {
        let id = session.id();
        if self.observations().needs_seed(id) {
            // A log that cannot be read seeds nothing: the file must be read again.
            let events = session.events().await.unwrap_or_default();
            self.observations().seed(id, &events);
        }
        self.observations().observed(id, key)
    }

    /// Every tool, by name.
    pub fn tool(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// `(name, description, parameters)` of every tool, by name.
    pub fn schemas(&self) -> Vec<(String, String, Value)> {
        self.tools
            .values()
            .map(|t| (t.name().to_owned(), t.description(self), t.parameters(self)))
            .collect()
    }
}

/// Builds a [`World`]. Each seam takes exactly one provider: a second one is
/// `DUPLICATE_SERVICE`.
#[derive(Default)]
pub struct WorldBuilder {
    pub(crate) subprocess: Option<Arc<dyn Subprocess>>,
    pub(crate) shell: Option<Arc<dyn Shell>>,
    pub(crate) sandbox: Option<Arc<dyn Sandbox>>,
    pub(crate) policy: Option<PolicyService>,
    approval: Option<Arc<ApprovalService>>,
    sessions: Option<Arc<SessionLog>>,
    pub(crate) shell_env: Option<Arc<ShellEnv>>,
    pub(crate) fs: Option<Arc<dyn FileSystem>>,
    pub(crate) terminals: Option<Arc<Terminals>>,
    pub(crate) jobs: Option<Arc<Jobs>>,
    tools: BTreeMap<String, Arc<dyn Tool>>,
    pre: Vec<Arc<dyn PreExecute>>,
    post: Vec<Arc<dyn PostExecute>>,
    guards: Vec<Guard>,
}

fn install<T>(slot: &mut Option<T>, value: T, seam: &str) -> Result<(), HarnessError> {
    if slot.is_some() {
        return Err(HarnessError::new(
            ErrorCode::DuplicateService,
            format!("the {seam} seam already has a provider; a World takes exactly one"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

impl WorldBuilder {
    /// An empty builder.
    pub fn new() -> WorldBuilder {
        WorldBuilder::default()
    }

    /// Installs the subprocess provider.
    ///
    /// # Errors
    /// `DUPLICATE_SERVICE` when one is installed already.
    pub fn subprocess(mut self, p: Arc<dyn Subprocess>) -> Result<Self, HarnessError> {
        install(&mut self.subprocess, p, "subprocess")?;
        Ok(self)
    }

    /// Installs the shell provider.
    ///
    /// # Errors
    /// `DUPLICATE_SERVICE` when one is installed already.
    pub fn shell(mut self, p: Arc<dyn Shell>) -> Result<Self, HarnessError> {
        install(&mut self.shell, p, "shell")?;
        Ok(self)
    }

    /// Installs the sandbox provider (the shell must confine with the same one).
    ///
    /// # Errors
    /// `DUPLICATE_SERVICE` when one is installed already.
    pub fn sandbox(mut self, p: Arc<dyn Sandbox>) -> Result<Self, HarnessError> {
        install(&mut self.sandbox, p, "sandbox")?;
        Ok(self)
    }

    /// Installs the sandbox policy service.
    ///
    /// # Errors
    /// `DUPLICATE_SERVICE` when one is installed already.
    pub fn policy(mut self, p: PolicyService) -> Result<Self, HarnessError> {
        install(&mut self.policy, p, "sandbox policy")?;
        Ok(self)
    }

    /// Installs the approval service.
    ///
    /// # Errors
    /// `DUPLICATE_SERVICE` when one is installed already.
    pub fn approval(mut self, p: Arc<ApprovalService>) -> Result<Self, HarnessError> {
        install(&mut self.approval, p, "approval")?;
        Ok(self)
    }

    /// Installs the session log.
    ///
    /// # Errors
    /// `DUPLICATE_SERVICE` when one is installed already.
    pub fn sessions(mut self, p: Arc<SessionLog>) -> Result<Self, HarnessError> {
        install(&mut self.sessions, p, "session log")?;
        Ok(self)
    }

    /// Installs the `DSH_*` facts registry. Default: one with no `DSH_HOME`.
    ///
    /// # Errors
    /// `DUPLICATE_SERVICE` when one is installed already.
    pub fn shell_env(mut self, p: Arc<ShellEnv>) -> Result<Self, HarnessError> {
        install(&mut self.shell_env, p, "shell env")?;
        Ok(self)
    }

    /// Installs the filesystem provider.
    ///
    /// # Errors
    /// `DUPLICATE_SERVICE` when one is installed already.
    pub fn fs(mut self, p: Arc<dyn FileSystem>) -> Result<Self, HarnessError> {
        install(&mut self.fs, p, "filesystem")?;
        Ok(self)
    }

    /// Installs the terminal registry.
    ///
    /// # Errors
    /// `DUPLICATE_SERVICE` when one is installed already.
    pub fn terminals(mut self, p: Arc<Terminals>) -> Result<Self, HarnessError> {
        install(&mut self.terminals, p, "terminals")?;
        Ok(self)
    }

    /// Installs the background job registry.
    ///
    /// # Errors
    /// `DUPLICATE_SERVICE` when one is installed already.
    pub fn jobs(mut self, p: Arc<Jobs>) -> Result<Self, HarnessError> {
        install(&mut self.jobs, p, "jobs")?;
        Ok(self)
    }

    /// Registers a tool.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when a tool of that name is registered already.
    pub fn tool(mut self, tool: Arc<dyn Tool>) -> Result<Self, HarnessError> {
        let name = tool.name().to_owned();
        if self.tools.contains_key(&name) {
            return Err(HarnessError::invalid_argument(format!(
                "a tool named \"{name}\" is registered already"
            )));
        }
        self.tools.insert(name, tool);
        Ok(self)
    }

    /// Adds a pre-execute hook (run in the order added).
    pub fn pre_execute(mut self, hook: Arc<dyn PreExecute>) -> Self {
        self.pre.push(hook);
        self
    }

    /// Adds a post-execute hook (run in the order added).
    pub fn post_execute(mut self, hook: Arc<dyn PostExecute>) -> Self {
        self.post.push(hook);
        self
    }

    /// Adds a guard (run in the order added, after the pre-execute hooks).
    pub fn guard(mut self, guard: Guard) -> Self {
        self.guards.push(guard);
        self
    }

    /// The world.
    ///
    /// # Errors
    /// `CONFIG_INVALID` naming the first missing provider (subprocess, shell, sandbox
    /// policy, approval, session log).
    pub fn build(self) -> Result<World, HarnessError> {
        let missing =
            |what: &str| HarnessError::config_invalid(format!("the World has no {what} provider"));
        Ok(World {
            subprocess: self.subprocess.ok_or_else(|| missing("subprocess"))?,
            shell: self.shell.ok_or_else(|| missing("shell"))?,
            sandbox: self.sandbox,
            policy: Arc::new(self.policy.ok_or_else(|| missing("sandbox policy"))?),
            approval: self.approval.ok_or_else(|| missing("approval"))?,
            sessions: self.sessions.ok_or_else(|| missing("session log"))?,
            shell_env: self
                .shell_env
                .unwrap_or_else(|| Arc::new(ShellEnv::new(None))),
            fs: self.fs,
            terminals: self.terminals,
            jobs: self.jobs,
            owners: std::sync::Mutex::new(std::collections::HashMap::new()),
            observations: std::sync::Mutex::new(Observations::default()),
            mode_changes: std::sync::Mutex::default(),
            tools: self.tools,
            pre: self.pre,
            post: self.post,
            guards: self.guards,
        })
    }
}
