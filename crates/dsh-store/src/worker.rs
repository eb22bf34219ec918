//! A dedicated thread that owns a provider's state and runs its jobs in order, so blocking
//! file and database work never runs on an async runtime worker.

use std::sync::mpsc;
use std::sync::Mutex;

use dsh_core::HarnessError;
use tokio::sync::oneshot;

type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// The thread and the way to it. See the [module docs](self).
pub(crate) struct Worker<S> {
    jobs: Mutex<Option<mpsc::Sender<Job<S>>>>,
    exited: Mutex<Option<oneshot::Receiver<()>>>,
}

impl<S: Send + 'static> Worker<S> {
    /// Starts the thread `name` owning `state`.
    pub(crate) fn start(name: &str, mut state: S) -> std::io::Result<Worker<S>> {
        let (tx, rx) = mpsc::channel::<Job<S>>();
        let (done_tx, done_rx) = oneshot::channel();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job(&mut state);
                }
                drop(state);
                let _ = done_tx.send(());
            })?;
        Ok(Worker {
            jobs: Mutex::new(Some(tx)),
            exited: Mutex::new(Some(done_rx)),
        })
    }

    /// Runs `f` on the thread, after every job queued before it.
    ///
    /// # Errors
    /// `STORAGE_CLOSED` once [`close`](Self::close) was called; `INTERNAL` when `f` panics
    /// (a bug: the thread lives on for the jobs after it, every session's log with it);
    /// else what `f` returns.
    pub(crate) async fn run<T, F>(&self, f: F) -> Result<T, HarnessError>
    where
        T: Send + 'static,
        F: FnOnce(&mut S) -> Result<T, HarnessError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: Job<S> = Box::new(move |s| {
            // AssertUnwindSafe: a job's effects on the state are one statement or one
            // transaction, which SQLite rolls back when its guard drops in the unwind.
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(s)))
                .unwrap_or_else(|p| Err(HarnessError::panicked("the storage worker", p.as_ref())));
            let _ = tx.send(out);
        });
        {
            let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let sender = jobs.as_ref().ok_or_else(crate::closed)?;
            sender.send(job).map_err(|_| crate::closed())?;
        }
        rx.await.map_err(|_| crate::closed())?
    }

    /// Queues `f` without waiting for it (dropped silently after [`close`](Self::close)).
    pub(crate) fn post<F>(&self, f: F)
    where
        F: FnOnce(&mut S) + Send + 'static,
    {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(sender) = jobs.as_ref() {
            let _ = sender.send(Box::new(f));
        }
    }

    /// Refuses new jobs, lets the queued ones finish, and waits for the thread to end.
    pub(crate) async fn close(&self) {
        drop(self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take());
        let exited = self.exited.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(exited) = exited {
            let _ = exited.await;
        }
    }
}

/// A provider state that tracks which units are open.
pub(crate) trait OpenUnits {
    /// Forgets that `name` is open.
    fn release(&mut self, name: &str);
}

/// What both providers' units share: the worker, the spec, and whether it is closed.
pub(crate) struct UnitHandle<S: OpenUnits + Send + 'static> {
    pub(crate) worker: std::sync::Arc<Worker<S>>,
    pub(crate) spec: crate::UnitSpec,
    closed: std::sync::atomic::AtomicBool,
}

impl<S: OpenUnits + Send + 'static> UnitHandle<S> {
    pub(crate) fn new(worker: std::sync::Arc<Worker<S>>, spec: crate::UnitSpec) -> Self {
        UnitHandle {
            worker,
            spec,
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// `STORAGE_CLOSED` after close; `INVALID_ARGUMENT` for an undeclared table.
    pub(crate) fn check(&self, table: Option<&str>) -> Result<(), HarnessError> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(crate::closed());
        }
        match table {
            Some(t) if !self.spec.tables.iter().any(|x| x == t) => {
                Err(crate::undeclared(&self.spec.name, t))
            }
            _ => Ok(()),
        }
    }

    /// Closes once; the name can be opened again.
    pub(crate) async fn close(&self) {
        if self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let name = self.spec.name.clone();
        let _ = self
            .worker
            .run(move |st| {
                st.release(&name);
                Ok(())
            })
            .await;
    }
}

impl<S: OpenUnits + Send + 'static> Drop for UnitHandle<S> {
    /// A unit dropped without `close` is closed: its name can be opened again.
    fn drop(&mut self) {
        if !self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            let name = self.spec.name.clone();
            self.worker.post(move |st| st.release(&name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Worker;
    use dsh_core::ErrorCode;

    #[tokio::test]
    async fn a_panicking_job_is_internal_and_the_jobs_after_it_still_run() {
        let w = Worker::start("test-worker", 0u32).expect("start");
        let e = w
            .run(|_: &mut u32| -> Result<(), _> { panic!("bad row") })
            .await
            .expect_err("panicked");
        assert_eq!(e.code(), ErrorCode::Internal);
        assert!(
            e.message()
                .starts_with("the storage worker panicked: bad row."),
            "{}",
            e.message()
        );
        let n = w
            .run(|n: &mut u32| {
                *n += 1;
                Ok(*n)
            })
            .await
            .expect("the thread lives on");
        assert_eq!(n, 1);
        w.close().await;
    }
}
