//! [`Terminals`]: the owner-scoped registry of terminals.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use dsh_core::{CancelReason, CancelToken, ErrorCode, HarnessError, Owner};
use dsh_sandbox::SandboxPolicy;

use crate::background_send::BackgroundSend;
use crate::terminal::Terminal;
use crate::{ReadPage, TerminalConfig, TerminalId, TerminalSignal, TerminalStatus};
use crate::{SendRequest, SendResult};

/// What `terminal_open` asks for.
#[derive(Clone, Debug)]
pub struct OpenRequest {
    /// The backend type (`shell`).
    pub kind: String,
    /// A name unique among the owner's terminals.
    pub name: Option<String>,
    /// The working directory; default the policy's workspace root.
    pub cwd: Option<PathBuf>,
    /// The terminal's sandbox policy, resolved once, now: it holds for the terminal's life.
    pub policy: SandboxPolicy,
    /// dsh's managed variables (`DSH_HOME`, `DSH_SHELL`, `DSH_SESSION_ID`, …), as the
    /// shell seam's `ShellEnv` collects them for the owner's session: what every command
    /// of that session sees, one-shot or in a terminal.
    pub env: BTreeMap<String, String>,
}

/// What a backend gets to start a terminal.
#[derive(Clone, Debug)]
pub struct SpawnRequest {
    /// The new terminal's id.
    pub id: TerminalId,
    /// dsh's managed variables the shell gets (see [`OpenRequest::env`]).
    pub env: BTreeMap<String, String>,
    /// The working directory; default the policy's workspace root.
    pub cwd: Option<PathBuf>,
    /// The sandbox policy the shell runs under.
    pub policy: SandboxPolicy,
}

/// Starts terminals of one type.
///
/// # For implementors
/// `spawn` returns a published-ready terminal and its startup output, or an error after
/// closing whatever it started; it must give up promptly when `cancel` fires.
#[async_trait]
pub trait TerminalBackend: Send + Sync {
    /// The type it starts (`shell`).
    fn kind(&self) -> &str;

    /// Starts a terminal.
    ///
    /// # Errors
    /// The backend's: the sandbox's (`SANDBOX_UNAVAILABLE`), the subprocess seam's, or
    /// `TERMINAL_FAILED` when the shell does not start.
    ///
    /// # Cancel safety
    /// Dropping the future must leave nothing running: a terminal started but not yet
    /// returned is dropped with it, which kills its tree (the bash backend's terminal owns
    /// its process).
    async fn spawn(
        &self,
        request: SpawnRequest,
        config: &TerminalConfig,
        cancel: &CancelToken,
    ) -> Result<(Terminal, String), HarnessError>;
}

/// A terminal as `terminal_list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Its id.
    pub id: TerminalId,
    /// Its name, if it has one.
    pub name: Option<String>,
    /// Its backend type.
    pub kind: String,
    /// The shell's pid, as dsh sees it.
    pub pid: Option<u32>,
    /// Running or exited.
    pub status: TerminalStatus,
}

/// A new terminal: its snapshot and what the shell printed at startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    /// The terminal.
    pub snapshot: Snapshot,
    /// The startup output (`dsh> ` for the bash backend).
    pub motd: String,
}

/// How a close ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseOutcome {
    /// This call closed it.
    Closed,
    /// Another close was already under way; this call waited for it.
    AlreadyClosing,
}

struct Entry {
    id: TerminalId,
    owner: Owner,
    name: Option<String>,
    kind: String,
    terminal: Arc<Terminal>,
    policy: SandboxPolicy,
    closing: bool,
}

#[derive(Default)]
struct Inner {
    terminals: Vec<Entry>,
    /// Names of spawns not yet published: (owner key, name).
    reserved: Vec<(usize, String)>,
    /// Spawns not yet published: (owner key, their cancel token).
    pending: Vec<(usize, u64, CancelToken)>,
    /// Every distinct policy each owner's terminals ran under, closed ones included.
    policies: Vec<(usize, SandboxPolicy)>,
}

/// A terminal's reservation while it opens (its name and its place under its owner's
/// limit), given back when dropped, so no way out of [`Terminals::open`], a dropped
/// future included, keeps it.
struct Reserved<'a> {
    inner: &'a Mutex<Inner>,
    key: usize,
    name: Option<String>,
    /// 0 once given back.
    pending_id: u64,
}

impl Reserved<'_> {
    /// Gives the reservation back under `inner`, locked by the caller.
    fn give_back(&mut self, inner: &mut Inner) {
        if self.pending_id == 0 {
            return;
        }
        let (key, pending_id) = (self.key, self.pending_id);
        inner.pending.retain(|(_, p, _)| *p != pending_id);
        if let Some(name) = self.name.take() {
            if let Some(i) = inner
                .reserved
                .iter()
                .position(|(k, n)| *k == key && *n == name)
            {
                inner.reserved.remove(i);
            }
        }
        self.pending_id = 0;
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if self.pending_id != 0 {
            let inner = self.inner;
            self.give_back(&mut inner.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }
}

/// The registry of terminals (the seam `ctx.terminals`). See the [crate
/// docs](crate).
pub struct Terminals {
    config: TerminalConfig,
    backends: Mutex<HashMap<String, Arc<dyn TerminalBackend>>>,
    inner: Mutex<Inner>,
    next_id: AtomicU64,
    next_pending: AtomicU64,
    disposing: AtomicBool,
}

impl std::fmt::Debug for Terminals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminals")
            .field("terminals", &self.lock().terminals.len())
            .finish_non_exhaustive()
    }
}

impl Terminals {
    /// An empty registry.
    ///
    /// # Errors
    /// `CONFIG_INVALID` from [`TerminalConfig::validate`].
    pub fn new(config: TerminalConfig) -> Result<Terminals, HarnessError> {
        config.validate()?;
        Ok(Terminals {
            config,
            backends: Mutex::new(HashMap::new()),
            inner: Mutex::new(Inner::default()),
            next_id: AtomicU64::new(1),
            next_pending: AtomicU64::new(1),
            disposing: AtomicBool::new(false),
        })
    }

    /// The settings.
    pub fn config(&self) -> &TerminalConfig {
        &self.config
    }

    /// Adds a backend.
    ///
    /// # Errors
    /// `DUPLICATE_BACKEND` when its type has one; `INVALID_ARGUMENT` for an empty type.
    pub fn register(&self, backend: Arc<dyn TerminalBackend>) -> Result<(), HarnessError> {
        let kind = backend.kind().to_owned();
        if kind.is_empty() {
            return Err(HarnessError::invalid_argument(
                "a terminal backend type must not be empty",
            ));
        }
        let mut b = self.backends.lock().unwrap_or_else(|p| p.into_inner());
        if b.contains_key(&kind) {
            return Err(HarnessError::new(
                ErrorCode::DuplicateBackend,
                format!("a terminal backend of type {kind:?} is already registered"),
            ));
        }
        b.insert(kind, backend);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a terminal for `owner`.
    ///
    /// # Errors
    /// In this order: `SERVICE_DISPOSING`; `ABORTED` (cancelled before it started);
    /// `OWNER_NOT_LIVE`; `NO_BACKEND`; `INVALID_ARGUMENT` (empty name); `DUPLICATE_NAME`;
    /// `TERMINAL_LIMIT`; then the backend's. A terminal started but not published (the
    /// call was cancelled, the owner or the service went away meanwhile) is closed.
    ///
    /// # Cancel safety
    /// Cancel safe: dropped while the terminal starts, the half-started shell is killed
    /// and the name and the place under the owner's limit it reserved are given back; a
    /// terminal is published whole or not at all.
    pub async fn open(
        &self,
        owner: &Owner,
        request: OpenRequest,
        cancel: &CancelToken,
    ) -> Result<Opened, HarnessError> {
        if self.disposing.load(Ordering::SeqCst) {
            return Err(disposing());
        }
        if let Some(reason) = cancel.reason() {
            return Err(HarnessError::aborted_before_start("terminal_open", reason));
        }
        if !owner.is_live() {
            return Err(not_live());
        }
        let backend = self.backend(&request.kind)?;
        if request.name.as_deref() == Some("") {
            return Err(HarnessError::invalid_argument(
                "a terminal session name must not be empty; omit it or give a name",
            ));
        }
        let reservation = CancelToken::new();
        let pending_id = self.next_pending.fetch_add(1, Ordering::Relaxed);
        let id = self.reserve(owner, request.name.as_ref(), pending_id, &reservation)?;
        // Given back on every way out, a dropped future included, unless published.
        let mut reserved = Reserved {
            inner: &self.inner,
            key: owner.key(),
            name: request.name.clone(),
            pending_id,
        };
        let spawned = Self::spawn_fused(
            backend,
            SpawnRequest {
                id: id.clone(),
                env: request.env.clone(),
                cwd: request.cwd.clone(),
                policy: request.policy.clone(),
            },
            &self.config,
            cancel,
            &reservation,
        )
        .await;
        let (terminal, motd) = match spawned {
            Ok(s) => s,
            Err(e) => return Err(self.abort_reason(cancel, &reservation).unwrap_or(e)),
        };
        // Published only if nobody gave up meanwhile; else rolled back.
        let refused = self.abort_reason(cancel, &reservation).or_else(|| {
            if self.disposing.load(Ordering::SeqCst) {
                Some(disposing())
            } else if !owner.is_live() {
                Some(not_live())
            } else {
                None
            }
        });
        if let Some(e) = refused {
            drop(reserved);
            let _ = terminal.close().await;
            return Err(e);
        }
        let terminal = Arc::new(terminal);
        let snapshot = Snapshot {
            id: id.clone(),
            name: request.name.clone(),
            kind: request.kind.clone(),
            pid: Some(terminal.pid()),
            status: terminal.status(),
        };
        let ended_meanwhile = {
            let mut inner = self.lock();
            // In the same step as the terminal is published: its name is never free meanwhile.
            reserved.give_back(&mut inner);
            // Asked again under the lock the owner's and the service's ends take: an end
            // that came after the check above gets no terminal that outlives it.
            if reservation.is_cancelled() || self.disposing.load(Ordering::SeqCst) {
                Some(terminal)
            } else {
                Self::publish(&mut inner, owner, id, request, terminal);
                None
            }
        };
        if let Some(terminal) = ended_meanwhile {
            let _ = terminal.close().await;
            return Err(self
                .abort_reason(cancel, &reservation)
                .unwrap_or_else(disposing));
        }
        Ok(Opened { snapshot, motd })
    }

    /// Lists `terminal` (`id`) as `owner`'s, with its policy among those the
    /// owner's terminals ran under.
    fn publish(
        inner: &mut Inner,
        owner: &Owner,
        id: TerminalId,
        request: OpenRequest,
        terminal: Arc<Terminal>,
    ) {
        let key = owner.key();
        if !inner
            .policies
            .iter()
            .any(|(k, p)| *k == key && *p == request.policy)
        {
            inner.policies.push((key, request.policy.clone()));
        }
        inner.terminals.push(Entry {
            id,
            owner: owner.clone(),
            name: request.name,
            kind: request.kind,
            terminal,
            policy: request.policy,
            closing: false,
        });
    }

    /// The backend of terminals of type `kind`.
    ///
    /// # Errors
    /// `NO_BACKEND`.
    fn backend(&self, kind: &str) -> Result<Arc<dyn TerminalBackend>, HarnessError> {
        self.backends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(kind)
            .cloned()
            .ok_or_else(|| {
                HarnessError::new(
                    ErrorCode::NoBackend,
                    format!(
                        "no terminal backend of type {:?}; the type is \"shell\"",
                        dsh_core::visible::visible(kind)
                    ),
                )
            })
    }

    /// Reserves a terminal for `owner` (its `name`, and a place under the limit, held as
    /// pending `pending_id` until it is published or given up) and gives it its id.
    ///
    /// # Errors
    /// `DUPLICATE_NAME`, `TERMINAL_LIMIT`.
    fn reserve(
        &self,
        owner: &Owner,
        name: Option<&String>,
        pending_id: u64,
        reservation: &CancelToken,
    ) -> Result<TerminalId, HarnessError> {
        let mut inner = self.lock();
        let key = owner.key();
        if let Some(name) = name {
            let taken = inner
                .terminals
                .iter()
                .any(|e| e.owner.key() == key && e.name.as_ref() == Some(name))
                || inner.reserved.iter().any(|(k, n)| *k == key && n == name);
            if taken {
                return Err(HarnessError::new(
                    ErrorCode::DuplicateName,
                    format!(
                        "a terminal session named {:?} is already open (or opening); pick \
                         another name or close that one",
                        dsh_core::visible::visible(name)
                    ),
                ));
            }
        }
        let open = inner
            .terminals
            .iter()
            .filter(|e| e.owner.key() == key)
            .count()
            + inner.pending.iter().filter(|(k, _, _)| *k == key).count();
        if open >= self.config.max_terminals {
            return Err(HarnessError::new(
                ErrorCode::TerminalLimit,
                format!(
                    "{open} terminal sessions are open, the most allowed; close one with \
                     terminal_close first"
                ),
            ));
        }
        if let Some(name) = name {
            inner.reserved.push((key, name.clone()));
        }
        inner.pending.push((key, pending_id, reservation.clone()));
        Ok(TerminalId::new(format!(
            "pty-{}",
            self.next_id.fetch_add(1, Ordering::Relaxed)
        )))
    }

    /// Starts `request` with `backend`, stopped by the caller's `cancel` or by the
    /// `reservation`'s (the owner or the service going away), whichever fires first.
    async fn spawn_fused(
        backend: Arc<dyn TerminalBackend>,
        request: SpawnRequest,
        config: &TerminalConfig,
        cancel: &CancelToken,
        reservation: &CancelToken,
    ) -> Result<(Terminal, String), HarnessError> {
        // Either the caller's cancel or the reservation's (owner or service disposal)
        // stops the spawn.
        let fused = CancelToken::new();
        {
            let relay = async {
                tokio::select! {
                    _ = cancel.cancelled() => fused.cancel(cancel.reason().cloned().unwrap_or(CancelReason::ClientCancelled)),
                    _ = reservation.cancelled() => fused.cancel(reservation.reason().cloned().unwrap_or(CancelReason::ClientGone)),
                }
                std::future::pending::<()>().await
            };
            let spawn = backend.spawn(request, config, &fused);
            tokio::select! {
                r = spawn => r,
                _ = relay => unreachable!("the relay never ends"),
            }
        }
    }

    fn abort_reason(
        &self,
        cancel: &CancelToken,
        reservation: &CancelToken,
    ) -> Option<HarnessError> {
        if let Some(reason) = cancel.reason() {
            return Some(HarnessError::aborted_before_start("terminal_open", reason));
        }
        // The reservation is cancelled only by disposal: of the service, or of the owner.
        reservation.is_cancelled().then(|| {
            if self.disposing.load(Ordering::SeqCst) {
                disposing()
            } else {
                not_live()
            }
        })
    }

    /// The terminal `id` if `owner` owns it.
    fn terminal(&self, owner: &Owner, id: &str) -> Result<Arc<Terminal>, HarnessError> {
        let inner = self.lock();
        let entry = inner
            .terminals
            .iter()
            .find(|e| e.id.as_str() == id)
            .ok_or_else(|| {
                HarnessError::new(
                    ErrorCode::NoSession,
                    format!(
                        "unknown PTY session {}; terminal_list shows the open ones",
                        dsh_core::visible::visible(id)
                    ),
                )
            })?;
        if entry.owner.key() != owner.key() {
            return Err(HarnessError::new(
                ErrorCode::ForeignSession,
                format!(
                    "PTY session {} belongs to another agent (another connection); it cannot \
                     be used from here",
                    entry.id
                ),
            ));
        }
        Ok(entry.terminal.clone())
    }

    /// The sandbox policy terminal `id` runs under (resolved when it opened).
    ///
    /// # Errors
    /// `NO_SESSION`, `FOREIGN_SESSION`.
    pub fn policy(&self, owner: &Owner, id: &str) -> Result<SandboxPolicy, HarnessError> {
        self.terminal(owner, id)?;
        let inner = self.lock();
        inner
            .terminals
            .iter()
            .find(|e| e.id.as_str() == id)
            .map(|e| e.policy.clone())
            .ok_or_else(|| {
                HarnessError::new(ErrorCode::NoSession, format!("unknown PTY session {id}"))
            })
    }

    /// Types into terminal `id` and waits until it is ready (see [`Terminal::send`]).
    ///
    /// # Errors
    /// `NO_SESSION`, `FOREIGN_SESSION`, then [`Terminal::send`]'s.
    ///
    /// # Cancel safety
    /// Not cancel safe: as [`Terminal::send`].
    pub async fn send(
        &self,
        owner: &Owner,
        id: &str,
        request: SendRequest,
        cancel: &CancelToken,
    ) -> Result<SendResult, HarnessError> {
        let terminal = self.terminal(owner, id)?;
        if request.timeout > self.config.max_timeout {
            return Err(HarnessError::invalid_argument(format!(
                "timeout_ms must be at most {}",
                self.config.max_timeout.as_millis()
            )));
        }
        terminal.send(request, cancel, false).await
    }

    /// [`send`](Self::send) for a background send: the checks (`NO_SESSION`,
    /// `FOREIGN_SESSION`, the timeout, `TERMINAL_CLOSING`, `TERMINAL_EXITED`,
    /// `SEND_ACTIVE`) now, the send in the returned [`BackgroundSend`], which holds the
    /// terminal's send slot until it settles and whose reader takes its output as it
    /// comes.
    ///
    /// # Errors
    /// As listed; the future, as `send`.
    pub fn start_send(
        &self,
        owner: &Owner,
        id: &str,
        request: SendRequest,
        cancel: CancelToken,
    ) -> Result<BackgroundSend, HarnessError> {
        let terminal = self.terminal(owner, id)?;
        if request.timeout > self.config.max_timeout {
            return Err(HarnessError::invalid_argument(format!(
                "timeout_ms must be at most {}",
                self.config.max_timeout.as_millis()
            )));
        }
        terminal.start_send(request, cancel)
    }

    /// A page of terminal `id`'s scrollback (see [`Scrollback::page`](crate::Scrollback::page)).
    ///
    /// # Errors
    /// `NO_SESSION`, `FOREIGN_SESSION`; `INVALID_ARGUMENT` for a zero `count`.
    pub fn read(
        &self,
        owner: &Owner,
        id: &str,
        offset: u64,
        count: u64,
    ) -> Result<ReadPage, HarnessError> {
        let terminal = self.terminal(owner, id)?;
        if count == 0 {
            return Err(HarnessError::invalid_argument("count must be at least 1"));
        }
        Ok(terminal.read(offset, count))
    }

    /// Sends `signal` to terminal `id`'s foreground group; returns the group.
    ///
    /// # Errors
    /// `NO_SESSION`, `FOREIGN_SESSION`, then [`Terminal::signal`]'s.
    pub fn signal(
        &self,
        owner: &Owner,
        id: &str,
        signal: TerminalSignal,
    ) -> Result<u32, HarnessError> {
        self.terminal(owner, id)?.signal(signal.number())
    }

    /// Closes terminal `id` and forgets it once its tree is gone.
    ///
    /// # Errors
    /// `NO_SESSION`, `FOREIGN_SESSION`; [`Terminal::close`]'s (the terminal then stays
    /// listed, and a later close retries).
    ///
    /// # Cancel safety
    /// Dropping the future stops only the waiting: the terminal already refuses input and
    /// its tree got the hangup and SIGTERM (SIGKILL follows after the grace), but it stays
    /// listed until a later close, which reports `AlreadyClosing`.
    pub async fn close(&self, owner: &Owner, id: &str) -> Result<CloseOutcome, HarnessError> {
        let terminal = self.terminal(owner, id)?;
        let already = {
            let mut inner = self.lock();
            match inner.terminals.iter_mut().find(|e| e.id.as_str() == id) {
                Some(e) => std::mem::replace(&mut e.closing, true),
                None => true,
            }
        };
        let result = terminal.close().await;
        let mut inner = self.lock();
        match result {
            Ok(()) => {
                inner.terminals.retain(|e| e.id.as_str() != id);
                Ok(if already {
                    CloseOutcome::AlreadyClosing
                } else {
                    CloseOutcome::Closed
                })
            }
            Err(e) => {
                if let Some(entry) = inner.terminals.iter_mut().find(|e| e.id.as_str() == id) {
                    entry.closing = false;
                }
                Err(e)
            }
        }
    }

    /// `owner`'s terminals, oldest first.
    pub fn list(&self, owner: &Owner) -> Vec<Snapshot> {
        self.lock()
            .terminals
            .iter()
            .filter(|e| e.owner.key() == owner.key())
            .map(|e| Snapshot {
                id: e.id.clone(),
                name: e.name.clone(),
                kind: e.kind.clone(),
                pid: Some(e.terminal.pid()),
                status: e.terminal.status(),
            })
            .collect()
    }

    /// Every distinct sandbox policy `owner`'s terminals ran under, closed ones included
    /// (for a last check of what their background jobs made).
    pub fn policies(&self, owner: &Owner) -> Vec<SandboxPolicy> {
        self.lock()
            .policies
            .iter()
            .filter(|(k, _)| *k == owner.key())
            .map(|(_, p)| p.clone())
            .collect()
    }

    /// Whether `owner` has terminals open or being opened.
    pub fn has_owner_activity(&self, owner: &Owner) -> bool {
        let inner = self.lock();
        let key = owner.key();
        inner.terminals.iter().any(|e| e.owner.key() == key)
            || inner.pending.iter().any(|(k, _, _)| *k == key)
    }

    /// Ends `owner`: it opens nothing more; its pending opens are abandoned; its terminals
    /// are closed, all at once, and forgotten. Returns once every tree is gone.
    ///
    /// # Errors
    /// `TERMINAL_FAILED` naming how many terminals could not be closed (they stay listed).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped before it returns, the closes under way are aborted,
    /// maybe before a terminal was signalled; the owner stays ended and its terminals stay
    /// listed, marked closing. A later call closes them.
    pub async fn dispose_owner(&self, owner: &Owner) -> Result<(), HarnessError> {
        owner.end();
        let key = owner.key();
        self.end(|k| k == key, "the owner is disposed").await
    }

    /// Ends the service: nothing opens any more; every pending open is abandoned and
    /// every terminal closed. Returns once every tree is gone.
    ///
    /// # Errors
    /// As [`dispose_owner`](Self::dispose_owner).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped before it returns, the closes under way are aborted,
    /// maybe before a terminal was signalled; nothing opens any more, and the terminals
    /// stay listed, marked closing. A later call closes them.
    pub async fn dispose(&self) -> Result<(), HarnessError> {
        self.disposing.store(true, Ordering::SeqCst);
        self.end(|_| true, "the terminal service is disposed").await
    }

    async fn end(&self, whose: impl Fn(usize) -> bool, reason: &str) -> Result<(), HarnessError> {
        let terminals: Vec<(TerminalId, Arc<Terminal>)> = {
            let mut inner = self.lock();
            for (k, _, token) in &inner.pending {
                if whose(*k) {
                    token.cancel(reason);
                }
            }
            inner
                .terminals
                .iter_mut()
                .filter(|e| whose(e.owner.key()))
                .map(|e| {
                    e.closing = true;
                    (e.id.clone(), e.terminal.clone())
                })
                .collect()
        };
        // All at once: each close waits out its own grace.
        let mut closing = tokio::task::JoinSet::new();
        for (i, (_, s)) in terminals.iter().enumerate() {
            let s = s.clone();
            closing.spawn(async move { (i, s.close().await) });
        }
        // A close that panicked stays a failure.
        let mut results: Vec<Result<(), HarnessError>> = terminals
            .iter()
            .map(|_| Err(HarnessError::internal("closing the session did not finish")))
            .collect();
        while let Some(joined) = closing.join_next().await {
            if let Ok((i, r)) = joined {
                results[i] = r;
            }
        }
        let mut failed = 0;
        let mut inner = self.lock();
        for ((id, _), r) in terminals.iter().zip(results) {
            match r {
                Ok(()) => inner.terminals.retain(|e| &e.id != id),
                Err(_) => failed += 1,
            }
        }
        if failed > 0 {
            return Err(HarnessError::new(
                ErrorCode::TerminalFailed,
                format!("failed to close {failed} PTY session(s)"),
            ));
        }
        Ok(())
    }
}

fn disposing() -> HarnessError {
    HarnessError::new(
        ErrorCode::ServiceDisposing,
        "the terminal service is shutting down; nothing new starts",
    )
}

fn not_live() -> HarnessError {
    HarnessError::new(
        ErrorCode::OwnerNotLive,
        "the connection that would own this terminal is gone or ending",
    )
}
