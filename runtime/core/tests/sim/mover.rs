//! The master's shard mover: the authoritative shard map, the moves it starts and their end.
//!
//! While tasks run, the event loop may let the master start a move (up to `Config::moves`
//! in a schedule, at rate `Config::move_rate`): a random shard not already on the move goes
//! to a random other server, by a `HandOff` to the shard's owner. One shard moves at a
//! time unless `Config::overlapping_moves`; the same shard never has two moves at once. When
//! the old owner reports the hand-off done, the master updates its map and reroutes every
//! node (each applies reroutes in the order they arrive, so a node may keep an older owner
//! for a while; that owner forwards).

use super::net::{Actor, Msg};
use super::{Config, Ctx, Kind, Violation};
use harp_core::{ServerId, ShardId, ShardMap};
use rand::Rng;
use std::collections::BTreeSet;

pub struct Mover {
    map: ShardMap,
    servers: u32,
    moves_left: u32,
    moving: BTreeSet<ShardId>,
    /// Every (shard, server) pair where the shard lived or was sent, to count moves back.
    visited: BTreeSet<(ShardId, ServerId)>,
    /// Shards that moved at least once, to count chains.
    moved: BTreeSet<ShardId>,
}

fn protocol(detail: String) -> Violation {
    Violation::new(Kind::Protocol, detail)
}

impl Mover {
    pub fn new(map: ShardMap, cfg: &Config) -> Self {
        let visited = (0..map.num_shards())
            .filter_map(|s| Some((ShardId(s), map.server_of(ShardId(s)).ok()?)))
            .collect();
        Self {
            map,
            servers: cfg.servers,
            moves_left: if cfg.servers > 1 { cfg.moves } else { 0 },
            moving: BTreeSet::new(),
            visited,
            moved: BTreeSet::new(),
        }
    }

    /// Where the master believes every shard lives.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }

    /// May a new move start now?
    pub fn can_start(&self, cfg: &Config) -> bool {
        self.moves_left > 0
            && (self.moving.len() as u32) < self.map.num_shards()
            && (cfg.overlapping_moves || self.moving.is_empty())
    }

    /// Starts moving a random shard that is not on the move to a random other server.
    pub fn start(&mut self, ctx: &mut Ctx) -> Result<(), Violation> {
        let idle: Vec<ShardId> = (0..self.map.num_shards())
            .map(ShardId)
            .filter(|s| !self.moving.contains(s))
            .collect();
        let shard = idle[ctx.rng.random_range(0..idle.len())];
        let from = self
            .map
            .server_of(shard)
            .map_err(|e| protocol(e.to_string()))?;
        let mut to = ctx.rng.random_range(0..self.servers - 1);
        if to >= from.0 {
            to += 1; // any server but `from`
        }
        let to = ServerId(to);
        self.moves_left -= 1;
        self.moving.insert(shard);
        ctx.stats.shard_moves += 1;
        ctx.stats.chained_moves += !self.moved.insert(shard) as u64;
        ctx.stats.moves_back += !self.visited.insert((shard, to)) as u64;
        let msg = Msg::HandOff { shard, to };
        ctx.net
            .send(ctx.rng, Actor::Master, Actor::Server(from), msg);
        Ok(())
    }

    /// Server `from` handed `shard` to `to`, which holds its rows: reroute every node.
    pub fn on_handed_off(
        &mut self,
        from: Actor,
        shard: ShardId,
        to: ServerId,
        ctx: &mut Ctx,
    ) -> Result<(), Violation> {
        let owner = self
            .map
            .server_of(shard)
            .map_err(|e| protocol(e.to_string()))?;
        if !self.moving.remove(&shard) || from != Actor::Server(owner) {
            return Err(protocol(format!(
                "{from:?} handed off {shard}, which {owner} was not moving"
            )));
        }
        self.map
            .assign(shard, to)
            .map_err(|e| protocol(e.to_string()))?;
        for node in 0..ctx.cfg.nodes {
            let msg = Msg::Reroute { shard, to };
            ctx.net.send(ctx.rng, Actor::Master, Actor::Node(node), msg);
            ctx.stats.reroutes += 1;
        }
        Ok(())
    }

    /// At the end of a job: no move left half done.
    pub fn check_quiescent(&self) -> Result<(), Violation> {
        match self.moving.first() {
            Some(shard) => Err(Violation::new(
                Kind::Stuck,
                format!("{shard} never finished moving"),
            )),
            None => Ok(()),
        }
    }
}
