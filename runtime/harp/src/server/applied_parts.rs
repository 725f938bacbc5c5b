//! Which flush parts a server applied itself since its last save the master recorded, so
//! that a part whose acknowledgement a dying server never sent is not applied twice.
//!
//! A node keeps every flush part it sent until the server acknowledges it, and sends an
//! unacknowledged one again to the shards' new owners once the server is declared dead and
//! its shards are re-created from the running checkpoint's image (`node/mod.rs`). But the
//! server may have applied the part, and a checkpoint save after that may have put its
//! deltas into the image, before the server died with the acknowledgement unsent (SIGKILL
//! between the two): sent again, those deltas would count twice.
//!
//! So each flush part carries an id ([`PartId`]: the sending node and its number there),
//! the server notes the parts it applied with its save epoch at the time, and every save
//! answer lists the parts noted since the last save the master took into its image
//! ([`AppliedParts::answer`]; the master says which in each save request, so a lost answer
//! loses nothing). The master tells the nodes with each save (`Message::RowsSaved`), and a
//! node that still holds such a part drops from it the rows that save holds: exactly what
//! the image already has of it. A part applied at epoch `a` is in a row saved at epoch `e`
//! exactly when `a < e` (`server/mod.rs`, "Save epochs").
//!
//! **Bounded.** Only parts with an id are noted, and a node names its plain parts only in
//! a job that sends unacknowledged ones again (`ParamStore::awaiting_lost_servers`: a job
//! with SCAR's running checkpoint; a job that recovers worker nodes stages its parts
//! instead). Only the newest [`APPLIED_PARTS_KEPT`] are kept: the parts whose
//! acknowledgement can be lost are the last ones a server applied before it died.

use std::collections::VecDeque;

/// How many applied parts a server keeps at most (see the module doc).
pub(crate) const APPLIED_PARTS_KEPT: usize = 16_384;

/// One flush part: the node that sent it and its number among that node's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct PartId {
    pub node: u32,
    pub seq: u64,
}

/// A part a server applied, and its save epoch then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AppliedPart {
    pub part: PartId,
    pub epoch: u64,
}

/// The parts one server applied since the last save the master recorded, oldest first.
#[derive(Debug, Default)]
pub(crate) struct AppliedParts {
    parts: VecDeque<AppliedPart>,
    /// Parts dropped unconfirmed because more than [`APPLIED_PARTS_KEPT`] were kept.
    dropped: u64,
}

impl AppliedParts {
    /// The server applied (its keys of) `part` at save epoch `epoch`.
    pub(crate) fn applied(&mut self, part: PartId, epoch: u64) {
        if self.parts.len() == APPLIED_PARTS_KEPT {
            self.parts.pop_front();
            self.dropped += 1;
        }
        self.parts.push_back(AppliedPart { part, epoch });
    }

    /// What a save answers: the master's image holds this server's saves up to epoch
    /// `recorded` (0: none), so the parts applied before it are forgotten (that save's
    /// answer listed them); every other part noted is listed, oldest first.
    pub(crate) fn answer(&mut self, recorded: u64) -> Vec<AppliedPart> {
        while self.parts.front().is_some_and(|p| p.epoch < recorded) {
            self.parts.pop_front();
        }
        self.parts.iter().copied().collect()
    }

    /// Parts dropped unconfirmed so far (see [`APPLIED_PARTS_KEPT`]).
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(node: u32, seq: u64) -> PartId {
        PartId { node, seq }
    }

    #[test]
    fn a_save_lists_every_part_applied_since_the_last_recorded_save() {
        let mut applied = AppliedParts::default();
        applied.applied(part(1, 0), 0);
        applied.applied(part(2, 0), 0);
        // Save 1 lists both; its answer is lost, so the master still records nothing.
        assert_eq!(applied.answer(0).len(), 2);
        applied.applied(part(1, 1), 1);
        // Save 2 lists all three again.
        let listed: Vec<PartId> = applied.answer(0).iter().map(|p| p.part).collect();
        assert_eq!(listed, vec![part(1, 0), part(2, 0), part(1, 1)]);
        // The master recorded save 2: what was applied before it is in its answer.
        applied.applied(part(2, 1), 2);
        let listed = applied.answer(2);
        assert_eq!(
            listed,
            vec![AppliedPart {
                part: part(2, 1),
                epoch: 2
            }]
        );
    }

    #[test]
    fn only_the_newest_parts_are_kept() {
        let mut applied = AppliedParts::default();
        for seq in 0..(APPLIED_PARTS_KEPT as u64 + 3) {
            applied.applied(part(0, seq), 0);
        }
        let listed = applied.answer(0);
        assert_eq!(listed.len(), APPLIED_PARTS_KEPT);
        assert_eq!(listed[0].part, part(0, 3));
        assert_eq!(applied.dropped(), 3);
    }
}
