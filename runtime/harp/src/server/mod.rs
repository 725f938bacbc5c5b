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
//! forwarded request. Rows of up to [`IN_ORDER_ROWS_MAX`] bytes travel *in order* with what
//! is sent to the new owner after them (in one process its mailbox, across processes the
//! link's ordered control stream; [`ServerMsg::TakeOver`]'s `in_order`), so the shard's
//! requests are forwarded at once and a move does not stop the micro-tasks that read or
//! update it. Larger rows go on a stream of their own that later messages may overtake:
//! until the new owner confirms it holds them, requests for the shard are held here (in
//! arrival order) and sent on only then, while traffic for every other shard keeps flowing.
//! Either way the hand-off is answered only after that confirmation, since the master then
//! tells every node to send to the new owner directly. A new owner that dies before it
//! confirms leaves the shard *stranded* here ([`stranded`]): its requests are held until
//! the master re-creates it here.
//!
//! A server keeps its part of SCAR's running checkpoint (SCAR §5.4.3): the saved value of
//! every row it holds ([`saved`]), which moves with a shard's rows. It answers the
//! checkpoint coordinator ([`checkpoint_round`]) through [`ServerMsg::Checkpoint`]: the
//! distance of each row it owns from its saved value, and saving selected rows. A save
//! names keys; one of a shard this server has given away (or is giving away) is not
//! forwarded but answered as [`SaveAnswer::not_owned`] and left unsaved: each server's
//! answer then says exactly what it saved, and the row, still far from its saved value at
//! its new owner, is picked again by a later round.
//!
//! **Save epochs.** A server counts the checkpoint saves it has taken (its *save epoch*)
//! and answers every flush part it applied itself with the epoch at that moment
//! ([`AppliedAt`]), and every save with the epoch it opened ([`SaveAnswer::epoch`]). A part
//! applied at epoch `a` is in the saved value of a row saved at epoch `e` exactly when
//! `a < e`, which is how the nodes of a job across processes can tell the master exactly
//! which acknowledged updates a dead server's last saves miss (`node/lost_ledger.rs`).
//!
//! In a job that recovers worker nodes, a flush part is first staged
//! ([`ServerMsg::Stage`], kept by [`staging`] under the sending node and its flush) and
//! applied only when the master commits it ([`ServerMsg::Commit`], once however often it is
//! asked); a dead node's uncommitted parts are dropped ([`ServerMsg::DropStaged`]).
//!
//! A part forwarded to a shard's new owner is remembered there, with the keys applied, for
//! as long as its node may send it again ([`forwarded_parts`]): the same part sent again is
//! applied only for the keys not applied yet. A part a server applied straight from its
//! node is remembered the same way ([`direct_parts`]) and its keys of a shard handed off go
//! with the shard's rows into the new owner's record.

mod applied_parts;
pub(crate) mod checkpoint_round;
mod direct_parts;
mod forwarded_parts;
#[cfg(test)]
mod forwarded_parts_tests;
mod part_records;
#[cfg(test)]
mod restore_tests;
mod saved;
mod staging;
mod stats;
#[cfg(test)]
mod stats_tests;
mod store;
mod stranded;
#[cfg(test)]
mod stranded_tests;

use crate::error::HarpError;
use crate::table::TableSet;
pub(crate) use applied_parts::{AppliedPart, PartId};
pub(crate) use forwarded_parts::PartTag;
use harp_core::{shard_of, ParamKey, RowData, ServerId, ShardId};
use ractor::{Actor, ActorProcessingErr, ActorRef};
pub(crate) use saved::SavedRows;
pub use stats::ServerStats;

/// What a server crashed by fault injection leaves ([`ServerMsg::Crash`]).
#[derive(Debug)]
pub(crate) struct CrashedServer {
    /// Every row it held at the failure.
    pub rows: Vec<(ParamKey, RowData)>,
    /// Its counters at the failure.
    pub stats: ServerStats,
}
use std::collections::HashMap;
use std::sync::Arc;
pub(crate) use store::ShardRows;
use store::ShardStore;
use stranded::AwayPart;
use tokio::sync::oneshot;

/// Shard rows up to this many bytes are sent to their new owner in order with the requests
/// forwarded after them, so those are not held while the rows travel (see the module doc).
/// Larger rows would hold up every other message on the control stream while they are
/// written, so they go on a stream of their own and the shard's requests wait for the
/// new owner's confirmation instead.
///
/// The trade: in order, the moving shard's requests skip one round trip (the
/// confirmation), but every other message on that link waits behind the rows for their
/// transfer time. The two are equal near bandwidth × round trip: about 100–300 KB at
/// 1 GB/s and 0.1–0.3 ms, hence 256 KiB. A job whose tasks read every shard (MLR) would
/// gain from in order at any size, a job whose tasks read a few shards would lose above
/// it; this is an estimate, not a measured optimum.
pub(crate) const IN_ORDER_ROWS_MAX: u64 = 256 * 1024;

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
    /// `part` names the part (noted with the save epoch for the next checkpoint save's
    /// answer: [`applied_parts`]; keys of it applied here already are skipped:
    /// [`forwarded_parts`]).
    Apply {
        updates: Vec<(ParamKey, RowData)>,
        part: Option<PartTag>,
        reply: ApplyReply,
    },
    /// Keep one flush's deltas as the part `(node, flush)` until the master commits or drops
    /// it (worker recovery); every delta is checked now, and the reply says it is kept.
    Stage {
        node: u32,
        flush: u64,
        updates: Vec<(ParamKey, RowData)>,
        reply: ApplyReply,
    },
    /// The master committed flush `flush` of node `node`: apply its part here, the first
    /// time only (a second commit, or one of a flush that staged nothing here, answers at
    /// once and changes nothing).
    Commit {
        node: u32,
        flush: u64,
        reply: ApplyReply,
    },
    /// Worker node `node` died: drop its uncommitted parts and refuse its later ones.
    DropStaged { node: u32 },
    /// Every row this server holds.
    Dump {
        reply: oneshot::Sender<Vec<(ParamKey, RowData)>>,
    },
    /// This server's counters ([`ServerStats`]). Only a server in this process answers: one
    /// in another node process reports them with its node's (`Message::Stats`).
    Stats { reply: oneshot::Sender<ServerStats> },
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
    /// are in. With `in_order`, whatever carries the message must deliver the rows before
    /// any message sent through it later (a proxy writes them on its link's control stream
    /// at once): the old owner forwards the shard's requests right behind them.
    TakeOver {
        shard: ShardId,
        rows: ShardRows,
        ack: oneshot::Sender<()>,
        in_order: bool,
        /// A failed server's shard re-created from the running checkpoint (`None`: a move).
        restore: Option<Restore>,
    },
    /// Answer once nothing sent through this handle waits for an answer, or after `within`
    /// (the node's deadline for a server's answer: a server about to leave the job is
    /// drained by every node before it goes). A server in this process answers in order,
    /// so at once.
    Drain {
        reply: oneshot::Sender<()>,
        within: std::time::Duration,
    },
    /// The new owner of `shard` confirmed it holds the rows (internal): send the requests
    /// held for it, then answer the hand-off.
    HandedOver {
        shard: ShardId,
        result: Result<ShardMoved, HarpError>,
        reply: oneshot::Sender<Result<ShardMoved, HarpError>>,
    },
    /// A part of `request` this server forwarded went to the server actor `lost`, which
    /// dropped it unanswered (internal): serve it again, holding what is for a shard
    /// stranded on its way there ([`stranded`]).
    Unanswered {
        lost: ractor::ActorId,
        request: Box<ServerMsg>,
    },
    /// The master re-created `shard` on server `to_id` (reached through `to`) after a
    /// failure: if this server forwards the shard, or holds its requests stranded, it sends
    /// them there from now on ([`stranded`]).
    Relocated {
        shard: ShardId,
        to_id: ServerId,
        to: ActorRef<ServerMsg>,
    },
    /// A request of SCAR's checkpoint coordinator.
    Checkpoint(CheckpointRequest),
    /// Fault injection: fail now, as a crashed server would. The reply gets every row this
    /// server holds at that point (its values at the failure, which an experiment compares
    /// with what recovery restores) and its counters (the job's sums keep them); then the
    /// server stops, and every request still queued or sent later is dropped unanswered, so
    /// no update is applied or acknowledged after the failure point.
    Crash {
        reply: oneshot::Sender<CrashedServer>,
    },
    /// Fault injection: set these rows to these values (`None`: the initial value), e.g.
    /// rows "lost" and restored from the running checkpoint. Rows of shards given away are
    /// left alone. All or nothing: a value of the wrong shape refuses the whole request.
    Reset {
        rows: RowsToReset,
        reply: oneshot::Sender<Result<(), HarpError>>,
    },
}

/// What the checkpoint coordinator asks a server (SCAR §5.4.3, "Actions During a
/// Checkpoint", steps 1 and 4).
pub(crate) enum CheckpointRequest {
    /// The distance of every row of the shards this server owns from its saved value,
    /// ascending by key, at distance 0 too (rows never created are not listed: they are at
    /// their saved initial value). Rows of shards given away, or on their way away, are not
    /// listed.
    Distances { reply: DistancesReply },
    /// Make the current values of `keys` their saved values and return them. Nothing is
    /// saved if a key names an unknown table. `recorded`: the newest save of this server
    /// the master's image holds (0: none), whose answer listed the parts applied before it.
    Save {
        keys: Vec<ParamKey>,
        recorded: u64,
        reply: SaveReply,
    },
}

pub(crate) type DistancesReply = oneshot::Sender<Result<Vec<(ParamKey, f64)>, HarpError>>;
pub(crate) type SaveReply = oneshot::Sender<Result<SaveAnswer, HarpError>>;

/// The server's save epoch when it applied every delta of a flush part itself; `None` for a
/// staged part (applied later, at its commit) or one partly forwarded to a shard's new owner.
pub(crate) type AppliedAt = Option<u64>;

/// The answer to [`ServerMsg::Apply`], [`ServerMsg::Stage`] and [`ServerMsg::Commit`].
pub(crate) type ApplyReply = oneshot::Sender<Result<AppliedAt, HarpError>>;

impl ServerMsg {
    /// Drops a fault-injection crash sent to a server in another node process: across
    /// processes a server fails by its process dying (e.g. SIGKILL), which the master
    /// detects by the node's lease or closed link. The crash's requester sees its reply
    /// dropped.
    pub(crate) fn refuse_across_processes(self) {
        tracing::warn!(
            "a crash by message is not carried between node processes: kill the node process instead"
        );
    }
}

/// How a server answered a request [`ask_servers`] sent it.
enum ServerAnswer<T> {
    Answered(T),
    /// Its actor was gone, or dropped the reply (it stopped, or failed by injection).
    Gone,
    /// No answer within the wait.
    Late,
}

/// Sends every server in `servers` the request `make` builds around a reply, all at once,
/// and waits for each answer at most `wait` (one after the other, each with its own wait):
/// the answers in the servers' order.
async fn ask_servers<T>(
    servers: impl IntoIterator<Item = (ServerId, ActorRef<ServerMsg>)>,
    wait: std::time::Duration,
    make: impl Fn(oneshot::Sender<T>) -> ServerMsg,
) -> Vec<(ServerId, ServerAnswer<T>)> {
    let mut asked = Vec::new();
    for (id, server) in servers {
        let (reply, answer) = oneshot::channel();
        let sent = server.send_message(make(reply)).is_ok();
        asked.push((id, sent.then_some(answer)));
    }
    let mut answers = Vec::with_capacity(asked.len());
    for (id, answer) in asked {
        let answer = match answer {
            None => ServerAnswer::Gone,
            Some(answer) => match tokio::time::timeout(wait, answer).await {
                Ok(Ok(value)) => ServerAnswer::Answered(value),
                Ok(Err(_)) => ServerAnswer::Gone,
                Err(_) => ServerAnswer::Late,
            },
        };
        answers.push((id, answer));
    }
    answers
}

/// How long [`sum_server_stats`] waits for a server's counters (a server in this process
/// answers at once unless it is busy with a long request).
const STATS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The sum of the counters of the servers in `servers` that answer (a server that stopped,
/// failed by fault injection, or did not answer within [`STATS_WAIT`] is left out, and
/// logged). The requests go out together.
pub(crate) async fn sum_server_stats(
    servers: impl IntoIterator<Item = (ServerId, ActorRef<ServerMsg>)>,
) -> ServerStats {
    let answers = ask_servers(servers, STATS_WAIT, |reply| ServerMsg::Stats { reply }).await;
    let mut sum = ServerStats::default();
    for (id, answer) in answers {
        match answer {
            ServerAnswer::Answered(stats) => sum.add(&stats),
            ServerAnswer::Gone => {
                tracing::debug!(server = %id, "a server that stopped left its counters out of the job's")
            }
            ServerAnswer::Late => {
                tracing::warn!(server = %id, wait_s = STATS_WAIT.as_secs(), "a server did not send its counters in time: the job's leave them out")
            }
        }
    }
    sum
}

/// How long [`dump_servers`] waits for a server's rows (a server node's come over the
/// network, in parts).
const DUMP_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Every row of every server in `servers`, one list per server in the given order. The
/// requests go out together, so the servers dump at the same time; a server that cannot be
/// reached or does not answer within [`DUMP_WAIT`] is an error naming it.
pub(crate) async fn dump_servers(
    servers: impl IntoIterator<Item = (ServerId, ActorRef<ServerMsg>)>,
) -> Result<Vec<Vec<(ParamKey, RowData)>>, HarpError> {
    let answers = ask_servers(servers, DUMP_WAIT, |reply| ServerMsg::Dump { reply }).await;
    answers
        .into_iter()
        .map(|(id, answer)| match answer {
            ServerAnswer::Answered(rows) => Ok(rows),
            ServerAnswer::Gone => Err(HarpError::ServerUnreachable(id)),
            ServerAnswer::Late => Err(HarpError::Remote(format!(
                "{id} did not send its rows within {} s",
                DUMP_WAIT.as_secs()
            ))),
        })
        .collect()
}

/// Rows to set on one server (`ServerMsg::Reset`): a new value, or `None` for the row's
/// initial value.
pub(crate) type RowsToReset = Vec<(ParamKey, Option<Arc<RowData>>)>;

/// Sets rows on several servers at once (`ServerMsg::Reset` to each, then every answer);
/// a server with nothing to set is not asked. Each server checks every row of a request
/// before it sets any: all its rows or none here, each part on its own for a server node
/// whose rows come in parts of 16 MiB (`remote/row_parts.rs`).
pub(crate) async fn reset_on_servers(
    resets: impl IntoIterator<Item = (ServerId, ActorRef<ServerMsg>, RowsToReset)>,
) -> Result<(), HarpError> {
    let mut acks = Vec::new();
    for (id, server, rows) in resets {
        if rows.is_empty() {
            continue;
        }
        let (reply, ack) = oneshot::channel();
        server
            .send_message(ServerMsg::Reset { rows, reply })
            .map_err(|_| HarpError::ServerUnreachable(id))?;
        acks.push((id, ack));
    }
    for (id, ack) in acks {
        ack.await.map_err(|_| HarpError::ServerUnreachable(id))??;
    }
    Ok(())
}

/// A take-over that re-creates a failed server's shard from the running checkpoint. The
/// first part of recovery `generation` (one per recovery) to arrive drops whatever rows of
/// the shard (of `num_shards`) this server still holds: a hand-off from the failed server
/// may have brought them before it died, and the shard must be exactly the restored rows
/// (nodes send again what that server never acknowledged).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Restore {
    pub generation: u64,
    pub num_shards: u32,
}

/// What a server answers to [`CheckpointRequest::Save`].
#[derive(Debug, Default)]
pub(crate) struct SaveAnswer {
    /// `(key, value now saved)`, ascending by key: to be written to storage.
    pub saved: SavedRows,
    /// Keys of shards this server has given away or is giving away, ascending: not saved
    /// here (not forwarded either).
    pub not_owned: Vec<ParamKey>,
    /// The save epoch this save opened (the server's count of saves, this one included).
    pub epoch: u64,
    /// The flush parts this server applied since the save `recorded` of the request, with
    /// their epochs (all below `epoch`): this save holds their deltas for its keys.
    pub applied: Vec<AppliedPart>,
}

pub(crate) struct ServerActor;

pub(crate) struct ServerState {
    id: ServerId,
    /// This server's own handle (a forwarded part that comes back unanswered is asked of
    /// it again).
    myself: ActorRef<ServerMsg>,
    store: ShardStore,
    /// Shards given away, and to whom their traffic goes.
    forwarded: HashMap<ShardId, ActorRef<ServerMsg>>,
    /// Shards given away whose rows went on a stream of their own and whose new owner has
    /// not confirmed them yet, and shards [`stranded`] here: the requests for them, in
    /// arrival order, sent on (or served here) once the rows are in.
    held: HashMap<ShardId, Vec<ServerMsg>>,
    /// Shards whose rows left for a new owner that never confirmed them ([`stranded`]).
    stranded: std::collections::HashSet<ShardId>,
    num_shards: u32,
    /// Failed by [`ServerMsg::Crash`]: nothing is answered any more.
    crashed: bool,
    /// Flush parts staged by worker nodes and not committed yet.
    staging: staging::Staging,
    /// Checkpoint saves taken (the save epoch; see the module doc).
    saves: u64,
    /// Flush parts applied here since the last save the master recorded.
    applied: applied_parts::AppliedParts,
    /// Forwarded flush parts their nodes may send again, and the keys applied here.
    forwarded_parts: forwarded_parts::ForwardedParts,
    /// Named flush parts applied here straight from their nodes, and the keys applied
    /// (they go with a shard handed off, into the new owner's `forwarded_parts`).
    direct_parts: direct_parts::DirectParts,
    /// The latest recovery generation that re-created each shard here ([`Restore`]).
    restores: HashMap<ShardId, u64>,
    /// What this server counted ([`stats`]; the counters its parts keep are added when a
    /// snapshot is taken: [`ServerState::stats`]).
    counted: ServerStats,
}

/// Where a part of a request goes: to a server now, or held until a shard's rows are in.
enum Away {
    Send(ActorRef<ServerMsg>),
    Hold(ShardId),
}

/// [`Away`], borrowed from the server's tables while a request's keys are grouped.
#[derive(Clone, Copy)]
enum AwayRef<'a> {
    Send(&'a ActorRef<ServerMsg>),
    Hold(ShardId),
}

impl AwayRef<'_> {
    fn is(&self, other: &Away) -> bool {
        match (self, other) {
            (AwayRef::Send(a), Away::Send(b)) => a.get_id() == b.get_id(),
            (AwayRef::Hold(a), Away::Hold(b)) => a == b,
            _ => false,
        }
    }

    fn to_owned(self) -> Away {
        match self {
            AwayRef::Send(actor) => Away::Send(actor.clone()),
            AwayRef::Hold(shard) => Away::Hold(shard),
        }
    }
}

impl ServerState {
    /// A snapshot of this server's counters.
    fn stats(&self) -> ServerStats {
        ServerStats {
            updates_refused: self.store.rejected_updates(),
            applied_parts_forgotten: self.applied.dropped(),
            forwarded_parts_forgotten: self.forwarded_parts.dropped(),
            direct_parts_forgotten: self.direct_parts.forgotten(),
            ..self.counted
        }
    }

    /// The first part of a recovery's take-over of `shard` ([`Restore`]): drops the rows of
    /// it this server still holds, and their saved values. Whether this was the first part
    /// of that recovery's take-over here (a later part, or one of an older recovery, drops
    /// nothing).
    fn drop_before_restore(&mut self, shard: ShardId, restore: Restore) -> bool {
        let newer = self
            .restores
            .get(&shard)
            .is_none_or(|seen| *seen < restore.generation);
        if !newer || restore.num_shards == 0 {
            return false;
        }
        self.restores.insert(shard, restore.generation);
        let stale = self.store.take_shard(shard, restore.num_shards);
        // The image's rows replace them: no key of the shard was applied here any more.
        self.forwarded_parts.take_shard(shard, restore.num_shards);
        self.direct_parts.take_shard(shard, restore.num_shards);
        if stale.len() > 0 {
            tracing::warn!(server = %self.id, %shard, rows = stale.len(), "dropped the rows a failed server's hand-off left here; the shard is re-created from the running checkpoint");
        }
        true
    }

    /// Where the traffic of `key` goes: `None` for this server.
    fn forward_of(&self, key: ParamKey) -> Option<AwayRef<'_>> {
        let shard = shard_of(key, self.num_shards);
        if self.held.contains_key(&shard) {
            return Some(AwayRef::Hold(shard));
        }
        self.forwarded.get(&shard).map(AwayRef::Send)
    }

    /// Groups the positions of `keys` by where they go (`local`: here).
    fn split<'k>(&self, keys: impl Iterator<Item = &'k ParamKey>) -> (Vec<usize>, Forwards) {
        let mut local = Vec::new();
        let mut away: Forwards = Vec::new();
        for (i, key) in keys.enumerate() {
            match self.forward_of(*key) {
                None => local.push(i),
                Some(to) => match away.iter_mut().find(|(a, _)| to.is(a)) {
                    Some((_, idxs)) => idxs.push(i),
                    None => away.push((to.to_owned(), vec![i])),
                },
            }
        }
        (local, away)
    }

    /// Whether no shard is given away, on its way away or stranded (the common case).
    fn holds_every_shard(&self) -> bool {
        self.forwarded.is_empty() && self.held.is_empty()
    }

    /// Whether `key`'s shard is held here (not given away, nor on its way away).
    fn owns(&self, key: ParamKey) -> bool {
        self.holds_every_shard() || self.forward_of(key).is_none()
    }

    fn checkpoint(&mut self, request: CheckpointRequest) {
        match request {
            CheckpointRequest::Distances { reply } => {
                let distances = self.store.checkpoint_distances().map(|mut all| {
                    // Given-away shards' rows left with them; this keeps it so regardless.
                    all.retain(|(key, _)| self.owns(*key));
                    all
                });
                let _ = reply.send(distances);
            }
            CheckpointRequest::Save {
                keys,
                recorded,
                reply,
            } => {
                let (here, mut not_owned): (Vec<ParamKey>, Vec<ParamKey>) =
                    keys.into_iter().partition(|key| self.owns(*key));
                not_owned.sort_unstable();
                not_owned.dedup();
                let answer = self.store.checkpoint_save(&here).map(|saved| {
                    self.saves += 1;
                    let dropped = self.applied.dropped();
                    let applied = self.applied.answer(recorded);
                    // Full and dropping: parts older than these may be in this save unlisted.
                    if dropped > 0 && applied.len() == applied_parts::APPLIED_PARTS_KEPT {
                        tracing::debug!(server = %self.id, dropped, "more flush parts applied between two recorded saves than are kept");
                    }
                    SaveAnswer {
                        saved,
                        not_owned,
                        epoch: self.saves,
                        applied,
                    }
                });
                let _ = reply.send(answer);
            }
        }
    }

    /// [`ServerMsg::Reset`]: checks every value first, then sets them.
    fn reset(&mut self, rows: RowsToReset) -> Result<(), HarpError> {
        let rows: Vec<_> = rows.into_iter().filter(|(k, _)| self.owns(*k)).collect();
        for (key, value) in &rows {
            if let Some(value) = value {
                self.store.get(*key)?.check_compatible(value)?;
            }
        }
        for (key, value) in rows {
            self.store.reset(key, value)?;
        }
        Ok(())
    }

    /// Sends a part of a request on, or holds it until its shard's rows are in; `again`
    /// makes the part again, to be asked of this server if the new owner drops it
    /// unanswered ([`stranded`]).
    fn send_away<T>(
        &mut self,
        to: Away,
        message: ServerMsg,
        answer: oneshot::Receiver<Result<T, HarpError>>,
        again: impl FnOnce(oneshot::Sender<Result<T, HarpError>>) -> ServerMsg + Send + 'static,
    ) -> AwayPart<T> {
        match to {
            // A server that stopped drops the part, and with it the reply.
            Away::Send(actor) => {
                let _ = actor.send_message(message);
                AwayPart::forwarded(answer, actor.get_id(), again)
            }
            Away::Hold(shard) => {
                self.held.entry(shard).or_default().push(message);
                AwayPart::held(answer)
            }
        }
    }

    fn get(&mut self, keys: Vec<ParamKey>, reply: GetReply) {
        let (local, away) = if self.holds_every_shard() {
            (Vec::new(), Vec::new()) // the common case: every key is here
        } else {
            self.split(keys.iter())
        };
        if away.is_empty() {
            self.counted.rows_read += keys.len() as u64;
            let rows: Result<Vec<_>, _> = keys.iter().map(|k| self.store.get(*k)).collect();
            // A requester that went away no longer needs the answer.
            let _ = reply.send(rows.map_err(HarpError::from));
            return;
        }
        let mut out: Vec<Option<Arc<RowData>>> = vec![None; keys.len()];
        self.counted.rows_read += local.len() as u64;
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
            let sub: Vec<ParamKey> = idxs.iter().map(|&i| keys[i]).collect();
            self.counted.reads_forwarded += sub.len() as u64;
            let again = sub.clone();
            let message = ServerMsg::Get {
                keys: sub,
                reply: tx,
            };
            let part = self.send_away(to, message, rx, |reply| ServerMsg::Get {
                keys: again,
                reply,
            });
            waits.push((idxs, part));
        }
        let (id, myself) = (self.id, self.myself.clone());
        crate::spawn::spawn(async move {
            for (idxs, part) in waits {
                match part.answer(&myself, id).await {
                    Ok(rows) if rows.len() == idxs.len() => {
                        for (i, row) in idxs.into_iter().zip(rows) {
                            out[i] = Some(row);
                        }
                    }
                    Ok(_) => {
                        let _ = reply.send(Err(HarpError::InvalidConfig(
                            "a forwarded read came back short".into(),
                        )));
                        return;
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return;
                    }
                }
            }
            let _ = reply.send(Ok(out.into_iter().flatten().collect()));
        });
    }

    /// [`ServerMsg::Stage`]: checks every delta against its table, then keeps the part.
    fn stage(
        &mut self,
        node: u32,
        flush: u64,
        updates: Vec<(ParamKey, RowData)>,
    ) -> Result<(), HarpError> {
        for (key, delta) in &updates {
            self.store.check_delta(*key, delta)?;
        }
        if self.staging.stage(node, flush, updates)? == staging::Staged::AlreadyCommitted {
            tracing::debug!(server = %self.id, node, flush, "a part of a committed flush was staged again; ignored");
        }
        Ok(())
    }

    /// [`ServerMsg::Commit`]: applies the part the first time (forwarding the keys of shards
    /// given away, as [`Self::apply`] does); answers at once otherwise.
    fn commit(&mut self, node: u32, flush: u64, reply: ApplyReply) {
        match self.staging.commit(node, flush) {
            Some(updates) => self.apply(updates, None, reply),
            None => {
                let _ = reply.send(Ok(None));
            }
        }
    }

    /// Applies one delta here; a refused one is counted, logged and kept as the first error.
    /// Notes that part `part_id` had keys (`any`) applied here, at the current save epoch.
    fn note_applied(&mut self, part_id: Option<PartId>, any: bool) {
        if let (Some(part), true) = (part_id, any) {
            self.applied.applied(part, self.saves);
        }
    }

    fn apply_here(&mut self, key: ParamKey, delta: &RowData, first_error: &mut Option<HarpError>) {
        match self.store.apply(key, delta) {
            Ok(()) => self.counted.updates_applied += 1,
            Err(e) => {
                tracing::warn!(server = %self.id, %key, error = %e, refused_total = self.store.rejected_updates(), "update refused");
                first_error.get_or_insert(HarpError::from(e));
            }
        }
    }

    /// Skips the keys of part `tag` applied here already ([`forwarded_parts`]), and forgets
    /// the parts its node will not send again: how many keys it skipped.
    fn skip_applied(
        &mut self,
        tag: Option<PartTag>,
        updates: &mut Vec<(ParamKey, RowData)>,
    ) -> usize {
        let Some(tag) = tag else {
            return 0;
        };
        self.forwarded_parts.release(tag.id.node, tag.held_from);
        self.direct_parts.release(tag.id.node, tag.held_from);
        let skipped = self.forwarded_parts.skip_applied(tag.id, updates);
        self.counted.resent_updates_skipped += skipped as u64;
        if skipped > 0 {
            tracing::info!(server = %self.id, node = tag.id.node, part = tag.id.seq, skipped, "a flush part sent again carried keys forwarded here and applied already; those are skipped");
        }
        skipped
    }

    /// Remembers the keys of part `tag` applied here: a forwarded part's in
    /// [`forwarded_parts`] (skipped if it comes again), one straight from its node in
    /// [`direct_parts`] (sent with a shard handed off).
    fn note_keys(&mut self, tag: Option<PartTag>, keys: impl Iterator<Item = ParamKey>) {
        let Some(tag) = tag else {
            return;
        };
        if tag.forwarded {
            let dropped = self.forwarded_parts.dropped();
            self.forwarded_parts.applied(tag.id, keys);
            if self.forwarded_parts.dropped() > dropped {
                tracing::warn!(server = %self.id, kept = forwarded_parts::FORWARDED_PARTS_KEPT, "more forwarded flush parts wait for their nodes than are kept: the oldest is forgotten, and a node that sends it again gets it applied twice");
            }
        } else {
            let forgotten = self.direct_parts.forgotten();
            self.direct_parts.applied(tag.id, keys.collect());
            if self.direct_parts.forgotten() > forgotten {
                tracing::warn!(server = %self.id, kept = direct_parts::DIRECT_PART_KEYS_KEPT, "more keys of applied flush parts wait for their nodes than are kept: the oldest part is forgotten, and if its shard moves and its node sends it again, the new owner applies it twice");
            }
        }
    }

    /// Applies flush part `tag` (`None`: a part nobody sends again): its keys here at once
    /// (less those applied already), the others forwarded to their shards' new owners under
    /// the same id. A part some of whose keys were skipped is answered without an epoch.
    fn apply(
        &mut self,
        mut updates: Vec<(ParamKey, RowData)>,
        tag: Option<PartTag>,
        reply: ApplyReply,
    ) {
        let mut first_error = None;
        let skipped = self.skip_applied(tag, &mut updates);
        let part_id = tag.map(|tag| tag.id);
        let epoch = (skipped == 0).then_some(self.saves);
        if self.holds_every_shard() {
            // The common case: every key is here.
            for (key, delta) in &updates {
                self.apply_here(*key, delta, &mut first_error);
            }
            self.note_applied(part_id, !updates.is_empty());
            // A fresh, exactly sized list: the part's own buffer is three times larger.
            self.note_keys(tag, updates.iter().map(|(key, _)| *key));
            let _ = reply.send(first_error.map_or(Ok(epoch), Err));
            return;
        }
        let (local, away) = self.split(updates.iter().map(|(k, _)| k));
        let mut slots: Vec<Option<(ParamKey, RowData)>> = updates.into_iter().map(Some).collect();
        self.note_applied(part_id, !local.is_empty());
        if tag.is_some() {
            // Collected first: `slots` is borrowed while `note_keys` borrows `self`.
            let applied: Vec<ParamKey> = (local.iter())
                .filter_map(|&i| slots[i].as_ref().map(|(key, _)| *key))
                .collect();
            self.note_keys(tag, applied.into_iter());
        }
        for i in local {
            if let Some((key, delta)) = slots[i].take() {
                self.apply_here(key, &delta, &mut first_error);
            }
        }
        let mut waits = Vec::with_capacity(away.len());
        for (to, idxs) in away {
            let (tx, rx) = oneshot::channel();
            let sub: Vec<(ParamKey, RowData)> =
                idxs.iter().filter_map(|&i| slots[i].take()).collect();
            self.counted.updates_forwarded += sub.len() as u64;
            // Kept only while a part goes to another server (during a move).
            let again = matches!(to, Away::Send(_)).then(|| sub.clone());
            let forwarded = tag.map(PartTag::forwarded);
            let message = ServerMsg::Apply {
                updates: sub,
                part: forwarded,
                reply: tx,
            };
            let part = self.send_away(to, message, rx, move |reply| ServerMsg::Apply {
                updates: again.unwrap_or_default(),
                part: forwarded,
                reply,
            });
            waits.push(part);
        }
        if waits.is_empty() {
            let _ = reply.send(first_error.map_or(Ok(epoch), Err));
            return;
        }
        let (id, myself) = (self.id, self.myself.clone());
        crate::spawn::spawn(async move {
            for part in waits {
                if let Err(e) = part.answer(&myself, id).await {
                    first_error.get_or_insert(e);
                }
            }
            // Parts of it were applied by other servers, at their own epochs.
            let _ = reply.send(first_error.map_or(Ok(None), Err));
        });
    }
}

/// Positions of a request's keys, grouped by where they go.
type Forwards = Vec<(Away, Vec<usize>)>;
type GetReply = oneshot::Sender<Result<Vec<Arc<RowData>>, HarpError>>;

impl Actor for ServerActor {
    type Msg = ServerMsg;
    type State = ServerState;
    type Arguments = (ServerId, Arc<TableSet>);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        (id, tables): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(ServerState {
            id,
            myself,
            store: ShardStore::new(tables),
            forwarded: HashMap::new(),
            held: HashMap::new(),
            stranded: Default::default(),
            num_shards: 1,
            crashed: false,
            staging: staging::Staging::default(),
            saves: 0,
            applied: Default::default(),
            forwarded_parts: Default::default(),
            direct_parts: Default::default(),
            restores: HashMap::new(),
            counted: ServerStats::default(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if state.crashed {
            // A crashed server answers nothing: dropping the message drops its reply.
            return Ok(());
        }
        match msg {
            ServerMsg::Get { keys, reply } => state.get(keys, reply),
            ServerMsg::Apply {
                updates,
                part,
                reply,
            } => state.apply(updates, part, reply),
            ServerMsg::Stage {
                node,
                flush,
                updates,
                reply,
            } => {
                let _ = reply.send(state.stage(node, flush, updates).map(|()| None));
            }
            ServerMsg::Commit { node, flush, reply } => state.commit(node, flush, reply),
            ServerMsg::DropStaged { node } => {
                let dropped = state.staging.drop_node(node);
                state.counted.staged_parts_dropped += dropped as u64;
                tracing::warn!(server = %state.id, node, dropped, kept = state.staging.len(), "dropped the flush parts a dead worker node left staged");
            }
            ServerMsg::Crash { reply } => {
                state.crashed = true;
                tracing::warn!("{}: failing on request (fault injection)", state.id);
                let _ = reply.send(CrashedServer {
                    rows: state.store.dump(),
                    stats: state.stats(),
                });
                // Requests held for shards on their way away die with the server.
                state.held.clear();
                myself.stop(Some("crashed (fault injection)".into()));
            }
            ServerMsg::HandOff {
                shard,
                num_shards,
                to_id,
                to,
                reply,
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
                if state.is_stranded(shard) {
                    let _ = reply.send(Err(HarpError::InvalidConfig(format!(
                        "{} holds no rows of {shard}: its last new owner never confirmed them, and it is re-created here once that owner's failure is handled",
                        state.id
                    ))));
                    return Ok(());
                }
                state.num_shards = num_shards;
                // The parts its rows hold that a node may send again: those forwarded here
                // and those applied here straight from their nodes.
                let mut parts = state.forwarded_parts.take_shard(shard, num_shards);
                parts.extend(state.direct_parts.take_shard(shard, num_shards));
                let rows = state.store.take_shard(shard, num_shards).with_parts(parts);
                let moved = ShardMoved {
                    rows: rows.len(),
                    bytes: rows.bytes(),
                };
                let in_order = moved.bytes <= IN_ORDER_ROWS_MAX;
                tracing::debug!(server = %state.id, %shard, to = %to_id, rows = moved.rows, bytes = moved.bytes, in_order, "handing a shard off");
                let (ack, acked) = oneshot::channel();
                let take_over = ServerMsg::TakeOver {
                    shard,
                    rows,
                    ack,
                    in_order,
                    restore: None,
                };
                if let Err(e) = to.send_message(take_over) {
                    // The new owner's actor is gone: keep the rows and refuse the move.
                    if let ractor::MessagingErr::SendErr(ServerMsg::TakeOver { mut rows, .. }) = e {
                        state.forwarded_parts.insert(rows.take_parts());
                        state.store.insert_shard(rows);
                        let _ = reply.send(Err(HarpError::ServerUnreachable(to_id)));
                    } else {
                        let _ = reply.send(Err(HarpError::ShardInTransit {
                            shard,
                            to: to_id,
                            detail: format!("{}: the new owner was gone", state.id),
                        }));
                    }
                    return Ok(());
                }
                // From now on this server forwards the shard's traffic: right behind rows
                // that travel in order, or held here until the new owner holds them.
                state.forwarded.insert(shard, to);
                if !in_order {
                    state.held.insert(shard, Vec::new());
                }
                let id = state.id;
                crate::spawn::spawn(async move {
                    let result = match acked.await {
                        Ok(()) => Ok(moved),
                        // The rows are gone from here: only the master can say where the
                        // shard lives now (`master/recovery.rs`).
                        Err(_) => Err(HarpError::ShardInTransit {
                            shard,
                            to: to_id,
                            detail: format!("{id} handed it off and forwards its traffic there"),
                        }),
                    };
                    // A server that stopped no longer holds anything.
                    let _ = myself.send_message(ServerMsg::HandedOver {
                        shard,
                        result,
                        reply,
                    });
                });
            }
            ServerMsg::HandedOver {
                shard,
                result,
                reply,
            } => {
                if result.is_ok() {
                    state.counted.shards_handed_off += 1;
                }
                let unconfirmed = matches!(result, Err(HarpError::ShardInTransit { .. }));
                if unconfirmed && state.forwarded.contains_key(&shard) {
                    state.strand(shard);
                }
                if state.is_stranded(shard) {
                    // Held until the master re-creates the shard here.
                    let _ = reply.send(result);
                    return Ok(());
                }
                let held = state.held.remove(&shard).unwrap_or_default();
                match state.forwarded.get(&shard) {
                    Some(to) => {
                        for message in held {
                            let _ = to.send_message(message);
                        }
                    }
                    // Not forwarded any more (it came back): serve what was held here.
                    None => {
                        for message in held {
                            let _ = myself.send_message(message);
                        }
                    }
                }
                let _ = reply.send(result);
            }
            ServerMsg::TakeOver {
                shard,
                mut rows,
                ack,
                in_order,
                restore,
            } => {
                tracing::debug!(server = %state.id, %shard, rows = rows.len(), bytes = rows.bytes(), in_order, ?restore, "taking a shard over");
                if let Some(restore) = restore {
                    if state.drop_before_restore(shard, restore) {
                        state.counted.shards_restored += 1;
                    }
                }
                state.forwarded.remove(&shard);
                state.forwarded_parts.insert(rows.take_parts());
                state.store.insert_shard(rows);
                state.unstrand(&myself, shard);
                let _ = ack.send(());
            }
            ServerMsg::Unanswered { lost, request } => state.on_unanswered(lost, *request),
            ServerMsg::Relocated { shard, to_id, to } => {
                state.relocate(&myself, shard, (to_id, to));
            }
            ServerMsg::Dump { reply } => {
                let _ = reply.send(state.store.dump());
            }
            ServerMsg::Stats { reply } => {
                let _ = reply.send(state.stats());
            }
            ServerMsg::Drain { reply, .. } => {
                let _ = reply.send(());
            }
            ServerMsg::Checkpoint(request) => state.checkpoint(request),
            ServerMsg::Reset { rows, reply } => {
                let _ = reply.send(state.reset(rows));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Init, UpdateRule};
    use std::sync::Mutex;

    /// A server that never sends its rows (a stuck server node) fails a dump, naming it,
    /// once [`DUMP_WAIT`] has passed: a consistent checkpoint's capture then fails and
    /// training goes on, instead of the job waiting for good. Time is paused.
    #[tokio::test(start_paused = true)]
    async fn a_dump_a_server_never_answers_fails_naming_it_after_the_wait() {
        let (silent, _) = Actor::spawn(None, crate::test_support::SilentServer, ())
            .await
            .unwrap();
        let began = tokio::time::Instant::now();
        // The outer bound only turns a dump that never gives up into a failure.
        let dump = dump_servers([(ServerId(3), silent)]);
        let ended = tokio::time::timeout(DUMP_WAIT * 10, dump).await;
        let error = ended.expect("the dump never gave up").unwrap_err();
        assert!(
            error
                .to_string()
                .contains("server-3 did not send its rows within 60 s"),
            "{error}"
        );
        assert!(began.elapsed() >= DUMP_WAIT);
    }

    /// Stands for a shard's new owner: records what reaches it, keeps the take-over's `ack`
    /// for the test to release, answers reads with one zero row per key.
    struct NewOwner;

    #[derive(Default)]
    struct Seen {
        kinds: Vec<&'static str>,
        ack: Option<oneshot::Sender<()>>,
    }

    impl Actor for NewOwner {
        type Msg = ServerMsg;
        type State = Arc<Mutex<Seen>>;
        type Arguments = Arc<Mutex<Seen>>;

        async fn pre_start(
            &self,
            _myself: ActorRef<ServerMsg>,
            seen: Self::Arguments,
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(seen)
        }

        async fn handle(
            &self,
            _myself: ActorRef<ServerMsg>,
            msg: ServerMsg,
            seen: &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            let mut seen = seen.lock().unwrap();
            match msg {
                ServerMsg::TakeOver { ack, .. } => {
                    seen.kinds.push("take_over");
                    seen.ack = Some(ack);
                }
                ServerMsg::Get { keys, reply } => {
                    seen.kinds.push("get");
                    let rows = keys.iter().map(|_| Arc::new(RowData::F32(vec![0.0; 2])));
                    let _ = reply.send(Ok(rows.collect()));
                }
                ServerMsg::Drain { reply, .. } => {
                    let _ = reply.send(());
                }
                _ => seen.kinds.push("other"),
            }
            Ok(())
        }
    }

    /// A key of `tables`' first table whose shard (of 2) is `shard`.
    fn key_in(table: &crate::table::Table<f32>, shard: u32) -> ParamKey {
        (0..)
            .map(|row| ParamKey::new(table.id(), row))
            .find(|k| shard_of(*k, 2) == ShardId(shard))
            .unwrap()
    }

    async fn read(server: &ActorRef<ServerMsg>, key: ParamKey) -> oneshot::Receiver<GetResult> {
        let (tx, rx) = oneshot::channel();
        server
            .send_message(ServerMsg::Get {
                keys: vec![key],
                reply: tx,
            })
            .unwrap();
        rx
    }

    type GetResult = Result<Vec<Arc<RowData>>, HarpError>;

    async fn drained(server: ActorRef<ServerMsg>) {
        let (tx, rx) = oneshot::channel();
        let within = std::time::Duration::from_secs(10);
        server
            .send_message(ServerMsg::Drain { reply: tx, within })
            .unwrap();
        rx.await.unwrap();
    }

    /// A server holding one row of `width` in shard 0 (of 2) and handing that shard to a
    /// [`NewOwner`], which has not confirmed it yet.
    struct HandOffUnderWay {
        old: ActorRef<ServerMsg>,
        new: ActorRef<ServerMsg>,
        seen: Arc<Mutex<Seen>>,
        moving: ParamKey,
        staying: ParamKey,
        handed: oneshot::Receiver<Result<ShardMoved, HarpError>>,
    }

    async fn hand_off_one_row(width: usize) -> HandOffUnderWay {
        let mut tables = TableSet::new();
        let table = tables
            .dense_f32("w", width, UpdateRule::Add, Init::Zeros)
            .unwrap();
        let (moving, staying) = (key_in(&table, 0), key_in(&table, 1));
        let (old, _) = Actor::spawn(None, ServerActor, (ServerId(0), Arc::new(tables)))
            .await
            .unwrap();
        apply(&old, vec![(moving, RowData::F32(vec![1.0; width]))]).await;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (new, _) = Actor::spawn(None, NewOwner, seen.clone()).await.unwrap();
        let (reply, handed) = oneshot::channel();
        old.send_message(ServerMsg::HandOff {
            shard: ShardId(0),
            num_shards: 2,
            to_id: ServerId(1),
            to: new.clone(),
            reply,
        })
        .unwrap();
        HandOffUnderWay {
            old,
            new,
            seen,
            moving,
            staying,
            handed,
        }
    }

    #[tokio::test]
    async fn a_moving_shards_requests_wait_for_large_rows_while_other_shards_flow() {
        // One row of this width is more than travels in order with later requests.
        let width = (IN_ORDER_ROWS_MAX / 4 + 1) as usize;
        let HandOffUnderWay {
            old,
            new,
            seen,
            moving,
            staying,
            handed,
        } = hand_off_one_row(width).await;
        let held = read(&old, moving).await;
        // A read of the shard that stays is answered here while the other one waits.
        let here = read(&old, staying).await.await.unwrap().unwrap();
        assert_eq!(here.len(), 1);
        drained(new.clone()).await;
        assert_eq!(
            seen.lock().unwrap().kinds,
            ["take_over"],
            "nothing may overtake the rows"
        );

        // The new owner confirms: the held read goes on, then the hand-off is answered.
        let ack = seen.lock().unwrap().ack.take().unwrap();
        ack.send(()).unwrap();
        let moved = handed.await.unwrap().unwrap();
        assert_eq!(moved.rows, 1);
        assert!(moved.bytes > IN_ORDER_ROWS_MAX);
        assert_eq!(held.await.unwrap().unwrap().len(), 1);
        drained(new).await;
        assert_eq!(seen.lock().unwrap().kinds, ["take_over", "get"]);
    }

    #[tokio::test]
    async fn small_rows_go_in_order_so_the_shards_requests_follow_them_before_the_ack() {
        let HandOffUnderWay {
            old,
            new,
            seen,
            moving,
            mut handed,
            ..
        } = hand_off_one_row(2).await;
        // The read is forwarded right behind the rows, though the new owner has not
        // confirmed them yet.
        let forwarded = read(&old, moving).await;
        drained(old.clone()).await;
        drained(new.clone()).await;
        assert_eq!(seen.lock().unwrap().kinds, ["take_over", "get"]);
        assert_eq!(forwarded.await.unwrap().unwrap().len(), 1);
        assert!(
            handed.try_recv().is_err(),
            "the hand-off is answered only once the new owner holds the rows"
        );

        let ack = seen.lock().unwrap().ack.take().unwrap();
        ack.send(()).unwrap();
        let moved = handed.await.unwrap().unwrap();
        assert_eq!(moved.rows, 1);
        drained(new).await;
        assert_eq!(seen.lock().unwrap().kinds, ["take_over", "get"]);
    }

    use checkpoint_round::tests::{apply, distances, dump, save, spawn_servers};

    fn in_shard(distances: &[(ParamKey, f64)], shard: u32) -> Vec<(ParamKey, f64)> {
        distances
            .iter()
            .copied()
            .filter(|(key, _)| shard_of(*key, 2) == ShardId(shard))
            .collect()
    }

    #[tokio::test]
    async fn a_shards_saved_values_move_with_it_and_its_old_owner_saves_none_of_it() {
        let mut tables = TableSet::new();
        let init = Init::Uniform {
            scale: 1.0,
            seed: 11,
        };
        let table = tables.dense_f32("w", 3, UpdateRule::Add, init).unwrap();
        let tables = Arc::new(tables);
        let servers = spawn_servers(2, &tables).await;
        let (old, new) = (&servers[0].1, &servers[1].1);
        let keys: Vec<ParamKey> = (0..24).map(|r| ParamKey::new(table.id(), r)).collect();
        let step = |key: ParamKey| {
            let r = key.row as f32;
            (key, RowData::F32(vec![r, -r, 0.5]))
        };
        apply(old, keys.iter().map(|&k| step(k)).collect()).await;
        let even: Vec<ParamKey> = keys.iter().copied().filter(|k| k.row % 2 == 0).collect();
        save(old, even.clone()).await;
        apply(old, keys.iter().map(|&k| step(k)).collect()).await;
        let before = distances(old).await;
        assert_eq!(before.len(), keys.len());

        let (reply, moved) = oneshot::channel();
        old.send_message(ServerMsg::HandOff {
            shard: ShardId(0),
            num_shards: 2,
            to_id: ServerId(1),
            to: new.clone(),
            reply,
        })
        .unwrap();
        let moved = moved.await.unwrap().unwrap();
        let moving = in_shard(&before, 0);
        assert_eq!(moved.rows, moving.len());
        assert!(!moving.is_empty() && moving.len() < keys.len());

        // The new owner measures the moved rows exactly as the old one did, and the old one
        // reports only the shard it kept.
        assert_eq!(distances(new).await, moving);
        assert_eq!(distances(old).await, in_shard(&before, 1));
        // Against the initial values (a saved copy left behind) the distances would differ.
        let current: std::collections::BTreeMap<_, _> = dump(new).await.into_iter().collect();
        let saved_and_moved = *even
            .iter()
            .find(|k| shard_of(**k, 2) == ShardId(0))
            .unwrap();
        let spec = tables.get(table.id()).unwrap();
        let from_initial = harp_core::scar::distance(
            spec.norm,
            &current[&saved_and_moved],
            &crate::table::initial_row(spec, saved_and_moved.row),
        )
        .unwrap();
        let at_new_owner = moving.iter().find(|(k, _)| *k == saved_and_moved).unwrap();
        assert_ne!(at_new_owner.1, from_initial);

        // A save of a moved key at the old owner saves nothing there and is not forwarded.
        let moved_keys: Vec<ParamKey> = moving.iter().map(|(k, _)| *k).collect();
        let kept = in_shard(&before, 1)[0].0;
        let answer = save(old, vec![moved_keys[0], kept, moved_keys[0]]).await;
        assert_eq!(answer.not_owned, vec![moved_keys[0]]);
        assert_eq!(answer.saved.len(), 1);
        assert_eq!(answer.saved[0].0, kept);
        assert_eq!(distances(new).await, moving);
        // The new owner saves them.
        let answer = save(new, moved_keys.clone()).await;
        assert!(answer.not_owned.is_empty());
        assert_eq!(answer.saved.len(), moved_keys.len());
        assert!(distances(new).await.iter().all(|(_, d)| *d == 0.0));
    }

    #[tokio::test]
    async fn a_shard_on_its_way_away_is_neither_measured_nor_saved_nor_held() {
        let mut tables = TableSet::new();
        let table = tables
            .dense_f32("w", 2, UpdateRule::Add, Init::Zeros)
            .unwrap();
        let (moving, staying) = (key_in(&table, 0), key_in(&table, 1));
        let (old, _) = Actor::spawn(None, ServerActor, (ServerId(0), Arc::new(tables)))
            .await
            .unwrap();
        let one = RowData::F32(vec![1.0, 0.0]);
        apply(&old, vec![(moving, one.clone()), (staying, one)]).await;
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (new, _) = Actor::spawn(None, NewOwner, seen.clone()).await.unwrap();
        let (reply, handed) = oneshot::channel();
        old.send_message(ServerMsg::HandOff {
            shard: ShardId(0),
            num_shards: 2,
            to_id: ServerId(1),
            to: new.clone(),
            reply,
        })
        .unwrap();

        // The new owner has not confirmed the rows: the old owner answers at once.
        assert_eq!(distances(&old).await, vec![(staying, 1.0)]);
        let answer = save(&old, vec![moving, staying]).await;
        assert_eq!(answer.not_owned, vec![moving]);
        assert_eq!(answer.saved.len(), 1);
        assert_eq!(answer.saved[0].0, staying);
        assert_eq!(distances(&old).await, vec![(staying, 0.0)]);
        assert_eq!(seen.lock().unwrap().kinds, ["take_over"]);

        let ack = seen.lock().unwrap().ack.take().unwrap();
        ack.send(()).unwrap();
        assert_eq!(handed.await.unwrap().unwrap().rows, 1);
        assert_eq!(
            seen.lock().unwrap().kinds,
            ["take_over"],
            "nothing was held"
        );
    }
}
