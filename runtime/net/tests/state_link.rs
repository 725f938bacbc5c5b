//! A link opened to fetch an executor state: the peer's state chunks arrive whole, their
//! data exactly as sent, while control messages keep flowing; anything else on a bulk stream
//! of such a link closes it with a typed, counted error.

use bytes::Bytes;
use harp_net::{IncomingChunk, JobCredentials, Link, NetEndpoint, NetError, TransportConfig};
use harp_wire::frame::state_chunk::encode_state_chunk;
use harp_wire::{FrameLimits, Message, MessageKind, WireCounters};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::mpsc;

fn pair() -> (NetEndpoint, NetEndpoint) {
    let creds = JobCredentials::generate("state-link-test").unwrap();
    let mk = || {
        let identity = creds.issue_node().unwrap();
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        NetEndpoint::bind(loopback, &creds, &identity, TransportConfig::default()).unwrap()
    };
    (mk(), mk())
}

fn hello() -> Message {
    Message::Heartbeat {
        node_id: 1,
        lease_seq: 0,
    }
}

/// Both ends of a link opened to fetch a state.
struct Fetch {
    link: Link,
    chunks: mpsc::UnboundedReceiver<IncomingChunk>,
    peer: Link,
    peer_incoming: mpsc::UnboundedReceiver<harp_net::Incoming>,
    _endpoints: (NetEndpoint, NetEndpoint),
}

/// A state link from `a` to `b`, once `b` has its first message.
async fn fetching_link(a: NetEndpoint, b: NetEndpoint, counters: Arc<WireCounters>) -> Fetch {
    let addr = b.local_addr().unwrap();
    let peer = tokio::spawn(async move {
        let conn = b.accept().await.unwrap().unwrap();
        let (link, mut incoming) = Link::accept(conn, FrameLimits::default(), Arc::default())
            .await
            .unwrap();
        assert!(matches!(
            incoming.recv().await,
            Some(Ok(Message::Heartbeat { .. }))
        ));
        (link, incoming, b)
    });
    let conn = a.connect(addr).await.unwrap();
    let (link, _control, chunks) =
        Link::open_for_state(conn, &hello(), FrameLimits::default(), counters)
            .await
            .unwrap();
    let (peer, peer_incoming, b) = peer.await.unwrap();
    Fetch {
        link,
        chunks,
        peer,
        peer_incoming,
        _endpoints: (a, b),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_chunks_arrive_whole_with_their_data_as_sent() {
    let (a, b) = pair();
    let counters = Arc::new(WireCounters::new());
    let Fetch {
        link,
        mut chunks,
        peer,
        mut peer_incoming,
        _endpoints,
    } = fetching_link(a, b, counters.clone()).await;
    let state = Bytes::from(
        (0..3_000_037u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<_>>(),
    );
    let chunk_bytes = 1 << 20;
    let sender = tokio::spawn(async move {
        let mut offset = 0;
        for index in 0.. {
            let end = (offset + chunk_bytes).min(state.len());
            let frame = encode_state_chunk(
                9,
                state.len() as u64,
                offset as u64,
                state.slice(offset..end),
                &peer.limits(),
            )
            .unwrap();
            peer.send_bulk_parts(&mut frame.into_parts(), -1 - index)
                .await
                .unwrap();
            offset = end;
            if offset == state.len() {
                return (peer, state);
            }
        }
        unreachable!()
    });
    // A control message meanwhile, the other way.
    link.send(&hello()).unwrap();
    let mut rebuilt = vec![0u8; 3_000_037];
    for _ in 0..3 {
        let chunk = chunks.recv().await.unwrap().unwrap();
        assert_eq!((chunk.request_id, chunk.total), (9, 3_000_037));
        let start = chunk.offset as usize;
        assert!(chunk.copy_to(&mut rebuilt[start..start + chunk.len()]));
    }
    let (_peer, state) = sender.await.unwrap();
    assert!(rebuilt == state[..], "the state arrived changed");
    assert!(matches!(
        peer_incoming.recv().await,
        Some(Ok(Message::Heartbeat { .. }))
    ));
    let seen = counters.snapshot();
    assert_eq!(seen.frames_of(MessageKind::StateChunk), 3);
    assert_eq!(seen.rejections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_message_on_a_state_stream_closes_the_link() {
    let (a, b) = pair();
    let counters = Arc::new(WireCounters::new());
    let Fetch {
        link,
        mut chunks,
        peer,
        _endpoints,
        ..
    } = fetching_link(a, b, counters.clone()).await;
    peer.send_bulk(&hello()).await.unwrap();
    let got = chunks.recv().await.unwrap();
    assert!(matches!(got, Err(NetError::Protocol { .. })), "{got:?}");
    assert_eq!(counters.snapshot().rejections(), 1);
    match link.connection().quic().closed().await {
        quinn::ConnectionError::LocallyClosed => {}
        quinn::ConnectionError::ApplicationClosed(close) => assert_eq!(
            close.error_code,
            quinn::VarInt::from_u32(harp_net::link::CLOSE_PROTOCOL_ERROR)
        ),
        other => panic!("expected the link closed, got {other}"),
    }
}
