//! Ground truth the simulated system never sees, and the read check built on it.
//!
//! Every `update(key, delta)` a task makes becomes one numbered [`Contribution`]. A
//! [`Floor`] is what a task must observe: for each key, the contributions of every task
//! whose completion the driver was handed before dispatching it (Litz consistency rule,
//! DESIGN §2.1), and their sum.
//!
//! The ghost also keeps which contributions some server has applied (per key), and the
//! *custody* of every shard: the server holding its rows, or none while they travel to a
//! new owner.

use super::bits::Bits;
use super::{Kind, Violation};
use harp_core::{ParamKey, RowData, ServerId, ShardId, ShardMap, TaskId};

/// One `update(key, delta)` call of one task.
pub struct Contribution {
    pub task: TaskId,
    pub key: ParamKey,
    pub delta: Vec<i64>,
}

/// Every contribution made so far, numbered densely.
pub struct Ghost {
    width: usize,
    keys: usize,
    contributions: Vec<Contribution>,
    /// Contribution ids of each task, indexed by task id.
    by_task: Vec<Vec<u32>>,
    /// Contributions some server applied, indexed by row.
    applied: Vec<Bits>,
    /// The server holding each shard's rows; `None` while they travel.
    holder: Vec<Option<ServerId>>,
}

/// A row value as servers hold it and caches keep it: the numbers plus which
/// contributions they contain.
#[derive(Clone, Debug)]
pub struct Value {
    pub row: RowData,
    pub contribs: Bits,
}

/// What a task must observe, per key (indexed by row number).
#[derive(Clone, Debug)]
pub struct Floor {
    pub by_key: Vec<Bits>,
    pub sums: Vec<Vec<i64>>,
}

impl Ghost {
    pub fn new(keys: usize, width: usize, shards: &ShardMap) -> Self {
        Self {
            width,
            keys,
            contributions: Vec::new(),
            by_task: Vec::new(),
            applied: vec![Bits::default(); keys],
            holder: (0..shards.num_shards())
                .map(|s| shards.server_of(ShardId(s)).ok())
                .collect(),
        }
    }

    pub fn empty_floor(&self) -> Floor {
        Floor {
            by_key: vec![Bits::default(); self.keys],
            sums: vec![vec![0; self.width]; self.keys],
        }
    }

    /// Records an update call and returns its contribution id.
    pub fn add(&mut self, task: TaskId, key: ParamKey, delta: Vec<i64>) -> u32 {
        let id = self.contributions.len() as u32;
        self.contributions.push(Contribution { task, key, delta });
        let t = task.0 as usize;
        if self.by_task.len() <= t {
            self.by_task.resize(t + 1, Vec::new());
        }
        self.by_task[t].push(id);
        id
    }

    pub fn get(&self, id: u32) -> &Contribution {
        &self.contributions[id as usize]
    }

    pub fn of_task(&self, task: TaskId) -> &[u32] {
        self.by_task.get(task.0 as usize).map_or(&[], Vec::as_slice)
    }

    /// The element-wise sum of the deltas in `set`.
    pub fn sum(&self, set: &Bits) -> Vec<i64> {
        let mut out = vec![0; self.width];
        for id in set.iter() {
            for (o, d) in out.iter_mut().zip(&self.get(id).delta) {
                *o += d;
            }
        }
        out
    }

    /// Every contribution ever made to `key`.
    pub fn all_of_key(&self, key: ParamKey) -> Bits {
        let mut set = Bits::default();
        for (id, c) in self.contributions.iter().enumerate() {
            if c.key == key {
                set.insert(id as u32);
            }
        }
        set
    }

    /// A server applied `contribs` to `key`; each contribution may be applied once.
    pub fn record_applied(&mut self, key: ParamKey, contribs: &Bits) -> Result<(), Violation> {
        let applied = &mut self.applied[key.row as usize];
        if !contribs.is_disjoint(applied) {
            return Err(Violation::new(
                Kind::Duplicate,
                format!("a contribution to {key} was applied twice"),
            ));
        }
        applied.union_with(contribs);
        Ok(())
    }

    /// Has some server applied contribution `id`?
    pub fn is_applied(&self, id: u32) -> bool {
        self.applied[self.get(id).key.row as usize].contains(id)
    }

    /// The server holding `shard`'s rows; `None` while they travel.
    pub fn holder(&self, shard: ShardId) -> Option<ServerId> {
        self.holder[shard.0 as usize]
    }

    /// `from` sent `shard`'s rows away.
    pub fn rows_left(&mut self, shard: ShardId, from: ServerId) -> Result<(), Violation> {
        self.move_custody(shard, Some(from), None)
    }

    /// `to` received `shard`'s rows.
    pub fn rows_arrived(&mut self, shard: ShardId, to: ServerId) -> Result<(), Violation> {
        self.move_custody(shard, None, Some(to))
    }

    fn move_custody(
        &mut self,
        shard: ShardId,
        was: Option<ServerId>,
        now: Option<ServerId>,
    ) -> Result<(), Violation> {
        let holder = &mut self.holder[shard.0 as usize];
        if *holder != was {
            return Err(Violation::new(
                Kind::Protocol,
                format!("{shard} moved from {was:?} to {now:?}, but {holder:?} holds it"),
            ));
        }
        *holder = now;
        Ok(())
    }

    /// `floor` plus every contribution of `task` (the driver was handed its completion).
    pub fn raise(&self, floor: &mut Floor, task: TaskId) {
        for &id in self.of_task(task) {
            let c = self.get(id);
            let k = c.key.row as usize;
            floor.by_key[k].insert(id);
            for (s, d) in floor.sums[k].iter_mut().zip(&c.delta) {
                *s += d;
            }
        }
    }

    /// The consistency check of one value a task read. Returns whether the floor was
    /// non-empty (the check had something to catch).
    pub fn check_read(
        &self,
        task: TaskId,
        floor: &Floor,
        key: ParamKey,
        value: &Value,
    ) -> Result<bool, Violation> {
        let k = key.row as usize;
        let row = value.row.as_i64().unwrap_or(&[]);
        if row != self.sum(&value.contribs).as_slice() {
            return Err(Violation::new(
                Kind::WrongValue,
                format!("{task} read {key} = {row:?}, which is not the sum of its contributions"),
            ));
        }
        let missing = floor.by_key[k].minus(&value.contribs);
        let below = row.iter().zip(&floor.sums[k]).any(|(v, f)| v < f);
        if !missing.is_empty() || below {
            let tasks: Vec<u64> = missing.iter().map(|&c| self.get(c).task.0).collect();
            return Err(Violation::new(
                Kind::StaleRead,
                format!(
                    "{task} read {key} = {row:?} < floor {:?}; missing contributions {missing:?} \
                     of completed tasks {tasks:?}",
                    floor.sums[k]
                ),
            ));
        }
        Ok(floor.by_key[k].iter().next().is_some())
    }
}
