//! The counters of a job across processes: the master asks a node (`Message::StatsQuery`),
//! which answers with its parameter traffic, its cache size and its server's counters
//! ([`NodeCounters`], encoded with postcard in `Message::Stats`). A node that leaves the
//! job is asked once its load is gone, before it is dismissed ([`of_leaving_node`]; the
//! roster sums them); at the end every live node is asked at once, and the master adds
//! them to the departed nodes' sums for `JobStats` ([`collect`]). A node that died takes
//! its counters with it.
//!
//! Counters are a report, not a result: a node that does not answer within
//! [`STATS_DEADLINE`] ([`LEAVING_DEADLINE`] for one that leaves, whose leave it holds up),
//! or sends bytes that do not decode, is left out of the sums with a warning, and
//! `JobStats::nodes_counted` says how many were summed; the job still ends well.

use super::pending::{Pending, PendingReplies};
use crate::error::HarpError;
use crate::node::{NodeStats, ParamStore};
use crate::server::{ServerMsg, ServerStats};
use harp_net::Link;
use harp_wire::Message;
use ractor::ActorRef;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

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
    match postcard::to_allocvec(counters) {
        Ok(counters) => {
            let _ = link.send(&Message::Stats {
                request_id,
                counters,
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot encode this node's counters"),
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
            "a node that is gone is left out of the job's counters"
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
    tracing::warn!(node = id, %why, "a node's counters are left out of the job's");
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
/// [`STATS_DEADLINE`] to `departed` (the sums of the nodes that left; see the module doc).
pub(super) async fn collect(
    nodes: &[(u32, &Link, &Arc<PendingReplies>)],
    departed: CountedNodes,
) -> CountedNodes {
    let asked: Vec<_> = (nodes.iter())
        .filter_map(|(id, link, pending)| Some((*id, ask(*id, link, pending)?)))
        .collect();
    let deadline = tokio::time::Instant::now() + STATS_DEADLINE;
    let mut counted = departed;
    for (id, answer) in asked {
        if let Some(counters) = answer_by(id, answer, deadline).await {
            counted.add(&counters);
        }
    }
    counted
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
}
