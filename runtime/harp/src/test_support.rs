//! Stand-ins the crate's unit tests share: a server actor that never answers, one that
//! drops the shard rows handed to it (a server node that died with them), a real server
//! behind a tap that tells the relocations it is sent ([`TappedServer`]), one whose
//! acknowledgements of flush parts are lost ([`LostAcks`]), a link
//! between two endpoints of this process ([`link_pair`]), a shard hand-off that waits
//! for its answer ([`hand_off`]), flush parts of one-value rows ([`rows`]), a check that a
//! counters type's `add` sums every field ([`adds_every_counter`]), and the
//! smallest app ([`TestApp`], of any driver; [`OneIteration`]: its driver reports iteration 1
//! and finishes; its executors do nothing).

use crate::app::{App, Driver, DriverContext, Executor, JobInfo};
use crate::server::ServerMsg;
use crate::{AppError, Completion, ExecutorId, ParamClient, TableSet};
use harp_net::{Incoming, JobCredentials, Link, NetEndpoint, TransportConfig};
use harp_wire::{FrameLimits, Message};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::marker::PhantomData;
use std::net::SocketAddr;
use tokio::sync::mpsc;

/// A server that takes every request and never answers (a live but stuck peer): it keeps
/// the requests, so their reply senders stay open and no one sees a hang-up.
pub(crate) struct SilentServer;

impl Actor for SilentServer {
    type Msg = ServerMsg;
    type State = Vec<ServerMsg>;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<ServerMsg>,
        _: (),
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(Vec::new())
    }

    async fn handle(
        &self,
        _myself: ActorRef<ServerMsg>,
        msg: ServerMsg,
        held: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        held.push(msg);
        Ok(())
    }
}

/// What a [`DroppingServer`] drops unanswered (it keeps the rest, like [`SilentServer`]).
#[derive(Clone, Copy)]
pub(crate) enum Drops {
    /// Shard rows handed to it: a server node that died with them, unconfirmed.
    TakeOvers,
    /// Every request but the rows handed to it: a server node that died while the
    /// confirmation of a hand-off was on its way.
    AllButTakeOvers,
}

/// A server that drops one kind of message unanswered and never answers the others.
pub(crate) struct DroppingServer;

impl Actor for DroppingServer {
    type Msg = ServerMsg;
    type State = (Drops, Vec<ServerMsg>);
    type Arguments = Drops;

    async fn pre_start(
        &self,
        _myself: ActorRef<ServerMsg>,
        drops: Drops,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok((drops, Vec::new()))
    }

    async fn handle(
        &self,
        _myself: ActorRef<ServerMsg>,
        msg: ServerMsg,
        (drops, held): &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let take_over = matches!(msg, ServerMsg::TakeOver { .. });
        match (*drops, take_over) {
            (Drops::TakeOvers, true) | (Drops::AllButTakeOvers, false) => drop(msg),
            _ => held.push(msg),
        }
        Ok(())
    }
}

/// A real server whose acknowledgements of flush parts are lost: each
/// [`ServerMsg::Apply`] goes on to the server behind it (`inner`), which applies it, and
/// the sender's reply is dropped unanswered (a server node killed after applying a part,
/// before its answer left). Every other message goes on as it is.
pub(crate) struct LostAcks;

impl Actor for LostAcks {
    type Msg = ServerMsg;
    type State = ActorRef<ServerMsg>;
    type Arguments = ActorRef<ServerMsg>;

    async fn pre_start(
        &self,
        _myself: ActorRef<ServerMsg>,
        inner: ActorRef<ServerMsg>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(inner)
    }

    async fn handle(
        &self,
        _myself: ActorRef<ServerMsg>,
        msg: ServerMsg,
        inner: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let msg = match msg {
            ServerMsg::Apply { updates, part, .. } => {
                let (reply, _) = tokio::sync::oneshot::channel();
                ServerMsg::Apply {
                    updates,
                    part,
                    reply,
                }
            }
            other => other,
        };
        let _ = inner.send_message(msg);
        Ok(())
    }
}

/// A real server behind a tap: every message goes on to `inner`, and each
/// [`ServerMsg::Relocated`] is told as `(shard, new owner)` first.
pub(crate) struct TappedServer;

/// What a [`TappedServer`] is given: the server behind it, and where relocations are told.
pub(crate) type Tap = (
    ActorRef<ServerMsg>,
    mpsc::UnboundedSender<(harp_core::ShardId, harp_core::ServerId)>,
);

impl Actor for TappedServer {
    type Msg = ServerMsg;
    type State = Tap;
    type Arguments = Tap;

    async fn pre_start(
        &self,
        _myself: ActorRef<ServerMsg>,
        tap: Tap,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tap)
    }

    async fn handle(
        &self,
        _myself: ActorRef<ServerMsg>,
        msg: ServerMsg,
        (inner, told): &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let ServerMsg::Relocated { shard, to_id, .. } = &msg {
            let _ = told.send((*shard, *to_id));
        }
        let _ = inner.send_message(msg);
        Ok(())
    }
}

/// The smallest app: no tables of its own, unit tasks, executors that do nothing, and the
/// driver `D` (made with `Default`).
pub(crate) struct TestApp<D>(pub TableSet, PhantomData<fn() -> D>);

/// An app whose driver reports iteration 1 and finishes before dispatching anything.
pub(crate) type OneIteration = TestApp<FinishAtOnce>;

#[derive(Default)]
pub(crate) struct FinishAtOnce;
pub(crate) struct Idle;

impl<D: Driver<TestApp<D>> + Default> App for TestApp<D> {
    type Args = ();
    type Output = ();
    type Driver = D;
    type Executor = Idle;
    fn name(&self) -> &str {
        "test-app"
    }
    fn tables(&self) -> &TableSet {
        &self.0
    }
    fn create_driver(&self, _: &JobInfo) -> Result<D, AppError> {
        Ok(D::default())
    }
    fn create_executor(&self, _: ExecutorId, _: &JobInfo) -> Result<Idle, AppError> {
        Ok(Idle)
    }
}

impl Driver<OneIteration> for FinishAtOnce {
    fn dispatch_initial_tasks(&mut self, ctx: &mut DriverContext<'_, ()>) -> Result<(), AppError> {
        ctx.iteration_completed(1);
        ctx.finish();
        Ok(())
    }
    fn handle_task_completion(
        &mut self,
        _: Completion<()>,
        _: &mut DriverContext<'_, ()>,
    ) -> Result<(), AppError> {
        Ok(())
    }
}

impl<D: Driver<TestApp<D>> + Default> Executor<TestApp<D>> for Idle {
    async fn run_task(&mut self, _: (), _: &mut ParamClient) -> Result<(), AppError> {
        Ok(())
    }
}

/// Both ends of a link between two endpoints of this process, on loopback: the end of the
/// node that dialled (it said `Heartbeat` first) and the end of the node that accepted, each
/// with what arrives at it. The endpoints live as long as this does.
pub(crate) struct LinkPair {
    pub dialer: (Link, mpsc::UnboundedReceiver<Incoming>),
    pub acceptor: (Link, mpsc::UnboundedReceiver<Incoming>),
    _endpoints: (NetEndpoint, NetEndpoint),
}

pub(crate) async fn link_pair() -> LinkPair {
    let creds = JobCredentials::generate("link-pair").unwrap();
    let bind = || {
        let identity = creds.issue_node().unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        NetEndpoint::bind(addr, &creds, &identity, TransportConfig::default()).unwrap()
    };
    let (dialing, accepting) = (bind(), bind());
    let addr = accepting.local_addr().unwrap();
    let dial = async {
        let conn = dialing.connect(addr).await.unwrap();
        let hello = Message::Heartbeat {
            node_id: 1,
            lease_seq: 0,
        };
        Link::open(conn, &hello, FrameLimits::default(), Default::default())
            .await
            .unwrap()
    };
    let accept = async {
        let conn = accepting.accept().await.unwrap().unwrap();
        Link::accept(conn, FrameLimits::default(), Default::default())
            .await
            .unwrap()
    };
    let (dialer, acceptor) = tokio::join!(dial, accept);
    LinkPair {
        dialer,
        acceptor,
        _endpoints: (dialing, accepting),
    }
}

/// Hands `shard` (of `num_shards`) from `from` to server `to` and waits until the new owner
/// holds the rows.
pub(crate) async fn hand_off(
    from: &ActorRef<ServerMsg>,
    (shard, num_shards): (u32, u32),
    to: (u32, &ActorRef<ServerMsg>),
) {
    let (reply, moved) = tokio::sync::oneshot::channel();
    from.send_message(ServerMsg::HandOff {
        shard: harp_core::ShardId(shard),
        num_shards,
        to_id: harp_core::ServerId(to.0),
        to: to.1.clone(),
        reply,
    })
    .unwrap();
    moved.await.unwrap().unwrap();
}

/// Flush parts of table 0 whose rows each hold one value, named by row.
pub(crate) mod rows {
    use harp_core::{ParamKey, RowData, TableId};

    pub(crate) fn key(row: u64) -> ParamKey {
        ParamKey::new(TableId(0), row)
    }

    /// A part adding 1 to each of `rows`.
    pub(crate) fn part(rows: &[u64]) -> Vec<(ParamKey, RowData)> {
        rows.iter()
            .map(|r| (key(*r), RowData::F32(vec![1.0])))
            .collect()
    }

    /// The rows a part carries, in order.
    pub(crate) fn rows_of(updates: &[(ParamKey, RowData)]) -> Vec<u64> {
        updates.iter().map(|(k, _)| k.row).collect()
    }
}

/// Checks that `add` sums every counter of `T` (a struct of `u64` fields): a value whose
/// fields are 1, 2, 3, ... added to itself must have every field doubled, so a field `add`
/// leaves out fails, naming it.
pub(crate) fn adds_every_counter<T>(add: impl Fn(&mut T, &T))
where
    T: Default + serde::Serialize + serde::de::DeserializeOwned,
{
    let mut fields = serde_json::to_value(T::default()).unwrap();
    let fields = fields.as_object_mut().unwrap();
    for (n, value) in fields.values_mut().enumerate() {
        *value = serde_json::json!(n as u64 + 1);
    }
    let one: T = serde_json::from_value(serde_json::Value::Object(fields.clone())).unwrap();
    let mut sum: T = serde_json::from_value(serde_json::Value::Object(fields.clone())).unwrap();
    add(&mut sum, &one);
    let sum = serde_json::to_value(sum).unwrap();
    for (name, value) in fields.iter() {
        assert_eq!(sum[name].as_u64(), value.as_u64().map(|v| 2 * v), "{name}");
    }
}
