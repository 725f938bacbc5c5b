//! The server side of a node's links: one request from another node (or the master) handed
//! to the local server, and its answer sent back ([`serve_server_request`]).

use super::*;

/// The local server's answer to one request, with its error (or its having stopped) as the
/// text the wire carries.
pub(super) async fn server_answer<T>(
    answer: oneshot::Receiver<Result<T, HarpError>>,
) -> Result<T, String> {
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
                .then(|| crate::remote::fault_delays::apply_answer_delay(node_id))
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
