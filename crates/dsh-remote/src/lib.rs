//! Remote worlds: dsh's tools on another machine or in a container, through any command
//! whose stdin and stdout reach a `dsh serve --stdio` there.
//!
//! A user who outgrows one laptop points dsh at a build host (`ssh://`), a container
//! (`docker://`) or anything a command reaches (`cmd:`, e.g. `kubectl exec -i`); the far
//! side runs the same dsh, so the sandbox, the whole-tree kill, the bounded capture and the
//! check after each call happen there, by the code that does them here.
//!
//! This is the channel: [`WorldUrl`] names the far side and the transport command that
//! reaches it; [`Channel`] starts that command and speaks the versioned [`wire`] protocol
//! with the far side's [`serve()`] loop, after a handshake that refuses a far side of another
//! protocol. The seams' providers over it come next.
//!
//! ```no_run
//! # async fn demo() -> Result<(), dsh_core::HarnessError> {
//! use dsh_remote::{Channel, WorldUrl};
//! let url: WorldUrl = "ssh://ci@build-1/srv/repo".parse()?;
//! let far = Channel::connect(&url, "dsh").await?;
//! println!("dsh {} on {}/{}", far.info().version, far.info().os, far.info().arch);
//! far.request("ping", serde_json::json!({})).await?;
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//! - Nothing runs locally in place of the far side: every failure is an error.
//! - Every request in flight when the channel ends gets `REMOTE_DISCONNECTED` (or
//!   `REMOTE_INCOMPATIBLE` when the far side broke the protocol), with what the transport
//!   said on stderr; none waits forever on a dead transport.
//! - A frame is at most [`wire::MAX_FRAME`] bytes, checked before it is allocated.
//! - The transport command is killed when its [`Channel`] drops.
//!
//! # Limits
//! - Protocol 1 has `initialize`, `ping` and what the serving binary handles (`dsh serve`:
//!   `doctor`): no seam runs over it yet.
//! - The far side must already have dsh (`--remote-dsh` names it); copying it there is
//!   not built yet.
//!
//! # Errors
//! `INVALID_ARGUMENT` (a world URL that names no world), `PROCESS_NOT_FOUND` (no `ssh`,
//! `docker` here), `REMOTE_INCOMPATIBLE`, `REMOTE_DISCONNECTED`.

mod channel;
pub mod serve;
mod url;
pub mod wire;

use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

use serde_json::{json, Value};
use sha2::Digest;

pub use channel::{Channel, HANDSHAKE_WAIT};
pub use serve::{serve, Handler, NoRequests};
pub use url::WorldUrl;

/// This dsh's version, as the handshake states it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What a far side says of itself in the handshake.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerInfo {
    /// The protocol it speaks ([`wire::PROTOCOL`]).
    pub protocol: u64,
    /// Its dsh version.
    pub version: String,
    /// The SHA-256 of its dsh binary, in hex (empty when it could not be read).
    pub binary_sha256: String,
    /// Its operating system (`linux`, `macos`).
    pub os: String,
    /// Its architecture (`x86_64`, `aarch64`).
    pub arch: String,
}

impl ServerInfo {
    /// This process: the protocol, version, binary, OS and architecture it runs.
    pub fn of_this_process() -> ServerInfo {
        static HASH: OnceLock<String> = OnceLock::new();
        let hash = HASH.get_or_init(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| binary_sha256(&p).ok())
                .unwrap_or_default()
        });
        ServerInfo {
            protocol: wire::PROTOCOL,
            version: VERSION.to_owned(),
            binary_sha256: hash.clone(),
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
        }
    }

    /// As the handshake's answer carries it.
    pub fn to_json(&self) -> Value {
        json!({
            "protocol": self.protocol,
            "version": self.version,
            "binarySha256": self.binary_sha256,
            "os": self.os,
            "arch": self.arch,
        })
    }

    /// From the handshake's answer, each text cut and cleaned (it comes from the far
    /// side); `None` without its protocol and version.
    pub fn from_json(v: &Value) -> Option<ServerInfo> {
        let text = |k: &str| wire::peer_text(v[k].as_str().unwrap_or_default());
        Some(ServerInfo {
            protocol: v["protocol"].as_u64()?,
            version: wire::peer_text(v["version"].as_str()?),
            binary_sha256: text("binarySha256"),
            os: text("os"),
            arch: text("arch"),
        })
    }
}

/// The SHA-256 of the file at `path`, in lowercase hex.
///
/// # Errors
/// The file's read error.
pub fn binary_sha256(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
