//! Rows that may not fit one message between processes (a frame holds at most 64 MiB) go in
//! parts of at most [`harp_wire::PART_BYTES`] of values each ([`split_rows`]): the answers a server node sends from its
//! rows (a read's `Rows`, a SCAR round's `Saved`, a dump's `DumpRows`: the job's final
//! parameters and a consistent checkpoint's rows) and the rows a resumed job puts into a
//! server node (`ResetRows`). A worker node's flush is split the same way before it leaves
//! the node (`node::ParamStore`), since each part of it is acknowledged on its own.
//!
//! An answer's parts are numbered (`part` of `parts`) and each goes with [`send_in_parts`]
//! (on a stream of its own unless small), so they may arrive in any order; [`Parts`] puts
//! them back in order and hands them over once every part is in, each counted once. A
//! reset sends each part as a request of its own and answers once every part is set (or
//! with the first error).

use super::proxies::{send_sized, Pending, PendingReplies};
use crate::error::HarpError;
use harp_core::ServerId;
use harp_net::Link;
use harp_wire::{split_rows, Message, ParamKeyWire, RowWire};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Sends `items` as one answer in parts of at most [`harp_wire::PART_BYTES`] (`bytes` of each item),
/// `message(part, parts, items)` building each part, each sent with [`send_sized`] (a part
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
