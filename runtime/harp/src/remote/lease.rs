//! What follows from a job's lease (`ClusterOptions::lease_timeout_ms`, told to every node
//! in its `Welcome`): how often a node renews it, when the master gives its verdict on a
//! silent node, and the QUIC settings of every link, so that a peer silent for less than
//! the lease is never taken for dead, by the master or by another node.

use crate::error::HarpError;
use harp_net::TransportConfig;
use std::time::Duration;

/// The shortest lease a job takes: a node renews it every 50 ms at least often, and QUIC
/// needs its keep-alive shorter than the lease.
pub const MIN_LEASE_TIMEOUT_MS: u64 = 100;

/// The longest lease a job takes (an hour): a peer silent that long is gone.
pub const MAX_LEASE_TIMEOUT_MS: u64 = 3_600_000;

/// Refuses a lease outside [`MIN_LEASE_TIMEOUT_MS`]`..=`[`MAX_LEASE_TIMEOUT_MS`], naming the
/// option that sets it.
pub(crate) fn check_lease(lease_timeout_ms: u64) -> Result<(), HarpError> {
    if (MIN_LEASE_TIMEOUT_MS..=MAX_LEASE_TIMEOUT_MS).contains(&lease_timeout_ms) {
        return Ok(());
    }
    Err(HarpError::InvalidConfig(format!(
        "a lease of {lease_timeout_ms} ms (--lease-timeout-ms): it must be {MIN_LEASE_TIMEOUT_MS} to {MAX_LEASE_TIMEOUT_MS} ms \
         (a node renews it every sixth of it, at least every 50 ms)"
    )))
}

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

/// How long a wait on a peer's answer lasts in a job whose lease is `lease_timeout_ms`:
/// `usual`, or until the master's verdict on a silent peer ([`verdict_after`]) when that is
/// later, so that a peer silent for less than the lease (a long pause, a network hiccup)
/// fails no wait; one silent longer is declared dead, and its waiters fail then. The
/// node's reads and flushes, its drain of a leaving server, a shard's take-over
/// confirmation, a state fetch's next chunk, a parked state's fetch, the master's drain of
/// a leaving node, a joining node's wait for the verdicts on broken links and the final
/// dump wait this long.
pub(crate) fn outlasting_verdict(usual: Duration, lease_timeout_ms: u64) -> Duration {
    usual.max(verdict_after(lease_timeout_ms))
}

/// How long a node's traffic for a server that does not answer waits for the server's
/// shards to be rerouted (the master's verdict on its node, then re-creating its shards
/// from the running checkpoint) before the task fails: `usual`, or the verdict and
/// [`RECREATE_AFTER_VERDICT`] when that is later.
pub(crate) fn reroute_wait(usual: Duration, lease_timeout_ms: u64) -> Duration {
    usual.max(verdict_after(lease_timeout_ms) + RECREATE_AFTER_VERDICT)
}

/// What [`reroute_wait`] leaves for re-creating a dead server's shards after the verdict.
pub(crate) const RECREATE_AFTER_VERDICT: Duration = Duration::from_secs(30);

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
    fn a_lease_outside_its_range_is_refused_naming_the_option() {
        for ok in [MIN_LEASE_TIMEOUT_MS, 3_000, MAX_LEASE_TIMEOUT_MS] {
            assert!(check_lease(ok).is_ok(), "{ok}");
            assert!(lease_transport(ok).quinn_transport().is_ok(), "{ok}");
        }
        for bad in [
            0,
            5,
            MIN_LEASE_TIMEOUT_MS - 1,
            MAX_LEASE_TIMEOUT_MS + 1,
            u64::MAX,
        ] {
            let refused = check_lease(bad).unwrap_err().to_string();
            assert!(
                refused.contains("--lease-timeout-ms") && refused.contains(&bad.to_string()),
                "{refused}"
            );
        }
    }

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

    #[test]
    fn a_wait_on_a_peer_outlasts_the_verdict_only_under_a_long_lease() {
        let secs = Duration::from_secs;
        // (lease ms, outlasting a 15 s wait, reroute wait after a usual minute): a peer
        // silent for less than a 30 s lease is waited for; a dead server's traffic waits
        // for the verdict after a 60 s lease, then 30 s to re-create its shards.
        let cases = [
            (3_000, secs(15), secs(60)),
            (14_000, secs(15), secs(60)),
            (29_000, secs(30), secs(60)),
            (30_000, secs(31), secs(61)),
            (60_000, secs(61), secs(91)),
        ];
        for (lease, outlasting, reroute) in cases {
            assert_eq!(
                outlasting_verdict(secs(15), lease),
                outlasting,
                "lease {lease}"
            );
            assert_eq!(reroute_wait(secs(60), lease), reroute, "lease {lease}");
        }
    }
}
