//! The write scope: how the check after a call is a step of the call's life, not a
//! convention each tool keeps.
//!
//! Every policy a call runs under that can write (workspace-write) opens a [`WriteScope`]
//! in the call's [`CallScopes`] when the call gets it ([`CallContext::policy`](crate::CallContext::policy),
//! [`policy_for_call`](crate::policy::policy_for_call), a terminal's policy). The pipeline
//! closes what is still open once the body has returned, on every outcome (a result, an
//! error, a cancel, a timeout, a panic), and adds what the check found to the result the
//! model sees. Work that outlives the call takes its scopes over when it starts (a
//! background job closes them at its end); a terminal's scope at its close is its
//! `terminal_close` call's, and the World closes one for each policy a session's
//! terminals ran under when the session ends. A tool never runs the check itself, so a new
//! tool that writes through a confined command cannot forget it.
//!
//! Closing runs the check where the files are: what the command made that the host's
//! tools would run or read (a repository, a hook, a tool setting) is set aside and
//! protected (the policy service's check).

use std::sync::{Arc, Mutex};

use dsh_core::journal::{Logged, Quarantined, Record};
use dsh_core::{CallId, HarnessError};
use dsh_sandbox::{SandboxMode, SandboxPolicy};
use dsh_store::session::Session;

/// What the check found: the line the model sees, and the paths that appeared (a
/// command's `sandbox.appeared`, as its output schema declares it).
pub(crate) type Found = (String, Vec<String>);

/// The check after a call for one policy that can write, open until closed; see the
/// [module docs](self).
#[must_use = "a write scope is closed by the pipeline or by what took it over"]
pub(crate) struct WriteScope {
    service: Arc<crate::PolicyService>,
    policy: SandboxPolicy,
    temp: Vec<std::path::PathBuf>,
    session: Option<Arc<Session>>,
    call_id: CallId,
    /// Its close has begun (the check itself runs to its end on a blocking thread).
    closed: bool,
}

impl WriteScope {
    /// The scope of `policy` for the call `call_id` in `world`, or `None` when the policy
    /// cannot write (nothing to check after it).
    pub(crate) fn open(
        world: &crate::World,
        session: Option<&Arc<Session>>,
        call_id: &CallId,
        policy: &SandboxPolicy,
    ) -> Option<WriteScope> {
        (policy.mode == SandboxMode::WorkspaceWrite).then(|| WriteScope {
            service: world.policy_arc(),
            policy: policy.clone(),
            temp: world
                .sandbox()
                .and_then(|s| s.temp_dir())
                .into_iter()
                .collect(),
            session: session.cloned(),
            call_id: call_id.clone(),
            closed: false,
        })
    }

    /// Runs the check: sets aside and protects what appeared, logs
    /// `sandbox/checked` (and `sandbox/unsettled` for what could not be set aside,
    /// which the user is told of directly), and returns what it found, if anything.
    ///
    /// # Errors
    /// The session log's; `INTERNAL` when the check panicked or dsh is shutting down.
    ///
    /// # Cancel safety
    /// Cancel safe: the check runs in a task of its own, which a dropped close does not
    /// stop; it is set aside and logged all the same.
    pub(crate) async fn close(mut self) -> Result<Option<Found>, HarnessError> {
        self.closed = true;
        tokio::spawn(async move { self.checked().await })
            .await
            .unwrap_or_else(|e| {
                Err(match e.try_into_panic() {
                    Ok(payload) => {
                        HarnessError::panicked("the check after a call", payload.as_ref())
                    }
                    Err(_) => HarnessError::internal(
                        "the check after a call was stopped: dsh is shutting down",
                    ),
                })
            })
    }

    /// The check and its report (see [`close`](Self::close)), once: the scope is closed.
    async fn checked(&self) -> Result<Option<Found>, HarnessError> {
        let after = self.service.check(&self.policy, &self.temp).await;
        self.report(after).await
    }

    async fn report(
        &self,
        after: crate::policy::service::CheckOutcome,
    ) -> Result<Option<Found>, HarnessError> {
        if after.found.is_empty() {
            return Ok(None);
        }
        let paths: Vec<String> = after
            .found
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let quarantined: Vec<Quarantined> = after
            .quarantined
            .iter()
            .map(|q| Quarantined {
                path: q.path.display().to_string().into(),
                moved_to: q.moved_to.as_ref().map(|m| m.display().to_string().into()),
                what: q.what.to_string().into(),
                set_aside: q.set_aside,
            })
            .collect();
        let mut line = format!(
            "[sandbox: this call made {}, which the host's git and editors run or read by \
         themselves; from now on it is protected",
            paths.join(", ")
        );
        let (done, failed): (Vec<_>, Vec<_>) = after.quarantined.iter().partition(|q| q.set_aside);
        if !done.is_empty() {
            let set: Vec<String> = done
                .iter()
                .map(|q| {
                    let to = q.moved_to.as_ref().map(|m| m.display().to_string());
                    format!(
                        "{} ({}) to {}",
                        q.path.display(),
                        q.what,
                        to.unwrap_or_default()
                    )
                })
                .collect();
            line.push_str(&format!(
                "; what would run a program was set aside for the user to review: {}",
                set.join("; ")
            ));
        }
        if !failed.is_empty() {
            let list: Vec<String> = failed
                .iter()
                .map(|q| format!("{} ({})", q.path.display(), q.what))
                .collect();
            line.push_str(&format!(
                "; dsh could NOT set aside {}: workspace-write is refused in this workspace until \
             the user has dealt with it",
                list.join("; ")
            ));
        }
        line.push_str(". Do not make repositories, hooks or tool settings for the user to run.]");
        if !failed.is_empty() {
            // The user is told directly: the model is the one that made it.
            let list: Vec<String> = failed
                .iter()
                .map(|q| format!("{} ({})", q.path.display(), q.what))
                .collect();
            let text = format!(
                "a sandboxed command (call {}) made what the host's git or tools would run, \
                 and dsh could not set it aside: {}. Do not run git or those tools there \
                 until you have looked at it and moved or removed it; dsh refuses \
                 workspace-write commands there until then (dsh doctor lists it).",
                self.call_id.as_str(),
                list.join("; ")
            );
            self.service.tell_unsettled(&text);
            if let Some(session) = &self.session {
                let unsettled: Vec<Quarantined> = quarantined
                    .iter()
                    .filter(|q| !q.set_aside)
                    .cloned()
                    .collect();
                session
                    .append(Record::SandboxUnsettled {
                        call_id: Some(self.call_id.as_str().into()),
                        text: text.into(),
                        quarantined: unsettled,
                    })
                    .await?;
            }
        }
        let record = Record::SandboxChecked {
            call_id: Some(self.call_id.as_str().into()),
            paths: paths.iter().cloned().map(Logged::from).collect(),
            quarantined,
        };
        if let Some(session) = &self.session {
            session.append(record).await?;
        }
        Ok(Some((line, paths)))
    }
}

impl Drop for WriteScope {
    /// A scope nobody closed (the future of its call, or of what took it over, was
    /// dropped) still gets its check: in a task of its own, logged as the pipeline would
    /// log it. Outside a runtime there is nothing to run it on, and it is skipped.
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Closed already: a copy dropped unrun (a runtime shutting down drops new tasks)
        // starts nothing more.
        let orphan = WriteScope {
            service: self.service.clone(),
            policy: self.policy.clone(),
            temp: std::mem::take(&mut self.temp),
            session: self.session.take(),
            call_id: self.call_id.clone(),
            closed: true,
        };
        runtime.spawn(async move {
            let _ = orphan.checked().await;
        });
    }
}

/// One open scope, shared between the call and what may take it over.
type Slot = Arc<Mutex<Option<WriteScope>>>;

/// The write scopes of one call, which only the pipeline makes and closes.
#[derive(Default)]
pub struct CallScopes {
    slots: Mutex<Vec<Slot>>,
    /// What scopes closed early found ([`close_now`](Self::close_now)), for the result.
    closed: tokio::sync::Mutex<Closed>,
}

/// What the scopes closed so far found, and the first error closing one gave.
#[derive(Default)]
struct Closed {
    found: Vec<Found>,
    error: Option<HarnessError>,
}

impl std::fmt::Debug for CallScopes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallScopes")
    }
}

impl CallScopes {
    fn slots(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds `scope` to the call's open scopes, unless one with the same policy is open
    /// (one check covers both).
    pub(crate) fn add(&self, scope: Option<WriteScope>) {
        let Some(scope) = scope else { return };
        let mut slots = self.slots();
        let open = slots.iter().any(|s| {
            s.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_ref()
                .is_some_and(|o| o.policy == scope.policy)
        });
        if open {
            // The same policy's scope is open already and checks for both.
            let mut duplicate = scope;
            duplicate.closed = true;
        } else {
            slots.push(Arc::new(Mutex::new(Some(scope))));
        }
    }

    /// The scopes open now, for work that outlives the call to take over with
    /// [`Handover::take`] once it has started; what it does not take the pipeline closes
    /// with the call. Every scope open is taken: a tool starts such work last.
    pub(crate) fn handover(&self) -> Handover {
        Handover(self.slots().clone())
    }

    /// Closes the scopes open now, before the body returns, keeping what they found for
    /// the result: for a tool whose next call may run a command as soon as this one lets
    /// go of what it holds (a persistent shell), so that the check sees this call's
    /// command alone.
    pub(crate) async fn close_now(&self) {
        let open: Vec<WriteScope> = self.slots().drain(..).filter_map(|s| take(&s)).collect();
        let mut closed = self.closed.lock().await;
        let (found, error) = close_each(open).await;
        closed.found.extend(found);
        if let Some(e) = error {
            closed.error.get_or_insert(e);
        }
    }

    /// Closes every scope still open, in the order they were opened, each once, and
    /// returns what every scope of the call found, and the first error closing one gave
    /// (the session log's; every scope is closed all the same).
    pub(crate) async fn close_all(&self) -> (Vec<Found>, Option<HarnessError>) {
        self.close_now().await;
        let mut closed = self.closed.lock().await;
        (std::mem::take(&mut closed.found), closed.error.take())
    }
}

/// Closes each of `scopes` in order, whatever logging the one before did; what they
/// found, and the first error one gave (the session log's).
pub(crate) async fn close_each(
    scopes: impl IntoIterator<Item = WriteScope>,
) -> (Vec<Found>, Option<HarnessError>) {
    let (mut found, mut error) = (Vec::new(), None);
    for scope in scopes {
        match scope.close().await {
            Ok(f) => found.extend(f),
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
    (found, error)
}

fn take(slot: &Slot) -> Option<WriteScope> {
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
}

/// A call's open scopes, handed to work that outlives it (see [`CallScopes::handover`]).
pub(crate) struct Handover(Vec<Slot>);

impl Handover {
    /// Takes the scopes over: from now on their closing is the taker's.
    pub(crate) fn take(&self) -> HeldScopes {
        HeldScopes(self.0.iter().filter_map(take).collect())
    }
}

/// Scopes taken over by work that outlives its call, closed when it ends.
#[derive(Default)]
#[must_use = "held scopes are closed when the work that holds them ends"]
pub(crate) struct HeldScopes(Vec<WriteScope>);

impl HeldScopes {
    /// Closes them and returns the lines for the model: what the check found, or that
    /// it could not be logged.
    pub(crate) async fn close(self) -> Vec<String> {
        let (found, error) = close_each(self.0).await;
        let mut lines: Vec<String> = found.into_iter().map(|(line, _)| line).collect();
        if let Some(e) = error {
            lines.push(format!(
                "[dsh: the check of what the command made could not be logged: {e}]"
            ));
        }
        lines
    }
}
/// The lines closing the scopes a job holds gives (what the check found, or that it could not be
/// logged); none the second time.
pub(crate) async fn close_once(scopes: &Mutex<Option<HeldScopes>>) -> Vec<String> {
    let held = scopes.lock().unwrap_or_else(|p| p.into_inner()).take();
    match held {
        Some(held) => held.close().await,
        None => Vec::new(),
    }
}
