//! Following the node count an outside scheduler asks for (with `harp run --etcd`, the job's
//! `/harp/jobs/<job>/desired_nodes` key, fed to [`ClusterOptions::desired_nodes`]): each value
//! grows the job through the node launcher, as `harp scale --add N` does, or shrinks it by
//! letting the most recently joined nodes leave, as `harp scale --remove NODE` does. Every
//! join and leave this causes is a scale event like any other; what the roster refuses (the
//! last worker or server, `--add` on a master started with `--nodes`) is a failed one.
//!
//! The decision is a pure function ([`plan`]) of the nodes that stay and the count asked for.
//! The shell ([`follow_desired`]) applies one value at a time; values that arrive meanwhile
//! are not queued: once the value being applied is done, only the latest one is applied.
//! Growing is done when the started nodes have joined (their join events) or the join
//! deadline passed, so a value written twice does not start nodes twice. Nodes that are
//! leaving do not count; nodes that leave or join on their own later are not replaced or
//! removed until the next value.
//!
//! [`ClusterOptions::desired_nodes`]: crate::ClusterOptions::desired_nodes

use super::{leave, lock, report, NodeLauncher, Roster, RosterContext, NODES_STARTED_MAX};
use crate::app::App;
use crate::control::{EventSink, JobEvent};
use crate::error::HarpError;
use crate::master::ScaleReport;
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// One step towards the desired node count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The job has as many nodes as asked for.
    Hold,
    /// Start this many node processes.
    Launch(u32),
    /// Let these nodes leave, in this order (the most recently joined first).
    Remove(Vec<u32>),
}

/// What brings the nodes in `staying` (the job's nodes that are not leaving, in any order)
/// to `desired` nodes. Node ids are given in joining order, so the most recently joined
/// nodes are those with the highest ids. A count of 0 counts as 1: this never empties the
/// job.
pub(crate) fn plan(staying: &[u32], desired: u32) -> Step {
    let desired = desired.max(1) as usize;
    if desired > staying.len() {
        // At most u32::MAX more than none.
        let missing = u32::try_from(desired - staying.len()).unwrap_or(u32::MAX);
        return Step::Launch(missing);
    }
    if desired == staying.len() {
        return Step::Hold;
    }
    let mut newest_first = staying.to_vec();
    newest_first.sort_unstable_by(|a, b| b.cmp(a));
    newest_first.truncate(staying.len() - desired);
    Step::Remove(newest_first)
}

/// Calls `apply` with each value `desired` takes (`None` is skipped), one call at a time;
/// values sent while a call runs are not queued: the next call gets the latest. Returns
/// when the sending side is gone.
pub(crate) async fn follow_latest<F, Fut>(mut desired: watch::Receiver<Option<u32>>, mut apply: F)
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = ()>,
{
    while desired.changed().await.is_ok() {
        let latest = *desired.borrow_and_update();
        if let Some(count) = latest {
            apply(count).await;
        }
    }
}

/// Grows or shrinks the job to each count `desired` takes, until the job ends (the caller
/// aborts it) or the sending side is gone. `joins` counts the join events so far (see
/// [`count_joins`]).
pub(crate) async fn follow_desired<A: App>(
    ctx: Arc<RosterContext<A>>,
    desired: watch::Receiver<Option<u32>>,
    joins: watch::Receiver<u64>,
) {
    follow_latest(desired, |count| {
        let (ctx, joins) = (ctx.clone(), joins.clone());
        async move { apply(&ctx, count, joins).await }
    })
    .await;
}

/// The job's nodes that are not leaving (see [`staying_among`]).
fn staying(roster: &Roster) -> Vec<u32> {
    staying_among(
        roster.nodes.keys().copied(),
        &roster.leaving,
        &roster.waiting_to_leave,
    )
}

/// Of `nodes`, those neither `leaving` nor `waiting` to leave (a node that asked to leave
/// while it held the last worker or server, `Roster::waiting_to_leave`): a desired count
/// counts a waiting node as gone, so the node started to reach the count is the one it
/// waits for, and it is never picked to leave a second time.
fn staying_among(
    nodes: impl Iterator<Item = u32>,
    leaving: &BTreeSet<u32>,
    waiting: &BTreeSet<u32>,
) -> Vec<u32> {
    nodes
        .filter(|id| !leaving.contains(id) && !waiting.contains(id))
        .collect()
}

/// Takes one step towards `desired` nodes and waits until it is done.
async fn apply<A: App>(ctx: &Arc<RosterContext<A>>, desired: u32, mut joins: watch::Receiver<u64>) {
    let staying = staying(&lock(&ctx.roster));
    let step = plan(&staying, desired);
    tracing::info!(desired, nodes = staying.len(), ?step, "desired node count");
    match step {
        Step::Hold => {}
        Step::Launch(count) => {
            let began = Instant::now();
            let joined_before = *joins.borrow_and_update();
            if let Err(e) = launch(ctx, count) {
                tracing::warn!(desired, error = %e, "cannot grow the job to the desired node count");
                report(ctx, "join", None, began, &Err::<ScaleReport, _>(e));
                return;
            }
            let wanted = joined_before + u64::from(count);
            let deadline = Duration::from_millis(ctx.join_timeout_ms);
            let joined = tokio::time::timeout(deadline, joins.wait_for(|n| *n >= wanted))
                .await
                .is_ok_and(|seen| seen.is_ok());
            if !joined {
                let seen = joins.borrow().saturating_sub(joined_before);
                tracing::warn!(
                    desired,
                    started = count,
                    joined = seen,
                    "not every node started for the desired node count joined within {} ms",
                    ctx.join_timeout_ms
                );
            }
        }
        Step::Remove(nodes) => {
            for node in nodes {
                // A refusal is reported by `leave` (a failed scale event) and stops here.
                if let Err(e) = leave(ctx, node).await {
                    tracing::warn!(desired, node, error = %e, "cannot shrink the job to the desired node count");
                    return;
                }
            }
        }
    }
}

/// Starts `count` node processes with the master's launcher, as `harp scale --add` does.
pub(super) fn launch<A: App>(ctx: &RosterContext<A>, count: u32) -> Result<(), HarpError> {
    let launcher = can_launch(ctx, count)?;
    (launcher.0)(count).map_err(HarpError::Remote)
}

/// The master's launcher, if it may start `count` node processes: it has one, and `count`
/// is at most [`NODES_STARTED_MAX`]; why not otherwise.
pub(super) fn can_launch<A: App>(
    ctx: &RosterContext<A>,
    count: u32,
) -> Result<&NodeLauncher, HarpError> {
    let Some(launcher) = &ctx.launcher else {
        return Err(HarpError::InvalidConfig(
            "this master does not start node processes (it was started with --nodes): start them with `harp node --join`".into(),
        ));
    };
    if count > NODES_STARTED_MAX {
        return Err(HarpError::InvalidConfig(format!(
            "cannot start {count} node processes at once: a master starts at most {NODES_STARTED_MAX} at a time on its machine"
        )));
    }
    Ok(launcher)
}

/// Passes every event the roster tells on to `events` and counts the joins of nodes
/// (successful or not) on the returned channel, for [`follow_desired`] to wait on the nodes it
/// started. Returns the sink the roster tells. Ends once every sender is gone.
pub(crate) fn count_joins(events: EventSink) -> (EventSink, watch::Receiver<u64>) {
    let (tx, mut inbox) = mpsc::unbounded_channel::<JobEvent>();
    let (joins_tx, joins) = watch::channel(0u64);
    crate::spawn::spawn(async move {
        while let Some(event) = inbox.recv().await {
            if let JobEvent::Scale(scale) = &event {
                if scale.cause == "join" && scale.node.is_some() {
                    joins_tx.send_modify(|n| *n += 1);
                }
            }
            events.tell(event);
        }
    });
    (EventSink::to(tx), joins)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::Semaphore;

    #[test]
    fn the_same_count_holds() {
        assert_eq!(plan(&[0, 1, 2], 3), Step::Hold);
        assert_eq!(plan(&[4], 1), Step::Hold);
    }

    #[test]
    fn more_nodes_are_launched_for_the_missing_count() {
        assert_eq!(plan(&[0], 3), Step::Launch(2));
        assert_eq!(plan(&[], 2), Step::Launch(2));
        assert_eq!(plan(&[3, 7], 10), Step::Launch(8));
    }

    #[test]
    fn the_most_recently_joined_nodes_leave_first_whatever_the_input_order() {
        assert_eq!(plan(&[0, 1, 2], 2), Step::Remove(vec![2]));
        assert_eq!(plan(&[5, 0, 9, 3], 1), Step::Remove(vec![9, 5, 3]));
        assert_eq!(plan(&[9, 3, 5, 0], 1), Step::Remove(vec![9, 5, 3]));
    }

    #[test]
    fn zero_never_empties_the_job() {
        assert_eq!(plan(&[0, 1], 0), Step::Remove(vec![1]));
        assert_eq!(plan(&[2], 0), Step::Hold);
        assert_eq!(plan(&[], 0), Step::Launch(1));
    }

    #[test]
    fn nodes_leaving_or_waiting_to_leave_are_not_counted_as_staying() {
        let leaving = BTreeSet::from([2]);
        let waiting = BTreeSet::from([0]);
        let staying = staying_among([0, 1, 2, 3].into_iter(), &leaving, &waiting);
        assert_eq!(staying, vec![1, 3]);
        // The last node, waiting to leave: a desired count of 1 starts its replacement.
        let alone = staying_among([0].into_iter(), &BTreeSet::new(), &waiting);
        assert_eq!(plan(&alone, 1), Step::Launch(1));
    }

    #[test]
    fn plans_reach_the_count_for_every_shape() {
        for live in 0..8u32 {
            let staying: Vec<u32> = (0..live).map(|i| i * 3 + 1).collect();
            for desired in 1..10u32 {
                let after = match plan(&staying, desired) {
                    Step::Hold => staying.len(),
                    Step::Launch(n) => staying.len() + n as usize,
                    Step::Remove(gone) => {
                        assert!(gone.iter().all(|g| staying.contains(g)));
                        let kept = staying.iter().filter(|s| !gone.contains(s));
                        // Every node kept joined before every node that goes.
                        assert!(kept.clone().all(|k| gone.iter().all(|g| k < g)));
                        kept.count()
                    }
                };
                assert_eq!(after, desired as usize, "{staying:?} -> {desired}");
            }
        }
    }

    /// A value applied while later ones arrive: only the latest of those is applied next.
    #[tokio::test]
    async fn values_that_arrive_during_an_apply_collapse_to_the_latest() {
        let (tx, rx) = watch::channel(None);
        let (calls_tx, mut calls) = mpsc::unbounded_channel();
        let release = Arc::new(Semaphore::new(0));
        let follower = {
            let release = release.clone();
            crate::spawn::spawn(follow_latest(rx, move |count| {
                let (calls_tx, release) = (calls_tx.clone(), release.clone());
                async move {
                    let _ = calls_tx.send(count);
                    if let Ok(permit) = release.acquire().await {
                        permit.forget();
                    }
                }
            }))
        };
        tx.send(Some(2)).unwrap();
        assert_eq!(calls.recv().await, Some(2));
        for later in [Some(3), None, Some(4), Some(5)] {
            tx.send(later).unwrap();
        }
        release.add_permits(1);
        assert_eq!(calls.recv().await, Some(5));
        tx.send(None).unwrap();
        tx.send(Some(6)).unwrap();
        release.add_permits(2);
        assert_eq!(calls.recv().await, Some(6));
        drop(tx);
        follower.await.unwrap();
        assert_eq!(calls.recv().await, None, "nothing else was applied");
    }

    #[tokio::test]
    async fn join_events_are_counted_and_every_event_passes_on() {
        let (out_tx, mut out) = mpsc::unbounded_channel();
        let (tx, mut joins) = count_joins(EventSink::to(out_tx));
        let event = |cause, node| {
            let began = std::time::Instant::now();
            JobEvent::Scale(crate::ScaleEvent::new(
                cause,
                node,
                began,
                began,
                &Ok(ScaleReport::default()),
            ))
        };
        for (cause, node) in [
            ("join", Some(1)),
            ("leave", Some(1)),
            ("join", None),
            ("join", Some(2)),
        ] {
            tx.tell(event(cause, node));
        }
        drop(tx);
        let mut passed = Vec::new();
        while let Some(e) = out.recv().await {
            let JobEvent::Scale(e) = e else {
                panic!("only scale events were told, got {e:?}")
            };
            passed.push((e.cause, e.node));
        }
        assert_eq!(
            passed,
            [
                ("join", Some(1)),
                ("leave", Some(1)),
                ("join", None),
                ("join", Some(2))
            ]
        );
        joins.wait_for(|n| *n == 2).await.unwrap();
        assert_eq!(*joins.borrow(), 2);
    }
}
