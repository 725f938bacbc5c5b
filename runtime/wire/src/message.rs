//! Every message nodes exchange, as rkyv types, and the kind byte that names each one.
//!
//! This module owns the vocabulary of the wire: [`Message`] and the payload types it carries
//! ([`Hello`], [`Welcome`], [`TaskEnvelope`], [`RowWire`], ...), plus [`MessageKind`], the
//! one-byte discriminant written in every frame header. Invariants it keeps:
//!
//! - every [`Message`] variant has exactly one [`MessageKind`], and kind numbers are stable
//!   (append new kinds at the end; renumbering one is a [`PROTOCOL_VERSION`] bump);
//! - kind 0 is never used, so a zeroed header is an unknown kind;
//! - ids travel as plain integers; the `*_id()` accessors and `From` impls convert them to and
//!   from `harp_core`'s typed ids, so the shell never handles raw integers.
//!
//! App-level payloads (task arguments, task outputs) are opaque bytes serialized by the app;
//! parameter rows are mirrored ([`RowWire`], [`ParamKeyWire`]) because `harp_core`'s types
//! are serde-only.
//!
//! [`PROTOCOL_VERSION`]: crate::PROTOCOL_VERSION

use harp_core::{ExecutorId, ParamKey, RowData, ServerId, ShardId, TableId, TaskId, Version};
use rkyv::{Archive, Deserialize, Serialize};

/// A job's identity: 16 bytes chosen by the master (e.g. random) and known to every node.
pub type JobId = [u8; 16];

/// `Hello::node_id` of a node that has no id yet (first join).
pub const NODE_ID_UNASSIGNED: u32 = u32::MAX;

/// What a node offers or does.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug))]
pub struct NodeRole {
    pub worker: bool,
    pub server: bool,
    pub master: bool,
}

/// The first message on a connection, from the node that opened it.
///
/// Its layout must never change (new handshake data goes into new message kinds), so that a
/// peer of another protocol version is told [`WireError::ProtocolVersion`] rather than
/// [`WireError::Invalid`].
///
/// [`WireError::ProtocolVersion`]: crate::WireError::ProtocolVersion
/// [`WireError::Invalid`]: crate::WireError::Invalid
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Hello {
    pub protocol_version: u32,
    pub job_id: JobId,
    /// The node's id if it has one (a reconnect, a node-to-node connection), else
    /// [`NODE_ID_UNASSIGNED`].
    pub node_id: u32,
    pub role: NodeRole,
    /// Where the node accepts connections from its peers (`host:port`).
    pub listen_addr: String,
}

/// The master's answer to an accepted [`Hello`].
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Welcome {
    pub protocol_version: u32,
    pub job_id: JobId,
    pub assigned_node_id: u32,
    /// The app the job runs; a node running another app refuses to go on.
    pub app_name: String,
    /// The app's parameter tables, one line each; a node whose tables differ refuses to go
    /// on.
    pub app_tables: Vec<String>,
    /// The app's settings (`App::settings`), one line each; likewise.
    pub app_settings: Vec<String>,
    /// A node whose lease is not renewed within this time is declared dead.
    pub lease_timeout_ms: u64,
    /// How often the node sends [`Message::Heartbeat`].
    pub heartbeat_interval_ms: u64,
}

/// Facts about the job every driver and executor may read (mirror of `harp::JobInfo`).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct JobInfoWire {
    pub num_executors: u32,
    pub num_workers: u32,
    pub num_servers: u32,
}

/// What the master asks one node to host.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Assignment {
    pub job: JobInfoWire,
    /// The worker this node runs, and the executors it hosts.
    pub worker: Option<u32>,
    pub executors: Vec<u32>,
    /// The server this node runs, and the shards it owns.
    pub server: Option<u32>,
    pub shards: Vec<u32>,
    /// The job recovers failed servers (SCAR's running checkpoint is on): keep each flush
    /// part until its server acknowledged it, and send what a failed server left
    /// unanswered to its shards' new owners once the master reroutes them.
    pub server_recovery: bool,
    /// The job survives losing a worker node: stage each flush on the servers
    /// ([`Message::Apply`] with `staged`) and report it to the master
    /// ([`Message::FlushStaged`]), which commits it, instead of applying it at once.
    pub worker_recovery: bool,
}

/// One shard's owner.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ShardPlace {
    pub shard: u32,
    pub server: u32,
}

/// A flush part a server applied itself (`node_id` and `flush_id` of its
/// [`Message::Apply`]: the node and the part's number there), and the server's save epoch
/// then: listed in a checkpoint save's answer ([`SaveResult::Ok`]) and told to the nodes
/// with the save ([`Message::RowsSaved`]).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct AppliedPartWire {
    pub node: u32,
    pub seq: u64,
    pub epoch: u64,
}

/// A flush part (`node`, `seq`: as [`AppliedPartWire`]) and the keys of it a server
/// applied, carried with a moved shard's rows ([`Message::TakeOverShard`]).
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct PartKeysWire {
    pub node: u32,
    pub seq: u64,
    pub keys: Vec<ParamKeyWire>,
}

/// A [`Message::TakeOverShard`] that re-creates a failed server's shard from the running
/// checkpoint: the first part of recovery `generation` to arrive drops whatever rows of
/// the shard (of `num_shards`) the server still holds, so it ends with exactly the restored
/// rows.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct RestoreWire {
    pub generation: u64,
    pub num_shards: u32,
}

/// How far a stopped job got: whether its driver had started, and the micro-tasks
/// completed by then.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct StoppedWire {
    pub started: bool,
    pub tasks_completed: u64,
}

/// Where one server runs.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct ServerPlace {
    pub server: u32,
    pub node_id: u32,
    pub listen_addr: String,
}

/// The shard→server map and the servers' addresses, versioned by `epoch` (a node keeps the
/// placement of the highest epoch it has seen).
#[derive(Archive, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct Placement {
    pub epoch: u64,
    pub num_shards: u32,
    pub shards: Vec<ShardPlace>,
    pub servers: Vec<ServerPlace>,
}

/// One dispatched micro-task on its way to the worker that hosts its executor.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct TaskEnvelope {
    pub task: u64,
    pub executor: u32,
    /// The version the task was dispatched with.
    pub version: u64,
    /// The app's task arguments, serialized by the app.
    pub args: Vec<u8>,
}

impl TaskEnvelope {
    pub fn new(task: TaskId, executor: ExecutorId, version: Version, args: Vec<u8>) -> Self {
        Self {
            task: task.0,
            executor: executor.0,
            version: version.0,
            args,
        }
    }

    pub fn task_id(&self) -> TaskId {
        TaskId(self.task)
    }

    pub fn executor_id(&self) -> ExecutorId {
        ExecutorId(self.executor)
    }

    pub fn dispatch_version(&self) -> Version {
        Version(self.version)
    }
}

/// A micro-task whose updates are applied, on its way to the master.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[rkyv(derive(Debug))]
pub struct CompletionWire {
    pub task: u64,
    pub executor: u32,
    /// The version the task was dispatched with.
    pub dispatched_at: u64,
    /// The app's task output, serialized by the app.
    pub output: Vec<u8>,
}

impl CompletionWire {
    pub fn new(
        task: TaskId,
        executor: ExecutorId,
        dispatched_at: Version,
        output: Vec<u8>,
    ) -> Self {
        Self {
            task: task.0,
            executor: executor.0,
            dispatched_at: dispatched_at.0,
            output,
        }
    }

    pub fn task_id(&self) -> TaskId {
        TaskId(self.task)
    }

    pub fn executor_id(&self) -> ExecutorId {
        ExecutorId(self.executor)
    }

    pub fn dispatched_at_version(&self) -> Version {
        Version(self.dispatched_at)
    }
}

/// The address of one parameter row (mirror of [`harp_core::ParamKey`]).
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[rkyv(derive(Debug))]
pub struct ParamKeyWire {
    pub table: u16,
    pub row: u64,
}

impl From<ParamKey> for ParamKeyWire {
    fn from(key: ParamKey) -> Self {
        Self {
            table: key.table.0,
            row: key.row,
        }
    }
}

impl From<ParamKeyWire> for ParamKey {
    fn from(key: ParamKeyWire) -> Self {
        ParamKey::new(TableId(key.table), key.row)
    }
}

/// One row's values or delta (mirror of [`harp_core::RowData`]).
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum RowWire {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

impl From<RowData> for RowWire {
    fn from(row: RowData) -> Self {
        match row {
            RowData::F32(v) => RowWire::F32(v),
            RowData::I64(v) => RowWire::I64(v),
        }
    }
}

impl From<&RowData> for RowWire {
    fn from(row: &RowData) -> Self {
        match row {
            RowData::F32(v) => RowWire::F32(v.clone()),
            RowData::I64(v) => RowWire::I64(v.clone()),
        }
    }
}

impl From<RowWire> for RowData {
    fn from(row: RowWire) -> Self {
        match row {
            RowWire::F32(v) => RowData::F32(v),
            RowWire::I64(v) => RowData::I64(v),
        }
    }
}

/// A server's answer to [`Message::Get`]: one row per requested key, in order, or why not.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum RowsResult {
    Ok(Vec<RowWire>),
    Err(String),
}

impl From<Result<Vec<RowWire>, String>> for RowsResult {
    fn from(result: Result<Vec<RowWire>, String>) -> Self {
        match result {
            Ok(rows) => RowsResult::Ok(rows),
            Err(message) => RowsResult::Err(message),
        }
    }
}

impl From<RowsResult> for Result<Vec<RowWire>, String> {
    fn from(result: RowsResult) -> Self {
        match result {
            RowsResult::Ok(rows) => Ok(rows),
            RowsResult::Err(message) => Err(message),
        }
    }
}

/// What a worker node answers to [`Message::ReleaseExecutor`].
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum ReleaseResult {
    /// The executor's saved state and the micro-tasks it had not started.
    Released {
        state: Vec<u8>,
        pending: Vec<TaskEnvelope>,
    },
    /// State too large to relay through the master: the node keeps it (as `transfer`, of
    /// `bytes` bytes) until the adopting node fetches it directly
    /// ([`Message::FetchState`]); the pending micro-tasks travel as usual.
    Parked {
        transfer: u64,
        bytes: u64,
        pending: Vec<TaskEnvelope>,
    },
    /// It was not given up (e.g. the node does not host it, or its state cannot be saved).
    Refused(String),
}

/// What a worker node answers to [`Message::SaveExecutor`].
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum ExecutorSaveResult {
    /// The executor's saved state.
    Saved(Vec<u8>),
    /// A large state: the node parked it (as `transfer`, of `bytes` bytes) until the master
    /// fetches it from the node's listening address ([`Message::FetchState`]).
    Parked { transfer: u64, bytes: u64 },
    /// No state (the node does not host the executor, or its app could not save it).
    Refused(String),
}

/// [`StateFetch::from_addr`] of a state the master parked (a resumed job's large executor
/// state): the adopting node fetches it from the address it joined the job at.
pub const STATE_FROM_MASTER: &str = "master";

/// Where an adopting node fetches a parked executor state: the releasing node's listening
/// address ([`STATE_FROM_MASTER`]: the master's) and the transfer number it parked the
/// state under.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub struct StateFetch {
    pub from_addr: String,
    pub transfer: u64,
    pub bytes: u64,
}

/// What a server node answers to [`Message::HandOffShard`].
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum HandOffResult {
    Moved {
        rows: u64,
        bytes: u64,
    },
    /// Nothing moved: the shard stays with its old owner.
    Refused(String),
    /// The rows left the old owner, which forwards the shard's traffic to the new one, but
    /// the new owner never confirmed it holds them (it died, or its link did): the shard is
    /// in transit until the master re-creates it.
    Unconfirmed(String),
}

/// A parameter row on its way to a new server, with its optimizer state and its saved value
/// in SCAR's running checkpoint (`None`: never saved, so its initial value).
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub struct ShardRowWire {
    pub key: ParamKeyWire,
    pub value: RowWire,
    pub opt: OptStateWire,
    pub saved: Option<RowWire>,
}

/// A row's bytes in a message besides its values: key, enum tag, relative pointer and
/// length, padding.
const PER_ROW: usize = 32;

impl ShardRowWire {
    /// About how many bytes the row takes in a message: its value, optimizer state and
    /// saved value, and their framing.
    pub fn bytes(&self) -> usize {
        let opt = match &self.opt {
            OptStateWire::None => 0,
            OptStateWire::AdaGrad { accum } => accum.len() * 4,
            OptStateWire::Adam { m, v, .. } => (m.len() + v.len()) * 4 + 8,
        };
        let saved = self.saved.as_ref().map_or(0, |v| v.value_bytes() + PER_ROW);
        self.value.value_bytes() + opt + saved + 3 * PER_ROW
    }
}

/// Optimizer state kept beside a row on its server.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum OptStateWire {
    None,
    AdaGrad { accum: Vec<f32> },
    Adam { m: Vec<f32>, v: Vec<f32>, step: u64 },
}

/// A server's answer to [`Message::CheckpointDistances`]: the distance of every row it owns
/// from its saved value, ascending by key, or why it could not measure them.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum DistancesResult {
    Ok(Vec<(ParamKeyWire, f64)>),
    Err(String),
}

/// A server's answer to [`Message::CheckpointSave`]: the rows it saved (their values now
/// saved, ascending by key) and the keys of shards it no longer owns (not saved, not
/// forwarded), or why it saved nothing.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum SaveResult {
    Ok {
        saved: Vec<(ParamKeyWire, RowWire)>,
        not_owned: Vec<ParamKeyWire>,
        /// The server's save epoch this save opened: how many saves it has taken, this one
        /// included (see [`Message::Applied`]).
        epoch: u64,
        /// The flush parts the server applied since its save `recorded_epoch` of the
        /// request (in the answer's first part).
        applied: Vec<AppliedPartWire>,
    },
    Err(String),
}

/// A node's answer to [`Message::LostUpdatesQuery`]: for each row of the dead server the node
/// updated and the server acknowledged since the row's last save the node knows of, the sums
/// of those deltas by the server's save epoch at their apply (ascending), or why the node
/// cannot tell exactly.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum LostUpdatesResult {
    Ok(Vec<(ParamKeyWire, Vec<(u64, RowWire)>)>),
    Inexact(String),
}

/// Everything one node sends another. Requests carry a `request_id` chosen by the sender,
/// echoed in the reply.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[rkyv(derive(Debug))]
pub enum Message {
    // ---- handshake ----
    /// node → master (or node → node): who I am, which job I belong to.
    Hello(Hello),
    /// master → node: accepted; your id and the lease rules.
    Welcome(Welcome),
    /// Either way: not accepted; the connection closes after this.
    Refused { reason: String },

    // ---- setup ----
    /// master → node: what to host.
    Assign(Assignment),
    /// master → every node: where shards live (sent at start and whenever it changes).
    Placement(Placement),
    /// node → master: executors created and/or server up; the node can take work.
    /// `launch_id`: what its launcher named the process it runs in (the
    /// `HARP_NODE_LAUNCH_ID` environment variable; 0: none), so that the launcher's report
    /// of the process's exit names the node.
    Ready { node_id: u32, launch_id: u64 },

    // ---- micro-tasks ----
    /// master → worker node: run these tasks.
    RunTasks { tasks: Vec<TaskEnvelope> },
    /// worker node → master: these tasks finished and their updates are applied.
    Completed { completions: Vec<CompletionWire> },
    /// worker node → master: something the job cannot continue after. With
    /// `unreachable_server`, the failure is that this node lost that server: the master
    /// first waits for its verdict on the server's node (whose death is the cause to report,
    /// or to recover from).
    Failed {
        message: String,
        unreachable_server: Option<u32>,
    },

    // ---- parameters ----
    /// node → server node: read rows of `server`: part `part` of `parts` of the keys (more
    /// keys than one bounded part holds go in parts, which may arrive in any order; the
    /// server reads once every part is in).
    Get {
        request_id: u64,
        server: u32,
        keys: Vec<ParamKeyWire>,
        part: u32,
        parts: u32,
    },
    /// server node → node: part `part` of `parts` of the answer to [`Message::Get`]. Rows
    /// that fit one bounded part (nearly every read) are one part; a larger answer goes in
    /// parts of consecutive rows, which may arrive in any order and are put back in order by
    /// their number. An error is always one part.
    Rows {
        request_id: u64,
        rows: RowsResult,
        part: u32,
        parts: u32,
    },
    /// node → server node: apply one flush's aggregated deltas for `server`'s shards, all of
    /// them or none. `(node_id, flush_id)` identifies the batch: for a part that is not
    /// staged, the node that made it and its number there (`u64::MAX`: no id), which the
    /// server lists in its next checkpoint save's answer ([`AppliedPartWire`]).
    /// With `staged` (a job that recovers worker nodes) the server only keeps the deltas as
    /// the staged part `(node_id, flush_id)` until the master commits it
    /// ([`Message::CommitFlush`]) or drops it ([`Message::DropStaged`]).
    /// `held_from`: the oldest part number the node still holds unacknowledged when it sent
    /// this one (a server forgets the parts of that node numbered below it that it got
    /// forwarded); `forwarded`: a server sends the part on, for a shard it gave away (the
    /// receiver remembers which of its keys it applied, so that the same part sent again by
    /// the node is not applied twice).
    Apply {
        request_id: u64,
        server: u32,
        node_id: u32,
        flush_id: u64,
        staged: bool,
        held_from: u64,
        forwarded: bool,
        updates: Vec<(ParamKeyWire, RowWire)>,
    },
    /// server node → node: the answer to [`Message::Apply`]; `error` is `None` when applied
    /// (or, for a staged part, kept). `save_epoch`: how many checkpoint saves the server had
    /// taken when it applied every delta of the part itself (`None` for a staged part, or one
    /// partly forwarded to a shard's new owner): the part is in the saved value of a row
    /// saved at epoch `e` exactly when `save_epoch < e`.
    Applied {
        request_id: u64,
        error: Option<String>,
        save_epoch: Option<u64>,
    },
    /// master → server node: every row `server` holds.
    Dump { request_id: u64, server: u32 },
    /// server node → master: part `part` of `parts` of the answer to [`Message::Dump`].
    /// A server's rows go in parts of a bounded size (each on a stream of its own, so they
    /// may arrive in any order); the answer is whole once every part arrived.
    DumpRows {
        request_id: u64,
        rows: Vec<(ParamKeyWire, RowWire)>,
        part: u32,
        parts: u32,
    },

    // ---- membership ----
    /// node → master: renew my lease.
    Heartbeat { node_id: u32, lease_seq: u64 },
    /// master → node: lease renewed.
    HeartbeatAck { node_id: u32, lease_seq: u64 },
    /// master → node: stop now.
    Shutdown { reason: String },
    /// master → every node: the job is over. `stopped` when it was stopped (a scheduler's
    /// preemption, Ctrl-C on the master); `message` is then the stop's reason. Also sent to
    /// the nodes that joined a job stopped before it started.
    JobEnded {
        ok: bool,
        message: String,
        stopped: Option<StoppedWire>,
    },

    // ---- elasticity ----
    /// master → worker node: give `executor` up once its running micro-task finished.
    ReleaseExecutor { request_id: u64, executor: u32 },
    /// worker node → master: the answer to [`Message::ReleaseExecutor`].
    ExecutorReleased {
        request_id: u64,
        executor: u32,
        result: ReleaseResult,
    },
    /// master → worker node: host `executor` from its saved state (`state`, or fetched
    /// from its old node when `fetch` is set), then run `pending` (the micro-tasks it had
    /// not started, in order). Answered with [`Message::ExecutorAdopted`].
    AdoptExecutor {
        request_id: u64,
        executor: u32,
        state: Vec<u8>,
        fetch: Option<StateFetch>,
        pending: Vec<TaskEnvelope>,
    },
    /// worker node → master: the answer to [`Message::AdoptExecutor`]; `error` is `None`
    /// once the executor runs there.
    ExecutorAdopted {
        request_id: u64,
        error: Option<String>,
    },
    /// adopting node → releasing node (on a link of its own): send the state parked as
    /// `transfer`, in [`Message::StateChunk`]s; an unknown transfer is answered with
    /// [`Message::Refused`].
    FetchState { request_id: u64, transfer: u64 },
    /// releasing node → adopting node: `data` is the part of a parked state (of `total`
    /// bytes) that starts at `offset`. Chunks may arrive in any order.
    StateChunk {
        request_id: u64,
        total: u64,
        offset: u64,
        data: Vec<u8>,
    },
    /// master → server node: hand `shard` (of `num_shards`) to `to_server`, then forward
    /// its traffic there.
    HandOffShard {
        request_id: u64,
        shard: u32,
        num_shards: u32,
        to_server: u32,
    },
    /// server node → master: the answer to [`Message::HandOffShard`], sent once the new
    /// owner holds the rows.
    ShardHandedOff {
        request_id: u64,
        result: HandOffResult,
    },
    /// old server node → new server node: the rows of `shard`, with optimizer state (or
    /// master → server node: a failed server's shard, re-created from the running
    /// checkpoint, `restore`).
    TakeOverShard {
        request_id: u64,
        shard: u32,
        rows: Vec<ShardRowWire>,
        restore: Option<RestoreWire>,
        /// The flush parts forwarded to the old owner whose keys of this shard it applied
        /// and whose node may still send them again (a move; in the first message of a
        /// shard sent in several).
        parts: Vec<PartKeysWire>,
    },
    /// new server node → old server node: the rows of a [`Message::TakeOverShard`] are in.
    TookOver { request_id: u64 },
    /// master → every node: `shard` is now on `server`; send its traffic there.
    Reroute { shard: u32, server: u32 },
    /// node → master: this node wants to leave the job (e.g. it got SIGTERM); move its load
    /// away, then dismiss it with [`Message::JobEnded`].
    Leaving { node_id: u32 },
    /// master → node: answer [`Message::ServerDrained`] once nothing this node sent to
    /// `server` waits for an answer (the server is about to leave; sent after the reroutes).
    DrainServer { request_id: u64, server: u32 },
    /// node → master: the answer to [`Message::DrainServer`].
    ServerDrained { request_id: u64 },
    /// `harp scale` → master: start `add` more node processes and let the nodes in
    /// `remove` leave.
    ScaleCommand { add: u32, remove: Vec<u32> },
    /// master → `harp scale`: how the command ended.
    ScaleDone { ok: bool, message: String },

    // ---- SCAR's running checkpoint and fault injection ----
    /// master → server node: the distance of every row `server` owns from its saved value
    /// (a checkpoint round's first step). Answered with [`Message::Distances`].
    CheckpointDistances { request_id: u64, server: u32 },
    /// server node → master: part `part` of `parts` of the answer to
    /// [`Message::CheckpointDistances`] (the distances in parts of a bounded size, in key
    /// order by part number; an error is always one part).
    Distances {
        request_id: u64,
        result: DistancesResult,
        part: u32,
        parts: u32,
    },
    /// master → server node: make the current values of `keys` their saved values and send
    /// them back (a checkpoint round's last step). Answered with [`Message::Saved`]. Part
    /// `part` of `parts` of the keys, as for [`Message::Get`]: one save once every part is in.
    /// `recorded_epoch`: the server's newest save the master's image holds (0: none).
    CheckpointSave {
        request_id: u64,
        server: u32,
        keys: Vec<ParamKeyWire>,
        part: u32,
        parts: u32,
        recorded_epoch: u64,
    },
    /// server node → master: part `part` of `parts` of the answer to
    /// [`Message::CheckpointSave`]. The saved rows go in parts of a bounded size, in key
    /// order by part number; every part carries the save's epoch and the first also the keys
    /// not owned. An error is always one part.
    Saved {
        request_id: u64,
        result: SaveResult,
        part: u32,
        parts: u32,
    },
    /// master → server node (fault injection): set these rows of `server` to these values
    /// (`None`: the table's initial value), all or none. Answered with
    /// [`Message::ResetDone`].
    ResetRows {
        request_id: u64,
        server: u32,
        rows: Vec<(ParamKeyWire, Option<RowWire>)>,
    },
    /// server node → master: the answer to [`Message::ResetRows`]; `error` is `None` when
    /// every row was set.
    ResetDone {
        request_id: u64,
        error: Option<String>,
    },
    /// master → every node: `server` failed and its shards were re-created elsewhere (sent
    /// after their [`Message::Reroute`]s): stop waiting for its answers, so what it left
    /// unanswered goes to the new owners, and forget it.
    ServerLost { server: u32 },
    /// master → every node: `server`'s node left the job (its shards were moved away and
    /// every node drained what it had sent there): stop the link to it and forget it.
    ServerLeft { server: u32 },
    /// master → server node: a failed server's `shard` was re-created on `to_server`; the
    /// node's server `server` sends what it forwards or holds for the shard there from now
    /// on (it may be forwarding it to the failed server, or holding it stranded).
    ShardRelocated {
        server: u32,
        shard: u32,
        to_server: u32,
    },
    /// node → master (a job with server recovery): this node's link to `server`'s node
    /// broke, and its traffic for that server now waits for the master to re-create the
    /// server's shards elsewhere (sent once per server). The master gives the server's node
    /// its lease to be declared dead; a node still in the job after it was cut off from this
    /// one only (a partition between them), which ends the job at once instead of after the
    /// node's whole wait.
    ServerAwaited { server: u32 },

    // ---- worker recovery: staged flushes committed by the master ----
    /// worker node → master: every part of flush `flush_id` is staged (on `servers`); the
    /// master commits it and only then hands `completions` (the tasks whose updates that
    /// flush carries) to the driver.
    FlushStaged {
        flush_id: u64,
        servers: Vec<u32>,
        completions: Vec<CompletionWire>,
    },
    /// master → server node: apply the part that node `node_id` staged for flush
    /// `flush_id` on `server` (a second commit of it is a no-op). Answered with
    /// [`Message::FlushCommitted`].
    CommitFlush {
        request_id: u64,
        server: u32,
        node_id: u32,
        flush_id: u64,
    },
    /// server node → master: the answer to [`Message::CommitFlush`]; `error` is `None` when
    /// the part is applied.
    FlushCommitted {
        request_id: u64,
        error: Option<String>,
    },
    /// master → server node: worker node `node_id` died; drop every part it staged on
    /// `server` and not committed, and refuse the parts it stages from now on.
    DropStaged { server: u32, node_id: u32 },
    /// master → worker node: re-create `executor`, whose worker died with it
    /// (`App::recover_executor`), then run the micro-tasks sent to it. `from_checkpoint`:
    /// the consistent checkpoint whose saved state of it comes along (`state`, or fetched
    /// from the master when `fetch` is set); `None`: no saved state (`state` empty). Answered
    /// with [`Message::ExecutorAdopted`] once it runs there.
    CreateExecutor {
        request_id: u64,
        executor: u32,
        from_checkpoint: Option<u64>,
        state: Vec<u8>,
        fetch: Option<StateFetch>,
    },

    // ---- exact lost updates of a dead server ----
    /// master → node: a checkpoint round's save on `server` (its save epoch `epoch`) is in
    /// the checkpoint's image: the node may forget what it keeps of the deltas `server`
    /// applied to `keys` before that save. `applied` (in a first message of a save, with
    /// no keys, and only the node's own): the flush parts `server` applied before that
    /// save, whose rows among the save's keys a node that still holds such a part
    /// unacknowledged must not send again.
    RowsSaved {
        server: u32,
        epoch: u64,
        keys: Vec<ParamKeyWire>,
        applied: Vec<AppliedPartWire>,
    },
    /// master → node: `server` died; what did it acknowledge to this node since each row's
    /// last save? Answered with [`Message::LostUpdates`].
    LostUpdatesQuery { request_id: u64, server: u32 },
    /// node → master: part `part` of `parts` of the answer to [`Message::LostUpdatesQuery`]
    /// (the rows in parts of a bounded size, by part number; `Inexact` is always one part).
    LostUpdates {
        request_id: u64,
        result: LostUpdatesResult,
        part: u32,
        parts: u32,
    },

    // ---- consistent checkpoints ----
    /// master → worker node: send `executor`'s saved state, keeping it (between two of its
    /// micro-tasks; a consistent checkpoint's capture). Answered with
    /// [`Message::ExecutorSaved`].
    SaveExecutor { request_id: u64, executor: u32 },
    /// worker node → master: the answer to [`Message::SaveExecutor`]: the state, where to
    /// fetch it, or why there is none.
    ExecutorSaved {
        request_id: u64,
        result: ExecutorSaveResult,
    },

    // ---- the job's end ----
    /// master → node: send this node's counters (its parameter traffic, and its server's
    /// if it has one). Answered with [`Message::Stats`].
    StatsQuery { request_id: u64 },
    /// node → master: the answer to [`Message::StatsQuery`]: the counters, encoded by the
    /// runtime (opaque here, like task payloads; the protocol version pins their layout).
    Stats { request_id: u64, counters: Vec<u8> },
    /// node → master, unasked, every few seconds while the node runs: its counters as
    /// [`Message::Stats`] carries them, which the master keeps in case the node dies (a
    /// dead node cannot be asked).
    StatsReport { counters: Vec<u8> },
}

impl RowWire {
    /// Bytes of the row's values.
    pub fn value_bytes(&self) -> usize {
        match self {
            RowWire::F32(v) => v.len() * 4,
            RowWire::I64(v) => v.len() * 8,
        }
    }
}

impl Message {
    /// About how many payload bytes this message encodes to: exact enough for the row
    /// values that dominate large messages, so the encoder allocates once.
    pub fn payload_size_hint(&self) -> usize {
        let keyed = |rows: &[(ParamKeyWire, RowWire)]| {
            rows.iter()
                .map(|(_, r)| r.value_bytes() + PER_ROW)
                .sum::<usize>()
        };
        let body = match self {
            Message::Rows {
                rows: RowsResult::Ok(rows),
                ..
            } => rows.iter().map(|r| r.value_bytes() + PER_ROW).sum(),
            Message::Apply { updates, .. } => keyed(updates),
            Message::DumpRows { rows, .. } => keyed(rows),
            Message::CreateExecutor { state, .. } => state.len(),
            Message::AdoptExecutor { state, pending, .. }
            | Message::ExecutorReleased {
                result: ReleaseResult::Released { state, pending },
                ..
            } => state.len() + pending.iter().map(|t| t.args.len() + 64).sum::<usize>(),
            Message::ExecutorReleased {
                result: ReleaseResult::Parked { pending, .. },
                ..
            } => pending.iter().map(|t| t.args.len() + 64).sum::<usize>(),
            Message::StateChunk { data, .. } => data.len(),
            Message::ExecutorSaved {
                result: ExecutorSaveResult::Saved(state),
                ..
            } => state.len(),
            Message::Saved {
                result:
                    SaveResult::Ok {
                        saved,
                        not_owned,
                        applied,
                        ..
                    },
                ..
            } => keyed(saved) + (not_owned.len() + applied.len()) * PER_ROW,
            Message::RowsSaved { keys, applied, .. } => (keys.len() + applied.len()) * PER_ROW,
            Message::LostUpdates {
                result: LostUpdatesResult::Ok(rows),
                ..
            } => rows
                .iter()
                .map(|(_, by_epoch)| {
                    let sums: usize = by_epoch
                        .iter()
                        .map(|(_, r)| r.value_bytes() + PER_ROW + 8)
                        .sum();
                    sums + PER_ROW
                })
                .sum(),
            Message::Distances {
                result: DistancesResult::Ok(distances),
                ..
            } => distances.len() * PER_ROW,
            Message::CheckpointSave { keys, .. } => keys.len() * PER_ROW,
            Message::ResetRows { rows, .. } => rows
                .iter()
                .map(|(_, r)| r.as_ref().map_or(0, RowWire::value_bytes) + PER_ROW)
                .sum(),
            Message::TakeOverShard { rows, parts, .. } => {
                let parts: usize = parts.iter().map(|p| (p.keys.len() + 1) * PER_ROW).sum();
                rows.iter().map(ShardRowWire::bytes).sum::<usize>() + parts
            }
            _ => 0,
        };
        body + 256
    }

    /// The kind byte written in this message's frame header.
    pub fn kind(&self) -> MessageKind {
        match self {
            Message::Hello(_) => MessageKind::Hello,
            Message::Welcome(_) => MessageKind::Welcome,
            Message::Refused { .. } => MessageKind::Refused,
            Message::Assign(_) => MessageKind::Assign,
            Message::Placement(_) => MessageKind::Placement,
            Message::Ready { .. } => MessageKind::Ready,
            Message::RunTasks { .. } => MessageKind::RunTasks,
            Message::Completed { .. } => MessageKind::Completed,
            Message::Failed { .. } => MessageKind::Failed,
            Message::Get { .. } => MessageKind::Get,
            Message::Rows { .. } => MessageKind::Rows,
            Message::Apply { .. } => MessageKind::Apply,
            Message::Applied { .. } => MessageKind::Applied,
            Message::Dump { .. } => MessageKind::Dump,
            Message::DumpRows { .. } => MessageKind::DumpRows,
            Message::Heartbeat { .. } => MessageKind::Heartbeat,
            Message::HeartbeatAck { .. } => MessageKind::HeartbeatAck,
            Message::Shutdown { .. } => MessageKind::Shutdown,
            Message::JobEnded { .. } => MessageKind::JobEnded,
            Message::ReleaseExecutor { .. } => MessageKind::ReleaseExecutor,
            Message::ExecutorReleased { .. } => MessageKind::ExecutorReleased,
            Message::AdoptExecutor { .. } => MessageKind::AdoptExecutor,
            Message::HandOffShard { .. } => MessageKind::HandOffShard,
            Message::ShardHandedOff { .. } => MessageKind::ShardHandedOff,
            Message::TakeOverShard { .. } => MessageKind::TakeOverShard,
            Message::TookOver { .. } => MessageKind::TookOver,
            Message::Reroute { .. } => MessageKind::Reroute,
            Message::Leaving { .. } => MessageKind::Leaving,
            Message::DrainServer { .. } => MessageKind::DrainServer,
            Message::ServerDrained { .. } => MessageKind::ServerDrained,
            Message::ScaleCommand { .. } => MessageKind::ScaleCommand,
            Message::ScaleDone { .. } => MessageKind::ScaleDone,
            Message::ExecutorAdopted { .. } => MessageKind::ExecutorAdopted,
            Message::FetchState { .. } => MessageKind::FetchState,
            Message::StateChunk { .. } => MessageKind::StateChunk,
            Message::CheckpointDistances { .. } => MessageKind::CheckpointDistances,
            Message::Distances { .. } => MessageKind::Distances,
            Message::CheckpointSave { .. } => MessageKind::CheckpointSave,
            Message::Saved { .. } => MessageKind::Saved,
            Message::ResetRows { .. } => MessageKind::ResetRows,
            Message::ResetDone { .. } => MessageKind::ResetDone,
            Message::ServerLost { .. } => MessageKind::ServerLost,
            Message::ServerLeft { .. } => MessageKind::ServerLeft,
            Message::ShardRelocated { .. } => MessageKind::ShardRelocated,
            Message::ServerAwaited { .. } => MessageKind::ServerAwaited,
            Message::FlushStaged { .. } => MessageKind::FlushStaged,
            Message::CommitFlush { .. } => MessageKind::CommitFlush,
            Message::FlushCommitted { .. } => MessageKind::FlushCommitted,
            Message::DropStaged { .. } => MessageKind::DropStaged,
            Message::CreateExecutor { .. } => MessageKind::CreateExecutor,
            Message::RowsSaved { .. } => MessageKind::RowsSaved,
            Message::LostUpdatesQuery { .. } => MessageKind::LostUpdatesQuery,
            Message::LostUpdates { .. } => MessageKind::LostUpdates,
            Message::SaveExecutor { .. } => MessageKind::SaveExecutor,
            Message::ExecutorSaved { .. } => MessageKind::ExecutorSaved,
            Message::StatsQuery { .. } => MessageKind::StatsQuery,
            Message::Stats { .. } => MessageKind::Stats,
            Message::StatsReport { .. } => MessageKind::StatsReport,
        }
    }

    /// The typed server id of a request to a server (`Get`, `Apply`, `Dump`, a checkpoint
    /// request, `ResetRows`, `CommitFlush`, `DropStaged`).
    pub fn server_id(&self) -> Option<ServerId> {
        match self {
            Message::Get { server, .. }
            | Message::Apply { server, .. }
            | Message::Dump { server, .. }
            | Message::CheckpointDistances { server, .. }
            | Message::CheckpointSave { server, .. }
            | Message::ResetRows { server, .. }
            | Message::CommitFlush { server, .. }
            | Message::DropStaged { server, .. } => Some(ServerId(*server)),
            _ => None,
        }
    }
}

impl ArchivedMessage {
    /// The kind of an archived (validated, not yet deserialized) message.
    pub fn kind(&self) -> MessageKind {
        match self {
            ArchivedMessage::Hello(_) => MessageKind::Hello,
            ArchivedMessage::Welcome(_) => MessageKind::Welcome,
            ArchivedMessage::Refused { .. } => MessageKind::Refused,
            ArchivedMessage::Assign(_) => MessageKind::Assign,
            ArchivedMessage::Placement(_) => MessageKind::Placement,
            ArchivedMessage::Ready { .. } => MessageKind::Ready,
            ArchivedMessage::RunTasks { .. } => MessageKind::RunTasks,
            ArchivedMessage::Completed { .. } => MessageKind::Completed,
            ArchivedMessage::Failed { .. } => MessageKind::Failed,
            ArchivedMessage::Get { .. } => MessageKind::Get,
            ArchivedMessage::Rows { .. } => MessageKind::Rows,
            ArchivedMessage::Apply { .. } => MessageKind::Apply,
            ArchivedMessage::Applied { .. } => MessageKind::Applied,
            ArchivedMessage::Dump { .. } => MessageKind::Dump,
            ArchivedMessage::DumpRows { .. } => MessageKind::DumpRows,
            ArchivedMessage::Heartbeat { .. } => MessageKind::Heartbeat,
            ArchivedMessage::HeartbeatAck { .. } => MessageKind::HeartbeatAck,
            ArchivedMessage::Shutdown { .. } => MessageKind::Shutdown,
            ArchivedMessage::JobEnded { .. } => MessageKind::JobEnded,
            ArchivedMessage::ReleaseExecutor { .. } => MessageKind::ReleaseExecutor,
            ArchivedMessage::ExecutorReleased { .. } => MessageKind::ExecutorReleased,
            ArchivedMessage::AdoptExecutor { .. } => MessageKind::AdoptExecutor,
            ArchivedMessage::HandOffShard { .. } => MessageKind::HandOffShard,
            ArchivedMessage::ShardHandedOff { .. } => MessageKind::ShardHandedOff,
            ArchivedMessage::TakeOverShard { .. } => MessageKind::TakeOverShard,
            ArchivedMessage::TookOver { .. } => MessageKind::TookOver,
            ArchivedMessage::Reroute { .. } => MessageKind::Reroute,
            ArchivedMessage::Leaving { .. } => MessageKind::Leaving,
            ArchivedMessage::DrainServer { .. } => MessageKind::DrainServer,
            ArchivedMessage::ServerDrained { .. } => MessageKind::ServerDrained,
            ArchivedMessage::ScaleCommand { .. } => MessageKind::ScaleCommand,
            ArchivedMessage::ScaleDone { .. } => MessageKind::ScaleDone,
            ArchivedMessage::ExecutorAdopted { .. } => MessageKind::ExecutorAdopted,
            ArchivedMessage::FetchState { .. } => MessageKind::FetchState,
            ArchivedMessage::StateChunk { .. } => MessageKind::StateChunk,
            ArchivedMessage::CheckpointDistances { .. } => MessageKind::CheckpointDistances,
            ArchivedMessage::Distances { .. } => MessageKind::Distances,
            ArchivedMessage::CheckpointSave { .. } => MessageKind::CheckpointSave,
            ArchivedMessage::Saved { .. } => MessageKind::Saved,
            ArchivedMessage::ResetRows { .. } => MessageKind::ResetRows,
            ArchivedMessage::ResetDone { .. } => MessageKind::ResetDone,
            ArchivedMessage::ServerLost { .. } => MessageKind::ServerLost,
            ArchivedMessage::ServerLeft { .. } => MessageKind::ServerLeft,
            ArchivedMessage::ShardRelocated { .. } => MessageKind::ShardRelocated,
            ArchivedMessage::ServerAwaited { .. } => MessageKind::ServerAwaited,
            ArchivedMessage::FlushStaged { .. } => MessageKind::FlushStaged,
            ArchivedMessage::CommitFlush { .. } => MessageKind::CommitFlush,
            ArchivedMessage::FlushCommitted { .. } => MessageKind::FlushCommitted,
            ArchivedMessage::DropStaged { .. } => MessageKind::DropStaged,
            ArchivedMessage::CreateExecutor { .. } => MessageKind::CreateExecutor,
            ArchivedMessage::RowsSaved { .. } => MessageKind::RowsSaved,
            ArchivedMessage::LostUpdatesQuery { .. } => MessageKind::LostUpdatesQuery,
            ArchivedMessage::LostUpdates { .. } => MessageKind::LostUpdates,
            ArchivedMessage::SaveExecutor { .. } => MessageKind::SaveExecutor,
            ArchivedMessage::ExecutorSaved { .. } => MessageKind::ExecutorSaved,
            ArchivedMessage::StatsQuery { .. } => MessageKind::StatsQuery,
            ArchivedMessage::Stats { .. } => MessageKind::Stats,
            ArchivedMessage::StatsReport { .. } => MessageKind::StatsReport,
        }
    }
}

impl Assignment {
    /// The assigned shards as typed ids.
    pub fn shard_ids(&self) -> impl Iterator<Item = ShardId> + '_ {
        self.shards.iter().map(|s| ShardId(*s))
    }

    /// The assigned executors as typed ids.
    pub fn executor_ids(&self) -> impl Iterator<Item = ExecutorId> + '_ {
        self.executors.iter().map(|e| ExecutorId(*e))
    }
}

/// The one-byte message discriminant of a frame header. Numbers are part of the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum MessageKind {
    Hello = 1,
    Welcome = 2,
    Refused = 3,
    Assign = 4,
    Placement = 5,
    Ready = 6,
    RunTasks = 7,
    Completed = 8,
    Failed = 9,
    Get = 10,
    Rows = 11,
    Apply = 12,
    Applied = 13,
    Dump = 14,
    DumpRows = 15,
    Heartbeat = 16,
    HeartbeatAck = 17,
    Shutdown = 18,
    JobEnded = 19,
    ReleaseExecutor = 20,
    ExecutorReleased = 21,
    AdoptExecutor = 22,
    HandOffShard = 23,
    ShardHandedOff = 24,
    TakeOverShard = 25,
    TookOver = 26,
    Reroute = 27,
    Leaving = 28,
    DrainServer = 29,
    ServerDrained = 30,
    ScaleCommand = 31,
    ScaleDone = 32,
    ExecutorAdopted = 33,
    FetchState = 34,
    StateChunk = 35,
    CheckpointDistances = 36,
    Distances = 37,
    CheckpointSave = 38,
    Saved = 39,
    ResetRows = 40,
    ResetDone = 41,
    ServerLost = 42,
    FlushStaged = 43,
    CommitFlush = 44,
    FlushCommitted = 45,
    DropStaged = 46,
    CreateExecutor = 47,
    RowsSaved = 48,
    LostUpdatesQuery = 49,
    LostUpdates = 50,
    SaveExecutor = 51,
    ExecutorSaved = 52,
    ServerLeft = 53,
    ShardRelocated = 54,
    ServerAwaited = 55,
    StatsQuery = 56,
    Stats = 57,
    StatsReport = 58,
}

impl MessageKind {
    /// How many kinds exist; kind bytes run `1..=COUNT`.
    pub const COUNT: usize = 58;

    /// Every kind, in number order.
    pub const ALL: [MessageKind; Self::COUNT] = [
        MessageKind::Hello,
        MessageKind::Welcome,
        MessageKind::Refused,
        MessageKind::Assign,
        MessageKind::Placement,
        MessageKind::Ready,
        MessageKind::RunTasks,
        MessageKind::Completed,
        MessageKind::Failed,
        MessageKind::Get,
        MessageKind::Rows,
        MessageKind::Apply,
        MessageKind::Applied,
        MessageKind::Dump,
        MessageKind::DumpRows,
        MessageKind::Heartbeat,
        MessageKind::HeartbeatAck,
        MessageKind::Shutdown,
        MessageKind::JobEnded,
        MessageKind::ReleaseExecutor,
        MessageKind::ExecutorReleased,
        MessageKind::AdoptExecutor,
        MessageKind::HandOffShard,
        MessageKind::ShardHandedOff,
        MessageKind::TakeOverShard,
        MessageKind::TookOver,
        MessageKind::Reroute,
        MessageKind::Leaving,
        MessageKind::DrainServer,
        MessageKind::ServerDrained,
        MessageKind::ScaleCommand,
        MessageKind::ScaleDone,
        MessageKind::ExecutorAdopted,
        MessageKind::FetchState,
        MessageKind::StateChunk,
        MessageKind::CheckpointDistances,
        MessageKind::Distances,
        MessageKind::CheckpointSave,
        MessageKind::Saved,
        MessageKind::ResetRows,
        MessageKind::ResetDone,
        MessageKind::ServerLost,
        MessageKind::FlushStaged,
        MessageKind::CommitFlush,
        MessageKind::FlushCommitted,
        MessageKind::DropStaged,
        MessageKind::CreateExecutor,
        MessageKind::RowsSaved,
        MessageKind::LostUpdatesQuery,
        MessageKind::LostUpdates,
        MessageKind::SaveExecutor,
        MessageKind::ExecutorSaved,
        MessageKind::ServerLeft,
        MessageKind::ShardRelocated,
        MessageKind::ServerAwaited,
        MessageKind::StatsQuery,
        MessageKind::Stats,
        MessageKind::StatsReport,
    ];

    /// The kind a header byte names, if any.
    pub fn from_u8(byte: u8) -> Option<Self> {
        let index = usize::from(byte).checked_sub(1)?;
        Self::ALL.get(index).copied()
    }

    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// Position in [`Self::ALL`] (`as_u8() - 1`), for per-kind tables.
    pub fn index(self) -> usize {
        usize::from(self.as_u8()) - 1
    }

    /// A short lowercase name for logs and counters.
    pub fn name(self) -> &'static str {
        match self {
            MessageKind::Hello => "hello",
            MessageKind::Welcome => "welcome",
            MessageKind::Refused => "refused",
            MessageKind::Assign => "assign",
            MessageKind::Placement => "placement",
            MessageKind::Ready => "ready",
            MessageKind::RunTasks => "run_tasks",
            MessageKind::Completed => "completed",
            MessageKind::Failed => "failed",
            MessageKind::Get => "get",
            MessageKind::Rows => "rows",
            MessageKind::Apply => "apply",
            MessageKind::Applied => "applied",
            MessageKind::Dump => "dump",
            MessageKind::DumpRows => "dump_rows",
            MessageKind::Heartbeat => "heartbeat",
            MessageKind::HeartbeatAck => "heartbeat_ack",
            MessageKind::Shutdown => "shutdown",
            MessageKind::JobEnded => "job_ended",
            MessageKind::ReleaseExecutor => "release_executor",
            MessageKind::ExecutorReleased => "executor_released",
            MessageKind::AdoptExecutor => "adopt_executor",
            MessageKind::HandOffShard => "hand_off_shard",
            MessageKind::ShardHandedOff => "shard_handed_off",
            MessageKind::TakeOverShard => "take_over_shard",
            MessageKind::TookOver => "took_over",
            MessageKind::Reroute => "reroute",
            MessageKind::Leaving => "leaving",
            MessageKind::DrainServer => "drain_server",
            MessageKind::ServerDrained => "server_drained",
            MessageKind::ScaleCommand => "scale_command",
            MessageKind::ScaleDone => "scale_done",
            MessageKind::ExecutorAdopted => "executor_adopted",
            MessageKind::FetchState => "fetch_state",
            MessageKind::StateChunk => "state_chunk",
            MessageKind::CheckpointDistances => "checkpoint_distances",
            MessageKind::Distances => "distances",
            MessageKind::CheckpointSave => "checkpoint_save",
            MessageKind::Saved => "saved",
            MessageKind::ResetRows => "reset_rows",
            MessageKind::ResetDone => "reset_done",
            MessageKind::ServerLost => "server_lost",
            MessageKind::FlushStaged => "flush_staged",
            MessageKind::CommitFlush => "commit_flush",
            MessageKind::FlushCommitted => "flush_committed",
            MessageKind::DropStaged => "drop_staged",
            MessageKind::CreateExecutor => "create_executor",
            MessageKind::RowsSaved => "rows_saved",
            MessageKind::LostUpdatesQuery => "lost_updates_query",
            MessageKind::LostUpdates => "lost_updates",
            MessageKind::SaveExecutor => "save_executor",
            MessageKind::ExecutorSaved => "executor_saved",
            MessageKind::ServerLeft => "server_left",
            MessageKind::ShardRelocated => "shard_relocated",
            MessageKind::ServerAwaited => "server_awaited",
            MessageKind::StatsQuery => "stats_query",
            MessageKind::Stats => "stats",
            MessageKind::StatsReport => "stats_report",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_hint_covers_row_payloads_so_encoding_allocates_once() {
        let rows = |n: usize, values: usize| -> Vec<(ParamKeyWire, RowWire)> {
            (0..n)
                .map(|r| {
                    let key = ParamKeyWire {
                        table: 1,
                        row: r as u64,
                    };
                    let row = if r % 2 == 0 {
                        RowWire::F32(vec![0.5; values])
                    } else {
                        RowWire::I64(vec![3; values])
                    };
                    (key, row)
                })
                .collect()
        };
        for (n, values) in [(1, 1), (3, 17), (40, 1000), (8, 65_536)] {
            for message in [
                Message::DumpRows {
                    request_id: 7,
                    rows: rows(n, values),
                    part: 0,
                    parts: 1,
                },
                Message::Apply {
                    request_id: 1,
                    server: 0,
                    node_id: 2,
                    flush_id: 3,
                    staged: n % 2 == 0,
                    held_from: 1,
                    forwarded: n % 3 == 0,
                    updates: rows(n, values),
                },
                Message::Rows {
                    request_id: 9,
                    rows: RowsResult::Ok(rows(n, values).into_iter().map(|(_, r)| r).collect()),
                    part: 0,
                    parts: 1,
                },
                Message::Saved {
                    request_id: 4,
                    result: SaveResult::Ok {
                        saved: rows(n, values),
                        not_owned: rows(n, 1).into_iter().map(|(k, _)| k).collect(),
                        epoch: 3,
                        applied: Vec::new(),
                    },
                    part: 1,
                    parts: 2,
                },
                Message::LostUpdates {
                    request_id: 6,
                    result: LostUpdatesResult::Ok(
                        rows(n, values)
                            .into_iter()
                            .map(|(k, r)| (k, vec![(2, r)]))
                            .collect(),
                    ),
                    part: 0,
                    parts: 1,
                },
                Message::ResetRows {
                    request_id: 5,
                    server: 1,
                    rows: rows(n, values)
                        .into_iter()
                        .enumerate()
                        .map(|(i, (k, r))| (k, (i % 3 != 0).then_some(r)))
                        .collect(),
                },
            ] {
                let frame = crate::encode(&message).unwrap();
                let payload = frame.len() - crate::FRAME_HEADER_BYTES;
                let hint = message.payload_size_hint();
                assert!(
                    hint >= payload,
                    "{:?}: hint {hint} < {payload}",
                    message.kind()
                );
                assert!(
                    hint <= payload + payload / 4 + 512,
                    "{:?}: hint {hint} far above {payload}",
                    message.kind()
                );
            }
        }
    }

    #[test]
    fn kind_numbers_match_their_position() {
        for (i, kind) in MessageKind::ALL.iter().enumerate() {
            assert_eq!(kind.index(), i);
            assert_eq!(MessageKind::from_u8(kind.as_u8()), Some(*kind));
        }
        assert_eq!(MessageKind::from_u8(0), None);
        assert_eq!(MessageKind::from_u8(MessageKind::COUNT as u8 + 1), None);
        assert_eq!(MessageKind::from_u8(u8::MAX), None);
    }

    #[test]
    fn rows_and_keys_convert_both_ways() {
        let key = ParamKey::new(TableId(3), 77);
        assert_eq!(ParamKey::from(ParamKeyWire::from(key)), key);
        for row in [RowData::F32(vec![1.5, -2.0]), RowData::I64(vec![7, -9, 0])] {
            assert_eq!(RowData::from(RowWire::from(&row)), row);
            assert_eq!(RowData::from(RowWire::from(row.clone())), row);
        }
    }

    #[test]
    fn envelope_accessors_give_typed_ids() {
        let t = TaskEnvelope::new(TaskId(9), ExecutorId(2), Version(5), vec![1]);
        assert_eq!(
            (t.task_id(), t.executor_id(), t.dispatch_version()),
            (TaskId(9), ExecutorId(2), Version(5))
        );
        let c = CompletionWire::new(TaskId(9), ExecutorId(2), Version(5), vec![]);
        assert_eq!(
            (c.task_id(), c.executor_id(), c.dispatched_at_version()),
            (TaskId(9), ExecutorId(2), Version(5))
        );
    }
}
