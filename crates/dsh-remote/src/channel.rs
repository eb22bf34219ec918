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
use tokio::sync::{mpsc, oneshot};

use crate::wire::{self, disconnected, incompatible, PROTOCOL};
use crate::{ServerInfo, WorldUrl};

/// The most bytes of the transport's stderr kept, for the error that says why it ended.
const STDERR_TAIL: usize = 2048;

/// How long the reader waits, once the transport's output ended, for its exit status and
/// its last words on stderr; and, once it exited, for what it wrote before.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// How long [`Channel::connect`] waits for the far side's handshake.
pub const HANDSHAKE_WAIT: Duration = Duration::from_secs(30);

/// The exit status a shell gives a command it cannot find.
const NOT_FOUND_STATUS: i32 = 127;

/// Frames waiting for the writer.
const OUTBOX: usize = 64;

/// Requests in flight, and why the channel ended once it has.
#[derive(Default)]
struct State {
    pending: HashMap<u64, oneshot::Sender<Result<Value, HarnessError>>>,
    ended: Option<Ended>,
    /// A frame came from the far side: it was reached.
    reached: bool,
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
    /// Whole frames for the writer task: a request cancelled after queueing its frame
    /// never leaves half of it on the wire.
    outbox: mpsc::Sender<Vec<u8>>,
    next: AtomicU64,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The transport's process group (its own, led by it).
    group: Option<u32>,
    info: ServerInfo,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("group", &self.group)
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

/// Kills the process group `group` (the transport and whatever it started here).
fn kill_group(group: Option<u32>) {
    if let Some(pid) = group.and_then(|g| rustix::process::Pid::from_raw(g as i32)) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

impl Channel {
    /// Connects to the far side `url` names, where dsh is `remote_dsh` (a name on the far
    /// `PATH`, or a path), and completes the handshake within [`HANDSHAKE_WAIT`].
    ///
    /// # Errors
    /// `PROCESS_NOT_FOUND` / `PROCESS_SPAWN_FAILED` when the transport (`ssh`, `docker`,
    /// `/bin/sh`) cannot start here; `REMOTE_INCOMPATIBLE` when the far side is not a
    /// `dsh serve --stdio` of this protocol (no dsh there included); `REMOTE_DISCONNECTED`
    /// when the transport ends first or the handshake does not come in time (an
    /// unreachable host, a refused key: the message quotes what the transport said); the
    /// far side's own code when its dsh refused to serve (`PROCESS_CWD_INVALID` for a far
    /// workspace that is not there).
    ///
    /// # Cancel safety
    /// Cancel safe: dropped, the transport is killed.
    pub async fn connect(url: &WorldUrl, remote_dsh: &str) -> Result<Channel, HarnessError> {
        Channel::connect_within(url, remote_dsh, HANDSHAKE_WAIT).await
    }

    /// [`connect`](Self::connect), waiting at most `handshake` for the far side to answer.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    ///
    /// # Cancel safety
    /// As [`connect`](Self::connect).
    pub async fn connect_within(
        url: &WorldUrl,
        remote_dsh: &str,
        handshake: Duration,
    ) -> Result<Channel, HarnessError> {
        // For ssh and docker, 127 is the far shell's "not found": no dsh there. A `cmd:`
        // gives it for its own first word too, which may be a program missing here.
        let not_found = match url {
            WorldUrl::Command(_) => None,
            _ => Some(remote_dsh),
        };
        let mut channel = Channel::start(url.argv(remote_dsh))?;
        let hello = json!({"protocol": PROTOCOL, "version": crate::VERSION});
        let answer =
            match tokio::time::timeout(handshake, channel.request("initialize", hello)).await {
                Ok(Ok(a)) => a,
                Ok(Err(e)) if e.code() == ErrorCode::RemoteDisconnected => {
                    return Err(match (channel.ended(), not_found) {
                        (Some(x), Some(dsh)) if x.status == Some(NOT_FOUND_STATUS) => {
                            incompatible(format!("there is no {dsh} on the far side{}", x.detail))
                        }
                        _ => e,
                    });
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(disconnected(&format!(
                        "no answer to the handshake in {} s: the host may be unreachable, or \
                     something on the far side prints before dsh serve",
                        handshake.as_secs()
                    )))
                }
            };
        let info = ServerInfo::from_json(&answer).ok_or_else(|| {
            incompatible("an answer to initialize without the protocol and version")
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

    /// Starts the transport `argv` in a process group of its own, and the tasks that
    /// write frames to it and read answers and stderr from it.
    fn start(argv: Vec<OsString>) -> Result<Channel, HarnessError> {
        let Some(program) = argv.first() else {
            return Err(HarnessError::invalid_argument("an empty transport command"));
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
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
        let group = child.id();
        let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(HarnessError::internal(
                "the transport's pipes were not made",
            ));
        };
        let tail = Arc::new(Mutex::new(Vec::<u8>::new()));
        let stderr_task = {
            let tail = tail.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n @ 1..) = stderr.read(&mut buf).await {
                    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    t.extend_from_slice(&buf[..n]);
                    let over = t.len().saturating_sub(STDERR_TAIL);
                    t.drain(..over);
                }
            })
        };
        let (outbox, mut frames) = mpsc::channel::<Vec<u8>>(OUTBOX);
        let writer = tokio::spawn(async move {
            while let Some(frame) = frames.recv().await {
                if wire::write_encoded(&mut stdin, &frame).await.is_err() {
                    break;
                }
            }
            // `stdin` drops: the far side sees its input end.
        });
        let state = Arc::new(Mutex::new(State::default()));
        let reader = {
            let state = state.clone();
            tokio::spawn(async move {
                let reading = read_answers(&mut stdout, &state);
                tokio::pin!(reading);
                // The transport's exit ends the channel too, even if something it started
                // still holds its output; what it wrote before is read first.
                let (broke, status) = tokio::select! {
                    broke = &mut reading => (broke, None),
                    exited = child.wait() => {
                        let broke = tokio::time::timeout(EXIT_WAIT, &mut reading)
                            .await
                            .unwrap_or(None);
                        (broke, exited.ok().and_then(|s| s.code()))
                    }
                };
                let status = match status {
                    Some(s) => Some(s),
                    None => match tokio::time::timeout(EXIT_WAIT, child.wait()).await {
                        Ok(Ok(s)) => s.code(),
                        _ => None,
                    },
                };
                // What it left running here goes with it.
                kill_group(group);
                let _ = tokio::time::timeout(EXIT_WAIT, stderr_task).await;
                let said = {
                    let t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    String::from_utf8_lossy(&t)
                        .lines()
                        .map(wire::peer_text)
                        .filter(|l| !l.trim().is_empty())
                        .collect::<Vec<_>>()
                        .join(" / ")
                };
                let reached = state.lock().unwrap_or_else(|p| p.into_inner()).reached;
                end(&state, ended(broke, status, &said, reached));
                // `child` drops here: killed if it still runs.
            })
        };
        Ok(Channel {
            state,
            outbox,
            next: AtomicU64::new(1),
            tasks: vec![reader, writer],
            group,
            info: ServerInfo::default(),
        })
    }

    /// What the far side said of itself in the handshake.
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    /// The transport process's id (it leads its own process group).
    pub fn transport_pid(&self) -> Option<u32> {
        self.group
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
    /// Cancel safe for the channel: a frame goes on the wire whole or not at all, and an
    /// answer that comes after the future was dropped is discarded. What the request
    /// started on the far side is not stopped.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, HarnessError> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let frame = wire::encode(&json!({"id": id, "method": method, "params": params}))?;
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(ended) = &state.ended {
                return Err(ended_error(ended));
            }
            state.pending.insert(id, tx);
        }
        // Forgets the entry if this future is dropped.
        let _forget = Forget {
            state: &self.state,
            id,
        };
        if self.outbox.send(frame).await.is_err() {
            // The writer is gone: the reader's account says why, once it has one.
            return match tokio::time::timeout(EXIT_WAIT * 2, rx).await {
                Ok(Ok(answer)) => answer,
                _ => Err(self.ended().map_or_else(
                    || disconnected("the transport stopped reading"),
                    |e| ended_error(&e),
                )),
            };
        }
        match rx.await {
            Ok(answer) => answer,
            Err(_) => Err(self
                .ended()
                .map_or_else(|| disconnected("the channel closed"), |e| ended_error(&e))),
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        // The reader owns the transport (killed as it drops); what it started here goes
        // with its group.
        kill_group(self.group);
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

/// How the channel ended, from how its reading stopped (`broke`: the error it broke with,
/// `None` at a clean end), the transport's exit `status`, what it `said` on stderr, and
/// whether the far side was `reached` (it sent a frame).
fn ended(broke: Option<HarnessError>, status: Option<i32>, said: &str, reached: bool) -> Ended {
    let mut detail = String::new();
    if let Some(s) = status {
        detail.push_str(&format!("; the transport exited with status {s}"));
    }
    if !said.is_empty() {
        detail.push_str(&format!("; it said: {said}"));
    }
    // The far dsh refused to serve, and said why with a code (`dsh serve: CODE: …`).
    let refused = said.split(" / ").find_map(|line| {
        let rest = line.strip_prefix("dsh serve: ")?;
        let (code, why) = rest.split_once(": ")?;
        Some((ErrorCode::from_code(code)?, why.to_owned()))
    });
    let error = match (broke, refused) {
        (Some(e), _) if e.code() == ErrorCode::RemoteIncompatible => {
            HarnessError::new(e.code(), format!("{}{detail}", e.message()))
        }
        (_, Some((code, why))) => {
            HarnessError::new(code, format!("the far side's dsh refused to serve: {why}"))
        }
        (Some(e), None) => disconnected(&format!("{}{detail}", e.message())),
        (None, None) if reached => {
            disconnected(&format!("the far side closed the connection{detail}"))
        }
        (None, None) => disconnected(&format!(
            "the transport ended before the far side answered{detail}"
        )),
    };
    Ended {
        code: error.code(),
        message: error.message().to_owned(),
        detail,
        status,
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
async fn read_answers(
    stdout: &mut tokio::process::ChildStdout,
    state: &Mutex<State>,
) -> Option<HarnessError> {
    loop {
        let mut message = match wire::read_frame(stdout).await {
            Ok(Some(m)) => m,
            Ok(None) => return None,
            Err(e) => return Some(e),
        };
        state.lock().unwrap_or_else(|p| p.into_inner()).reached = true;
        let Some(id) = message["id"].as_u64() else {
            // A notification: none is defined yet in protocol 1.
            continue;
        };
        let answer = if let Some(result) = message.get_mut("result") {
            Ok(result.take())
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
