//! The workers and servers a running job's control counts as taking load (its *live set*),
//! and the ones gone from it for good.
//!
//! A scale event names the live set it re-balances onto and, once the master answers that
//! it succeeded, that set becomes the live one ([`LiveSet::settle`]). Meanwhile a node may
//! go: in one process a server fails by fault injection (`JobControl::crash_server`), across
//! processes a node process leaves or dies and is recovered (`ControlRequest::Forget`).
//! Those are recorded as gone ([`LiveSet::forget`]) and stay out of the live set whatever
//! a scale event that ends later says, so neither `JobControl::members` nor the target of
//! the next scale event names a node the master no longer has.

use harp_core::{ServerId, WorkerId};
use std::collections::BTreeSet;

/// The job's live workers and servers, and the ones gone for good.
#[derive(Debug, Default)]
pub(crate) struct LiveSet {
    workers: Vec<WorkerId>,
    servers: Vec<ServerId>,
    gone_workers: BTreeSet<WorkerId>,
    gone_servers: BTreeSet<ServerId>,
}

impl LiveSet {
    /// The job's workers and servers at its start, all live.
    pub(crate) fn new(workers: Vec<WorkerId>, servers: Vec<ServerId>) -> Self {
        Self {
            workers,
            servers,
            ..Self::default()
        }
    }

    /// The workers and servers that take load now.
    pub(crate) fn members(&self) -> (Vec<WorkerId>, Vec<ServerId>) {
        (self.workers.clone(), self.servers.clone())
    }

    /// A scale event onto `workers` and `servers` succeeded: they take load now, except any
    /// that went while it ran.
    pub(crate) fn settle(&mut self, mut workers: Vec<WorkerId>, mut servers: Vec<ServerId>) {
        workers.retain(|w| !self.gone_workers.contains(w));
        servers.retain(|s| !self.gone_servers.contains(s));
        self.workers = workers;
        self.servers = servers;
    }

    /// `worker` and `server` are gone for good (left, or failed and were recovered): out of
    /// the live set now and after any scale event that ends later.
    pub(crate) fn forget(&mut self, worker: Option<WorkerId>, server: Option<ServerId>) {
        if let Some(w) = worker {
            self.gone_workers.insert(w);
            self.workers.retain(|live| *live != w);
        }
        if let Some(s) = server {
            self.gone_servers.insert(s);
            self.servers.retain(|live| *live != s);
        }
    }

    /// Whether `worker` is gone for good.
    pub(crate) fn worker_gone(&self, worker: &WorkerId) -> bool {
        self.gone_workers.contains(worker)
    }

    /// Whether `server` is gone for good.
    pub(crate) fn server_gone(&self, server: &ServerId) -> bool {
        self.gone_servers.contains(server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u32) -> (Vec<WorkerId>, Vec<ServerId>) {
        (
            (0..n).map(WorkerId).collect(),
            (0..n).map(ServerId).collect(),
        )
    }

    #[test]
    fn a_node_forgotten_while_a_scale_event_runs_stays_out_once_it_settles() {
        let (workers, servers) = ids(3);
        let mut live = LiveSet::new(workers.clone(), servers.clone());
        // A scale event onto all three runs; meanwhile worker 1 and server 2 go.
        live.forget(Some(WorkerId(1)), Some(ServerId(2)));
        assert_eq!(
            live.members(),
            (
                vec![WorkerId(0), WorkerId(2)],
                vec![ServerId(0), ServerId(1)]
            )
        );
        live.settle(workers, servers);
        assert_eq!(
            live.members(),
            (
                vec![WorkerId(0), WorkerId(2)],
                vec![ServerId(0), ServerId(1)]
            )
        );
        assert!(live.worker_gone(&WorkerId(1)) && live.server_gone(&ServerId(2)));
        assert!(!live.worker_gone(&WorkerId(2)) && !live.server_gone(&ServerId(1)));
    }

    #[test]
    fn settling_replaces_the_live_set_with_the_event_s_target() {
        let (workers, servers) = ids(4);
        let mut live = LiveSet::new(workers, servers);
        live.settle(vec![WorkerId(3)], vec![ServerId(0), ServerId(2)]);
        assert_eq!(
            live.members(),
            (vec![WorkerId(3)], vec![ServerId(0), ServerId(2)])
        );
        // A node out of the live set but not gone may take load again later.
        assert!(!live.server_gone(&ServerId(1)));
        live.settle(vec![WorkerId(3)], vec![ServerId(1)]);
        assert_eq!(live.members(), (vec![WorkerId(3)], vec![ServerId(1)]));
    }

    #[test]
    fn forgetting_only_a_worker_or_only_a_server_keeps_the_other() {
        let (workers, servers) = ids(2);
        let mut live = LiveSet::new(workers, servers);
        live.forget(Some(WorkerId(0)), None);
        live.forget(None, Some(ServerId(1)));
        assert_eq!(live.members(), (vec![WorkerId(1)], vec![ServerId(0)]));
        assert!(!live.server_gone(&ServerId(0)) && !live.worker_gone(&WorkerId(1)));
    }
}
