//! The master's book of dispatched micro-tasks, for jobs that recover worker nodes
//! ([`super::worker_recovery`]): every task dispatched is kept (its executor, version and
//! encoded arguments) until its completion is handed to the driver, so the tasks of a dead
//! worker's executors whose updates were never committed can be dispatched again.
//!
//! A task is in one of two states: *dispatched* (it may be queued, running, finished on its
//! node, or staged there) or *committing* (the master handled the report of the flush that
//! carries its updates and is committing it: it completes, whatever happens to its node).
//! The rerun set of an executor is its dispatched tasks that are not committing, in task
//! order; a completion is handed to the driver once, and forgotten then. Where a dead
//! worker's executors go is [`harp_core::ExecutorMap::place_orphans`].

use harp_core::{ExecutorId, TaskId, Version};
use std::collections::{BTreeMap, BTreeSet};

/// One dispatched task as the master keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeptTask {
    pub executor: ExecutorId,
    pub version: Version,
    /// The app's arguments, encoded (postcard).
    pub args: Vec<u8>,
    committing: bool,
}

/// Every dispatched task whose completion the driver has not been handed.
#[derive(Debug, Default)]
pub(crate) struct TaskBook {
    tasks: BTreeMap<TaskId, KeptTask>,
}

impl TaskBook {
    /// `task` was dispatched to `executor` at `version` with these encoded arguments.
    pub(crate) fn dispatched(
        &mut self,
        task: TaskId,
        executor: ExecutorId,
        version: Version,
        args: Vec<u8>,
    ) {
        let kept = KeptTask {
            executor,
            version,
            args,
            committing: false,
        };
        self.tasks.insert(task, kept);
    }

    /// The flush carrying `task`'s updates is being committed: it will complete and is not
    /// run again. `false` if the book does not hold it (its completion was handed over).
    pub(crate) fn committing(&mut self, task: TaskId) -> bool {
        match self.tasks.get_mut(&task) {
            Some(kept) => {
                kept.committing = true;
                true
            }
            None => false,
        }
    }

    /// `task`'s completion is handed to the driver: forgotten. `false` if the book did not
    /// hold it (a completion already handed over: it must not be handed over again).
    pub(crate) fn delivered(&mut self, task: TaskId) -> bool {
        self.tasks.remove(&task).is_some()
    }

    /// The tasks of `executor` to dispatch again: dispatched and not committing, in task
    /// order (they stay in the book, as dispatched).
    pub(crate) fn to_rerun(&self, executor: ExecutorId) -> Vec<(TaskId, &KeptTask)> {
        self.tasks
            .iter()
            .filter(|(_, kept)| kept.executor == executor && !kept.committing)
            .map(|(task, kept)| (*task, kept))
            .collect()
    }

    /// The tasks of `executor` still dispatched (not committing) other than `except`: for
    /// an executor its worker released, those it finished there whose flush the master has
    /// not handled yet (its unstarted ones are `except`).
    pub(crate) fn unreported(
        &self,
        executor: ExecutorId,
        except: &BTreeSet<TaskId>,
    ) -> BTreeSet<TaskId> {
        self.to_rerun(executor)
            .into_iter()
            .map(|(task, _)| task)
            .filter(|task| !except.contains(task))
            .collect()
    }

    /// Tasks held (dispatched or committing).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book_of(tasks: &[(u64, u32)]) -> TaskBook {
        let mut book = TaskBook::default();
        for &(task, executor) in tasks {
            book.dispatched(
                TaskId(task),
                ExecutorId(executor),
                Version(task / 2),
                vec![task as u8],
            );
        }
        book
    }

    fn rerun_ids(book: &TaskBook, executor: u32) -> Vec<u64> {
        book.to_rerun(ExecutorId(executor))
            .iter()
            .map(|(t, _)| t.0)
            .collect()
    }

    #[test]
    fn the_rerun_set_is_dispatched_minus_committed_in_task_order() {
        // Executor 1 got tasks 0, 2, 3, 5, 8; executor 2 got 1, 4.
        let mut book = book_of(&[(5, 1), (0, 1), (1, 2), (3, 1), (2, 1), (4, 2), (8, 1)]);
        assert!(book.delivered(TaskId(0)), "completed and handed over");
        assert!(book.committing(TaskId(3)), "its flush is being committed");
        assert!(book.delivered(TaskId(4)));
        assert_eq!(rerun_ids(&book, 1), vec![2, 5, 8]);
        assert_eq!(rerun_ids(&book, 2), vec![1]);
        // The rerun tasks keep their version and arguments.
        let rerun = book.to_rerun(ExecutorId(1));
        assert_eq!(rerun[0].1.version, Version(1));
        assert_eq!(rerun[0].1.args, vec![2]);
        // A committing task leaves the book when its completion is handed over.
        assert_eq!(book.len(), 5);
        assert!(book.delivered(TaskId(3)));
        assert_eq!(rerun_ids(&book, 1), vec![2, 5, 8]);
        assert_eq!(book.len(), 4);
    }

    #[test]
    fn the_unreported_tasks_of_a_released_executor_are_dispatched_minus_committing_minus_its_unstarted_ones(
    ) {
        let mut book = book_of(&[(0, 1), (1, 1), (2, 2), (3, 1), (4, 1)]);
        assert!(book.committing(TaskId(0)), "its flush was reported");
        assert!(book.delivered(TaskId(1)), "handed to the driver");
        // Task 4 had not started: it moves with the executor.
        let unstarted = BTreeSet::from([TaskId(4)]);
        let ids = |set: BTreeSet<TaskId>| set.into_iter().map(|t| t.0).collect::<Vec<_>>();
        assert_eq!(ids(book.unreported(ExecutorId(1), &unstarted)), vec![3]);
        assert!(book.committing(TaskId(3)));
        assert!(book.unreported(ExecutorId(1), &unstarted).is_empty());
        assert_eq!(
            ids(book.unreported(ExecutorId(2), &BTreeSet::new())),
            vec![2]
        );
    }

    #[test]
    fn a_completion_is_handed_over_once() {
        let mut book = book_of(&[(7, 0)]);
        assert!(book.delivered(TaskId(7)));
        assert!(!book.delivered(TaskId(7)), "a second completion of it");
        assert!(!book.committing(TaskId(7)));
        assert!(rerun_ids(&book, 0).is_empty());
    }
}
