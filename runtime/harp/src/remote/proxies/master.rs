//! A node's stand-in for the master ([`MasterProxy`]): completions, staged flushes and
//! failures go up the master link; the wire form of completions and tasks.

use super::*;

/// Stands (on a node) for the master: completions and failures go over the master link.
pub(crate) struct MasterProxy<A>(PhantomData<fn() -> A>);

impl<A> MasterProxy<A> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

impl<A: App> Actor for MasterProxy<A> {
    type Msg = MasterMsg<A>;
    type State = Link;
    type Arguments = Link;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        link: Link,
    ) -> Result<Link, ActorProcessingErr> {
        Ok(link)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        link: &mut Link,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            MasterMsg::Completed(completions) => {
                let completions = completions_to_wire::<A>(completions)?;
                link.send(&Message::Completed { completions })?;
            }
            MasterMsg::FlushStaged {
                flush,
                servers,
                completions,
                ..
            } => {
                let completions = completions_to_wire::<A>(completions)?;
                link.send(&Message::FlushStaged {
                    flush_id: flush,
                    servers: servers.into_iter().map(|s| s.0).collect(),
                    completions,
                })?;
            }
            // After the node's earlier reports (`NodeShared::tell_master_after_staged_reports`).
            MasterMsg::ServerDrained { request_id } => {
                link.send(&Message::ServerDrained { request_id })?
            }
            MasterMsg::Failed(e) => link.send(&Message::Failed {
                message: e.to_string(),
                unreachable_server: e.unreachable_server().map(|s| s.0),
            })?,
            // Only the master's own process sends these.
            MasterMsg::Start { .. }
            | MasterMsg::AddWorker(..)
            | MasterMsg::AddServer(..)
            | MasterMsg::AddNode { .. }
            | MasterMsg::ForgetNode(..)
            | MasterMsg::NodeLeft(..)
            | MasterMsg::CanScale { .. }
            | MasterMsg::Rebalance { .. }
            | MasterMsg::ExecutorReleased { .. }
            | MasterMsg::ExecutorAdopted { .. }
            | MasterMsg::ShardHandedOff { .. }
            | MasterMsg::CheckpointRoundDone(..)
            | MasterMsg::RoundAtEndWaitOver
            | MasterMsg::StopWaitOver
            | MasterMsg::CrashServer { .. }
            | MasterMsg::CrashedServerCounted(..)
            | MasterMsg::ServerLost { .. }
            | MasterMsg::Recovered(..)
            | MasterMsg::Injected(..)
            | MasterMsg::Consistent(..)
            | MasterMsg::FlushCommitted(..)
            | MasterMsg::AwaitCommitsOn { .. }
            | MasterMsg::WorkerLost { .. }
            | MasterMsg::ExecutorRecreated { .. }
            | MasterMsg::Stop { .. } => {
                tracing::debug!("a master-only message reached a node's master proxy")
            }
        }
        Ok(())
    }
}

/// Encodes completions for the master (the app's outputs with postcard).
pub(super) fn completions_to_wire<A: App>(
    completions: Vec<crate::app::Completion<A::Output>>,
) -> Result<Vec<CompletionWire>, HarpError> {
    completions
        .into_iter()
        .map(|c| {
            Ok(CompletionWire::new(
                c.task,
                c.executor,
                c.dispatched_at,
                to_bytes(&c.output)?,
            ))
        })
        .collect()
}

/// Decodes completions from a node for the master actor.
pub(crate) fn completions_from_wire<A: App>(
    completions: Vec<CompletionWire>,
) -> Result<Vec<crate::app::Completion<A::Output>>, HarpError> {
    completions
        .into_iter()
        .map(|c| {
            Ok(crate::app::Completion {
                task: c.task_id(),
                executor: c.executor_id(),
                dispatched_at: c.dispatched_at_version(),
                output: from_bytes(&c.output)?,
            })
        })
        .collect()
}

/// Decodes dispatched tasks from the master for a local worker.
pub(crate) fn tasks_from_wire<A: App>(
    tasks: Vec<TaskEnvelope>,
) -> Result<Vec<crate::worker::TaskEnvelope<A::Args>>, HarpError> {
    tasks
        .into_iter()
        .map(|t| {
            Ok(crate::worker::TaskEnvelope {
                task: t.task_id(),
                executor: t.executor_id(),
                version: t.dispatch_version(),
                args: from_bytes(&t.args)?,
            })
        })
        .collect()
}
