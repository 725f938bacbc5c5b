//! A simulated parameter server: holds i64 rows of the shards it owns, answers reads and
//! applies flush batches, and checks each batch against the ground truth (the aggregated
//! delta equals the sum of the contributions it claims, none applied twice, and, with
//! `check_holder`, that this server holds the shard's rows per ghost custody).
//!
//! It hands shards to other servers and forwards the traffic of the shards it gave away
//! ([`Forwarding`]): a request whose keys are partly elsewhere is split, its own part read
//! or applied here at once, the rest forwarded per shard, and answered to the requester
//! once every forwarded part is answered back here (replies retrace the chain).

use super::bits::Bits;
use super::forwarding::{Answered, Forwarding};
use super::ghost::Value;
use super::net::{Actor, Msg};
use super::{Bug, Ctx, Kind, Violation};
use harp_core::{shard_of, FlushId, ParamKey, RowData, ServerId, ShardId};
use std::collections::BTreeMap;

pub struct Server {
    pub id: ServerId,
    width: usize,
    num_shards: u32,
    rows: BTreeMap<ParamKey, Value>,
    forwarding: Forwarding,
}

type Update = (ParamKey, RowData, Bits);

fn protocol(detail: String) -> Violation {
    Violation::new(Kind::Protocol, detail)
}

impl Server {
    pub fn new(id: ServerId, width: usize, num_shards: u32) -> Self {
        Self {
            id,
            width,
            num_shards,
            rows: BTreeMap::new(),
            forwarding: Forwarding::default(),
        }
    }

    /// The row of `key` as this server stores it, if it ever touched it.
    pub fn value(&self, key: ParamKey) -> Option<&Value> {
        self.rows.get(&key)
    }

    pub fn on_message(&mut self, from: Actor, msg: Msg, ctx: &mut Ctx) -> Result<(), Violation> {
        match (from, msg) {
            (_, Msg::Get { fetch, keys }) => self.get(from, fetch, keys, ctx),
            (_, Msg::Apply { flush, updates }) => self.apply(from, flush, updates, ctx),
            (Actor::Server(_), Msg::Rows { fetch, rows }) => {
                let answered = self.forwarding.answered(fetch, rows)?;
                self.answer(answered, ctx)
            }
            (Actor::Server(_), Msg::Applied { flush }) => {
                let answered = self.forwarding.answered(flush, Vec::new())?;
                self.answer(answered, ctx)
            }
            (Actor::Master, Msg::HandOff { shard, to }) => self.hand_off(shard, to, ctx),
            (Actor::Server(_), Msg::TakeOver { shard, rows }) => {
                self.take_over(from, shard, rows, ctx)
            }
            (Actor::Server(_), Msg::TookOver { shard }) => self.acked(from, shard, ctx),
            (from, msg) => Err(protocol(format!(
                "{} cannot handle {msg:?} from {from:?}",
                self.id
            ))),
        }
    }

    fn shard(&self, key: ParamKey) -> ShardId {
        shard_of(key, self.num_shards)
    }

    /// With `check_holder`: this server holds `key`'s shard (ghost custody).
    fn check_holds(&self, key: ParamKey, what: &str, ctx: &Ctx) -> Result<(), Violation> {
        let shard = self.shard(key);
        let holder = ctx.ghost.holder(shard);
        if ctx.cfg.check_holder && holder != Some(self.id) {
            return Err(Violation::new(
                Kind::WrongHolder,
                format!("{} {what} {key} of {shard}, held by {holder:?}", self.id),
            ));
        }
        Ok(())
    }

    fn row(&mut self, key: ParamKey) -> &mut Value {
        let width = self.width;
        self.rows.entry(key).or_insert_with(|| Value {
            row: RowData::I64(vec![0; width]),
            contribs: Bits::default(),
        })
    }

    fn get(
        &mut self,
        from: Actor,
        fetch: u64,
        keys: Vec<ParamKey>,
        ctx: &mut Ctx,
    ) -> Result<(), Violation> {
        let mut rows = Vec::with_capacity(keys.len());
        // Positions of the keys of shards given away, by shard.
        let mut away: BTreeMap<ShardId, Vec<usize>> = BTreeMap::new();
        for (i, key) in keys.iter().enumerate() {
            let shard = self.shard(*key);
            if self.forwarding.gave_away(shard) {
                away.entry(shard).or_default().push(i);
                rows.push(None);
            } else {
                self.check_holds(*key, "served", ctx)?;
                rows.push(Some(self.row(*key).clone()));
            }
        }
        if away.is_empty() {
            let rows = rows.into_iter().flatten().collect();
            ctx.net.send(
                ctx.rng,
                Actor::Server(self.id),
                from,
                Msg::Rows { fetch, rows },
            );
            return Ok(());
        }
        let split = self.forwarding.split(from, fetch, Some(rows), away.len());
        for (shard, positions) in away {
            let keys = positions.iter().map(|&i| keys[i]).collect();
            let fetch = self.forwarding.part(split, positions);
            let msg = Msg::Get { fetch, keys };
            self.forwarding.send_on(self.id, shard, msg, ctx)?;
        }
        Ok(())
    }

    fn apply(
        &mut self,
        from: Actor,
        flush: FlushId,
        updates: Vec<Update>,
        ctx: &mut Ctx,
    ) -> Result<(), Violation> {
        // The planted bug applies here what belongs to shards given away.
        let forwards = ctx.cfg.bug != Bug::ApplyAfterHandOff;
        let mut away: BTreeMap<ShardId, Vec<Update>> = BTreeMap::new();
        for (key, delta, contribs) in updates {
            let shard = self.shard(key);
            if forwards && self.forwarding.gave_away(shard) {
                away.entry(shard).or_default().push((key, delta, contribs));
            } else {
                self.apply_here(key, delta, contribs, ctx)?;
            }
        }
        if away.is_empty() {
            let msg = Msg::Applied { flush };
            ctx.net.send(ctx.rng, Actor::Server(self.id), from, msg);
            return Ok(());
        }
        let split = self.forwarding.split(from, flush, None, away.len());
        for (shard, updates) in away {
            let flush = self.forwarding.part(split, Vec::new());
            let msg = Msg::Apply { flush, updates };
            self.forwarding.send_on(self.id, shard, msg, ctx)?;
        }
        Ok(())
    }

    fn apply_here(
        &mut self,
        key: ParamKey,
        delta: RowData,
        contribs: Bits,
        ctx: &mut Ctx,
    ) -> Result<(), Violation> {
        self.check_holds(key, "applied a delta to", ctx)?;
        let expected = ctx.ghost.sum(&contribs);
        if delta.as_i64() != Some(expected.as_slice()) {
            return Err(Violation::new(
                Kind::WrongValue,
                format!(
                    "flushed delta for {key} is {delta:?}, but its contributions {:?} sum to {expected:?}",
                    contribs.iter().collect::<Vec<_>>()
                ),
            ));
        }
        ctx.ghost.record_applied(key, &contribs)?;
        let value = self.row(key);
        value
            .row
            .add_assign(&delta)
            .map_err(|e| protocol(format!("server refused a delta: {e}")))?;
        value.contribs.union_with(&contribs);
        Ok(())
    }

    /// Every forwarded part of a split request is answered: answer its requester.
    fn answer(&mut self, answered: Option<Answered>, ctx: &mut Ctx) -> Result<(), Violation> {
        let Some(answered) = answered else {
            return Ok(());
        };
        let msg = match answered.rows {
            Some(rows) => Msg::Rows {
                fetch: answered.id,
                rows,
            },
            None => Msg::Applied { flush: answered.id },
        };
        ctx.net
            .send(ctx.rng, Actor::Server(self.id), answered.requester, msg);
        Ok(())
    }

    /// The master moves `shard` to `to`: send its rows there, forward its traffic from now on.
    fn hand_off(&mut self, shard: ShardId, to: ServerId, ctx: &mut Ctx) -> Result<(), Violation> {
        if to == self.id {
            return Err(protocol(format!("{shard} handed from {to} to itself")));
        }
        self.forwarding.hand_off(shard, to)?;
        let num_shards = self.num_shards;
        let (leaving, kept): (BTreeMap<_, _>, _) = std::mem::take(&mut self.rows)
            .into_iter()
            .partition(|(k, _)| shard_of(*k, num_shards) == shard);
        self.rows = kept;
        let rows = leaving.into_iter().collect();
        ctx.ghost.rows_left(shard, self.id)?;
        let msg = Msg::TakeOver { shard, rows };
        ctx.net
            .send(ctx.rng, Actor::Server(self.id), Actor::Server(to), msg);
        Ok(())
    }

    /// `shard`'s rows arrived (they replace any row of it here, as `insert_shard` does).
    fn take_over(
        &mut self,
        from: Actor,
        shard: ShardId,
        rows: Vec<(ParamKey, Value)>,
        ctx: &mut Ctx,
    ) -> Result<(), Violation> {
        self.forwarding.take_back(shard)?;
        self.rows.extend(rows);
        ctx.ghost.rows_arrived(shard, self.id)?;
        ctx.net.send(
            ctx.rng,
            Actor::Server(self.id),
            from,
            Msg::TookOver { shard },
        );
        Ok(())
    }

    /// The new owner of `shard` holds its rows: send on what was held, tell the master.
    fn acked(&mut self, from: Actor, shard: ShardId, ctx: &mut Ctx) -> Result<(), Violation> {
        let (to, held) = self.forwarding.acked(shard)?;
        if from != Actor::Server(to) {
            return Err(protocol(format!("{from:?} acked {shard}, sent to {to}")));
        }
        for msg in held {
            ctx.stats.forwards += 1;
            ctx.net
                .send(ctx.rng, Actor::Server(self.id), Actor::Server(to), msg);
        }
        let msg = Msg::HandedOff { shard, to };
        ctx.net
            .send(ctx.rng, Actor::Server(self.id), Actor::Master, msg);
        Ok(())
    }

    pub fn check_quiescent(&self) -> Result<(), Violation> {
        self.forwarding.check_quiescent(self.id)
    }
}
