//! A node's hold on its membership: [`LeaseHandle`].
//!
//! The handle owns the background task that renews the node's lease. Invariants:
//! - while the handle lives and renewals succeed, the lease is renewed at least every
//!   heartbeat interval (below the lease timeout), so a live node is never declared dead;
//! - once the handle is dropped, nothing renews the lease any more (the task is aborted), so
//!   the backend declares the node dead within the lease timeout: what a crash looks like;
//! - [`LeaseHandle::leave`] stops renewing *before* it leaves, so no renewal can race a
//!   graceful leave.

use crate::error::MembershipBackendError;
use crate::BoxFuture;
use harp_core::NodeId;
use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

type LeaveFn = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), MembershipBackendError>> + Send>;

/// Reports, once, why a lease was lost; held by the renewal task.
#[derive(Debug)]
pub(crate) struct LostSender(watch::Sender<Option<MembershipBackendError>>);

impl LostSender {
    pub(crate) fn lost(self, reason: MembershipBackendError) {
        tracing::warn!(%reason, "membership lease lost");
        // Nobody listening is fine: the handle may be gone.
        let _ = self.0.send(Some(reason));
    }
}

/// A registered node's lease, renewed in the background until the handle is dropped or
/// [`leave`](Self::leave) is called.
pub struct LeaseHandle {
    node: NodeId,
    renewal: JoinHandle<()>,
    lost: watch::Receiver<Option<MembershipBackendError>>,
    leave: Option<LeaveFn>,
}

impl std::fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("node", &self.node)
            .field("lost", &*self.lost.borrow())
            .finish_non_exhaustive()
    }
}

impl LeaseHandle {
    /// Builds a handle around a renewal task made by `make_task`, which is given the
    /// sender on which it reports a lost lease. `leave` performs the graceful leave.
    pub(crate) fn from_task<F, L, LF>(
        node: NodeId,
        make_task: impl FnOnce(LostSender) -> F,
        leave: L,
    ) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
        L: FnOnce() -> LF + Send + 'static,
        LF: Future<Output = Result<(), MembershipBackendError>> + Send + 'static,
    {
        let (tx, rx) = watch::channel(None);
        let renewal = tokio::spawn(make_task(LostSender(tx)));
        Self {
            node,
            renewal,
            lost: rx,
            leave: Some(Box::new(move || Box::pin(leave()))),
        }
    }

    /// A handle that calls `heartbeat` every `interval` to renew the lease: the building
    /// block for a node whose membership service is reached some other way (e.g. a node
    /// heartbeating the master's [`EmbeddedMembership`](crate::EmbeddedMembership) over the
    /// network). `heartbeat` must bound its own time. A heartbeat that fails with
    /// `Rejected(UnknownNode)`, `LeaseLost` or `Stopped` ends the lease (see
    /// [`lost`](Self::lost)); other failures are retried at the next interval.
    pub fn spawn_heartbeats<H, HF, L, LF>(
        node: NodeId,
        interval: Duration,
        mut heartbeat: H,
        leave: L,
    ) -> Self
    where
        H: FnMut() -> HF + Send + 'static,
        HF: Future<Output = Result<(), MembershipBackendError>> + Send,
        L: FnOnce() -> LF + Send + 'static,
        LF: Future<Output = Result<(), MembershipBackendError>> + Send + 'static,
    {
        let interval = interval.max(Duration::from_millis(1));
        Self::from_task(
            node,
            move |lost| async move {
                let mut ticks =
                    tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    match heartbeat().await {
                        Ok(()) => {}
                        Err(MembershipBackendError::Rejected(
                            harp_core::MembershipError::UnknownNode(_),
                        ))
                        | Err(MembershipBackendError::LeaseLost(_)) => {
                            return lost.lost(MembershipBackendError::LeaseLost(node));
                        }
                        Err(MembershipBackendError::Stopped) => {
                            return lost.lost(MembershipBackendError::Stopped);
                        }
                        Err(err) => tracing::warn!(%node, %err, "heartbeat failed; retrying"),
                    }
                }
            },
            leave,
        )
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    /// Why the lease was lost, if it was (checked without waiting).
    pub fn lost_reason(&self) -> Option<MembershipBackendError> {
        self.lost.borrow().clone()
    }

    /// Waits until the lease is lost and says why (e.g. [`MembershipBackendError::LeaseLost`]
    /// after the node was declared dead or removed). Never resolves while the lease holds.
    pub async fn lost(&mut self) -> MembershipBackendError {
        loop {
            if let Some(reason) = self.lost.borrow_and_update().clone() {
                return reason;
            }
            if self.lost.changed().await.is_err() {
                // The renewal task ended without a reason (aborted): it renews no more.
                return self
                    .lost
                    .borrow()
                    .clone()
                    .unwrap_or(MembershipBackendError::Stopped);
            }
        }
    }

    /// Leaves the job gracefully: stops renewing, then tells the backend, so watchers see
    /// `Left` and never `Died`.
    pub async fn leave(mut self) -> Result<(), MembershipBackendError> {
        self.renewal.abort();
        // Wait until the task has really stopped, so no renewal runs after the leave. An
        // abort error is the expected outcome; a panic in the task changes nothing here.
        let _ = (&mut self.renewal).await;
        match self.leave.take() {
            Some(leave) => leave().await,
            None => Ok(()),
        }
    }

    /// Stops renewing without telling anyone: the lease lapses and the node is reported
    /// dead within the lease timeout, as after a crash. Same as dropping the handle.
    pub fn abandon(self) {}
}

impl Drop for LeaseHandle {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}
