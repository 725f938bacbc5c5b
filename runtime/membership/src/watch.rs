//! The receiving end of a membership watch.
//!
//! Invariant: a watch delivers each event once, in the order the backend saw it; an error
//! is the last thing it delivers (after it, the watcher may have missed changes and must not
//! trust its picture of the job).

use crate::error::MembershipBackendError;
use harp_core::MembershipEvent;
use tokio::sync::mpsc;

/// What a backend pushes into a watch: an event, or the error that ends the watch.
pub(crate) type WatchItem = Result<MembershipEvent, MembershipBackendError>;

/// A stream of [`MembershipEvent`]s from one backend.
#[derive(Debug)]
pub struct MembershipWatch {
    rx: mpsc::UnboundedReceiver<WatchItem>,
    ended: Option<MembershipBackendError>,
}

impl MembershipWatch {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<WatchItem>) -> Self {
        Self { rx, ended: None }
    }

    /// The next event. An error means the watch has ended; every later call returns it
    /// again. This waits as long as nothing happens: wrap it in a timeout to bound it.
    pub async fn next(&mut self) -> Result<MembershipEvent, MembershipBackendError> {
        if let Some(err) = &self.ended {
            return Err(err.clone());
        }
        let item = self.rx.recv().await;
        self.settle(item)
    }

    /// The next event if one is ready now.
    pub fn try_next(&mut self) -> Option<Result<MembershipEvent, MembershipBackendError>> {
        if let Some(err) = &self.ended {
            return Some(Err(err.clone()));
        }
        match self.rx.try_recv() {
            Ok(item) => Some(self.settle(Some(item))),
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => Some(self.settle(None)),
        }
    }

    fn settle(
        &mut self,
        item: Option<WatchItem>,
    ) -> Result<MembershipEvent, MembershipBackendError> {
        let item = item.unwrap_or(Err(MembershipBackendError::Stopped));
        if let Err(err) = &item {
            self.ended = Some(err.clone());
        }
        item
    }
}
