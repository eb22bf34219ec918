//! A send that runs on after its call returned: [`BackgroundSend`] runs it to its end,
//! and its [`SendReader`] reads what it has shown so far.
//!
//! A read takes the complete lines the send has collected, consuming them: the send's
//! final viewport then holds only the rest, so the reads and the final viewport together
//! are what a foreground send would have shown, each line once. The line still being
//! written is left for later (a carriage return may yet rewrite it), and while a
//! full-screen program holds the alternate screen nothing is taken (the final viewport
//! is that screen).

use std::future::Future;
use std::pin::Pin;
use std::sync::Weak;
use std::task::{Context, Poll};

use dsh_core::HarnessError;

use crate::SendResult;

/// A send started by [`Terminals::start_send`](crate::Terminals::start_send): await it to
/// run it to its end; [`reader`](Self::reader) reads its output meanwhile.
pub struct BackgroundSend {
    future: Pin<Box<dyn Future<Output = Result<SendResult, HarnessError>> + Send + 'static>>,
    reader: SendReader,
}

impl BackgroundSend {
    pub(crate) fn new(
        future: impl Future<Output = Result<SendResult, HarnessError>> + Send + 'static,
        reader: SendReader,
    ) -> BackgroundSend {
        BackgroundSend {
            future: Box::pin(future),
            reader,
        }
    }

    /// A reader of this send's output so far. It does not keep the terminal alive, and
    /// once the send has settled it reads nothing (the rest is in the [`SendResult`]).
    pub fn reader(&self) -> SendReader {
        self.reader.clone()
    }
}

impl Future for BackgroundSend {
    type Output = Result<SendResult, HarnessError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.future.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for BackgroundSend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundSend")
            .field("reader", &self.reader)
            .finish_non_exhaustive()
    }
}

/// Reads one background send's output as it comes.
///
/// A take consumes the complete lines collected so far: the send's final viewport then
/// holds only the rest, so the takes and the final viewport together are what a
/// foreground send would have shown, each line once. The line still being written waits
/// for its end (a carriage return may yet rewrite it), and while a full-screen program
/// holds the alternate screen nothing is taken (the final viewport is that screen).
#[derive(Clone, Debug)]
pub struct SendReader {
    /// Where the send's output is collected (its terminal), not kept alive by a reader.
    pub(crate) output: Weak<dyn SendOutput>,
    /// The send's number in its terminal (never 0).
    pub(crate) send: u64,
}

/// Where background sends' output is collected: a terminal.
pub(crate) trait SendOutput: Send + Sync {
    /// Takes background send `send`'s complete lines, at most `max` bytes of them (see
    /// [`SendReader::take`]).
    fn take_send_output(&self, send: u64, max: usize) -> SendDelta;
}

impl SendReader {
    /// The complete lines the send has shown since the previous take, at most `max` bytes
    /// of them (the rest stays for the next take; a single line longer than `max` is
    /// split), and whether output was dropped meanwhile (more than `max_read_bytes` came
    /// between two takes). Never blocks; empty once the send has ended (settled, failed
    /// or dropped) or its terminal is gone.
    pub fn take(&self, max: usize) -> SendDelta {
        self.output
            .upgrade()
            .map(|s| s.take_send_output(self.send, max))
            .unwrap_or_default()
    }
}

/// What one [`SendReader::take`] got.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SendDelta {
    /// Complete lines, each ending in `\n`; empty when none came.
    pub text: String,
    /// Output that came since the previous take was dropped (its head), to stay within
    /// the send's bound.
    pub dropped: bool,
}
