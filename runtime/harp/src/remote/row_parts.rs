//! Rows that may not fit one message between processes (a frame holds at most 64 MiB): a
//! server node's dump (`DumpRows`, the job's final parameters and a consistent
//! checkpoint's rows) and the rows a resumed job puts into a server node (`ResetRows`) go in
//! parts of at most [`PART_BYTES`] of values each.
//!
//! A dump's parts are numbered (`part` of `parts`) and each goes on a stream of its own, so
//! they may arrive in any order; [`DumpAssembly`] answers the dump once every part is in,
//! each counted once. A reset sends each part as a request of its own and answers once
//! every part is set (or with the first error).

use super::codec::rows_from_wire;
use super::proxies::{send_sized, Pending, PendingReplies};
use crate::error::HarpError;
use harp_core::{ParamKey, RowData, ServerId};
use harp_net::Link;
use harp_wire::{Message, ParamKeyWire, RowWire};
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::oneshot;

/// The most bytes of row values one part carries: far below the largest frame, so a part's
/// keys and framing always fit too.
pub(crate) const PART_BYTES: usize = 16 << 20;

/// Wire bytes a row's key and framing take besides its values (an estimate on the safe side).
const PER_ROW_BYTES: usize = 64;

/// Splits `rows` into runs of at most [`PART_BYTES`] (`bytes` of each row), in order; a row
/// larger than that is a part of its own. Always at least one part (empty for no rows).
pub(crate) fn split_rows<R>(rows: Vec<R>, bytes: impl Fn(&R) -> usize) -> Vec<Vec<R>> {
    let mut parts = vec![Vec::new()];
    let mut filled = 0;
    for row in rows {
        let size = bytes(&row) + PER_ROW_BYTES;
        let current = parts.last().map_or(0, Vec::len);
        if current > 0 && filled + size > PART_BYTES {
            parts.push(Vec::new());
            filled = 0;
        }
        filled += size;
        if let Some(last) = parts.last_mut() {
            last.push(row);
        }
    }
    parts
}

/// Sends `rows` (all a server holds) as the answer to the dump `request_id`, in parts, each
/// on a stream of its own.
pub(crate) async fn send_dump(link: &Link, request_id: u64, rows: Vec<(ParamKeyWire, RowWire)>) {
    let parts = split_rows(rows, |(_, row)| row.value_bytes());
    let count = parts.len() as u32;
    for (part, rows) in parts.into_iter().enumerate() {
        let message = Message::DumpRows {
            request_id,
            rows,
            part: part as u32,
            parts: count,
        };
        if let Err(e) = link.send_bulk(&message).await {
            // The link is gone (the master hears of it) or refused a part: the master's
            // wait for the dump ends with its deadline.
            tracing::warn!(request_id, part, error = %e, "could not send a part of a dump");
            return;
        }
    }
}

/// A dump whose parts are arriving: the rows so far and which parts they came in.
pub(crate) struct DumpAssembly {
    reply: oneshot::Sender<Vec<(ParamKey, RowData)>>,
    rows: Vec<(ParamKey, RowData)>,
    arrived: BTreeSet<u32>,
}

impl DumpAssembly {
    pub(crate) fn new(reply: oneshot::Sender<Vec<(ParamKey, RowData)>>) -> Self {
        Self {
            reply,
            rows: Vec::new(),
            arrived: BTreeSet::new(),
        }
    }

    /// Adds part `part` of `parts`; says whether every part is in. A part outside `parts`
    /// or one already in is ignored.
    pub(crate) fn add(
        &mut self,
        part: u32,
        parts: u32,
        rows: Vec<(ParamKeyWire, RowWire)>,
    ) -> bool {
        if part < parts && self.arrived.insert(part) {
            self.rows.extend(rows_from_wire(rows));
        }
        self.arrived.len() as u64 >= u64::from(parts.max(1))
    }

    /// Answers the dump with every part's rows.
    pub(crate) fn finish(self) {
        let _ = self.reply.send(self.rows);
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

    fn row(values: usize) -> (ParamKeyWire, RowWire) {
        let key = ParamKeyWire { table: 0, row: 0 };
        (key, RowWire::F32(vec![0.0; values]))
    }

    fn value_bytes((_, row): &(ParamKeyWire, RowWire)) -> usize {
        row.value_bytes()
    }

    #[test]
    fn rows_split_into_bounded_parts_in_order_and_a_huge_row_goes_alone() {
        let quarter = PART_BYTES / 4 / 4; // a quarter of a part, in f32 values
        let rows = vec![
            row(quarter),
            row(quarter),
            row(quarter),
            row(quarter),
            row(PART_BYTES), // 4× a part on its own
            row(1),
        ];
        let parts = split_rows(rows.clone(), value_bytes);
        let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
        // Four quarters and their keys overflow one part by the keys alone.
        assert_eq!(sizes, [3, 1, 1, 1]);
        for part in &parts {
            let bytes: usize = part.iter().map(value_bytes).sum();
            assert!(part.len() == 1 || bytes <= PART_BYTES, "{bytes}");
        }
        let flat: Vec<_> = parts.into_iter().flatten().collect();
        assert_eq!(flat, rows, "the parts hold every row once, in order");
    }

    #[test]
    fn no_rows_is_one_empty_part() {
        let parts = split_rows(Vec::<(ParamKeyWire, RowWire)>::new(), value_bytes);
        assert_eq!(parts, vec![Vec::new()]);
    }

    #[tokio::test]
    async fn a_dump_is_answered_once_every_part_arrived_in_any_order_each_counted_once() {
        let (reply, answer) = oneshot::channel();
        let mut dump = DumpAssembly::new(reply);
        let keyed = |n: u64| {
            vec![(
                ParamKeyWire { table: 1, row: n },
                RowWire::I64(vec![n as i64]),
            )]
        };
        assert!(!dump.add(2, 3, keyed(2)));
        assert!(
            !dump.add(2, 3, keyed(2)),
            "a repeated part is not a new one"
        );
        assert!(
            !dump.add(7, 3, keyed(7)),
            "a part outside the count is ignored"
        );
        assert!(!dump.add(0, 3, keyed(0)));
        assert!(dump.add(1, 3, keyed(1)));
        dump.finish();
        let mut rows: Vec<u64> = answer.await.unwrap().iter().map(|(k, _)| k.row).collect();
        rows.sort_unstable();
        assert_eq!(rows, [0, 1, 2]);
    }
}
