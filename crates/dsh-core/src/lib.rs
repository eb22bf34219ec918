//! The vocabulary every dsh seam shares.
//!
//! Nothing here runs a process or touches a sandbox; the seam crates (`dsh-process`,
//! `dsh-shell`, …) build on these pieces:
//!
//! - [`HarnessError`] and [`ErrorCode`]: the one error type, with stable codes.
//! - [`id_type!`]: branded id newtypes ([`SessionId`], [`CallId`], …).
//! - [`deadline`]: [`CancelToken`] and [`Deadline`], a timeout and a cancel fused so that
//!   the first cause wins and is recorded once.
//! - [`retention`]: what to keep of a long stream (head, tail, head+tail) with exact counts
//!   of what was omitted, never cutting a UTF-8 character.
//! - [`ring`]: the fixed-capacity byte ring behind bounded output capture.
//! - [`spill`]: private spill directories and exclusive 0600 spill files.
//! - [`utf8`]: UTF-8-safe cut points.
//! - [`visible`]: model text made safe to show on a terminal (controls and invisible
//!   characters shown as escapes).
//! - [`journal`]: the session events and the [`journal::Journal`] seams write them to.
//! - [`path`]: the one lexical folding of `.` and `..`, and how a workspace root is made.
//!
//! ```
//! use dsh_core::{ErrorCode, HarnessError};
//! let e = HarnessError::invalid_argument("grace_ms must be a positive finite number");
//! assert_eq!(e.code(), ErrorCode::InvalidArgument);
//! assert_eq!(e.code().as_str(), "INVALID_ARGUMENT");
//! ```
//!
//! # Guarantees
//! - [`ErrorCode::as_str`] never changes for an existing variant.
//! - A [`Deadline`] reports at most one [`Cause`].
//! - [`ring::ByteRing`] never holds more than its capacity.
//! - [`visible::visible`] returns no control and no invisible character, and never the same
//!   rendering for two different texts.
//!
//! # Limits
//! - [`spill::SpillDir`] removes its directory on drop; a process killed with SIGKILL
//!   leaves it behind in the temp directory.
//!
//! # Errors
//! `INVALID_ARGUMENT` (bad timeouts and budgets), `IO_FAILED` (spill directory or file).
#![forbid(unsafe_code)]

pub mod deadline;
mod error;
mod id;
pub mod journal;
mod owner;
pub mod path;
pub mod retention;
pub mod ring;
pub mod spill;
pub mod utf8;
pub mod visible;

pub use deadline::{clamp_timeout, CancelReason, CancelToken, Cause, Deadline, MAX_TIMER_DELAY_MS};
pub use error::{quoted, ErrorCode, HarnessError, QUOTED_MAX_CHARS};
pub use id::{CallId, SessionId};
pub use owner::Owner;
