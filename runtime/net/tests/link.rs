//! Framed messages over a link: control messages arrive in order, bulk messages arrive whole,
//! and a peer that sends garbage is cut off with a typed, counted error.

use harp_net::{JobCredentials, Link, NetEndpoint, NetError, TransportConfig};
use harp_wire::{FrameLimits, Message, ParamKeyWire, RowWire, WireCounters};
use std::net::SocketAddr;
use std::sync::Arc;

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn pair() -> (NetEndpoint, NetEndpoint) {
    let creds = JobCredentials::generate("link-test").unwrap();
    let mk = || {
        let identity = creds.issue_node().unwrap();
        NetEndpoint::bind(loopback(), &creds, &identity, TransportConfig::default()).unwrap()
    };
    (mk(), mk())
}

fn heartbeat(seq: u64) -> Message {
    Message::Heartbeat {
        node_id: 7,
        lease_seq: seq,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_messages_arrive_in_order_and_bulk_messages_whole() {
    let (a, b) = pair();
    let addr = b.local_addr().unwrap();
    let counters = Arc::new(WireCounters::new());
    let limits = FrameLimits::default();
    let server_counters = counters.clone();
    let server = tokio::spawn(async move {
        let conn = b.accept().await.unwrap().unwrap();
        let (link, mut incoming) = Link::accept(conn, limits, server_counters).await.unwrap();
        let mut seqs = Vec::new();
        let mut bulk_rows = 0;
        while seqs.len() < 1001 || bulk_rows == 0 {
            match incoming.recv().await.unwrap().unwrap() {
                Message::Heartbeat { lease_seq, .. } => seqs.push(lease_seq),
                Message::DumpRows { rows, .. } => bulk_rows = rows.len(),
                other => panic!("unexpected {other:?}"),
            }
        }
        link.send(&Message::Shutdown {
            reason: "bye".into(),
        })
        .unwrap();
        (seqs, bulk_rows, link)
    });
    let conn = a.connect(addr).await.unwrap();
    let (link, mut incoming) = Link::open(conn, &heartbeat(0), limits, counters.clone())
        .await
        .unwrap();
    let big = Message::DumpRows {
        request_id: 1,
        rows: (0..64)
            .map(|r| {
                (
                    ParamKeyWire { table: 0, row: r },
                    RowWire::F32(vec![r as f32; 40_000]),
                )
            })
            .collect(),
        part: 0,
        parts: 1,
    };
    let bulk = {
        let link = link.clone();
        tokio::spawn(async move { link.send_bulk(&big).await })
    };
    for seq in 1..=1000 {
        link.send(&heartbeat(seq)).unwrap();
    }
    bulk.await.unwrap().unwrap();
    let (seqs, bulk_rows, _server_link) = server.await.unwrap();
    assert_eq!(
        seqs,
        (0..=1000).collect::<Vec<u64>>(),
        "control messages out of order"
    );
    assert_eq!(bulk_rows, 64);
    assert!(matches!(
        incoming.recv().await,
        Some(Ok(Message::Shutdown { .. }))
    ));
    assert_eq!(counters.snapshot().rejections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_control_stream_closes_the_link_with_a_counted_error() {
    let (a, b) = pair();
    let addr = b.local_addr().unwrap();
    let counters = Arc::new(WireCounters::new());
    let server_counters = counters.clone();
    let server = tokio::spawn(async move {
        let conn = b.accept().await.unwrap().unwrap();
        let (_link, mut incoming) = Link::accept(conn, FrameLimits::default(), server_counters)
            .await
            .unwrap();
        let first = incoming.recv().await.unwrap();
        let second = incoming.recv().await.unwrap();
        (first.is_ok(), second)
    });
    let conn = a.connect(addr).await.unwrap();
    let (mut send, _recv) = conn.quic().open_bi().await.unwrap();
    // A valid frame, then a length prefix far beyond the frame limit.
    send.write_all(&harp_wire::encode(&heartbeat(1)).unwrap())
        .await
        .unwrap();
    send.write_all(&[0xff, 0xff, 0xff, 0x7f, 1, 2, 3])
        .await
        .unwrap();
    let (first_ok, second) = server.await.unwrap();
    assert!(first_ok);
    assert!(
        matches!(second, Err(NetError::Protocol { .. })),
        "{second:?}"
    );
    assert_eq!(counters.snapshot().rejections(), 1);
    // The peer sees its connection closed with the protocol-error code.
    match conn.quic().closed().await {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(
                close.error_code,
                quinn::VarInt::from_u32(harp_net::link::CLOSE_PROTOCOL_ERROR)
            );
        }
        other => panic!("expected a protocol close, got {other}"),
    }
}
