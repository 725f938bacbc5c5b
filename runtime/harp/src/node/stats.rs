//! Counters a node keeps about its parameter traffic.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of one node (relaxed atomics; read them for reports, not for decisions).
#[derive(Debug, Default)]
pub(crate) struct NodeCounters {
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    pub fetch_waits: AtomicU64,
    pub rows_fetched: AtomicU64,
    pub updates_recorded: AtomicU64,
    pub updates_rejected: AtomicU64,
    pub flushes: AtomicU64,
    pub rows_flushed: AtomicU64,
    pub requests_timed_out: AtomicU64,
    pub requests_resent: AtomicU64,
}

/// A snapshot of a node's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeStats {
    /// Rows served from the node's cache.
    pub cache_hits: u64,
    /// Rows that needed a fetch from a server.
    pub cache_misses: u64,
    /// Rows that waited on a fetch another task had already started.
    pub fetch_waits: u64,
    /// Rows received from servers.
    pub rows_fetched: u64,
    /// `update` calls recorded into the update log (before aggregation).
    pub updates_recorded: u64,
    /// Updates refused (wrong width, non-finite values, refused by a server).
    pub updates_rejected: u64,
    /// Flushes of the update log.
    pub flushes: u64,
    /// Aggregated rows sent by flushes.
    pub rows_flushed: u64,
    /// Reads and flushes a server did not answer within the request deadline.
    pub requests_timed_out: u64,
    /// Reads and flush parts a failed server did not answer, sent again to its shards' new
    /// owners (SCAR recovery).
    pub requests_resent: u64,
}

impl NodeStats {
    /// Adds `other`'s counts to these (a job's sum over its nodes).
    pub fn add(&mut self, other: &NodeStats) {
        self.cache_hits += other.cache_hits;
        self.cache_misses += other.cache_misses;
        self.fetch_waits += other.fetch_waits;
        self.rows_fetched += other.rows_fetched;
        self.updates_recorded += other.updates_recorded;
        self.updates_rejected += other.updates_rejected;
        self.flushes += other.flushes;
        self.rows_flushed += other.rows_flushed;
        self.requests_timed_out += other.requests_timed_out;
        self.requests_resent += other.requests_resent;
    }
}

impl NodeCounters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> NodeStats {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        NodeStats {
            cache_hits: r(&self.cache_hits),
            cache_misses: r(&self.cache_misses),
            fetch_waits: r(&self.fetch_waits),
            rows_fetched: r(&self.rows_fetched),
            updates_recorded: r(&self.updates_recorded),
            updates_rejected: r(&self.updates_rejected),
            flushes: r(&self.flushes),
            rows_flushed: r(&self.rows_flushed),
            requests_timed_out: r(&self.requests_timed_out),
            requests_resent: r(&self.requests_resent),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_sums_every_counter() {
        crate::test_support::adds_every_counter(NodeStats::add);
    }
}
