//! Flush bookkeeping: when may a finished micro-task's completion be reported?
//!
//! Invariant (DESIGN §2.2): a completion reaches the master only after every update the task
//! made has been applied by the servers. A task's updates are recorded into the node's update
//! log before it is marked finished, so the first flush begun after it finished carries
//! whatever of them an earlier flush did not. A task assigned to flush `F` is therefore
//! reportable once every flush `<= F` has been applied. Flushes may be acknowledged out of
//! order; the book releases tasks by the low watermark of applied flushes.
//!
//! Protocol for the shell: record updates → [`FlushBook::task_finished`] → (later)
//! [`FlushBook::begin_flush`] → drain the update log and send it → [`FlushBook::flush_applied`]
//! returns the tasks to report.

use crate::error::CoreError;
use crate::ids::TaskId;
use std::collections::{BTreeMap, BTreeSet};

/// Identifies one flush of a node's update log.
pub type FlushId = u64;

/// Tracks finished tasks, flushes in flight, and releases completions in flush order.
#[derive(Debug)]
pub struct FlushBook<T> {
    next_flush: FlushId,
    unassigned: Vec<(TaskId, T)>,
    waiting: BTreeMap<FlushId, Vec<(TaskId, T)>>,
    in_flight: BTreeSet<FlushId>,
}

impl<T> Default for FlushBook<T> {
    fn default() -> Self {
        Self {
            next_flush: 0,
            unassigned: Vec::new(),
            waiting: BTreeMap::new(),
            in_flight: BTreeSet::new(),
        }
    }
}

impl<T> FlushBook<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// A task finished; all of its updates are already in the update log (or in a flush).
    pub fn task_finished(&mut self, task: TaskId, payload: T) {
        self.unassigned.push((task, payload));
    }

    /// Finished tasks that no flush covers yet.
    pub fn unflushed_tasks(&self) -> usize {
        self.unassigned.len()
    }

    /// Flushes begun and not yet applied.
    pub fn flushes_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Tasks finished but not yet released (unflushed or waiting for their flush).
    pub fn pending_tasks(&self) -> usize {
        self.unassigned.len() + self.waiting.values().map(Vec::len).sum::<usize>()
    }

    /// Starts a flush: every task finished so far is covered by it. The caller must drain
    /// the update log *after* this call and send what it drained as this flush, and flushes
    /// must drain in the order they began (begin and drain under one lock): a later flush
    /// that drained first would carry updates of tasks this one covers.
    ///
    /// Every flush begun must eventually be passed to [`flush_applied`](Self::flush_applied),
    /// even one that covers no task: until it is, it holds back the release of every later
    /// flush's tasks (the low watermark).
    pub fn begin_flush(&mut self) -> FlushId {
        let id = self.next_flush;
        self.next_flush += 1;
        self.in_flight.insert(id);
        let covered = std::mem::take(&mut self.unassigned);
        if !covered.is_empty() {
            self.waiting.insert(id, covered);
        }
        id
    }

    /// Every delta of flush `id` has been applied by its server. Returns the tasks that
    /// became reportable, in flush order then finish order.
    pub fn flush_applied(&mut self, id: FlushId) -> Result<Vec<(TaskId, T)>, CoreError> {
        if !self.in_flight.remove(&id) {
            return Err(CoreError::UnknownFlush(id));
        }
        // Everything strictly below the oldest flush still in flight is applied.
        let watermark = self.in_flight.first().copied().unwrap_or(self.next_flush);
        let still_waiting = self.waiting.split_off(&watermark);
        let released = std::mem::replace(&mut self.waiting, still_waiting);
        Ok(released.into_values().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_only_after_covering_flush_applied() {
        let mut book = FlushBook::new();
        book.task_finished(TaskId(1), "a");
        let f0 = book.begin_flush();
        book.task_finished(TaskId(2), "b");
        let f1 = book.begin_flush();
        // f1 applied first: task 2 must wait for f0, which may carry part of its updates.
        assert!(book.flush_applied(f1).unwrap().is_empty());
        let released = book.flush_applied(f0).unwrap();
        assert_eq!(released, vec![(TaskId(1), "a"), (TaskId(2), "b")]);
        assert_eq!(book.pending_tasks(), 0);
    }

    #[test]
    fn unknown_or_repeated_flush_is_an_error() {
        let mut book: FlushBook<()> = FlushBook::new();
        assert!(book.flush_applied(0).is_err());
        let f = book.begin_flush();
        book.flush_applied(f).unwrap();
        assert_eq!(book.flush_applied(f), Err(CoreError::UnknownFlush(f)));
    }

    #[test]
    fn task_finished_during_flush_waits_for_next() {
        let mut book = FlushBook::new();
        let f0 = book.begin_flush();
        book.task_finished(TaskId(7), ());
        assert!(book.flush_applied(f0).unwrap().is_empty());
        assert_eq!(book.unflushed_tasks(), 1);
        let f1 = book.begin_flush();
        assert_eq!(book.flush_applied(f1).unwrap(), vec![(TaskId(7), ())]);
    }
}
