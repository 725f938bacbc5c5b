//! A peer whose handshake stalls (its datagrams stop after the first: it died or was cut off
//! while it connected) holds up no other peer when the acceptor finishes each handshake on
//! a task of its own ([`NetEndpoint::accept_handshaking`]), as the master's accept loop of
//! a running job and the nodes' peer accept loop do. The control: [`NetEndpoint::accept`], one handshake at a time, finishes
//! nothing else until the stalled handshake's deadline has passed.

use harp_net::{JobCredentials, NetEndpoint, TransportConfig};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;

/// The acceptor gives a handshake 1 s; the dialers wait 10 s for theirs.
fn endpoints() -> (NetEndpoint, NetEndpoint, NetEndpoint) {
    let creds = JobCredentials::generate("stalled-handshake").unwrap();
    let bind = |connect_timeout_ms| {
        let identity = creds.issue_node().unwrap();
        let config = TransportConfig {
            connect_timeout_ms,
            ..TransportConfig::default()
        };
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        NetEndpoint::bind(loopback, &creds, &identity, config).unwrap()
    };
    (bind(1_000), bind(10_000), bind(10_000))
}

/// Forwards the first datagram of one client to `server` and drops its later ones (the
/// server's still go back): the server starts the handshake and never sees it finish.
/// Returns the address the client sends to.
async fn first_datagram_only(server: SocketAddr) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut client, mut forwarded) = (None, false);
        let mut buffer = vec![0u8; 65_536];
        while let Ok((len, from)) = socket.recv_from(&mut buffer).await {
            if from == server {
                if let Some(client) = client {
                    let _ = socket.send_to(&buffer[..len], client).await;
                }
            } else if !forwarded {
                (client, forwarded) = (Some(from), true);
                let _ = socket.send_to(&buffer[..len], server).await;
            }
        }
    });
    addr
}

/// One peer's handshake stalls through [`first_datagram_only`]; 300 ms later another peer
/// connects directly. Returns whether each handshake made a connection, in the order they
/// ended on the acceptor, accepting concurrently or one at a time.
async fn handshakes_in_order_of_ending(concurrently: bool) -> Vec<bool> {
    let (acceptor, stalled, healthy) = endpoints();
    let acceptor_addr = acceptor.local_addr().unwrap();
    let (ended, mut ends) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        if concurrently {
            while let Some(handshaking) = acceptor.accept_handshaking().await {
                let ended = ended.clone();
                tokio::spawn(async move {
                    let made = handshaking.finish().await;
                    let _ = ended.send(made.is_ok());
                    if let Ok(conn) = made {
                        conn.quic().closed().await;
                    }
                });
            }
        } else {
            let mut open = Vec::new();
            while let Some(made) = acceptor.accept().await {
                let _ = ended.send(made.is_ok());
                open.extend(made.ok());
            }
        }
    });
    let relay = first_datagram_only(acceptor_addr).await;
    tokio::spawn(async move { stalled.connect(relay).await.is_ok() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let healthy_conn = healthy.connect(acceptor_addr).await.unwrap();
    let mut order = Vec::new();
    while order.len() < 2 {
        order.push(ends.recv().await.unwrap());
    }
    drop(healthy_conn);
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handshake_holds_up_no_other_peer_when_each_is_finished_on_its_own_task() {
    let order = handshakes_in_order_of_ending(true).await;
    assert_eq!(
        order,
        [true, false],
        "the healthy peer's handshake ends first, then the stalled one fails"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepting_one_handshake_at_a_time_holds_every_peer_behind_a_stalled_one() {
    let order = handshakes_in_order_of_ending(false).await;
    assert_eq!(
        order,
        [false, true],
        "the stalled handshake fails first, and only then is the healthy one finished"
    );
}
