//! The generic balancer: one algorithm for executors over workers and shards over servers.
//!
//! See the [parent module](super) for the guarantees; this file is the algorithm that keeps
//! them. Every step works on id-sorted data and breaks ties by id, so the result does not
//! depend on the order of the input.

use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// One item where it is now: its id, its owner, and the bytes of state a move ships.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Placed<I, N> {
    pub item: I,
    pub owner: N,
    pub bytes: u64,
}

/// One hop of a plan: `item` goes from `from` straight to its final owner `to`.
///
/// `bytes` is the item's size as given to the planner (what the move ships).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Move<I, N> {
    pub item: I,
    pub from: N,
    pub to: N,
    pub bytes: u64,
}

/// Why [`balance`] refused its input. Nothing is planned when it does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BalanceError<I> {
    #[error("item {0:?} is listed more than once")]
    DuplicateItem(I),
    #[error("{items} item(s) but no live node to place them on")]
    NoLiveNode { items: usize },
}

/// What one live node holds before the plan.
struct Holding<I> {
    /// `(item, bytes)` in item-id order.
    items: Vec<(I, u64)>,
    bytes: u128,
}

/// Plans the moves that balance `items` over the `live` nodes (see the module guarantees).
///
/// An item whose owner is not in `live` is on a leaving or dead node and always moves.
/// Duplicates in `live` are ignored. The moves come back sorted by item id.
pub fn balance<I: Ord + Copy, N: Ord + Copy>(
    items: &[Placed<I, N>],
    live: &[N],
) -> Result<Vec<Move<I, N>>, BalanceError<I>> {
    let mut items = items.to_vec();
    items.sort_by_key(|p| p.item);
    if let Some(pair) = items.windows(2).find(|w| w[0].item == w[1].item) {
        return Err(BalanceError::DuplicateItem(pair[0].item));
    }
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let mut live = live.to_vec();
    live.sort();
    live.dedup();
    if live.is_empty() {
        return Err(BalanceError::NoLiveNode { items: items.len() });
    }

    // Who holds what; items of nodes that are not live go straight to the pool of movers.
    let mut held: BTreeMap<N, Holding<I>> = live
        .iter()
        .map(|n| {
            let empty = Holding {
                items: Vec::new(),
                bytes: 0,
            };
            (*n, empty)
        })
        .collect();
    // (item, from, bytes)
    let mut movers: Vec<(I, N, u64)> = Vec::new();
    for p in &items {
        match held.get_mut(&p.owner) {
            Some(h) => {
                h.items.push((p.item, p.bytes));
                h.bytes += u128::from(p.bytes);
            }
            None => movers.push((p.item, p.owner, p.bytes)),
        }
    }

    // Targets: everyone gets `floor`, `rem` nodes get one more. The extra slots go first to
    // nodes that hold more than `floor` (each such slot saves a move), then to the nodes with
    // the fewest bytes, then by id.
    let floor = items.len() / live.len();
    let rem = items.len() % live.len();
    let mut by_claim: Vec<N> = live.clone();
    by_claim.sort_by_key(|n| {
        let h = &held[n];
        (h.items.len() <= floor, h.bytes, *n)
    });
    let target: BTreeMap<N, usize> = by_claim
        .iter()
        .enumerate()
        .map(|(rank, n)| (*n, floor + usize::from(rank < rem)))
        .collect();

    // Nodes above target shed their largest items; nodes below target receive.
    let mut receivers: BinaryHeap<Reverse<(u128, N, usize)>> = BinaryHeap::new();
    for (node, h) in &held {
        let (count, want) = (h.items.len(), target[node]);
        if count > want {
            let mut largest_first = h.items.clone();
            largest_first.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            movers.extend(
                largest_first
                    .into_iter()
                    .take(count - want)
                    .map(|(item, bytes)| (item, *node, bytes)),
            );
        } else if count < want {
            receivers.push(Reverse((h.bytes, *node, want - count)));
        }
    }

    // Largest mover first, each to the receiver with room that holds the fewest bytes.
    movers.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut moves = Vec::with_capacity(movers.len());
    let mut movers = movers.into_iter();
    while let Some(Reverse((load, to, room))) = receivers.pop() {
        let Some((item, from, bytes)) = movers.next() else {
            debug_assert!(false, "receivers have more room than there are movers");
            break;
        };
        moves.push(Move {
            item,
            from,
            to,
            bytes,
        });
        if room > 1 {
            receivers.push(Reverse((load + u128::from(bytes), to, room - 1)));
        }
    }
    debug_assert!(
        movers.next().is_none(),
        "every mover has a receiver: the receivers' room is n minus what stays"
    );
    moves.sort_by_key(|m| m.item);
    Ok(moves)
}
