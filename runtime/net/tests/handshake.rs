//! Nodes of one job connect and talk; a node holding another job's credentials is refused;
//! credentials survive a save/load round trip; a silent address times out; a peer that closes
//! ends the connection with its reason. (A killed peer is detected by QUIC's idle timeout; the
//! multi-process tests cover it.)

use harp_net::{JobCredentials, NetEndpoint, NetError, TransportConfig};
use std::net::SocketAddr;

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn endpoint(creds: &JobCredentials) -> NetEndpoint {
    let identity = creds.issue_node().unwrap();
    NetEndpoint::bind(loopback(), creds, &identity, TransportConfig::default()).unwrap()
}

#[tokio::test]
async fn nodes_of_one_job_exchange_bytes_on_a_stream() {
    let creds = JobCredentials::generate("job-a").unwrap();
    let (a, b) = (endpoint(&creds), endpoint(&creds));
    let b_addr = b.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let conn = b.accept().await.unwrap().unwrap();
        let (mut send, mut recv) = conn.quic().accept_bi().await.unwrap();
        let got = recv.read_to_end(1024).await.unwrap();
        send.write_all(&got.iter().rev().copied().collect::<Vec<u8>>())
            .await
            .unwrap();
        send.finish().unwrap();
        // Keep the connection open until the client has read the reply.
        conn.quic().closed().await;
    });
    let conn = a.connect(b_addr).await.unwrap();
    let (mut send, mut recv) = conn.quic().open_bi().await.unwrap();
    send.write_all(b"hello").await.unwrap();
    send.finish().unwrap();
    assert_eq!(recv.read_to_end(1024).await.unwrap(), b"olleh");
    conn.close("done");
    server.await.unwrap();
}

#[tokio::test]
async fn a_node_with_another_jobs_credentials_is_refused() {
    let ours = JobCredentials::generate("job-a").unwrap();
    let theirs = JobCredentials::generate("job-b").unwrap();
    let server = endpoint(&ours);
    let addr = server.local_addr().unwrap();
    let accepting = tokio::spawn(async move { server.accept().await.map(|r| r.is_ok()) });
    let intruder = endpoint(&theirs);
    let err = intruder
        .connect(addr)
        .await
        .err()
        .expect("a foreign node must not connect");
    assert!(matches!(err, NetError::Handshake { .. }), "{err}");
    assert_eq!(
        accepting.await.unwrap(),
        Some(false),
        "the server must refuse it too"
    );
}

#[tokio::test]
async fn saved_credentials_load_and_interoperate() {
    let dir = tempfile::tempdir().unwrap();
    let creds = JobCredentials::generate("job-c").unwrap();
    creds.save(dir.path()).unwrap();
    let loaded = JobCredentials::load(dir.path()).unwrap();
    let (a, b) = (endpoint(&creds), endpoint(&loaded));
    let addr = b.local_addr().unwrap();
    let accept = tokio::spawn(async move { b.accept().await.map(|r| r.is_ok()) });
    assert!(a.connect(addr).await.is_ok());
    assert_eq!(accept.await.unwrap(), Some(true));

    std::fs::write(dir.path().join("ca.key"), "not a key").unwrap();
    let err = JobCredentials::load(dir.path())
        .err()
        .expect("a damaged key must not load");
    assert!(
        matches!(err, NetError::CredentialsUnreadable { .. }),
        "{err}"
    );
    let missing = JobCredentials::load(&dir.path().join("nowhere"))
        .err()
        .unwrap();
    assert!(missing.to_string().contains("nowhere"), "{missing}");
}

/// A master given a directory without credentials makes them there (`harp run
/// --credentials DIR` on a fresh machine used to fail: "cannot read ... ca.pem"), with a
/// key only its owner can read; the next load finds the same authority, and a directory
/// with only one of the two files is refused, not overwritten.
#[tokio::test]
async fn credentials_are_made_where_there_are_none_and_loaded_after() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("job-ca");
    let (made, created) = JobCredentials::load_or_generate(&fresh, "job-e").unwrap();
    assert!(created);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(fresh.join("ca.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
    let (loaded, created) = JobCredentials::load_or_generate(&fresh, "job-e").unwrap();
    assert!(!created);
    assert_eq!(made.ca_cert(), loaded.ca_cert());

    std::fs::remove_file(fresh.join("ca.key")).unwrap();
    let err = JobCredentials::load_or_generate(&fresh, "job-e")
        .err()
        .expect("a certificate without its key must not load");
    assert!(err.to_string().contains("ca.key"), "{err}");
    assert!(!fresh.join("ca.key").exists(), "nothing is written over");
}

#[tokio::test]
async fn connecting_to_a_silent_address_times_out() {
    let creds = JobCredentials::generate("job-d").unwrap();
    // A UDP socket that never answers QUIC.
    let silent = std::net::UdpSocket::bind(loopback()).unwrap();
    let config = TransportConfig {
        connect_timeout_ms: 300,
        ..TransportConfig::default()
    };
    let identity = creds.issue_node().unwrap();
    let a = NetEndpoint::bind(loopback(), &creds, &identity, config).unwrap();
    let err = a.connect(silent.local_addr().unwrap()).await.err().unwrap();
    assert!(matches!(err, NetError::Timeout { .. }), "{err}");
}

/// When QUIC's idle timeout ends a handshake nobody answers before the dial's deadline does,
/// the dial still says it timed out (it said `handshake with ADDR refused: timed out`, as
/// if a peer had refused it, while a dial that reached its deadline said it timed out).
#[tokio::test]
async fn a_dial_that_quic_gives_up_on_first_says_it_timed_out() {
    let creds = JobCredentials::generate("job-d").unwrap();
    let silent = std::net::UdpSocket::bind(loopback()).unwrap();
    let config = TransportConfig {
        connect_timeout_ms: 20_000,
        idle_timeout_ms: 300,
        keep_alive_ms: 100,
    };
    let identity = creds.issue_node().unwrap();
    let a = NetEndpoint::bind(loopback(), &creds, &identity, config).unwrap();
    let addr = silent.local_addr().unwrap();
    let err = a.connect(addr).await.err().unwrap();
    assert!(matches!(err, NetError::Timeout { .. }), "{err}");
    let said = err.to_string();
    assert!(
        said.starts_with(&format!("connecting to {addr} timed out after ")),
        "{said}"
    );
}

#[tokio::test]
async fn a_peer_that_closes_ends_the_connection_with_its_reason() {
    let creds = JobCredentials::generate("job-e").unwrap();
    let (a, b) = (endpoint(&creds), endpoint(&creds));
    let addr = b.local_addr().unwrap();
    let accept = tokio::spawn(async move {
        let conn = b.accept().await.unwrap().unwrap();
        b.close();
        conn.quic().closed().await;
    });
    let conn = a.connect(addr).await.unwrap();
    accept.await.unwrap();
    match conn.quic().closed().await {
        quinn::ConnectionError::ApplicationClosed(close) => {
            assert_eq!(&close.reason[..], b"endpoint closed");
        }
        other => panic!("expected the peer's close, got {other}"),
    }
}
