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
use tokio::sync::oneshot;

/// Everything a micro-task on this node touches when it reads or updates parameters.
pub(crate) struct ParamStore {
    pub(crate) tables: Arc<TableSet>,
    cache: ParamCache,
    log: DashMap<ShardId, UpdateLog>,
    routing: RwLock<Routing>,
    num_shards: u32,
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
            counters: NodeCounters::default(),
        }
    }

    /// Rows valid for a task of `version` (from the cache or fetched).
    pub(crate) async fn read(
        &self,
        keys: &[ParamKey],
        version: Version,
    ) -> Result<Vec<Arc<RowData>>, HarpError> {
        self.cache
            .read(keys, version, &self.routing, &self.counters)
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
        for (server, rx) in replies {
            match rx.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    NodeCounters::add(&self.counters.updates_rejected, 1);
                    return Err(e);
                }
                Err(_) => return Err(HarpError::ServerUnreachable(server)),
            }
        }
        NodeCounters::add(&self.counters.flushes, 1);
        NodeCounters::add(&self.counters.rows_flushed, rows as u64);
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
