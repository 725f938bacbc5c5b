//! A seeded, deterministic discrete-event simulator of harp's consistency machinery.
//!
//! One master with a random driver ([`master`]), worker nodes each with its own cache,
//! update log and flush book ([`node`]), and servers holding i64 rows ([`server`]); every
//! message is an event on a link of [`net`]. There are no threads and no clocks: the event
//! loop of [`world`] lets a seeded `StdRng` pick the next enabled event.
//!
//! This module owns a schedule's [`Config`] (all drawn from its seed), the planted
//! [`Bug`]s (deliberate mistakes in the *simulated* node, to show the checker bites), the
//! [`Violation`]s the checks report, and the run's counters. [`run`] returns the first
//! violation of the Litz consistency rule or of exact accounting, checked against ghost
//! state ([`ghost`]) the simulated system never reads.

pub mod bits;
pub mod ghost;
pub mod master;
pub mod net;
pub mod node;
pub mod server;
pub mod world;

use ghost::Ghost;
use harp_core::ShardMap;
use net::Net;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt;
use world::Sim;

/// A deliberate mistake planted in the simulated node (mutation check of the checker).
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
    pub bug: Bug,
    /// Check at report time that every update of a reported task is applied.
    pub check_reports: bool,
}

impl Config {
    pub fn from_seed(seed: u64, bug: Bug) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        Self {
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
            bug,
            check_reports: true,
        }
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
    }
}

/// What an actor's handler may touch besides its own state.
pub struct Ctx<'a> {
    pub cfg: &'a Config,
    pub rng: &'a mut StdRng,
    pub net: &'a mut Net,
    pub ghost: &'a mut Ghost,
    pub shards: &'a ShardMap,
    pub stats: &'a mut Stats,
}

/// Runs one schedule to the end; the first violation found, or the run's counters.
pub fn run(cfg: &Config) -> Result<Stats, Violation> {
    Sim::new(cfg.clone()).run()
}
