//! The etcd membership backend: the member table lives in etcd, under the job's prefix.
//!
//! Layout: each node owns one key, `/harp/jobs/<job>/members/<node id>`, attached to an etcd
//! lease whose TTL is the lease timeout rounded up to whole seconds (at least 1; etcd may
//! raise it to its own minimum, and the granted TTL is the one used). The value is a JSON
//! [`MemberRecord`]: the node's [`MemberInfo`] and a `leaving` flag.
//!
//! - **register**: grant a lease, then create the key in a transaction that fails if it
//!   already exists (so two nodes can never hold one id); a keep-alive task renews the lease
//!   every third of its TTL.
//! - **graceful leave** (and the master's revoke): rewrite the value with `leaving: true`
//!   (same lease), then revoke the lease, which deletes the key.
//! - **crash**: nothing renews the lease; etcd deletes the key when it expires.
//! - **clear** (a master starting a run): delete every record under the prefix, so an
//!   earlier run's dead nodes, whose keys outlive them by a TTL, are not taken for this
//!   run's nodes of the same ids.
//! - **watch**: read the prefix at revision R, report its members as `Joined`, then watch
//!   the prefix from R+1 with previous values. A deletion whose previous value says
//!   `leaving` is a `Left`; any other deletion is a lease expiry, a `Died`.
//!
//! Invariant: a watch reports at most one `Left`/`Died` per `Joined`, only for nodes it
//! reported joined, and ends with [`MembershipBackendError::WatchLost`] rather than go on
//! after a gap (compaction, broken stream). Every etcd call has a deadline.
//!
//! Times in `Died` events are milliseconds since this backend was connected; etcd does not
//! say when a lease was last renewed, so `last_seen_ms` is `detected_at_ms` minus the TTL
//! etcd granted that node's lease (recorded in its value): when etcd expires a lease, its
//! last renewal was about one TTL before. etcd enforces a minimum TTL (1.5 × its election
//! timeout: 2 s, rounded up, with default settings), so shorter lease timeouts are raised.

use crate::error::MembershipBackendError;
use crate::lease::{LeaseHandle, LostSender};
use crate::watch::{MembershipWatch, WatchItem};
use crate::{BoxFuture, MembershipBackend};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, KeyValue,
    PutOptions, Txn, TxnOp, WatchOptions,
};
use harp_core::{MemberInfo, MembershipConfig, MembershipEvent, NodeId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Deadlines for talking to etcd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EtcdOptions {
    /// Deadline of connecting and of the first request that proves etcd answers.
    pub connect_timeout_ms: u64,
    /// Deadline of every other request.
    pub request_timeout_ms: u64,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 3000,
            request_timeout_ms: 2000,
        }
    }
}

/// The value stored under a member's key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct MemberRecord {
    info: MemberInfo,
    leaving: bool,
    /// The TTL etcd granted the node's lease (it may exceed the one asked for).
    #[serde(default)]
    ttl_s: i64,
}

/// A membership backend on an etcd server. Cheap to clone.
#[derive(Clone)]
pub struct EtcdMembership {
    client: Client,
    endpoint: String,
    job: String,
    config: MembershipConfig,
    options: EtcdOptions,
    ttl_s: i64,
    epoch: Instant,
    malformed: Arc<AtomicU64>,
}

impl std::fmt::Debug for EtcdMembership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdMembership")
            .field("endpoint", &self.endpoint)
            .field("job", &self.job)
            .field("ttl_s", &self.ttl_s)
            .finish_non_exhaustive()
    }
}

impl EtcdMembership {
    /// Connects to etcd at `endpoint` (`http://HOST:PORT`) for job `job`, and checks that it
    /// answers. Fails with [`MembershipBackendError::EtcdUnavailable`] within
    /// `connect_timeout_ms` when it does not.
    pub async fn connect(
        endpoint: &str,
        job: &str,
        config: MembershipConfig,
        options: EtcdOptions,
    ) -> Result<Self, MembershipBackendError> {
        config.validate()?;
        validate_endpoint(endpoint)?;
        if job.is_empty() || job.contains('/') {
            return Err(MembershipBackendError::InvalidJob {
                job: job.to_string(),
            });
        }
        let connect_timeout = Duration::from_millis(options.connect_timeout_ms);
        let request_timeout = Duration::from_millis(options.request_timeout_ms);
        let connect_options = ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_timeout(request_timeout)
            // Notice a dead connection (e.g. etcd killed) within a few seconds.
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        let unavailable = |message: String| MembershipBackendError::EtcdUnavailable {
            endpoint: endpoint.to_string(),
            message,
        };
        let no_answer = || {
            unavailable(format!(
                "no answer within {} ms",
                options.connect_timeout_ms
            ))
        };
        let mut client = tokio::time::timeout(
            connect_timeout,
            Client::connect([endpoint], Some(connect_options)),
        )
        .await
        .map_err(|_| no_answer())?
        .map_err(|e| unavailable(e.to_string()))?;
        // The channel connects lazily: one request proves etcd is there.
        tokio::time::timeout(connect_timeout, client.status())
            .await
            .map_err(|_| no_answer())?
            .map_err(|e| unavailable(e.to_string()))?;
        let ttl_s = i64::try_from(config.lease_timeout_ms.div_ceil(1000))
            .unwrap_or(i64::MAX)
            .max(1);
        Ok(Self {
            client,
            endpoint: endpoint.to_string(),
            job: job.to_string(),
            config,
            options,
            ttl_s,
            epoch: Instant::now(),
            malformed: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The endpoint this backend talks to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The TTL asked for each node's lease, in seconds.
    pub fn lease_ttl_s(&self) -> i64 {
        self.ttl_s
    }

    /// Milliseconds since this backend connected: the clock of its `Died` events.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Member records under the job's prefix that could not be read (bad key or value),
    /// skipped and counted.
    pub fn malformed_records(&self) -> u64 {
        self.malformed.load(Ordering::Relaxed)
    }

    /// `/harp/jobs/<job>/members/`
    pub fn members_prefix(&self) -> String {
        format!("/harp/jobs/{}/members/", self.job)
    }

    /// `/harp/jobs/<job>/members/<node id>`
    pub fn member_key(&self, node: NodeId) -> String {
        format!("{}{}", self.members_prefix(), node.0)
    }

    fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.options.request_timeout_ms)
    }

    /// The job this backend's keys belong to (`/harp/jobs/<job>/...`).
    pub fn job(&self) -> &str {
        &self.job
    }

    /// A handle on the etcd client, for the job's other keys (e.g. `desired_nodes`).
    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    /// Removes every member record under the job's prefix and returns how many there were.
    /// A master starting a run of the job calls it before its [`watch`](MembershipBackend::watch):
    /// the records of an earlier run's nodes that died without leaving stay until their
    /// leases expire, a TTL later, and would otherwise be reported as this run's nodes, whose
    /// ids they share, dying (and block those ids' registration meanwhile).
    pub async fn clear_members(&self) -> Result<u64, MembershipBackendError> {
        let mut client = self.client.clone();
        let options = DeleteOptions::new().with_prefix();
        let deleted = self
            .call(
                "clear members",
                client.delete(self.members_prefix(), Some(options)),
            )
            .await?;
        Ok(u64::try_from(deleted.deleted()).unwrap_or(0))
    }

    /// Runs one etcd call under the request deadline, mapping its errors.
    pub(crate) async fn call<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, MembershipBackendError> {
        with_deadline(&self.endpoint, operation, self.request_timeout(), call).await
    }

    fn parse_node(&self, key: &[u8]) -> Option<NodeId> {
        let key = std::str::from_utf8(key).ok()?;
        let id = key.strip_prefix(&self.members_prefix())?;
        // Canonical decimal only, so one node has exactly one key.
        let n: u32 = id.parse().ok()?;
        (n.to_string() == id).then_some(NodeId(n))
    }

    /// Reads a member key-value pair; counts and skips one that is not a member record.
    fn parse_member(&self, kv: &KeyValue) -> Option<(NodeId, MemberRecord)> {
        let parsed = self.parse_node(kv.key()).and_then(|node| {
            serde_json::from_slice::<MemberRecord>(kv.value())
                .ok()
                .map(|r| (node, r))
        });
        if parsed.is_none() {
            self.malformed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(key = %String::from_utf8_lossy(kv.key()), "skipping malformed membership record");
        }
        parsed
    }

    fn encode(
        info: &MemberInfo,
        leaving: bool,
        ttl_s: i64,
    ) -> Result<Vec<u8>, MembershipBackendError> {
        serde_json::to_vec(&MemberRecord {
            info: info.clone(),
            leaving,
            ttl_s,
        })
        .map_err(|e| MembershipBackendError::Etcd {
            operation: "encode member record",
            message: e.to_string(),
        })
    }

    /// Marks `node`'s record as leaving, then revokes its lease (deleting the key), so a
    /// watcher reports `Left`. `expected_lease` guards against touching a newer
    /// registration of the same id.
    async fn leave_with(
        &self,
        node: NodeId,
        expected_lease: Option<i64>,
    ) -> Result<(), MembershipBackendError> {
        let key = self.member_key(node);
        let mut client = self.client.clone();
        let current = self
            .call("get member", client.get(key.clone(), None))
            .await?;
        let Some(kv) = current.kvs().first() else {
            return Err(MembershipBackendError::UnknownNode(node));
        };
        let lease = kv.lease();
        if expected_lease.is_some_and(|l| l != lease) {
            return Err(MembershipBackendError::LeaseLost(node));
        }
        let record: MemberRecord =
            serde_json::from_slice(kv.value()).map_err(|e| MembershipBackendError::Etcd {
                operation: "read member record",
                message: e.to_string(),
            })?;
        let value = Self::encode(&record.info, true, record.ttl_s)?;
        let txn = Txn::new()
            .when([Compare::mod_revision(
                key.clone(),
                CompareOp::Equal,
                kv.mod_revision(),
            )])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let marked = self.call("mark leaving", client.txn(txn)).await?;
        if !marked.succeeded() {
            // The record changed under us: it expired or was re-registered meanwhile.
            return Err(MembershipBackendError::LeaseLost(node));
        }
        self.call("revoke lease", client.lease_revoke(lease))
            .await?;
        Ok(())
    }
}

impl MembershipBackend for EtcdMembership {
    fn config(&self) -> &MembershipConfig {
        &self.config
    }

    fn register(
        &self,
        node: NodeId,
        info: MemberInfo,
    ) -> BoxFuture<'_, Result<LeaseHandle, MembershipBackendError>> {
        Box::pin(async move {
            let mut client = self.client.clone();
            let grant = self
                .call("grant lease", client.lease_grant(self.ttl_s, None))
                .await?;
            let (lease, ttl_s) = (grant.id(), grant.ttl().max(1));
            if ttl_s != self.ttl_s {
                tracing::info!(%node, asked_s = self.ttl_s, granted_s = ttl_s, "etcd changed the lease TTL");
            }
            let key = self.member_key(node);
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key,
                    Self::encode(&info, false, ttl_s)?,
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let created = match self.call("register member", client.txn(txn)).await {
                Ok(response) => response.succeeded(),
                Err(err) => {
                    let _ = self.call("revoke lease", client.lease_revoke(lease)).await;
                    return Err(err);
                }
            };
            if !created {
                // Best effort: an unused lease also expires by itself.
                let _ = self.call("revoke lease", client.lease_revoke(lease)).await;
                return Err(MembershipBackendError::AlreadyRegistered(node));
            }
            let keeper = self.clone();
            let leaver = self.clone();
            Ok(LeaseHandle::from_task(
                node,
                move |lost| keep_alive(keeper, node, lease, ttl_s, lost),
                move || async move { leaver.leave_with(node, Some(lease)).await },
            ))
        })
    }

    fn watch(&self) -> BoxFuture<'_, Result<MembershipWatch, MembershipBackendError>> {
        Box::pin(async move {
            let mut client = self.client.clone();
            let prefix = self.members_prefix();
            let snapshot = self
                .call(
                    "list members",
                    client.get(prefix.clone(), Some(GetOptions::new().with_prefix())),
                )
                .await?;
            let revision = snapshot.header().map(|h| h.revision()).unwrap_or(0);
            let (tx, rx) = mpsc::unbounded_channel();
            let mut known = BTreeMap::new();
            for kv in snapshot.kvs() {
                if let Some((node, record)) = self.parse_member(kv) {
                    if !record.leaving {
                        known.insert(node, record);
                    }
                }
            }
            for (node, record) in &known {
                // The receiver is still in hand, so this send cannot fail.
                let _ = tx.send(Ok(MembershipEvent::Joined {
                    node: *node,
                    info: record.info.clone(),
                }));
            }
            let options = WatchOptions::new()
                .with_prefix()
                .with_prev_key()
                .with_start_revision(revision + 1);
            let stream = self
                .call("watch members", client.watch(prefix, Some(options)))
                .await?;
            tokio::spawn(watch_loop(self.clone(), stream, known, tx));
            Ok(MembershipWatch::new(rx))
        })
    }

    fn members(&self) -> BoxFuture<'_, Result<Vec<(NodeId, MemberInfo)>, MembershipBackendError>> {
        Box::pin(async move {
            let mut client = self.client.clone();
            let prefix = self.members_prefix();
            let got = self
                .call(
                    "list members",
                    client.get(prefix, Some(GetOptions::new().with_prefix())),
                )
                .await?;
            let mut members: Vec<(NodeId, MemberInfo)> = got
                .kvs()
                .iter()
                .filter_map(|kv| self.parse_member(kv))
                .filter(|(_, record)| !record.leaving)
                .map(|(node, record)| (node, record.info))
                .collect();
            members.sort_by_key(|(node, _)| *node);
            Ok(members)
        })
    }

    fn revoke(&self, node: NodeId) -> BoxFuture<'_, Result<(), MembershipBackendError>> {
        Box::pin(self.leave_with(node, None))
    }
}

/// Checks that `endpoint` is `http://HOST:PORT` (no TLS yet, no path).
fn validate_endpoint(endpoint: &str) -> Result<(), MembershipBackendError> {
    let invalid = |message: &str| MembershipBackendError::InvalidEndpoint {
        endpoint: endpoint.to_string(),
        message: message.to_string(),
    };
    let rest = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| invalid("must start with http://"))?;
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| invalid("must be http://HOST:PORT"))?;
    if host.is_empty() || host.contains('/') {
        return Err(invalid("must be http://HOST:PORT"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(invalid("port must be a number in 1..=65535")),
    }
}

/// Runs `call` under `deadline`, mapping a missed deadline and etcd's errors to ours.
async fn with_deadline<T>(
    endpoint: &str,
    operation: &'static str,
    deadline: Duration,
    call: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, MembershipBackendError> {
    match tokio::time::timeout(deadline, call).await {
        Err(_) => Err(MembershipBackendError::DeadlineExceeded {
            operation,
            deadline_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
        }),
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(map_etcd_error(endpoint, operation, err)),
    }
}

fn map_etcd_error(
    endpoint: &str,
    operation: &'static str,
    err: etcd_client::Error,
) -> MembershipBackendError {
    use etcd_client::Error as E;
    let unavailable = match &err {
        E::TransportError(_) | E::IoError(_) => true,
        E::GRpcStatus(status) => matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::Cancelled
        ),
        _ => false,
    };
    if unavailable {
        MembershipBackendError::EtcdUnavailable {
            endpoint: endpoint.to_string(),
            message: err.to_string(),
        }
    } else {
        MembershipBackendError::Etcd {
            operation,
            message: err.to_string(),
        }
    }
}

/// Renews `lease` every third of its TTL until the lease is gone. A renewal that fails is
/// retried (reopening the keep-alive stream); once the lease can no longer be alive (etcd
/// says TTL 0, or no renewal succeeded for a whole TTL), the lease is reported lost.
async fn keep_alive(
    backend: EtcdMembership,
    node: NodeId,
    lease: i64,
    ttl_s: i64,
    lost: LostSender,
) {
    let ttl = Duration::from_secs(u64::try_from(ttl_s).unwrap_or(1));
    let interval = (ttl / 3).max(Duration::from_millis(100));
    let mut lapses_at = Instant::now() + ttl;
    let mut stream = None;
    loop {
        if stream.is_none() {
            let mut client = backend.client.clone();
            match backend
                .call("open keep-alive", client.lease_keep_alive(lease))
                .await
            {
                Ok(opened) => stream = Some(opened),
                Err(err) => tracing::warn!(%node, %err, "cannot open lease keep-alive; retrying"),
            }
        }
        if let Some((keeper, responses)) = stream.as_mut() {
            let renewal = backend.call("keep lease alive", async {
                keeper.keep_alive().await?;
                responses.message().await
            });
            match renewal.await {
                Ok(Some(response)) if response.ttl() > 0 => {
                    lapses_at = Instant::now() + Duration::from_secs(response.ttl().unsigned_abs());
                }
                Ok(Some(_)) => return lost.lost(MembershipBackendError::LeaseLost(node)),
                Ok(None) => stream = None,
                Err(err) => {
                    tracing::warn!(%node, %err, "lease keep-alive failed; retrying");
                    stream = None;
                }
            }
        }
        if Instant::now() >= lapses_at {
            return lost.lost(MembershipBackendError::LeaseLost(node));
        }
        tokio::time::sleep(interval).await;
    }
}

/// Turns etcd watch responses into membership events for one watcher, until the watcher
/// goes away or the watch breaks.
async fn watch_loop(
    backend: EtcdMembership,
    mut stream: etcd_client::WatchStream,
    mut known: BTreeMap<NodeId, MemberRecord>,
    tx: mpsc::UnboundedSender<WatchItem>,
) {
    let mut leaving: BTreeSet<NodeId> = BTreeSet::new();
    loop {
        let response = tokio::select! {
            response = stream.message() => response,
            () = tx.closed() => return,
        };
        let response = match response {
            Ok(Some(response)) => response,
            Ok(None) => {
                let _ = tx.send(Err(MembershipBackendError::WatchLost(
                    "etcd closed the watch".into(),
                )));
                return;
            }
            Err(err) => {
                let message = format!("{}: {err}", backend.endpoint);
                let _ = tx.send(Err(MembershipBackendError::WatchLost(message)));
                return;
            }
        };
        if response.canceled() || response.compact_revision() > 0 {
            let reason = format!(
                "etcd cancelled the watch (compacted at revision {}): {}",
                response.compact_revision(),
                response.cancel_reason()
            );
            let _ = tx.send(Err(MembershipBackendError::WatchLost(reason)));
            return;
        }
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let event = match event.event_type() {
                EventType::Put => {
                    let Some((node, record)) = backend.parse_member(kv) else {
                        continue;
                    };
                    if record.leaving {
                        leaving.insert(node);
                        continue;
                    }
                    if known.contains_key(&node) {
                        continue;
                    }
                    let info = record.info.clone();
                    known.insert(node, record);
                    MembershipEvent::Joined { node, info }
                }
                EventType::Delete => {
                    let Some(node) = backend.parse_node(kv.key()) else {
                        continue;
                    };
                    let marked = leaving.remove(&node);
                    let Some(record) = known.remove(&node) else {
                        continue;
                    };
                    let info = record.info;
                    let prev_leaving = event
                        .prev_kv()
                        .and_then(|prev| serde_json::from_slice::<MemberRecord>(prev.value()).ok())
                        .is_some_and(|r| r.leaving);
                    if marked || prev_leaving {
                        MembershipEvent::Left { node, info }
                    } else {
                        let detected_at_ms = backend.now_ms();
                        let ttl_s = if record.ttl_s > 0 {
                            record.ttl_s
                        } else {
                            backend.ttl_s
                        };
                        let ttl_ms = ttl_s.unsigned_abs().saturating_mul(1000);
                        MembershipEvent::Died {
                            node,
                            info,
                            last_seen_ms: detected_at_ms.saturating_sub(ttl_ms),
                            detected_at_ms,
                        }
                    }
                }
            };
            if tx.send(Ok(event)).is_err() {
                return;
            }
        }
    }
}
