//! The job registry with in-process producers: ids, limits, ownership, reads, kills,
//! waits, settlement and teardown. (Real process trees behind jobs are tested where the
//! producers live: `dsh-tools` and `dsh mcp`.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dsh_core::{CancelReason, CancelToken, ErrorCode, HarnessError, Owner, SessionId};
use dsh_jobs::{
    Job, JobEnd, JobOutcome, JobSnapshot, JobStart, JobStatus, Jobs, JobsConfig, KillOutcome,
};
use tokio::sync::watch;

/// A producer the test settles by hand; it streams when `stream` is set.
struct Manual {
    outcome: watch::Sender<Option<JobOutcome>>,
    cancels: Mutex<Vec<String>>,
    refuse_cancel: bool,
    stream: Option<Mutex<String>>,
    /// Settle as killed when cancelled.
    settle_on_cancel: bool,
    /// What each read of the stream was told: whether the registry had the end.
    reads: Mutex<Vec<bool>>,
}

impl Manual {
    fn new() -> Arc<Manual> {
        Arc::new(Manual {
            outcome: watch::channel(None).0,
            cancels: Mutex::new(Vec::new()),
            refuse_cancel: false,
            stream: None,
            settle_on_cancel: true,
            reads: Mutex::new(Vec::new()),
        })
    }

    fn streaming() -> Arc<Manual> {
        Arc::new(Manual {
            stream: Some(Mutex::new(String::new())),
            ..Arc::into_inner(Manual::new()).expect("fresh")
        })
    }

    fn stubborn() -> Arc<Manual> {
        Arc::new(Manual {
            refuse_cancel: true,
            ..Arc::into_inner(Manual::new()).expect("fresh")
        })
    }

    fn print(&self, text: &str) {
        self.stream
            .as_ref()
            .expect("streaming")
            .lock()
            .expect("lock")
            .push_str(text);
    }

    fn finish(&self, end: JobEnd, detail: &str, output: Option<&str>) {
        self.outcome.send_replace(Some(JobOutcome {
            end,
            detail: Some(detail.into()),
            output: output.map(str::to_owned),
        }));
    }

    fn cancels(&self) -> Vec<String> {
        self.cancels.lock().expect("lock").clone()
    }
}

#[async_trait]
impl Job for Manual {
    fn cancel(&self, reason: &str) -> Result<(), HarnessError> {
        if self.refuse_cancel {
            return Err(HarnessError::internal("cannot cancel"));
        }
        self.cancels.lock().expect("lock").push(reason.into());
        if self.settle_on_cancel {
            self.finish(JobEnd::Killed, "signal: SIGTERM", None);
        }
        Ok(())
    }

    async fn done(&self) -> JobOutcome {
        let mut rx = self.outcome.subscribe();
        let outcome = rx.wait_for(Option::is_some).await.expect("sender alive");
        outcome.clone().expect("some")
    }

    fn streams(&self) -> bool {
        self.stream.is_some()
    }

    fn read_output(&self, settled: bool) -> String {
        self.reads.lock().expect("lock").push(settled);
        self.stream
            .as_ref()
            .map(|s| std::mem::take(&mut *s.lock().expect("lock")))
            .unwrap_or_default()
    }
}

fn jobs() -> Jobs {
    Jobs::new(JobsConfig::default()).expect("config")
}

fn owner(session: &str) -> Owner {
    Owner::new(SessionId::new(session))
}

fn start(jobs: &Jobs, kind: &str, owner: &Owner, job: &Arc<Manual>) -> String {
    let job = job.clone();
    jobs.start(
        JobStart::new(kind, "label", Some(owner.clone())),
        move || Ok(job as Arc<dyn Job>),
    )
    .expect("start")
    .as_str()
    .to_owned()
}

/// Lets the settlement task run.
async fn settle() {
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
}

#[tokio::test]
async fn ids_count_per_kind_and_a_refused_start_uses_none() {
    let j = jobs();
    let o = owner("s1");
    assert_eq!(start(&j, "bash", &o, &Manual::new()), "bash-1");
    assert_eq!(start(&j, "bash", &o, &Manual::new()), "bash-2");
    assert_eq!(start(&j, "pty-send", &o, &Manual::new()), "pty-send-1");
    // The producer failed: nothing registered, no number used.
    let e = j
        .start(JobStart::new("bash", "x", Some(o.clone())), || {
            Err(HarnessError::new(ErrorCode::ProcessSpawnFailed, "no"))
        })
        .expect_err("failed producer");
    assert_eq!(e.code(), ErrorCode::ProcessSpawnFailed);
    for (kind, label) in [("", "x"), ("bash", " ")] {
        let e = j
            .start(JobStart::new(kind, label, Some(o.clone())), || {
                unreachable!("preflight runs first")
            })
            .expect_err("bad start");
        assert_eq!(e.code(), ErrorCode::InvalidArgument);
    }
    assert_eq!(start(&j, "bash", &o, &Manual::new()), "bash-3");
    let listed: Vec<String> = j
        .list(Some(&o))
        .iter()
        .map(|s| s.id.as_str().to_owned())
        .collect();
    assert_eq!(listed, ["bash-1", "bash-2", "pty-send-1", "bash-3"]);
}

#[tokio::test]
async fn the_eleventh_running_job_is_refused_until_one_settles() {
    let j = jobs();
    let o = owner("s1");
    let running: Vec<Arc<Manual>> = (0..10).map(|_| Manual::new()).collect();
    for m in &running {
        start(&j, "bash", &o, m);
    }
    let e = j
        .start(JobStart::new("bash", "x", Some(o.clone())), || {
            unreachable!("refused before the producer runs")
        })
        .expect_err("11th");
    assert_eq!(e.code(), ErrorCode::JobLimit);
    assert!(e.message().contains("job_kill"), "{e}");
    // Another owner has its own bucket.
    start(&j, "bash", &owner("s2"), &Manual::new());
    // A stopping job still holds its slot; a settled one frees it at once.
    let slow = Manual::new();
    let slow = Arc::new(Manual {
        settle_on_cancel: false,
        ..Arc::into_inner(slow).expect("fresh")
    });
    running[0].finish(JobEnd::Completed, "exit code: 0", None);
    settle().await;
    let id = start(&j, "bash", &o, &slow);
    j.kill(&id, Some(&o), "model request").expect("kill");
    assert_eq!(
        j.get(&id, Some(&o)).expect("get").status,
        JobStatus::Stopping
    );
    let e = j
        .start(
            JobStart::new("bash", "x", Some(o.clone())),
            || unreachable!(),
        )
        .expect_err("stopping holds its slot");
    assert_eq!(e.code(), ErrorCode::JobLimit);
    slow.finish(JobEnd::Killed, "signal: SIGTERM", None);
    settle().await;
    start(&j, "bash", &o, &Manual::new());
}

#[tokio::test]
async fn another_session_cannot_see_read_wait_for_or_kill_a_job() {
    let j = jobs();
    let (mine, theirs) = (owner("s1"), owner("s2"));
    start(&j, "bash", &mine, &Manual::new());
    let unowned = Manual::new();
    let u = unowned.clone();
    j.start(JobStart::new("bash", "shared", None), move || {
        Ok(u as Arc<dyn Job>)
    })
    .expect("unowned");
    assert_eq!(j.list(Some(&mine)).len(), 2);
    let theirs_see: Vec<String> = j
        .list(Some(&theirs))
        .iter()
        .map(|s| s.id.as_str().to_owned())
        .collect();
    assert_eq!(theirs_see, ["bash-2"]);
    assert_eq!(j.list(None).len(), 1);
    let cancel = CancelToken::new();
    let foreign = [
        j.get("bash-1", Some(&theirs)).map(|_| ()),
        j.read("bash-1", Some(&theirs)).map(|_| ()),
        j.kill("bash-1", Some(&theirs), "x").map(|_| ()),
        j.wait("bash-1", Duration::from_millis(10), Some(&theirs), &cancel)
            .await
            .map(|_| ()),
        j.get("bash-1", None).map(|_| ()),
    ];
    for r in foreign {
        let e = r.expect_err("foreign");
        assert_eq!(e.code(), ErrorCode::ForeignJob);
        assert!(e.message().contains("belongs to another session"), "{e}");
    }
    for id in ["bash-99", "", "bash-"] {
        let e = j.get(id, Some(&mine)).expect_err("unknown");
        assert_eq!(e.code(), ErrorCode::NoJob, "{id}");
    }
    // The same session through another owner object (a stale one) still sees its jobs.
    assert_eq!(j.list(Some(&owner("s1"))).len(), 2);
}

#[tokio::test]
async fn reads_consume_and_the_last_read_delivers_the_end() {
    let j = jobs();
    let o = owner("s1");
    let m = Manual::streaming();
    let id = start(&j, "bash", &o, &m);
    m.print("first\n");
    let (text, snap) = j.read(&id, Some(&o)).expect("read");
    assert_eq!(
        (text.as_str(), snap.status, snap.reported),
        ("first\n", JobStatus::Running, false)
    );
    assert_eq!(j.read(&id, Some(&o)).expect("read").0, "");
    m.print("second\n");
    m.finish(JobEnd::Completed, "exit code: 0", None);
    settle().await;
    let (text, snap) = j.read(&id, Some(&o)).expect("read");
    assert_eq!(text, "second\n");
    assert_eq!(snap.status_line(), "[status: completed, exit code: 0]");
    assert!(snap.reported);
    // The producer knew which read reported the end.
    assert_eq!(*m.reads.lock().expect("lock"), [false, false, true]);
    // A job without a stream: nothing while it runs, its whole output after, every time.
    let whole = Manual::new();
    let id = start(&j, "think", &o, &whole);
    assert_eq!(j.read(&id, Some(&o)).expect("read").0, "");
    whole.finish(JobEnd::Completed, "completed", Some("the answer"));
    settle().await;
    for _ in 0..2 {
        let (text, snap) = j.read(&id, Some(&o)).expect("read");
        assert_eq!(text, "the answer");
        assert_eq!(snap.status_line(), "[status: completed, completed]");
    }
}

#[tokio::test]
async fn kill_cancels_first_and_a_refused_cancel_changes_nothing() {
    let j = jobs();
    let o = owner("s1");
    let m = Manual::new();
    let id = start(&j, "bash", &o, &m);
    let (outcome, snap) = j.kill(&id, Some(&o), "not needed").expect("kill");
    assert_eq!(outcome, KillOutcome::Requested);
    assert_eq!(snap.status, JobStatus::Stopping);
    assert!(snap.reported);
    assert_eq!(m.cancels(), ["not needed"]);
    settle().await;
    let (again, snap) = j.kill(&id, Some(&o), "twice").expect("kill twice");
    assert_eq!(again, KillOutcome::AlreadyFinished);
    assert_eq!(snap.status_line(), "[status: killed, signal: SIGTERM]");
    assert_eq!(m.cancels(), ["not needed"]);

    let stubborn = Manual::stubborn();
    let id = start(&j, "bash", &o, &stubborn);
    let e = j.kill(&id, Some(&o), "x").expect_err("refused");
    assert_eq!(e.code(), ErrorCode::Internal);
    let snap = j.get(&id, Some(&o)).expect("get");
    assert_eq!((snap.status, snap.reported), (JobStatus::Running, false));
    stubborn.finish(JobEnd::Completed, "exit code: 0", None);
}

#[tokio::test]
async fn wait_returns_at_settlement_at_its_timeout_or_on_cancel() {
    let j = Arc::new(jobs());
    let o = owner("s1");
    let m = Manual::new();
    let id = start(&j, "bash", &o, &m);
    let cancel = CancelToken::new();
    // Timeout: the live job, its end not delivered.
    let snap = j
        .wait(&id, Duration::from_millis(30), Some(&o), &cancel)
        .await
        .expect("wait");
    assert_eq!((snap.status, snap.reported), (JobStatus::Running, false));
    // Settlement while waiting: delivered, so no notice.
    let heard: Arc<Mutex<Vec<JobSnapshot>>> = Arc::default();
    let h = heard.clone();
    j.on_done(Arc::new(move |s, _| {
        h.lock().expect("lock").push(s.clone())
    }));
    let waiter = {
        let (j, o, id, cancel) = (j.clone(), o.clone(), id.clone(), cancel.clone());
        tokio::spawn(async move {
            j.wait(&id, Duration::from_secs(10), Some(&o), &cancel)
                .await
        })
    };
    settle().await;
    m.finish(JobEnd::Completed, "exit code: 0", None);
    let snap = waiter.await.expect("join").expect("wait");
    assert_eq!(snap.status, JobStatus::Completed);
    assert!(snap.reported);
    let heard = heard.lock().expect("lock").clone();
    assert_eq!(heard.len(), 1);
    assert!(
        heard[0].reported,
        "a waited-for end must not be noticed again"
    );
    // A wait on a finished job returns at once.
    let snap = j
        .wait(&id, Duration::from_millis(1), Some(&o), &cancel)
        .await
        .expect("finished");
    assert_eq!(snap.status, JobStatus::Completed);
    // Cancel: only the wait ends.
    let other = Manual::new();
    let id = start(&j, "bash", &o, &other);
    let c = CancelToken::new();
    let waiter = {
        let (j, o, id, c) = (j.clone(), o.clone(), id.clone(), c.clone());
        tokio::spawn(async move { j.wait(&id, Duration::from_secs(10), Some(&o), &c).await })
    };
    settle().await;
    c.cancel(CancelReason::ClientCancelled);
    let e = waiter.await.expect("join").expect_err("aborted");
    assert_eq!(e.code(), ErrorCode::Aborted);
    assert_eq!(
        j.get(&id, Some(&o)).expect("get").status,
        JobStatus::Running
    );
    // A later settlement nobody waited for is not delivered: a notice goes out.
    other.finish(JobEnd::Completed, "exit code: 0", None);
    settle().await;
    assert!(!j.get(&id, Some(&o)).expect("get").reported);
    let e = j
        .wait(&id, Duration::ZERO, Some(&o), &CancelToken::new())
        .await
        .expect_err("zero");
    assert_eq!(e.code(), ErrorCode::InvalidArgument);
}

#[tokio::test]
async fn listeners_hear_each_end_once_with_its_owner() {
    let j = jobs();
    let o = owner("s1");
    /// What a listener heard: the id, whether delivered, the owner's session.
    type Heard = Vec<(String, bool, Option<String>)>;
    let heard: Arc<Mutex<Heard>> = Arc::default();
    let h = heard.clone();
    j.on_done(Arc::new(move |s, owner| {
        h.lock().expect("lock").push((
            s.id.as_str().to_owned(),
            s.reported,
            owner.map(|o| o.session().as_str().to_owned()),
        ));
    }));
    j.on_done(Arc::new(|_, _| panic!("a broken listener")));
    let (a, b) = (Manual::new(), Manual::new());
    let ida = start(&j, "bash", &o, &a);
    let idb = start(&j, "bash", &o, &b);
    a.finish(JobEnd::Completed, "exit code: 0", None);
    a.finish(JobEnd::Failed, "again", None);
    j.kill(&idb, Some(&o), "stop").expect("kill");
    settle().await;
    let heard = heard.lock().expect("lock").clone();
    assert_eq!(
        heard,
        [
            (ida, false, Some("s1".to_owned())),
            (idb, true, Some("s1".to_owned()))
        ]
    );
}

#[tokio::test]
async fn ending_an_owner_cancels_and_awaits_its_jobs_and_forgets_them() {
    let j = jobs();
    let (o, other) = (owner("s1"), owner("s2"));
    let (a, stubborn, theirs) = (Manual::new(), Manual::stubborn(), Manual::new());
    start(&j, "bash", &o, &a);
    start(&j, "bash", &o, &stubborn);
    start(&j, "bash", &other, &theirs);
    let heard: Arc<Mutex<Vec<JobSnapshot>>> = Arc::default();
    let h = heard.clone();
    j.on_done(Arc::new(move |s, _| {
        h.lock().expect("lock").push(s.clone())
    }));
    j.end_owner(&o).await;
    assert_eq!(a.cancels(), ["owner disposed"]);
    assert!(j.list(Some(&o)).is_empty());
    let heard = heard.lock().expect("lock").clone();
    assert_eq!(heard.len(), 2);
    assert!(heard.iter().all(|s| s.reported));
    let forced = heard
        .iter()
        .find(|s| s.id.as_str() == "bash-2")
        .expect("forced");
    assert_eq!(forced.status, JobStatus::Failed);
    assert!(
        forced
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("may be orphaned"),
        "{forced:?}"
    );
    // The owner starts nothing more; the other owner is untouched.
    let e = j
        .start(
            JobStart::new("bash", "x", Some(o.clone())),
            || unreachable!(),
        )
        .expect_err("ended owner");
    assert_eq!(e.code(), ErrorCode::OwnerNotLive);
    assert_eq!(j.list(Some(&other)).len(), 1);
    assert!(theirs.cancels().is_empty());
}

#[tokio::test]
async fn disposal_cancels_everything_tells_no_listener_and_refuses_new_jobs() {
    let j = jobs();
    let o = owner("s1");
    let a = Manual::new();
    start(&j, "bash", &o, &a);
    let heard: Arc<Mutex<usize>> = Arc::default();
    let h = heard.clone();
    j.on_done(Arc::new(move |_, _| *h.lock().expect("lock") += 1));
    j.dispose().await;
    assert_eq!(a.cancels(), ["jobs service disposed"]);
    assert_eq!(*heard.lock().expect("lock"), 0);
    assert!(j.list(Some(&o)).is_empty());
    let e = j
        .start(
            JobStart::new("bash", "x", Some(o.clone())),
            || unreachable!(),
        )
        .expect_err("disposed");
    assert_eq!(e.code(), ErrorCode::JobsUnavailable);
}

#[tokio::test]
async fn an_owners_list_keeps_its_last_hundred_settled_jobs() {
    let j = jobs();
    let o = owner("s1");
    for _ in 0..105 {
        let m = Manual::new();
        start(&j, "bash", &o, &m);
        m.finish(JobEnd::Completed, "exit code: 0", None);
        settle().await;
    }
    let running = Manual::new();
    start(&j, "bash", &o, &running);
    let ids: Vec<String> = j
        .list(Some(&o))
        .iter()
        .map(|s| s.id.as_str().to_owned())
        .collect();
    assert_eq!(ids.len(), dsh_jobs::MAX_FINISHED_PER_OWNER + 1);
    assert_eq!(ids.first().map(String::as_str), Some("bash-6"));
    assert_eq!(ids.last().map(String::as_str), Some("bash-106"));
    assert_eq!(
        j.get("bash-1", Some(&o)).expect_err("forgotten").code(),
        ErrorCode::NoJob
    );
}

/// A producer whose `done` panics.
struct Panics;

#[async_trait]
impl Job for Panics {
    fn cancel(&self, _reason: &str) -> Result<(), HarnessError> {
        Ok(())
    }

    async fn done(&self) -> JobOutcome {
        tokio::task::yield_now().await;
        panic!("a producer bug");
    }
}

#[tokio::test]
async fn a_producer_that_panics_fails_its_job_and_teardown_still_ends() {
    let j = jobs();
    let o = owner("s1");
    let id = j
        .start(JobStart::new("bash", "x", Some(o.clone())), || {
            Ok(Arc::new(Panics) as Arc<dyn Job>)
        })
        .expect("start");
    let snap = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let snap = j.get(id.as_str(), Some(&o)).expect("get");
            if snap.status != JobStatus::Running {
                return snap;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the job settled");
    assert_eq!(snap.status, JobStatus::Failed);
    assert!(
        snap.status_line()
            .contains("the job panicked: a producer bug"),
        "{}",
        snap.status_line()
    );
    tokio::time::timeout(Duration::from_secs(5), j.end_owner(&o))
        .await
        .expect("teardown ended");
}

#[tokio::test]
async fn an_end_is_delivered_by_a_notice_once_and_never_after_a_read() {
    let j = jobs();
    let (o, other) = (owner("s1"), owner("s2"));
    let m = Manual::new();
    let id = start(&j, "bash", &o, &m);
    assert!(!j.deliver_end(&id, Some(&o)), "still running");
    m.finish(JobEnd::Completed, "exit code: 0", Some("out"));
    settle().await;
    assert!(!j.deliver_end(&id, Some(&other)), "another owner's");
    assert!(j.deliver_end(&id, Some(&o)));
    assert!(!j.deliver_end(&id, Some(&o)), "delivered twice");
    assert!(j.get(&id, Some(&o)).expect("get").reported);
    // The output is still there to read.
    assert_eq!(j.read(&id, Some(&o)).expect("read").0, "out");
    let read_first = Manual::new();
    let id = start(&j, "bash", &o, &read_first);
    read_first.finish(JobEnd::Completed, "exit code: 0", None);
    settle().await;
    j.read(&id, Some(&o)).expect("read");
    assert!(!j.deliver_end(&id, Some(&o)), "a read delivered it");
    assert!(!j.deliver_end("bash-99", Some(&o)));
}
