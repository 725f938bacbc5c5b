//! Stand-ins for actors in other processes. Each proxy is a local actor with the message type
//! of the actor it stands for, so the master, the workers and the node's parameter store talk
//! to a remote peer exactly as they talk to a local one (one transport trait, two
//! implementations: channels in process, these proxies across processes).

use super::codec::{from_bytes, rows_from_wire, rows_to_wire, to_bytes, NO_PART_ID};
use super::pending::{Pending, PendingReplies};
use super::row_parts::{
    answer_distances, answer_rows, answer_save, keys_in_parts, reset_in_parts, send_dump, InParts,
    KeysInParts,
};
use super::state_transfer::MasterCourier;
use crate::app::{App, Executor};
use crate::error::HarpError;
use crate::master::MasterMsg;
use crate::server::{CheckpointRequest, PartId, PartTag, ServerMsg, ShardMoved, ShardRows};
use crate::worker::{ExecutorBody, ReleasedExecutor, WorkerMsg};
use harp_core::{ParamKey, RowData, ServerId};
use harp_net::{Incoming, Link};
use harp_wire::{
    CompletionWire, ExecutorSaveResult, HandOffResult, Message, ReleaseResult, TaskEnvelope,
};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// Messages whose payload is smaller than this (16K f32 values) go on the ordered control
/// stream; larger ones (rows, flushes, executor state, shard rows) get a stream of their own,
/// so small requests are not held up behind them (opening a stream costs more than a small
/// message).
const BULK_BYTES_MIN: usize = 64 * 1024;

/// Sends `message` on the control stream when it is small or [`keeps_order`], on a stream
/// of its own otherwise.
pub(crate) async fn send_sized(link: &Link, message: Message) -> Result<(), HarpError> {
    if message.payload_size_hint() < BULK_BYTES_MIN || keeps_order(&message) {
        link.send(&message)?;
    } else {
        link.send_bulk(&message).await?;
    }
    Ok(())
}

/// Messages that go on the control stream whatever their size, because what is sent after
/// them on it depends on them: one bringing an executor to a node (`CreateExecutor`,
/// `AdoptExecutor`), which the micro-tasks the master dispatches to it right after must
/// not overtake, and a node's `ExecutorReleased`, which must not overtake the reports of
/// the executor's last micro-tasks. (Their states of 1 MiB or more are parked and fetched,
/// so they stay small.) On a stream of their own, a 200 KB state was overtaken by the
/// executor's next micro-task, which the node refused for an executor it did not host yet,
/// ending the job.
fn keeps_order(message: &Message) -> bool {
    matches!(
        message,
        Message::CreateExecutor { .. }
            | Message::AdoptExecutor { .. }
            | Message::ExecutorReleased { .. }
    )
}

/// Sends the answer `answer` with [`send_sized`]; one that cannot go (larger than the link
/// carries, say) is replaced by `refused(why)`, so the asker hears why instead of waiting
/// for an answer that never comes.
pub(crate) async fn answer_sized(
    link: &Link,
    answer: Message,
    refused: impl FnOnce(String) -> Message,
) {
    if let Err(e) = send_sized(link, answer).await {
        tracing::warn!(error = %e, "could not send an answer; sending why instead");
        let _ = link.send(&refused(format!("the answer could not be sent: {e}")));
    }
}

mod master;
mod serve;
mod server;
mod server_node;
mod worker;
pub(crate) use master::*;
pub(crate) use serve::*;
pub(crate) use server::*;
pub(crate) use server_node::*;
pub(crate) use worker::*;

#[cfg(test)]
mod tests;
