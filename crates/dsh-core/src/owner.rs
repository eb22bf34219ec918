//! [`Owner`]: who a terminal session or a background job belongs to.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::SessionId;

/// Who a terminal session or a background job belongs to: one MCP connection (one
/// agent). Two `Owner`s are the same only if one is a clone of the other, even with the
/// same session id: a reconnecting client is a new owner. An owner is live until
/// [`end`](Owner::end); then registries refuse it new work.
#[derive(Clone)]
pub struct Owner(Arc<OwnerInner>);

struct OwnerInner {
    session: SessionId,
    ended: AtomicBool,
}

impl Owner {
    /// A new, live owner for `session`.
    pub fn new(session: SessionId) -> Owner {
        Owner(Arc::new(OwnerInner {
            session,
            ended: AtomicBool::new(false),
        }))
    }

    /// Its session.
    pub fn session(&self) -> &SessionId {
        &self.0.session
    }

    /// Whether it can still start work (it has not ended).
    pub fn is_live(&self) -> bool {
        !self.0.ended.load(Ordering::SeqCst)
    }

    /// Marks it ended: from now on nothing new starts for it. Idempotent.
    pub fn end(&self) {
        self.0.ended.store(true, Ordering::SeqCst);
    }

    /// Its identity: equal for clones of one owner, different for any other.
    pub fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }
}

impl PartialEq for Owner {
    fn eq(&self, other: &Owner) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Owner {}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner")
            .field("session", &self.0.session)
            .field("live", &self.is_live())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_clones_are_the_same_owner() {
        let a = Owner::new(SessionId::new("s"));
        let b = Owner::new(SessionId::new("s"));
        assert_eq!(a, a.clone());
        assert_ne!(a, b);
        assert!(a.is_live());
        a.clone().end();
        assert!(!a.is_live() && b.is_live());
    }
}
