//! A node's part in an executor's move and in a consistent checkpoint: saving an executor's
//! state for the master, releasing an executor with its pending micro-tasks (a large state
//! parked for the adopting node to fetch), adopting one (its state fetched and
//! restored, then handed to the worker), and re-creating a dead worker node's executor
//! (from its state in a consistent checkpoint when the master sends one).

use super::fault_delays::{fault_delay, RELEASED_STATE_SERVE_DELAY_VAR};
use super::proxies::{answer_sized, send_sized, tasks_to_wire};
use super::server_links::Dialer;
use super::state_transfer::{is_parked, StateOutbox};
use crate::app::{App, Executor, JobInfo};
use crate::error::HarpError;
use crate::worker::{ExecutorBody, ReleasedExecutor, WorkerMsg};
use harp_core::ExecutorId;
use harp_net::Link;
use harp_wire::{ExecutorSaveResult, Message, ReleaseResult, StateFetch};
use ractor::ActorRef;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sends `executor`'s saved state to the master, keeping the executor (a consistent
/// checkpoint). A small state goes in the answer; a large one
/// ([`is_parked`](super::state_transfer::is_parked)) is parked in `outbox`, and the master
/// fetches it from this node in chunks, so a state of any size can be saved.
pub(super) fn save_executor<A: App>(
    worker: &ActorRef<WorkerMsg<A>>,
    (master_link, outbox): (&Link, &Arc<StateOutbox>),
    request_id: u64,
    executor: ExecutorId,
) -> Result<(), HarpError> {
    let (reply, saved) = tokio::sync::oneshot::channel();
    worker
        .send_message(WorkerMsg::Save { executor, reply })
        .map_err(|_| HarpError::Remote("the worker stopped".into()))?;
    let (link, outbox) = (master_link.clone(), outbox.clone());
    crate::spawn::spawn(async move {
        let saved = saved
            .await
            .unwrap_or_else(|_| Err(HarpError::Remote("the worker stopped".into())));
        let result = match saved {
            Ok(state) if is_parked(state.len()) => ExecutorSaveResult::Parked {
                bytes: state.len() as u64,
                transfer: outbox.park(state),
            },
            Ok(state) => ExecutorSaveResult::Saved(state),
            Err(e) => ExecutorSaveResult::Refused(e.to_string()),
        };
        let refused = |why| Message::ExecutorSaved {
            request_id,
            result: ExecutorSaveResult::Refused(why),
        };
        answer_sized(
            &link,
            Message::ExecutorSaved { request_id, result },
            refused,
        )
        .await;
    });
    Ok(())
}

/// Gives `executor` up for a move: once the worker released it, its saved state and the
/// micro-tasks it had not started go back to the master (a large state is parked in
/// `outbox` instead, and only its size and transfer number go).
pub(super) fn release_executor<A: App>(
    worker: &ActorRef<WorkerMsg<A>>,
    master_link: &Link,
    outbox: &Arc<StateOutbox>,
    request_id: u64,
    executor: ExecutorId,
) -> Result<(), HarpError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    worker
        .send_message(WorkerMsg::Release {
            executor,
            reply: tx,
        })
        .map_err(|_| HarpError::Remote("the worker stopped".into()))?;
    let link = master_link.clone();
    let outbox = outbox.clone();
    let asked = Instant::now();
    crate::spawn::spawn(async move {
        let result = match rx.await {
            Ok(Ok(released)) => {
                let release_ms = millis(asked.elapsed());
                let saving = Instant::now();
                match saved(released) {
                    ReleaseResult::Released { state, pending } if is_parked(state.len()) => {
                        let save_ms = millis(saving.elapsed());
                        let bytes = state.len() as u64;
                        let parking = Instant::now();
                        let held = fault_delay(RELEASED_STATE_SERVE_DELAY_VAR);
                        let transfer = outbox.park_held(state, held);
                        tracing::info!(
                            %executor, bytes, transfer, release_ms, save_ms,
                            park_ms = millis(parking.elapsed()),
                            "executor released and its state parked for the adopting node"
                        );
                        ReleaseResult::Parked {
                            transfer,
                            bytes,
                            pending,
                        }
                    }
                    other => other,
                }
            }
            Ok(Err(e)) => ReleaseResult::Refused(e.to_string()),
            Err(_) => ReleaseResult::Refused("the worker stopped".into()),
        };
        let message = Message::ExecutorReleased {
            request_id,
            executor: executor.0,
            result,
        };
        // On the control stream whatever its size (`send_sized` keeps it there), as the
        // reports of the executor's last micro-tasks (`Completed`, `FlushStaged`) sent
        // before it: it never overtakes them, so a master that has the release has them
        // too, also when this node dies right after sending it.
        if let Err(e) = send_sized(&link, message).await {
            // The executor left the worker: without this answer it would have no host.
            let message = format!("could not hand {executor} back for its move: {e}");
            tracing::warn!(%executor, error = %e, "could not hand a released executor back");
            let _ = link.send(&Message::Failed {
                message,
                unreachable_server: None,
            });
        }
    });
    Ok(())
}

/// A released executor as the wire carries it: its saved state and its pending tasks.
pub(super) fn saved<A: App>(released: ReleasedExecutor<A>) -> ReleaseResult {
    let state = match released.executor {
        ExecutorBody::Live(e) => e.into_saved_state(),
        ExecutorBody::Saved(state) => Ok(state),
        ExecutorBody::Parked(_) => {
            return ReleaseResult::Refused("the executor's state is not on this node".into())
        }
    };
    match (state, tasks_to_wire::<A>(released.pending)) {
        (Ok(state), Ok(pending)) => ReleaseResult::Released { state, pending },
        (Err(e), _) => ReleaseResult::Refused(format!("cannot save the executor's state: {e}")),
        (_, Err(e)) => ReleaseResult::Refused(e.to_string()),
    }
}

/// An `AdoptExecutor` being carried out: the answer goes back under `request_id`.
pub(super) struct Adoption<A: App> {
    pub(super) request_id: u64,
    pub(super) executor: ExecutorId,
    pub(super) pending: Vec<crate::worker::TaskEnvelope<A::Args>>,
}

impl<A: App> Adoption<A> {
    /// Hands the restored executor to the worker and answers the master once it runs there
    /// (or with why it cannot).
    pub(super) fn finish(
        self,
        worker: &ActorRef<WorkerMsg<A>>,
        master_link: &Link,
        restored: Result<A::Executor, HarpError>,
    ) {
        let (request_id, link) = (self.request_id, master_link.clone());
        let answer = move |result: Result<(), HarpError>| {
            let _ = link.send(&Message::ExecutorAdopted {
                request_id,
                error: result.err().map(|e| e.to_string()),
            });
        };
        let executor = match restored {
            Ok(executor) => executor,
            Err(e) => return answer(Err(e)),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = worker.send_message(WorkerMsg::Adopt {
            executor: self.executor,
            released: ReleasedExecutor {
                executor: ExecutorBody::Live(executor),
                pending: self.pending,
            },
            adopted: tx,
        });
        if sent.is_err() {
            return answer(Err(HarpError::Remote("the worker stopped".into())));
        }
        crate::spawn::spawn(async move {
            answer(
                rx.await
                    .unwrap_or_else(|_| Err(HarpError::Remote("the worker stopped".into()))),
            )
        });
    }
}

/// How an arriving executor is made again from a saved state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rebuild {
    /// It moved here, or a resumed job starts it: its state matches the tables
    /// (`App::restore_executor`).
    Moved,
    /// Its worker died; the state is its save in a consistent checkpoint, older than the
    /// tables (`App::recover_executor`).
    Recovered,
}

/// The executor `id` made again from its saved state, as `how` says.
fn rebuild<A: App>(
    app: &A,
    info: &JobInfo,
    id: ExecutorId,
    how: Rebuild,
    state: Vec<u8>,
) -> Result<A::Executor, HarpError> {
    let made = match how {
        Rebuild::Moved => app.restore_executor(id, info, state),
        Rebuild::Recovered => app.recover_executor(id, info, Some(state)),
    };
    made.map_err(|source| HarpError::ExecutorCreation {
        executor: id,
        source,
    })
}

/// Where an arriving executor's state is: in the message, or parked where `StateFetch`
/// says.
pub(super) type ArrivingState = (Vec<u8>, Option<StateFetch>);

/// Makes `adoption`'s executor again from its state (`how`) and hands it to the worker,
/// answering the master once it runs there. A state in the message is used at once; a
/// parked one is fetched first, on a task of its own, while the worker keeps the
/// micro-tasks dispatched to the executor until it arrives (`WorkerMsg::Expect`).
pub(super) fn take_executor<A: App>(
    (worker, master_link): (&ActorRef<WorkerMsg<A>>, &Link),
    (app, info): (&Arc<A>, &JobInfo),
    dialer: &Dialer,
    (adoption, how): (Adoption<A>, Rebuild),
    (state, fetch): ArrivingState,
) -> Result<(), HarpError> {
    let Some(fetch) = fetch else {
        let made = rebuild(&**app, info, adoption.executor, how, state);
        adoption.finish(worker, master_link, made);
        return Ok(());
    };
    // Tasks dispatched to it from now on wait on the worker until it is here.
    worker
        .send_message(WorkerMsg::Expect {
            executor: adoption.executor,
        })
        .map_err(|_| HarpError::Remote("the worker stopped".into()))?;
    let (worker, link, app, info) = (
        worker.clone(),
        master_link.clone(),
        app.clone(),
        info.clone(),
    );
    let dialer = dialer.clone();
    crate::spawn::spawn(async move {
        let id = adoption.executor;
        let dialing = Instant::now();
        let fetched = dialer.fetch_state(&fetch, &id.to_string()).await;
        let made = fetched.and_then(|state| {
            let (restoring, bytes) = (Instant::now(), state.len());
            let made = rebuild(&*app, &info, id, how, state);
            tracing::info!(
                executor = %id, bytes, ?how,
                restore_ms = millis(restoring.elapsed()),
                total_ms = millis(dialing.elapsed()),
                "executor state fetched and restored"
            );
            made
        });
        adoption.finish(&worker, &link, made);
    });
    Ok(())
}

/// Re-creates a dead worker node's executor here (`Message::CreateExecutor`): from its
/// state in consistent checkpoint `from_checkpoint` when one comes along
/// (`App::recover_executor` with it), else afresh (with none). The micro-tasks the master
/// kept here for it while it was expected are dropped first: the master sends every one of
/// them again, after this message on the same ordered stream.
pub(super) fn recreate_executor<A: App>(
    (worker, master_link): (&ActorRef<WorkerMsg<A>>, &Link),
    (app, info): (&Arc<A>, &JobInfo),
    dialer: &Dialer,
    (me, request_id, executor): (u32, u64, ExecutorId),
    (from_checkpoint, arriving): (Option<u64>, ArrivingState),
) -> Result<(), HarpError> {
    worker
        .send_message(WorkerMsg::Forget { executor })
        .map_err(|_| HarpError::Remote("the worker stopped".into()))?;
    let adoption = Adoption::<A> {
        request_id,
        executor,
        pending: Vec::new(),
    };
    if let Some(checkpoint) = from_checkpoint {
        tracing::info!(
            node = me,
            %executor,
            checkpoint,
            "re-creating the executor of a dead worker node from its checkpointed state"
        );
        return take_executor(
            (worker, master_link),
            (app, info),
            dialer,
            (adoption, Rebuild::Recovered),
            arriving,
        );
    }
    let created = app
        .recover_executor(executor, info, None)
        .map_err(|source| HarpError::ExecutorCreation { executor, source });
    tracing::info!(
        node = me,
        %executor,
        ok = created.is_ok(),
        "created the executor of a dead worker node"
    );
    adoption.finish(worker, master_link, created);
    Ok(())
}

/// `elapsed` in milliseconds, for the timing lines of executor moves.
pub(super) fn millis(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1e3
}
