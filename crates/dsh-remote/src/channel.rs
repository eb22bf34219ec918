//! [`Channel`]: the near side of a remote world, a transport command whose stdin and
//! stdout carry the [`wire`](crate::wire) protocol to a far side's `dsh serve --stdio`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_core::{ErrorCode, HarnessError};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::oneshot;

use crate::wire::{self, disconnected, incompatible, PROTOCOL};
use crate::{ServerInfo, WorldUrl};

/// The most bytes of the transport's stderr kept, for the error that says why it ended.
const STDERR_TAIL: usize = 2048;

/// How long the reader waits for the transport's exit status once its output ended.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// The exit status a shell gives a command it cannot find.
const NOT_FOUND_STATUS: i32 = 127;

/// Requests in flight, and why the channel ended once it has.
#[derive(Default)]
struct State {
    pending: HashMap<u64, oneshot::Sender<Result<Value, HarnessError>>>,
    ended: Option<Ended>,
}

/// Why a channel ended: the error every request gets from then on.
#[derive(Clone)]
struct Ended {
    code: ErrorCode,
    message: String,
    /// What the transport said and its status, as `; …` clauses.
    detail: String,
    /// The transport's exit code, when it exited with one.
    status: Option<i32>,
}

/// A connection to one far side. Requests may be made from several tasks at once; each
/// is answered by its id. See the [crate docs](crate).
pub struct Channel {
    state: Arc<Mutex<State>>,
    writer: tokio::sync::Mutex<tokio::process::ChildStdin>,
    next: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
    pid: Option<u32>,
    info: ServerInfo,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("pid", &self.pid)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Channel {
    /// Connects to the far side `url` names, where dsh is `remote_dsh` (a name on the far
    /// `PATH`, or a path), and completes the handshake.
    ///
    /// # Errors
    /// `PROCESS_NOT_FOUND` / `PROCESS_SPAWN_FAILED` when the transport (`ssh`, `docker`,
    /// `/bin/sh`) cannot start here; `REMOTE_INCOMPATIBLE` when the far side is not a
    /// `dsh serve --stdio` of this protocol (no dsh there included); `REMOTE_DISCONNECTED`
    /// when the transport ends first (an unreachable host, a refused key: the message
    /// quotes what the transport said).
    ///
    /// # Cancel safety
    /// Cancel safe: dropped, the transport is killed.
    pub async fn connect(url: &WorldUrl, remote_dsh: &str) -> Result<Channel, HarnessError> {
        Channel::over(url.argv(remote_dsh), remote_dsh).await
    }

    /// Connects over the transport command `argv` (see [`connect`](Self::connect)).
    ///
    /// # Errors
    /// As [`connect`](Self::connect); `INVALID_ARGUMENT` for an empty `argv`.
    ///
    /// # Cancel safety
    /// As [`connect`](Self::connect).
    pub async fn over(argv: Vec<OsString>, remote_dsh: &str) -> Result<Channel, HarnessError> {
        let Some(program) = argv.first() else {
            return Err(HarnessError::invalid_argument("an empty transport command"));
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                ErrorCode::ProcessNotFound
            } else {
                ErrorCode::ProcessSpawnFailed
            };
            HarnessError::new(
                code,
                format!(
                    "the transport {} could not start here; install it or fix the world URL",
                    program.to_string_lossy()
                ),
            )
            .with_source(e)
        })?;
        let pid = child.id();
        let (Some(stdin), Some(mut stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(HarnessError::internal(
                "the transport's pipes were not made",
            ));
        };
        let tail = Arc::new(Mutex::new(Vec::<u8>::new()));
        let tail_writer = tail.clone();
        let stderr_done = tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            while let Ok(n @ 1..) = stderr.read(&mut buf).await {
                let mut t = tail_writer.lock().unwrap_or_else(|p| p.into_inner());
                t.extend_from_slice(&buf[..n]);
                let over = t.len().saturating_sub(STDERR_TAIL);
                t.drain(..over);
            }
        });
        let state = Arc::new(Mutex::new(State::default()));
        let reader = {
            let state = state.clone();
            tokio::spawn(async move {
                let broke = read_responses(&mut stdout, &state).await;
                // The transport's own words and status say why it ended.
                let status = match tokio::time::timeout(EXIT_WAIT, child.wait()).await {
                    Ok(Ok(s)) => s.code(),
                    _ => None,
                };
                // What it printed last, once its stderr ends (a child of it may hold it).
                let _ = tokio::time::timeout(EXIT_WAIT, stderr_done).await;
                let said = {
                    let t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    String::from_utf8_lossy(&t)
                        .chars()
                        .filter(|c| !c.is_control() || *c == '\n')
                        .collect::<String>()
                        .trim()
                        .replace('\n', " / ")
                };
                let mut how = String::new();
                if let Some(s) = status {
                    how.push_str(&format!("; the transport exited with status {s}"));
                }
                if !said.is_empty() {
                    how.push_str(&format!("; it said: {said}"));
                }
                let error = match broke {
                    Some(e) if e.code() == ErrorCode::RemoteIncompatible => {
                        HarnessError::new(e.code(), format!("{}{how}", e.message()))
                    }
                    Some(e) => disconnected(&format!("{}{how}", e.message())),
                    None => disconnected(&format!("the far side closed the connection{how}")),
                };
                end(
                    &state,
                    Ended {
                        code: error.code(),
                        message: error.message().to_owned(),
                        detail: how,
                        status,
                    },
                );
                // `child` drops here: killed if it still runs.
            })
        };
        let mut channel = Channel {
            state,
            writer: tokio::sync::Mutex::new(stdin),
            next: AtomicU64::new(1),
            reader,
            pid,
            info: ServerInfo::default(),
        };
        let hello = json!({"protocol": PROTOCOL, "version": crate::VERSION});
        let answer = match channel.request("initialize", hello).await {
            Ok(a) => a,
            Err(e) if e.code() == ErrorCode::RemoteDisconnected => {
                let ended = channel.ended();
                return Err(match ended {
                    Some(x) if x.status == Some(NOT_FOUND_STATUS) => incompatible(format!(
                        "there is no {remote_dsh} on the far side{}",
                        x.detail
                    )),
                    _ => e,
                });
            }
            Err(e) => return Err(e),
        };
        let info = ServerInfo::from_json(&answer).ok_or_else(|| {
            incompatible(format!("an initialize answer without its facts: {answer}"))
        })?;
        if info.protocol != PROTOCOL {
            return Err(incompatible(format!(
                "it speaks protocol {} (dsh {})",
                info.protocol, info.version
            )));
        }
        channel.info = info;
        Ok(channel)
    }

    /// What the far side said of itself in the handshake.
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    /// The transport process's id, while it runs.
    pub fn transport_pid(&self) -> Option<u32> {
        self.pid
    }

    /// Why the channel ended, once it has.
    fn ended(&self) -> Option<Ended> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ended
            .clone()
    }

    /// Sends request `method` with `params` and waits for its answer.
    ///
    /// # Errors
    /// The far side's error for the request, with its code; `REMOTE_DISCONNECTED` when the
    /// channel ended (before or while waiting); `REMOTE_INCOMPATIBLE` when it ended because
    /// the far side broke the protocol; `INVALID_ARGUMENT` for params over a frame.
    ///
    /// # Cancel safety
    /// Cancel safe for the channel: dropped, the answer is discarded when it comes. What
    /// the request started on the far side is not stopped.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, HarnessError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(ended) = &state.ended {
                return Err(ended_error(ended));
            }
            state.pending.insert(id, tx);
        }
        // Forgets the entry if this future is dropped or the write fails.
        let forget = Forget {
            state: &self.state,
            id,
        };
        let message = json!({"id": id, "method": method, "params": params});
        let written = wire::write_frame(&mut *self.writer.lock().await, &message).await;
        let answer = match written {
            Ok(()) => rx.await,
            // A transport that went away: the reader's account says why (its status, what
            // it printed), once it has one.
            Err(e) if e.code() == ErrorCode::RemoteDisconnected => {
                match tokio::time::timeout(EXIT_WAIT + Duration::from_secs(1), rx).await {
                    Ok(answer) => answer,
                    Err(_) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        drop(forget);
        match answer {
            Ok(r) => r,
            Err(_) => Err(self
                .ended()
                .map_or_else(|| disconnected("the channel closed"), |e| ended_error(&e))),
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // The reader owns the transport: stopping it drops (kills) the transport.
        self.reader.abort();
    }
}

/// Forgets a pending request when dropped.
struct Forget<'a> {
    state: &'a Mutex<State>,
    id: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pending
            .remove(&self.id);
    }
}

/// The error every request gets once the channel ended as `ended` says.
fn ended_error(ended: &Ended) -> HarnessError {
    HarnessError::new(ended.code, ended.message.clone())
}

/// Marks the channel ended and fails every request in flight.
fn end(state: &Mutex<State>, ended: Ended) {
    let pending = {
        let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
        s.ended.get_or_insert(ended.clone());
        std::mem::take(&mut s.pending)
    };
    for (_, tx) in pending {
        let _ = tx.send(Err(ended_error(&ended)));
    }
}

/// Reads answers from the far side until the stream ends (`None`) or breaks, and hands
/// each to its request; the error it broke with.
async fn read_responses(
    stdout: &mut tokio::process::ChildStdout,
    state: &Mutex<State>,
) -> Option<HarnessError> {
    loop {
        let message = match wire::read_frame(stdout).await {
            Ok(Some(m)) => m,
            Ok(None) => return None,
            Err(e) => return Some(e),
        };
        let Some(id) = message["id"].as_u64() else {
            // A notification: none is defined yet in protocol 1.
            continue;
        };
        let answer = if let Some(result) = message.get("result") {
            Ok(result.clone())
        } else if let Some(error) = message.get("error") {
            Err(wire::error_of(error))
        } else {
            return Some(incompatible(
                "it sent a request where an answer was due (is the transport echoing?)",
            ));
        };
        let tx = state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pending
            .remove(&id);
        if let Some(tx) = tx {
            let _ = tx.send(answer);
        }
    }
}
