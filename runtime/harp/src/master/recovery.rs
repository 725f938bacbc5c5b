//! Partial recovery of a failed server (SCAR §5.4.1, DESIGN §2.4): only its shards are
//! re-created, on the live servers, from the running checkpoint's image; every other
//! parameter keeps its live value.
//!
//! 1. [`MasterState::on_server_lost`]: the server leaves the master's servers (checkpoint
//!    rounds stop asking it); its shards get new owners ([`ShardMap::place_orphans`]:
//!    the least loaded live servers); each new owner gets a `TakeOver` with the shard's
//!    saved rows ([`ShardRows::restored`]; rows never saved start again at their initial
//!    value).
//! 2. Once every new owner holds its rows, [`MasterState::on_recovered`] updates the shard
//!    map and reroutes every node, which then resend what the failed server never
//!    acknowledged (`ParamStore` waits for the reroute) and read from the new owners. A
//!    new owner that fails meanwhile (its take-over unanswered, or it is lost itself: two
//!    nodes cut off at about the same time) is passed over: its shards are re-created
//!    again, from the image, on the least loaded of the other heirs, until every one holds
//!    its rows or no heir is left (`recovery_retry_tests.rs`).
//!
//! The [`ServerRecovery`] report lists the shards, the rows and bytes restored and, when the
//! values at the failure are known, how far recovery moved them ([`LostValues`]). They are
//! known for a failure injected in this process (read from the server as it fails) and, for
//! a server node that died across processes, rebuilt exactly from what the live nodes
//! report it acknowledged after each row's save in the image (`node/lost_ledger.rs`): the
//! saved value plus those updates, on shards the server held since the job started. A
//! failure the job cannot recover from ends it with a clear error: no running checkpoint, no
//! live server left that takes load, or a shard on its way to the failed server from a
//! server that is gone too. A scale event that moves executors, or shards between two other
//! servers, goes on beside the recovery; the failed server's shards never go to a server
//! the latest scale event empties or emptied. Where a failed server's shard goes:
//!
//! - one it was handing off, unconfirmed (`MasterState::unconfirmed_hand_offs`; its new
//!   owner may hold the rows already): to that new owner
//!   ([`ShardMap::place_orphans_pinned`]); every take-over of a recovery carries its
//!   generation ([`Restore`]), so the new owner first drops what the hand-off brought;
//! - one handed to it, unconfirmed (the rows left their old owner, which forwards the
//!   shard's requests to the failed server and holds them once they go unanswered,
//!   `server/stranded.rs`): back to that old owner, whose take-over ends the holding; the
//!   master keeps such a hand-off unconfirmed even after the old owner reported that the
//!   new owner never confirmed the rows ([`HarpError::ShardInTransit`]), so the order in
//!   which it hears the failed hand-off and the death does not matter;
//! - one it was handed earlier (`MasterState::came_from`): back to the server it came from,
//!   if that one still takes load, for the same reason (requests sent there late);
//! - any other: to the least loaded live servers.
//!
//! A move the failure ends is reported failed ([`HarpError::MoveInterrupted`]: a leave
//! tries its event again). No scale event starts while a recovery is under way or a
//! hand-off awaits one ([`MasterState::recovery_pending`]): the shard map still names the
//! failed server. While a hand-off is unconfirmed, no
//! checkpoint round saves the new owner's rows of the shard
//! (`server::checkpoint_round::InTransit`): the image holds nothing of what the nodes send
//! again.
//!
//! [`ShardMap::place_orphans`]: harp_core::ShardMap::place_orphans
//! [`ShardMap::place_orphans_pinned`]: harp_core::ShardMap::place_orphans_pinned

use super::{MasterMsg, MasterState};
use crate::app::App;
use crate::error::HarpError;
use crate::node::lost_ledger::{lost_since, RowsByEpoch};
use crate::scar::{LostValues, ServerRecovery};
use crate::server::{Restore, ServerMsg, ShardRows};
use crate::table::{initial_row, TableSet, UpdateRule};
use harp_core::scar::plan_recovery;
use harp_core::{ParamKey, RowData, ServerId, ShardId};
use ractor::ActorRef;
use std::collections::BTreeMap;
use std::time::Instant;
use tokio::sync::oneshot;

/// What the live nodes report a dead server acknowledged since each row's last save, by
/// save epoch (all nodes' reports together), or why one of them cannot say exactly.
pub(crate) type Acknowledged = Result<RowsByEpoch, String>;

/// A take-over to send: the shard, its new owner and its actor, the rows.
type TakeOverOf = (ShardId, ServerId, ActorRef<ServerMsg>, ShardRows);

/// Who waits for a recovery's report (a fault injector), if anyone.
pub(crate) type RecoveryReply = Option<oneshot::Sender<Result<ServerRecovery, HarpError>>>;

/// A recovery's take-overs answered (internal): the new owners hold their rows, but for
/// the take-overs that `failed`.
pub(crate) struct Recovered {
    pub report: ServerRecovery,
    pub placements: Vec<(ShardId, ServerId)>,
    pub started: Instant,
    /// Take-overs that failed: the shard, the server it was to go to, why.
    pub failed: Vec<(ShardId, ServerId, HarpError)>,
    /// Servers a take-over of this recovery failed on: no later try places a shard there.
    pub passed_over: std::collections::BTreeSet<ServerId>,
    pub reply: RecoveryReply,
}

impl<A: App> MasterState<A> {
    /// Whether the job can survive losing `server`; the reason it cannot otherwise.
    pub(super) fn recoverable(&self, server: ServerId) -> Result<(), HarpError> {
        let refuse = |reason: &str| {
            Err(HarpError::Unrecoverable {
                server,
                reason: reason.to_string(),
            })
        };
        if self.checkpoint.is_none() {
            return refuse("the job keeps no SCAR running checkpoint to restore its shards from");
        }
        if !self.servers.contains_key(&server) {
            return refuse("it is not one of the job's live servers");
        }
        // Executor moves do not touch the shards, nor do shard moves between two other
        // servers. A shard on its way from this server is re-created on its new owner, one
        // on its way to it on its old owner (`start_recovery`), which must still be there.
        let stranded = self
            .arriving(server)
            .into_iter()
            .find(|(_, from)| !self.servers.contains_key(from));
        if let Some((shard, from)) = stranded {
            return refuse(&format!(
                "{shard} was on its way to it from {from}, which is gone too"
            ));
        }
        if self.heirs(server).is_empty() {
            return refuse("no other server that takes load is left to take its shards");
        }
        Ok(())
    }

    /// The shards on their way to `server` whose hand-off is not confirmed, with their old
    /// owners: the rows may have left, and the old owner forwards the shard to `server`.
    fn arriving(&self, server: ServerId) -> BTreeMap<ShardId, ServerId> {
        let to_server = |(_, (_, to)): &(&ShardId, &(ServerId, ServerId))| *to == server;
        (self.unconfirmed_hand_offs.iter().filter(to_server))
            .map(|(shard, (from, _))| (*shard, *from))
            .collect()
    }

    /// What recovery is pending, if any: a failed server's shards being re-created, or a
    /// hand-off awaiting the recovery of a server it involved (outside a scale event: its
    /// new owner never confirmed the rows, or its old owner vanished before answering). The
    /// shard map is not settled until then, so no scale event starts (`moves.rs`).
    pub(super) fn recovery_pending(&self) -> Option<String> {
        if let Some(server) = self.servers_recovering.first() {
            return Some(format!(
                "{server} failed and its shards are being re-created from the running checkpoint"
            ));
        }
        let (shard, (from, to)) = self.unconfirmed_hand_offs.first_key_value()?;
        Some(format!(
            "the hand-off of {shard} from {from} to {to} was cut short by a failure, and the shard's place is settled once the failed server is recovered"
        ))
    }

    /// The live servers that may take `server`'s shards: every other one, except those the
    /// latest scale event empties or emptied (they are to hold nothing).
    fn heirs(&self, server: ServerId) -> Vec<ServerId> {
        self.servers
            .keys()
            .copied()
            .filter(|s| *s != server && !self.given_away.contains(s))
            .collect()
    }

    /// `server` failed (`at_failure`: its rows at that point, if known, or what the nodes
    /// report it acknowledged): re-create its shards on the live servers. An error ends the
    /// job.
    pub(super) fn on_server_lost(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        server: ServerId,
        at_failure: (Option<Vec<(ParamKey, RowData)>>, Option<Acknowledged>),
        reply: RecoveryReply,
    ) -> Result<(), HarpError> {
        let mut reply = reply;
        let result = self.start_recovery(myself, server, at_failure, &mut reply);
        if let (Err(e), Some(reply)) = (&result, reply) {
            let _ = reply.send(Err(HarpError::Unrecoverable {
                server,
                reason: e.to_string(),
            }));
        }
        result
    }

    fn start_recovery(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        server: ServerId,
        (at_failure, acknowledged): (Option<Vec<(ParamKey, RowData)>>, Option<Acknowledged>),
        reply: &mut RecoveryReply,
    ) -> Result<(), HarpError> {
        let started = Instant::now();
        self.recoverable(server)?;
        if let Some(checkpoint) = self.checkpoint.as_mut() {
            // Its saves that come in from now on are not kept: the image is read now.
            checkpoint.server_lost(server);
        }
        let Some(checkpoint) = self.checkpoint.as_ref() else {
            return Err(HarpError::Unrecoverable {
                server,
                reason: "the job keeps no SCAR running checkpoint".into(),
            });
        };
        let heirs = self.heirs(server);
        // A shard this server was handing off when it failed goes to its new owner, which
        // may hold its rows already (the take-over replaces them with the saved ones); the
        // move is over, failed.
        let leaving: BTreeMap<ShardId, ServerId> = self
            .unconfirmed_hand_offs
            .iter()
            .filter(|(_, (from, _))| *from == server)
            .map(|(shard, (_, to))| (*shard, *to))
            .collect();
        // One it was handed earlier goes back where it came from (that server may still
        // forward its requests here, and holds them once they go unanswered:
        // `server/stranded.rs`), when that one still takes load.
        let mut pins = leaving.clone();
        for shard in self.shards.shards_on(server) {
            if let Some(from) = self.came_from.get(&shard) {
                pins.entry(shard).or_insert(*from);
            }
        }
        let mut placements = self.shards.place_orphans_pinned(server, &heirs, &pins)?;
        // A shard this server was being handed, unconfirmed, died with it or never came:
        // it is re-created on its old owner (which stops forwarding it here), whether or
        // not that one is to give its load away; the move is over, failed.
        let arriving = self.arriving(server);
        placements.extend(arriving.iter().map(|(shard, from)| (*shard, *from)));
        self.shards_moved.extend(arriving.keys());
        for (shard, _) in &placements {
            self.came_from.remove(shard);
        }
        self.servers.remove(&server);
        let (take_overs, rows_restored, bytes_restored) =
            self.restoring_take_overs(checkpoint, &placements)?;
        let at_failure = match (at_failure, acknowledged) {
            (Some(rows), _) => Some(rows),
            (None, Some(acknowledged)) => {
                let lost_shards: Vec<ShardId> = placements.iter().map(|(s, _)| *s).collect();
                let rebuilt = acknowledged.and_then(|reports| {
                    self.values_at_failure(server, &lost_shards, reports, checkpoint)
                });
                match rebuilt {
                    Ok(rows) => Some(rows),
                    Err(why) => {
                        tracing::warn!(%server, %why, "what the failed server lost is not known exactly; the report leaves it out");
                        None
                    }
                }
            }
            (None, None) => None,
        };
        let lost = match at_failure {
            Some(rows) => Some(lost_values(&self.tables, rows, |key| {
                checkpoint.saved(key).map(|v| (**v).clone())
            })?),
            None => None,
        };
        let report = ServerRecovery {
            server: server.0,
            shards: placements.iter().map(|(s, to)| (s.0, to.0)).collect(),
            rows_restored,
            bytes_restored,
            detected_at_s: started.duration_since(self.started).as_secs_f64(),
            duration_s: 0.0,
            lost,
        };
        tracing::warn!(%server, shards = placements.len(), rows_restored, "server failed: re-creating its shards from the running checkpoint");
        let myself = myself.clone();
        let reply = reply.take();
        // Each hand-off from the failed server ends here: the shard is re-created on its
        // new owner, unless that one takes no load any more (then on the least loaded).
        let ended_moves: Vec<(ShardId, String)> = leaving
            .iter()
            .map(|(shard, to)| {
                let now_on = placements
                    .iter()
                    .find(|(s, _)| s == shard)
                    .map_or(*to, |(_, on)| *on);
                let why = format!("{server} failed while handing {shard} to {to}; {shard} was re-created on {now_on} from the running checkpoint");
                (*shard, why)
            })
            .chain(arriving.iter().map(|(shard, from)| {
                let why = format!("{server} failed while {from} handed {shard} to it; {shard} was re-created on {from} from the running checkpoint");
                (*shard, why)
            }))
            .collect();
        self.restore_generation += 1;
        self.servers_recovering.insert(server);
        let restore = Restore {
            generation: self.restore_generation,
            num_shards: self.shards.num_shards(),
        };
        let done = Recovered {
            report,
            placements,
            started,
            failed: Vec::new(),
            passed_over: Default::default(),
            reply,
        };
        spawn_take_overs(myself, take_overs, restore, done);
        for (shard, why) in ended_moves {
            self.unconfirmed_hand_offs.remove(&shard);
            if self.scale.as_ref().is_some_and(|scale| scale.moves(shard)) {
                self.move_failed(shard, HarpError::MoveInterrupted(why));
            }
        }
        Ok(())
    }

    /// Every take-over answered. A shard whose take-over failed, or whose new owner failed
    /// since (another server lost while this one recovers, say a node cut off the network
    /// at about the same time), is re-created again, from the image, on the least loaded
    /// of the other heirs; once every new owner holds its rows, the shards are routed
    /// there. An error (no heir left) ends the job.
    pub(super) fn on_recovered(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        done: Recovered,
    ) -> Result<(), HarpError> {
        let mut done = done;
        let gone = done
            .placements
            .iter()
            .filter(|(_, to)| !self.servers.contains_key(to))
            .filter(|(shard, _)| !done.failed.iter().any(|(s, _, _)| s == shard))
            .map(|&(shard, to)| (shard, to, HarpError::ServerUnreachable(to)))
            .collect::<Vec<_>>();
        done.failed.extend(gone);
        if !done.failed.is_empty() {
            let server = ServerId(done.report.server);
            return match self.take_over_again(myself, done) {
                Ok(()) => Ok(()),
                Err((reason, reply)) => {
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(HarpError::Unrecoverable {
                            server,
                            reason: reason.clone(),
                        }));
                    }
                    Err(HarpError::Unrecoverable { server, reason })
                }
            };
        }
        let Recovered {
            mut report,
            placements,
            started,
            reply,
            ..
        } = done;
        self.servers_recovering.remove(&ServerId(report.server));
        for &(shard, to) in &placements {
            self.shards.assign(shard, to)?;
            self.shards_moved.insert(shard);
            for route in &self.routes {
                route.reroute(shard, to)?;
            }
            self.tell_relocated(shard, to);
        }
        for route in &self.routes {
            route.forget_server(ServerId(report.server));
        }
        report.duration_s = started.elapsed().as_secs_f64();
        tracing::warn!(
            server = report.server,
            took_ms = (report.duration_s * 1000.0) as u64,
            "server recovered from the running checkpoint"
        );
        self.recoveries.push(report.clone());
        self.events
            .tell(crate::control::JobEvent::ServerRecovered(report.clone()));
        if let Some(reply) = reply {
            let _ = reply.send(Ok(report));
        }
        Ok(())
    }
}

impl<A: App> MasterState<A> {
    /// Re-creates the shards of `done.failed` on other heirs of the failed server (none a
    /// take-over of this recovery failed on), from the image, and waits for those
    /// take-overs in turn; why the job cannot recover when no heir is left.
    fn take_over_again(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        mut done: Recovered,
    ) -> Result<(), (String, RecoveryReply)> {
        let server = ServerId(done.report.server);
        let failed = std::mem::take(&mut done.failed);
        done.passed_over.extend(failed.iter().map(|(_, to, _)| *to));
        let heirs: Vec<ServerId> = (self.heirs(server).into_iter())
            .filter(|h| !done.passed_over.contains(h))
            .collect();
        let passed_over: Vec<String> = done.passed_over.iter().map(|s| s.to_string()).collect();
        let why = |what: &str| {
            let failures: Vec<String> = failed
                .iter()
                .map(|(shard, to, e)| format!("{shard} on {to}: {e}"))
                .collect();
            format!(
                "re-creating its shards failed on {} (the last time: {}); {what}",
                passed_over.join(", "),
                failures.join("; ")
            )
        };
        if heirs.is_empty() {
            let reason = why("no other server that takes load is left");
            return Err((reason, done.reply.take()));
        }
        let shards: Vec<ShardId> = failed.iter().map(|(shard, _, _)| *shard).collect();
        let again = self.least_loaded(&heirs, &shards, &done.placements);
        tracing::warn!(%server, shards = again.len(), "re-creating a failed server's shards again: the servers first chosen failed too");
        let Some(checkpoint) = self.checkpoint.as_ref() else {
            return Err((
                why("the job keeps no running checkpoint"),
                done.reply.take(),
            ));
        };
        let take_overs = match self.restoring_take_overs(checkpoint, &again) {
            Ok((take_overs, _, _)) => take_overs,
            Err(e) => return Err((why(&e.to_string()), done.reply.take())),
        };
        for &(shard, to) in &again {
            for placed in done.placements.iter_mut().filter(|(s, _)| *s == shard) {
                placed.1 = to;
            }
            for placed in done.report.shards.iter_mut().filter(|(s, _)| *s == shard.0) {
                placed.1 = to.0;
            }
        }
        self.restore_generation += 1;
        let restore = Restore {
            generation: self.restore_generation,
            num_shards: self.shards.num_shards(),
        };
        spawn_take_overs(myself.clone(), take_overs, restore, done);
        Ok(())
    }

    /// The take-overs that re-create the shards of `placements` on their new owners from
    /// `checkpoint`'s image (rows never saved start at their initial value), and how many
    /// rows and bytes they restore. A new owner that is not a live server fails it.
    fn restoring_take_overs(
        &self,
        checkpoint: &super::checkpoints::RunningCheckpoint,
        placements: &[(ShardId, ServerId)],
    ) -> Result<(Vec<TakeOverOf>, usize, u64), HarpError> {
        let mut saved_by_shard = checkpoint
            .saved_rows_by_shard(self.shards.num_shards(), |shard| {
                placements.iter().any(|(placed, _)| *placed == shard)
            });
        let (mut rows_restored, mut bytes_restored) = (0, 0);
        let mut take_overs = Vec::with_capacity(placements.len());
        for &(shard, to) in placements {
            let saved = saved_by_shard.remove(&shard).unwrap_or_default();
            rows_restored += saved.len();
            bytes_restored += saved.iter().map(|(_, v)| v.bytes() as u64).sum::<u64>();
            let rows = ShardRows::restored(&self.tables, saved)?;
            let actor = self
                .servers
                .get(&to)
                .cloned()
                .ok_or(HarpError::ServerUnreachable(to))?;
            take_overs.push((shard, to, actor, rows));
        }
        Ok((take_overs, rows_restored, bytes_restored))
    }

    /// Where each of `shards` goes among `heirs`: one at a time to the heir holding the
    /// fewest shards (in the shard map, plus those `placements` of this recovery already
    /// give it), the lower id on a tie.
    fn least_loaded(
        &self,
        heirs: &[ServerId],
        shards: &[ShardId],
        placements: &[(ShardId, ServerId)],
    ) -> Vec<(ShardId, ServerId)> {
        let mut load: BTreeMap<ServerId, usize> = heirs
            .iter()
            .map(|h| {
                let placed = placements
                    .iter()
                    .filter(|(s, to)| to == h && !shards.contains(s));
                (*h, self.shards.shards_on(*h).len() + placed.count())
            })
            .collect();
        let mut out = Vec::with_capacity(shards.len());
        for &shard in shards {
            // `heirs` is not empty.
            let Some((&to, _)) = load.iter().min_by_key(|(h, n)| (**n, **h)) else {
                break;
            };
            *load.entry(to).or_default() += 1;
            out.push((shard, to));
        }
        out
    }

    /// Tells every other live server that `shard` was re-created on `to`: one that forwards
    /// it (perhaps to the failed server) or holds its requests stranded sends them there
    /// (`server/stranded.rs`). Needed where the shard did not go back to the server it came
    /// from (that one gives its load away, or the shard came along a chain of servers).
    fn tell_relocated(&self, shard: ShardId, to: ServerId) {
        let Some(to_actor) = self.servers.get(&to) else {
            return;
        };
        for (server, actor) in &self.servers {
            if *server != to {
                // A server that is gone forwards nothing any more.
                let _ = actor.send_message(ServerMsg::Relocated {
                    shard,
                    to_id: to,
                    to: to_actor.clone(),
                });
            }
        }
    }

    /// The values of the rows of `server`'s `lost_shards` at its failure, as far as they
    /// differ from their saved values: each row's saved value (its initial value if never
    /// saved) plus what the nodes report `server` acknowledged at or after that save's
    /// epoch (`reports`, every node's together). Why not, when that would not be exact.
    fn values_at_failure(
        &self,
        server: ServerId,
        lost_shards: &[ShardId],
        reports: RowsByEpoch,
        checkpoint: &super::checkpoints::RunningCheckpoint,
    ) -> Result<Vec<(ParamKey, RowData)>, String> {
        if let Some(shard) = lost_shards.iter().find(|s| self.shards_moved.contains(s)) {
            return Err(format!(
                "{shard} changed owner during the job; acknowledged updates are matched to saves only on shards their server held from the start"
            ));
        }
        if let Some(spec) = self.tables.iter().find(|t| t.rule != UpdateRule::Add) {
            return Err(format!(
                "table '{}' is updated by {:?}: its lost values are not a sum of deltas",
                spec.name, spec.rule
            ));
        }
        let num_shards = self.shards.num_shards();
        let mut by_key: BTreeMap<ParamKey, Vec<(u64, RowData)>> = BTreeMap::new();
        for (key, sums) in reports {
            if !lost_shards.contains(&harp_core::shard_of(key, num_shards)) {
                return Err(format!(
                    "a node reported {key}, which {server} did not hold"
                ));
            }
            by_key.entry(key).or_default().extend(sums);
        }
        let mut rows = Vec::with_capacity(by_key.len());
        for (key, sums) in by_key {
            let epoch = match checkpoint.saved_at(key) {
                None => 0,
                Some((by, epoch)) if by == server => epoch,
                Some((by, _)) => {
                    return Err(format!("{key} was last saved by {by}, not by {server}"))
                }
            };
            let Some(lost) = lost_since(&sums, epoch) else {
                continue;
            };
            let spec = self.tables.get(key.table).map_err(|e| e.to_string())?;
            let mut value = match checkpoint.saved(key) {
                Some(saved) => (**saved).clone(),
                None => initial_row(spec, key.row),
            };
            value.add_assign(&lost).map_err(|e| format!("{key}: {e}"))?;
            rows.push((key, value));
        }
        Ok(rows)
    }
}

/// Sends every `TakeOver` (of recovery `restore`) on a task of its own, waits until each
/// answered, and hands `done` back to the master with the ones that failed.
fn spawn_take_overs<A: App>(
    myself: ActorRef<MasterMsg<A>>,
    take_overs: Vec<TakeOverOf>,
    restore: Restore,
    mut done: Recovered,
) {
    crate::spawn::spawn(async move {
        done.failed = take_over_all(take_overs, restore).await;
        // The job may have ended meanwhile.
        let _ = myself.send_message(MasterMsg::Recovered(done));
    });
}

/// Sends every `TakeOver` (of recovery `restore`) and waits until each new owner holds its
/// rows; the take-overs that failed.
async fn take_over_all(
    take_overs: Vec<TakeOverOf>,
    restore: Restore,
) -> Vec<(ShardId, ServerId, HarpError)> {
    let mut acks = Vec::with_capacity(take_overs.len());
    let mut failed = Vec::new();
    for (shard, to, actor, rows) in take_overs {
        let (ack, acked) = oneshot::channel();
        let sent = actor.send_message(ServerMsg::TakeOver {
            shard,
            rows,
            ack,
            // Nothing is forwarded behind a failed server's rows: every node is
            // rerouted only once all of them are in.
            in_order: false,
            restore: Some(restore),
        });
        match sent {
            Ok(()) => acks.push((shard, to, acked)),
            Err(_) => failed.push((shard, to, HarpError::ServerUnreachable(to))),
        }
    }
    for (shard, to, acked) in acks {
        if acked.await.is_err() {
            failed.push((shard, to, HarpError::ServerUnreachable(to)));
        }
    }
    failed
}

/// How far replacing `at_failure` (each row's value when its server failed) by its saved
/// value (`saved`; its initial value when `None`) moves it, per table in the table's norm,
/// and the plain sum of the differences.
pub(crate) fn lost_values(
    tables: &TableSet,
    at_failure: Vec<(ParamKey, RowData)>,
    saved: impl Fn(ParamKey) -> Option<RowData>,
) -> Result<LostValues, HarpError> {
    let mut by_table: BTreeMap<harp_core::TableId, Vec<(ParamKey, RowData)>> = BTreeMap::new();
    for (key, value) in at_failure {
        by_table.entry(key.table).or_default().push((key, value));
    }
    let mut tables_out = Vec::with_capacity(by_table.len());
    let mut lost_sum = 0.0;
    for (table, mut rows) in by_table {
        rows.sort_unstable_by_key(|(key, _)| *key);
        let spec = tables.get(table)?;
        let restored =
            |key: ParamKey| Some(saved(key).unwrap_or_else(|| initial_row(spec, key.row)));
        let plan = plan_recovery(&rows, restored, spec.norm)
            .map_err(|e| HarpError::InvalidConfig(format!("table '{}': {e}", spec.name)))?;
        for ((_, lost), (_, restored)) in rows.iter().zip(&plan.restore) {
            lost_sum += scalar_differences(lost, restored).sum::<f64>();
        }
        tables_out.push((spec.name.to_string(), plan.report));
    }
    Ok(LostValues {
        tables: tables_out,
        lost_sum,
    })
}

/// `a − b` for each scalar of two rows of the same kind (none for rows of different kinds;
/// [`plan_recovery`] checks kinds and widths before [`lost_values`] uses this).
pub(super) fn scalar_differences<'a>(
    a: &'a RowData,
    b: &'a RowData,
) -> Box<dyn Iterator<Item = f64> + 'a> {
    match (a, b) {
        (RowData::F32(a), RowData::F32(b)) => {
            Box::new(a.iter().zip(b).map(|(x, y)| f64::from(*x) - f64::from(*y)))
        }
        (RowData::I64(a), RowData::I64(b)) => {
            Box::new(a.iter().zip(b).map(|(x, y)| (x - y) as f64))
        }
        _ => Box::new(std::iter::empty()),
    }
}

#[cfg(test)]
#[path = "recovery_retry_tests.rs"]
mod retry_tests;
