//! A seeded, deterministic discrete-event simulator of harp's consistency machinery.
//!
//! One master with a random driver ([`master`]) and a shard mover ([`mover`]), worker nodes
//! each with its own cache, update log, flush book and view of the shard map ([`node`]),
//! and servers holding i64 rows ([`server`]) that hand shards to each other and forward
//! the traffic of shards they gave away ([`forwarding`]); every message is an event on a
//! link of [`net`]. There are no threads and no clocks: the event loop of [`world`] lets a
//! seeded `StdRng` pick the next enabled event.
//!
//! **Shard moves** (Litz §4.4, as `runtime/harp`'s servers do them): at random moments the
//! master moves a random shard to a random other server (schedules have none, a few, or
//! many; shards come back to old owners and move on in chains). The old owner takes the
//! rows out and sends them to the new one (`TakeOver`), then forwards every read and
//! update of the shard that reaches it, forever. Until the new owner acks the rows it
//! either holds those requests in arrival order ([`Handoff::Hold`]) or forwards them at
//! once ([`Handoff::InOrder`], drawn only for schedules whose links are FIFO). Once it has
//! the ack it tells the master, which then reroutes every node. Replies to forwarded
//! requests travel back along the forwarding chain to the original requester.
//!
//! This module owns a schedule's [`Config`] (all drawn from its seed), the planted
//! [`Bug`]s (deliberate mistakes in the *simulated* system, to show the checker bites),
//! the [`Violation`]s the checks report, and the run's counters. [`run`] returns the first
//! violation of the Litz consistency rule or of exact accounting, checked against ghost
//! state ([`ghost`]) the simulated system never reads.

pub mod bits;
pub mod forwarding;
pub mod ghost;
pub mod master;
pub mod mover;
pub mod net;
pub mod node;
pub mod server;
pub mod world;

use ghost::Ghost;
use net::Net;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt;
use world::Sim;

/// A deliberate mistake planted in the simulated system (mutation check of the checker).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    None,
    /// Serve every cached value, whatever its version.
    CacheAlwaysUsable,
    /// Wait on any fetch of the key in flight, whatever its version.
    WaitOnAnyFetch,
    /// Release completions as soon as the flush is sent, not when it is applied.
    ReportBeforeApplied,
    /// Release the tasks a flush covers when *that* flush is applied, ignoring older
    /// flushes still in flight that may carry part of their updates.
    ReleaseByOwnFlush,
    /// Servers forward a moving shard's requests at once ([`Handoff::InOrder`]) even on
    /// links that are not FIFO, so a forwarded request can overtake the rows.
    ForwardWithoutHoldUnordered,
    /// A server keeps applying the updates of a shard it handed off locally instead of
    /// forwarding them (they never reach the rows at the new owner).
    ApplyAfterHandOff,
}

/// How the old owner of a moving shard treats the shard's requests between sending the
/// rows and the new owner's ack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handoff {
    /// Keep them in arrival order; send them on when the ack arrives (always correct).
    Hold,
    /// Forward them at once (correct only when the link delivers in FIFO order).
    InOrder,
}

/// One schedule's shape, all drawn from its seed.
#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    pub nodes: usize,
    pub workers_per_node: u32,
    pub executors: u32,
    pub servers: u32,
    pub shards: u32,
    pub keys: usize,
    pub width: usize,
    pub task_budget: u32,
    pub max_fanout: u32,
    pub max_ops: u32,
    /// Per-link FIFO delivery; without it any in-flight message on a link may go next.
    pub fifo: bool,
    /// Nodes may also flush whenever their log holds deltas, mid-task.
    pub size_flushes: bool,
    /// Shard moves the master starts while tasks run (none with a single server).
    pub moves: u32,
    /// Weight of the "start a move" event against the others.
    pub move_rate: u32,
    /// Several shards may be on the move at once (the real master moves one at a time).
    pub overlapping_moves: bool,
    pub handoff: Handoff,
    pub bug: Bug,
    /// Check at report time that every update of a reported task is applied.
    pub check_reports: bool,
    /// Check that a server serves or applies only rows it holds (ghost custody).
    pub check_holder: bool,
}

impl Config {
    pub fn from_seed(seed: u64, bug: Bug) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut cfg = Self {
            seed,
            nodes: rng.random_range(1..=4),
            workers_per_node: rng.random_range(1..=2),
            executors: rng.random_range(1..=8),
            servers: rng.random_range(1..=3),
            shards: rng.random_range(1..=6),
            keys: rng.random_range(1..=12),
            width: rng.random_range(1..=3),
            task_budget: rng.random_range(5..=60),
            max_fanout: rng.random_range(1..=3),
            max_ops: rng.random_range(1..=4),
            fifo: rng.random_bool(0.5),
            size_flushes: rng.random_bool(0.5),
            // A quarter of the schedules move nothing; the others up to a dozen shards.
            moves: match rng.random_range(0..4) {
                0 => 0,
                1 => rng.random_range(1..=3),
                _ => rng.random_range(1..=12),
            },
            move_rate: 1 << rng.random_range(0..6),
            overlapping_moves: rng.random_bool(0.5),
            handoff: Handoff::Hold,
            bug,
            check_reports: true,
            check_holder: true,
        };
        // In-order hand-offs are correct only on FIFO links; the planted bug uses them anyway.
        let in_order = rng.random_bool(0.5);
        if (in_order && cfg.fifo) || bug == Bug::ForwardWithoutHoldUnordered {
            cfg.handoff = Handoff::InOrder;
        }
        cfg
    }
}

/// What a violation broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A task missed an update of a task whose completion the driver saw before its dispatch.
    StaleRead,
    /// A value is not the exact sum of the contributions it claims.
    WrongValue,
    /// A completion was reported before all of its updates were applied.
    ReportedEarly,
    /// Something happened twice (completion reported, contribution applied).
    Duplicate,
    /// An update never reached its server.
    Lost,
    /// The job stopped with work left, or ran away.
    Stuck,
    /// A message or core call the protocol does not allow.
    Protocol,
    /// A server served or applied rows of a shard it does not hold (ghost custody).
    WrongHolder,
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub kind: Kind,
    pub detail: String,
}

impl Violation {
    pub fn new(kind: Kind, detail: String) -> Self {
        Self { kind, detail }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.detail)
    }
}

/// Counters of one run, to show the schedules exercise what they should.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub events: u64,
    pub tasks_finished: u64,
    pub values_checked: u64,
    /// Values checked against a non-empty floor.
    pub floors_nonempty: u64,
    pub cache_hits: u64,
    pub shared_waits: u64,
    pub fetches: u64,
    pub flushes: u64,
    pub acks_out_of_order: u64,
    pub shard_moves: u64,
    /// Moves of a shard that had moved before (chains A→B→C).
    pub chained_moves: u64,
    /// Moves back to a server that held the shard before.
    pub moves_back: u64,
    /// Requests (or parts of them) a server sent on to a shard's new owner.
    pub forwards: u64,
    /// Forwards sent at once while the new owner had not acked the rows yet (in order).
    pub early_forwards: u64,
    /// Requests held until the new owner acked the rows.
    pub held_requests: u64,
    pub reroutes: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.events += o.events;
        self.tasks_finished += o.tasks_finished;
        self.values_checked += o.values_checked;
        self.floors_nonempty += o.floors_nonempty;
        self.cache_hits += o.cache_hits;
        self.shared_waits += o.shared_waits;
        self.fetches += o.fetches;
        self.flushes += o.flushes;
        self.acks_out_of_order += o.acks_out_of_order;
        self.shard_moves += o.shard_moves;
        self.chained_moves += o.chained_moves;
        self.moves_back += o.moves_back;
        self.forwards += o.forwards;
        self.early_forwards += o.early_forwards;
        self.held_requests += o.held_requests;
        self.reroutes += o.reroutes;
    }
}

/// What an actor's handler may touch besides its own state.
pub struct Ctx<'a> {
    pub cfg: &'a Config,
    pub rng: &'a mut StdRng,
    pub net: &'a mut Net,
    pub ghost: &'a mut Ghost,
    pub stats: &'a mut Stats,
}

/// Runs one schedule to the end; the first violation found, or the run's counters.
pub fn run(cfg: &Config) -> Result<Stats, Violation> {
    Sim::new(cfg.clone()).run()
}
