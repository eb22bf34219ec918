//! [`ShellProcess`]: a shell command running in the background.

use std::sync::{Arc, Mutex};

use dsh_core::CancelToken;
use dsh_process::{Process, ProcessControl, Signal};
use tokio::sync::watch;

use dsh_sandbox::SandboxFacts;

use crate::executor::Wrapped;
use crate::{process_read, ProcessRead, ProcessStatus};

/// A background shell command. Dropping it kills the whole process tree.
pub struct ShellProcess {
    inner: Arc<Background>,
    process: Process,
    /// Dropped after `process`: the sandbox wrap holds placeholders until the tree is gone.
    wrapped: Option<Wrapped>,
}

struct Background {
    state: Mutex<BackgroundState>,
    stamped: watch::Receiver<bool>,
}

struct BackgroundState {
    status: ProcessStatus,
    exit_code: Option<i32>,
    signal: Option<Signal>,
    stdout_offset: u64,
    stderr_offset: u64,
}

impl ShellProcess {
    pub(crate) fn new(
        process: Process,
        cancel: Option<CancelToken>,
        wrapped: Option<Wrapped>,
    ) -> ShellProcess {
        let (stamp_tx, stamp_rx) = watch::channel(false);
        let inner = Arc::new(Background {
            state: Mutex::new(BackgroundState {
                status: ProcessStatus::Running,
                exit_code: None,
                signal: None,
                stdout_offset: 0,
                stderr_offset: 0,
            }),
            stamped: stamp_rx,
        });
        let control: Arc<dyn ProcessControl> = process.control();
        let watcher = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let outcome = control.done().await;
            if let Some(bg) = watcher.upgrade() {
                let mut st = bg.lock();
                if st.status == ProcessStatus::Running {
                    let cancelled = cancel.as_ref().is_some_and(CancelToken::is_cancelled);
                    // A lost status (the command killed its own reaper) is no completion.
                    st.status = if cancelled || outcome.exit_code().is_none() {
                        ProcessStatus::Killed
                    } else {
                        ProcessStatus::Completed
                    };
                }
                st.exit_code = outcome.exit_code();
                st.signal = outcome.signal();
            }
            let _ = stamp_tx.send(true);
        });
        ShellProcess {
            inner,
            process,
            wrapped,
        }
    }

    /// How the sandbox treated the command, once it settled: `None` while it runs or
    /// when it was not confined. `runner_failed` means the runner failed before the
    /// command ran (then `denied` is false); `denied`, that a write was refused.
    pub fn sandbox_facts(&self) -> Option<SandboxFacts> {
        let w = self.wrapped.as_ref()?;
        let st = self.inner.lock();
        if st.status == ProcessStatus::Running || !*self.inner.stamped.borrow() {
            return None;
        }
        let exit = st.exit_code;
        drop(st);
        let stderr = self
            .process
            .stderr_capture()
            .map(|c| c.read_from(0).text)
            .unwrap_or_default();
        Some(match w.facts(exit, &stderr) {
            Ok(facts) => facts,
            Err(_line) => SandboxFacts {
                mode: w.mode,
                denied: false,
                enforcement: Some(w.confinement.enforcement.clone()),
                runner: Some(w.confinement.runner),
                runner_failed: true,
            },
        })
    }

    /// The leader's pid.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The current status; it leaves `Running` once.
    pub fn status(&self) -> ProcessStatus {
        self.inner.lock().status
    }

    /// The exit code, once the process exited by itself.
    pub fn exit_code(&self) -> Option<i32> {
        self.inner.lock().exit_code
    }

    /// The signal that killed the process, once settled.
    pub fn signal(&self) -> Option<Signal> {
        self.inner.lock().signal
    }

    /// Completes once the process settled and its status, exit code and signal are
    /// stamped. Never fails.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn done(&self) {
        let mut rx = self.inner.stamped.clone();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Output since the previous call (consuming: a byte is delivered once), formatted as
    /// stdout then a `[stderr]` section.
    pub fn read_output(&self) -> ProcessRead {
        let mut st = self.inner.lock();
        let empty = |offset| dsh_process::OutputRead {
            text: String::new(),
            next_offset: offset,
            lossy: false,
            spill: None,
        };
        let out = self.process.stdout_capture().map_or_else(
            || empty(st.stdout_offset),
            |c| c.read_from(st.stdout_offset),
        );
        let err = self.process.stderr_capture().map_or_else(
            || empty(st.stderr_offset),
            |c| c.read_from(st.stderr_offset),
        );
        st.stdout_offset = out.next_offset;
        st.stderr_offset = err.next_offset;
        process_read(&out, &err)
    }

    /// Once the leader has ended (after [`done`](Self::done)), ends what is left of its
    /// tree (a `setsid` daemon, a child still running: SIGTERM, then SIGKILL after the
    /// grace) and returns when every process of it is gone. The status stays as it was.
    ///
    /// # Cancel safety
    /// Dropping the future stops only the waiting: the tree got SIGTERM at the first poll,
    /// and SIGKILL still follows after the grace.
    pub async fn end_tree(&self) {
        self.process.terminate();
        self.process.wait_for_exit().await;
    }

    /// Terminates the process: the status becomes `Killed` at once, then the tree gets
    /// SIGTERM and SIGKILL after the grace. Returns false (and does nothing) when it is no
    /// longer running. Does not wait (see [`done`](Self::done)).
    pub fn terminate(&self) -> bool {
        let mut st = self.inner.lock();
        if st.status != ProcessStatus::Running {
            return false;
        }
        st.status = ProcessStatus::Killed;
        drop(st);
        self.process.terminate();
        true
    }
}

impl Background {
    fn lock(&self) -> std::sync::MutexGuard<'_, BackgroundState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for ShellProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShellProcess")
            .field("pid", &self.pid())
            .field("status", &self.status())
            .finish()
    }
}
