//! The simulated network: actors, messages, and links with random speeds.
//!
//! Every message is an in-flight event on a link `(from, to)`. With `fifo` a link delivers
//! in send order (only its head is deliverable); without it any message on the link may
//! go next. Each link gets a random weight when first used, so some links are much slower
//! than others and deliveries reorder heavily across links.

use super::ghost::{Floor, Value};
use harp_core::WorkerId;
use harp_core::{ExecutorId, FlushId, ParamKey, RowData, ServerId, ShardId, TaskId, Version};
use rand::rngs::StdRng;
use rand::Rng;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

/// Who sends and receives messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Actor {
    Master,
    Worker(WorkerId),
    Node(usize),
    Server(ServerId),
}

/// One step of a micro-task's program; the task yields after each.
#[derive(Clone, Debug)]
pub enum Op {
    Read(Vec<ParamKey>),
    Update(Vec<(ParamKey, Vec<i64>)>),
}

/// A dispatched micro-task.
#[derive(Clone, Debug)]
pub struct TaskSpec {
    pub id: TaskId,
    pub executor: ExecutorId,
    pub version: Version,
    pub ops: Vec<Op>,
    /// Ghost data: what the task must observe (never used by the system, only checked).
    pub floor: Rc<Floor>,
}

/// What travels between actors.
///
/// Requests (`Get`, `Apply`) go from a node to a server, or from a server that gave a shard
/// away to the server it gave it to (a forward); the answer (`Rows`, `Applied`) goes back
/// to whoever sent the request, under the id the sender chose.
#[derive(Debug)]
pub enum Msg {
    /// master → worker: micro-tasks to run.
    Run(Vec<TaskSpec>),
    /// → server: read these rows.
    Get { fetch: u64, keys: Vec<ParamKey> },
    /// server →: the rows of a `Get`, in order.
    Rows { fetch: u64, rows: Vec<Value> },
    /// → server: one flush's aggregated deltas for this server (ghost: contributions).
    Apply {
        flush: FlushId,
        updates: Vec<(ParamKey, RowData, super::bits::Bits)>,
    },
    /// server →: every delta of the `Apply` is applied.
    Applied { flush: FlushId },
    /// node → master: completions whose updates are applied.
    Completed(Vec<TaskId>),
    /// master → server: move `shard` to server `to`.
    HandOff { shard: ShardId, to: ServerId },
    /// old owner → new owner: the shard's rows.
    TakeOver {
        shard: ShardId,
        rows: Vec<(ParamKey, Value)>,
    },
    /// new owner → old owner: it holds the rows.
    TookOver { shard: ShardId },
    /// old owner → master: the move is done.
    HandedOff { shard: ShardId, to: ServerId },
    /// master → node: `shard` now lives on `to`.
    Reroute { shard: ShardId, to: ServerId },
}

struct Link {
    queue: VecDeque<Msg>,
    weight: u32,
}

/// Every message in flight.
pub struct Net {
    fifo: bool,
    links: BTreeMap<(Actor, Actor), Link>,
    pub sent: u64,
}

impl Net {
    pub fn new(fifo: bool) -> Self {
        Self {
            fifo,
            links: BTreeMap::new(),
            sent: 0,
        }
    }

    pub fn send(&mut self, rng: &mut StdRng, from: Actor, to: Actor, msg: Msg) {
        self.sent += 1;
        self.links
            .entry((from, to))
            .or_insert_with(|| Link {
                queue: VecDeque::new(),
                // 1, 2, 4, ... 256: a slow link waits ~256 times longer than a fast one.
                weight: 1 << rng.random_range(0..9),
            })
            .queue
            .push_back(msg);
    }

    /// Deliverable messages as `(from, to, index in link, weight)`.
    pub fn deliverable(&self, out: &mut Vec<(Actor, Actor, usize, u32)>) {
        for ((from, to), link) in &self.links {
            let n = if self.fifo {
                link.queue.len().min(1)
            } else {
                link.queue.len()
            };
            out.extend((0..n).map(|i| (*from, *to, i, link.weight)));
        }
    }

    pub fn take(&mut self, from: Actor, to: Actor, index: usize) -> Msg {
        let link = self.links.get_mut(&(from, to)).expect("chosen link exists");
        link.queue.remove(index).expect("chosen message exists")
    }

    pub fn in_flight(&self) -> usize {
        self.links.values().map(|l| l.queue.len()).sum()
    }
}
