//! The node's stand-in for another node's server ([`ServerProxy`]): reads, flush parts
//! (large ones on streams of their own, in order behind unconfirmed shard rows), requests a
//! server answers from its rows, and the shard rows a hand-off sends, over one link.

use super::*;

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
    /// How long a take-over waits for the new owner's confirmation ([`take_over_wait`]).
    take_over_wait: std::time::Duration,
}

impl Actor for ServerProxy {
    type Msg = ServerMsg;
    type State = ServerProxyState;
    /// The server, this node's id, the link to the server's node and what comes on it, and
    /// the job's lease.
    type Arguments = (ServerId, u32, Link, mpsc::UnboundedReceiver<Incoming>, u64);

    async fn pre_start(
        &self,
        _myself: ActorRef<ServerMsg>,
        (server, node, link, mut incoming, lease_timeout_ms): Self::Arguments,
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
            take_over_wait: take_over_wait(lease_timeout_ms),
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
            // The master asks a server node for a hand-off (`ServerNodeProxy`,
            // `HandOffShard`); a node's proxy never carries one.
            ServerMsg::HandOff { shard, reply, .. } => {
                let _ = reply.send(Err(HarpError::InvalidConfig(format!(
                    "{shard} is handed off by the master's order to its server node, not \
                     through another node"
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
                    (&state.link, &state.pending, state.server),
                    (shard, rows, ack, restore),
                    (
                        in_order.then_some(&state.unconfirmed_rows),
                        state.take_over_wait,
                    ),
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
            ServerMsg::Drain { reply, within } => {
                let pending = state.pending.clone();
                crate::spawn::spawn(async move {
                    wait_drained(&pending, within).await;
                    let _ = reply.send(());
                });
            }
            message @ ServerMsg::Crash { .. } => message.refuse_across_processes(),
        }
        Ok(())
    }
}

/// How a flush part is named on the wire (the header fields of [`Message::Apply`]).
pub(super) struct PartHeader {
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
pub(super) fn send_flush_part(
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
/// replies are no longer awaited (a drain must not wait for them). The new owner's
/// confirmation is waited for `confirm_within` at most ([`take_over_wait`]).
pub(super) fn take_over_on_link(
    (link, pending, server): (&Link, &Arc<PendingReplies>, ServerId),
    (shard, rows, ack, restore): (
        harp_core::ShardId,
        ShardRows,
        oneshot::Sender<()>,
        Option<crate::server::Restore>,
    ),
    (unconfirmed, confirm_within): (Option<&Arc<AtomicUsize>>, std::time::Duration),
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
        let deadline = tokio::time::Instant::now() + confirm_within;
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
pub(super) struct UnconfirmedRows(Arc<AtomicUsize>);

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
/// mailbox), or at most `within`: the node's deadline for a server's answer (10 s, or a
/// lease and a second when longer), which every request has too, so a server silent for
/// less than the lease is waited for.
pub(super) async fn wait_drained(pending: &PendingReplies, within: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + within;
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

pub(super) const DRAIN_RECHECK: std::time::Duration = std::time::Duration::from_millis(10);

/// How long a shard's old owner waits for the new one to confirm it holds the rows (see
/// [`take_over_wait`] for a long lease).
const TAKE_OVER_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a shard's old owner (or the master, re-creating a dead server's shards) waits
/// for the new owner's confirmation in a job whose lease is `lease_timeout_ms`:
/// [`TAKE_OVER_DEADLINE`], or a lease and a second when that is longer, so a new owner
/// silent for less than the lease fails no move.
pub(crate) fn take_over_wait(lease_timeout_ms: u64) -> std::time::Duration {
    crate::remote::lease::outlasting_verdict(TAKE_OVER_DEADLINE, lease_timeout_ms)
}
