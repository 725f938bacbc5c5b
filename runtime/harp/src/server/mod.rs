//! Servers: actors that host parameter-server shards.
//!
//! A server answers batched reads, applies batched aggregated updates under each table's
//! rule, and dumps its rows on request. It checks every delta; bad ones are refused and
//! counted, never applied.
//!
//! Shards move between servers (Litz §4.4): [`ServerMsg::HandOff`] takes a shard's rows out
//! and sends them to the new owner ([`ServerMsg::TakeOver`]), after which this server
//! forwards every read and update of that shard to it (chains allowed: the new owner may
//! hand it on). Writes to a shard are applied by exactly one server at any time: the old
//! owner stops applying before the rows leave, and the new owner receives them before any
//! forwarded request (one sender, one ordered mailbox).

mod store;

use crate::error::HarpError;
use crate::table::TableSet;
use harp_core::{shard_of, ParamKey, RowData, ServerId, ShardId};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::collections::HashMap;
use std::sync::Arc;
pub(crate) use store::ShardRows;
use store::ShardStore;
use tokio::sync::oneshot;

/// What a shard hand-off moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ShardMoved {
    pub rows: usize,
    pub bytes: u64,
}

/// Messages a server handles.
pub(crate) enum ServerMsg {
    /// Read rows; the reply holds one row per key, in order.
    Get {
        keys: Vec<ParamKey>,
        reply: oneshot::Sender<Result<Vec<Arc<RowData>>, HarpError>>,
    },
    /// Apply one flush's deltas for this server's shards, all of them before replying.
    Apply {
        updates: Vec<(ParamKey, RowData)>,
        reply: oneshot::Sender<Result<(), HarpError>>,
    },
    /// Every row this server holds.
    Dump {
        reply: oneshot::Sender<Vec<(ParamKey, RowData)>>,
    },
    /// Give `shard` (of `num_shards`) to server `to_id` (reached through `to`), then forward
    /// its traffic there. Answers once the new owner holds the rows.
    HandOff {
        shard: ShardId,
        num_shards: u32,
        to_id: ServerId,
        to: ActorRef<ServerMsg>,
        reply: oneshot::Sender<Result<ShardMoved, HarpError>>,
    },
    /// Become the owner of `shard`: its rows, from the server that held it; `ack` once they
    /// are in.
    TakeOver {
        shard: ShardId,
        rows: ShardRows,
        ack: oneshot::Sender<()>,
    },
    /// Answer once nothing sent through this handle waits for an answer (a server about to
    /// leave the job is drained by every node before it goes). A server in this process
    /// answers in order, so at once.
    Drain { reply: oneshot::Sender<()> },
}

pub(crate) struct ServerActor;

pub(crate) struct ServerState {
    id: ServerId,
    store: ShardStore,
    /// Shards given away, and to whom their traffic goes.
    forwarded: HashMap<ShardId, ActorRef<ServerMsg>>,
    num_shards: u32,
}

impl ServerState {
    /// Where the traffic of `key` goes: `None` for this server.
    fn forward_of(&self, key: ParamKey) -> Option<&ActorRef<ServerMsg>> {
        self.forwarded.get(&shard_of(key, self.num_shards))
    }

    /// Groups the positions of `keys` by the server they are forwarded to (`None` = here).
    fn split<'k>(&self, keys: impl Iterator<Item = &'k ParamKey>) -> (Vec<usize>, Forwards) {
        let mut local = Vec::new();
        let mut away: Forwards = Vec::new();
        for (i, key) in keys.enumerate() {
            match self.forward_of(*key) {
                None => local.push(i),
                Some(to) => match away.iter_mut().find(|(a, _)| a.get_id() == to.get_id()) {
                    Some((_, idxs)) => idxs.push(i),
                    None => away.push((to.clone(), vec![i])),
                },
            }
        }
        (local, away)
    }

    fn get(&mut self, keys: Vec<ParamKey>, reply: GetReply) {
        let (local, away) = if self.forwarded.is_empty() {
            (Vec::new(), Vec::new()) // the common case: every key is here
        } else {
            self.split(keys.iter())
        };
        if away.is_empty() {
            let rows: Result<Vec<_>, _> = keys.iter().map(|k| self.store.get(*k)).collect();
            // A requester that went away no longer needs the answer.
            let _ = reply.send(rows.map_err(HarpError::from));
            return;
        }
        let mut out: Vec<Option<Arc<RowData>>> = vec![None; keys.len()];
        for i in local {
            match self.store.get(keys[i]) {
                Ok(row) => out[i] = Some(row),
                Err(e) => {
                    let _ = reply.send(Err(e.into()));
                    return;
                }
            }
        }
        let mut waits = Vec::with_capacity(away.len());
        for (to, idxs) in away {
            let (tx, rx) = oneshot::channel();
            let sub = idxs.iter().map(|&i| keys[i]).collect();
            let _ = to.send_message(ServerMsg::Get {
                keys: sub,
                reply: tx,
            });
            waits.push((idxs, rx));
        }
        let id = self.id;
        tokio::spawn(async move {
            for (idxs, rx) in waits {
                match rx.await {
                    Ok(Ok(rows)) if rows.len() == idxs.len() => {
                        for (i, row) in idxs.into_iter().zip(rows) {
                            out[i] = Some(row);
                        }
                    }
                    Ok(Ok(_)) => {
                        let _ = reply.send(Err(HarpError::InvalidConfig(
                            "a forwarded read came back short".into(),
                        )));
                        return;
                    }
                    Ok(Err(e)) => {
                        let _ = reply.send(Err(e));
                        return;
                    }
                    Err(_) => {
                        let _ = reply.send(Err(HarpError::ServerUnreachable(id)));
                        return;
                    }
                }
            }
            let _ = reply.send(Ok(out.into_iter().flatten().collect()));
        });
    }

    /// Applies one delta here; a refused one is counted, logged and kept as the first error.
    fn apply_here(&mut self, key: ParamKey, delta: &RowData, first_error: &mut Option<HarpError>) {
        if let Err(e) = self.store.apply(key, delta) {
            tracing::warn!(server = %self.id, %key, error = %e, refused_total = self.store.rejected_updates(), "update refused");
            first_error.get_or_insert(HarpError::from(e));
        }
    }

    fn apply(&mut self, updates: Vec<(ParamKey, RowData)>, reply: ApplyReply) {
        let mut first_error = None;
        if self.forwarded.is_empty() {
            // The common case: every key is here.
            for (key, delta) in &updates {
                self.apply_here(*key, delta, &mut first_error);
            }
            let _ = reply.send(first_error.map_or(Ok(()), Err));
            return;
        }
        let (local, away) = self.split(updates.iter().map(|(k, _)| k));
        let mut slots: Vec<Option<(ParamKey, RowData)>> = updates.into_iter().map(Some).collect();
        for i in local {
            if let Some((key, delta)) = slots[i].take() {
                self.apply_here(key, &delta, &mut first_error);
            }
        }
        let mut waits = Vec::with_capacity(away.len());
        for (to, idxs) in away {
            let (tx, rx) = oneshot::channel();
            let sub = idxs.iter().filter_map(|&i| slots[i].take()).collect();
            let _ = to.send_message(ServerMsg::Apply {
                updates: sub,
                reply: tx,
            });
            waits.push(rx);
        }
        if waits.is_empty() {
            let _ = reply.send(first_error.map_or(Ok(()), Err));
            return;
        }
        let id = self.id;
        tokio::spawn(async move {
            for rx in waits {
                let result = rx.await.unwrap_or(Err(HarpError::ServerUnreachable(id)));
                if let Err(e) = result {
                    first_error.get_or_insert(e);
                }
            }
            let _ = reply.send(first_error.map_or(Ok(()), Err));
        });
    }
}

/// Positions of a request's keys, grouped by the server they are forwarded to.
type Forwards = Vec<(ActorRef<ServerMsg>, Vec<usize>)>;
type GetReply = oneshot::Sender<Result<Vec<Arc<RowData>>, HarpError>>;
type ApplyReply = oneshot::Sender<Result<(), HarpError>>;

impl Actor for ServerActor {
    type Msg = ServerMsg;
    type State = ServerState;
    type Arguments = (ServerId, Arc<TableSet>);

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        (id, tables): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(ServerState {
            id,
            store: ShardStore::new(tables),
            forwarded: HashMap::new(),
            num_shards: 1,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ServerMsg::Get { keys, reply } => state.get(keys, reply),
            ServerMsg::Apply { updates, reply } => state.apply(updates, reply),
            ServerMsg::HandOff {
                shard,
                num_shards,
                to,
                reply,
                ..
            } => {
                if num_shards == 0 || shard.0 >= num_shards {
                    let _ = reply.send(Err(HarpError::InvalidConfig(format!(
                        "{shard} is not one of {num_shards} shards"
                    ))));
                    return Ok(());
                }
                if state.forwarded.contains_key(&shard) {
                    let _ = reply.send(Err(HarpError::InvalidConfig(format!(
                        "{} no longer holds {shard}",
                        state.id
                    ))));
                    return Ok(());
                }
                state.num_shards = num_shards;
                let rows = state.store.take_shard(shard, num_shards);
                let moved = ShardMoved {
                    rows: rows.len(),
                    bytes: rows.bytes(),
                };
                let (ack, acked) = oneshot::channel();
                let take_over = ServerMsg::TakeOver { shard, rows, ack };
                if to.send_message(take_over).is_err() {
                    return Err(format!("{}: the new owner of {shard} is gone", state.id).into());
                }
                // From now on this server forwards the shard's traffic (queued behind the rows).
                state.forwarded.insert(shard, to);
                let id = state.id;
                tokio::spawn(async move {
                    let _ = reply.send(match acked.await {
                        Ok(()) => Ok(moved),
                        Err(_) => Err(HarpError::InvalidConfig(format!(
                            "{id}: the new owner of {shard} did not confirm it holds the rows"
                        ))),
                    });
                });
            }
            ServerMsg::TakeOver { shard, rows, ack } => {
                state.forwarded.remove(&shard);
                state.store.insert_shard(rows);
                let _ = ack.send(());
            }
            ServerMsg::Dump { reply } => {
                let _ = reply.send(state.store.dump());
            }
            ServerMsg::Drain { reply } => {
                let _ = reply.send(());
            }
        }
        Ok(())
    }
}
