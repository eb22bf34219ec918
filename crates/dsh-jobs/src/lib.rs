//! Background jobs: long work that outlives the tool call that started it, with an id, an
//! owner, a bounded count, and an end that someone is told about.
//!
//! A model starts a dev server or a 20-minute build and keeps working; later it reads
//! what the job printed, waits for it, or kills it, and is told when it ends. A
//! *producer* (background `bash`, a background terminal send) does the work and hands the
//! registry a [`Job`]: a way to cancel it, a future that settles when it is over, and,
//! for jobs that stream, a consuming read of their output. [`Jobs`] gives each job an id
//! `<kind>-<n>` (`bash-1`, `pty-send-1`), an [`Owner`] (the MCP connection that started
//! it) and a status:
//!
//! ```text
//! running ──kill──▶ stopping ──▶ completed | killed | failed
//!    └───────────────────────────▶ (the first settlement wins)
//! ```
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), dsh_core::HarnessError> {
//! use std::sync::Arc;
//! use dsh_core::{CancelToken, Owner, SessionId};
//! use dsh_jobs::{Job, JobEnd, JobOutcome, JobStart, Jobs, JobsConfig};
//!
//! struct Answer;
//! #[async_trait::async_trait]
//! impl Job for Answer {
//!     fn cancel(&self, _reason: &str) -> Result<(), dsh_core::HarnessError> { Ok(()) }
//!     async fn done(&self) -> JobOutcome {
//!         JobOutcome { end: JobEnd::Completed, detail: None, output: Some("42".into()) }
//!     }
//! }
//!
//! let jobs = Jobs::new(JobsConfig::default())?;
//! let owner = Owner::new(SessionId::new("s1"));
//! let id = jobs.start(JobStart::new("think", "the answer", Some(owner.clone())), || {
//!     Ok(Arc::new(Answer) as Arc<dyn Job>)
//! })?;
//! assert_eq!(id.as_str(), "think-1");
//! let job = jobs.wait(id.as_str(), std::time::Duration::from_secs(5), Some(&owner), &CancelToken::new()).await?;
//! assert_eq!(job.status_line(), "[status: completed]");
//! assert_eq!(jobs.read(id.as_str(), Some(&owner))?.0, "42");
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//! - Ids count from 1 per kind and registry; a start refused before its producer ran
//!   uses no number.
//! - An owner has at most [`JobsConfig::max_running_per_owner`] jobs running or stopping;
//!   the next start is `JOB_LIMIT`, before anything runs.
//! - A job is seen, read, waited for and killed only by its owner's session
//!   (`FOREIGN_JOB` for anyone else); unowned jobs are everyone's.
//! - A status leaves `running` once and settles once; a kill asks the producer to cancel
//!   *before* the status says `stopping`, and a cancel that fails changes nothing.
//! - [`Jobs::end_owner`] and [`Jobs::dispose`] cancel every job they cover and return
//!   only once each has settled (each producer's `done` promises its resources are
//!   released by then).
//! - Completion listeners ([`Jobs::on_done`]) hear every settlement, with
//!   [`JobSnapshot::reported`] saying whether its end was already delivered (a kill, a
//!   read or wait that saw the end, or teardown), so a notice is sent only when nobody
//!   has seen the end yet.
//!
//! # Limits
//! An owner's list keeps its last [`MAX_FINISHED_PER_OWNER`] settled jobs; older ones are
//! forgotten as new ones start. Jobs live in this process: they end with it (their producers kill their process
//! trees). Nothing is persisted.
//!
//! # Errors
//! `NO_JOB` (unknown id), `FOREIGN_JOB`, `JOB_LIMIT`, `JOBS_UNAVAILABLE` (the registry
//! is shutting down), `OWNER_NOT_LIVE`, `INVALID_ARGUMENT` (an empty kind or label, a
//! zero wait timeout or output limit), `ABORTED` (a wait cancelled), and whatever a
//! producer's start or cancel returns.

mod notice;
mod registry;

use std::time::Duration;

use async_trait::async_trait;
use dsh_core::HarnessError;

pub use dsh_core::Owner;
pub use notice::{completion_notice, NOTICE_MAX_BYTES};
pub use registry::{DoneListener, Jobs, JobsConfig, KillOutcome, MAX_FINISHED_PER_OWNER};

dsh_core::id_type! {
    /// Names one background job: `<kind>-<n>`, e.g. `bash-1`.
    pub struct JobId;
}

/// Where a job is in its life. It leaves `Running` once and reaches one of the last
/// three once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobStatus {
    /// The work is going on.
    Running,
    /// A kill (or teardown) asked it to stop; it has not settled yet. It still counts
    /// against its owner's limit.
    Stopping,
    /// It finished by itself.
    Completed,
    /// It was killed (or died of a signal).
    Killed,
    /// It could not do its work (its producer says why in the detail).
    Failed,
}

impl JobStatus {
    /// `running`, `stopping`, `completed`, `killed` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Stopping => "stopping",
            JobStatus::Completed => "completed",
            JobStatus::Killed => "killed",
            JobStatus::Failed => "failed",
        }
    }

    /// Whether it has settled (completed, killed or failed).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobStatus::Completed | JobStatus::Killed | JobStatus::Failed
        )
    }
}

/// How a job ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobEnd {
    /// By itself.
    Completed,
    /// By a kill or a signal.
    Killed,
    /// It could not do its work.
    Failed,
}

impl From<JobEnd> for JobStatus {
    fn from(end: JobEnd) -> JobStatus {
        match end {
            JobEnd::Completed => JobStatus::Completed,
            JobEnd::Killed => JobStatus::Killed,
            JobEnd::Failed => JobStatus::Failed,
        }
    }
}

/// What a job's producer reports when it settles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobOutcome {
    /// How it ended.
    pub end: JobEnd,
    /// A short detail for the status line (`exit code: 0`, `signal: SIGTERM`).
    pub detail: Option<String>,
    /// The whole output of a job that does not [stream](Job::streams).
    pub output: Option<String>,
}

/// The work behind one job, as its producer hands it to [`Jobs::start`].
#[async_trait]
pub trait Job: Send + Sync {
    /// Asks the work to stop. Idempotent; after it returns `Ok`, [`done`](Job::done) must
    /// settle (soon). An `Err` means nothing was asked, and the job stays as it was.
    ///
    /// # Errors
    /// The producer's.
    fn cancel(&self, reason: &str) -> Result<(), HarnessError>;

    /// Completes once the work is over and its resources (processes, files) are
    /// released. Called once, by the registry.
    ///
    /// # Cancel safety
    /// Need not be cancel safe: the registry awaits it to its end on a task of its own.
    /// Dropped part-way (a runtime shutting down), a job may leave its clean-up undone
    /// (the check of what its command made), and a second call need not report its
    /// outcome.
    async fn done(&self) -> JobOutcome;

    /// Whether its output streams: read as it comes with [`read_output`](Job::read_output),
    /// rather than whole with its outcome. Default: false.
    fn streams(&self) -> bool {
        false
    }

    /// The output since the previous call (consuming: nothing is returned twice), for a
    /// job that [`streams`](Job::streams). Must not block.
    ///
    /// `settled` says whether the registry has recorded the job's end (the read reports
    /// that status). A job that keeps output for after its end (the last lines, what a
    /// check found) gives it only when `settled`, so it is read beside the status that
    /// explains it.
    fn read_output(&self, settled: bool) -> String {
        let _ = settled;
        String::new()
    }
}

/// What [`Jobs::start`] needs besides the work itself.
#[derive(Clone, Debug)]
pub struct JobStart {
    /// The kind, the id's prefix (`bash`, `pty-send`); not empty.
    pub kind: String,
    /// What the job is, for lists and notices (a command line); not empty.
    pub label: String,
    /// Who it belongs to; `None`: everyone's.
    pub owner: Option<Owner>,
    /// The most bytes a result about this job (its output, its notice) may take.
    pub output_limit_bytes: Option<usize>,
}

impl JobStart {
    /// A start of `kind` labelled `label` for `owner`, without an output limit.
    pub fn new(
        kind: impl Into<String>,
        label: impl Into<String>,
        owner: Option<Owner>,
    ) -> JobStart {
        JobStart {
            kind: kind.into(),
            label: label.into(),
            owner,
            output_limit_bytes: None,
        }
    }
}

/// A job as it is at one moment (a copy: later changes do not show in it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSnapshot {
    /// Its id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its label.
    pub label: String,
    /// Its output limit, if any.
    pub output_limit_bytes: Option<usize>,
    /// The session of its owner, if it has one.
    pub owner_session: Option<dsh_core::SessionId>,
    /// Its status.
    pub status: JobStatus,
    /// The producer's detail, once settled.
    pub detail: Option<String>,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// When it settled, once it has.
    pub finished_at_ms: Option<u64>,
    /// Whether its end was already delivered (a kill, a read or wait that saw the end,
    /// teardown): a completion notice is then not sent.
    pub reported: bool,
}

impl JobSnapshot {
    /// `[status: <status>]`, or `[status: <status>, <detail>]` when there is a detail.
    pub fn status_line(&self) -> String {
        match &self.detail {
            Some(d) => format!("[status: {}, {d}]", self.status.as_str()),
            None => format!("[status: {}]", self.status.as_str()),
        }
    }

    /// How long it has run, or ran.
    pub fn elapsed(&self) -> Duration {
        let end = self.finished_at_ms.unwrap_or_else(registry::now_ms);
        Duration::from_millis(end.saturating_sub(self.started_at_ms))
    }
}
