//! A node's parameter plumbing, shared by every worker on the node: the parameter cache, the
//! update log, and the routing of reads and flushes to servers.
//!
//! The update log is a concurrent map from shard to a [`harp_core::UpdateLog`], so tasks that
//! update different shards never contend, and a flush drains it shard by shard.
//!
//! **A lost server** (a job with SCAR recovery, or one that recovers worker nodes:
//! [`ParamStore::awaiting_lost_servers`]): a read or a flush part that its server did not
//! answer waits until the master has rerouted the keys' shards to the servers that
//! re-created them, then goes there. A flush keeps a copy of each server's part until it is
//! acknowledged ([`unacked`]), so an update the failed server never acknowledged is sent
//! again to the new owner instead of being lost, less the rows a checkpoint save holds
//! that the master said came after the server applied the part. It goes again under its
//! own number, so a server that applied keys of it forwarded by the failed one skips them
//! (`server/forwarded_parts.rs`). The node tells the master when its traffic starts waiting
//! ([`ParamStore::on_server_awaited`]): where the server's node is alive and only the link
//! between the two broke, no reroute comes, and the master evicts one of the two nodes
//! (`remote/eviction.rs`) or ends the job.
//!
//! **Lost updates** (a node process of such a job, [`ParamStore::with_lost_ledger`]): the
//! store also keeps what each server acknowledged since each row's last save
//! ([`lost_ledger`]), so that the master can report exactly what a dead server lost.
//!
//! **Staged flushes** (a job that recovers worker nodes, [`ParamStore::stage`]): each part
//! of a flush is staged on its server under `(node, flush)` rather than applied; the master
//! commits the flush once the node reports every part staged (`worker.rs`).

mod cache;
pub(crate) mod lost_ledger;
mod routing;
mod stats;
mod unacked;

pub(crate) use routing::Routing;
pub use stats::NodeStats;

use crate::error::HarpError;
use crate::server::{AppliedAt, AppliedPart, PartId, PartTag, ServerMsg};
use crate::table::{TableSet, UpdateRule};
use cache::{KeptRows, ParamCache, Visitor};
use dashmap::DashMap;
use harp_core::{shard_of, ParamKey, RowData, ServerId, ShardId, UpdateLog, Version};
use lost_ledger::LostLedger;
use stats::NodeCounters;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::oneshot;
use unacked::{HeldPart, Unacked};

/// How long a read or a flush waits for a server's answer before the task fails with
/// [`HarpError::RequestTimedOut`]. Servers answer at once (they never wait on versions), so
/// only a stuck or overloaded peer runs into it; a dead one is noticed sooner by its lease.
/// A node process waits at least a lease and a second (`remote/node_side.rs`), so a peer
/// silent for less than a long lease fails no request.
pub(crate) const DEFAULT_REQUEST_DEADLINE: Duration = Duration::from_secs(10);

/// How long traffic for a failed server waits for its shards to be rerouted (detection by
/// lease expiry plus re-creating the shards) before the task fails. A node process under a
/// long lease waits longer: the verdict and 30 s (`remote/lease.rs::reroute_wait`).
pub(crate) const SERVER_RECOVERY_WAIT: Duration = Duration::from_secs(60);

type Batches = BTreeMap<ServerId, Vec<(ParamKey, RowData)>>;

/// Flush parts on their way: the server, the part's number if it is held already (one sent
/// again; `None`: a new part, numbered when it is sent), and its deltas.
type Outgoing = Vec<(ServerId, Option<u64>, Vec<(ParamKey, RowData)>)>;

/// How a flush's parts go to their servers: applied at once, or staged as flush `flush` of
/// node `node` until the master commits it.
#[derive(Clone, Copy, Debug)]
enum FlushMode {
    Apply,
    Stage { node: u32, flush: u64 },
}

impl FlushMode {
    fn message(
        self,
        updates: Vec<(ParamKey, RowData)>,
        part: Option<PartTag>,
        reply: oneshot::Sender<Result<AppliedAt, HarpError>>,
    ) -> ServerMsg {
        match self {
            FlushMode::Apply => ServerMsg::Apply {
                updates,
                part,
                reply,
            },
            FlushMode::Stage { node, flush } => ServerMsg::Stage {
                node,
                flush,
                updates,
                reply,
            },
        }
    }
}

/// What [`ParamStore::on_server_awaited`] calls.
pub(crate) type ServerAwaitedHook = Box<dyn Fn(ServerId) + Send + Sync>;

/// Everything a micro-task on this node touches when it reads or updates parameters.
pub(crate) struct ParamStore {
    pub(crate) tables: Arc<TableSet>,
    cache: ParamCache,
    log: DashMap<ShardId, UpdateLog>,
    routing: RwLock<Routing>,
    num_shards: u32,
    request_deadline: Duration,
    /// How long traffic for a server that does not answer waits for a reroute.
    reroute_wait: Duration,
    /// Traffic for a server that does not answer waits for a reroute (SCAR recovery) or
    /// for the master's verdict (an eviction).
    await_lost_servers: bool,
    /// Notified whenever the routing changes.
    rerouted: tokio::sync::Notify,
    /// Servers whose traffic waited for a reroute (each said once in the log).
    servers_awaited: Mutex<BTreeSet<ServerId>>,
    /// Told each server of `servers_awaited` once, when its traffic first waits (a node
    /// process tells its master, which has a verdict on the server's node sooner than the
    /// wait's end: [`Self::on_server_awaited`]).
    server_awaited_hook: Option<ServerAwaitedHook>,
    /// What each server acknowledged since each row's last save (node processes of a job
    /// with server recovery).
    lost_ledger: Option<Mutex<LostLedger>>,
    /// This node's id in the job: the first half of its flush parts' ids.
    node_id: u32,
    /// Parts sent and not acknowledged yet, kept to be sent again ([`unacked`]; with
    /// [`Self::awaiting_lost_servers`]).
    unacked: Mutex<Unacked>,
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
            reroute_wait: SERVER_RECOVERY_WAIT,
            await_lost_servers: false,
            rerouted: tokio::sync::Notify::new(),
            servers_awaited: Mutex::default(),
            server_awaited_hook: None,
            lost_ledger: None,
            node_id: 0,
            unacked: Mutex::default(),
            counters: NodeCounters::default(),
        }
    }

    /// The same store, naming its flush parts after node `node_id` (a node process).
    pub(crate) fn with_node_id(mut self, node_id: u32) -> Self {
        self.node_id = node_id;
        self
    }

    /// The same store, keeping what each server acknowledged since each row's last save so
    /// that a dead server's lost updates are known exactly ([`lost_ledger`]). Needs
    /// [`Self::awaiting_lost_servers`] (which keeps each part until it is acknowledged).
    pub(crate) fn with_lost_ledger(mut self) -> Self {
        self.lost_ledger = Some(Mutex::new(LostLedger::default()));
        self
    }

    /// A checkpoint's save of `keys` on `server` at save epoch `epoch` is in its image, and
    /// before it `server` had applied the flush parts `applied` (the master sends each node
    /// its own; another node's are ignored): the parts of this node among them that are
    /// still unacknowledged will not carry those rows again.
    pub(crate) fn rows_saved(
        &self,
        server: ServerId,
        epoch: u64,
        keys: &[ParamKey],
        applied: &[AppliedPart],
    ) {
        if self.await_lost_servers {
            let mine = applied
                .iter()
                .filter(|p| p.part.node == self.node_id)
                .map(|p| (p.part.seq, p.epoch));
            self.unacked_lock().saved(server, epoch, keys, mine);
        }
        // A message of applied parts alone (the keys follow in their own) tells the
        // ledger nothing: it would only merge every row's older sums one time more.
        if let (Some(ledger), false) = (&self.lost_ledger, keys.is_empty()) {
            let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
            ledger.rows_saved(server, epoch, keys);
        }
    }

    /// What `server`, which the job declared dead, acknowledged of this node's updates
    /// since each row's last save, by save epoch; an error when this node cannot say exactly
    /// (or keeps no record). From now on this node takes no acknowledgement from `server`:
    /// a part it acknowledges later goes again to its shards' new owners
    /// ([`LostLedger::report_and_fence`]).
    pub(crate) fn lost_updates(
        &self,
        server: ServerId,
    ) -> Result<lost_ledger::RowsByEpoch, String> {
        match &self.lost_ledger {
            Some(ledger) => ledger
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .report_and_fence(server),
            None => Err("this node keeps no record of acknowledged updates".into()),
        }
    }

    /// Keeps `server`'s acknowledgement at `epoch` of `part` (its rows of `Add` tables), or
    /// hands `part` back when the acknowledgement is refused: `server` was declared dead
    /// and its record reported ([`Self::lost_updates`]), so the part must go again to the
    /// shards' new owners.
    fn ledger_acknowledged(
        &self,
        server: ServerId,
        epoch: AppliedAt,
        part: Vec<(ParamKey, RowData)>,
    ) -> Result<(), Vec<(ParamKey, RowData)>> {
        let Some(ledger) = &self.lost_ledger else {
            return Ok(());
        };
        let of_add_table = |key: &ParamKey| {
            self.tables
                .get(key.table)
                .is_ok_and(|spec| spec.rule == UpdateRule::Add)
        };
        (ledger.lock().unwrap_or_else(|p| p.into_inner())).acknowledged(
            server,
            epoch,
            part,
            of_add_table,
        )
    }

    /// The same store, with reads and flushes that outlive a lost server (see the module
    /// doc): for jobs whose master recovers failed servers, or evicts a worker node that
    /// lost its link to a live server.
    pub(crate) fn awaiting_lost_servers(mut self) -> Self {
        self.await_lost_servers = true;
        self
    }

    /// The same store, calling `hook` with each server whose traffic starts waiting for a
    /// reroute (once per server), before the wait.
    pub(crate) fn on_server_awaited(mut self, hook: ServerAwaitedHook) -> Self {
        self.server_awaited_hook = Some(hook);
        self
    }

    /// How long a read or a flush waits for a server's answer.
    pub(crate) fn request_deadline(&self) -> Duration {
        self.request_deadline
    }

    /// The same store with another deadline for server requests.
    pub(crate) fn with_request_deadline(mut self, deadline: Duration) -> Self {
        self.request_deadline = deadline;
        self
    }

    /// The same store with another wait for a reroute away from a server that does not
    /// answer ([`SERVER_RECOVERY_WAIT`] otherwise).
    pub(crate) fn with_reroute_wait(mut self, wait: Duration) -> Self {
        self.reroute_wait = wait;
        self
    }

    /// Rows valid for a task of `version` (from the cache or fetched).
    pub(crate) async fn read(
        &self,
        keys: &[ParamKey],
        version: Version,
    ) -> Result<Vec<Arc<RowData>>, HarpError> {
        let mut kept = KeptRows::new(keys.len());
        let mut keep = |i: usize, row: &Arc<RowData>| kept.keep(i, row);
        self.visit(keys, version, &mut keep).await?;
        kept.into_rows()
    }

    /// Visits a row valid for a task of `version` for every key (from the cache or fetched;
    /// see [`Visitor`]). A read retried after a server failure visits every key again.
    pub(crate) async fn visit(
        &self,
        keys: &[ParamKey],
        version: Version,
        visit: &mut Visitor<'_>,
    ) -> Result<(), HarpError> {
        let deadline = tokio::time::Instant::now() + self.reroute_wait;
        loop {
            let result = self
                .cache
                .visit(
                    keys,
                    version,
                    &self.routing,
                    &self.counters,
                    self.request_deadline,
                    visit,
                )
                .await;
            match result {
                Err(HarpError::ServerUnreachable(server)) if self.await_lost_servers => {
                    if !self.wait_rerouted_away(server, keys, deadline).await {
                        return Err(HarpError::ServerUnreachable(server));
                    }
                    // The failed fetch retired itself from the cache when it resolved, so
                    // the retry sends a new request to the new owner.
                    NodeCounters::add(&self.counters.requests_resent, 1);
                    tokio::task::yield_now().await;
                }
                other => return other,
            }
        }
    }

    /// Waits until no key of `keys` routes to `server`, or `deadline`; says whether it
    /// happened.
    async fn wait_rerouted_away(
        &self,
        server: ServerId,
        keys: &[ParamKey],
        deadline: tokio::time::Instant,
    ) -> bool {
        let first = (self.servers_awaited.lock())
            .unwrap_or_else(|p| p.into_inner())
            .insert(server);
        if first {
            tracing::warn!(%server, wait_s = self.reroute_wait.as_secs(), "a server does not answer: its traffic waits for the master's verdict on its node (dead: its shards re-created elsewhere; alive: one of the two nodes evicted, or the job ends)");
            if let Some(hook) = &self.server_awaited_hook {
                hook(server);
            }
        }
        loop {
            let notified = self.rerouted.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let routing = self.routing.read().unwrap_or_else(|p| p.into_inner());
                if keys.iter().all(|k| routing.route(*k).0 != server) {
                    return true;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
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

    /// Adds already validated deltas into the update log, locking each shard's log once for
    /// all of its rows (a task of a one-weight-per-row job updates thousands of rows). Rows of
    /// one shard are recorded in their order in `updates`, so deltas of one key sum in the
    /// same order as one `record` after another would.
    pub(crate) fn record_many(&self, updates: Vec<(ParamKey, RowData)>) -> Result<(), HarpError> {
        // Bucketed by shard, in order within a bucket (empty buckets allocate nothing).
        let mut by_shard: Vec<Vec<(ParamKey, RowData)>> =
            vec![Vec::new(); self.num_shards as usize];
        for (key, delta) in updates {
            // shard_of returns a shard below num_shards, the buckets' count.
            by_shard[shard_of(key, self.num_shards).0 as usize].push((key, delta));
        }
        let (mut recorded, mut result) = (0u64, Ok(()));
        'shards: for (shard, rows) in by_shard.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let mut log = self.log.entry(ShardId(shard as u32)).or_default();
            for (key, delta) in rows {
                if let Err(e) = log.record_owned(key, delta) {
                    result = Err(e);
                    break 'shards;
                }
                recorded += 1;
            }
        }
        NodeCounters::add(&self.counters.updates_recorded, recorded);
        if result.is_err() {
            NodeCounters::add(&self.counters.updates_rejected, 1);
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

    /// Sends every batch to its server and waits until all are applied. With server
    /// recovery, a part whose server failed is sent again to its shards' new owners.
    pub(crate) async fn apply(&self, batches: Batches) -> Result<(), HarpError> {
        self.flush(batches, FlushMode::Apply).await.map(|_| ())
    }

    /// Stages every batch on its server as flush `flush` of node `node` and waits until
    /// each is kept there; returns the servers that hold a part (the ones the master must
    /// tell to commit it). With server recovery, a part whose server failed is staged again
    /// on its shards' new owners.
    pub(crate) async fn stage(
        &self,
        batches: Batches,
        node: u32,
        flush: u64,
    ) -> Result<Vec<ServerId>, HarpError> {
        self.flush(batches, FlushMode::Stage { node, flush }).await
    }

    /// [`Self::apply`] or [`Self::stage`]: the servers that acknowledged a part, ascending.
    async fn flush(&self, batches: Batches, mode: FlushMode) -> Result<Vec<ServerId>, HarpError> {
        let rows: usize = batches.values().map(Vec::len).sum();
        let recovery_deadline = tokio::time::Instant::now() + self.reroute_wait;
        // A server's part larger than a message may carry goes as several, each
        // acknowledged (and recorded in the ledger at its save epoch) on its own.
        let mut pending: Outgoing = batches
            .into_iter()
            .flat_map(|(server, updates)| {
                harp_wire::split_rows(updates, |(_, delta)| delta.bytes())
                    .into_iter()
                    .map(move |part| (server, None, part))
            })
            .collect();
        let mut holders = Vec::new();
        loop {
            let (acked, unanswered) = self.flush_once(pending, mode).await?;
            holders.extend(acked);
            let Some(&(_, server)) = unanswered.first() else {
                break;
            };
            let keys = self.unacked_keys(&unanswered);
            let rerouted = self
                .wait_rerouted_away(server, &keys, recovery_deadline)
                .await;
            if !rerouted {
                self.drop_unacked(&unanswered);
                return Err(HarpError::ServerUnreachable(server));
            }
            NodeCounters::add(&self.counters.requests_resent, 1);
            // Split only now: the saves the master told of meanwhile (before the reroute,
            // on the same stream) dropped the rows they hold of parts the server applied.
            pending = self.reroute_unacked(&unanswered);
        }
        NodeCounters::add(&self.counters.flushes, 1);
        NodeCounters::add(&self.counters.rows_flushed, rows as u64);
        holders.sort_unstable();
        holders.dedup();
        Ok(holders)
    }

    /// The unacknowledged parts `parts` go again, each under its own number, split by the
    /// servers their shards route to now (held meanwhile: [`Unacked::reroute`]).
    fn reroute_unacked(&self, parts: &[HeldPart]) -> Outgoing {
        let routing = self.routing.read().unwrap_or_else(|p| p.into_inner());
        self.unacked_lock()
            .reroute(parts, |key| routing.route(key).0)
            .into_iter()
            .map(|((seq, server), updates)| (server, Some(seq), updates))
            .collect()
    }

    /// One attempt of [`Self::flush`]: the servers that acknowledged their part, and the
    /// parts to send again (held in [`Self::unacked`]). Without server recovery any
    /// failure is the error; with it, the parts whose server did not answer are handed
    /// back to be sent again.
    async fn flush_once(
        &self,
        parts: Outgoing,
        mode: FlushMode,
    ) -> Result<(Vec<ServerId>, Vec<HeldPart>), HarpError> {
        let keep = self.await_lost_servers;
        let mut replies = Vec::with_capacity(parts.len());
        let mut unanswered = Vec::new();
        let mut sent_parts = Vec::with_capacity(parts.len());
        {
            let routing = self.routing.read().unwrap_or_else(|p| p.into_inner());
            for (server, held, updates) in parts {
                // Named only where it may be sent again: servers note named parts alone.
                // A new part is numbered and kept in one step (see `unacked`).
                let tag = keep.then(|| {
                    let mut unacked = self.unacked_lock();
                    let seq = match held {
                        Some(seq) => seq,
                        None => unacked.keep_new(server, updates.clone()),
                    };
                    PartTag {
                        id: PartId {
                            node: self.node_id,
                            seq,
                        },
                        held_from: unacked.held_from(),
                        forwarded: false,
                    }
                });
                let seq = tag.map_or(0, |tag| tag.id.seq);
                if keep {
                    sent_parts.push((seq, server));
                }
                let (tx, rx) = oneshot::channel();
                let sent = routing
                    .servers
                    .get(&server)
                    .map(|actor| actor.send_message(mode.message(updates, tag, tx)));
                match sent {
                    Some(Ok(())) => replies.push((server, seq, rx)),
                    _ if keep => unanswered.push((seq, server)),
                    _ => return Err(HarpError::ServerUnreachable(server)),
                }
            }
        }
        // One deadline for the whole flush: the replies arrive in parallel.
        let deadline = tokio::time::Instant::now() + self.request_deadline;
        let mut acked = Vec::with_capacity(replies.len());
        for (server, seq, rx) in replies {
            match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(Ok(epoch))) => {
                    if keep && !self.acknowledged((seq, server), mode, epoch) {
                        unanswered.push((seq, server));
                        continue;
                    }
                    acked.push(server)
                }
                Ok(Ok(Err(e))) => {
                    NodeCounters::add(&self.counters.updates_rejected, 1);
                    self.drop_unacked(&sent_parts);
                    return Err(e);
                }
                Ok(Err(_)) if keep => unanswered.push((seq, server)),
                Ok(Err(_)) => return Err(HarpError::ServerUnreachable(server)),
                Err(_) => {
                    NodeCounters::add(&self.counters.requests_timed_out, 1);
                    self.drop_unacked(&sent_parts);
                    return Err(HarpError::RequestTimedOut {
                        server,
                        request: "flush",
                        after_ms: self.request_deadline.as_millis() as u64,
                    });
                }
            }
        }
        Ok((acked, unanswered))
    }

    /// Part `part` was acknowledged as applied at `epoch`: the copy kept for a resend is
    /// not needed any more, and the ledger takes it. False when the server was declared
    /// dead meanwhile: then the part stays held, to go again. One step under the lock, so
    /// the part never leaves the held ones while it may still go ([`Unacked::held_from`]).
    fn acknowledged(&self, part: HeldPart, mode: FlushMode, epoch: AppliedAt) -> bool {
        let mut unacked = self.unacked_lock();
        let Some(updates) = unacked.take(part) else {
            return true;
        };
        if !matches!(mode, FlushMode::Apply) {
            return true;
        }
        match self.ledger_acknowledged(part.1, epoch, updates) {
            Ok(()) => true,
            Err(updates) => {
                unacked.keep(part, updates, epoch);
                false
            }
        }
    }

    fn unacked_lock(&self) -> std::sync::MutexGuard<'_, Unacked> {
        self.unacked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The keys of the unacknowledged parts `parts`.
    fn unacked_keys(&self, parts: &[HeldPart]) -> Vec<ParamKey> {
        let unacked = self.unacked_lock();
        parts.iter().flat_map(|part| unacked.keys(*part)).collect()
    }

    /// Drops the unacknowledged parts `parts` (their flush failed).
    fn drop_unacked(&self, parts: &[HeldPart]) {
        let mut unacked = self.unacked_lock();
        for part in parts {
            unacked.take(*part);
        }
    }

    /// A server joined: reads and flushes may be routed to it.
    pub(crate) fn add_server(&self, id: ServerId, actor: ractor::ActorRef<ServerMsg>) {
        let mut routing = self.routing.write().unwrap_or_else(|p| p.into_inner());
        routing.servers.insert(id, actor);
    }

    /// `shard` moved to `server`: send its traffic there directly (until now the old owner
    /// forwarded it).
    pub(crate) fn reroute(&self, shard: ShardId, server: ServerId) -> Result<(), HarpError> {
        {
            let mut routing = self.routing.write().unwrap_or_else(|p| p.into_inner());
            routing.shard_map.assign(shard, server)?;
        }
        self.rerouted.notify_waiters();
        Ok(())
    }

    /// `server` failed: forget its address (its shards were rerouted before) and what it
    /// acknowledged (the master asked for it before the reroute).
    pub(crate) fn forget_server(&self, server: ServerId) {
        {
            let mut routing = self.routing.write().unwrap_or_else(|p| p.into_inner());
            routing.servers.remove(&server);
        }
        if let Some(ledger) = &self.lost_ledger {
            ledger
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .forget(server);
        }
        self.rerouted.notify_waiters();
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
mod tests;
