//! A node's links to the other nodes' servers, and what it does with them on the master's
//! orders: dial a server (and a passed-over one again), forget one that failed or left,
//! drain one that leaves, tell the local server where a shard went, and hand a shard of
//! the local server to another node's.

use super::fault_delays::{fault_delay, DRAIN_ANSWER_DELAY_VAR, HAND_OFF_ANSWER_DELAY_VAR};
use super::proxies::ServerProxy;
use super::state_transfer::StateDialer;
use crate::app::App;
use crate::error::HarpError;
use crate::job::spawn;
use crate::master::MasterMsg;
use crate::node::ParamStore;
use crate::server::ServerMsg;
use crate::worker::NodeShared;
use harp_core::{ServerId, ShardId};
use harp_net::{Incoming, Link};
use harp_wire::{FrameLimits, HandOffResult, Message, Placement, StateFetch, STATE_FROM_MASTER};
use ractor::ActorRef;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Opens links to other nodes (their servers, or the executor states they parked).
#[derive(Clone)]
pub(super) struct Dialer {
    /// This node's id.
    pub(super) me: u32,
    /// The endpoint, hello and counters every link this node opens uses.
    pub(super) peers: StateDialer,
    /// The master's address, where a state it parked is fetched from.
    pub(super) master_addr: SocketAddr,
}

impl Dialer {
    /// A link to the node listening at `addr` (`what` it is, for errors).
    pub(super) async fn open(
        &self,
        addr: &str,
        what: &str,
    ) -> Result<(Link, mpsc::UnboundedReceiver<Incoming>), HarpError> {
        let conn = self.peers.dial(addr, what).await?;
        Ok(Link::open(
            conn,
            &self.peers.hello,
            FrameLimits::default(),
            self.peers.counters.clone(),
        )
        .await?)
    }

    /// Fetches the state `fetch` names from the node (or the master) that parked it.
    pub(super) async fn fetch_state(
        &self,
        fetch: &StateFetch,
        what: &str,
    ) -> Result<Vec<u8>, HarpError> {
        let addr = if fetch.from_addr == STATE_FROM_MASTER {
            self.master_addr.to_string()
        } else {
            fetch.from_addr.clone()
        };
        self.peers.fetch(&addr, fetch, what).await
    }

    /// A proxy for server `id`, listening at `addr`.
    pub(super) async fn connect(
        &self,
        id: ServerId,
        addr: &str,
    ) -> Result<ActorRef<ServerMsg>, HarpError> {
        let (link, incoming) = self.open(addr, &id.to_string()).await?;
        let lease_timeout_ms = self.peers.lease_timeout_ms;
        spawn(ServerProxy, (id, self.me, link, incoming, lease_timeout_ms)).await
    }
}

/// A placement sent after start names the servers that joined since: reach each new one (in
/// order with the master's later orders, so a shard is never rerouted to an unknown server;
/// the new servers are dialled all at once, so one that does not answer holds the node's
/// orders up for one dial's deadline, not one per server). One that cannot be reached is
/// passed over (with a warning, its address kept in `passed_over`): the master announces a
/// joining node's server only once that node is ready, but it may still die before this
/// node dials it, and reaching it used to be an error that ended this node, and with it a
/// job that was running well.
pub(super) async fn reach_new_servers(
    placement: &Placement,
    (store, servers, dialer): (&ParamStore, &mut ServerProxies, &Dialer),
    (passed_over, orders): (&mut PassedOver, &Orders<'_>),
) {
    let new =
        (placement.servers.iter()).filter(|place| !servers.contains_key(&ServerId(place.server)));
    let dials = new.map(|place| async move {
        let id = ServerId(place.server);
        (place, dialer.connect(id, &place.listen_addr).await)
    });
    for (place, dialled) in futures::future::join_all(dials).await {
        let id = ServerId(place.server);
        match dialled {
            Ok(proxy) => {
                store.add_server(id, proxy.clone());
                servers.insert(id, proxy);
                tracing::info!(server = %id, addr = %place.listen_addr, "reached a server that joined")
            }
            Err(e) => {
                tracing::warn!(server = %id, addr = %place.listen_addr, error = %e, "could not reach a server that joined; passed over until something is routed to it");
                passed_over.pass_over(id, &place.listen_addr, orders);
            }
        }
    }
}

/// This node's proxies to the other nodes' servers (and its own server), by id.
pub(super) type ServerProxies = BTreeMap<ServerId, ActorRef<ServerMsg>>;

/// Opens a proxy to server `id` at `addr` and routes to it from now on.
pub(super) async fn reach_server(
    id: ServerId,
    addr: &str,
    (store, servers, dialer): (&ParamStore, &mut ServerProxies, &Dialer),
) -> Result<(), HarpError> {
    let proxy = dialer.connect(id, addr).await?;
    store.add_server(id, proxy.clone());
    servers.insert(id, proxy);
    Ok(())
}

/// Where a node is in the master's orders: the number of the one in hand, and the queue of
/// those that came after it.
pub(super) struct Orders<'a> {
    pub(super) in_hand: u64,
    pub(super) queue: &'a mpsc::UnboundedReceiver<Incoming>,
}

impl Orders<'_> {
    /// The number of the last order that has come so far.
    fn last_come(&self) -> u64 {
        self.in_hand + self.queue.len() as u64
    }
}

/// The servers this node could not reach when they joined, with their addresses. One is
/// dialled again when the master first sends this node something for it (a shard rerouted
/// to it, a shard to hand to it), so a dial that failed once (a peer slow to answer, a
/// network blip) does not fail this node's micro-tasks for as long as the job runs. Before,
/// a passed-over server was never dialled again, and every later read or update of a shard
/// moved to it failed this node.
///
/// The orders that came while a dial failed are not answered with another dial of the
/// same server (they were sent before the master could know): a lost server's shards
/// rerouted to one this node cannot reach, an order each, cost the node one dial's
/// deadline, not one per shard, during which it took no other order (its micro-tasks, a
/// save, a move, the job's end). Later orders dial it again.
#[derive(Default)]
pub(super) struct PassedOver(BTreeMap<ServerId, PassedOverServer>);

struct PassedOverServer {
    addr: String,
    /// The last order that came while its last dial failed: up to it, no dial again.
    quiet_through: u64,
}

impl PassedOver {
    /// `server`, at `addr`, could not be reached; `orders` is where the node is now.
    fn pass_over(&mut self, server: ServerId, addr: &str, orders: &Orders<'_>) {
        let passed = PassedOverServer {
            addr: addr.to_string(),
            quiet_through: orders.last_come(),
        };
        self.0.insert(server, passed);
    }

    /// Where to dial `server` again while the node handles order `in_hand`: its address,
    /// if it was passed over and its last dial failed before that order came.
    fn due(&self, server: ServerId, in_hand: u64) -> Option<&str> {
        let passed = self.0.get(&server)?;
        (in_hand > passed.quiet_through).then_some(passed.addr.as_str())
    }

    /// Dials `server` again if it was passed over (and is due, [`Self::due`]); on success
    /// it is reached like any other (and forgotten here). Nothing for a server this node
    /// reaches already or never heard of. A second failure is logged, and what is routed
    /// to it fails as before.
    pub(super) async fn reach_again(
        &mut self,
        server: ServerId,
        (store, servers, dialer): (&ParamStore, &mut ServerProxies, &Dialer),
        orders: &Orders<'_>,
    ) {
        if servers.contains_key(&server) {
            return;
        }
        let Some(addr) = self.due(server, orders.in_hand).map(str::to_string) else {
            return;
        };
        match reach_server(server, &addr, (store, servers, dialer)).await {
            Ok(()) => {
                self.0.remove(&server);
                tracing::info!(%server, %addr, "reached a server that was passed over");
            }
            Err(e) => {
                self.pass_over(server, &addr, orders);
                tracing::warn!(%server, %addr, error = %e, "still cannot reach a server that was passed over; what is routed to it fails on this node")
            }
        }
    }

    /// `server` left the job or was lost: no reason to dial it again.
    pub(super) fn forget(&mut self, server: ServerId) {
        self.0.remove(&server);
    }
}

/// `server` failed or left and its shards are on other servers now (the master rerouted
/// them first): forget it and stop its proxy, which closes the link and drops every reply
/// still awaited from it, so the reads and flush parts a failed server left unanswered go
/// to the new owners (a server that left has none: the nodes drained it first).
pub(super) fn forget_server(store: &ParamStore, servers: &mut ServerProxies, server: ServerId) {
    store.forget_server(server);
    if let Some(proxy) = servers.remove(&server) {
        proxy.stop(Some("server gone".into()));
    }
}

/// Answers [`Message::DrainServer`] once nothing this node sent to `server` is unanswered
/// and, with worker recovery, every flush it staged so far is reported: the answer follows
/// those reports on the master link (through the master proxy), so the master has them,
/// and commits the parts staged on `server`, before the server's node departs.
pub(super) fn drain_server<A: App>(
    servers: &ServerProxies,
    node: &Arc<NodeShared<A>>,
    request_id: u64,
    server: ServerId,
) {
    let node = node.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let within = node.store.request_deadline();
    let asked = (servers.get(&server)).is_some_and(|proxy| {
        proxy
            .send_message(ServerMsg::Drain { reply: tx, within })
            .is_ok()
    });
    crate::spawn::spawn(async move {
        if asked {
            let _ = rx.await;
        }
        if let Some(delay) = fault_delay(DRAIN_ANSWER_DELAY_VAR) {
            tracing::warn!(
                delay_ms = delay.as_millis() as u64,
                %server,
                "fault injection: the drain of a leaving server is answered late"
            );
            tokio::time::sleep(delay).await;
        }
        node.tell_master_after_staged_reports(MasterMsg::ServerDrained { request_id })
            .await;
    });
}

/// Tells the local server (`server`, as the master names it) that a failed server's
/// `shard` was re-created on `to_id` ([`ServerMsg::Relocated`]).
pub(super) fn relocate_shard(
    local_server: Option<&ActorRef<ServerMsg>>,
    servers: &ServerProxies,
    server: ServerId,
    (shard, to_id): (ShardId, ServerId),
) {
    let Some(local) = local_server else {
        tracing::debug!(%server, %shard, "a relocation for a server this node does not run");
        return;
    };
    let to = match servers.get(&to_id) {
        Some(proxy) => proxy.clone(),
        // This node's own server (it stops holding the shard once its take-over is in).
        None if to_id == server => local.clone(),
        None => {
            tracing::warn!(%shard, to = %to_id, "a shard was relocated to a server this node cannot reach; its forwarded requests stay where they are");
            return;
        }
    };
    let _ = local.send_message(ServerMsg::Relocated { shard, to_id, to });
}

/// Hands a shard of the local server to another server node; the master hears back once
/// the new owner holds the rows.
pub(super) fn hand_off_shard(
    local_server: Option<&ActorRef<ServerMsg>>,
    servers: &ServerProxies,
    master_link: &Link,
    request_id: u64,
    (shard, num_shards, to_id): (ShardId, u32, ServerId),
) {
    let link = master_link.clone();
    let refuse = move |why: String| {
        let _ = link.send(&Message::ShardHandedOff {
            request_id,
            result: HandOffResult::Refused(why),
        });
    };
    let (Some(local), Some(to)) = (local_server, servers.get(&to_id)) else {
        return refuse(format!(
            "this node cannot hand {shard} to {to_id}: it has no server, or does not know {to_id}"
        ));
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let sent = local.send_message(ServerMsg::HandOff {
        shard,
        num_shards,
        to_id,
        to: to.clone(),
        reply: tx,
    });
    if sent.is_err() {
        return refuse("the local server stopped".into());
    }
    let link = master_link.clone();
    crate::spawn::spawn(async move {
        let result = match rx.await {
            Ok(Ok(moved)) => HandOffResult::Moved {
                rows: moved.rows as u64,
                bytes: moved.bytes,
            },
            Ok(Err(HarpError::ShardInTransit { detail, .. })) => HandOffResult::Unconfirmed(detail),
            Ok(Err(e)) => HandOffResult::Refused(e.to_string()),
            Err(_) => HandOffResult::Refused("the local server stopped".into()),
        };
        if let Some(delay) = fault_delay(HAND_OFF_ANSWER_DELAY_VAR) {
            tracing::warn!(%shard, to = %to_id, delay_ms = delay.as_millis() as u64, "fault injection: the new owner holds the shard; answering the hand-off late");
            tokio::time::sleep(delay).await;
        }
        let _ = link.send(&Message::ShardHandedOff { request_id, result });
    });
}

#[cfg(test)]
#[path = "redial_tests.rs"]
mod redial_tests;
