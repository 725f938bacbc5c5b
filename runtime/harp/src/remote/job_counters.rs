//! The counters of a job across processes: the master asks a node (`Message::StatsQuery`),
//! which answers with its parameter traffic, its cache size and its server's counters
//! ([`NodeCounters`], encoded with postcard in `Message::Stats`). A node that leaves the
//! job is asked once its load is gone, before it is dismissed ([`of_leaving_node`]; the
//! roster sums them in its [`NodeReports`]); at the end every live node is asked at once,
//! and the master adds them to the sums of the nodes gone for `JobStats` ([`collect`]).
//!
//! A dead node cannot be asked, so every node also sends its counters unasked every
//! [`REPORT_EVERY`] while it runs (`Message::StatsReport`, [`report_every`]), and the
//! master keeps each node's last report until the node is counted ([`NodeReports`]): a
//! node that died, or that does not answer its query, is counted from its last report
//! (what it did in the last seconds before is missing), and
//! `JobStats::nodes_counted_from_reports` says how many were.
//!
//! Counters are a report, not a result: a node that does not answer within
//! [`STATS_DEADLINE`] ([`LEAVING_DEADLINE`] for one that leaves, whose leave it holds up),
//! or sends bytes that do not decode, and never reported, is left out of the sums with a
//! warning, and `JobStats::nodes_counted` says how many were summed; the job still ends
//! well.

use super::pending::{Pending, PendingReplies};
use crate::error::HarpError;
use crate::node::{NodeStats, ParamStore};
use crate::server::{ServerMsg, ServerStats};
use harp_net::Link;
use harp_wire::Message;
use ractor::ActorRef;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// How often a node sends its counters unasked.
pub(super) const REPORT_EVERY: Duration = Duration::from_secs(1);

/// How long the master waits for the nodes' counters at the job's end (all asked at once).
pub(super) const STATS_DEADLINE: Duration = Duration::from_secs(10);

/// How long a leaving node's counters may hold its leave up.
const LEAVING_DEADLINE: Duration = Duration::from_secs(5);

/// How long a node waits for its own server's counters.
const LOCAL_SERVER_WAIT: Duration = Duration::from_secs(5);

/// One node's counters, as a node process sends them.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct NodeCounters {
    pub node: NodeStats,
    /// Its server's, if it has one (and it answered).
    pub server: Option<ServerStats>,
    pub cached_rows: u64,
}

/// The sums over the nodes counted, for `JobStats`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct CountedNodes {
    pub node: NodeStats,
    pub servers: ServerStats,
    pub cached_rows: u64,
    pub nodes: u32,
    /// Of `nodes`, those counted from their last report (they died, or did not answer).
    pub from_reports: u32,
}

impl CountedNodes {
    pub(super) fn add(&mut self, counters: &NodeCounters) {
        self.node.add(&counters.node);
        if let Some(server) = &counters.server {
            self.servers.add(server);
        }
        self.cached_rows += counters.cached_rows;
        self.nodes += 1;
    }

    /// Adds a node's last report (a node gone holds no cache).
    fn add_reported(&mut self, counters: &NodeCounters) {
        self.add(&NodeCounters {
            cached_rows: 0,
            ..*counters
        });
        self.from_reports += 1;
    }
}

/// How [`NodeReports::count`] counted a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counted {
    Answered,
    FromReport,
    /// It never answered nor reported: left out.
    Not,
    /// It was counted before.
    Already,
}

/// The master's record of the nodes' counters: the sums over the nodes counted so far (as
/// they left or died, and at the end the live ones), and the last report of every node not
/// counted yet.
#[derive(Debug, Default)]
pub(crate) struct NodeReports {
    sums: CountedNodes,
    last: BTreeMap<u32, NodeCounters>,
    counted: BTreeSet<u32>,
}

impl NodeReports {
    /// Node `node` reported `counters` unasked; kept until it is counted (a report that
    /// comes after, a node counted already, changes nothing).
    pub(crate) fn reported(&mut self, node: u32, counters: NodeCounters) {
        if !self.counted.contains(&node) {
            self.last.insert(node, counters);
        }
    }

    /// Counts node `node` (it left or died, or the job ended), once: from its answer to a
    /// query (`Some`), else from its last report if it sent one. How it was counted.
    pub(crate) fn count(&mut self, node: u32, answered: Option<NodeCounters>) -> Counted {
        if !self.counted.insert(node) {
            return Counted::Already;
        }
        let last = self.last.remove(&node);
        match (answered, last) {
            (Some(answered), _) => {
                self.sums.add(&answered);
                Counted::Answered
            }
            (None, Some(last)) => {
                self.sums.add_reported(&last);
                Counted::FromReport
            }
            (None, None) => Counted::Not,
        }
    }

    /// What the nodes counted so far add up to.
    pub(crate) fn sums(&self) -> CountedNodes {
        self.sums
    }

    /// Node `node`'s last report, if it is not counted yet.
    #[cfg(test)]
    fn last(&self, node: u32) -> Option<NodeCounters> {
        self.last.get(&node).copied()
    }
}

/// This node's counters: its store's, and its local server's if it answers in time.
pub(super) async fn of_this_node(
    store: &ParamStore,
    local_server: Option<&ActorRef<ServerMsg>>,
) -> NodeCounters {
    let server = match local_server {
        Some(server) => {
            let (reply, stats) = oneshot::channel();
            let _ = server.send_message(ServerMsg::Stats { reply });
            match tokio::time::timeout(LOCAL_SERVER_WAIT, stats).await {
                Ok(Ok(stats)) => Some(stats),
                _ => {
                    tracing::warn!("this node's server did not send its counters in time");
                    None
                }
            }
        }
        None => None,
    };
    NodeCounters {
        node: store.stats(),
        server,
        cached_rows: store.cached_rows() as u64,
    }
}

/// Answers the master's `StatsQuery` `request_id` with `counters`.
pub(super) fn answer(link: &Link, request_id: u64, counters: &NodeCounters) {
    if let Some(counters) = encode(counters) {
        let _ = link.send(&Message::Stats {
            request_id,
            counters,
        });
    }
}

fn encode(counters: &NodeCounters) -> Option<Vec<u8>> {
    postcard::to_allocvec(counters)
        .map_err(|e| tracing::warn!(error = %e, "cannot encode this node's counters"))
        .ok()
}

/// Sends this node's counters to the master unasked at once (a node that dies early is
/// still counted) and then every [`REPORT_EVERY`], until the link is gone (the caller
/// aborts it when the job ends).
pub(super) async fn report_every(
    link: Link,
    store: Arc<ParamStore>,
    local_server: Option<ActorRef<ServerMsg>>,
) {
    loop {
        let counters = of_this_node(&store, local_server.as_ref()).await;
        if let Some(counters) = encode(&counters) {
            if link.send(&Message::StatsReport { counters }).is_err() {
                return;
            }
        }
        tokio::time::sleep(REPORT_EVERY).await;
    }
}

/// A node's answer, decoded; bytes that do not decode are a typed error.
pub(super) fn decode(bytes: &[u8]) -> Result<NodeCounters, HarpError> {
    postcard::from_bytes(bytes)
        .map_err(|e| HarpError::Remote(format!("malformed counters from a node: {e}")))
}

/// Sends node `id` a `StatsQuery`: what its answer arrives on (`None`: the link is gone).
fn ask(id: u32, link: &Link, pending: &PendingReplies) -> Option<oneshot::Receiver<Vec<u8>>> {
    let (tx, rx) = oneshot::channel();
    let request_id = pending.register(Pending::Stats(tx));
    if link.send(&Message::StatsQuery { request_id }).is_err() {
        pending.forget(request_id);
        tracing::warn!(
            node = id,
            "a node that is gone cannot be asked for its counters"
        );
        return None;
    }
    Some(rx)
}

/// Node `id`'s counters from its answer, if it came by `deadline` and decodes (otherwise
/// logged, and `None`).
async fn answer_by(
    id: u32,
    answer: oneshot::Receiver<Vec<u8>>,
    deadline: tokio::time::Instant,
) -> Option<NodeCounters> {
    let why = match tokio::time::timeout_at(deadline, answer).await {
        Ok(Ok(bytes)) => match decode(&bytes) {
            Ok(counters) => return Some(counters),
            Err(e) => e.to_string(),
        },
        Ok(Err(_)) => "it went away before it sent them".to_string(),
        Err(_) => "it did not send them in time".to_string(),
    };
    tracing::warn!(node = id, %why, "a node did not send the counters it was asked for");
    None
}

/// The counters of node `id`, which is leaving the job with its load gone (see the module
/// doc), waited for at most [`LEAVING_DEADLINE`].
pub(super) async fn of_leaving_node(
    id: u32,
    link: &Link,
    pending: &PendingReplies,
) -> Option<NodeCounters> {
    let answer = ask(id, link, pending)?;
    let counters = answer_by(id, answer, tokio::time::Instant::now() + LEAVING_DEADLINE).await?;
    Some(NodeCounters {
        // A node gone holds no cache at the job's end.
        cached_rows: 0,
        ..counters
    })
}

/// Asks every node in `nodes` for its counters at once and adds those that answer within
/// [`STATS_DEADLINE`] to the sums of the nodes gone (see the module doc); a node that does
/// not is counted from its last report, if it sent one.
pub(super) async fn collect(
    nodes: &[(u32, &Link, &Arc<PendingReplies>)],
    mut reports: NodeReports,
) -> CountedNodes {
    let asked: Vec<_> = (nodes.iter())
        .map(|(id, link, pending)| (*id, ask(*id, link, pending)))
        .collect();
    let deadline = tokio::time::Instant::now() + STATS_DEADLINE;
    for (id, answer) in asked {
        let answered = match answer {
            Some(answer) => answer_by(id, answer, deadline).await,
            None => None,
        };
        match reports.count(id, answered) {
            Counted::FromReport => {
                tracing::warn!(
                    node = id,
                    "a node's counters are taken from its last report"
                )
            }
            Counted::Not => tracing::warn!(
                node = id,
                "a node's counters are left out of the job's: it never reported them"
            ),
            Counted::Answered | Counted::Already => {}
        }
    }
    reports.sums()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_round_trip_and_bad_bytes_are_an_error() {
        let counters = NodeCounters {
            node: NodeStats {
                cache_hits: 7,
                rows_flushed: 3,
                ..NodeStats::default()
            },
            server: Some(ServerStats {
                updates_applied: 5,
                ..ServerStats::default()
            }),
            cached_rows: 11,
        };
        let bytes = postcard::to_allocvec(&counters).unwrap();
        assert_eq!(decode(&bytes).unwrap(), counters);
        let error = decode(&bytes[..bytes.len() / 2]).unwrap_err();
        assert!(error.to_string().contains("malformed counters"), "{error}");
    }

    #[test]
    fn the_sums_add_each_node_and_count_it() {
        let with_server = NodeCounters {
            node: NodeStats {
                rows_flushed: 4,
                ..NodeStats::default()
            },
            server: Some(ServerStats {
                updates_applied: 6,
                ..ServerStats::default()
            }),
            cached_rows: 2,
        };
        let worker_only = NodeCounters {
            server: None,
            ..with_server
        };
        let mut counted = CountedNodes::default();
        counted.add(&with_server);
        counted.add(&worker_only);
        assert_eq!(counted.nodes, 2);
        assert_eq!(counted.node.rows_flushed, 8);
        assert_eq!(counted.servers.updates_applied, 6);
        assert_eq!(counted.cached_rows, 4);
    }

    fn flushed(rows: u64, cached_rows: u64) -> NodeCounters {
        NodeCounters {
            node: NodeStats {
                rows_flushed: rows,
                ..NodeStats::default()
            },
            server: None,
            cached_rows,
        }
    }

    #[test]
    fn a_dead_node_counts_once_from_its_last_report() {
        let mut reports = NodeReports::default();
        reports.reported(1, flushed(5, 3));
        reports.reported(1, flushed(9, 3));
        assert_eq!(reports.count(1, None), Counted::FromReport);
        let sums = reports.sums();
        assert_eq!((sums.nodes, sums.from_reports), (1, 1));
        assert_eq!(sums.node.rows_flushed, 9, "the last report");
        assert_eq!(sums.cached_rows, 0, "a node gone holds no cache");
        // Counted once: a second report of the death, or a report still on its way after
        // it, changes nothing.
        assert_eq!(reports.count(1, None), Counted::Already);
        reports.reported(1, flushed(20, 0));
        assert_eq!(reports.sums(), sums);
        assert_eq!(reports.last(1), None);
    }

    #[test]
    fn an_answer_wins_over_a_report_a_silent_death_is_left_out_and_the_end_falls_back_to_reports() {
        let mut reports = NodeReports::default();
        reports.reported(2, flushed(4, 0));
        assert_eq!(reports.count(2, Some(flushed(6, 0))), Counted::Answered);
        assert_eq!(reports.count(3, None), Counted::Not);
        let sums = reports.sums();
        assert_eq!((sums.nodes, sums.from_reports), (1, 0));
        assert_eq!(sums.node.rows_flushed, 6);
        // A live node's report waits for the end.
        reports.reported(4, flushed(1, 2));
        assert_eq!(reports.last(4), Some(flushed(1, 2)));
        assert_eq!(reports.sums(), sums);
        // At the end: one that does not answer counts from its report, without its cache;
        // one that answers keeps its cache.
        assert_eq!(reports.count(4, None), Counted::FromReport);
        assert_eq!(reports.count(5, Some(flushed(3, 7))), Counted::Answered);
        let end = reports.sums();
        assert_eq!((end.nodes, end.from_reports), (3, 1));
        assert_eq!((end.node.rows_flushed, end.cached_rows), (10, 7));
    }
}
