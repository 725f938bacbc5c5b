//! The replies a link waits for ([`PendingReplies`]): each request sent on a link registers
//! what waits for its answer ([`Pending`]) under a request id, and every answer that arrives
//! on that link resolves it. Answers that come in numbered parts (`row_parts.rs`) are put
//! together here before they are handed on; a link that is gone fails every waiter.

use super::codec::rows_from_wire;
use super::row_parts::{InParts, Parts};
use crate::error::HarpError;
use crate::server::{AppliedAt, DistancesReply, SaveAnswer, SaveReply};
use dashmap::DashMap;
use harp_core::{ParamKey, RowData};
use harp_wire::{
    AppliedPartWire, DistancesResult, ExecutorSaveResult, HandOffResult, LostUpdatesResult,
    Message, ParamKeyWire, ReleaseResult, RowWire, RowsResult, SaveResult,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::oneshot;

/// A reply a proxy is waiting for, by request id.
pub(crate) enum Pending {
    /// A server node's answer to `Get`, arriving in parts.
    Rows(InParts<RowsReply, Vec<RowWire>>),
    Applied(oneshot::Sender<Result<AppliedAt, HarpError>>),
    /// A server node's answer to `Dump`, arriving in parts.
    Dump(InParts<DumpReply, Vec<(ParamKeyWire, RowWire)>>),
    /// A worker node's answer to `ReleaseExecutor`.
    Released(oneshot::Sender<ReleaseResult>),
    /// A worker node's answer to `AdoptExecutor`.
    Adopted(oneshot::Sender<Result<(), HarpError>>),
    /// A worker node's answer to `SaveExecutor`.
    ExecutorSaved(oneshot::Sender<ExecutorSaveResult>),
    /// A server node's answer to `HandOffShard`.
    HandedOff(oneshot::Sender<HandOffResult>),
    /// A server node took over the rows of a shard.
    TookOver(oneshot::Sender<()>),
    /// A node has nothing in flight to a leaving server any more.
    Drained(oneshot::Sender<()>),
    /// A server node's answer to `CheckpointDistances`, arriving in parts.
    Distances(InParts<DistancesReply, Vec<(ParamKeyWire, f64)>>),
    /// A server node's answer to `CheckpointSave`, arriving in parts.
    Saved(InParts<SaveReply, SavedPart>),
    /// A server node's answer to `ResetRows`.
    ResetDone(oneshot::Sender<Result<(), HarpError>>),
    /// A server node's answer to `CommitFlush`.
    Committed(oneshot::Sender<Result<AppliedAt, HarpError>>),
    /// A node's answer to `LostUpdatesQuery`, arriving in parts.
    LostUpdates(InParts<oneshot::Sender<LostUpdatesResult>, Vec<LostRowWire>>),
    /// A node's answer to `StatsQuery`: its counters, encoded (`job_counters.rs`).
    Stats(oneshot::Sender<Vec<u8>>),
}

/// The answer of a save whose parts are all in: the rows of every part, in order (ascending
/// by key), the first part's keys not owned, and the save's epoch.
fn save_answer(parts: Vec<SavedPart>) -> SaveAnswer {
    let (epoch, applied) = parts
        .first()
        .map_or((0, Vec::new()), |(_, _, epoch, applied)| {
            (*epoch, super::codec::applied_from_wire(applied))
        });
    let mut answer = SaveAnswer {
        saved: Vec::new(),
        not_owned: Vec::new(),
        epoch,
        applied,
    };
    for (saved, not_owned, _, _) in parts {
        answer.saved.extend(
            saved
                .into_iter()
                .map(|(k, r)| (k.into(), Arc::new(RowData::from(r)))),
        );
        answer
            .not_owned
            .extend(not_owned.into_iter().map(ParamKey::from));
    }
    answer
}

/// One row of a node's answer to `LostUpdatesQuery`: the sums of its deltas by save epoch.
pub(crate) type LostRowWire = (ParamKeyWire, Vec<(u64, RowWire)>);

/// Where a read's rows go.
pub(crate) type RowsReply = oneshot::Sender<Result<Vec<Arc<RowData>>, HarpError>>;

/// Where a dump's rows go.
pub(crate) type DumpReply = oneshot::Sender<Vec<(ParamKey, RowData)>>;

/// One part of a checkpoint save's answer: its rows, the keys not owned (the first part's),
/// the save's epoch and the flush parts applied before it (the first part's).
pub(crate) type SavedPart = (
    Vec<(ParamKeyWire, RowWire)>,
    Vec<ParamKeyWire>,
    u64,
    Vec<AppliedPartWire>,
);

/// For [`PendingReplies::answer_in_parts`]: where a waiter of kind `$kind` (an
/// [`InParts`]) keeps the parts received so far, and its sender once it is taken out.
macro_rules! in_parts {
    ($kind:path) => {
        (
            (|waiting: &mut Pending| match waiting {
                $kind(w) => Some(&mut w.parts),
                _ => None,
            }) as fn(&mut Pending) -> Option<&mut Parts<_>>,
            (|waiting: Pending| match waiting {
                $kind(w) => Some(w.reply),
                _ => None,
            }) as fn(Pending) -> Option<_>,
        )
    };
}

/// Where a waiter of an answer in parts keeps the parts received so far, and its sender once
/// it is taken out ([`in_parts`]).
type InPartsOf<T, R> = (
    fn(&mut Pending) -> Option<&mut Parts<T>>,
    fn(Pending) -> Option<oneshot::Sender<R>>,
);

/// Replies in flight on one link.
#[derive(Default)]
pub(crate) struct PendingReplies {
    next: AtomicU64,
    waiting: DashMap<u64, Pending>,
    /// The link is gone ([`Self::fail_all`]): nothing registered from now on is awaited.
    closed: AtomicBool,
}

impl PendingReplies {
    /// Awaits the answer to a new request; its id. On a link that is gone the waiter learns
    /// it at once (its sender is dropped): a request sent on such a link may be queued
    /// without an error, but its answer can never come, and nothing would fail it later.
    pub(crate) fn register(&self, pending: Pending) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.waiting.insert(id, pending);
        // Checked after the insert: a `fail_all` that cleared before it has set the flag.
        if self.closed.load(Ordering::SeqCst) {
            self.waiting.remove(&id);
        }
        id
    }

    /// Resolves a reply message; returns it back if it is not a reply.
    pub(crate) fn resolve(&self, message: Message) -> Option<Message> {
        match message {
            Message::Rows {
                request_id,
                rows,
                part,
                parts,
            } => {
                let part_or_error = match rows {
                    RowsResult::Ok(rows) => Ok(rows),
                    RowsResult::Err(e) => Err(Err(HarpError::Remote(e))),
                };
                let kind = in_parts!(Pending::Rows);
                let whole = |whole: Vec<Vec<RowWire>>| {
                    let rows = whole.into_iter().flatten();
                    Ok(rows.map(|r| Arc::new(RowData::from(r))).collect())
                };
                self.answer_in_parts(request_id, (part, parts), part_or_error, kind, whole);
                None
            }
            Message::Applied {
                request_id,
                error,
                save_epoch,
            } => {
                if let Some((_, Pending::Applied(tx))) = self.waiting.remove(&request_id) {
                    let _ = tx.send(error.map_or(Ok(save_epoch), |e| Err(HarpError::Remote(e))));
                }
                None
            }
            Message::LostUpdates {
                request_id,
                result,
                part,
                parts,
            } => {
                let part_or_inexact = match result {
                    LostUpdatesResult::Ok(rows) => Ok(rows),
                    inexact @ LostUpdatesResult::Inexact(_) => Err(inexact),
                };
                let kind = in_parts!(Pending::LostUpdates);
                let whole = |whole: Vec<Vec<LostRowWire>>| {
                    LostUpdatesResult::Ok(whole.into_iter().flatten().collect())
                };
                self.answer_in_parts(request_id, (part, parts), part_or_inexact, kind, whole);
                None
            }
            Message::DumpRows {
                request_id,
                rows,
                part,
                parts,
            } => {
                let kind = in_parts!(Pending::Dump);
                let whole =
                    |whole: Vec<Vec<_>>| rows_from_wire(whole.into_iter().flatten().collect());
                self.answer_in_parts(request_id, (part, parts), Ok(rows), kind, whole);
                None
            }
            Message::ShardHandedOff { request_id, result } => {
                if let Some((_, Pending::HandedOff(tx))) = self.waiting.remove(&request_id) {
                    let _ = tx.send(result);
                }
                None
            }
            Message::TookOver { request_id } => {
                if let Some((_, Pending::TookOver(tx))) = self.waiting.remove(&request_id) {
                    let _ = tx.send(());
                }
                None
            }
            Message::ServerDrained { request_id } => {
                if let Some((_, Pending::Drained(tx))) = self.waiting.remove(&request_id) {
                    let _ = tx.send(());
                }
                None
            }
            Message::ExecutorAdopted { request_id, error } => {
                if let Some((_, Pending::Adopted(tx))) = self.waiting.remove(&request_id) {
                    let _ = tx.send(error.map_or(Ok(()), |e| Err(HarpError::Remote(e))));
                }
                None
            }
            Message::ExecutorSaved { request_id, result } => {
                if let Some((_, Pending::ExecutorSaved(tx))) = self.waiting.remove(&request_id) {
                    let _ = tx.send(result);
                }
                None
            }
            Message::Stats {
                request_id,
                counters,
            } => {
                if let Some((_, Pending::Stats(tx))) = self.waiting.remove(&request_id) {
                    let _ = tx.send(counters);
                }
                None
            }
            Message::ExecutorReleased {
                request_id, result, ..
            } => {
                if let Some((_, Pending::Released(tx))) = self.waiting.remove(&request_id) {
                    let _ = tx.send(result);
                }
                None
            }
            Message::Distances {
                request_id,
                result,
                part,
                parts,
            } => {
                let part_or_error = match result {
                    DistancesResult::Ok(d) => Ok(d),
                    DistancesResult::Err(e) => Err(Err(HarpError::Remote(e))),
                };
                let kind = in_parts!(Pending::Distances);
                let whole = |whole: Vec<Vec<(ParamKeyWire, f64)>>| {
                    let d = whole.into_iter().flatten();
                    Ok(d.map(|(k, d)| (k.into(), d)).collect())
                };
                self.answer_in_parts(request_id, (part, parts), part_or_error, kind, whole);
                None
            }
            Message::Saved {
                request_id,
                result,
                part,
                parts,
            } => {
                let part_or_error = match result {
                    SaveResult::Ok {
                        saved,
                        not_owned,
                        epoch,
                        applied,
                    } => Ok((saved, not_owned, epoch, applied)),
                    SaveResult::Err(e) => Err(Err(HarpError::Remote(e))),
                };
                let kind = in_parts!(Pending::Saved);
                let whole = |whole| Ok(save_answer(whole));
                self.answer_in_parts(request_id, (part, parts), part_or_error, kind, whole);
                None
            }
            Message::ResetDone { request_id, error } => {
                if let Some((_, Pending::ResetDone(tx))) = self.waiting.remove(&request_id) {
                    let _ = tx.send(error.map_or(Ok(()), |e| Err(HarpError::Remote(e))));
                }
                None
            }
            Message::FlushCommitted { request_id, error } => {
                if let Some((_, Pending::Committed(tx))) = self.waiting.remove(&request_id) {
                    // The master needs no epoch: it keeps no record of lost updates.
                    let _ = tx.send(error.map_or(Ok(None), |e| Err(HarpError::Remote(e))));
                }
                None
            }
            other => Some(other),
        }
    }

    /// Part `at` of an answer that comes in parts: `Ok(item)`, a part, or `Err(answer)`, the
    /// whole answer at once (an error is always one part). Once every part is in, the
    /// waiter gets `whole(parts)`, in order, or that answer: `parts_of` finds the parts in
    /// what waits for `request_id` and `reply_of` its sender, once taken out (`kind`, made by
    /// [`in_parts`]). An answer nobody waits for, or one of another kind, is dropped.
    fn answer_in_parts<T, R>(
        &self,
        request_id: u64,
        at: (u32, u32),
        part_or_answer: Result<T, R>,
        (parts_of, reply_of): InPartsOf<T, R>,
        whole: impl FnOnce(Vec<T>) -> R,
    ) -> Option<()> {
        let (waiting, answer) = match part_or_answer {
            Ok(item) => {
                let (waiting, parts) = self.take_whole(request_id, at, item, parts_of)?;
                (waiting, whole(parts))
            }
            Err(answer) => (self.take(request_id)?, answer),
        };
        let _ = reply_of(waiting)?.send(answer);
        Some(())
    }

    /// Adds part `part` of `parts` (`item`) of the answer to `request_id`, whose parts
    /// `parts_of` finds in what waits for it; once every part is in, takes that out, with
    /// every part in order. An answer of one part (nearly every one) takes one lookup. An
    /// answer nobody waits for (any more), or one for another kind of request, is dropped.
    fn take_whole<T>(
        &self,
        request_id: u64,
        (part, parts): (u32, u32),
        item: T,
        parts_of: fn(&mut Pending) -> Option<&mut Parts<T>>,
    ) -> Option<(Pending, Vec<T>)> {
        if parts <= 1 && part == 0 {
            let kind_matches = |_: &u64, p: &mut Pending| parts_of(p).is_some();
            let (_, waiting) = self.waiting.remove_if_mut(&request_id, kind_matches)?;
            return Some((waiting, vec![item]));
        }
        let whole = {
            let mut waiting = self.waiting.get_mut(&request_id)?;
            parts_of(waiting.value_mut())?.add(part, parts, item)?
        };
        let (_, waiting) = self.waiting.remove(&request_id)?;
        Some((waiting, whole))
    }

    /// Takes out what waits for `request_id` (its answer is an error, always one part).
    fn take(&self, request_id: u64) -> Option<Pending> {
        self.waiting.remove(&request_id).map(|(_, waiting)| waiting)
    }

    /// A read or flush `request_id` could not be sent. One the link refused to carry (larger
    /// than a message) is answered with that error at once, so its sender fails with the
    /// reason instead of waiting out its deadline; on a lost link the reader fails every
    /// waiter (an unreachable server, which server recovery handles).
    pub(crate) fn unsent(&self, request_id: u64, error: HarpError) {
        if !matches!(error, HarpError::Net(harp_net::NetError::Protocol { .. })) {
            return;
        }
        match self.waiting.remove(&request_id) {
            Some((_, Pending::Rows(rows))) => {
                let _ = rows.reply.send(Err(error));
            }
            Some((_, Pending::Applied(applied))) => {
                let _ = applied.send(Err(error));
            }
            _ => {}
        }
    }

    /// Stops waiting for the reply to `request_id` (it will never come).
    pub(crate) fn forget(&self, request_id: u64) {
        self.waiting.remove(&request_id);
    }

    /// How many replies are still awaited.
    pub(crate) fn outstanding(&self) -> usize {
        self.waiting.len()
    }

    /// The link is gone, for good: every waiter learns it (its sender is dropped), and so
    /// does every one registered later.
    pub(crate) fn fail_all(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request registered on a link that is gone fails at once: its answer can never come
    /// (a checkpoint round asking a server whose node had left waited for it until the job
    /// ended, and no round ran meanwhile).
    #[tokio::test]
    async fn a_request_registered_after_the_link_is_gone_fails_at_once() {
        let pending = PendingReplies::default();
        let (before, before_answer) = oneshot::channel();
        pending.register(Pending::Adopted(before));
        assert_eq!(pending.outstanding(), 1);
        pending.fail_all();
        assert!(
            before_answer.await.is_err(),
            "a waiter of the link outlived it"
        );
        let (after, after_answer) = oneshot::channel();
        pending.register(Pending::Adopted(after));
        assert_eq!(pending.outstanding(), 0);
        let waited = tokio::time::timeout(std::time::Duration::from_secs(5), after_answer).await;
        assert!(
            matches!(waited, Ok(Err(_))),
            "a request registered after the link was gone is still awaited"
        );
    }
}
