//! Typed identifiers. Each is a small copyable newtype so that an executor id can never be
//! passed where a shard id is expected.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A logical executor: a slice of input data plus app state (Litz §4.3).
    ExecutorId(u32), "executor-"
);
id_type!(
    /// A worker: hosts executors and runs their micro-tasks.
    WorkerId(u32), "worker-"
);
id_type!(
    /// A server: hosts parameter-server shards.
    ServerId(u32), "server-"
);
id_type!(
    /// A logical partition of the parameter key space.
    ShardId(u32), "shard-"
);
id_type!(
    /// A dispatched micro-task, unique within a job.
    TaskId(u64), "task-"
);
id_type!(
    /// A named parameter table, numbered in declaration order.
    TableId(u16), "table-"
);

/// The address of one parameter row: a table and a `u64` row key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ParamKey {
    pub table: TableId,
    pub row: u64,
}

impl ParamKey {
    pub fn new(table: TableId, row: u64) -> Self {
        Self { table, row }
    }
}

impl fmt::Display for ParamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.table, self.row)
    }
}
