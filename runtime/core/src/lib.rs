//! harp's deterministic, IO-free core.
//!
//! Every protocol decision of the runtime lives here as plain state machines and pure
//! functions: no tokio, no sockets, no clocks, no OS randomness (DESIGN §3). The shell
//! (`harp` crate) owns the actors and the IO and calls into this crate.
//!
//! | module | owns |
//! |---|---|
//! | [`ids`] | typed identifiers (executors, workers, servers, shards, tasks, tables, keys) |
//! | [`key_hash`] | a fast, deterministic hash for the maps keyed by parameter keys |
//! | [`version`] | the master's version clock and task tagging (Litz §4.4) |
//! | [`cache_rule`] | when a cached parameter may serve a task (`task.version <= cached.version`) |
//! | [`rows`] | row values and additive aggregation of row deltas |
//! | [`update_log`] | per-node aggregation of updates between flushes |
//! | [`flush_book`] | which finished tasks wait on which flush; when completions may be reported |
//! | [`ssp`] | stale-synchronous dispatch: which iterations a driver may start |
//! | [`placement`] | the executor→worker and shard→server maps, and key→shard hashing |
//! | [`membership`] | the master's member table: joins, lease renewal by heartbeat, leaves, deaths by lease expiry |
//! | [`rebalance`] | re-balancing plans: which executors and shards move where when nodes join or leave (Litz §4.4) |
//! | [`scar`] | SCAR checkpoint decisions: parameter distances, which keys a running checkpoint saves and when, partial-recovery restore sets, rework cost and confidence intervals (SCAR §5.4–5.5) |

pub mod cache_rule;
pub mod error;
pub mod flush_book;
pub mod ids;
pub mod key_hash;
pub mod membership;
pub mod placement;
pub mod rebalance;
pub mod rows;
pub mod scar;
pub mod ssp;
pub mod update_log;
pub mod version;

pub use cache_rule::{cached_value_usable, should_replace_cached};
pub use error::CoreError;
pub use flush_book::{FlushBook, FlushId};
pub use ids::{ExecutorId, ParamKey, ServerId, ShardId, TableId, TaskId, WorkerId};
pub use key_hash::{BuildKeyHasher, KeyHasher, KeyMap};
pub use membership::{
    LeaseGrant, Member, MemberInfo, MembershipConfig, MembershipError, MembershipEvent,
    MembershipView, NodeId, NodeRoles,
};
pub use placement::{shard_of, ExecutorMap, ShardMap};
pub use rebalance::{
    balance, plan_executors, plan_rebalance, plan_shards, BalanceError, Move, Placed,
    RebalanceError, RebalanceInput, RebalancePlan,
};
pub use rows::{RowData, RowKind};
pub use scar::{
    CheckpointSelector, ConvergenceCriterion, Norm, RecoveryPlan, RecoveryReport, ReworkCost,
    ScarError, Selection,
};
pub use ssp::SspSchedule;
pub use update_log::UpdateLog;
pub use version::{Version, VersionClock};
