//! What follows from a job's lease (`ClusterOptions::lease_timeout_ms`, told to every node
//! in its `Welcome`): how often a node renews it, when the master gives its verdict on a
//! silent node, and the QUIC settings of every link, so that a peer silent for less than
//! the lease is never taken for dead, by the master or by another node.

use harp_net::TransportConfig;
use std::time::Duration;

/// How often a node renews its lease (and QUIC sends a keep-alive): a sixth of it, at
/// least every 50 ms.
pub(crate) fn heartbeat_interval_ms(lease_timeout_ms: u64) -> u64 {
    (lease_timeout_ms / 6).max(50)
}

/// How long after a node went silent the master's verdict on it may come: the lease and a
/// second. Waits on a peer's answer that must not fail before that verdict wait as long.
pub(crate) fn verdict_after(lease_timeout_ms: u64) -> Duration {
    Duration::from_millis(lease_timeout_ms) + Duration::from_secs(1)
}

/// The QUIC settings of a job's links: a link breaks after a lease of silence (QUIC takes
/// the shorter of its two ends' idle timeouts, so both ends use the lease), kept alive
/// every heartbeat; the default connect deadline.
pub(crate) fn lease_transport(lease_timeout_ms: u64) -> TransportConfig {
    TransportConfig {
        idle_timeout_ms: lease_timeout_ms,
        keep_alive_ms: heartbeat_interval_ms(lease_timeout_ms),
        ..TransportConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_sets_the_heartbeat_the_verdict_and_the_links() {
        assert_eq!(heartbeat_interval_ms(3_000), 500);
        assert_eq!(heartbeat_interval_ms(120), 50);
        assert_eq!(verdict_after(3_000), Duration::from_secs(4));
        let links = lease_transport(30_000);
        assert_eq!(
            (links.idle_timeout_ms, links.keep_alive_ms),
            (30_000, 5_000)
        );
        assert!(links.quinn_transport().is_ok());
    }
}
