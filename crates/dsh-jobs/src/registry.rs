//! [`Jobs`]: the registry of background jobs. See the [crate docs](crate).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dsh_core::{CancelToken, ErrorCode, HarnessError, Owner};
use tokio::sync::watch;

use crate::{Job, JobId, JobOutcome, JobSnapshot, JobStart, JobStatus};

/// The registry's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobsConfig {
    /// The most jobs one owner may have running or stopping at once (unowned jobs share
    /// one such bucket). Default 10; at least 1.
    pub max_running_per_owner: usize,
}

impl Default for JobsConfig {
    fn default() -> JobsConfig {
        JobsConfig {
            max_running_per_owner: 10,
        }
    }
}

/// What [`Jobs::kill`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillOutcome {
    /// The producer was asked to stop; the job is `stopping` until it settles.
    Requested,
    /// It had already settled; nothing was done.
    AlreadyFinished,
}

/// Hears every settlement: the job as it ended, and its owner. Called on the task that
/// settled it; it must not block. A panic in it is contained.
pub type DoneListener = Arc<dyn Fn(&JobSnapshot, Option<&Owner>) + Send + Sync>;

/// The registry of background jobs. See the [crate docs](crate).
pub struct Jobs {
    shared: Arc<Shared>,
}

struct Shared {
    config: JobsConfig,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// In registration order.
    records: Vec<Record>,
    counters: HashMap<String, u64>,
    /// Starts past their preflight whose producer is still starting, per bucket.
    reserved: HashMap<usize, usize>,
    listeners: Vec<DoneListener>,
    /// Set by [`Jobs::dispose`]: nothing starts, no listener hears.
    disposing: bool,
}

struct Record {
    id: JobId,
    kind: String,
    label: String,
    output_limit_bytes: Option<usize>,
    owner: Option<Owner>,
    status: JobStatus,
    detail: Option<String>,
    output: Option<String>,
    started_at_ms: u64,
    finished_at_ms: Option<u64>,
    reported: bool,
    /// Waits in progress: a settlement they see counts as delivered.
    waiters: usize,
    streams: bool,
    job: Arc<dyn Job>,
    settled: watch::Sender<bool>,
}

impl Record {
    fn snapshot(&self) -> JobSnapshot {
        JobSnapshot {
            id: self.id.clone(),
            kind: self.kind.clone(),
            label: self.label.clone(),
            output_limit_bytes: self.output_limit_bytes,
            owner_session: self.owner.as_ref().map(|o| o.session().clone()),
            status: self.status,
            detail: self.detail.clone(),
            started_at_ms: self.started_at_ms,
            finished_at_ms: self.finished_at_ms,
            reported: self.reported,
        }
    }

    /// Whether `caller` may see it: its owner's session, or anyone for an unowned job.
    fn visible_to(&self, caller: Option<&Owner>) -> bool {
        match (&self.owner, caller) {
            (None, _) => true,
            (Some(o), Some(c)) => o.session() == c.session(),
            (Some(_), None) => false,
        }
    }
}

/// The capacity bucket of an owner: its identity, or 0 for unowned jobs.
fn bucket(owner: Option<&Owner>) -> usize {
    owner.map_or(0, Owner::key)
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Jobs {
    /// An empty registry.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` when `max_running_per_owner` is 0.
    pub fn new(config: JobsConfig) -> Result<Jobs, HarnessError> {
        if config.max_running_per_owner == 0 {
            return Err(HarnessError::invalid_argument(
                "invalid max_running_per_owner: expected at least 1",
            ));
        }
        Ok(Jobs {
            shared: Arc::new(Shared {
                config,
                state: Mutex::new(State::default()),
            }),
        })
    }

    /// Its settings.
    pub fn config(&self) -> &JobsConfig {
        &self.shared.config
    }

    /// Registers a job: checks, in order, that the registry is not shutting down, the
    /// kind and label, that the owner is live and under its limit; then calls `run` (the
    /// producer starts the work) and gives the job its id. Returns at once; the job is
    /// watched until it settles. Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// `JOBS_UNAVAILABLE`, `INVALID_ARGUMENT`, `OWNER_NOT_LIVE`, `JOB_LIMIT` before `run`
    /// runs (no id is used); `run`'s own error (nothing is registered).
    pub fn start(
        &self,
        start: JobStart,
        run: impl FnOnce() -> Result<Arc<dyn Job>, HarnessError>,
    ) -> Result<JobId, HarnessError> {
        let bucket = bucket(start.owner.as_ref());
        {
            let mut st = self.shared.lock();
            if st.disposing {
                return Err(unavailable());
            }
            if start.kind.trim().is_empty() {
                return Err(HarnessError::invalid_argument(
                    "invalid job kind: expected a non-empty string",
                ));
            }
            if start.label.trim().is_empty() {
                return Err(HarnessError::invalid_argument(
                    "invalid job label: expected a non-empty string",
                ));
            }
            if start.output_limit_bytes == Some(0) {
                return Err(HarnessError::invalid_argument(
                    "invalid output_limit_bytes: expected at least 1",
                ));
            }
            if let Some(o) = &start.owner {
                if !o.is_live() {
                    return Err(HarnessError::new(
                        ErrorCode::OwnerNotLive,
                        format!(
                            "session {} is ending; no background job starts for it",
                            o.session()
                        ),
                    ));
                }
            }
            let limit = self.shared.config.max_running_per_owner;
            let running = st
                .records
                .iter()
                .filter(|r| bucket_of(r) == bucket && !r.status.is_finished())
                .count()
                + st.reserved.get(&bucket).copied().unwrap_or(0);
            if running >= limit {
                return Err(HarnessError::new(
                    ErrorCode::JobLimit,
                    format!(
                        "background job limit reached for this owner (limit: {limit}); stop \
                         one with job_kill, or collect one with job_output (wait: true), \
                         then retry"
                    ),
                ));
            }
            *st.reserved.entry(bucket).or_default() += 1;
        }
        let started = run();
        let mut st = self.shared.lock();
        if let Some(n) = st.reserved.get_mut(&bucket) {
            *n -= 1;
            if *n == 0 {
                st.reserved.remove(&bucket);
            }
        }
        let job = started?;
        let owner_ended = start.owner.as_ref().is_some_and(|o| !o.is_live());
        if st.disposing || owner_ended {
            // Teardown began while the producer started: the job must not outlive it.
            drop(st);
            let _ = job.cancel("jobs service disposed");
            let settle = job.clone();
            tokio::spawn(async move { settle.done().await });
            return Err(if owner_ended {
                HarnessError::new(
                    ErrorCode::OwnerNotLive,
                    "the session ended while the job started; it was stopped",
                )
            } else {
                unavailable()
            });
        }
        let counter = st.counters.entry(start.kind.clone()).or_insert(0);
        *counter += 1;
        let id = JobId::new(format!("{}-{counter}", start.kind));
        let (settled, _) = watch::channel(false);
        st.records.push(Record {
            id: id.clone(),
            kind: start.kind,
            label: start.label,
            output_limit_bytes: start.output_limit_bytes,
            owner: start.owner,
            status: JobStatus::Running,
            detail: None,
            output: None,
            started_at_ms: now_ms(),
            finished_at_ms: None,
            reported: false,
            waiters: 0,
            streams: job.streams(),
            job: job.clone(),
            settled,
        });
        forget_oldest_finished(&mut st, bucket);
        drop(st);
        let shared = Arc::downgrade(&self.shared);
        let watched = id.clone();
        // A producer that panics settles its job `failed` rather than leaving it running
        // (and its owner's teardown waiting on it) forever.
        let done = tokio::spawn(async move { job.done().await });
        tokio::spawn(async move {
            let outcome = done.await.unwrap_or_else(|e| JobOutcome {
                end: crate::JobEnd::Failed,
                detail: Some(match e.try_into_panic() {
                    Ok(payload) => HarnessError::panicked("the job", payload.as_ref())
                        .message()
                        .to_owned(),
                    Err(e) => format!("the job's task ended early: {e}"),
                }),
                output: None,
            });
            if let Some(shared) = shared.upgrade() {
                shared.settle(&watched, outcome);
            }
        });
        Ok(id)
    }

    /// The jobs `caller` may see, in the order they started: its session's and the
    /// unowned ones (a caller without an owner sees only the unowned).
    pub fn list(&self, caller: Option<&Owner>) -> Vec<JobSnapshot> {
        self.shared
            .lock()
            .records
            .iter()
            .filter(|r| r.visible_to(caller))
            .map(Record::snapshot)
            .collect()
    }

    /// One job as it is now; reads nothing and delivers nothing.
    ///
    /// # Errors
    /// `NO_JOB`, `FOREIGN_JOB`.
    pub fn get(&self, id: &str, caller: Option<&Owner>) -> Result<JobSnapshot, HarnessError> {
        let st = self.shared.lock();
        Ok(access(&st, id, caller)?.snapshot())
    }

    /// Marks a settled job's end delivered by a notice the model will see (so it is
    /// delivered once); says whether it was not delivered before. `false` for a job still
    /// running, one whose end a read, wait or kill already delivered, a job `caller` may
    /// not see, or one forgotten.
    pub fn deliver_end(&self, id: &str, caller: Option<&Owner>) -> bool {
        let mut st = self.shared.lock();
        let Ok(i) = index(&st, id, caller) else {
            return false;
        };
        let r = &mut st.records[i];
        if !r.status.is_finished() || r.reported {
            return false;
        }
        r.reported = true;
        true
    }

    /// The job's output since the previous read (a streaming job's; a job without a
    /// stream gives nothing until it settles, then its whole output, every time). A read
    /// after the end delivers the end ([`JobSnapshot::reported`]).
    ///
    /// # Errors
    /// `NO_JOB`, `FOREIGN_JOB`.
    pub fn read(
        &self,
        id: &str,
        caller: Option<&Owner>,
    ) -> Result<(String, JobSnapshot), HarnessError> {
        let mut st = self.shared.lock();
        let i = index(&st, id, caller)?;
        let r = &mut st.records[i];
        // The status first: a job that settles meanwhile leaves its rest for next time.
        let finished = r.status.is_finished();
        let text = if r.streams {
            r.job.read_output(finished)
        } else if finished {
            r.output.clone().unwrap_or_default()
        } else {
            String::new()
        };
        if finished {
            r.reported = true;
        }
        Ok((text, r.snapshot()))
    }

    /// Asks the job's producer to stop (with `reason`), then marks it `stopping` and its
    /// end delivered. A job already settled is left alone.
    ///
    /// # Errors
    /// `NO_JOB`, `FOREIGN_JOB`; the producer's cancel error (then nothing changed).
    pub fn kill(
        &self,
        id: &str,
        caller: Option<&Owner>,
        reason: &str,
    ) -> Result<(KillOutcome, JobSnapshot), HarnessError> {
        let mut st = self.shared.lock();
        let i = index(&st, id, caller)?;
        let r = &mut st.records[i];
        if r.status.is_finished() {
            r.reported = true;
            return Ok((KillOutcome::AlreadyFinished, r.snapshot()));
        }
        if r.status == JobStatus::Running {
            r.job.cancel(reason)?;
            r.status = JobStatus::Stopping;
        }
        r.reported = true;
        Ok((KillOutcome::Requested, r.snapshot()))
    }

    /// Waits until the job settles, at most `timeout`: then its snapshot (a settled one
    /// delivers the end; one still running after the timeout does not).
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` for a zero timeout; `NO_JOB` (also when its owner's teardown
    /// removes it meanwhile), `FOREIGN_JOB`; `ABORTED` when `cancel` fires first (the job
    /// runs on).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future leaves the job as it was.
    pub async fn wait(
        &self,
        id: &str,
        timeout: Duration,
        caller: Option<&Owner>,
        cancel: &CancelToken,
    ) -> Result<JobSnapshot, HarnessError> {
        if timeout.is_zero() {
            return Err(HarnessError::invalid_argument(
                "invalid wait timeout: expected a positive number of milliseconds",
            ));
        }
        let mut settled = {
            let mut st = self.shared.lock();
            let i = index(&st, id, caller)?;
            let r = &mut st.records[i];
            if r.status.is_finished() {
                r.reported = true;
                return Ok(r.snapshot());
            }
            if cancel.is_cancelled() {
                return Err(aborted());
            }
            r.waiters += 1;
            r.settled.subscribe()
        };
        // Counted while it waits, however the wait ends (the future may be dropped).
        let waiting = Waiting {
            shared: &self.shared,
            id,
        };
        let aborted_first = tokio::select! {
            _ = settled.wait_for(|s| *s) => false,
            () = tokio::time::sleep(timeout) => false,
            () = cancel.cancelled() => true,
        };
        drop(waiting);
        let mut st = self.shared.lock();
        let Some(r) = st.records.iter_mut().find(|r| r.id.as_str() == id) else {
            return Err(no_job(id));
        };
        if r.status.is_finished() {
            r.reported = true;
            return Ok(r.snapshot());
        }
        if aborted_first {
            return Err(aborted());
        }
        Ok(r.snapshot())
    }

    /// Adds a listener for every settlement from now on (see [`DoneListener`]).
    pub fn on_done(&self, listener: DoneListener) {
        self.shared.lock().listeners.push(listener);
    }

    /// Whether `owner` has jobs running or stopping.
    pub fn has_running(&self, owner: &Owner) -> bool {
        self.shared
            .lock()
            .records
            .iter()
            .any(|r| bucket_of(r) == owner.key() && !r.status.is_finished())
    }

    /// Ends `owner`: it starts nothing more; each of its jobs still running is cancelled
    /// (reason `owner disposed`, its end counted as delivered) and awaited; then its jobs
    /// are forgotten. A producer whose cancel fails is settled `failed` at once (its work
    /// may be orphaned; the detail says so).
    ///
    /// # Cancel safety
    /// Dropping the future stops only the waiting: the owner is ended and its jobs were
    /// asked to stop at the first poll (each still settles), but their records are kept,
    /// not forgotten.
    pub async fn end_owner(&self, owner: &Owner) {
        owner.end();
        self.teardown(|r| bucket_of(r) == owner.key(), "owner disposed")
            .await;
        self.shared
            .lock()
            .records
            .retain(|r| bucket_of(r) != owner.key());
    }

    /// Shuts the registry down: nothing starts any more, listeners hear nothing more,
    /// every job still running is cancelled (reason `jobs service disposed`) and
    /// awaited, and every record is forgotten.
    ///
    /// # Cancel safety
    /// Dropping the future stops only the waiting: the registry already refuses new jobs,
    /// its listeners are gone and every job was asked to stop (each still settles), but
    /// the records are kept.
    pub async fn dispose(&self) {
        {
            let mut st = self.shared.lock();
            st.disposing = true;
            st.listeners.clear();
        }
        self.teardown(|_| true, "jobs service disposed").await;
        self.shared.lock().records.clear();
    }

    async fn teardown(&self, covers: impl Fn(&Record) -> bool, reason: &str) {
        let mut waits = Vec::new();
        let mut orphaned = Vec::new();
        {
            let mut st = self.shared.lock();
            for r in st.records.iter_mut().filter(|r| covers(r)) {
                if r.status.is_finished() {
                    continue;
                }
                r.reported = true;
                if r.status == JobStatus::Running {
                    match r.job.cancel(reason) {
                        Ok(()) => r.status = JobStatus::Stopping,
                        Err(e) => {
                            orphaned.push((r.id.clone(), e));
                            continue;
                        }
                    }
                }
                waits.push(r.settled.subscribe());
            }
        }
        for (id, e) in orphaned {
            self.shared.settle(
                &id,
                JobOutcome {
                    end: crate::JobEnd::Failed,
                    detail: Some(format!(
                        "cancel failed during teardown; work may be orphaned: {e}"
                    )),
                    output: None,
                },
            );
        }
        for mut w in waits {
            let _ = w.wait_for(|s| *s).await;
        }
    }
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("Jobs")
            .field("config", &self.shared.config)
            .field("jobs", &st.records.len())
            .field("disposing", &st.disposing)
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the first settlement of `id`, wakes its waiters, then tells the listeners.
    fn settle(&self, id: &JobId, outcome: JobOutcome) {
        let (snapshot, owner, listeners) = {
            let mut st = self.lock();
            let Some(r) = st.records.iter_mut().find(|r| &r.id == id) else {
                return;
            };
            if r.status.is_finished() {
                return;
            }
            r.status = outcome.end.into();
            r.detail = outcome.detail;
            r.output = outcome.output;
            r.finished_at_ms = Some(now_ms().max(r.started_at_ms));
            if r.waiters > 0 {
                r.reported = true;
            }
            r.settled.send_replace(true);
            let snapshot = r.snapshot();
            let owner = r.owner.clone();
            (snapshot, owner, st.listeners.clone())
        };
        for l in listeners {
            let call = std::panic::AssertUnwindSafe(|| l(&snapshot, owner.as_ref()));
            if std::panic::catch_unwind(call).is_err() {
                eprintln!("dsh: a job completion listener panicked (job {id})");
            }
        }
    }
}

/// A wait in progress on one record; counted off when it ends, however it ends.
struct Waiting<'a> {
    shared: &'a Shared,
    id: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if let Some(r) = st.records.iter_mut().find(|r| r.id.as_str() == self.id) {
            r.waiters = r.waiters.saturating_sub(1);
        }
    }
}

/// How many settled jobs an owner's list keeps; older ones are forgotten as new ones
/// start (their output and notice with them).
pub const MAX_FINISHED_PER_OWNER: usize = 100;

/// Forgets the oldest settled jobs of `bucket` beyond [`MAX_FINISHED_PER_OWNER`].
fn forget_oldest_finished(st: &mut State, bucket: usize) {
    let finished = st
        .records
        .iter()
        .filter(|r| bucket_of(r) == bucket && r.status.is_finished())
        .count();
    let mut excess = finished.saturating_sub(MAX_FINISHED_PER_OWNER);
    st.records.retain(|r| {
        let forget = excess > 0 && bucket_of(r) == bucket && r.status.is_finished();
        if forget {
            excess -= 1;
        }
        !forget
    });
}

fn bucket_of(r: &Record) -> usize {
    bucket(r.owner.as_ref())
}

fn index(st: &State, id: &str, caller: Option<&Owner>) -> Result<usize, HarnessError> {
    let i = st
        .records
        .iter()
        .position(|r| r.id.as_str() == id)
        .ok_or_else(|| no_job(id))?;
    if !st.records[i].visible_to(caller) {
        return Err(HarnessError::new(
            ErrorCode::ForeignJob,
            format!("job {id} belongs to another session"),
        ));
    }
    Ok(i)
}

fn access<'a>(st: &'a State, id: &str, caller: Option<&Owner>) -> Result<&'a Record, HarnessError> {
    index(st, id, caller).map(|i| &st.records[i])
}

fn no_job(id: &str) -> HarnessError {
    HarnessError::new(
        ErrorCode::NoJob,
        format!(
            "unknown job {}; job_list shows the current ones",
            dsh_core::visible::visible_prefix(id, 80).0
        ),
    )
}

fn aborted() -> HarnessError {
    HarnessError::new(ErrorCode::Aborted, "wait aborted")
}

fn unavailable() -> HarnessError {
    HarnessError::new(
        ErrorCode::JobsUnavailable,
        "the background job service is shutting down; nothing new starts",
    )
}
