//! Counters a server keeps about the traffic it serves and what moves, recoveries and
//! resends made it forward, skip or forget ([`ServerStats`]), read by the job at its end
//! ([`ServerMsg::Stats`](super::ServerMsg::Stats), `JobStats::servers`).
//!
//! The server actor owns its counters (plain integers in its state, no atomics); the ones
//! its parts keep themselves (refused updates in the shard store, forgotten part records in
//! [`applied_parts`](super::applied_parts) and [`forwarded_parts`](super::forwarded_parts))
//! are read from them when a snapshot is taken.

/// What one server did, or (in `JobStats::servers`) the sum over a job's servers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServerStats {
    /// Rows read from the shards held here.
    pub rows_read: u64,
    /// Deltas applied to rows held here (each flush part's aggregated rows; a part staged
    /// by a worker node counts once, when it is committed).
    pub updates_applied: u64,
    /// Deltas refused: wrong row shape or kind, an unknown table, values the table's rule
    /// does not take. The sender's `NodeStats::updates_rejected` counts them too.
    pub updates_refused: u64,
    /// Row reads that came for a shard given away and were sent on to its new owner (or
    /// held here while its rows travel, then sent on; a held read whose shard came back is
    /// counted here and again in `rows_read` when it is served).
    pub reads_forwarded: u64,
    /// Deltas that came for a shard given away and were sent on to its new owner (or held
    /// first, as reads are).
    pub updates_forwarded: u64,
    /// Deltas of a flush part sent again (after a server failure) that were applied here
    /// already, skipped so that they count once.
    pub resent_updates_skipped: u64,
    /// Shards this server gave to another (a move confirmed by the new owner; summed over a
    /// job's servers, the shard moves).
    pub shards_handed_off: u64,
    /// Shards of a failed server re-created here from the running checkpoint's image (once
    /// per recovery, however many messages its rows came in).
    pub shards_restored: u64,
    /// Flush parts a dead worker node had staged here uncommitted, dropped.
    pub staged_parts_dropped: u64,
    /// Records of applied flush parts forgotten before a save confirmed them (more were
    /// applied between two saves than a server keeps): a part of those whose
    /// acknowledgement a failure loses may count twice.
    pub applied_parts_forgotten: u64,
    /// Records of forwarded flush parts forgotten before their node moved past them (more
    /// waited than a server keeps): one of those sent again counts twice.
    pub forwarded_parts_forgotten: u64,
    /// Records of flush parts applied here straight from their nodes forgotten before their
    /// node moved past them (more keys waited than a server keeps): one of those whose
    /// shard then moved, sent again, counts twice.
    pub direct_parts_forgotten: u64,
}

impl ServerStats {
    /// Adds `other`'s counts to these (a job's sum over its servers).
    pub fn add(&mut self, other: &ServerStats) {
        self.rows_read += other.rows_read;
        self.updates_applied += other.updates_applied;
        self.updates_refused += other.updates_refused;
        self.reads_forwarded += other.reads_forwarded;
        self.updates_forwarded += other.updates_forwarded;
        self.resent_updates_skipped += other.resent_updates_skipped;
        self.shards_handed_off += other.shards_handed_off;
        self.shards_restored += other.shards_restored;
        self.staged_parts_dropped += other.staged_parts_dropped;
        self.applied_parts_forgotten += other.applied_parts_forgotten;
        self.forwarded_parts_forgotten += other.forwarded_parts_forgotten;
        self.direct_parts_forgotten += other.direct_parts_forgotten;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_sums_every_counter() {
        crate::test_support::adds_every_counter(ServerStats::add);
    }
}
