//! The master's side of SCAR's running checkpoint (SCAR §5.4.3): when rounds are due, and
//! the checkpoint's image.
//!
//! The driver reports iterations as they complete (`DriverContext::iteration_completed`).
//! Every `r·C`-th one ([`harp_core::scar::due`]) starts a round of
//! [`checkpoint_round`] on a task of its own, so the master keeps dispatching while the
//! servers measure and save; the round hands its selector back with its outcome. One round
//! runs at a time: a round due while another runs is skipped and counted.
//!
//! A job whose driver finished while a round runs waits for that round, up to
//! [`ROUND_AT_END_WAIT`], so that what it saves is in the image and counted
//! ([`RunningCheckpoint::round_running`]); a round still running past that is counted in
//! [`CheckpointStats::rounds_unfinished`].
//!
//! Injected faults wait here for their iteration ([`RunningCheckpoint::take_faults`]); one
//! that strikes after its iteration's round ([`FaultTiming::AfterRound`]) waits for that
//! round to end ([`RunningCheckpoint::wait_for_round`], [`RunningCheckpoint::round_done`]).
//!
//! The *image* is what persistent storage holds in SCAR: the last saved value of every row
//! that a round ever saved (a row absent from it is at its initial value). The master keeps
//! it in memory, outside the servers, so it survives any server's failure: a partial
//! recovery re-creates a failed server's shards from it ([`super::recovery`]). A round that
//! fails saves nothing and is counted; training goes on. Beside each saved row the image
//! keeps the server that saved it and that server's save epoch, which tells which of the
//! updates nodes report a dead server acknowledged are missing from the row's saved value
//! (`node/lost_ledger.rs`).

use super::MasterMsg;
use crate::app::App;
use crate::error::HarpError;
use crate::scar::{CheckpointStats, FaultTiming, Injection, Recovery, ScarOptions};
use crate::server::checkpoint_round::{
    checkpoint_round_except, InTransit, RoundOutcome, ServerSave,
};
use crate::server::ServerMsg;
use harp_core::scar::{due, CheckpointSelector};
use harp_core::{shard_of, KeyMap, ParamKey, RowData, ServerId, ShardId};
use ractor::ActorRef;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a job whose driver finished waits for a checkpoint round still running before
/// it ends without it. A round asks every server once for distances and once to save, so
/// it takes milliseconds; this bounds the wait where a server never answers.
pub(crate) const ROUND_AT_END_WAIT: Duration = Duration::from_secs(5);

/// What a finished round hands back to the master.
pub(crate) struct RoundDone {
    /// The iteration the round was started for.
    pub iteration: u64,
    pub selector: CheckpointSelector,
    pub result: Result<RoundOutcome, HarpError>,
    pub started: Instant,
}

/// The servers a round asks, and the shards in transit whose new owners' rows it leaves out.
pub(crate) type RoundServers = (Vec<(ServerId, ActorRef<ServerMsg>)>, InTransit);

/// Runs `round` on a task of its own; the master hears `CheckpointRoundDone` when it ends.
pub(crate) fn spawn_round<A: App>(
    master: &ActorRef<MasterMsg<A>>,
    round: impl Future<Output = RoundDone> + Send + 'static,
) {
    let master = master.clone();
    crate::spawn::spawn(async move {
        let done = round.await;
        // The job may have ended meanwhile.
        let _ = master.send_message(MasterMsg::CheckpointRoundDone(done));
    });
}

impl<A: App> super::MasterState<A> {
    /// The driver finished: end the job, or, if a checkpoint round runs, once it has ended
    /// (what it saves is then in the image and counted), waiting for it at most
    /// [`ROUND_AT_END_WAIT`].
    pub(super) fn finish(&mut self, myself: &ActorRef<MasterMsg<A>>) {
        if !self
            .checkpoint
            .as_ref()
            .is_some_and(RunningCheckpoint::round_running)
        {
            self.end(Ok(()));
            return;
        }
        tracing::debug!("the driver finished; the job ends when the running checkpoint round does");
        self.ending_after_round = true;
        super::tell_after(myself, ROUND_AT_END_WAIT, MasterMsg::RoundAtEndWaitOver);
    }

    /// While the job waits for its last checkpoint round: the round's end, or the wait's,
    /// ends the job. The driver has finished, so late completions, commands and failures
    /// change nothing (a command's reply is dropped, as after the end).
    pub(super) fn while_ending_after_round(&mut self, msg: MasterMsg<A>) {
        if self.checkpoint.is_none() {
            // Not reached: `finish` waits only for a running checkpoint's round.
            self.end(Ok(()));
            return;
        }
        match msg {
            MasterMsg::CheckpointRoundDone(done) => {
                self.checkpoint_round_ended(done);
            }
            MasterMsg::RoundAtEndWaitOver => {
                tracing::warn!(
                    waited_s = ROUND_AT_END_WAIT.as_secs_f64(),
                    "the job ended before its last checkpoint round did; that round is not counted"
                );
                if let Some(checkpoint) = self.checkpoint.as_mut() {
                    checkpoint.round_unfinished();
                }
            }
            _ => return,
        }
        self.end(Ok(()));
    }
}

impl<A: App> super::MasterState<A> {
    /// A checkpoint round ended: what it saved goes into the image. Returns each server's
    /// save epoch and the keys it saved (empty when the round failed). A failed save of a
    /// server that is no longer the job's is not counted ([`without_departed`]).
    pub(super) fn checkpoint_round_ended(&mut self, done: RoundDone) -> Vec<ServerSave> {
        let done = without_departed(done, &self.servers);
        match self.checkpoint.as_mut() {
            Some(checkpoint) => checkpoint.round_done(done),
            None => Vec::new(),
        }
    }
}

/// `done` without the failures of servers that are no longer the job's (`servers`: those
/// it has now): a server whose node left during the round, or that failed and whose shards
/// were re-created elsewhere, holds none of the job's rows, so its missing save costs
/// nothing (a recovery reports what a failed server lost).
fn without_departed(
    mut done: RoundDone,
    servers: &BTreeMap<ServerId, ActorRef<ServerMsg>>,
) -> RoundDone {
    if let Ok(outcome) = &mut done.result {
        outcome.failed.retain(|(server, error)| {
            let ours = servers.contains_key(server);
            if !ours {
                tracing::debug!(%server, %error, "a server no longer in the job saved nothing in a checkpoint round");
            }
            ours
        });
    }
    done
}

/// The running checkpoint's schedule, selector and image.
pub(crate) struct RunningCheckpoint {
    options: ScarOptions,
    interval: u64,
    /// `None` while a round runs (the round holds it).
    selector: Option<CheckpointSelector>,
    image: KeyMap<Arc<RowData>>,
    /// The server that saved each row of the image and its save epoch then.
    saved_at: KeyMap<(ServerId, u64)>,
    stats: CheckpointStats,
    /// Faults still to inject, by iteration.
    faults: BTreeMap<u64, Vec<Injection>>,
    /// Faults that strike after the round of their iteration, and that iteration, while
    /// that round is still to run or running.
    waiting: Option<(u64, Vec<Injection>)>,
    /// The iteration of the last round that ended.
    last_round: Option<u64>,
    /// Each server's newest save in the image (its save epoch): told to it with the next
    /// save, whose answer then lists no flush part applied before it.
    recorded: BTreeMap<ServerId, u64>,
    /// Failed servers whose shards were re-created from the image: a save of theirs that
    /// comes in later (a round that ran across the failure) is not kept.
    lost: std::collections::BTreeSet<ServerId>,
}

/// What to do with the faults due at an iteration.
pub(crate) enum FaultsDue {
    /// None are due.
    None,
    /// Inject these now.
    Now(Vec<Injection>),
    /// They wait for the round of `iteration`: start it if it is not running.
    AfterRound { iteration: u64 },
}

impl RunningCheckpoint {
    /// Refuses options whose fraction or period is invalid.
    pub(crate) fn new(options: ScarOptions) -> Result<Self, HarpError> {
        options.validate()?;
        let interval = options.interval()?;
        let mut faults: BTreeMap<u64, Vec<Injection>> = BTreeMap::new();
        for injection in &options.inject {
            faults
                .entry(injection.at_iteration)
                .or_default()
                .push(injection.clone());
        }
        Ok(Self {
            selector: Some(CheckpointSelector::new(options.selection)),
            options,
            interval,
            image: KeyMap::default(),
            saved_at: KeyMap::default(),
            stats: CheckpointStats::default(),
            faults,
            waiting: None,
            last_round: None,
            recorded: BTreeMap::new(),
            lost: Default::default(),
        })
    }

    /// The faults to inject once `iteration` is complete (those of earlier iterations not
    /// injected yet too), in iteration order; each is handed out once. If any strikes after
    /// the round and a round is due at `iteration`, they all wait for that round.
    pub(crate) fn take_faults(&mut self, iteration: u64) -> FaultsDue {
        let later = self.faults.split_off(&(iteration.saturating_add(1)));
        let due_faults: Vec<Injection> = std::mem::replace(&mut self.faults, later)
            .into_values()
            .flatten()
            .collect();
        if due_faults.is_empty() {
            return FaultsDue::None;
        }
        let after_round = due_faults
            .iter()
            .any(|f| f.timing == FaultTiming::AfterRound);
        let first = self.stats.last_iteration.map_or(0, |l| l + 1);
        let round_due = (first..=iteration).any(|i| due(i, self.interval));
        if after_round && round_due {
            self.waiting = Some((iteration, due_faults));
            FaultsDue::AfterRound { iteration }
        } else {
            FaultsDue::Now(due_faults)
        }
    }

    /// Faults wait for the round of an iteration: `Some(iteration)` when that round must
    /// still be started (none runs now and it has not run), `None` otherwise.
    pub(crate) fn wait_for_round(&self) -> Option<u64> {
        let (iteration, _) = self.waiting.as_ref()?;
        let ran = self.last_round.is_some_and(|last| last >= *iteration);
        (!ran && self.selector.is_some()).then_some(*iteration)
    }

    /// The faults that waited for a round, once it has ended.
    pub(crate) fn faults_after_round(&mut self) -> Option<Vec<Injection>> {
        let (iteration, _) = self.waiting.as_ref()?;
        if self.last_round.is_none_or(|last| last < *iteration) {
            return None;
        }
        self.waiting.take().map(|(_, faults)| faults)
    }

    /// Whether a round runs now (it holds the selector until it ends).
    pub(crate) fn round_running(&self) -> bool {
        self.selector.is_none()
    }

    /// The job ended while a round ran and did not wait for it any longer: count it.
    pub(crate) fn round_unfinished(&mut self) {
        self.stats.rounds_unfinished += 1;
    }

    /// What a loss of parameters restores.
    pub(crate) fn recovery(&self) -> Recovery {
        self.options.recovery
    }

    /// A copy of the image (the rows' saved values; the values are shared).
    pub(crate) fn image_snapshot(&self) -> KeyMap<Arc<RowData>> {
        self.image.clone()
    }

    /// The iteration of the last round that ended (its saves are in the image).
    pub(crate) fn last_round(&self) -> Option<u64> {
        self.last_round
    }

    /// The driver reported `iteration` complete. Returns the round to run when one is due
    /// (at most one per call, however many iterations it covers) and none runs; reports of
    /// an iteration at or before the last one change nothing.
    pub(crate) fn iteration_completed(
        &mut self,
        iteration: u64,
        (servers, in_transit): RoundServers,
    ) -> Option<impl Future<Output = RoundDone> + Send + 'static> {
        let last = self.stats.last_iteration;
        if last.is_some_and(|last| iteration <= last) {
            return None;
        }
        self.stats.last_iteration = Some(iteration);
        let first = last.map_or(0, |l| l + 1);
        let due_now = (first..=iteration).any(|i| due(i, self.interval));
        if !due_now {
            return None;
        }
        self.start_round(iteration, (servers, in_transit))
    }

    /// Starts a round for `iteration` now, whatever the schedule says, unless one runs
    /// (then it is skipped and counted, unless faults wait for it: then it runs once the
    /// running one ends, [`Self::wait_for_round`]).
    pub(crate) fn start_round(
        &mut self,
        iteration: u64,
        (servers, in_transit): RoundServers,
    ) -> Option<impl Future<Output = RoundDone> + Send + 'static> {
        let Some(mut selector) = self.selector.take() else {
            let awaited = self.waiting.as_ref().is_some_and(|(i, _)| *i == iteration);
            if !awaited {
                self.stats.rounds_skipped += 1;
            }
            return None;
        };
        let fraction = self.options.fraction;
        let recorded = self.recorded.clone();
        Some(async move {
            let started = Instant::now();
            let result =
                checkpoint_round_except(&servers, &mut selector, fraction, &in_transit, &recorded)
                    .await;
            RoundDone {
                iteration,
                selector,
                result,
                started,
            }
        })
    }

    /// A round ended: keep what it saved. Returns each server's save, now in the image
    /// (none when the round failed; none of a server recovered meanwhile).
    pub(crate) fn round_done(&mut self, done: RoundDone) -> Vec<ServerSave> {
        self.selector = Some(done.selector);
        self.last_round = self.last_round.max(Some(done.iteration));
        match done.result {
            Ok(outcome) => {
                self.stats.rounds += 1;
                self.stats.rows_saved += outcome.saved.len() as u64;
                self.stats.bytes_saved += outcome.bytes();
                self.stats.saves_failed += outcome.failed.len() as u64;
                for (id, error) in &outcome.failed {
                    tracing::warn!(server = %id, %error, "a checkpoint save failed; its rows stay at their previous saved values");
                }
                tracing::debug!(
                    candidates = outcome.candidates,
                    saved = outcome.saved.len(),
                    missed = outcome.missed.len(),
                    took_ms = done.started.elapsed().as_millis() as u64,
                    "checkpoint round"
                );
                let (saved, server_saves) = self.without_lost(outcome.saved, outcome.server_saves);
                self.keep(saved, &server_saves);
                server_saves
            }
            Err(error) => {
                self.stats.rounds_failed += 1;
                tracing::warn!(%error, "a checkpoint round failed and saved nothing; training goes on");
                Vec::new()
            }
        }
    }

    /// A resumed job: the full round run on the restored rows before the start becomes the
    /// image (so a failure before the next rounds restores the resumed values, not the
    /// initial ones). Not counted as a round.
    pub(crate) fn seed(&mut self, outcome: RoundOutcome) {
        tracing::info!(
            rows = outcome.saved.len(),
            "running checkpoint seeded with the resumed rows"
        );
        self.keep(outcome.saved, &outcome.server_saves);
    }

    /// `server` failed and its shards are re-created from the image as it is now: its saves
    /// that come in later are left out of the image ([`Self::round_done`]).
    pub(crate) fn server_lost(&mut self, server: ServerId) {
        self.lost.insert(server);
        self.recorded.remove(&server);
    }

    /// `saved` and `server_saves` without the saves of servers recovered meanwhile: the
    /// recovery restored their shards from the image before those saves came in, so they
    /// describe rows that live elsewhere now.
    fn without_lost(
        &self,
        mut saved: crate::server::SavedRows,
        mut server_saves: Vec<ServerSave>,
    ) -> (crate::server::SavedRows, Vec<ServerSave>) {
        if server_saves.iter().all(|s| !self.lost.contains(&s.server)) {
            return (saved, server_saves);
        }
        let mut left_out = std::collections::BTreeSet::new();
        server_saves.retain(|s| {
            let lost = self.lost.contains(&s.server);
            if lost {
                tracing::warn!(server = %s.server, rows = s.keys.len(), "a checkpoint save of a server recovered since is not kept");
                left_out.extend(s.keys.iter().copied());
            }
            !lost
        });
        saved.retain(|(key, _)| !left_out.contains(key));
        (saved, server_saves)
    }

    /// Puts saved rows into the image, with the server and save epoch of each.
    fn keep(&mut self, saved: crate::server::SavedRows, server_saves: &[ServerSave]) {
        self.image.extend(saved);
        self.stats.rows_held = self.image.len();
        for save in server_saves {
            for key in &save.keys {
                self.saved_at.insert(*key, (save.server, save.epoch));
            }
            let recorded = self.recorded.entry(save.server).or_default();
            *recorded = (*recorded).max(save.epoch);
        }
    }

    /// The server that saved `key`'s value in the image and its save epoch then; `None` when
    /// the row was never saved (its saved value is its initial value).
    pub(crate) fn saved_at(&self, key: ParamKey) -> Option<(ServerId, u64)> {
        self.saved_at.get(&key).copied()
    }

    /// The saved rows of the shards (of `num_shards`) that `wanted` accepts, by shard, each
    /// ascending by key; one pass over the image.
    pub(crate) fn saved_rows_by_shard(
        &self,
        num_shards: u32,
        wanted: impl Fn(ShardId) -> bool,
    ) -> BTreeMap<ShardId, Vec<(ParamKey, Arc<RowData>)>> {
        let mut by_shard: BTreeMap<ShardId, Vec<(ParamKey, Arc<RowData>)>> = BTreeMap::new();
        for (key, value) in &self.image {
            let shard = shard_of(*key, num_shards);
            if wanted(shard) {
                by_shard
                    .entry(shard)
                    .or_default()
                    .push((*key, value.clone()));
            }
        }
        for rows in by_shard.values_mut() {
            rows.sort_unstable_by_key(|(key, _)| *key);
        }
        by_shard
    }

    /// The saved value of `key`, `None` when it is its initial value.
    pub(crate) fn saved(&self, key: ParamKey) -> Option<&Arc<RowData>> {
        self.image.get(&key)
    }

    pub(crate) fn stats(&self) -> CheckpointStats {
        self.stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harp_core::scar::Selection;

    fn running(period: u64, fraction: f64) -> RunningCheckpoint {
        RunningCheckpoint::new(ScarOptions {
            period,
            fraction,
            selection: Selection::Priority,
            ..ScarOptions::default()
        })
        .unwrap()
    }

    #[tokio::test]
    async fn rounds_start_every_r_c_iterations_one_at_a_time() {
        let mut ckpt = running(8, 0.25); // a round every 2 iterations
        assert!(ckpt
            .iteration_completed(1, (Vec::new(), InTransit::default()))
            .is_none());
        let round = ckpt
            .iteration_completed(2, (Vec::new(), InTransit::default()))
            .expect("due at 2");
        // Due at 4 while the round of 2 still runs: skipped, not queued.
        assert!(ckpt
            .iteration_completed(4, (Vec::new(), InTransit::default()))
            .is_none());
        assert_eq!(ckpt.stats().rounds_skipped, 1);
        ckpt.round_done(round.await);
        assert_eq!(ckpt.stats().rounds, 1);
        // Old or repeated iterations change nothing; 5 is not due.
        assert!(ckpt
            .iteration_completed(3, (Vec::new(), InTransit::default()))
            .is_none());
        assert!(ckpt
            .iteration_completed(4, (Vec::new(), InTransit::default()))
            .is_none());
        assert!(ckpt
            .iteration_completed(5, (Vec::new(), InTransit::default()))
            .is_none());
        assert_eq!(ckpt.stats().last_iteration, Some(5));
        // A report that jumps over a due iteration (6) still starts one round.
        let round = ckpt
            .iteration_completed(7, (Vec::new(), InTransit::default()))
            .expect("6 was due");
        ckpt.round_done(round.await);
        assert_eq!(ckpt.stats().rounds, 2);
        assert_eq!(ckpt.stats().rounds_skipped, 1);
    }

    /// The master asks whether a round runs when the driver finishes (then the job waits
    /// for it); one that outlasts the wait is counted as unfinished, not as a round.
    #[tokio::test]
    async fn a_round_runs_until_it_is_done_and_one_the_end_left_is_counted() {
        let mut ckpt = running(8, 0.25);
        assert!(!ckpt.round_running());
        let round = ckpt
            .iteration_completed(2, (Vec::new(), InTransit::default()))
            .expect("due at 2");
        assert!(ckpt.round_running());
        ckpt.round_done(round.await);
        assert!(!ckpt.round_running());
        let _left = ckpt
            .iteration_completed(4, (Vec::new(), InTransit::default()))
            .expect("due at 4");
        assert!(ckpt.round_running());
        ckpt.round_unfinished();
        let stats = ckpt.stats();
        assert_eq!((stats.rounds, stats.rounds_unfinished), (1, 1), "{stats:?}");
    }

    /// A round due while another runs, that an after-round fault waits for, is run once
    /// the other ends: it is not counted as skipped.
    #[tokio::test]
    async fn a_round_a_fault_waits_for_is_not_counted_as_skipped() {
        let mut ckpt = RunningCheckpoint::new(ScarOptions {
            period: 8,
            fraction: 0.25, // a round every 2 iterations
            selection: Selection::Priority,
            inject: vec![Injection {
                at_iteration: 4,
                fault: crate::scar::Fault::Lose {
                    fraction: 0.5,
                    seed: 1,
                },
                timing: FaultTiming::AfterRound,
            }],
            ..ScarOptions::default()
        })
        .unwrap();
        let round_of_2 = ckpt
            .iteration_completed(2, (Vec::new(), InTransit::default()))
            .expect("due at 2");
        assert!(matches!(
            ckpt.take_faults(4),
            FaultsDue::AfterRound { iteration: 4 }
        ));
        // The round of 4 is due while that of 2 runs: it waits, it is not skipped.
        assert!(ckpt
            .iteration_completed(4, (Vec::new(), InTransit::default()))
            .is_none());
        assert_eq!(ckpt.wait_for_round(), None, "the round of 2 still runs");
        ckpt.round_done(round_of_2.await);
        assert_eq!(ckpt.wait_for_round(), Some(4));
        let round_of_4 = ckpt
            .start_round(4, (Vec::new(), InTransit::default()))
            .expect("runs now");
        ckpt.round_done(round_of_4.await);
        assert!(ckpt.faults_after_round().is_some());
        assert_eq!(ckpt.stats().rounds, 2);
        assert_eq!(ckpt.stats().rounds_skipped, 0);
    }

    /// The round due at iteration 2 of `ckpt`, run over no server, as if the saves of
    /// `failed` had failed in it.
    async fn round_with_failed_saves(
        ckpt: &mut RunningCheckpoint,
        failed: Vec<(ServerId, HarpError)>,
    ) -> RoundDone {
        let round = ckpt
            .iteration_completed(2, (Vec::new(), InTransit::default()))
            .expect("due at 2");
        let mut done = round.await;
        done.result = Ok(RoundOutcome {
            failed,
            ..RoundOutcome::default()
        });
        done
    }

    /// A round that ran but in which a server's save failed is a round, and the failed
    /// save is counted (its rows keep their previous saved values).
    #[tokio::test]
    async fn a_failed_server_save_within_a_round_is_counted() {
        let mut ckpt = running(8, 0.25);
        let done = round_with_failed_saves(
            &mut ckpt,
            vec![
                (ServerId(0), HarpError::ServerUnreachable(ServerId(0))),
                (ServerId(1), HarpError::Remote("the answer was lost".into())),
            ],
        )
        .await;
        ckpt.round_done(done);
        let stats = ckpt.stats();
        assert_eq!((stats.rounds, stats.saves_failed), (1, 2), "{stats:?}");
        assert_eq!(stats.rounds_failed, 0, "{stats:?}");
    }

    /// A save that failed because its server is no longer the job's (its node left during
    /// the round) is not counted; one of a server still in the job is.
    #[tokio::test]
    async fn a_failed_save_of_a_server_no_longer_in_the_job_is_not_counted() {
        let mut ckpt = running(8, 0.25);
        let unreachable = |id| (ServerId(id), HarpError::ServerUnreachable(ServerId(id)));
        let done = round_with_failed_saves(&mut ckpt, vec![unreachable(0), unreachable(1)]).await;
        let tables = Arc::new(crate::table::TableSet::new());
        let (server, _) =
            ractor::Actor::spawn(None, crate::server::ServerActor, (ServerId(0), tables))
                .await
                .unwrap();
        let servers = BTreeMap::from([(ServerId(0), server.clone())]);
        ckpt.round_done(without_departed(done, &servers));
        assert_eq!(ckpt.stats().saves_failed, 1, "{:?}", ckpt.stats());
        server.stop(None);
    }

    /// A round that ran across a server's failure: that server's save came in after its
    /// shards were re-created from the image, so it is not kept (those rows live elsewhere
    /// now, at their restored values). A kept save is the epoch the next round tells its
    /// server the image holds.
    #[tokio::test]
    async fn a_save_of_a_server_recovered_meanwhile_is_not_kept() {
        let mut ckpt = running(8, 0.25);
        let key = |row| ParamKey::new(harp_core::TableId(0), row);
        let round = ckpt
            .iteration_completed(2, (Vec::new(), InTransit::default()))
            .expect("due at 2");
        let mut done = round.await;
        let save = |server, epoch, row| ServerSave {
            server: ServerId(server),
            epoch,
            keys: vec![key(row)],
            applied: Vec::new(),
        };
        let value = Arc::new(RowData::F32(vec![1.0]));
        done.result = Ok(RoundOutcome {
            saved: vec![(key(0), value.clone()), (key(1), value)],
            server_saves: vec![save(0, 3, 0), save(1, 5, 1)],
            ..RoundOutcome::default()
        });
        ckpt.server_lost(ServerId(1));
        let kept = ckpt.round_done(done);
        assert_eq!(kept, vec![save(0, 3, 0)]);
        assert_eq!(ckpt.saved_at(key(0)), Some((ServerId(0), 3)));
        assert!(ckpt.saved(key(1)).is_none() && ckpt.saved_at(key(1)).is_none());
        assert_eq!(ckpt.recorded, BTreeMap::from([(ServerId(0), 3)]));
    }

    #[test]
    fn invalid_options_are_refused() {
        for (period, fraction) in [(0, 0.5), (8, 0.0), (8, 1.01), (8, f64::NAN)] {
            let options = ScarOptions {
                period,
                fraction,
                selection: Selection::Full,
                ..ScarOptions::default()
            };
            assert!(
                matches!(
                    RunningCheckpoint::new(options),
                    Err(HarpError::InvalidConfig(_))
                ),
                "C={period} r={fraction}"
            );
        }
    }
}
