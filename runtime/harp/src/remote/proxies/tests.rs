//! A server proxy's ordering of shard rows sent in order (`TakeOver { in_order }`) and the
//! flush parts behind them, and `send_sized`'s choice of stream for large messages,
//! watched from the raw QUIC connection of the peer: which stream each message arrives
//! on, and in what order.

use super::*;
use harp_core::ShardId;
use harp_core::TableId;
use harp_net::{JobCredentials, NetEndpoint, PeerConnection, TransportConfig};
use harp_wire::{encode_with, FrameDecoder, FrameLimits, MessageKind, WireCounters};
use std::net::SocketAddr;

/// Where a message reached the peer: its control stream, or a stream of its own.
#[derive(Debug, PartialEq, Eq)]
enum Arrived {
    Control(MessageKind),
    OwnStream(MessageKind),
}

/// What the peer saw, in order (with a `TakeOverShard`'s request id), and its side of the
/// control stream.
struct Peer {
    arrived: mpsc::UnboundedReceiver<(Arrived, Option<u64>)>,
    control: quinn::SendStream,
    _conn: PeerConnection,
}

fn endpoints() -> (NetEndpoint, NetEndpoint) {
    let creds = JobCredentials::generate("proxy-order-test").unwrap();
    let bind = || {
        let identity = creds.issue_node().unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        NetEndpoint::bind(addr, &creds, &identity, TransportConfig::default()).unwrap()
    };
    (bind(), bind())
}

/// Reads every frame of `stream`, reporting each as `wrap(kind)`.
async fn report_frames(
    mut stream: quinn::RecvStream,
    wrap: fn(MessageKind) -> Arrived,
    to: mpsc::UnboundedSender<(Arrived, Option<u64>)>,
) {
    let mut decoder = FrameDecoder::new(FrameLimits::default());
    while let Ok(Some(chunk)) = stream.read_chunk(usize::MAX, true).await {
        decoder.push(&chunk.bytes);
        while let Ok(Some(message)) = decoder.next_frame() {
            let take_over = match &message {
                Message::TakeOverShard { request_id, .. } => Some(*request_id),
                _ => None,
            };
            let _ = to.send((wrap(message.kind()), take_over));
        }
    }
}

/// Accepts the proxy's connection on `endpoint` and reports what arrives on it.
async fn peer(endpoint: NetEndpoint) -> Peer {
    let conn = endpoint.accept().await.unwrap().unwrap();
    let quic = conn.quic().clone();
    let (control, recv) = quic.accept_bi().await.unwrap();
    let (tx, arrived) = mpsc::unbounded_channel();
    crate::spawn::spawn(report_frames(recv, Arrived::Control, tx.clone()));
    crate::spawn::spawn(async move {
        while let Ok(stream) = quic.accept_uni().await {
            crate::spawn::spawn(report_frames(stream, Arrived::OwnStream, tx.clone()));
        }
    });
    Peer {
        arrived,
        control,
        _conn: conn,
    }
}

/// A flush part far above the size that gets a stream of its own.
fn large_part() -> Vec<(ParamKey, RowData)> {
    vec![(
        ParamKey::new(TableId(0), 0),
        RowData::F32(vec![1.0; 40_000]),
    )]
}

fn apply(proxy: &ActorRef<ServerMsg>) {
    let (reply, _) = oneshot::channel();
    let updates = large_part();
    proxy
        .send_message(ServerMsg::Apply {
            updates,
            part: None,
            reply,
        })
        .unwrap();
}

/// A link to a peer that reports what reaches it (the hello already seen on its control
/// stream).
async fn linked_peer() -> (Link, mpsc::UnboundedReceiver<Incoming>, Peer) {
    let (ours, theirs) = endpoints();
    let addr = theirs.local_addr().unwrap();
    let peer = crate::spawn::spawn(peer(theirs));
    let conn = ours.connect(addr).await.unwrap();
    let hello = Message::Heartbeat {
        node_id: 0,
        lease_seq: 0,
    };
    let counters = Arc::new(WireCounters::new());
    let (link, incoming) = Link::open(conn, &hello, FrameLimits::default(), counters)
        .await
        .unwrap();
    let mut peer = peer.await.unwrap();
    let (first, _) = peer.arrived.recv().await.unwrap();
    assert_eq!(first, Arrived::Control(MessageKind::Heartbeat));
    (link, incoming, peer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_parts_follow_unconfirmed_in_order_rows_on_the_control_stream() {
    let (link, incoming, mut peer) = linked_peer().await;
    let (proxy, _) = Actor::spawn(None, ServerProxy, (ServerId(1), 0, link, incoming, 3_000))
        .await
        .unwrap();

    // Rows in order, then a large part: it must not overtake them on a stream of its own.
    let (ack, acked) = oneshot::channel();
    proxy
        .send_message(ServerMsg::TakeOver {
            shard: ShardId(0),
            rows: ShardRows::default(),
            ack,
            in_order: true,
            restore: None,
        })
        .unwrap();
    apply(&proxy);
    let (rows, request_id) = peer.arrived.recv().await.unwrap();
    assert_eq!(rows, Arrived::Control(MessageKind::TakeOverShard));
    let (part, _) = peer.arrived.recv().await.unwrap();
    assert_eq!(
        part,
        Arrived::Control(MessageKind::Apply),
        "a part sent while in-order rows are unconfirmed stays behind them"
    );

    // Once the new owner confirms, large parts get streams of their own again.
    let took_over = Message::TookOver {
        request_id: request_id.unwrap(),
    };
    let frame = encode_with(&took_over, &FrameLimits::default()).unwrap();
    peer.control.write_all(&frame).await.unwrap();
    acked.await.unwrap();
    apply(&proxy);
    let (part, _) = peer.arrived.recv().await.unwrap();
    assert_eq!(part, Arrived::OwnStream(MessageKind::Apply));
}

/// A message that brings an executor, or hands one back, stays on the control stream at
/// any size (`keeps_order`), so the micro-tasks sent after it cannot overtake it; other
/// large messages get a stream of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_that_move_an_executor_keep_their_place_on_the_control_stream() {
    let (link, _incoming, mut peer) = linked_peer().await;
    let state = vec![7u8; 200_000];
    let ordered = [
        Message::CreateExecutor {
            request_id: 1,
            executor: 0,
            from_checkpoint: Some(3),
            state: state.clone(),
            fetch: None,
        },
        Message::AdoptExecutor {
            request_id: 2,
            executor: 0,
            state: state.clone(),
            fetch: None,
            pending: Vec::new(),
        },
        Message::ExecutorReleased {
            request_id: 3,
            executor: 0,
            result: ReleaseResult::Released {
                state,
                pending: Vec::new(),
            },
        },
    ];
    for message in ordered {
        let kind = message.kind();
        assert!(message.payload_size_hint() >= BULK_BYTES_MIN);
        send_sized(&link, message).await.unwrap();
        link.send(&Message::RunTasks { tasks: Vec::new() }).unwrap();
        for expected in [kind, MessageKind::RunTasks] {
            let (arrived, _) = peer.arrived.recv().await.unwrap();
            assert_eq!(arrived, Arrived::Control(expected));
        }
    }
    let rows = rows_to_wire(large_part());
    let apply = Message::Apply {
        request_id: 4,
        server: 1,
        node_id: 0,
        flush_id: NO_PART_ID,
        staged: false,
        held_from: 0,
        forwarded: false,
        updates: rows,
    };
    send_sized(&link, apply).await.unwrap();
    let (arrived, _) = peer.arrived.recv().await.unwrap();
    assert_eq!(arrived, Arrived::OwnStream(MessageKind::Apply));
}

/// A drain (a leaving server's node departs once every node drained it) answers as soon as
/// no request waits for the server, and otherwise waits as long as it is given: the node's
/// deadline for a server's answer, a lease and a second under a long lease, not a fixed
/// 10 s, so a server silent for less than the lease is waited for. (Paused time: the waits
/// are exact.)
#[tokio::test(start_paused = true)]
async fn a_drain_waits_for_unanswered_requests_as_long_as_it_is_given() {
    let pending = PendingReplies::default();
    let asked = tokio::time::Instant::now();
    wait_drained(&pending, std::time::Duration::from_secs(31)).await;
    assert_eq!(
        asked.elapsed(),
        2 * DRAIN_RECHECK,
        "nothing awaited: two quiet checks"
    );

    let (reply, _unanswered) = oneshot::channel();
    pending.register(Pending::Applied(reply));
    let within = std::time::Duration::from_secs(31);
    let asked = tokio::time::Instant::now();
    wait_drained(&pending, within).await;
    let waited = asked.elapsed();
    assert!(
        waited >= within && waited <= within + DRAIN_RECHECK,
        "waited {waited:?} for an unanswered request, given {within:?}"
    );
}

#[test]
fn a_take_over_waits_thirty_seconds_or_a_lease_and_a_second_when_that_is_longer() {
    let secs = std::time::Duration::from_secs;
    assert_eq!(take_over_wait(3_000), secs(30));
    assert_eq!(take_over_wait(29_000), secs(30));
    assert_eq!(take_over_wait(45_000), secs(46));
}
