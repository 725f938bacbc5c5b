//! A node's parameter plumbing, shared by every worker on the node: the parameter cache, the
//! update log, and the routing of reads and flushes to servers.
//!
//! The update log is a concurrent map from shard to a [`harp_core::UpdateLog`], so tasks that
//! update different shards never contend, and a flush drains it shard by shard.

mod cache;
mod routing;
mod stats;

pub(crate) use routing::Routing;
pub use stats::NodeStats;

use crate::error::HarpError;
use crate::server::ServerMsg;
use crate::table::TableSet;
use cache::ParamCache;
use dashmap::DashMap;
use harp_core::{shard_of, ParamKey, RowData, ServerId, ShardId, UpdateLog, Version};
use stats::NodeCounters;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::oneshot;

/// How long a read or a flush waits for a server's answer before the task fails with
/// [`HarpError::RequestTimedOut`]. Servers answer at once (they never wait on versions), so
/// only a stuck or overloaded peer runs into it; a dead one is noticed sooner by its lease.
pub(crate) const DEFAULT_REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// Everything a micro-task on this node touches when it reads or updates parameters.
pub(crate) struct ParamStore {
    pub(crate) tables: Arc<TableSet>,
    cache: ParamCache,
    log: DashMap<ShardId, UpdateLog>,
    routing: RwLock<Routing>,
    num_shards: u32,
    request_deadline: Duration,
    pub(crate) counters: NodeCounters,
}

impl ParamStore {
    pub(crate) fn new(tables: Arc<TableSet>, routing: Routing) -> Self {
        let num_shards = routing.shard_map.num_shards();
        Self {
            tables,
            cache: ParamCache::default(),
            log: DashMap::new(),
            routing: RwLock::new(routing),
            num_shards,
            request_deadline: DEFAULT_REQUEST_DEADLINE,
            counters: NodeCounters::default(),
        }
    }

    /// The same store with another deadline for server requests.
    #[cfg(test)]
    pub(crate) fn with_request_deadline(mut self, deadline: Duration) -> Self {
        self.request_deadline = deadline;
        self
    }

    /// Rows valid for a task of `version` (from the cache or fetched).
    pub(crate) async fn read(
        &self,
        keys: &[ParamKey],
        version: Version,
    ) -> Result<Vec<Arc<RowData>>, HarpError> {
        self.cache
            .read(
                keys,
                version,
                &self.routing,
                &self.counters,
                self.request_deadline,
            )
            .await
    }

    /// Adds an already validated delta into the update log.
    pub(crate) fn record(&self, key: ParamKey, delta: RowData) -> Result<(), HarpError> {
        let shard = shard_of(key, self.num_shards);
        let result = self.log.entry(shard).or_default().record_owned(key, delta);
        match result {
            Ok(()) => NodeCounters::add(&self.counters.updates_recorded, 1),
            Err(_) => NodeCounters::add(&self.counters.updates_rejected, 1),
        }
        Ok(result?)
    }

    /// Takes everything out of the update log, grouped by the server of each shard.
    pub(crate) fn drain_log(&self) -> BTreeMap<ServerId, Vec<(ParamKey, RowData)>> {
        let shards: Vec<ShardId> = self.log.iter().map(|e| *e.key()).collect();
        let routing = self.routing.read().unwrap_or_else(|p| p.into_inner());
        let mut batches: BTreeMap<ServerId, Vec<(ParamKey, RowData)>> = BTreeMap::new();
        for shard in shards {
            let drained = match self.log.get_mut(&shard) {
                Some(mut log) => log.drain(),
                None => continue,
            };
            if drained.is_empty() {
                continue;
            }
            // shard ids come from shard_of over the same shard count as the map.
            let server = routing.shard_map.server_of(shard).unwrap_or(ServerId(0));
            batches.entry(server).or_default().extend(drained);
        }
        batches
    }

    /// Sends every batch to its server and waits until all are applied.
    pub(crate) async fn apply(
        &self,
        batches: BTreeMap<ServerId, Vec<(ParamKey, RowData)>>,
    ) -> Result<(), HarpError> {
        let mut replies = Vec::with_capacity(batches.len());
        let rows: usize = batches.values().map(Vec::len).sum();
        {
            let routing = self.routing.read().unwrap_or_else(|p| p.into_inner());
            for (server, updates) in batches {
                let actor = routing
                    .servers
                    .get(&server)
                    .ok_or(HarpError::ServerUnreachable(server))?;
                let (tx, rx) = oneshot::channel();
                actor
                    .send_message(ServerMsg::Apply { updates, reply: tx })
                    .map_err(|_| HarpError::ServerUnreachable(server))?;
                replies.push((server, rx));
            }
        }
        // One deadline for the whole flush: the replies arrive in parallel.
        let deadline = tokio::time::Instant::now() + self.request_deadline;
        for (server, rx) in replies {
            match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    NodeCounters::add(&self.counters.updates_rejected, 1);
                    return Err(e);
                }
                Ok(Err(_)) => return Err(HarpError::ServerUnreachable(server)),
                Err(_) => {
                    NodeCounters::add(&self.counters.requests_timed_out, 1);
                    return Err(HarpError::RequestTimedOut {
                        server,
                        request: "flush",
                        after_ms: self.request_deadline.as_millis() as u64,
                    });
                }
            }
        }
        NodeCounters::add(&self.counters.flushes, 1);
        NodeCounters::add(&self.counters.rows_flushed, rows as u64);
        Ok(())
    }

    /// A server joined: reads and flushes may be routed to it.
    pub(crate) fn add_server(&self, id: ServerId, actor: ractor::ActorRef<ServerMsg>) {
        let mut routing = self.routing.write().unwrap_or_else(|p| p.into_inner());
        routing.servers.insert(id, actor);
    }

    /// `shard` moved to `server`: send its traffic there directly (until now the old owner
    /// forwarded it).
    pub(crate) fn reroute(&self, shard: ShardId, server: ServerId) -> Result<(), HarpError> {
        let mut routing = self.routing.write().unwrap_or_else(|p| p.into_inner());
        routing.shard_map.assign(shard, server)?;
        Ok(())
    }

    pub(crate) fn stats(&self) -> NodeStats {
        self.counters.snapshot()
    }

    /// Rows currently cached on this node.
    pub(crate) fn cached_rows(&self) -> usize {
        self.cache.len()
    }

    /// Every server's address (for dumps and shutdown).
    pub(crate) fn servers(&self) -> Vec<(ServerId, ractor::ActorRef<ServerMsg>)> {
        let routing = self.routing.read().unwrap_or_else(|p| p.into_inner());
        routing
            .servers
            .iter()
            .map(|(id, a)| (*id, a.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{Init, UpdateRule};
    use harp_core::ShardMap;
    use ractor::{Actor, ActorProcessingErr, ActorRef};

    /// A server that takes every request and never answers (a live but stuck peer).
    struct SilentServer;

    impl Actor for SilentServer {
        type Msg = ServerMsg;
        type State = Vec<ServerMsg>;
        type Arguments = ();

        async fn pre_start(
            &self,
            _myself: ActorRef<ServerMsg>,
            _: (),
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(Vec::new())
        }

        async fn handle(
            &self,
            _myself: ActorRef<ServerMsg>,
            msg: ServerMsg,
            held: &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            held.push(msg); // keeps the reply senders alive, so no one sees a hang-up
            Ok(())
        }
    }

    async fn store_with_silent_server() -> (ParamStore, ParamKey) {
        let mut tables = TableSet::new();
        let table = tables
            .dense_f32("w", 4, UpdateRule::Add, Init::Zeros)
            .unwrap();
        let (server, _) = Actor::spawn(None, SilentServer, ()).await.unwrap();
        let id = ServerId(0);
        let routing = Routing {
            shard_map: ShardMap::round_robin(4, &[id]).unwrap(),
            servers: [(id, server)].into_iter().collect(),
        };
        let store = ParamStore::new(Arc::new(tables), routing)
            .with_request_deadline(Duration::from_millis(100));
        (store, ParamKey::new(table.id(), 0))
    }

    #[tokio::test]
    async fn a_read_from_a_stuck_server_fails_at_the_deadline() {
        let (store, key) = store_with_silent_server().await;
        let err = store.read(&[key], Version(1)).await.unwrap_err();
        assert!(
            matches!(
                err,
                HarpError::RequestTimedOut {
                    request: "read",
                    after_ms: 100,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(store.stats().requests_timed_out, 1);
        assert!(err
            .to_string()
            .contains("did not answer a read within 100 ms"));
    }

    #[tokio::test]
    async fn a_flush_to_a_stuck_server_fails_at_the_deadline() {
        let (store, key) = store_with_silent_server().await;
        store.record(key, RowData::F32(vec![1.0; 4])).unwrap();
        let err = store.apply(store.drain_log()).await.unwrap_err();
        assert!(
            matches!(
                err,
                HarpError::RequestTimedOut {
                    request: "flush",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(store.stats().requests_timed_out, 1);
        assert_eq!(store.stats().flushes, 0);
    }
}
