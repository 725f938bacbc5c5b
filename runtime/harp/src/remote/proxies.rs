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
use super::state_transfer::{MasterCourier, PARK_BYTES_MIN};
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

/// Sends `message` on the control stream when it is small, on a stream of its own otherwise.
pub(crate) async fn send_sized(link: &Link, message: Message) -> Result<(), HarpError> {
    if message.payload_size_hint() < BULK_BYTES_MIN {
        link.send(&message)?;
    } else {
        link.send_bulk(&message).await?;
    }
    Ok(())
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

// ---------------------------------------------------------------- server proxy

/// Stands for a server in another process; requests go over `link`.
pub(crate) struct ServerProxy;

pub(crate) struct ServerProxyState {
    server: ServerId,
    /// The node this proxy runs on: flushes carry it, with their flush id, as their batch id.
    node: u32,
    link: Link,
    pending: Arc<PendingReplies>,
    /// Shard rows sent in order and not yet confirmed by their new owner (see
    /// [`send_flush_part`]).
    unconfirmed_rows: Arc<AtomicUsize>,
}

impl Actor for ServerProxy {
    type Msg = ServerMsg;
    type State = ServerProxyState;
    type Arguments = (ServerId, u32, Link, mpsc::UnboundedReceiver<Incoming>);

    async fn pre_start(
        &self,
        _myself: ActorRef<ServerMsg>,
        (server, node, link, mut incoming): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let pending = Arc::new(PendingReplies::default());
        let replies = pending.clone();
        crate::spawn::spawn(async move {
            while let Some(Ok(message)) = incoming.recv().await {
                if let Some(other) = replies.resolve(message) {
                    tracing::debug!(kind = ?other.kind(), "unexpected message from a server node");
                }
            }
            replies.fail_all();
        });
        Ok(ServerProxyState {
            server,
            node,
            link,
            pending,
            unconfirmed_rows: Arc::default(),
        })
    }

    /// A proxy stops when its server failed or left the job: closing the link ends the
    /// reader, which drops every awaited reply, so the requests see an unreachable server
    /// (and, with server recovery, go to the shards' new owners).
    async fn post_stop(
        &self,
        _myself: ActorRef<ServerMsg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.link.close("server gone");
        state.pending.fail_all();
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<ServerMsg>,
        msg: ServerMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let server = state.server.0;
        match msg {
            ServerMsg::Get { keys, reply } => {
                let request_id = state.pending.register(Pending::Rows(InParts::new(reply)));
                let keys = keys.into_iter().map(Into::into).collect();
                // In order on the control stream, as every part of a flush sent after it.
                let parts = keys_in_parts(keys, |keys, part, parts| Message::Get {
                    request_id,
                    server,
                    keys,
                    part,
                    parts,
                });
                for get in parts {
                    if let Err(e) = state.link.send(&get) {
                        state.pending.unsent(request_id, e.into());
                        break;
                    }
                }
            }
            ServerMsg::Apply {
                updates,
                part,
                reply,
            } => {
                let request_id = state.pending.register(Pending::Applied(reply));
                // The part's own id (a forwarded part keeps its sender's).
                let header = match part {
                    Some(tag) => PartHeader {
                        node_id: tag.id.node,
                        flush_id: tag.id.seq,
                        staged: false,
                        held_from: tag.held_from,
                        forwarded: tag.forwarded,
                    },
                    None => PartHeader {
                        node_id: state.node,
                        flush_id: NO_PART_ID,
                        staged: false,
                        held_from: 0,
                        forwarded: false,
                    },
                };
                send_flush_part(state, header, updates, request_id);
            }
            ServerMsg::Stage {
                node,
                flush,
                updates,
                reply,
            } => {
                let request_id = state.pending.register(Pending::Applied(reply));
                let header = PartHeader {
                    node_id: node,
                    flush_id: flush,
                    staged: true,
                    held_from: 0,
                    forwarded: false,
                };
                send_flush_part(state, header, updates, request_id);
            }
            ServerMsg::Commit { reply, .. } => {
                let _ = reply.send(Err(HarpError::InvalidConfig(
                    "only the master commits staged flushes".into(),
                )));
            }
            ServerMsg::DropStaged { .. } => {
                tracing::debug!("only the master drops staged flush parts");
            }
            // Dropping the reply says so: a server node reports its counters with its
            // node's (`Message::Stats`).
            ServerMsg::Stats { .. } => {
                tracing::debug!(server = %state.server, "a server of another process reports its counters with its node's");
            }
            message @ (ServerMsg::Dump { .. }
            | ServerMsg::Checkpoint(_)
            | ServerMsg::Reset { .. }) => {
                forward_on_link(&state.link, &state.pending, state.server, message)
            }
            ServerMsg::HandOff { shard, reply, .. } => {
                let _ = reply.send(Err(HarpError::InvalidConfig(format!(
                    "moving {shard} between node processes is not supported yet"
                ))));
            }
            ServerMsg::TakeOver {
                shard,
                rows,
                ack,
                in_order,
                restore,
            } => {
                // In order: written on the control stream now, ahead of every request the
                // old owner forwards after it. Otherwise the old owner holds the shard's
                // requests until `ack`, so nothing it forwards can overtake the rows.
                take_over_on_link(
                    &state.link,
                    &state.pending,
                    state.server,
                    (shard, rows, ack, restore),
                    in_order.then_some(&state.unconfirmed_rows),
                );
            }
            ServerMsg::HandedOver { reply, .. } => {
                let _ = reply.send(Err(HarpError::InvalidConfig(
                    "a hand-off confirmation reached a proxy".into(),
                )));
            }
            // A server's own message: dropping it drops the request's reply.
            ServerMsg::Unanswered { .. } => {
                tracing::debug!(server = %state.server, "a server's own request reached a proxy");
            }
            ServerMsg::Relocated { .. } => {
                tracing::debug!(server = %state.server, "only the master relocates a shard");
            }
            ServerMsg::Drain { reply } => {
                let pending = state.pending.clone();
                crate::spawn::spawn(async move {
                    wait_drained(&pending).await;
                    let _ = reply.send(());
                });
            }
            message @ ServerMsg::Crash { .. } => message.refuse_across_processes(),
        }
        Ok(())
    }
}

/// How a flush part is named on the wire (the header fields of [`Message::Apply`]).
struct PartHeader {
    node_id: u32,
    flush_id: u64,
    staged: bool,
    held_from: u64,
    forwarded: bool,
}

/// Sends one flush part (named by `header`) to the proxy's server as request
/// `request_id`. Large parts go on their own stream, so reads are not held up behind them,
/// except while shard rows sent in order are not confirmed: the part may carry updates the
/// old owner forwards for that shard, which must not overtake its rows, so it goes on the
/// control stream behind them. A lost link is reported by the link's reader (the pending
/// reply is dropped).
fn send_flush_part(
    state: &ServerProxyState,
    header: PartHeader,
    updates: Vec<(ParamKey, RowData)>,
    request_id: u64,
) {
    let message = Message::Apply {
        request_id,
        server: state.server.0,
        node_id: header.node_id,
        flush_id: header.flush_id,
        staged: header.staged,
        held_from: header.held_from,
        forwarded: header.forwarded,
        updates: rows_to_wire(updates),
    };
    if state.unconfirmed_rows.load(Ordering::Acquire) > 0 {
        if let Err(e) = state.link.send(&message) {
            state.pending.unsent(request_id, e.into());
        }
        return;
    }
    let (link, pending) = (state.link.clone(), state.pending.clone());
    crate::spawn::spawn(async move {
        if let Err(e) = send_sized(&link, message).await {
            pending.unsent(request_id, e);
        }
    });
}

/// Sends a request a server answers from its rows (a dump, a checkpoint request, a reset)
/// over `link` to `server`'s node; the answer resolves the request's reply. A link that is
/// gone drops the reply, which its sender sees as an unreachable server.
pub(crate) fn forward_on_link(
    link: &Link,
    pending: &Arc<PendingReplies>,
    server: ServerId,
    message: ServerMsg,
) {
    let (request_id, messages) = match message {
        ServerMsg::Dump { reply } => {
            let request_id = pending.register(Pending::Dump(InParts::new(reply)));
            let server = server.0;
            (request_id, vec![Message::Dump { request_id, server }])
        }
        ServerMsg::Checkpoint(CheckpointRequest::Distances { reply }) => {
            let request_id = pending.register(Pending::Distances(InParts::new(reply)));
            let server = server.0;
            (
                request_id,
                vec![Message::CheckpointDistances { request_id, server }],
            )
        }
        ServerMsg::Checkpoint(CheckpointRequest::Save {
            keys,
            recorded,
            reply,
        }) => {
            let request_id = pending.register(Pending::Saved(InParts::new(reply)));
            let keys = keys.into_iter().map(Into::into).collect();
            let server = server.0;
            let parts = keys_in_parts(keys, |keys, part, parts| Message::CheckpointSave {
                request_id,
                server,
                keys,
                part,
                parts,
                recorded_epoch: recorded,
            });
            (request_id, parts)
        }
        ServerMsg::Reset { rows, reply } => {
            let rows = rows
                .into_iter()
                .map(|(k, v)| (k.into(), v.map(|v| harp_wire::RowWire::from(&*v))))
                .collect();
            return reset_in_parts(link, pending, server, rows, reply);
        }
        other => {
            tracing::debug!(%server, "not a request forwarded on a link");
            drop(other);
            return;
        }
    };
    let (link, pending) = (link.clone(), pending.clone());
    crate::spawn::spawn(async move {
        for message in messages {
            if send_sized(&link, message).await.is_err() {
                // The node is gone: its reader fails every waiter; this one at once.
                pending.forget(request_id);
                break;
            }
        }
    });
}

/// Sends `shard`'s rows to `server`'s node over `link` and releases `ack` once that node
/// holds them. In order (`unconfirmed`: the proxy's count of such rows not yet confirmed,
/// raised until the answer): on the control stream before this returns, so ahead of every
/// message sent on the link after it (such rows are small); otherwise in parts of at most
/// [`PART_BYTES`](harp_wire::PART_BYTES), each a `TakeOverShard` of its own (as
/// [`send_sized`] chooses), and `ack` goes once every part is in, so a shard of any size
/// moves. On failure `ack` is dropped, which tells the sender the take-over failed, and the
/// replies are no longer awaited (a drain must not wait for them).
fn take_over_on_link(
    link: &Link,
    pending: &Arc<PendingReplies>,
    server: ServerId,
    (shard, rows, ack, restore): (
        harp_core::ShardId,
        ShardRows,
        oneshot::Sender<()>,
        Option<crate::server::Restore>,
    ),
    unconfirmed: Option<&Arc<AtomicUsize>>,
) {
    let restore = restore.map(|r| harp_wire::RestoreWire {
        generation: r.generation,
        num_shards: r.num_shards,
    });
    let mut forwarded_parts = rows.parts_to_wire();
    let rows = rows.to_wire();
    let parts = match unconfirmed {
        Some(_) => vec![rows],
        None => harp_wire::split_rows(rows, harp_wire::ShardRowWire::bytes),
    };
    let mut answers = Vec::with_capacity(parts.len());
    let mut messages = Vec::with_capacity(parts.len());
    for rows in parts {
        let (tx, rx) = oneshot::channel();
        let request_id = pending.register(Pending::TookOver(tx));
        answers.push((request_id, rx));
        messages.push(Message::TakeOverShard {
            request_id,
            shard: shard.0,
            rows,
            restore,
            // All in the first message: the shard's rows are in only once every part is.
            parts: std::mem::take(&mut forwarded_parts),
        });
    }
    let (link, pending) = (link.clone(), pending.clone());
    let unconfirmed = unconfirmed.map(UnconfirmedRows::raise);
    // In order: on the control stream now (one message, such rows being small).
    let sent_in_order: Option<Result<(), HarpError>> = unconfirmed.as_ref().map(|_| {
        messages
            .drain(..)
            .try_for_each(|message| link.send(&message).map_err(HarpError::from))
    });
    let forget_all = |pending: &PendingReplies, answers: &[(u64, _)]| {
        answers.iter().for_each(|(id, _)| pending.forget(*id));
    };
    crate::spawn::spawn(async move {
        // Lowered before the sender hears of the answer, or when this ends early.
        let unconfirmed = unconfirmed;
        let mut sent = sent_in_order.unwrap_or(Ok(()));
        for message in messages {
            if sent.is_err() {
                break;
            }
            sent = send_sized(&link, message).await;
        }
        if let Err(e) = sent {
            tracing::warn!(%shard, %server, error = %e, "could not send a shard's rows");
            forget_all(&pending, &answers);
            return;
        }
        let deadline = tokio::time::Instant::now() + TAKE_OVER_DEADLINE;
        let mut confirmed = true;
        for (_, rx) in answers.iter_mut() {
            confirmed &= matches!(tokio::time::timeout_at(deadline, rx).await, Ok(Ok(())));
        }
        drop(unconfirmed);
        if confirmed {
            let _ = ack.send(());
        } else {
            tracing::warn!(%shard, %server, "the new owner did not confirm it took over the rows");
            forget_all(&pending, &answers);
        }
    });
}

/// Lowers a proxy's count of unconfirmed in-order shard rows when dropped: once the new
/// owner answered, or the take-over failed or timed out (then a part on a stream of its own
/// can no longer overtake rows that are in, or that never will be).
struct UnconfirmedRows(Arc<AtomicUsize>);

impl UnconfirmedRows {
    fn raise(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count.clone())
    }
}

impl Drop for UnconfirmedRows {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Waits until no reply is awaited on `pending`, twice in a row [`DRAIN_RECHECK`] apart (a
/// request routed just before the reroute may still be on its way into the proxy's
/// mailbox), or at most [`DRAIN_DEADLINE`] (every request has its own deadline anyway).
async fn wait_drained(pending: &PendingReplies) {
    let deadline = tokio::time::Instant::now() + DRAIN_DEADLINE;
    let mut quiet_checks = 0;
    while quiet_checks < 2 && tokio::time::Instant::now() < deadline {
        if pending.outstanding() == 0 {
            quiet_checks += 1;
        } else {
            quiet_checks = 0;
        }
        tokio::time::sleep(DRAIN_RECHECK).await;
    }
}

const DRAIN_RECHECK: std::time::Duration = std::time::Duration::from_millis(10);
const DRAIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a shard's old owner waits for the new one to confirm it holds the rows.
const TAKE_OVER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Stands (on the master) for the server of a node: shard hand-offs, SCAR's checkpoint
/// requests, resets and dumps (fault injection), and the take-overs of a failed server's
/// shards go this way; reads and flushes do not (the nodes read and flush to each other
/// directly).
pub(crate) struct ServerNodeProxy;

impl Actor for ServerNodeProxy {
    type Msg = ServerMsg;
    type State = (ServerId, Link, Arc<PendingReplies>);
    type Arguments = (ServerId, Link, Arc<PendingReplies>);

    async fn pre_start(
        &self,
        _myself: ActorRef<ServerMsg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<ServerMsg>,
        msg: ServerMsg,
        (server, link, pending): &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let unsupported = || {
            HarpError::InvalidConfig(format!(
                "{server} takes no parameter traffic from the master"
            ))
        };
        match msg {
            ServerMsg::HandOff {
                shard,
                num_shards,
                to_id,
                reply,
                ..
            } => {
                let (tx, rx) = oneshot::channel();
                let request_id = pending.register(Pending::HandedOff(tx));
                link.send(&Message::HandOffShard {
                    request_id,
                    shard: shard.0,
                    num_shards,
                    to_server: to_id.0,
                })?;
                let server = *server;
                crate::spawn::spawn(async move {
                    let _ = reply.send(match rx.await {
                        Ok(HandOffResult::Moved { rows, bytes }) => Ok(ShardMoved {
                            rows: rows as usize,
                            bytes,
                        }),
                        Ok(HandOffResult::Refused(why)) => Err(HarpError::InvalidConfig(why)),
                        Ok(HandOffResult::Unconfirmed(detail)) => Err(HarpError::ShardInTransit {
                            shard,
                            to: to_id,
                            detail,
                        }),
                        Err(_) => Err(HarpError::ServerUnreachable(server)),
                    });
                });
            }
            ServerMsg::Get { reply, .. } => {
                let _ = reply.send(Err(unsupported()));
            }
            ServerMsg::Apply { reply, .. } | ServerMsg::Stage { reply, .. } => {
                let _ = reply.send(Err(unsupported()));
            }
            ServerMsg::Commit { node, flush, reply } => {
                // On the control stream, from this actor: in order with a later DropStaged.
                let request_id = pending.register(Pending::Committed(reply));
                let message = Message::CommitFlush {
                    request_id,
                    server: server.0,
                    node_id: node,
                    flush_id: flush,
                };
                if link.send(&message).is_err() {
                    // The node is gone: the waiter learns it at once.
                    pending.forget(request_id);
                }
            }
            ServerMsg::DropStaged { node } => {
                // A node that is gone has nothing staged any more.
                let _ = link.send(&Message::DropStaged {
                    server: server.0,
                    node_id: node,
                });
            }
            ServerMsg::Drain { reply } => {
                let _ = reply.send(());
            }
            // A failed server's shards re-created here from the running checkpoint.
            // Nothing is forwarded behind these rows (`in_order` is never set here).
            ServerMsg::TakeOver {
                shard,
                rows,
                ack,
                restore,
                ..
            } => {
                take_over_on_link(link, pending, *server, (shard, rows, ack, restore), None);
            }
            message @ (ServerMsg::Dump { .. }
            | ServerMsg::Checkpoint(_)
            | ServerMsg::Reset { .. }) => forward_on_link(link, pending, *server, message),
            ServerMsg::HandedOver { .. }
            | ServerMsg::Unanswered { .. }
            | ServerMsg::Stats { .. } => {
                tracing::debug!(%server, "a request the master's server proxy does not carry");
            }
            ServerMsg::Relocated { shard, to_id, .. } => {
                // A node that is gone forwards nothing any more.
                let _ = link.send(&Message::ShardRelocated {
                    server: server.0,
                    shard: shard.0,
                    to_server: to_id.0,
                });
            }
            message @ ServerMsg::Crash { .. } => message.refuse_across_processes(),
        }
        Ok(())
    }
}

/// The local server's answer to one request, with its error (or its having stopped) as the
/// text the wire carries.
async fn server_answer<T>(answer: oneshot::Receiver<Result<T, HarpError>>) -> Result<T, String> {
    match answer.await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("server stopped".into()),
    }
}

/// Serves one request that arrived on `link` with the local server `server`; `false` once
/// that server stopped.
pub(crate) fn serve_server_request(
    (link, keys_in_parts): (&Link, &mut KeysInParts),
    message: Message,
    server: &ActorRef<ServerMsg>,
) -> bool {
    let link = link.clone();
    match message {
        Message::Get {
            request_id,
            keys,
            part,
            parts,
            ..
        } => {
            let Some(keys) = keys_in_parts.add(request_id, part, parts, keys) else {
                return true; // more parts to come
            };
            let (tx, rx) = oneshot::channel();
            let keys = keys.into_iter().map(Into::into).collect();
            if server
                .send_message(ServerMsg::Get { keys, reply: tx })
                .is_err()
            {
                return false;
            }
            crate::spawn::spawn(async move {
                answer_rows(&link, request_id, server_answer(rx).await).await;
            });
        }
        Message::Apply {
            request_id,
            node_id,
            flush_id,
            staged,
            held_from,
            forwarded,
            updates,
            ..
        } => {
            let (reply, rx) = oneshot::channel();
            let updates = rows_from_wire(updates);
            let request = if staged {
                ServerMsg::Stage {
                    node: node_id,
                    flush: flush_id,
                    updates,
                    reply,
                }
            } else {
                let part = (flush_id != NO_PART_ID).then_some(PartTag {
                    id: PartId {
                        node: node_id,
                        seq: flush_id,
                    },
                    held_from,
                    forwarded,
                });
                ServerMsg::Apply {
                    updates,
                    part,
                    reply,
                }
            };
            if server.send_message(request).is_err() {
                return false;
            }
            let delay = (!staged)
                .then(|| super::fault_delays::apply_answer_delay(node_id))
                .flatten();
            crate::spawn::spawn(async move {
                let (error, save_epoch) = match server_answer(rx).await {
                    Ok(epoch) => (None, epoch),
                    Err(e) => (Some(e), None),
                };
                if let Some(delay) = delay {
                    tokio::time::sleep(delay).await; // fault injection
                }
                let _ = link.send(&Message::Applied {
                    request_id,
                    error,
                    save_epoch,
                });
            });
        }
        Message::CommitFlush {
            request_id,
            node_id,
            flush_id,
            ..
        } => {
            let (reply, rx) = oneshot::channel();
            let commit = ServerMsg::Commit {
                node: node_id,
                flush: flush_id,
                reply,
            };
            if server.send_message(commit).is_err() {
                return false;
            }
            crate::spawn::spawn(async move {
                let error = server_answer(rx).await.err();
                let _ = link.send(&Message::FlushCommitted { request_id, error });
            });
        }
        Message::DropStaged { node_id, .. } => {
            if server
                .send_message(ServerMsg::DropStaged { node: node_id })
                .is_err()
            {
                return false;
            }
        }
        Message::Dump { request_id, .. } => {
            let (tx, rx) = oneshot::channel();
            if server.send_message(ServerMsg::Dump { reply: tx }).is_err() {
                return false;
            }
            crate::spawn::spawn(async move {
                if let Ok(rows) = rx.await {
                    send_dump(&link, request_id, rows_to_wire(rows)).await;
                }
            });
        }
        Message::TakeOverShard {
            request_id,
            shard,
            rows,
            restore,
            parts,
        } => {
            let (ack, acked) = oneshot::channel();
            // Arrived: whatever came after it on the link is handled after it here.
            let take_over = ServerMsg::TakeOver {
                shard: harp_core::ShardId(shard),
                rows: ShardRows::from_wire(rows).with_parts(ShardRows::parts_from_wire(parts)),
                ack,
                in_order: true,
                restore: restore.map(|r| crate::server::Restore {
                    generation: r.generation,
                    num_shards: r.num_shards,
                }),
            };
            if server.send_message(take_over).is_err() {
                return false;
            }
            crate::spawn::spawn(async move {
                if acked.await.is_ok() {
                    let _ = link.send(&Message::TookOver { request_id });
                }
            });
        }
        Message::CheckpointDistances { request_id, .. } => {
            let (reply, rx) = oneshot::channel();
            let request = CheckpointRequest::Distances { reply };
            if server.send_message(ServerMsg::Checkpoint(request)).is_err() {
                return false;
            }
            crate::spawn::spawn(async move {
                answer_distances(&link, request_id, server_answer(rx).await).await;
            });
        }
        Message::CheckpointSave {
            request_id,
            keys,
            part,
            parts,
            recorded_epoch,
            ..
        } => {
            let Some(keys) = keys_in_parts.add(request_id, part, parts, keys) else {
                return true; // more parts to come
            };
            let (reply, rx) = oneshot::channel();
            let keys = keys.into_iter().map(Into::into).collect();
            let request = CheckpointRequest::Save {
                keys,
                recorded: recorded_epoch,
                reply,
            };
            if server.send_message(ServerMsg::Checkpoint(request)).is_err() {
                return false;
            }
            crate::spawn::spawn(async move {
                answer_save(&link, request_id, server_answer(rx).await).await;
            });
        }
        Message::ResetRows {
            request_id, rows, ..
        } => {
            let (reply, rx) = oneshot::channel();
            let rows = rows
                .into_iter()
                .map(|(k, v)| (k.into(), v.map(|v| Arc::new(RowData::from(v)))))
                .collect();
            if server
                .send_message(ServerMsg::Reset { rows, reply })
                .is_err()
            {
                return false;
            }
            crate::spawn::spawn(async move {
                let error = server_answer(rx).await.err();
                let _ = link.send(&Message::ResetDone { request_id, error });
            });
        }
        other => tracing::debug!(kind = ?other.kind(), "ignored on a server link"),
    }
    true
}

// ---------------------------------------------------------------- worker proxy

/// Stands (on the master) for a worker in a node process.
pub(crate) struct WorkerProxy<A>(PhantomData<fn() -> A>);

/// What a [`WorkerProxy`] holds: the link to its node, the replies awaited on it, the
/// address the node listens at (where a state it parks is fetched from) and the master's
/// end of parked states.
pub(crate) struct WorkerLink {
    pub link: Link,
    pub pending: Arc<PendingReplies>,
    pub listen_addr: String,
    pub courier: MasterCourier,
}

impl<A> WorkerProxy<A> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

impl<A: App> Actor for WorkerProxy<A> {
    type Msg = WorkerMsg<A>;
    type State = WorkerLink;
    type Arguments = WorkerLink;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let WorkerLink {
            link,
            pending,
            listen_addr,
            courier,
        } = state;
        match msg {
            WorkerMsg::Run(tasks) => {
                let message = Message::RunTasks {
                    tasks: tasks_to_wire::<A>(tasks)?,
                };
                match link.send(&message) {
                    Ok(()) => {}
                    // The node's link broke: its death (lease, closed link) is reported to
                    // the master, which runs these tasks again elsewhere or ends the job.
                    Err(e @ harp_net::NetError::ConnectionLost { .. }) => {
                        tracing::warn!(error = %e, "could not send micro-tasks to a worker node");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            WorkerMsg::Create { executor, created } => {
                // A small message, so on the control stream: before any micro-task sent to
                // it afterwards.
                let request = |request_id| Message::CreateExecutor {
                    request_id,
                    executor: executor.0,
                };
                let gone = format!("the node creating {executor} went away");
                ask_node(link, pending, (Pending::Adopted, request), created, gone).await;
            }
            WorkerMsg::Release { executor, reply } => {
                let (tx, rx) = oneshot::channel();
                let request_id = pending.register(Pending::Released(tx));
                link.send(&Message::ReleaseExecutor {
                    request_id,
                    executor: executor.0,
                })?;
                let from_addr = listen_addr.clone();
                crate::spawn::spawn(async move {
                    let released = match rx.await {
                        Ok(ReleaseResult::Released { state, pending }) => {
                            tasks_from_wire::<A>(pending).map(|pending| ReleasedExecutor {
                                executor: ExecutorBody::Saved(state),
                                pending,
                            })
                        }
                        Ok(ReleaseResult::Parked {
                            transfer,
                            bytes,
                            pending,
                        }) => tasks_from_wire::<A>(pending).map(|pending| ReleasedExecutor {
                            executor: ExecutorBody::Parked(harp_wire::StateFetch {
                                from_addr,
                                transfer,
                                bytes,
                            }),
                            pending,
                        }),
                        Ok(ReleaseResult::Refused(why)) => Err(HarpError::InvalidConfig(why)),
                        Err(_) => Err(HarpError::Remote(format!(
                            "the node hosting {executor} went away during its move"
                        ))),
                    };
                    let _ = reply.send(released);
                });
            }
            WorkerMsg::Adopt {
                executor,
                released,
                adopted,
            } => {
                let (state, fetch) = match released.executor {
                    // A large state the master holds (a resumed job's): the node fetches it
                    // from here rather than in one message.
                    ExecutorBody::Saved(state) if state.len() >= PARK_BYTES_MIN => {
                        (Vec::new(), Some(courier.park(state)))
                    }
                    ExecutorBody::Saved(state) => (state, None),
                    ExecutorBody::Parked(fetch) => (Vec::new(), Some(fetch)),
                    ExecutorBody::Live(e) => match e.save_state() {
                        Ok(state) => (state, None),
                        Err(source) => {
                            let _ = adopted.send(Err(HarpError::InvalidConfig(format!(
                                "cannot save the state of {executor} to move it: {source}"
                            ))));
                            return Ok(());
                        }
                    },
                };
                let pending_tasks = match tasks_to_wire::<A>(released.pending) {
                    Ok(tasks) => tasks,
                    Err(e) => {
                        let _ = adopted.send(Err(e));
                        return Ok(());
                    }
                };
                let request = |request_id| Message::AdoptExecutor {
                    request_id,
                    executor: executor.0,
                    state,
                    fetch,
                    pending: pending_tasks,
                };
                let gone = format!("the node adopting {executor} went away");
                ask_node(link, pending, (Pending::Adopted, request), adopted, gone).await;
            }
            WorkerMsg::Save { executor, reply } => {
                let (tx, rx) = oneshot::channel();
                let request_id = pending.register(Pending::ExecutorSaved(tx));
                link.send(&Message::SaveExecutor {
                    request_id,
                    executor: executor.0,
                })?;
                let (node_addr, courier) = (listen_addr.clone(), courier.clone());
                crate::spawn::spawn(async move {
                    let saved = match rx.await {
                        Ok(ExecutorSaveResult::Saved(state)) => Ok(state),
                        Ok(ExecutorSaveResult::Parked { transfer, bytes }) => {
                            let fetch = harp_wire::StateFetch {
                                from_addr: node_addr.clone(),
                                transfer,
                                bytes,
                            };
                            let what = executor.to_string();
                            courier.dialer.fetch(&node_addr, &fetch, &what).await
                        }
                        Ok(ExecutorSaveResult::Refused(why)) => Err(HarpError::Remote(why)),
                        Err(_) => Err(HarpError::Remote(format!(
                            "the node hosting {executor} went away before it sent its state"
                        ))),
                    };
                    let _ = reply.send(saved);
                });
            }
            WorkerMsg::Expect { .. } | WorkerMsg::Forget { .. } => {
                tracing::debug!("the master's worker proxy carries neither expect nor forget (its node sends them itself)");
            }
        }
        Ok(())
    }
}

/// How an awaited answer is filed among a link's pending replies (a [`Pending`] variant).
type Filing<T> = fn(oneshot::Sender<Result<T, HarpError>>) -> Pending;

/// Sends a worker node the request `request` makes of its id, and hands its answer to
/// `answer` once it comes (`waiting` files the awaited reply); if the send fails, that
/// error, and if the node goes away first, `gone`.
async fn ask_node<T: Send + 'static>(
    link: &Link,
    pending: &PendingReplies,
    (waiting, request): (Filing<T>, impl FnOnce(u64) -> Message),
    answer: oneshot::Sender<Result<T, HarpError>>,
    gone: String,
) {
    let (tx, rx) = oneshot::channel();
    let request_id = pending.register(waiting(tx));
    if let Err(e) = send_sized(link, request(request_id)).await {
        pending.forget(request_id);
        let _ = answer.send(Err(e));
        return;
    }
    crate::spawn::spawn(async move {
        let _ = answer.send(rx.await.unwrap_or(Err(HarpError::Remote(gone))));
    });
}

/// Encodes dispatched micro-tasks (the app's arguments with postcard).
pub(crate) fn tasks_to_wire<A: App>(
    tasks: Vec<crate::worker::TaskEnvelope<A::Args>>,
) -> Result<Vec<TaskEnvelope>, HarpError> {
    tasks
        .into_iter()
        .map(|t| {
            Ok(TaskEnvelope::new(
                t.task,
                t.executor,
                t.version,
                to_bytes(&t.args)?,
            ))
        })
        .collect()
}

// ---------------------------------------------------------------- master proxy

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
fn completions_to_wire<A: App>(
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

#[cfg(test)]
mod tests;
