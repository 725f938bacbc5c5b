//! A simulated worker node, composed from harp-core exactly as `runtime/harp` composes it:
//! one parameter cache (versioned entries plus fetches in flight that same-or-older tasks
//! may wait on), one `UpdateLog`, one `FlushBook`, shared by the node's workers; each
//! executor runs its micro-tasks in order; a worker whose running count drops to zero asks
//! for a flush, which runs later as its own event. With `size_flushes` the node may also
//! flush at any moment its log holds deltas (DESIGN §2.2's size/time bound), so a running
//! task's updates can straddle flushes.
//!
//! The node sends reads and flush parts to the servers its own view of the shard map
//! names; the master reroutes it after each shard move, in whatever order reroutes arrive
//! (an old owner forwards what still reaches it).
//!
//! Beside the `UpdateLog` the node keeps a shadow log of contribution ids per key (ghost
//! data), drained with it, so servers can check aggregation exactly.

use super::bits::Bits;
use super::ghost::Value;
use super::net::{Actor, Msg, Op, TaskSpec};
use super::{Bug, Ctx, Kind, Violation};
use harp_core::{cached_value_usable, should_replace_cached};
use harp_core::{ExecutorId, FlushBook, FlushId, ParamKey, RowData, ServerId, TaskId, UpdateLog};
use harp_core::{ShardId, ShardMap, Version, WorkerId};
use std::collections::{BTreeMap, VecDeque};

struct Cached {
    version: Version,
    value: Value,
}

/// A fetch in flight that tasks of version `<= version` may wait on.
struct Pending {
    version: Version,
    fetch: u64,
    index: usize,
}

struct Fetch {
    version: Version,
    keys: Vec<ParamKey>,
    /// (task, slot in the task's read, index in this fetch)
    waiters: Vec<(TaskId, usize, usize)>,
}

struct Running {
    spec: TaskSpec,
    worker: WorkerId,
    next: usize,
    read: Option<Read>,
}

/// A read waiting for fetches.
struct Read {
    keys: Vec<ParamKey>,
    slots: Vec<Option<Value>>,
    missing: usize,
}

pub struct Node {
    pub id: usize,
    /// Where this node sends each shard's traffic.
    shards: ShardMap,
    running: BTreeMap<WorkerId, usize>,
    executor_worker: BTreeMap<ExecutorId, WorkerId>,
    queues: BTreeMap<ExecutorId, VecDeque<TaskId>>,
    tasks: BTreeMap<TaskId, Running>,
    cache: BTreeMap<ParamKey, Cached>,
    pending: BTreeMap<ParamKey, Pending>,
    fetches: BTreeMap<u64, Fetch>,
    next_fetch: u64,
    log: UpdateLog,
    shadow: BTreeMap<ParamKey, Bits>,
    book: FlushBook<()>,
    acks_due: BTreeMap<FlushId, usize>,
    /// Flushes asked for (a worker went idle) and not yet run.
    pub flush_requests: usize,
    /// For `Bug::ReleaseByOwnFlush`: finished tasks no flush covers yet, and each
    /// flush's covered tasks.
    uncovered: Vec<TaskId>,
    covers: BTreeMap<FlushId, Vec<TaskId>>,
}

fn protocol(detail: String) -> Violation {
    Violation::new(Kind::Protocol, detail)
}

impl Node {
    pub fn new(id: usize, executors: &[(ExecutorId, WorkerId)], shards: ShardMap) -> Self {
        Self {
            id,
            shards,
            running: BTreeMap::new(),
            executor_worker: executors.iter().copied().collect(),
            queues: BTreeMap::new(),
            tasks: BTreeMap::new(),
            cache: BTreeMap::new(),
            pending: BTreeMap::new(),
            fetches: BTreeMap::new(),
            next_fetch: 0,
            log: UpdateLog::new(),
            shadow: BTreeMap::new(),
            book: FlushBook::new(),
            acks_due: BTreeMap::new(),
            flush_requests: 0,
            uncovered: Vec::new(),
            covers: BTreeMap::new(),
        }
    }

    /// A worker received micro-tasks: count them all, then queue each on its executor.
    pub fn on_run(&mut self, worker: WorkerId, tasks: Vec<TaskSpec>) -> Result<(), Violation> {
        *self.running.entry(worker).or_default() += tasks.len();
        for spec in tasks {
            if self.executor_worker.get(&spec.executor) != Some(&worker) {
                return Err(protocol(format!(
                    "{worker} does not host {}",
                    spec.executor
                )));
            }
            self.queues
                .entry(spec.executor)
                .or_default()
                .push_back(spec.id);
            let running = Running {
                spec,
                worker,
                next: 0,
                read: None,
            };
            self.tasks.insert(running.spec.id, running);
        }
        Ok(())
    }

    /// The master says `shard` now lives on `to`.
    pub fn on_reroute(&mut self, shard: ShardId, to: ServerId) -> Result<(), Violation> {
        self.shards
            .assign(shard, to)
            .map(|_| ())
            .map_err(|e| protocol(format!("reroute: {e}")))
    }

    /// Tasks that can take their next step: heads of executor queues not waiting on a read.
    pub fn runnable(&self, out: &mut Vec<TaskId>) {
        for queue in self.queues.values() {
            if let Some(id) = queue.front() {
                if self.tasks[id].read.is_none() {
                    out.push(*id);
                }
            }
        }
    }

    /// Runs one step of `id`: an op, or finishing once every op ran.
    pub fn step(&mut self, id: TaskId, ctx: &mut Ctx) -> Result<(), Violation> {
        let task = self.tasks.get_mut(&id).expect("runnable task exists");
        let Some(op) = task.spec.ops.get(task.next).cloned() else {
            return self.finish(id, ctx);
        };
        match op {
            Op::Read(keys) => self.start_read(id, keys, ctx),
            Op::Update(deltas) => {
                for (key, delta) in deltas {
                    let contribution = ctx.ghost.add(id, key, delta.clone());
                    self.log
                        .record_owned(key, RowData::I64(delta))
                        .map_err(|e| protocol(format!("update log refused a delta: {e}")))?;
                    self.shadow.entry(key).or_default().insert(contribution);
                }
                task.next += 1;
                Ok(())
            }
        }
    }

    fn start_read(
        &mut self,
        id: TaskId,
        keys: Vec<ParamKey>,
        ctx: &mut Ctx,
    ) -> Result<(), Violation> {
        let version = self.tasks[&id].spec.version;
        let mut slots = vec![None; keys.len()];
        let mut missing = 0;
        let mut to_fetch: BTreeMap<ServerId, Vec<usize>> = BTreeMap::new();
        for (i, key) in keys.iter().enumerate() {
            if let Some(c) = self.cache.get(key) {
                if ctx.cfg.bug == Bug::CacheAlwaysUsable || cached_value_usable(version, c.version)
                {
                    slots[i] = Some(c.value.clone());
                    ctx.stats.cache_hits += 1;
                    continue;
                }
            }
            missing += 1;
            if let Some(p) = self.pending.get(key) {
                if ctx.cfg.bug == Bug::WaitOnAnyFetch || cached_value_usable(version, p.version) {
                    let fetch = self
                        .fetches
                        .get_mut(&p.fetch)
                        .expect("pending fetch in flight");
                    fetch.waiters.push((id, i, p.index));
                    ctx.stats.shared_waits += 1;
                    continue;
                }
            }
            to_fetch
                .entry(self.shards.server_of_key(*key))
                .or_default()
                .push(i);
        }
        for (server, idxs) in to_fetch {
            let fetch = self.next_fetch;
            self.next_fetch += 1;
            let fetch_keys: Vec<ParamKey> = idxs.iter().map(|&i| keys[i]).collect();
            for (index, key) in fetch_keys.iter().enumerate() {
                let keep = self
                    .pending
                    .get(key)
                    .is_some_and(|p| !should_replace_cached(p.version, version));
                if !keep {
                    self.pending.insert(
                        *key,
                        Pending {
                            version,
                            fetch,
                            index,
                        },
                    );
                }
            }
            let waiters = idxs
                .iter()
                .enumerate()
                .map(|(index, &i)| (id, i, index))
                .collect();
            self.fetches.insert(
                fetch,
                Fetch {
                    version,
                    keys: fetch_keys.clone(),
                    waiters,
                },
            );
            let msg = Msg::Get {
                fetch,
                keys: fetch_keys,
            };
            ctx.net
                .send(ctx.rng, Actor::Node(self.id), Actor::Server(server), msg);
            ctx.stats.fetches += 1;
        }
        self.tasks.get_mut(&id).expect("task exists").read = Some(Read {
            keys,
            slots,
            missing,
        });
        if missing == 0 {
            self.complete_read(id, ctx)?;
        }
        Ok(())
    }

    /// Every slot of `id`'s read is filled: check each value, move to the next op.
    fn complete_read(&mut self, id: TaskId, ctx: &mut Ctx) -> Result<(), Violation> {
        let task = self.tasks.get_mut(&id).expect("reading task exists");
        let read = task.read.take().expect("task is reading");
        for (key, slot) in read.keys.iter().zip(&read.slots) {
            let value = slot.as_ref().expect("every slot filled");
            let bites = ctx.ghost.check_read(id, &task.spec.floor, *key, value)?;
            ctx.stats.values_checked += 1;
            ctx.stats.floors_nonempty += bites as u64;
        }
        task.next += 1;
        Ok(())
    }

    /// A server answered fetch `fetch`: fill the cache, release the pending entries that
    /// are still this fetch's, and hand the rows to every task waiting on them.
    pub fn on_rows(
        &mut self,
        fetch: u64,
        rows: Vec<Value>,
        ctx: &mut Ctx,
    ) -> Result<(), Violation> {
        let f = self
            .fetches
            .remove(&fetch)
            .ok_or_else(|| protocol(format!("reply to unknown fetch {fetch}")))?;
        if rows.len() != f.keys.len() {
            return Err(protocol(format!("fetch {fetch}: short reply")));
        }
        for (key, row) in f.keys.iter().zip(&rows) {
            let keep = self
                .cache
                .get(key)
                .is_some_and(|c| !should_replace_cached(c.version, f.version));
            if !keep {
                let entry = Cached {
                    version: f.version,
                    value: row.clone(),
                };
                self.cache.insert(*key, entry);
            }
            if self.pending.get(key).is_some_and(|p| p.fetch == fetch) {
                self.pending.remove(key);
            }
        }
        for (task, slot, index) in f.waiters {
            let read = self
                .tasks
                .get_mut(&task)
                .and_then(|t| t.read.as_mut())
                .expect("waiter is reading");
            read.slots[slot] = Some(rows[index].clone());
            read.missing -= 1;
            if read.missing == 0 {
                self.complete_read(task, ctx)?;
            }
        }
        Ok(())
    }

    fn finish(&mut self, id: TaskId, ctx: &mut Ctx) -> Result<(), Violation> {
        let task = self.tasks.remove(&id).expect("finishing task exists");
        let queue = self
            .queues
            .get_mut(&task.spec.executor)
            .expect("queue exists");
        if queue.pop_front() != Some(id) {
            return Err(protocol(format!(
                "{id} finished out of its executor's order"
            )));
        }
        self.book.task_finished(id, ());
        self.uncovered.push(id);
        ctx.stats.tasks_finished += 1;
        let running = self.running.get_mut(&task.worker).expect("worker counted");
        *running -= 1;
        if *running == 0 {
            self.flush_requests += 1;
        }
        Ok(())
    }

    /// Does the update log hold deltas (a size-bound flush may run)?
    pub fn has_updates(&self) -> bool {
        !self.log.is_empty()
    }

    /// Runs one flush: a requested one (`on_idle`, like `flush_and_report` in
    /// `runtime/harp`) or a size-bound one. Returns the completions it releases at once
    /// (an empty flush, or the `ReportBeforeApplied` bug).
    pub fn flush(&mut self, on_idle: bool, ctx: &mut Ctx) -> Result<Vec<TaskId>, Violation> {
        if on_idle {
            self.flush_requests -= 1;
            if self.book.unflushed_tasks() == 0 {
                return Ok(Vec::new()); // another flush already covers every finished task
            }
        }
        let flush = self.book.begin_flush();
        self.covers
            .insert(flush, std::mem::take(&mut self.uncovered));
        let mut shadow = std::mem::take(&mut self.shadow);
        let mut batches: BTreeMap<ServerId, Vec<_>> = BTreeMap::new();
        for (key, delta) in self.log.drain() {
            let contribs = shadow
                .remove(&key)
                .ok_or_else(|| protocol(format!("update log drained {key}, never recorded")))?;
            let server = self.shards.server_of_key(key);
            batches
                .entry(server)
                .or_default()
                .push((key, delta, contribs));
        }
        if let Some(key) = shadow.keys().next() {
            return Err(Violation::new(
                Kind::Lost,
                format!("update log lost the deltas of {key}"),
            ));
        }
        ctx.stats.flushes += 1;
        if batches.is_empty() {
            return self.applied(flush, ctx);
        }
        self.acks_due.insert(flush, batches.len());
        for (server, updates) in batches {
            let msg = Msg::Apply { flush, updates };
            ctx.net
                .send(ctx.rng, Actor::Node(self.id), Actor::Server(server), msg);
        }
        if ctx.cfg.bug == Bug::ReportBeforeApplied {
            self.acks_due.remove(&flush);
            return self.applied(flush, ctx);
        }
        Ok(Vec::new())
    }

    /// A server applied its part of `flush`. Returns the completions released.
    pub fn on_applied(&mut self, flush: FlushId, ctx: &mut Ctx) -> Result<Vec<TaskId>, Violation> {
        let Some(due) = self.acks_due.get_mut(&flush) else {
            if ctx.cfg.bug == Bug::ReportBeforeApplied {
                return Ok(Vec::new());
            }
            return Err(protocol(format!("ack of unknown flush {flush}")));
        };
        *due -= 1;
        if *due > 0 {
            return Ok(Vec::new());
        }
        self.acks_due.remove(&flush);
        self.applied(flush, ctx)
    }

    fn applied(&mut self, flush: FlushId, ctx: &mut Ctx) -> Result<Vec<TaskId>, Violation> {
        if self
            .acks_due
            .keys()
            .next()
            .is_some_and(|&older| older < flush)
        {
            ctx.stats.acks_out_of_order += 1;
        }
        let released = self
            .book
            .flush_applied(flush)
            .map_err(|e| protocol(format!("flush book: {e}")))?;
        let covered = self.covers.remove(&flush).unwrap_or_default();
        if ctx.cfg.bug == Bug::ReleaseByOwnFlush {
            return Ok(covered); // ignores the watermark: older flushes may be unapplied
        }
        Ok(released.into_iter().map(|(task, ())| task).collect())
    }

    /// At the end of a job: nothing may be left running, unflushed or unacknowledged.
    pub fn check_quiescent(&self) -> Result<(), Violation> {
        let leftovers = [
            ("tasks", self.tasks.len()),
            ("fetches", self.fetches.len()),
            ("pending book tasks", self.book.pending_tasks()),
            ("flushes in flight", self.book.flushes_in_flight()),
            ("unflushed log keys", self.log.len()),
            ("flush requests", self.flush_requests),
        ];
        for (what, n) in leftovers {
            if n != 0 {
                return Err(Violation::new(
                    Kind::Stuck,
                    format!("node {} ended with {n} {what}", self.id),
                ));
            }
        }
        Ok(())
    }
}
