//! Which node the master evicts when two live nodes lost the link between them (a network
//! partition between nodes that both still reach the master), in a job that can recover
//! the evicted node: the job then goes on without it, as after a death, instead of ending
//! with `HarpError::PeerLost`.
//!
//! Nodes report each link they lost (`Message::ServerAwaited`: in a job that recovers
//! servers or workers, a node's traffic for a server it lost waits for the master's
//! verdict instead of failing its task), and the master keeps every broken link between live
//! nodes ([`BrokenLinks`]). Once a link stays broken past the lease and a second
//! (`failures.rs::peer_lost_unless_gone`), [`choose`] picks one of its two ends:
//!
//! - only a node the job recovers ([`Recovers`]): a worker with `--recover-workers` (and,
//!   holding a server too, `--scar-fraction`), a server-only node with `--scar-fraction`;
//!   and never the last node with a worker, or with a server;
//! - a node with a server only in a job that stages its flushes (`--recover-workers`):
//!   with plain flushes, a part the server applied just before the link broke, whose
//!   acknowledgement the link lost, is in the server's rows, which the master still reaches
//!   and saves into the checkpoint's image; recovered from that image, the server's shards
//!   would hold the part, which the node sends again to their new owner: applied twice
//!   (the partition soak's seed 18 found it). A staged part is applied only at the
//!   master's commit, which never happens for a part left unacknowledged;
//! - first the end with more broken links among the live nodes: a node cut off from every
//!   other node is the common end of all of them, and evicting it mends them all, where
//!   evicting its peers one by one would empty the job;
//! - then a node without a server (its loss costs re-runs, which are exact, and no updates);
//! - then the node with the higher id (the later one to join): deterministic.
//!
//!
//! Before that, [`kept_and_cut_off`]: an end with a server only that may not go (a job
//! with `--recover-workers` alone) and that lost its links to every other worker node, two
//! or more, is the fault itself; evicting its peers would only take the worker nodes one
//! by one until the last of them could not go, and the job ends as `HarpError::PeerLost`
//! at once instead, naming that node.
//!
//! Pure: no clock, no IO. Evicting is declaring the node dead (`failures.rs::node_died`);
//! what the evicted node, still alive, does afterwards changes nothing (a worker's later
//! staged parts are dropped, a server's later acknowledgements refused: the same as for a
//! node cut off from the master only).

use harp_core::NodeRoles;
use std::collections::{BTreeMap, BTreeSet};

/// What the job recovers when a node dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Recovers {
    /// Worker nodes (`ClusterOptions::worker_recovery`).
    pub workers: bool,
    /// Server nodes (`ClusterOptions::scar`).
    pub servers: bool,
}

impl Recovers {
    /// Whether the job survives the death of a node with `roles`.
    pub(crate) fn node(self, roles: NodeRoles) -> bool {
        if roles.worker {
            self.workers && (!roles.server || self.servers)
        } else {
            roles.server && self.servers
        }
    }

    /// Why neither end of a broken link may go, in words for the job's error (what
    /// [`choose`] refused, by what the job recovers).
    pub(crate) fn why_no_eviction(self) -> &'static str {
        match (self.workers, self.servers) {
            (false, _) => {
                "only a job that recovers worker nodes (--recover-workers) evicts a node \
                 that lost a link"
            }
            (true, false) => {
                "a node holding a server is evicted only in a job with --scar-fraction as \
                 well, and the last worker node never"
            }
            (true, true) => "the job's last worker node and last server node are never evicted",
        }
    }
}

/// The links between live nodes that a node reported broken, each once whichever end
/// reported it.
#[derive(Debug, Default)]
pub(crate) struct BrokenLinks {
    pairs: BTreeSet<(u32, u32)>,
}

impl BrokenLinks {
    /// Node `a` lost its link to node `b` (a link to itself is no link).
    pub(crate) fn report(&mut self, a: u32, b: u32) {
        if a != b {
            self.pairs.insert((a.min(b), a.max(b)));
        }
    }

    /// Whether a reported link has both ends in `live`: its verdict (an eviction, or the
    /// job's end) is still to come, or, when one end leaves, it mends.
    pub(crate) fn any_between(&self, live: &BTreeMap<u32, NodeRoles>) -> bool {
        (self.pairs.iter()).any(|(a, b)| live.contains_key(a) && live.contains_key(b))
    }

    /// Whether the link between `a` and `b` was reported broken.
    fn has(&self, a: u32, b: u32) -> bool {
        self.pairs.contains(&(a.min(b), a.max(b)))
    }

    /// How many reported links of `node` have both ends in `live`.
    fn count(&self, node: u32, live: &BTreeMap<u32, NodeRoles>) -> usize {
        self.pairs
            .iter()
            .filter(|(a, b)| {
                (*a == node || *b == node) && live.contains_key(a) && live.contains_key(b)
            })
            .count()
    }
}

/// The end of the broken link `(a, b)` that is a node with a server only, may not be
/// evicted (see [`choose`]'s rules), and lost its links to every other live worker node, of
/// which there are two or more; `None` otherwise. Every worker node needs that server, so
/// no eviction of its peers mends the job: each would take a worker node away (its tasks
/// run again) until the last one, which may not go either. With one other worker node the
/// two ends of the only link are not told apart this way.
pub(crate) fn kept_and_cut_off(
    (a, b): (u32, u32),
    links: &BrokenLinks,
    live: &BTreeMap<u32, NodeRoles>,
    recovers: Recovers,
) -> Option<u32> {
    [a, b].into_iter().find(|&node| {
        let Some(&roles) = live.get(&node) else {
            return false;
        };
        if !roles.server || roles.worker || may_go(node, roles, live, recovers) {
            return false;
        }
        let mut workers = (live.iter()).filter(|(id, r)| **id != node && r.worker);
        let lost = workers.clone().all(|(w, _)| links.has(node, *w));
        lost && workers.nth(1).is_some()
    })
}

/// Whether `node` (with `roles`) may be evicted: the job recovers it, it holds no server
/// unless flushes are staged, and it holds neither the last worker nor the last server.
fn may_go(
    node: u32,
    roles: NodeRoles,
    live: &BTreeMap<u32, NodeRoles>,
    recovers: Recovers,
) -> bool {
    let others_have =
        |role: fn(&NodeRoles) -> bool| live.iter().any(|(id, other)| *id != node && role(other));
    recovers.node(roles)
        && (!roles.server || recovers.workers)
        && (!roles.worker || others_have(|r| r.worker))
        && (!roles.server || others_have(|r| r.server))
}

/// The end of the broken link `(a, b)` to evict (see the module doc), or `None` when
/// neither end may go (or one is not live any more: nothing to mend). `live`: the job's
/// live nodes and their roles.
pub(crate) fn choose(
    (a, b): (u32, u32),
    links: &BrokenLinks,
    live: &BTreeMap<u32, NodeRoles>,
    recovers: Recovers,
) -> Option<u32> {
    let (roles_a, roles_b) = (*live.get(&a)?, *live.get(&b)?);
    [(a, roles_a), (b, roles_b)]
        .into_iter()
        .filter(|&(node, roles)| may_go(node, roles, live, recovers))
        .max_by_key(|&(node, roles)| (links.count(node, live), !roles.server, node))
        .map(|(node, _)| node)
}

#[cfg(test)]
#[path = "eviction_tests.rs"]
mod tests;
