//! Stale-synchronous dispatch expressed by a driver (Litz §4.4, DESIGN §2.1).
//!
//! With staleness `s`, every task of iteration `i` is dispatched once the last task of
//! iteration `i - s - 1` completed; `s = 0` is bulk-synchronous. The schedule counts
//! completions per iteration and says which iterations may be dispatched. A limit caps the
//! iterations that may start (a barrier, e.g. at the end of an epoch).

use crate::error::CoreError;
use std::collections::BTreeMap;

/// Which iterations a driver may dispatch under a staleness bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SspSchedule {
    staleness: u64,
    tasks_per_iteration: u32,
    limit: u64,
    next: u64,
    complete_prefix: u64,
    done: BTreeMap<u64, u32>,
}

impl SspSchedule {
    /// A schedule whose iterations each consist of `tasks_per_iteration` tasks (at least 1).
    pub fn new(staleness: u32, tasks_per_iteration: u32) -> Self {
        Self {
            staleness: staleness as u64,
            tasks_per_iteration: tasks_per_iteration.max(1),
            limit: 0,
            next: 0,
            complete_prefix: 0,
            done: BTreeMap::new(),
        }
    }

    /// The same schedule restarted with every iteration below `iteration` complete and no
    /// iteration running (resuming from saved driver state).
    pub fn restarted_at(&self, iteration: u64) -> Self {
        Self {
            limit: iteration,
            next: iteration,
            complete_prefix: iteration,
            done: BTreeMap::new(),
            ..self.clone()
        }
    }

    /// Allows iterations below `limit` to start (limits only grow).
    pub fn allow_until(&mut self, limit: u64) {
        self.limit = self.limit.max(limit);
    }

    /// Iterations that may be dispatched now, in order; each is returned once.
    pub fn ready(&mut self) -> Vec<u64> {
        let window_end = self.complete_prefix + self.staleness + 1;
        let end = window_end.min(self.limit);
        let out: Vec<u64> = (self.next..end.max(self.next)).collect();
        self.next = self.next.max(end);
        out
    }

    /// Records one completed task of `iteration`; returns whether the iteration is now complete.
    pub fn complete(&mut self, iteration: u64) -> Result<bool, CoreError> {
        if iteration >= self.next || iteration < self.complete_prefix {
            return Err(CoreError::InvalidArgument(format!(
                "completion for iteration {iteration}, which is not running"
            )));
        }
        let count = self.done.entry(iteration).or_insert(0);
        *count += 1;
        if *count > self.tasks_per_iteration {
            return Err(CoreError::InvalidArgument(format!(
                "more than {} completions for iteration {iteration}",
                self.tasks_per_iteration
            )));
        }
        let full = *count == self.tasks_per_iteration;
        while self.done.get(&self.complete_prefix) == Some(&self.tasks_per_iteration) {
            self.done.remove(&self.complete_prefix);
            self.complete_prefix += 1;
        }
        Ok(full)
    }

    /// Every iteration below this one is complete.
    pub fn completed_prefix(&self) -> u64 {
        self.complete_prefix
    }

    /// Iterations dispatched so far.
    pub fn dispatched(&self) -> u64 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bsp_dispatches_one_iteration_at_a_time() {
        let mut s = SspSchedule::new(0, 2);
        s.allow_until(10);
        assert_eq!(s.ready(), vec![0]);
        assert!(s.ready().is_empty());
        assert!(!s.complete(0).unwrap());
        assert!(s.ready().is_empty());
        assert!(s.complete(0).unwrap());
        assert_eq!(s.ready(), vec![1]);
    }

    #[test]
    fn staleness_keeps_s_plus_one_iterations_in_flight_and_respects_limit() {
        let mut s = SspSchedule::new(2, 1);
        s.allow_until(4);
        assert_eq!(s.ready(), vec![0, 1, 2]);
        s.complete(1).unwrap(); // out of order: prefix does not move
        assert!(s.ready().is_empty());
        s.complete(0).unwrap();
        assert_eq!(s.ready(), vec![3]); // 4 would fit the window but the limit stops it
        s.complete(2).unwrap();
        assert!(s.ready().is_empty());
        s.allow_until(6);
        assert_eq!(s.ready(), vec![4, 5]);
    }

    #[test]
    fn bad_completions_are_refused() {
        let mut s = SspSchedule::new(0, 1);
        s.allow_until(1);
        assert!(s.complete(0).is_err()); // not dispatched yet
        s.ready();
        s.complete(0).unwrap();
        assert!(s.complete(0).is_err()); // already complete
    }
}
