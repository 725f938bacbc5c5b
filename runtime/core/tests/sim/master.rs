//! The simulated master and its random driver.
//!
//! The master tags every dispatched task with `VersionClock::current()` and routes it to
//! its executor's worker (`ExecutorMap`); it calls `on_completion()` for each completion
//! it hands to the driver. The driver dispatches a random initial batch and, on each
//! completion, 0..=fan-out new tasks to random executors until the task budget is spent
//! (at least one while nothing else is in flight, so jobs use their budget). The master
//! also keeps the ghost floor: the contributions of every completion handed so far.
//! Shard moves are the master's [`super::mover`].

use super::ghost::{Floor, Ghost};
use super::net::{Actor, Msg, Op, TaskSpec};
use super::{Ctx, Kind, Violation};
use harp_core::{ExecutorId, ExecutorMap, ParamKey, TableId, TaskId, VersionClock, WorkerId};
use rand::seq::index::sample;
use rand::Rng;
use std::collections::BTreeMap;
use std::rc::Rc;

pub struct Master {
    clock: VersionClock,
    executors: ExecutorMap,
    floor: Rc<Floor>,
    next_task: u64,
    in_flight: u64,
    /// Indexed by task id: has the driver been handed its completion?
    completed: Vec<bool>,
}

impl Master {
    pub fn new(executors: ExecutorMap, ghost: &Ghost) -> Self {
        Self {
            clock: VersionClock::new(),
            executors,
            floor: Rc::new(ghost.empty_floor()),
            next_task: 0,
            in_flight: 0,
            completed: Vec::new(),
        }
    }

    pub fn dispatched(&self) -> u64 {
        self.next_task
    }

    /// Are tasks dispatched and not yet completed?
    pub fn busy(&self) -> bool {
        self.in_flight > 0
    }

    pub fn completed(&self) -> usize {
        self.completed.iter().filter(|c| **c).count()
    }

    pub fn start(&mut self, ctx: &mut Ctx) -> Result<(), Violation> {
        let n = ctx
            .rng
            .random_range(1..=ctx.cfg.task_budget.min(2 * ctx.cfg.executors));
        self.dispatch(n, ctx)
    }

    /// A node reported completions whose updates are applied; hand them to the driver one by one.
    pub fn on_completed(&mut self, tasks: Vec<TaskId>, ctx: &mut Ctx) -> Result<(), Violation> {
        for task in tasks {
            let t = task.0 as usize;
            if t >= self.completed.len() || self.completed[t] {
                return Err(Violation::new(
                    Kind::Duplicate,
                    format!("{task} reported twice or never dispatched"),
                ));
            }
            self.completed[t] = true;
            self.in_flight -= 1;
            self.clock.on_completion();
            ctx.ghost.raise(Rc::make_mut(&mut self.floor), task);
            let left = ctx.cfg.task_budget - self.next_task as u32;
            let mut n = ctx.rng.random_range(0..=ctx.cfg.max_fanout).min(left);
            if self.in_flight == 0 && left > 0 {
                n = n.max(1);
            }
            self.dispatch(n, ctx)?;
        }
        Ok(())
    }

    fn dispatch(&mut self, n: u32, ctx: &mut Ctx) -> Result<(), Violation> {
        let version = self.clock.current();
        let mut per_worker: BTreeMap<WorkerId, Vec<TaskSpec>> = BTreeMap::new();
        for _ in 0..n {
            let executor = ExecutorId(ctx.rng.random_range(0..ctx.cfg.executors));
            let worker = self
                .executors
                .worker_of(executor)
                .map_err(|e| Violation::new(Kind::Protocol, e.to_string()))?;
            let id = TaskId(self.next_task);
            self.next_task += 1;
            self.completed.push(false);
            let spec = TaskSpec {
                id,
                executor,
                version,
                ops: random_program(ctx),
                floor: self.floor.clone(),
            };
            per_worker.entry(worker).or_default().push(spec);
        }
        for (worker, tasks) in per_worker {
            self.in_flight += tasks.len() as u64;
            ctx.net.send(
                ctx.rng,
                Actor::Master,
                Actor::Worker(worker),
                Msg::Run(tasks),
            );
        }
        Ok(())
    }
}

/// 1..=max_ops steps, each reading or updating a random non-empty subset of the keys.
fn random_program(ctx: &mut Ctx) -> Vec<Op> {
    let cfg = ctx.cfg;
    let rng = &mut *ctx.rng;
    let steps = rng.random_range(1..=cfg.max_ops);
    (0..steps)
        .map(|_| {
            let count = rng.random_range(1..=cfg.keys.min(4));
            let keys: Vec<ParamKey> = sample(rng, cfg.keys, count)
                .into_iter()
                .map(|row| ParamKey::new(TableId(0), row as u64))
                .collect();
            if rng.random_bool(0.5) {
                Op::Read(keys)
            } else {
                let deltas = keys
                    .into_iter()
                    .map(|k| (k, (0..cfg.width).map(|_| rng.random_range(1..=9)).collect()))
                    .collect();
                Op::Update(deltas)
            }
        })
        .collect()
}
