//! The master's stand-in for a node's server ([`ServerNodeProxy`]): shard hand-offs,
//! relocations, drains and the requests the master sends a server.

use super::*;

/// Stands (on the master) for the server of a node: shard hand-offs, SCAR's checkpoint
/// requests, resets and dumps (fault injection), and the take-overs of a failed server's
/// shards go this way; reads and flushes do not (the nodes read and flush to each other
/// directly).
pub(crate) struct ServerNodeProxy;

impl Actor for ServerNodeProxy {
    type Msg = ServerMsg;
    /// The node's server, the link to its node, the replies awaited on it, and how long a
    /// take-over waits for its confirmation ([`take_over_wait`]).
    type State = (ServerId, Link, Arc<PendingReplies>, std::time::Duration);
    type Arguments = Self::State;

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
        (server, link, pending, take_over_wait): &mut Self::State,
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
            ServerMsg::Drain { reply, .. } => {
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
                take_over_on_link(
                    (link, pending, *server),
                    (shard, rows, ack, restore),
                    (None, *take_over_wait),
                );
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
