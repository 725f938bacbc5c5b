//! Re-balancing plans: which executors and shards move where when workers or servers join
//! or leave (Litz §4.4, DESIGN §2.3).
//!
//! This module owns the *decision* only: given where every executor and shard is now, how
//! many bytes each one holds, and which workers and servers are live, it computes a
//! [`RebalancePlan`]. Carrying a plan out (finishing the running task, shipping state,
//! forwarding shard traffic) is the shell's job; [`RebalancePlan::apply`] updates the
//! master's [`ExecutorMap`] and [`ShardMap`] once it has.
//!
//! A node that is not in the live list is leaving or dead: everything it holds moves.
//! Executors over workers and shards over servers are planned independently by one generic
//! algorithm, [`balance`]; [`plan_executors`], [`plan_shards`] and [`plan_rebalance`] are
//! thin typed wrappers around it.
//!
//! # Guarantees
//!
//! For `n` items over `k` live nodes, let `floor = n / k`, `ceil = floor + 1`,
//! `rem = n % k`, and `c(v)` be what live node `v` holds before the plan.
//!
//! 1. **Placement.** Afterwards every item is on exactly one live node. Each item appears in
//!    at most one move, whose `from` is its current owner and whose `to` is its final owner
//!    (one hop).
//! 2. **Counts.** Every live node ends with `floor` or `ceil` items; exactly `rem` end with
//!    `ceil`.
//! 3. **Fewest moves.** The plan has exactly
//!    `n - Σ_v min(c(v), floor) - min(rem, |{v : c(v) > floor}|)` moves, the least that any
//!    plan meeting 1 and 2 needs. Items of nodes that are not live always move.
//! 4. **Stability.** A live node sends only if it holds more than its final count and
//!    receives only if it holds fewer, so no node both sends and receives. Every move either
//!    leaves a node that is not live or holds more than `ceil`, or lands on a node that holds
//!    fewer than `floor`: items never move between two live nodes that both hold between
//!    `floor` and `ceil`. A node holding exactly `ceil` sends one item only when more than
//!    `rem` nodes hold more than `floor` (some of them must drop to `floor`); a node holding
//!    `floor` or fewer never sends. Hence re-planning the result gives an empty plan.
//! 5. **Bytes** (a greedy tie-break among the plans meeting 1–4; it does not minimise the
//!    bytes moved nor promise the best possible byte spread):
//!    - *ceil slots:* among nodes holding more than `floor`, those that keep `ceil` hold no
//!      more bytes than those cut to `floor`; among nodes holding `floor` or fewer, those
//!      raised to `ceil` hold no more bytes than those that end at `floor` (equal bytes: the
//!      lower node id gets the slot);
//!    - *largest leave:* a live node that sends, sends its largest items: each item it sends
//!      is at least as large as each item it keeps (equal sizes: the lower item id leaves);
//!    - *least-loaded receive:* the moving items are placed largest first (equal sizes: lower
//!      item id first), each on a node that still has room and, at that moment, holds the
//!      fewest bytes (what it kept plus what it has received so far; equal: lower node id).
//! 6. **Determinism.** The plan depends only on the set of items (id, owner, bytes) and the
//!    set of live nodes, not on the order they are listed in. Moves are sorted by item id.
//!
//! Loads are summed in `u128`, so no choice of `u64` sizes overflows.

mod balance;
#[cfg(test)]
mod tests;

pub use balance::{balance, BalanceError, Move, Placed};

use crate::ids::{ExecutorId, ServerId, ShardId, WorkerId};
use crate::placement::{ExecutorMap, ShardMap};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Why a plan could not be made or applied. Nothing is planned or changed when it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RebalanceError {
    #[error(
        "no live worker: {} would have nowhere to run (the last worker cannot leave while the job has executors)",
        things(.executors, "executor")
    )]
    NoLiveWorker { executors: usize },
    #[error(
        "no live server: {} would have nowhere to live (the last server cannot leave while the job has parameters)",
        things(.shards, "parameter shard")
    )]
    NoLiveServer { shards: usize },
    #[error("{0} is listed more than once in the placement; each executor has exactly one owner")]
    DuplicateExecutor(ExecutorId),
    #[error("{0} is listed more than once in the placement; each shard has exactly one owner")]
    DuplicateShard(ShardId),
    #[error("the plan moves {0} more than once; a plan moves each executor at most once")]
    DuplicateExecutorMove(ExecutorId),
    #[error("the plan moves {0} more than once; a plan moves each shard at most once")]
    DuplicateShardMove(ShardId),
    #[error("the plan moves {0}, which is not in the executor map")]
    UnknownExecutor(ExecutorId),
    #[error("the plan moves {0}, which is not in the shard map")]
    UnknownShard(ShardId),
    #[error("stale plan: it moves {executor} off {planned_from}, but {executor} is on {actual}")]
    StaleExecutorMove {
        executor: ExecutorId,
        planned_from: WorkerId,
        actual: WorkerId,
    },
    #[error("stale plan: it moves {shard} off {planned_from}, but {shard} is on {actual}")]
    StaleShardMove {
        shard: ShardId,
        planned_from: ServerId,
        actual: ServerId,
    },
}

/// "1 executor", "4 executors".
fn things(count: &usize, what: &str) -> String {
    match count {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

/// Where everything is now, how big it is, and who is live.
///
/// A worker or server that owns something but is not in the live lists is leaving or dead.
/// Duplicates in the live lists are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalanceInput {
    pub executors: Vec<Placed<ExecutorId, WorkerId>>,
    pub shards: Vec<Placed<ShardId, ServerId>>,
    pub live_workers: Vec<WorkerId>,
    pub live_servers: Vec<ServerId>,
}

impl RebalanceInput {
    /// The input for the master's maps, sizing each executor and shard with the given
    /// functions (bytes of state a move would ship).
    pub fn from_maps(
        executors: &ExecutorMap,
        executor_bytes: impl Fn(ExecutorId) -> u64,
        shards: &ShardMap,
        shard_bytes: impl Fn(ShardId) -> u64,
        live_workers: &[WorkerId],
        live_servers: &[ServerId],
    ) -> Self {
        let executors = executors
            .iter()
            .map(|(item, owner)| Placed {
                item,
                owner,
                bytes: executor_bytes(item),
            })
            .collect();
        let shards = (0..shards.num_shards())
            .map(ShardId)
            .filter_map(|item| {
                let owner = shards.server_of(item).ok()?;
                Some(Placed {
                    item,
                    owner,
                    bytes: shard_bytes(item),
                })
            })
            .collect();
        Self {
            executors,
            shards,
            live_workers: live_workers.to_vec(),
            live_servers: live_servers.to_vec(),
        }
    }
}

/// The moves that re-balance a job, executors and shards planned independently.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebalancePlan {
    /// Sorted by executor id; each executor at most once.
    pub executor_moves: Vec<Move<ExecutorId, WorkerId>>,
    /// Sorted by shard id; each shard at most once.
    pub shard_moves: Vec<Move<ShardId, ServerId>>,
}

impl RebalancePlan {
    /// True when nothing moves.
    pub fn is_empty(&self) -> bool {
        self.executor_moves.is_empty() && self.shard_moves.is_empty()
    }

    /// Number of moves, executors and shards together.
    pub fn len(&self) -> usize {
        self.executor_moves.len() + self.shard_moves.len()
    }

    /// Bytes of executor state and of shards that the plan ships, as sized in the input.
    pub fn bytes_moved(&self) -> u128 {
        let executors = self.executor_moves.iter().map(|m| u128::from(m.bytes));
        let shards = self.shard_moves.iter().map(|m| u128::from(m.bytes));
        executors.chain(shards).sum()
    }

    /// Records every move in the maps, once the shell has carried them out.
    ///
    /// All-or-nothing: if any move names an unknown item, names an item twice, or does not
    /// start from the item's current owner (a stale plan), both maps are left unchanged.
    pub fn apply(
        &self,
        executors: &mut ExecutorMap,
        shards: &mut ShardMap,
    ) -> Result<(), RebalanceError> {
        check_moves(&self.executor_moves, |e| executors.worker_of(e).ok()).map_err(
            |bad| match bad {
                BadMove::Unknown(e) => RebalanceError::UnknownExecutor(e),
                BadMove::Twice(e) => RebalanceError::DuplicateExecutorMove(e),
                BadMove::Stale {
                    item,
                    planned_from,
                    actual,
                } => RebalanceError::StaleExecutorMove {
                    executor: item,
                    planned_from,
                    actual,
                },
            },
        )?;
        check_moves(&self.shard_moves, |s| shards.server_of(s).ok()).map_err(|bad| match bad {
            BadMove::Unknown(s) => RebalanceError::UnknownShard(s),
            BadMove::Twice(s) => RebalanceError::DuplicateShardMove(s),
            BadMove::Stale {
                item,
                planned_from,
                actual,
            } => RebalanceError::StaleShardMove {
                shard: item,
                planned_from,
                actual,
            },
        })?;
        // Checked above: every item is known, so `assign` cannot fail.
        for m in &self.executor_moves {
            executors
                .assign(m.item, m.to)
                .map_err(|_| RebalanceError::UnknownExecutor(m.item))?;
        }
        for m in &self.shard_moves {
            shards
                .assign(m.item, m.to)
                .map_err(|_| RebalanceError::UnknownShard(m.item))?;
        }
        Ok(())
    }
}

enum BadMove<I, N> {
    Unknown(I),
    Twice(I),
    Stale { item: I, planned_from: N, actual: N },
}

/// Every move names a known item, at most once, and starts where the item is now.
fn check_moves<I: Ord + Copy, N: PartialEq + Copy>(
    moves: &[Move<I, N>],
    owner_of: impl Fn(I) -> Option<N>,
) -> Result<(), BadMove<I, N>> {
    let mut seen = BTreeSet::new();
    for m in moves {
        let actual = owner_of(m.item).ok_or(BadMove::Unknown(m.item))?;
        if !seen.insert(m.item) {
            return Err(BadMove::Twice(m.item));
        }
        if actual != m.from {
            return Err(BadMove::Stale {
                item: m.item,
                planned_from: m.from,
                actual,
            });
        }
    }
    Ok(())
}

/// Balances executors over the live workers (see the module guarantees).
pub fn plan_executors(
    executors: &[Placed<ExecutorId, WorkerId>],
    live_workers: &[WorkerId],
) -> Result<Vec<Move<ExecutorId, WorkerId>>, RebalanceError> {
    balance(executors, live_workers).map_err(|e| match e {
        BalanceError::DuplicateItem(id) => RebalanceError::DuplicateExecutor(id),
        BalanceError::NoLiveNode { items } => RebalanceError::NoLiveWorker { executors: items },
    })
}

/// Balances shards over the live servers (see the module guarantees).
pub fn plan_shards(
    shards: &[Placed<ShardId, ServerId>],
    live_servers: &[ServerId],
) -> Result<Vec<Move<ShardId, ServerId>>, RebalanceError> {
    balance(shards, live_servers).map_err(|e| match e {
        BalanceError::DuplicateItem(id) => RebalanceError::DuplicateShard(id),
        BalanceError::NoLiveNode { items } => RebalanceError::NoLiveServer { shards: items },
    })
}

/// Plans executors and shards. Executors are checked first: if both are invalid, the
/// executors' error is the one returned.
pub fn plan_rebalance(input: &RebalanceInput) -> Result<RebalancePlan, RebalanceError> {
    Ok(RebalancePlan {
        executor_moves: plan_executors(&input.executors, &input.live_workers)?,
        shard_moves: plan_shards(&input.shards, &input.live_servers)?,
    })
}
