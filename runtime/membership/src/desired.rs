//! The job's desired size in etcd: a node count that an outside scheduler writes under
//! `/harp/jobs/<job>/desired_nodes`, and that the master follows by growing or shrinking the
//! job (the same way `harp scale --add N` / `--remove NODE` do).
//!
//! The value is a decimal node count in ASCII; whitespace around it is allowed (`3`, `" 3\n"`).
//! It must be at least 1 (a scheduler ends a job by ending it, not by asking for no nodes)
//! and at most [`DESIRED_NODES_MAX`] (a guard against a typo starting a flood of
//! processes). Anything else is a [`MembershipBackendError::InvalidDesiredNodes`] that names
//! the key and the value.
//!
//! [`EtcdMembership::watch_desired_nodes`] reads the key once (its value, if it has a valid
//! one, is the first item) and then watches it from the next revision: every put of a valid
//! value is one item, in order. Invariant: a malformed value is logged, counted
//! ([`DesiredNodesWatch::malformed_values`]) and skipped — it never reaches the master, so it
//! can neither shrink the job to nothing nor stop the watch; deleting the key changes nothing
//! (the job keeps its size); and the watch ends with
//! [`MembershipBackendError::WatchLost`] rather than go on after a gap (compaction, broken
//! stream).

use crate::error::MembershipBackendError;
use crate::etcd::EtcdMembership;
use etcd_client::{EventType, WatchOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// The largest node count a job may be asked to have.
pub const DESIRED_NODES_MAX: u32 = 10_000;

/// How much of a bad value an error shows.
const SHOWN_VALUE_CHARS: usize = 64;

/// `/harp/jobs/<job>/desired_nodes`: where a scheduler writes the node count it wants.
pub fn desired_nodes_key(job: &str) -> String {
    format!("/harp/jobs/{job}/desired_nodes")
}

/// Reads a desired node count: decimal ASCII digits with optional surrounding whitespace,
/// between 1 and [`DESIRED_NODES_MAX`].
pub fn parse_desired_nodes(bytes: &[u8]) -> Result<u32, MembershipBackendError> {
    parse_under(&desired_nodes_key("<job>"), bytes)
}

/// [`parse_desired_nodes`], naming `key` in its error.
fn parse_under(key: &str, bytes: &[u8]) -> Result<u32, MembershipBackendError> {
    let invalid = |reason: String| MembershipBackendError::InvalidDesiredNodes {
        key: key.to_string(),
        value: shown(bytes),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|_| invalid("not UTF-8 text".into()))?;
    let digits = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(
            "not a decimal node count (expected digits only, such as 3)".into(),
        ));
    }
    let too_many = || invalid(format!("more than {DESIRED_NODES_MAX} nodes"));
    let count: u32 = digits.parse().map_err(|_| too_many())?;
    if count == 0 {
        return Err(invalid(
            "zero nodes: a job keeps at least one node (end the job to stop it)".into(),
        ));
    }
    if count > DESIRED_NODES_MAX {
        return Err(too_many());
    }
    Ok(count)
}

/// A value as an error shows it: lossily decoded, cut to a readable length.
fn shown(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text.chars().take(SHOWN_VALUE_CHARS).collect();
    if text.chars().count() > SHOWN_VALUE_CHARS {
        out.push('…');
    }
    out
}

/// Parses a value read from etcd; logs, counts and skips one that is not a usable count.
fn accept(key: &str, value: &[u8], malformed: &AtomicU64) -> Option<u32> {
    match parse_under(key, value) {
        Ok(count) => Some(count),
        Err(error) => {
            let so_far = malformed.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(%error, malformed_so_far = so_far, "ignored a desired node count; the job keeps its size");
            None
        }
    }
}

type DesiredItem = Result<u32, MembershipBackendError>;

/// The valid desired node counts written under one job's key, in order.
#[derive(Debug)]
pub struct DesiredNodesWatch {
    key: String,
    /// The valid count the key held when the watch began (also its first item).
    current: Option<u32>,
    rx: mpsc::UnboundedReceiver<DesiredItem>,
    malformed: Arc<AtomicU64>,
    ended: Option<MembershipBackendError>,
}

impl DesiredNodesWatch {
    /// The key watched.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The valid count the key already held when the watch began (its first item), e.g.
    /// one written for an earlier run of the job; `None` when it held none.
    pub fn current(&self) -> Option<u32> {
        self.current
    }

    /// The next valid count. An error means the watch has ended; every later call returns it
    /// again. This waits as long as nobody writes the key.
    pub async fn next(&mut self) -> Result<u32, MembershipBackendError> {
        if let Some(err) = &self.ended {
            return Err(err.clone());
        }
        let item = self
            .rx
            .recv()
            .await
            .unwrap_or(Err(MembershipBackendError::Stopped));
        if let Err(err) = &item {
            self.ended = Some(err.clone());
        }
        item
    }

    /// Values that were not usable counts, skipped so far.
    pub fn malformed_values(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }
}

impl EtcdMembership {
    /// `/harp/jobs/<job>/desired_nodes` for this backend's job.
    pub fn desired_nodes_key(&self) -> String {
        desired_nodes_key(self.job())
    }

    /// Watches this job's desired node count: its current value first (if it has a valid
    /// one), then every valid value put, in order; see the module doc for what is skipped.
    pub async fn watch_desired_nodes(&self) -> Result<DesiredNodesWatch, MembershipBackendError> {
        let key = self.desired_nodes_key();
        let mut client = self.client();
        let current = self
            .call("read desired node count", client.get(key.clone(), None))
            .await?;
        let revision = current.header().map(|h| h.revision()).unwrap_or(0);
        let (tx, rx) = mpsc::unbounded_channel();
        let malformed = Arc::new(AtomicU64::new(0));
        let held = current
            .kvs()
            .first()
            .and_then(|kv| accept(&key, kv.value(), &malformed));
        if let Some(count) = held {
            // The receiver is still in hand, so this send cannot fail.
            let _ = tx.send(Ok(count));
        }
        let options = WatchOptions::new().with_start_revision(revision + 1);
        let stream = self
            .call(
                "watch desired node count",
                client.watch(key.clone(), Some(options)),
            )
            .await?;
        let endpoint = self.endpoint().to_string();
        tokio::spawn(follow(endpoint, key.clone(), stream, tx, malformed.clone()));
        Ok(DesiredNodesWatch {
            key,
            current: held,
            rx,
            malformed,
            ended: None,
        })
    }

    /// Asks for `count` nodes (what a scheduler written in Rust calls); a count that
    /// [`parse_desired_nodes`] would refuse is refused here, and nothing is written.
    pub async fn set_desired_nodes(&self, count: u32) -> Result<(), MembershipBackendError> {
        let value = count.to_string();
        parse_under(&self.desired_nodes_key(), value.as_bytes())?;
        self.put_desired_nodes_raw(value.as_bytes()).await
    }

    /// Writes `value` under the key as it is, unchecked, as `etcdctl put` would (for tools
    /// and tests that exercise how a watch treats bad values).
    pub async fn put_desired_nodes_raw(&self, value: &[u8]) -> Result<(), MembershipBackendError> {
        let mut client = self.client();
        let key = self.desired_nodes_key();
        self.call("write desired node count", client.put(key, value, None))
            .await?;
        Ok(())
    }
}

/// Turns the key's watch responses into counts for one watcher, until the watcher goes away
/// or the watch breaks.
async fn follow(
    endpoint: String,
    key: String,
    mut stream: etcd_client::WatchStream,
    tx: mpsc::UnboundedSender<DesiredItem>,
    malformed: Arc<AtomicU64>,
) {
    loop {
        let response = tokio::select! {
            response = stream.message() => response,
            () = tx.closed() => return,
        };
        let lost = |message: String| {
            let _ = tx.send(Err(MembershipBackendError::WatchLost(message)));
        };
        let response = match response {
            Ok(Some(response)) => response,
            Ok(None) => return lost(format!("etcd closed the watch of {key}")),
            Err(err) => return lost(format!("{endpoint}: {err}")),
        };
        if response.canceled() || response.compact_revision() > 0 {
            return lost(format!(
                "etcd cancelled the watch of {key} (compacted at revision {}): {}",
                response.compact_revision(),
                response.cancel_reason()
            ));
        }
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            match event.event_type() {
                EventType::Put => {
                    if let Some(count) = accept(&key, kv.value(), &malformed) {
                        if tx.send(Ok(count)).is_err() {
                            return;
                        }
                    }
                }
                EventType::Delete => {
                    tracing::info!(%key, "the desired node count was deleted; the job keeps its size");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_server::EtcdServer;
    use crate::{EtcdOptions, MembershipConfig};

    fn reason_of(value: &[u8]) -> String {
        match parse_desired_nodes(value) {
            Err(MembershipBackendError::InvalidDesiredNodes { reason, .. }) => reason,
            other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(value)),
        }
    }

    #[test]
    fn the_key_is_under_the_job_prefix() {
        assert_eq!(desired_nodes_key("0a1b"), "/harp/jobs/0a1b/desired_nodes");
    }

    #[test]
    fn decimal_counts_with_surrounding_whitespace_parse() {
        for (value, count) in [
            (&b"3"[..], 3),
            (b" 3\n", 3),
            (b"\t12 \r\n", 12),
            (b"007", 7),
            (b"1", 1),
            (b"10000", DESIRED_NODES_MAX),
        ] {
            assert_eq!(parse_desired_nodes(value), Ok(count), "{value:?}");
        }
    }

    #[test]
    fn malformed_zero_and_huge_counts_are_refused_with_the_key_and_the_value() {
        for value in [
            &b""[..],
            b"  ",
            b"abc",
            b"3 nodes",
            b"-1",
            b"+3",
            b"3.0",
            b"1 2",
            b"\xff\xfe",
        ] {
            let reason = reason_of(value);
            assert!(
                reason.contains("not a decimal node count") || reason.contains("UTF-8"),
                "{value:?}: {reason}"
            );
        }
        assert!(reason_of(b"0").contains("zero nodes"));
        assert!(reason_of(b" 000 ").contains("zero nodes"));
        assert!(reason_of(b"10001").contains("more than 10000"));
        assert!(reason_of(b"99999999999999999999").contains("more than 10000"));
        let error = parse_desired_nodes(b"abc").unwrap_err().to_string();
        assert_eq!(
            error,
            "invalid desired node count \"abc\" under /harp/jobs/<job>/desired_nodes: \
             not a decimal node count (expected digits only, such as 3)"
        );
    }

    #[test]
    fn a_long_bad_value_is_shown_cut() {
        let value = "x".repeat(1000);
        let Err(MembershipBackendError::InvalidDesiredNodes { value: shown, .. }) =
            parse_desired_nodes(value.as_bytes())
        else {
            panic!("accepted");
        };
        assert_eq!(shown.chars().count(), SHOWN_VALUE_CHARS + 1);
        assert!(shown.ends_with('…'));
    }

    async fn connect(server: &EtcdServer, job: &str) -> EtcdMembership {
        EtcdMembership::connect(
            &server.endpoint,
            job,
            MembershipConfig::with_lease_timeout_ms(2000),
            EtcdOptions::default(),
        )
        .await
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watch_yields_the_current_count_then_every_valid_put_and_skips_the_rest() {
        let Some(server) = EtcdServer::start().await else {
            return;
        };
        let scheduler = connect(&server, "job-d").await;
        let master = connect(&server, "job-d").await;
        let other_job = connect(&server, "job-e").await;
        scheduler.set_desired_nodes(4).await.unwrap();
        let mut watch = master.watch_desired_nodes().await.unwrap();
        assert_eq!(watch.key(), "/harp/jobs/job-d/desired_nodes");
        assert_eq!(watch.current(), Some(4));
        assert_eq!(watch.next().await, Ok(4));
        for value in [&b"abc"[..], b"0", b"", b"99999"] {
            scheduler.put_desired_nodes_raw(value).await.unwrap();
        }
        other_job.set_desired_nodes(9).await.unwrap();
        let mut client = scheduler.client();
        client
            .delete(scheduler.desired_nodes_key(), None)
            .await
            .unwrap();
        scheduler.put_desired_nodes_raw(b" 2\n").await.unwrap();
        scheduler.set_desired_nodes(3).await.unwrap();
        // In order, and nothing of the bad values, the deletion or the other job in between.
        assert_eq!(watch.next().await, Ok(2));
        assert_eq!(watch.next().await, Ok(3));
        assert_eq!(watch.malformed_values(), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watch_of_an_absent_or_malformed_key_starts_with_the_next_valid_put() {
        let Some(server) = EtcdServer::start().await else {
            return;
        };
        let scheduler = connect(&server, "job-f").await;
        scheduler.put_desired_nodes_raw(b"many").await.unwrap();
        let mut watch = scheduler.watch_desired_nodes().await.unwrap();
        assert_eq!(watch.malformed_values(), 1);
        assert_eq!(watch.current(), None, "a malformed value is no count");
        assert!(matches!(
            scheduler.set_desired_nodes(0).await,
            Err(MembershipBackendError::InvalidDesiredNodes { .. })
        ));
        scheduler.set_desired_nodes(5).await.unwrap();
        assert_eq!(watch.next().await, Ok(5));
        let mut fresh = connect(&server, "job-g")
            .await
            .watch_desired_nodes()
            .await
            .unwrap();
        assert_eq!(fresh.current(), None, "an absent key holds no count");
        connect(&server, "job-g")
            .await
            .set_desired_nodes(1)
            .await
            .unwrap();
        assert_eq!(fresh.next().await, Ok(1));
    }
}
