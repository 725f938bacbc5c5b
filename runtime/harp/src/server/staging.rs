//! A server's staged flush parts (jobs that recover worker nodes, `remote/failures.rs`).
//!
//! A worker node stages each part of a flush on its server under `(node, flush)` instead of
//! having it applied; the master later commits it (the server applies it) or, when the node
//! died before the master committed that flush, drops every part the node left staged. This
//! module keeps those parts and decides, per request, what happens:
//!
//! - parts staged under the same `(node, flush)` add up: with server recovery, the part a
//!   failed server left unanswered is staged again on its shards' new owner, which may
//!   already hold that flush's part for its own shards (the keys differ: a flush carries
//!   one aggregated delta per key); a part of a flush already committed is not kept again
//!   (it would be applied twice);
//! - a commit hands the part over to be applied the first time only: a second commit of the
//!   same `(node, flush)` is a no-op, and so is a commit of a flush that staged nothing here;
//! - dropping a node discards its uncommitted parts and buries it: its later parts are
//!   refused, so nothing of a dead node can be staged after the master gave up on it.
//!
//! Which flushes were committed is remembered per node for the last [`COMMITTED_KEPT`] of
//! them (the master commits a flush once, soon after it was staged, so a late duplicate of
//! an older one does not occur).

use crate::error::HarpError;
use harp_core::{ParamKey, RowData};
use std::collections::{BTreeSet, HashMap};

/// How many committed flush ids a server remembers per node.
pub(crate) const COMMITTED_KEPT: usize = 4_096;

/// One staged part: the deltas one node's flush carries for this server's shards.
pub(crate) type StagedPart = Vec<(ParamKey, RowData)>;

/// What [`Staging::stage`] did with a part.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Staged {
    /// Kept until it is committed or dropped.
    Kept,
    /// That flush was committed already: nothing kept (its part was applied once).
    AlreadyCommitted,
}

/// The staged parts of one server.
#[derive(Debug, Default)]
pub(crate) struct Staging {
    parts: HashMap<(u32, u64), StagedPart>,
    /// Per node, the flushes committed here (the newest [`COMMITTED_KEPT`]).
    committed: HashMap<u32, BTreeSet<u64>>,
    /// Nodes the master declared dead: their parts are refused.
    buried: BTreeSet<u32>,
}

impl Staging {
    /// Keeps `part` as (more of) flush `flush` of node `node`, unless that node was buried
    /// (an error naming it) or the flush already committed.
    pub(crate) fn stage(
        &mut self,
        node: u32,
        flush: u64,
        part: StagedPart,
    ) -> Result<Staged, HarpError> {
        if self.buried.contains(&node) {
            return Err(HarpError::NodeDied {
                node,
                detail: "the master declared it dead; its staged flush parts are refused".into(),
            });
        }
        if self.is_committed(node, flush) {
            return Ok(Staged::AlreadyCommitted);
        }
        self.parts.entry((node, flush)).or_default().extend(part);
        Ok(Staged::Kept)
    }

    /// Flush `flush` of node `node` is committed: its part, to be applied now, the first
    /// time; `None` when it was committed before or staged nothing here.
    pub(crate) fn commit(&mut self, node: u32, flush: u64) -> Option<StagedPart> {
        if self.is_committed(node, flush) {
            return None;
        }
        let committed = self.committed.entry(node).or_default();
        committed.insert(flush);
        if committed.len() > COMMITTED_KEPT {
            committed.pop_first();
        }
        self.parts.remove(&(node, flush))
    }

    /// Node `node` died: its uncommitted parts are discarded (how many) and its later ones
    /// refused.
    pub(crate) fn drop_node(&mut self, node: u32) -> usize {
        self.buried.insert(node);
        self.committed.remove(&node);
        let before = self.parts.len();
        self.parts.retain(|(from, _), _| *from != node);
        before - self.parts.len()
    }

    /// Parts kept now (all nodes).
    pub(crate) fn len(&self) -> usize {
        self.parts.len()
    }

    fn is_committed(&self, node: u32, flush: u64) -> bool {
        self.committed
            .get(&node)
            .is_some_and(|flushes| flushes.contains(&flush))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{ServerActor, ServerMsg};
    use crate::table::TableSet;
    use harp_core::{ServerId, TableId};
    use ractor::{Actor, ActorRef};
    use std::sync::Arc;
    use tokio::sync::oneshot;

    fn part(value: i64) -> StagedPart {
        vec![(ParamKey::new(TableId(0), 1), RowData::I64(vec![value]))]
    }

    #[test]
    fn a_part_is_handed_over_once_by_its_first_commit() {
        let mut staging = Staging::default();
        assert_eq!(staging.stage(1, 7, part(5)).unwrap(), Staged::Kept);
        assert_eq!(staging.commit(1, 7), Some(part(5)));
        assert_eq!(staging.commit(1, 7), None, "a second commit is a no-op");
        // A late resend of the committed part is not kept again.
        assert_eq!(
            staging.stage(1, 7, part(5)).unwrap(),
            Staged::AlreadyCommitted
        );
        assert_eq!(staging.commit(1, 7), None);
        assert_eq!(staging.len(), 0);
    }

    #[test]
    fn parts_staged_under_one_flush_add_up() {
        // E.g. a flush's own part here, then the part a failed server left unanswered,
        // whose shards this server now owns.
        let mut staging = Staging::default();
        let other = vec![(ParamKey::new(TableId(0), 2), RowData::I64(vec![9]))];
        staging.stage(1, 3, part(5)).unwrap();
        staging.stage(1, 3, other.clone()).unwrap();
        assert_eq!(staging.len(), 1);
        assert_eq!(staging.commit(1, 3), Some([part(5), other].concat()));
    }

    #[test]
    fn dropping_a_node_discards_its_parts_and_refuses_later_ones() {
        let mut staging = Staging::default();
        staging.stage(1, 0, part(1)).unwrap();
        staging.stage(1, 1, part(2)).unwrap();
        staging.stage(2, 0, part(3)).unwrap();
        assert_eq!(staging.drop_node(1), 2);
        assert_eq!(staging.commit(1, 0), None, "a dropped part never applies");
        let err = staging.stage(1, 2, part(4)).unwrap_err();
        assert!(matches!(err, HarpError::NodeDied { node: 1, .. }), "{err}");
        // Other nodes' parts are untouched.
        assert_eq!(staging.commit(2, 0), Some(part(3)));
    }

    #[test]
    fn only_the_newest_committed_flushes_are_remembered() {
        let mut staging = Staging::default();
        for flush in 0..=COMMITTED_KEPT as u64 {
            staging.commit(4, flush);
        }
        assert!(!staging.is_committed(4, 0));
        assert!(staging.is_committed(4, 1));
        assert!(staging.is_committed(4, COMMITTED_KEPT as u64));
    }

    async fn stage_on(
        server: &ActorRef<ServerMsg>,
        (node, flush): (u32, u64),
        updates: StagedPart,
    ) -> Result<(), HarpError> {
        let (reply, answer) = oneshot::channel();
        let stage = ServerMsg::Stage {
            node,
            flush,
            updates,
            reply,
        };
        server.send_message(stage).unwrap();
        let kept = answer.await.unwrap()?;
        assert_eq!(
            kept, None,
            "a staged part is applied later, at no epoch yet"
        );
        Ok(())
    }

    async fn commit_on(server: &ActorRef<ServerMsg>, node: u32, flush: u64) {
        let (reply, answer) = oneshot::channel();
        let commit = ServerMsg::Commit { node, flush, reply };
        server.send_message(commit).unwrap();
        answer.await.unwrap().unwrap();
    }

    async fn dump(server: &ActorRef<ServerMsg>) -> Vec<(ParamKey, RowData)> {
        let (reply, rows) = oneshot::channel();
        server.send_message(ServerMsg::Dump { reply }).unwrap();
        rows.await.unwrap()
    }

    #[tokio::test]
    async fn a_server_applies_a_staged_part_once_when_committed_and_never_a_dropped_one() {
        let mut tables = TableSet::new();
        let table = tables.counters_i64("c", 1).unwrap();
        let (server, _) = Actor::spawn(None, ServerActor, (ServerId(0), Arc::new(tables)))
            .await
            .unwrap();
        let key = ParamKey::new(table.id(), 3);
        let add = |n: i64| vec![(key, RowData::I64(vec![n]))];

        stage_on(&server, (1, 0), add(5)).await.unwrap();
        assert!(dump(&server).await.is_empty(), "staged, not applied");
        commit_on(&server, 1, 0).await;
        assert_eq!(dump(&server).await, add(5));
        commit_on(&server, 1, 0).await;
        assert_eq!(dump(&server).await, add(5), "a second commit is a no-op");

        stage_on(&server, (1, 1), add(7)).await.unwrap();
        stage_on(&server, (2, 0), add(100)).await.unwrap();
        server
            .send_message(ServerMsg::DropStaged { node: 1 })
            .unwrap();
        commit_on(&server, 1, 1).await;
        assert_eq!(dump(&server).await, add(5), "a dropped part never applies");
        let refused = stage_on(&server, (1, 2), add(1)).await.unwrap_err();
        assert!(
            matches!(refused, HarpError::NodeDied { node: 1, .. }),
            "{refused}"
        );
        commit_on(&server, 2, 0).await;
        assert_eq!(dump(&server).await, add(105), "other nodes' parts apply");

        // A delta that does not fit its table is refused when staged, and nothing is kept.
        let wrong = vec![(key, RowData::I64(vec![1, 2]))];
        assert!(stage_on(&server, (2, 1), wrong).await.is_err());
        commit_on(&server, 2, 1).await;
        assert_eq!(dump(&server).await, add(105));
    }
}
