//! The simulated world: every actor, the network, and the event loop that picks, with
//! the seeded rng, the next event among those enabled (a deliverable message, a runnable
//! task step, a requested or size-bound flush, the start of a shard move), weighted by
//! per-link and per-node speeds and the move rate drawn per schedule. It routes messages
//! to actors, checks each report of completions against the ghost record of applied
//! updates, and checks exact accounting once nothing is left in flight: every row, at the
//! server holding its shard per ghost custody, is the exact sum of its updates.

use super::ghost::Ghost;
use super::master::Master;
use super::mover::Mover;
use super::net::{Actor, Msg, Net};
use super::node::Node;
use super::server::Server;
use super::{Config, Ctx, Kind, Stats, Violation};
use harp_core::{shard_of, ExecutorMap, ParamKey, ServerId, ShardId, ShardMap, TableId};
use harp_core::{TaskId, WorkerId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The next event.
#[derive(Clone, Copy)]
enum Event {
    Deliver(Actor, Actor, usize),
    Step(usize, TaskId),
    Flush(usize),
    SizeFlush(usize),
    StartMove,
}

const MAX_EVENTS: u64 = 1_000_000;

pub struct Sim {
    cfg: Config,
    rng: StdRng,
    net: Net,
    ghost: Ghost,
    stats: Stats,
    master: Master,
    mover: Mover,
    nodes: Vec<Node>,
    /// Node of each worker, indexed by worker id.
    node_of: Vec<usize>,
    node_speed: Vec<u32>,
    servers: Vec<Server>,
}

/// A [`Ctx`] borrowing the shared parts of a `Sim`, leaving its actors free.
macro_rules! ctx {
    ($sim:ident) => {
        Ctx {
            cfg: &$sim.cfg,
            rng: &mut $sim.rng,
            net: &mut $sim.net,
            ghost: &mut $sim.ghost,
            stats: &mut $sim.stats,
        }
    };
}

impl Sim {
    pub fn new(cfg: Config) -> Self {
        let mut rng = StdRng::seed_from_u64(cfg.seed ^ 0x5EED_5C4E_D01E_0F0F);
        let workers: Vec<WorkerId> = (0..cfg.nodes as u32 * cfg.workers_per_node)
            .map(WorkerId)
            .collect();
        let node_of: Vec<usize> = workers
            .iter()
            .map(|w| (w.0 / cfg.workers_per_node) as usize)
            .collect();
        let executors = ExecutorMap::round_robin(cfg.executors, &workers).expect("workers");
        let server_ids: Vec<ServerId> = (0..cfg.servers).map(ServerId).collect();
        let shards = ShardMap::round_robin(cfg.shards, &server_ids).expect("servers");
        let nodes = (0..cfg.nodes)
            .map(|n| {
                let hosted: Vec<_> = executors
                    .iter()
                    .filter(|(_, w)| node_of[w.0 as usize] == n)
                    .collect();
                Node::new(n, &hosted, shards.clone())
            })
            .collect();
        let ghost = Ghost::new(cfg.keys, cfg.width, &shards);
        let node_speed = (0..cfg.nodes)
            .map(|_| 1 << rng.random_range(0..6))
            .collect();
        Self {
            net: Net::new(cfg.fifo),
            master: Master::new(executors, &ghost),
            mover: Mover::new(shards, &cfg),
            servers: server_ids
                .iter()
                .map(|s| Server::new(*s, cfg.width, cfg.shards))
                .collect(),
            nodes,
            node_of,
            node_speed,
            ghost,
            stats: Stats::default(),
            rng,
            cfg,
        }
    }

    /// Runs the job to its end; the first violation found, or the run's counters.
    pub fn run(mut self) -> Result<Stats, Violation> {
        self.master.start(&mut ctx!(self))?;
        let mut links = Vec::new();
        let mut tasks = Vec::new();
        let mut events: Vec<(Event, u64)> = Vec::new();
        loop {
            events.clear();
            links.clear();
            self.net.deliverable(&mut links);
            events.extend(
                links
                    .iter()
                    .map(|&(f, t, i, w)| (Event::Deliver(f, t, i), w as u64)),
            );
            for node in &self.nodes {
                let speed = self.node_speed[node.id] as u64;
                tasks.clear();
                node.runnable(&mut tasks);
                events.extend(tasks.iter().map(|t| (Event::Step(node.id, *t), speed)));
                if node.flush_requests > 0 {
                    events.push((Event::Flush(node.id), speed));
                }
                if self.cfg.size_flushes && node.has_updates() {
                    events.push((Event::SizeFlush(node.id), 1));
                }
            }
            if self.master.busy() && self.mover.can_start(&self.cfg) {
                events.push((Event::StartMove, self.cfg.move_rate as u64));
            }
            if events.is_empty() {
                break;
            }
            let total: u64 = events.iter().map(|(_, w)| w).sum();
            let mut pick = self.rng.random_range(0..total);
            let event = events
                .iter()
                .find(|(_, w)| match pick.checked_sub(*w) {
                    Some(rest) => {
                        pick = rest;
                        false
                    }
                    None => true,
                })
                .map(|(e, _)| *e)
                .expect("pick < total weight");
            self.stats.events += 1;
            if self.stats.events > MAX_EVENTS {
                return Err(Violation::new(Kind::Stuck, "the job never ends".into()));
            }
            self.handle(event)?;
        }
        self.check_end()?;
        Ok(self.stats)
    }

    fn handle(&mut self, event: Event) -> Result<(), Violation> {
        match event {
            Event::Deliver(from, to, index) => {
                let msg = self.net.take(from, to, index);
                self.deliver(from, to, msg)
            }
            Event::Step(n, task) => self.nodes[n].step(task, &mut ctx!(self)),
            Event::Flush(n) => {
                let released = self.nodes[n].flush(true, &mut ctx!(self))?;
                self.report(n, released)
            }
            Event::SizeFlush(n) => {
                let released = self.nodes[n].flush(false, &mut ctx!(self))?;
                self.report(n, released)
            }
            Event::StartMove => self.mover.start(&mut ctx!(self)),
        }
    }

    fn deliver(&mut self, from: Actor, to: Actor, msg: Msg) -> Result<(), Violation> {
        match (to, msg) {
            (Actor::Worker(w), Msg::Run(tasks)) => {
                self.nodes[self.node_of[w.0 as usize]].on_run(w, tasks)
            }
            (Actor::Server(s), msg) => {
                self.servers[s.0 as usize].on_message(from, msg, &mut ctx!(self))
            }
            (Actor::Node(n), Msg::Rows { fetch, rows }) => {
                self.nodes[n].on_rows(fetch, rows, &mut ctx!(self))
            }
            (Actor::Node(n), Msg::Applied { flush }) => {
                let released = self.nodes[n].on_applied(flush, &mut ctx!(self))?;
                self.report(n, released)
            }
            (Actor::Node(n), Msg::Reroute { shard, to }) => self.nodes[n].on_reroute(shard, to),
            (Actor::Master, Msg::Completed(tasks)) => {
                self.master.on_completed(tasks, &mut ctx!(self))
            }
            (Actor::Master, Msg::HandedOff { shard, to }) => {
                self.mover.on_handed_off(from, shard, to, &mut ctx!(self))
            }
            (to, msg) => Err(Violation::new(
                Kind::Protocol,
                format!("{to:?} cannot handle {msg:?}"),
            )),
        }
    }

    /// Node `n` released `tasks`: check their updates are applied, report them to the master.
    fn report(&mut self, n: usize, tasks: Vec<TaskId>) -> Result<(), Violation> {
        if tasks.is_empty() {
            return Ok(());
        }
        if self.cfg.check_reports {
            for &task in &tasks {
                for &c in self.ghost.of_task(task) {
                    let key = self.ghost.get(c).key;
                    if !self.ghost.is_applied(c) {
                        return Err(Violation::new(
                            Kind::ReportedEarly,
                            format!("{task} reported before its update #{c} of {key} was applied"),
                        ));
                    }
                }
            }
        }
        self.net.send(
            &mut self.rng,
            Actor::Node(n),
            Actor::Master,
            Msg::Completed(tasks),
        );
        Ok(())
    }

    /// Nothing is in flight: every task completed once, every node, server and move is
    /// idle, the master's map names each shard's holder, and every row, at the server
    /// holding its shard, is exactly the sum of every update made to it.
    fn check_end(&self) -> Result<(), Violation> {
        let (dispatched, completed) = (self.master.dispatched(), self.master.completed());
        if dispatched != completed as u64 {
            return Err(Violation::new(
                Kind::Stuck,
                format!("{dispatched} tasks dispatched, {completed} completed"),
            ));
        }
        if self.net.in_flight() != 0 {
            return Err(Violation::new(
                Kind::Stuck,
                "messages left in flight".into(),
            ));
        }
        for node in &self.nodes {
            node.check_quiescent()?;
        }
        for server in &self.servers {
            server.check_quiescent()?;
        }
        self.mover.check_quiescent()?;
        for shard in (0..self.cfg.shards).map(ShardId) {
            let holder = self.ghost.holder(shard);
            if self.mover.map().server_of(shard).ok() != holder {
                return Err(Violation::new(
                    Kind::Protocol,
                    format!("the master places {shard} elsewhere than {holder:?}"),
                ));
            }
        }
        for row in 0..self.cfg.keys as u64 {
            let key = ParamKey::new(TableId(0), row);
            let all = self.ghost.all_of_key(key);
            let expected = self.ghost.sum(&all);
            let shard = shard_of(key, self.cfg.shards);
            let holder = self.ghost.holder(shard).ok_or_else(|| {
                Violation::new(Kind::Lost, format!("the rows of {shard} never arrived"))
            })?;
            let server = &self.servers[holder.0 as usize];
            let (got, contribs) = match server.value(key) {
                Some(v) => (v.row.as_i64().unwrap_or(&[]).to_vec(), v.contribs.clone()),
                None => (vec![0; self.cfg.width], Default::default()),
            };
            if got != expected || !contribs.same_as(&all) {
                return Err(Violation::new(
                    Kind::Lost,
                    format!("{key} ends at {got:?}, but its updates sum to {expected:?}"),
                ));
            }
        }
        Ok(())
    }
}
