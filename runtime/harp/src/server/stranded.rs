//! Shards stranded on their way away: this server handed a shard's rows to a new owner that
//! died (or whose link did) before confirming it holds them.
//!
//! The rows are gone from here and the new owner is gone with whatever it got, so the shard
//! has no rows anywhere until the master re-creates it from SCAR's running checkpoint: on
//! the new owner's failure it sends this server a take-over with `restore` for it
//! (`master/recovery.rs`). Meanwhile nothing of it may be served, and nothing sent for it
//! may be lost or answered wrongly. So this server *strands* the shard: it stops forwarding
//! it and holds its requests, in arrival order, until the take-over puts the rows back;
//! then it serves them as usual.
//!
//! A server learns the new owner is gone in one of two ways, whichever comes first: the
//! hand-off's confirmation fails ([`ServerMsg::HandedOver`] with
//! [`HarpError::ShardInTransit`]), or a request it forwarded there is dropped unanswered.
//! A dropped part is asked of this server again ([`ServerMsg::Unanswered`]), which strands
//! every shard it forwards to that owner and holds the part. Parts the dead owner applied
//! and answered before it died are lost with it, like any update a failed server applied
//! after its last save (the restored rows are its saved values).
//!
//! The same holds for a shard whose hand-off was confirmed (the master may not have heard
//! the confirmation yet, or a node sent a request here before it learned the new route):
//! the master re-creates a failed server's shard on the server it came from, when that one
//! still takes load (`master/recovery.rs`), so the take-over reaches the server that holds
//! the requests. Otherwise (that server is leaving, or the shard came along a chain of
//! servers) the master tells every other server where it re-created the shard
//! ([`ServerMsg::Relocated`]): a server that forwards it, or holds it stranded, sends its
//! requests there from now on, the held ones first.

use super::{ServerMsg, ServerState};
use crate::error::HarpError;
use harp_core::{ServerId, ShardId};
use ractor::{ActorId, ActorRef};
use tokio::sync::oneshot;

/// Builds the request for a forwarded part again, with a new reply.
type Again<T> = Box<dyn FnOnce(oneshot::Sender<Result<T, HarpError>>) -> ServerMsg + Send>;

/// The answer to a part of a request that went away from this server, and how to ask this
/// server for that part again if the new owner it went to drops it unanswered.
pub(super) struct AwayPart<T> {
    answer: oneshot::Receiver<Result<T, HarpError>>,
    /// The new owner the part went to, and the part as a request (`None`: held here).
    again: Option<(ActorId, Again<T>)>,
}

impl<T> AwayPart<T> {
    /// A part held here until its shard's rows are in.
    pub(super) fn held(answer: oneshot::Receiver<Result<T, HarpError>>) -> Self {
        Self {
            answer,
            again: None,
        }
    }

    /// A part forwarded to the server actor `to`.
    pub(super) fn forwarded(
        answer: oneshot::Receiver<Result<T, HarpError>>,
        to: ActorId,
        again: impl FnOnce(oneshot::Sender<Result<T, HarpError>>) -> ServerMsg + Send + 'static,
    ) -> Self {
        Self {
            answer,
            again: Some((to, Box::new(again))),
        }
    }

    /// The part's answer. One the new owner dropped unanswered is asked of `server` (this
    /// server, `id`) again, which holds it if the shard is stranded.
    pub(super) async fn answer(
        self,
        server: &ActorRef<ServerMsg>,
        id: ServerId,
    ) -> Result<T, HarpError> {
        let unanswered = match self.answer.await {
            Ok(answer) => return answer,
            Err(unanswered) => unanswered,
        };
        let Some((lost, again)) = self.again else {
            return Err(HarpError::ServerUnreachable(id)); // this server stopped
        };
        tracing::debug!(server = %id, %unanswered, "a forwarded part came back unanswered; asking this server again");
        let (tx, rx) = oneshot::channel();
        let request = Box::new(again(tx));
        if server
            .send_message(ServerMsg::Unanswered { lost, request })
            .is_err()
        {
            return Err(HarpError::ServerUnreachable(id));
        }
        rx.await.unwrap_or(Err(HarpError::ServerUnreachable(id)))
    }
}

impl ServerState {
    /// Holds `shard`'s requests here from now on, instead of forwarding them, until a
    /// take-over re-creates it here ([`Self::unstrand`]).
    pub(super) fn strand(&mut self, shard: ShardId) {
        if self.forwarded.remove(&shard).is_some() {
            tracing::warn!(server = %self.id, %shard, "the new owner of a shard handed off from here never confirmed its rows; holding its requests until it is re-created from the running checkpoint");
        }
        self.held.entry(shard).or_default();
        self.stranded.insert(shard);
    }

    /// Whether `shard` is stranded here (its requests held until it is re-created here).
    pub(super) fn is_stranded(&self, shard: ShardId) -> bool {
        self.stranded.contains(&shard)
    }

    /// `shard`'s rows are here again: the requests held for it are served (after every
    /// message already queued, so after the rows are in).
    pub(super) fn unstrand(&mut self, myself: &ActorRef<ServerMsg>, shard: ShardId) {
        if !self.stranded.remove(&shard) {
            return;
        }
        let held = self.held.remove(&shard).unwrap_or_default();
        tracing::info!(server = %self.id, %shard, requests = held.len(), "a stranded shard was re-created here; serving what was held for it");
        for message in held {
            let _ = myself.send_message(message);
        }
    }

    /// [`ServerMsg::Relocated`]: the master re-created `shard` on another server. If this
    /// server forwards the shard (to a server that may be the one that failed) or holds it
    /// stranded, its traffic goes to the new owner from now on, the held requests first.
    /// Nothing changes for a shard this server holds, never held, or is handing off now
    /// (its held requests wait for that hand-off's answer).
    pub(super) fn relocate(
        &mut self,
        myself: &ActorRef<ServerMsg>,
        shard: ShardId,
        (to_id, to): (ServerId, ActorRef<ServerMsg>),
    ) {
        if to_id == self.id {
            return; // re-created here: its take-over unstrands it
        }
        let stranded = self.stranded.remove(&shard);
        let handing_off = self.held.contains_key(&shard) && !stranded;
        if !stranded && (handing_off || !self.forwarded.contains_key(&shard)) {
            return;
        }
        self.forwarded.insert(shard, to);
        let held = if stranded {
            self.held.remove(&shard).unwrap_or_default()
        } else {
            Vec::new()
        };
        tracing::info!(server = %self.id, %shard, to = %to_id, requests = held.len(), "a shard forwarded from here was re-created on another server; its traffic goes there now");
        // Sent again after every message already queued: forwarded to the new owner.
        for message in held {
            let _ = myself.send_message(message);
        }
    }

    /// [`ServerMsg::Unanswered`]: a part of `request` went to the server actor `lost`, which
    /// dropped it. Every shard forwarded there is stranded; then the request is served as
    /// usual (its stranded keys held).
    pub(super) fn on_unanswered(&mut self, lost: ActorId, request: ServerMsg) {
        let to_lost: Vec<ShardId> = (self.forwarded.iter())
            .filter(|(_, to)| to.get_id() == lost)
            .map(|(shard, _)| *shard)
            .collect();
        for shard in to_lost {
            self.strand(shard);
        }
        match request {
            ServerMsg::Get { keys, reply } => self.get(keys, reply),
            ServerMsg::Apply {
                updates,
                part,
                reply,
            } => self.apply(updates, part, reply),
            other => {
                tracing::debug!(server = %self.id, "only reads and updates are asked again");
                drop(other);
            }
        }
    }
}
