//! Cancellation and deadlines: one timeout and one upstream cancel fused, first cause wins.
//!
//! A [`CancelToken`] is the caller's "stop" button; it carries a reason. A [`Deadline`]
//! fuses an optional timeout with an optional upstream token into one token that fires on
//! whichever comes first, and remembers which one that was ([`Cause`]). The cause is
//! recorded once: a deadline is never both timed out and cancelled.
//!
//! The library decides *why* a run stopped; it never kills anything. The subprocess seam
//! reacts to a cancelled token; the executor reads [`Deadline::cause`] when the run settles.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The largest timer delay, in milliseconds, that dsh accepts anywhere (2^31 − 1, the limit
/// the reference implementation validates against, kept for settings portability).
pub const MAX_TIMER_DELAY_MS: u64 = 2_147_483_647;

/// Why a token was cancelled: a typed cause, read by matching, never by its text (which
/// is for people: [`Display`](std::fmt::Display)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// dsh got this signal (SIGINT 2 for Ctrl-C, SIGTERM 15, SIGHUP 1).
    Signal(i32),
    /// A deadline's own timer ran out after this many milliseconds.
    TimedOut(u128),
    /// The MCP client cancelled the request.
    ClientCancelled,
    /// The MCP client went away (its input ended).
    ClientGone,
    /// The MCP client did not answer an approval question in time.
    ApprovalTimedOut,
    /// Anything else, said in words.
    Other(String),
}

impl std::fmt::Display for CancelReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CancelReason::Signal(2) => f.write_str("interrupted (Ctrl-C)"),
            CancelReason::Signal(n) => write!(f, "signal {n}"),
            CancelReason::TimedOut(ms) => write!(f, "timed out after {ms}ms"),
            CancelReason::ClientCancelled => f.write_str("cancelled by the MCP client"),
            CancelReason::ClientGone => f.write_str("the MCP client went away"),
            CancelReason::ApprovalTimedOut => {
                f.write_str("the MCP client did not answer the approval in time")
            }
            CancelReason::Other(why) => f.write_str(why),
        }
    }
}

impl From<&str> for CancelReason {
    fn from(why: &str) -> CancelReason {
        CancelReason::Other(why.to_owned())
    }
}

impl From<String> for CancelReason {
    fn from(why: String) -> CancelReason {
        CancelReason::Other(why)
    }
}

/// A cloneable cancellation flag with a reason, shared by everyone who may stop a call.
///
/// Cancelling is idempotent; the first reason is kept.
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Default)]
struct CancelInner {
    reason: OnceLock<(CancelReason, Instant)>,
    notify: Notify,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        CancelToken::default()
    }

    /// Cancels with `reason`. Later calls keep the first reason.
    pub fn cancel(&self, reason: impl Into<CancelReason>) {
        if self
            .inner
            .reason
            .set((reason.into(), Instant::now()))
            .is_ok()
        {
            self.inner.notify.notify_waiters();
        }
    }

    /// Whether [`cancel`](Self::cancel) has been called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.reason.get().is_some()
    }

    /// The first cancel reason, if cancelled.
    pub fn reason(&self) -> Option<&CancelReason> {
        self.inner.reason.get().map(|(r, _)| r)
    }

    fn cancelled_at(&self) -> Option<Instant> {
        self.inner.reason.get().map(|(_, at)| *at)
    }

    /// Completes once the token is cancelled (at once if it already is).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future has no effect on the token.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            // Register before checking, so a cancel between the check and the await is seen.
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("reason", &self.reason())
            .finish()
    }
}

/// Why a [`Deadline`] fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The deadline's own timer ran out first.
    TimedOut,
    /// The upstream token was cancelled first.
    Cancelled,
}

/// A timeout and an upstream cancel fused into one token; the first cause wins and is
/// recorded once.
///
/// Dropping the deadline disarms its timer (the fused token then fires only if the
/// upstream does, which it no longer watches either).
pub struct Deadline {
    token: CancelToken,
    shared: Arc<OnceLock<Cause>>,
    timeout: Option<Duration>,
    watcher: Option<JoinHandle<()>>,
}

impl Deadline {
    /// Arms a deadline of `timeout` (none: only `upstream` can fire it) over `upstream`.
    ///
    /// A pre-cancelled upstream yields an already-fired deadline with cause
    /// [`Cause::Cancelled`].
    ///
    /// # Panics
    /// Outside a tokio runtime when it has a timeout or an upstream to watch.
    pub fn new(timeout: Option<Duration>, upstream: Option<&CancelToken>) -> Deadline {
        let token = CancelToken::new();
        let shared = Arc::new(OnceLock::new());
        if let Some(up) = upstream {
            if let Some(reason) = up.reason() {
                let _ = shared.set(Cause::Cancelled);
                token.cancel(reason.clone());
                return Deadline {
                    token,
                    shared,
                    timeout,
                    watcher: None,
                };
            }
        }
        let watcher = match (timeout, upstream) {
            (None, None) => None,
            (timeout, upstream) => {
                let fused = token.clone();
                let cause = shared.clone();
                let upstream = upstream.cloned();
                let at = timeout.map(|t| Instant::now() + t);
                Some(tokio::spawn(async move {
                    let fired = fire_first(at, upstream.as_ref()).await;
                    let _ = cause.set(fired);
                    match fired {
                        Cause::TimedOut => fused
                            .cancel(CancelReason::TimedOut(timeout.map_or(0, |t| t.as_millis()))),
                        Cause::Cancelled => fused.cancel(
                            upstream
                                .as_ref()
                                .and_then(|u| u.reason())
                                .cloned()
                                .unwrap_or_else(|| "cancelled".into()),
                        ),
                    }
                }))
            }
        };
        Deadline {
            token,
            shared,
            timeout,
            watcher,
        }
    }

    /// The fused token: cancelled when the timer or the upstream fires, whichever is first.
    pub fn token(&self) -> &CancelToken {
        &self.token
    }

    /// The timeout this deadline was armed with.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Why the deadline fired, or `None` if it has not.
    pub fn cause(&self) -> Option<Cause> {
        self.shared.get().copied()
    }

    /// True when the deadline's own timer was the first cause.
    pub fn is_timed_out(&self) -> bool {
        self.cause() == Some(Cause::TimedOut)
    }

    /// True when the upstream cancel was the first cause.
    pub fn is_cancelled(&self) -> bool {
        self.cause() == Some(Cause::Cancelled)
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Some(w) = self.watcher.take() {
            w.abort();
        }
    }
}

async fn fire_first(at: Option<Instant>, upstream: Option<&CancelToken>) -> Cause {
    let timer = async {
        match at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let cancel = async {
        match upstream {
            Some(up) => up.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = timer => {
            // Both may be ready in the same poll: the earlier instant is the first cause.
            match (upstream.and_then(|u| u.cancelled_at()), at) {
                (Some(c), Some(t)) if c <= t => Cause::Cancelled,
                _ => Cause::TimedOut,
            }
        }
        () = cancel => {
            match (upstream.and_then(|u| u.cancelled_at()), at) {
                (Some(c), Some(t)) if t < c => Cause::TimedOut,
                _ => Cause::Cancelled,
            }
        }
    }
}

/// Validates a timeout hint and applies the default and the cap:
/// `min(requested.unwrap_or(default), max)`. The default is capped too.
///
/// # Errors
/// `INVALID_ARGUMENT` (`<name> must be a positive finite number`) when `requested` is not
/// finite or not > 0.
pub fn clamp_timeout(
    requested: Option<f64>,
    default_ms: u64,
    max_ms: u64,
    name: &str,
) -> Result<u64, crate::HarnessError> {
    match requested {
        Some(r) if !(r.is_finite() && r > 0.0) => Err(crate::HarnessError::invalid_argument(
            format!("{name} must be a positive finite number"),
        )),
        // A fractional hint rounds up, so 0.5 ms is a real (1 ms) timer, never "no timer".
        Some(r) => Ok((r.ceil() as u64).min(max_ms)),
        None => Ok(default_ms.min(max_ms)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn timer_fires_as_timed_out() {
        let d = Deadline::new(Some(Duration::from_millis(100)), None);
        d.token().cancelled().await;
        assert_eq!(d.cause(), Some(Cause::TimedOut));
        assert!(!d.is_cancelled());
        assert_eq!(
            d.token().reason().map(ToString::to_string).as_deref(),
            Some("timed out after 100ms")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn upstream_cancel_is_not_a_timeout() {
        let up = CancelToken::new();
        let d = Deadline::new(Some(Duration::from_secs(10)), Some(&up));
        up.cancel("stop");
        d.token().cancelled().await;
        assert_eq!(d.cause(), Some(Cause::Cancelled));
        assert_eq!(
            d.token().reason().map(ToString::to_string).as_deref(),
            Some("stop")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn first_cause_wins_when_timeout_comes_first() {
        let up = CancelToken::new();
        let d = Deadline::new(Some(Duration::from_millis(5)), Some(&up));
        d.token().cancelled().await;
        up.cancel("late");
        tokio::task::yield_now().await;
        assert_eq!(d.cause(), Some(Cause::TimedOut));
        assert!(!(d.is_timed_out() && d.is_cancelled()));
    }

    #[tokio::test(start_paused = true)]
    async fn pre_cancelled_upstream_fires_at_once() {
        let up = CancelToken::new();
        up.cancel("too late");
        let d = Deadline::new(Some(Duration::from_secs(1)), Some(&up));
        assert_eq!(d.cause(), Some(Cause::Cancelled));
        assert_eq!(
            d.token().reason().map(ToString::to_string).as_deref(),
            Some("too late")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_deadline_disarms_it() {
        let d = Deadline::new(Some(Duration::from_millis(10)), None);
        let token = d.token().clone();
        drop(d);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!token.is_cancelled());
    }

    #[tokio::test]
    async fn no_timeout_and_no_upstream_never_fires() {
        let d = Deadline::new(None, None);
        assert_eq!(d.cause(), None);
        assert!(!d.token().is_cancelled());
    }

    #[test]
    fn cancel_keeps_the_first_reason() {
        let t = CancelToken::new();
        t.cancel("one");
        t.cancel("two");
        assert_eq!(t.reason().map(ToString::to_string).as_deref(), Some("one"));
    }

    #[test]
    fn clamp_fills_the_default_and_caps() {
        assert_eq!(
            clamp_timeout(None, 120_000, 600_000, "t").ok(),
            Some(120_000)
        );
        assert_eq!(
            clamp_timeout(Some(99_999.0), 10, 2000, "t").ok(),
            Some(2000)
        );
        assert_eq!(clamp_timeout(Some(50.0), 10, 2000, "t").ok(), Some(50));
        assert_eq!(clamp_timeout(None, 5000, 2000, "t").ok(), Some(2000));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e =
                clamp_timeout(Some(bad), 1, 2, "bash: request.timeout_ms").expect_err("rejected");
            assert_eq!(
                e.message(),
                "bash: request.timeout_ms must be a positive finite number"
            );
        }
    }
}
