//! The node's parameter cache (Litz §4.4 "Parameter Cache Synchronization").
//!
//! One cache per node, shared by its workers. An entry is tagged with the version of the task
//! that fetched it; a task may use it iff `task.version <= entry.version`
//! ([`harp_core::cached_value_usable`]). A task that must fetch first looks for a fetch of the
//! same key already in flight with a version at least its own and waits on it instead of
//! sending a second request (tasks of one SSP iteration share a version, so they share
//! fetches). Requests to different servers go out at once and are awaited together.
//!
//! A key's cached row and its fetch in flight live in one map entry ([`KeyState`]), so a read
//! looks each key up once (twice on a miss: once more to note the fetch) and a fetch's reply
//! stores each row and retires the fetch in one more. The map is split into shards
//! ([`key_shards`]) and a read, or a reply, locks each shard once for all its keys. A fetch
//! retires itself when it resolves, failed or not, so a read retried after a failure never
//! waits on the failed fetch again. Every read awaits each distinct fetch once, not once per
//! row. A read hands each row to a [`Visitor`]; [`KeptRows`] is the one that keeps them.

mod key_shards;

use super::stats::NodeCounters;
use super::Routing;
use crate::error::HarpError;
use crate::server::ServerMsg;
use futures::future::{self, BoxFuture, FutureExt, Shared};
use harp_core::{
    cached_value_usable, should_replace_cached, BuildKeyHasher, ParamKey, RowData, ServerId,
    Version,
};
use key_shards::KeyShards;
use std::collections::{BTreeMap, HashMap};
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
type Entries = KeyShards<KeyState>;

#[derive(Clone)]
struct CachedRow {
    version: Version,
    row: Arc<RowData>,
}

/// A fetch in flight: its reply carries the key's row at `index`.
#[derive(Clone)]
struct PendingFetch {
    version: Version,
    fetch_id: u64,
    index: usize,
    fetch: SharedFetch,
}

/// What the cache knows of one key: the newest row fetched and the newest fetch in flight.
#[derive(Default)]
struct KeyState {
    cached: Option<CachedRow>,
    pending: Option<PendingFetch>,
}

impl KeyState {
    /// Forgets fetch `fetch_id` if it is still the one noted (a newer fetch that took its
    /// place stays).
    fn retire(&mut self, fetch_id: u64) {
        if self
            .pending
            .as_ref()
            .is_some_and(|p| p.fetch_id == fetch_id)
        {
            self.pending = None;
        }
    }
}

/// Versioned rows and fetches in flight.
#[derive(Default)]
pub(crate) struct ParamCache {
    entries: Arc<Entries>,
    next_fetch_id: AtomicU64,
}

/// How a read gets one key's row.
enum Slot {
    /// Served from the cache (and visited already).
    Visited,
    /// Row `index` of the read's fetch number `fetch`.
    Wait { fetch: usize, index: usize },
    /// Not served yet: a fetch is started for it below.
    Missing,
}

/// The distinct fetches one read waits on, each once.
#[derive(Default)]
struct ReadFetches {
    fetches: Vec<SharedFetch>,
    by_id: HashMap<u64, usize, BuildKeyHasher>,
}

impl ReadFetches {
    /// The read's number for fetch `fetch_id`, adding it if it is new.
    fn number(&mut self, fetch_id: u64, fetch: &SharedFetch) -> usize {
        let fetches = &mut self.fetches;
        *self.by_id.entry(fetch_id).or_insert_with(|| {
            fetches.push(fetch.clone());
            fetches.len() - 1
        })
    }
}

/// What a read does with each row it gets: `visit(position, row)`, once per position of the
/// keys, in no particular order; a cached row is visited under its shard's lock, so a
/// visitor that copies the row out takes no reference to it.
pub(crate) type Visitor<'v> = dyn FnMut(usize, &Arc<RowData>) -> Result<(), HarpError> + Send + 'v;

/// The rows a visit hands over, kept by position (what a read returns).
pub(crate) struct KeptRows(Vec<Option<Arc<RowData>>>);

impl KeptRows {
    pub(crate) fn new(len: usize) -> Self {
        KeptRows(vec![None; len])
    }

    /// The visitor's work: keeps a reference to the row at `position`.
    pub(crate) fn keep(&mut self, position: usize, row: &Arc<RowData>) -> Result<(), HarpError> {
        match self.0.get_mut(position) {
            Some(slot) => {
                *slot = Some(row.clone());
                Ok(())
            }
            None => Err(HarpError::InvalidConfig(format!(
                "a read visited position {position} of {}",
                self.0.len()
            ))),
        }
    }

    /// The rows in key order; an error if the visit left a position out.
    pub(crate) fn into_rows(self) -> Result<Vec<Arc<RowData>>, HarpError> {
        self.0
            .into_iter()
            .map(|row| row.ok_or_else(|| HarpError::InvalidConfig("a row was not read".into())))
            .collect()
    }
}

impl ParamCache {
    /// Visits a row valid for a task of `version` for every key of `keys`, fetching what
    /// the cache cannot serve.
    pub(crate) async fn visit(
        &self,
        keys: &[ParamKey],
        version: Version,
        routing: &RwLock<Routing>,
        counters: &NodeCounters,
        deadline: Duration,
        visit: &mut Visitor<'_>,
    ) -> Result<(), HarpError> {
        // Positions (`i`, `idxs`, `index`) come from grouping these same slices, so every
        // index below is in range.
        let mut slots: Vec<Slot> = Vec::with_capacity(keys.len());
        slots.resize_with(keys.len(), || Slot::Missing);
        let mut missing: BTreeMap<ServerId, Vec<usize>> = BTreeMap::new();
        let mut fetches = ReadFetches::default();
        let (mut hits, mut waits) = (0u64, 0u64);
        {
            let routing = routing.read().unwrap_or_else(|p| p.into_inner());
            for (shard, positions) in self.entries.group(keys.iter()) {
                let map = self.entries.read(shard);
                for i in positions {
                    match map.get(&keys[i]).map(|s| (&s.cached, &s.pending)) {
                        Some((Some(c), _)) if cached_value_usable(version, c.version) => {
                            hits += 1;
                            // An error returns here, which releases the locks.
                            visit(i, &c.row)?;
                            slots[i] = Slot::Visited;
                        }
                        Some((_, Some(p))) if cached_value_usable(version, p.version) => {
                            waits += 1;
                            slots[i] = Slot::Wait {
                                fetch: fetches.number(p.fetch_id, &p.fetch),
                                index: p.index,
                            };
                        }
                        _ => {} // stays missing
                    }
                }
            }
            for (i, slot) in slots.iter().enumerate() {
                if matches!(slot, Slot::Missing) {
                    missing.entry(routing.route(keys[i]).0).or_default().push(i);
                }
            }
            for (server, idxs) in &missing {
                let fetch_keys: Vec<ParamKey> = idxs.iter().map(|&i| keys[i]).collect();
                let fetch_id = self.next_fetch_id.fetch_add(1, Ordering::Relaxed);
                let fetch =
                    self.start_fetch(*server, fetch_keys, version, fetch_id, &routing, deadline);
                let number = fetches.number(fetch_id, &fetch);
                for (shard, indices) in self.entries.group(idxs.iter().map(|&i| &keys[i])) {
                    let mut map = self.entries.write(shard);
                    for index in indices {
                        let state = map.entry(keys[idxs[index]]).or_default();
                        let newer = state
                            .pending
                            .as_ref()
                            .is_none_or(|p| should_replace_cached(p.version, version));
                        if newer {
                            state.pending = Some(PendingFetch {
                                version,
                                fetch_id,
                                index,
                                fetch: fetch.clone(),
                            });
                        }
                        slots[idxs[index]] = Slot::Wait {
                            fetch: number,
                            index,
                        };
                    }
                }
            }
        }
        let misses: u64 = missing.values().map(|v| v.len() as u64).sum();
        NodeCounters::add(&counters.cache_hits, hits);
        NodeCounters::add(&counters.fetch_waits, waits);
        NodeCounters::add(&counters.cache_misses, misses);
        NodeCounters::add(&counters.rows_fetched, misses);

        // All at once, so every fetch's deadline runs from now.
        let replies = future::try_join_all(fetches.fetches).await.map_err(|f| {
            if matches!(f.why, FetchFailure::TimedOut(_)) {
                NodeCounters::add(&counters.requests_timed_out, 1);
            }
            HarpError::from(f)
        })?;
        for (i, slot) in slots.into_iter().enumerate() {
            match slot {
                Slot::Visited => {}
                Slot::Wait { fetch, index } => {
                    match replies.get(fetch).and_then(|rows| rows.get(index)) {
                        Some(row) => visit(i, row)?,
                        None => {
                            return Err(HarpError::InvalidConfig(
                                "short reply from a server".into(),
                            ))
                        }
                    }
                }
                // Every missing slot became a wait in the fetch loop above.
                Slot::Missing => {
                    return Err(HarpError::InvalidConfig("cache slot left empty".into()))
                }
            }
        }
        Ok(())
    }

    /// Sends the request now and returns a shared future for its reply, which stores the
    /// fetched rows tagged `version` and retires the fetch (failed or not) from the keys it
    /// is still pending for.
    fn start_fetch(
        &self,
        server: ServerId,
        keys: Vec<ParamKey>,
        version: Version,
        fetch_id: u64,
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
        // Weak: a fetch nobody awaits any more stays in its keys' entries, and must not keep
        // the cache alive through them.
        let entries = Arc::downgrade(&self.entries);
        async move {
            let failed = |why| FetchFailed { server, why };
            let reply = if sent {
                match tokio::time::timeout(deadline, rx).await {
                    Ok(Ok(Ok(rows))) => Ok(rows),
                    Ok(Ok(Err(e))) => Err(failed(FetchFailure::Refused(e.to_string()))),
                    Ok(Err(_)) => Err(failed(FetchFailure::Unreachable)),
                    Err(_) => Err(failed(FetchFailure::TimedOut(deadline))),
                }
            } else {
                Err(failed(FetchFailure::Unreachable))
            };
            if let Some(entries) = entries.upgrade() {
                let rows: &[Arc<RowData>] = reply.as_deref().unwrap_or(&[]);
                settle(&entries, &keys, rows, version, fetch_id);
            }
            reply.map(Arc::new)
        }
        .boxed()
        .shared()
    }

    /// Rows currently cached (any version).
    pub(crate) fn len(&self) -> usize {
        self.entries.count(|state| state.cached.is_some())
    }
}

/// Settles a resolved fetch: stores the rows its reply carried (none if it failed; fewer
/// than asked if the reply was short, which fails its readers) unless a newer row is cached,
/// and retires the fetch from every key.
fn settle(
    entries: &Entries,
    keys: &[ParamKey],
    rows: &[Arc<RowData>],
    version: Version,
    fetch_id: u64,
) {
    for (shard, positions) in entries.group(keys.iter()) {
        let mut map = entries.write(shard);
        for i in positions {
            // Every key of a fetch got an entry when the fetch was noted; entries stay.
            let Some(state) = map.get_mut(&keys[i]) else {
                continue;
            };
            let newer = state
                .cached
                .as_ref()
                .is_none_or(|c| should_replace_cached(c.version, version));
            if let (true, Some(row)) = (newer, rows.get(i)) {
                state.cached = Some(CachedRow {
                    version,
                    row: row.clone(),
                });
            }
            state.retire(fetch_id);
        }
    }
}

#[cfg(test)]
mod tests;
