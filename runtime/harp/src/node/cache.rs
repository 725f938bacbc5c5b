//! The node's parameter cache (Litz §4.4 "Parameter Cache Synchronization").
//!
//! One cache per node, shared by its workers. An entry is tagged with the version of the task
//! that fetched it; a task may use it iff `task.version <= entry.version`
//! ([`harp_core::cached_value_usable`]). A task that must fetch first looks for a fetch of the
//! same key already in flight with a version at least its own and waits on it instead of
//! sending a second request (tasks of one SSP iteration share a version, so they share
//! fetches). Requests to different servers go out at once and are awaited together.

use super::stats::NodeCounters;
use super::Routing;
use crate::error::HarpError;
use crate::server::ServerMsg;
use dashmap::DashMap;
use futures::future::{BoxFuture, FutureExt, Shared};
use harp_core::{
    cached_value_usable, should_replace_cached, BuildKeyHasher, ParamKey, RowData, ServerId,
    Version,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::oneshot;

/// Why a fetch failed (cloneable, so every waiter of a shared fetch gets it).
#[derive(Clone, Debug)]
pub(crate) struct FetchFailed {
    server: ServerId,
    why: FetchFailure,
}

#[derive(Clone, Debug)]
enum FetchFailure {
    Unreachable,
    Refused(String),
    TimedOut(Duration),
}

impl From<FetchFailed> for HarpError {
    fn from(f: FetchFailed) -> Self {
        match f.why {
            FetchFailure::Unreachable => HarpError::ServerUnreachable(f.server),
            FetchFailure::Refused(message) => {
                HarpError::InvalidConfig(format!("{} refused a read: {message}", f.server))
            }
            FetchFailure::TimedOut(after) => HarpError::RequestTimedOut {
                server: f.server,
                request: "read",
                after_ms: after.as_millis() as u64,
            },
        }
    }
}

type FetchResult = Result<Arc<Vec<Arc<RowData>>>, FetchFailed>;
type SharedFetch = Shared<BoxFuture<'static, FetchResult>>;

#[derive(Clone)]
struct CachedRow {
    version: Version,
    row: Arc<RowData>,
}

#[derive(Clone)]
struct PendingFetch {
    version: Version,
    fetch_id: u64,
    index: usize,
    fetch: SharedFetch,
}

/// Versioned rows and fetches in flight.
#[derive(Default)]
pub(crate) struct ParamCache {
    entries: Arc<DashMap<ParamKey, CachedRow, BuildKeyHasher>>,
    pending: Arc<DashMap<ParamKey, PendingFetch, BuildKeyHasher>>,
    next_fetch_id: AtomicU64,
}

enum Slot {
    Ready(Arc<RowData>),
    Wait(SharedFetch, usize),
}

impl ParamCache {
    /// Rows for `keys` valid for a task of `version`, fetching what the cache cannot serve.
    pub(crate) async fn read(
        &self,
        keys: &[ParamKey],
        version: Version,
        routing: &RwLock<Routing>,
        counters: &NodeCounters,
        deadline: Duration,
    ) -> Result<Vec<Arc<RowData>>, HarpError> {
        let mut slots: Vec<Option<Slot>> = Vec::with_capacity(keys.len());
        let mut missing: BTreeMap<ServerId, Vec<usize>> = BTreeMap::new();
        let (mut hits, mut waits) = (0u64, 0u64);
        {
            let routing = routing.read().unwrap_or_else(|p| p.into_inner());
            for (i, key) in keys.iter().enumerate() {
                if let Some(e) = self.entries.get(key) {
                    if cached_value_usable(version, e.version) {
                        hits += 1;
                        slots.push(Some(Slot::Ready(e.row.clone())));
                        continue;
                    }
                }
                if let Some(p) = self.pending.get(key) {
                    if cached_value_usable(version, p.version) {
                        waits += 1;
                        slots.push(Some(Slot::Wait(p.fetch.clone(), p.index)));
                        continue;
                    }
                }
                slots.push(None);
                missing.entry(routing.route(*key).0).or_default().push(i);
            }
            for (server, idxs) in &missing {
                let fetch_keys: Vec<ParamKey> = idxs.iter().map(|&i| keys[i]).collect();
                let fetch =
                    self.start_fetch(*server, fetch_keys.clone(), version, &routing, deadline);
                let fetch_id = self.next_fetch_id.fetch_add(1, Ordering::Relaxed);
                for (j, &i) in idxs.iter().enumerate() {
                    let pending = PendingFetch {
                        version,
                        fetch_id,
                        index: j,
                        fetch: fetch.clone(),
                    };
                    self.pending
                        .entry(keys[i])
                        .and_modify(|p| {
                            if should_replace_cached(p.version, version) {
                                *p = pending.clone();
                            }
                        })
                        .or_insert_with(|| pending.clone());
                    slots[i] = Some(Slot::Wait(fetch.clone(), j));
                }
                self.clean_up_after(fetch, fetch_keys, fetch_id);
            }
        }
        let misses: u64 = missing.values().map(|v| v.len() as u64).sum();
        NodeCounters::add(&counters.cache_hits, hits);
        NodeCounters::add(&counters.fetch_waits, waits);
        NodeCounters::add(&counters.cache_misses, misses);
        NodeCounters::add(&counters.rows_fetched, misses);

        let mut out = Vec::with_capacity(keys.len());
        for slot in slots {
            match slot {
                Some(Slot::Ready(row)) => out.push(row),
                Some(Slot::Wait(fetch, index)) => {
                    let rows = fetch.await.map_err(|f| {
                        if matches!(f.why, FetchFailure::TimedOut(_)) {
                            NodeCounters::add(&counters.requests_timed_out, 1);
                        }
                        HarpError::from(f)
                    })?;
                    match rows.get(index) {
                        Some(row) => out.push(row.clone()),
                        None => {
                            return Err(HarpError::InvalidConfig(
                                "short reply from a server".into(),
                            ))
                        }
                    }
                }
                // Every slot is filled: hits and waits above, misses in the fetch loop.
                None => return Err(HarpError::InvalidConfig("cache slot left empty".into())),
            }
        }
        Ok(out)
    }

    /// Sends the request now and returns a shared future for its reply, which also fills the
    /// cache with the fetched rows tagged `version`.
    fn start_fetch(
        &self,
        server: ServerId,
        keys: Vec<ParamKey>,
        version: Version,
        routing: &Routing,
        deadline: Duration,
    ) -> SharedFetch {
        let (tx, rx) = oneshot::channel();
        let sent = match routing.servers.get(&server) {
            Some(actor) => actor
                .send_message(ServerMsg::Get {
                    keys: keys.clone(),
                    reply: tx,
                })
                .is_ok(),
            None => false,
        };
        let entries = self.entries.clone();
        async move {
            let failed = |why| FetchFailed { server, why };
            if !sent {
                return Err(failed(FetchFailure::Unreachable));
            }
            let rows = match tokio::time::timeout(deadline, rx).await {
                Ok(Ok(Ok(rows))) => rows,
                Ok(Ok(Err(e))) => return Err(failed(FetchFailure::Refused(e.to_string()))),
                Ok(Err(_)) => return Err(failed(FetchFailure::Unreachable)),
                Err(_) => return Err(failed(FetchFailure::TimedOut(deadline))),
            };
            for (key, row) in keys.iter().zip(&rows) {
                let fresh = CachedRow {
                    version,
                    row: row.clone(),
                };
                entries
                    .entry(*key)
                    .and_modify(|e| {
                        if should_replace_cached(e.version, version) {
                            *e = fresh.clone();
                        }
                    })
                    .or_insert_with(|| fresh.clone());
            }
            Ok(Arc::new(rows))
        }
        .boxed()
        .shared()
    }

    /// Removes the pending entries of a fetch once it resolved (unless a newer fetch took
    /// their place).
    fn clean_up_after(&self, fetch: SharedFetch, keys: Vec<ParamKey>, fetch_id: u64) {
        let pending = self.pending.clone();
        tokio::spawn(async move {
            let _ = fetch.await;
            for key in keys {
                pending.remove_if(&key, |_, p| p.fetch_id == fetch_id);
            }
        });
    }

    /// Forgets the fetches of `keys` that failed, so a read retried after a reroute sends a
    /// new request instead of waiting on the failed one again (the clean-up task that
    /// removes them may not have run yet).
    pub(crate) fn forget_failed_fetches(&self, keys: &[ParamKey]) {
        for key in keys {
            self.pending
                .remove_if(key, |_, p| matches!(p.fetch.peek(), Some(Err(_))));
        }
    }

    /// Rows currently cached (any version).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}
