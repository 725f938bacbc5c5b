//! A server's side of shard moves, as `runtime/harp`'s servers keep it: the shards it gave
//! away and to whom (their traffic is forwarded there forever, until their rows come
//! back), the requests it holds for shards whose new owner has not acked the rows yet
//! ([`Handoff::Hold`]), and the requests it split, waiting for the answers of their
//! forwarded parts (the answer goes back to the requester once every part is answered).

use super::ghost::Value;
use super::net::{Actor, Msg};
use super::{Ctx, Handoff, Kind, Violation};
use harp_core::{ServerId, ShardId};
use std::collections::BTreeMap;

/// A request answered partly here and partly by the new owners of moved shards.
struct Split {
    requester: Actor,
    /// The requester's id for it (`fetch` or `flush`).
    id: u64,
    parts_waiting: usize,
    /// A read's rows, in the request's order (`None` for an apply).
    rows: Option<Vec<Option<Value>>>,
}

/// A split request whose every part is answered.
pub struct Answered {
    pub requester: Actor,
    pub id: u64,
    /// A read's rows; `None` for an apply.
    pub rows: Option<Vec<Value>>,
}

#[derive(Default)]
pub struct Forwarding {
    /// Shards given away, and the server they went to.
    given: BTreeMap<ShardId, ServerId>,
    /// Shards whose rows were sent but not acked yet, with the requests held for them.
    unacked: BTreeMap<ShardId, Vec<Msg>>,
    splits: BTreeMap<u64, Split>,
    /// A forwarded part's id → its split and its positions in the original request.
    parts: BTreeMap<u64, (u64, Vec<usize>)>,
    next_id: u64,
}

fn protocol(detail: String) -> Violation {
    Violation::new(Kind::Protocol, detail)
}

impl Forwarding {
    /// Does this server forward `shard`'s traffic (it gave the shard away)?
    pub fn gave_away(&self, shard: ShardId) -> bool {
        self.given.contains_key(&shard)
    }

    /// The rows of `shard` are on their way to `to`: forward its traffic from now on.
    pub fn hand_off(&mut self, shard: ShardId, to: ServerId) -> Result<(), Violation> {
        if self.given.insert(shard, to).is_some() {
            return Err(protocol(format!("{shard} handed off twice")));
        }
        self.unacked.insert(shard, Vec::new());
        Ok(())
    }

    /// The rows of `shard` came back: stop forwarding it.
    pub fn take_back(&mut self, shard: ShardId) -> Result<(), Violation> {
        if self.unacked.contains_key(&shard) {
            return Err(protocol(format!(
                "{shard} came back before its hand-off was acked"
            )));
        }
        self.given.remove(&shard);
        Ok(())
    }

    /// The new owner of `shard` holds its rows: where it is, and the requests held for it.
    pub fn acked(&mut self, shard: ShardId) -> Result<(ServerId, Vec<Msg>), Violation> {
        let held = self
            .unacked
            .remove(&shard)
            .ok_or_else(|| protocol(format!("ack of {shard}, never handed off")))?;
        let to =
            self.given.get(&shard).copied().ok_or_else(|| {
                protocol(format!("{shard} came back before its hand-off was acked"))
            })?;
        Ok((to, held))
    }

    /// A new split of `requester`'s request `id`, with `parts` parts to forward; `rows`
    /// holds the rows read here (a read) or is `None` (an apply).
    pub fn split(
        &mut self,
        requester: Actor,
        id: u64,
        rows: Option<Vec<Option<Value>>>,
        parts: usize,
    ) -> u64 {
        let split = self.fresh_id();
        let entry = Split {
            requester,
            id,
            parts_waiting: parts,
            rows,
        };
        self.splits.insert(split, entry);
        split
    }

    /// The id of a new forwarded part of `split`, covering `positions` of its request (a
    /// read's; an apply's parts need none).
    pub fn part(&mut self, split: u64, positions: Vec<usize>) -> u64 {
        let part = self.fresh_id();
        self.parts.insert(part, (split, positions));
        part
    }

    fn fresh_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends `msg`, a request for `shard` this server gave away, to the shard's new
    /// owner; or holds it while the rows are unacked and the hand-off holds.
    pub fn send_on(
        &mut self,
        me: ServerId,
        shard: ShardId,
        msg: Msg,
        ctx: &mut Ctx,
    ) -> Result<(), Violation> {
        let to = self.given.get(&shard).copied();
        let to = to.ok_or_else(|| protocol(format!("{me} forwards {shard}, not given away")))?;
        if let Some(held) = self.unacked.get_mut(&shard) {
            if ctx.cfg.handoff == Handoff::Hold {
                held.push(msg);
                ctx.stats.held_requests += 1;
                return Ok(());
            }
            ctx.stats.early_forwards += 1;
        }
        ctx.stats.forwards += 1;
        ctx.net
            .send(ctx.rng, Actor::Server(me), Actor::Server(to), msg);
        Ok(())
    }

    /// The new owner answered forwarded part `part` (`rows` for a read, empty for an
    /// apply); the split it belongs to once every part is answered.
    pub fn answered(&mut self, part: u64, rows: Vec<Value>) -> Result<Option<Answered>, Violation> {
        let (split_id, positions) = self
            .parts
            .remove(&part)
            .ok_or_else(|| protocol(format!("answer to unknown forwarded part {part}")))?;
        let split = self
            .splits
            .get_mut(&split_id)
            .ok_or_else(|| protocol(format!("forwarded part {part} of no split")))?;
        if let Some(slots) = &mut split.rows {
            if rows.len() != positions.len() {
                return Err(protocol(format!("forwarded part {part}: short reply")));
            }
            for (i, row) in positions.into_iter().zip(rows) {
                slots[i] = Some(row);
            }
        }
        split.parts_waiting -= 1;
        if split.parts_waiting > 0 {
            return Ok(None);
        }
        let split = self.splits.remove(&split_id).expect("split exists");
        Ok(Some(Answered {
            requester: split.requester,
            id: split.id,
            rows: split.rows.map(|rows| rows.into_iter().flatten().collect()),
        }))
    }

    /// At the end of a job: nothing held, unacked or waiting for answers.
    pub fn check_quiescent(&self, me: ServerId) -> Result<(), Violation> {
        let leftovers = [
            ("unacked hand-offs", self.unacked.len()),
            ("split requests", self.splits.len()),
        ];
        for (what, n) in leftovers {
            if n != 0 {
                return Err(Violation::new(
                    Kind::Stuck,
                    format!("{me} ended with {n} {what}"),
                ));
            }
        }
        Ok(())
    }
}
