//! Rows that may not fit one message between processes (a frame holds at most 64 MiB) go in
//! parts of at most [`harp_wire::PART_BYTES`] of values each ([`split_rows`]): the answers
//! a server node sends from its rows (a read's `Rows`, a SCAR round's `Distances` and
//! `Saved`, a dump's `DumpRows`: the job's final parameters and a consistent checkpoint's
//! rows), a node's `LostUpdates`, and the rows a resumed job puts into a server node
//! (`ResetRows`). A worker node's flush is split the same way before it leaves the node
//! (`node::ParamStore`), since each part of it is acknowledged on its own.
//!
//! A request's keys go in parts too when there are very many ([`keys_in_parts`]; a read or
//! a SCAR save of more than about 262 000 rows of one server), put together on the serving
//! node ([`KeysInParts`]) before the request is served once.
//!
//! An answer's parts are numbered (`part` of `parts`) and each goes with [`send_in_parts`]
//! (on a stream of its own unless small), so they may arrive in any order; [`Parts`] puts
//! them back in order and hands them over once every part is in, each counted once. A
//! reset sends each part as a request of its own and answers once every part is set (or
//! with the first error).

use super::pending::{LostRowWire, Pending, PendingReplies};
use super::proxies::send_sized;
use crate::error::HarpError;
use crate::node::lost_ledger::RowsByEpoch;
use crate::server::SaveAnswer;
use harp_core::{ParamKey, RowData, ServerId};
use harp_net::Link;
use harp_wire::{
    split_rows, DistancesResult, LostUpdatesResult, Message, ParamKeyWire, RowWire, RowsResult,
    SaveResult,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Sends `items` as one answer in parts of at most [`harp_wire::PART_BYTES`] (`bytes` of
/// each item), `message(part, parts, items)` building each part, each sent with [`send_sized`] (a part
/// on a stream of its own unless it is small, so parts may arrive in any order: the
/// receiver puts them back in order with [`Parts`]). Stops at the first part that cannot be
/// sent, with its error.
pub(crate) async fn send_in_parts<T>(
    link: &Link,
    items: Vec<T>,
    bytes: impl Fn(&T) -> usize,
    mut message: impl FnMut(u32, u32, Vec<T>) -> Message,
) -> Result<(), HarpError> {
    let split = split_rows(items, bytes);
    let count = split.len() as u32;
    for (part, items) in split.into_iter().enumerate() {
        send_sized(link, message(part as u32, count, items)).await?;
    }
    Ok(())
}

/// Sends `rows` (all a server holds) as the answer to the dump `request_id`, in parts.
pub(crate) async fn send_dump(link: &Link, request_id: u64, rows: Vec<(ParamKeyWire, RowWire)>) {
    let part = |part, parts, rows| Message::DumpRows {
        request_id,
        rows,
        part,
        parts,
    };
    if let Err(e) = send_in_parts(link, rows, |(_, row)| row.value_bytes(), part).await {
        // The link is gone (the master hears of it) or refused a part: the master's
        // wait for the dump ends with its deadline.
        tracing::warn!(request_id, error = %e, "could not send a part of a dump");
    }
}

/// Sends `items` as the answer in parts (see [`send_in_parts`]), or `refused(why)` (one
/// message) when there is no answer or a part cannot be sent, so the asker hears why
/// instead of waiting out its deadline.
async fn answer_in_parts<T>(
    link: &Link,
    items: Result<Vec<T>, String>,
    bytes: impl Fn(&T) -> usize,
    part: impl FnMut(u32, u32, Vec<T>) -> Message,
    refused: impl FnOnce(String) -> Message,
) {
    let sent = match items {
        Ok(items) => send_in_parts(link, items, bytes, part)
            .await
            .map_err(|e| format!("the answer could not be sent: {e}")),
        Err(why) => Err(why),
    };
    if let Err(why) = sent {
        if let Err(e) = link.send(&refused(why)) {
            tracing::debug!(error = %e, "could not send why an answer is missing");
        }
    }
}

/// Answers the read `request_id` with `rows` (in the order asked), or why not.
pub(crate) async fn answer_rows(
    link: &Link,
    request_id: u64,
    rows: Result<Vec<Arc<RowData>>, String>,
) {
    let rows = rows.map(|rows| rows.iter().map(|r| RowWire::from(&**r)).collect());
    let part = |part, parts, rows| Message::Rows {
        request_id,
        rows: RowsResult::Ok(rows),
        part,
        parts,
    };
    let refused = |why| Message::Rows {
        request_id,
        rows: RowsResult::Err(why),
        part: 0,
        parts: 1,
    };
    answer_in_parts(link, rows, RowWire::value_bytes, part, refused).await;
}

/// Answers the checkpoint request `request_id` with a server's `distances` (ascending by
/// key), or why not.
pub(crate) async fn answer_distances(
    link: &Link,
    request_id: u64,
    distances: Result<Vec<(ParamKey, f64)>, String>,
) {
    let distances = distances.map(|d| d.into_iter().map(|(k, d)| (k.into(), d)).collect());
    let part = |part, parts, distances| Message::Distances {
        request_id,
        result: DistancesResult::Ok(distances),
        part,
        parts,
    };
    let refused = |why| Message::Distances {
        request_id,
        result: DistancesResult::Err(why),
        part: 0,
        parts: 1,
    };
    // An entry's bytes are its key's and its distance's, which the split's per-row
    // allowance covers.
    let bytes = |_: &(ParamKeyWire, f64)| 0;
    answer_in_parts(link, distances, bytes, part, refused).await;
}

/// Answers the checkpoint save `request_id` with a server's `answer`, or why not: every
/// part with the save's epoch, the first with the keys not owned and the flush parts applied.
pub(crate) async fn answer_save(link: &Link, request_id: u64, answer: Result<SaveAnswer, String>) {
    let (saved, mut not_owned, epoch, mut applied) = match answer {
        Ok(answer) => {
            let saved: Vec<(ParamKeyWire, RowWire)> = answer
                .saved
                .iter()
                .map(|(k, v)| ((*k).into(), RowWire::from(&**v)))
                .collect();
            let not_owned: Vec<ParamKeyWire> =
                answer.not_owned.into_iter().map(Into::into).collect();
            let applied = super::codec::applied_to_wire(&answer.applied);
            (Ok(saved), not_owned, answer.epoch, applied)
        }
        Err(why) => (Err(why), Vec::new(), 0, Vec::new()),
    };
    let part = |part, parts, saved| Message::Saved {
        request_id,
        result: SaveResult::Ok {
            saved,
            not_owned: std::mem::take(&mut not_owned),
            epoch,
            applied: std::mem::take(&mut applied),
        },
        part,
        parts,
    };
    let refused = |why| Message::Saved {
        request_id,
        result: SaveResult::Err(why),
        part: 0,
        parts: 1,
    };
    let bytes = |(_, row): &(ParamKeyWire, RowWire)| row.value_bytes();
    answer_in_parts(link, saved, bytes, part, refused).await;
}

/// Answers the master's `LostUpdatesQuery` `request_id` with what the dead server
/// acknowledged to this node since each row's last save (`lost`), or why this node cannot
/// say exactly.
pub(crate) async fn answer_lost_updates(
    link: &Link,
    request_id: u64,
    lost: Result<RowsByEpoch, String>,
) {
    let lost = lost.map(|rows| {
        rows.into_iter()
            .map(|(key, sums)| {
                let sums = sums.into_iter().map(|(e, d)| (e, d.into())).collect();
                (key.into(), sums)
            })
            .collect()
    });
    let part = |part, parts, rows| Message::LostUpdates {
        request_id,
        result: LostUpdatesResult::Ok(rows),
        part,
        parts,
    };
    let refused = |why| Message::LostUpdates {
        request_id,
        result: LostUpdatesResult::Inexact(why),
        part: 0,
        parts: 1,
    };
    let bytes = |(_, sums): &LostRowWire| {
        sums.iter()
            .map(|(_, d)| d.value_bytes() + 16)
            .sum::<usize>()
    };
    answer_in_parts(link, lost, bytes, part, refused).await;
}

/// A request's keys as one message per part (`message(keys, part, parts)`): more keys than
/// one part holds (about 262 000) go in several, which the serving node puts together with
/// [`KeysInParts`] before it serves the request once.
pub(crate) fn keys_in_parts(
    keys: Vec<ParamKeyWire>,
    message: impl Fn(Vec<ParamKeyWire>, u32, u32) -> Message,
) -> Vec<Message> {
    // A key's bytes are within the split's per-row allowance.
    let split = split_rows(keys, |_| 0);
    let count = split.len() as u32;
    split
        .into_iter()
        .enumerate()
        .map(|(part, keys)| message(keys, part as u32, count))
        .collect()
}

/// The keys of requests arriving in parts on one link (a read, a checkpoint save), by
/// request id, until every part is in.
#[derive(Default)]
pub(crate) struct KeysInParts(HashMap<u64, Parts<Vec<ParamKeyWire>>>);

impl KeysInParts {
    /// Adds part `part` of `parts` of request `request_id`'s keys; all of them, in order,
    /// once every part is in (at once for a request of one part).
    pub(crate) fn add(
        &mut self,
        request_id: u64,
        part: u32,
        parts: u32,
        keys: Vec<ParamKeyWire>,
    ) -> Option<Vec<ParamKeyWire>> {
        if parts <= 1 {
            return Some(keys);
        }
        let whole = self
            .0
            .entry(request_id)
            .or_default()
            .add(part, parts, keys)?;
        self.0.remove(&request_id);
        Some(whole.into_iter().flatten().collect())
    }
}

/// The parts of one answer arriving in any order, one `T` per part, kept by number until
/// every part is in.
#[derive(Debug)]
pub(crate) struct Parts<T> {
    /// The part count the first part announced; `None` before any part arrived.
    expected: Option<u32>,
    arrived: BTreeMap<u32, T>,
}

impl<T> Default for Parts<T> {
    fn default() -> Self {
        Self {
            expected: None,
            arrived: BTreeMap::new(),
        }
    }
}

impl<T> Parts<T> {
    /// Adds part `part` of `parts`; once every part is in, returns them all in part order.
    /// A part outside the count, one whose count differs from the first part's, or one
    /// already in is ignored (nothing is allocated for parts that never come).
    pub(crate) fn add(&mut self, part: u32, parts: u32, item: T) -> Option<Vec<T>> {
        let parts = parts.max(1);
        let expected = *self.expected.get_or_insert(parts);
        if part >= expected || parts != expected || self.arrived.contains_key(&part) {
            return None;
        }
        self.arrived.insert(part, item);
        (self.arrived.len() as u64 >= u64::from(expected))
            .then(|| std::mem::take(&mut self.arrived).into_values().collect())
    }
}

/// A request's reply and the parts of its answer that arrived so far.
pub(crate) struct InParts<R, T> {
    pub(crate) reply: R,
    pub(crate) parts: Parts<T>,
}

impl<R, T> InParts<R, T> {
    pub(crate) fn new(reply: R) -> Self {
        Self {
            reply,
            parts: Parts::default(),
        }
    }
}

/// Sets `rows` on `server` through its node's `link`, a part per request; `reply` gets `Ok`
/// once every part is set, or the first error (a part that could not be sent, or one the
/// server refused; an answer that never comes: an unreachable server).
pub(crate) fn reset_in_parts(
    link: &Link,
    pending: &Arc<PendingReplies>,
    server: ServerId,
    rows: Vec<(ParamKeyWire, Option<RowWire>)>,
    reply: oneshot::Sender<Result<(), HarpError>>,
) {
    let parts = split_rows(rows, |(_, row)| {
        row.as_ref().map_or(0, RowWire::value_bytes)
    });
    let mut answers = Vec::with_capacity(parts.len());
    let mut requests = Vec::with_capacity(parts.len());
    for rows in parts {
        let (tx, rx) = oneshot::channel();
        let request_id = pending.register(Pending::ResetDone(tx));
        answers.push(rx);
        requests.push((
            request_id,
            Message::ResetRows {
                request_id,
                server: server.0,
                rows,
            },
        ));
    }
    let (link, pending) = (link.clone(), pending.clone());
    crate::spawn::spawn(async move {
        // The first part that could not be sent (the node is gone, or a single row does
        // not fit a message) is the answer; its waiter is dropped at once.
        let mut result = Ok(());
        for (request_id, message) in requests {
            if let Err(e) = send_sized(&link, message).await {
                pending.forget(request_id);
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        for answer in answers {
            let answer = answer
                .await
                .unwrap_or(Err(HarpError::ServerUnreachable(server)));
            if result.is_ok() {
                result = answer;
            }
        }
        let _ = reply.send(result);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{link_pair, LinkPair};
    use harp_core::TableId;
    use harp_wire::FRAME_BYTES_MAX;

    /// Both ends of a link on loopback: the answering node's end is the acceptor's, the
    /// asking node's is the dialer's, with its replies waited for in `asker`.
    struct Linked {
        pair: LinkPair,
        asker: Arc<PendingReplies>,
    }

    async fn linked() -> Linked {
        Linked {
            pair: link_pair().await,
            asker: Arc::new(PendingReplies::default()),
        }
    }

    impl Linked {
        fn answerer(&self) -> &Link {
            &self.pair.acceptor.0
        }
    }

    impl Linked {
        /// Resolves what arrives until `reply` is answered.
        async fn answer_of<T>(&mut self, mut reply: oneshot::Receiver<T>) -> T {
            loop {
                tokio::select! {
                    answer = &mut reply => return answer.expect("answered"),
                    message = self.pair.dialer.1.recv() => {
                        let message = message.expect("the link is open").expect("a valid frame");
                        assert!(self.asker.resolve(message).is_none(), "a reply");
                    }
                }
            }
        }
    }

    /// `n` rows of `values` f32 each, every value telling its row.
    fn big_rows(n: u64, values: usize) -> Vec<(ParamKey, RowData)> {
        (0..n)
            .map(|r| {
                (
                    ParamKey::new(TableId(1), r),
                    RowData::F32(vec![r as f32; values]),
                )
            })
            .collect()
    }

    /// 5 rows of 4M f32 values: 80 MB, more than a frame holds.
    fn more_than_a_message() -> Vec<(ParamKey, RowData)> {
        let rows = big_rows(5, 4 << 20);
        let bytes: usize = rows.iter().map(|(_, r)| r.bytes()).sum();
        assert!(bytes > FRAME_BYTES_MAX);
        rows
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_answer_larger_than_a_message_arrives_whole_and_in_order() {
        let mut link = linked().await;
        let rows = more_than_a_message();
        let (tx, rx) = oneshot::channel();
        let id = link.asker.register(Pending::Rows(InParts::new(tx)));
        let values = rows.iter().map(|(_, r)| Arc::new(r.clone())).collect();
        answer_rows(link.answerer(), id, Ok(values)).await;
        let got = link.answer_of(rx).await.expect("the rows");
        let want: Vec<RowData> = rows.into_iter().map(|(_, r)| r).collect();
        let got: Vec<RowData> = got.iter().map(|r| (**r).clone()).collect();
        assert!(got == want, "every row, in the order asked");
        assert_eq!(link.asker.outstanding(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_save_answer_larger_than_a_message_arrives_whole_with_its_epoch_and_applied_parts() {
        let mut link = linked().await;
        let rows = more_than_a_message();
        let (tx, rx) = oneshot::channel();
        let id = link.asker.register(Pending::Saved(InParts::new(tx)));
        let not_owned = vec![ParamKey::new(TableId(1), 99)];
        let applied = vec![crate::server::AppliedPart {
            part: crate::server::PartId { node: 2, seq: 11 },
            epoch: 6,
        }];
        let answer = SaveAnswer {
            saved: rows
                .iter()
                .map(|(k, r)| (*k, Arc::new(r.clone())))
                .collect(),
            not_owned: not_owned.clone(),
            epoch: 7,
            applied: applied.clone(),
        };
        answer_save(link.answerer(), id, Ok(answer)).await;
        let got = link.answer_of(rx).await.expect("the save");
        assert_eq!((got.epoch, got.not_owned), (7, not_owned));
        assert_eq!(got.applied, applied);
        let got: Vec<(ParamKey, RowData)> =
            got.saved.iter().map(|(k, r)| (*k, (**r).clone())).collect();
        assert!(got == rows, "every saved row, ascending by key");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lost_updates_answer_larger_than_a_message_arrives_whole() {
        let mut link = linked().await;
        let lost: RowsByEpoch = more_than_a_message()
            .into_iter()
            .map(|(k, r)| (k, vec![(1, r.clone()), (2, r)]))
            .collect();
        let (tx, rx) = oneshot::channel();
        let id = link.asker.register(Pending::LostUpdates(InParts::new(tx)));
        answer_lost_updates(link.answerer(), id, Ok(lost.clone())).await;
        let LostUpdatesResult::Ok(got) = link.answer_of(rx).await else {
            panic!("an inexact answer");
        };
        let got: RowsByEpoch = got
            .into_iter()
            .map(|(k, sums)| {
                let sums = sums.into_iter().map(|(e, d)| (e, d.into())).collect();
                (k.into(), sums)
            })
            .collect();
        assert!(got == lost, "every row's sums by epoch");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn distances_of_more_rows_than_a_message_holds_arrive_whole_and_in_order() {
        let mut link = linked().await;
        // About 24 bytes each on the wire: 3M are 72 MB.
        let distances: Vec<(ParamKey, f64)> = (0..3_000_000u64)
            .map(|r| (ParamKey::new(TableId(0), r), r as f64 / 2.0))
            .collect();
        let (tx, rx) = oneshot::channel();
        let id = link.asker.register(Pending::Distances(InParts::new(tx)));
        answer_distances(link.answerer(), id, Ok(distances.clone())).await;
        let got = link.answer_of(rx).await.expect("the distances");
        assert!(got == distances, "every distance, ascending by key");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_answer_is_refused_with_why_in_one_part() {
        let mut link = linked().await;
        let (tx, rx) = oneshot::channel();
        let id = link.asker.register(Pending::Rows(InParts::new(tx)));
        answer_rows(link.answerer(), id, Err("server stopped".into())).await;
        let got = link.answer_of(rx).await;
        assert!(
            matches!(&got, Err(HarpError::Remote(why)) if why == "server stopped"),
            "{got:?}"
        );
    }

    #[test]
    fn parts_are_whole_once_every_part_arrived_in_any_order_each_counted_once() {
        let mut parts = Parts::default();
        assert_eq!(parts.add(2, 3, "c"), None);
        assert_eq!(
            parts.add(2, 3, "x"),
            None,
            "a repeated part is not a new one"
        );
        assert_eq!(
            parts.add(7, 3, "x"),
            None,
            "a part outside the count is ignored"
        );
        assert_eq!(
            parts.add(1, 4, "x"),
            None,
            "a part of another count is ignored"
        );
        assert_eq!(parts.add(0, 3, "a"), None);
        assert_eq!(
            parts.add(1, 3, "b"),
            Some(vec!["a", "b", "c"]),
            "in part order"
        );
    }

    #[test]
    fn keys_split_into_parts_come_back_whole_and_in_order_from_any_order() {
        let keys: Vec<ParamKeyWire> = (0..600_000)
            .map(|row| ParamKeyWire { table: 2, row })
            .collect();
        let mut parts = keys_in_parts(keys.clone(), |keys, part, parts| Message::Get {
            request_id: 9,
            server: 0,
            keys,
            part,
            parts,
        });
        assert_eq!(parts.len(), 3, "262 144 keys a part");
        parts.reverse();
        let mut assembly = KeysInParts::default();
        let mut whole = None;
        for message in parts {
            let Message::Get {
                request_id,
                keys,
                part,
                parts,
                ..
            } = message
            else {
                panic!("not a read");
            };
            assert!(whole.is_none(), "whole only with the last part");
            whole = assembly.add(request_id, part, parts, keys);
        }
        assert!(whole == Some(keys), "every key once, in order");
        assert!(assembly.0.is_empty(), "nothing kept once whole");
    }

    #[test]
    fn a_single_part_is_whole_at_once() {
        assert_eq!(Parts::default().add(0, 1, 5), Some(vec![5]));
        assert_eq!(
            Parts::default().add(0, 0, 5),
            Some(vec![5]),
            "no count is one part"
        );
        assert_eq!(Parts::default().add(1, 1, 5), None);
    }

    #[test]
    fn a_part_count_from_the_wire_allocates_nothing_ahead() {
        let mut parts = Parts::default();
        assert_eq!(parts.add(0, u32::MAX, 1), None);
        assert_eq!(parts.arrived.len(), 1);
    }
}
