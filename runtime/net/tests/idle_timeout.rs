//! An endpoint's idle timeout and dial deadline can be changed once it is bound
//! ([`NetEndpoint::set_transport`]), for its clones too, and for the connections it opens
//! and accepts from then on: a node binds before it knows the job's lease and takes it on
//! once the master's welcome says it. QUIC takes the shorter of the two ends' idle
//! timeouts, so each idle test has one end at an hour and the other set to 400 ms, then
//! cuts the traffic between them (a relay that stops forwarding): the connection must
//! close within a few seconds, which only the 400 ms can have done. The dial test cuts
//! the relay for 4 s while a dial is under way.

use harp_net::{JobCredentials, NetEndpoint, PeerConnection, TransportConfig};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;

const AN_HOUR_MS: u64 = 3_600_000;

/// Two endpoints of one job, each idle for an hour before it times out.
fn patient_pair() -> (NetEndpoint, NetEndpoint) {
    let creds = JobCredentials::generate("idle-test").unwrap();
    let bind = || {
        let identity = creds.issue_node().unwrap();
        let patient = TransportConfig {
            idle_timeout_ms: AN_HOUR_MS,
            ..TransportConfig::default()
        };
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        NetEndpoint::bind(loopback, &creds, &identity, patient).unwrap()
    };
    (bind(), bind())
}

/// `set_transport`'s settings: an idle timeout of 400 ms, a keep-alive of 100 ms, a dial
/// deadline of `connect_timeout_ms`.
fn quick_to_notice(connect_timeout_ms: u64) -> TransportConfig {
    TransportConfig {
        connect_timeout_ms,
        idle_timeout_ms: 400,
        keep_alive_ms: 100,
    }
}

/// Forwards datagrams between one client and `server` while `cut` is not set, and drops
/// them while it is. Returns the address the client sends to.
async fn relay(server: SocketAddr, cut: Arc<AtomicBool>) -> SocketAddr {
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut client = None;
        let mut buffer = vec![0u8; 65_536];
        while let Ok((len, from)) = socket.recv_from(&mut buffer).await {
            let to = if from == server {
                client
            } else {
                client = Some(from);
                Some(server)
            };
            if let (Some(to), false) = (to, cut.load(Ordering::Relaxed)) {
                let _ = socket.send_to(&buffer[..len], to).await;
            }
        }
    });
    addr
}

/// Connects `dialer` to `acceptor` through a relay, cuts the relay, and says whether the
/// connection closed within 5 s.
async fn closes_soon_after_a_cut(dialer: &NetEndpoint, acceptor: &NetEndpoint) -> bool {
    let cut = Arc::new(AtomicBool::new(false));
    let through = relay(acceptor.local_addr().unwrap(), cut.clone()).await;
    let accepted = tokio::spawn({
        let acceptor = acceptor.clone();
        async move { acceptor.accept().await.unwrap().unwrap() }
    });
    let dialled: PeerConnection = dialer.connect(through).await.unwrap();
    let accepted = accepted.await.unwrap();
    cut.store(true, Ordering::Relaxed);
    let closed = tokio::time::timeout(Duration::from_secs(5), dialled.quic().closed()).await;
    drop(accepted);
    closed.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_dials_with_the_idle_timeout_set_after_it_was_made() {
    let (dialer, acceptor) = patient_pair();
    let clone = dialer.clone();
    dialer.set_transport(&quick_to_notice(3_000)).unwrap();
    assert!(closes_soon_after_a_cut(&clone, &acceptor).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_accepts_with_the_idle_timeout_set_after_it_was_bound() {
    let (dialer, acceptor) = patient_pair();
    acceptor
        .clone()
        .set_transport(&quick_to_notice(3_000))
        .unwrap();
    assert!(closes_soon_after_a_cut(&dialer, &acceptor).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_shorter_idle_timeout_a_cut_connection_stays_open() {
    // The control: both ends at an hour, the cut connection is still open after 5 s.
    let (dialer, acceptor) = patient_pair();
    assert!(!closes_soon_after_a_cut(&dialer, &acceptor).await);
}

#[tokio::test]
async fn a_keep_alive_not_shorter_than_the_idle_timeout_is_refused() {
    let (endpoint, _) = patient_pair();
    let refused = endpoint
        .set_transport(&TransportConfig {
            keep_alive_ms: 400,
            ..quick_to_notice(3_000)
        })
        .unwrap_err();
    assert!(refused.to_string().contains("keep-alive"), "{refused}");
}

/// Dials through a relay cut for its first 4 s; whether the connection was made.
async fn dials_through_a_4_s_cut(dialer: &NetEndpoint, acceptor: &NetEndpoint) -> bool {
    let cut = Arc::new(AtomicBool::new(true));
    let through = relay(acceptor.local_addr().unwrap(), cut.clone()).await;
    let acceptor = acceptor.clone();
    tokio::spawn(async move { while acceptor.accept().await.is_some() {} });
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(4)).await;
        cut.store(false, Ordering::Relaxed);
    });
    dialer.connect(through).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dial_waits_as_long_as_the_deadline_set_after_binding() {
    let (dialer, acceptor) = patient_pair();
    // The default deadline, 3 s, gives up inside the cut; one of 15 s outlasts it (with an
    // idle timeout longer than the cut: it bounds a handshake's silence too).
    assert!(!dials_through_a_4_s_cut(&dialer, &acceptor).await);
    let patient_dial = TransportConfig {
        connect_timeout_ms: 15_000,
        idle_timeout_ms: 60_000,
        keep_alive_ms: 500,
    };
    dialer.clone().set_transport(&patient_dial).unwrap();
    assert!(dials_through_a_4_s_cut(&dialer, &acceptor).await);
}
