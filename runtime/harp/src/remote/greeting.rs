//! A connection's first words, as whoever accepts it hears them: the peer opens its link
//! and says hello, both within one bound ([`HELLO_WAIT`]). A peer that connects and then
//! says nothing (it opened no stream, or sent nothing on it) is dropped after that wait
//! instead of holding a task and a connection, kept open by its keep-alives, for as long
//! as the endpoint lives.

use harp_net::{Incoming, Link, PeerConnection};
use harp_wire::{FrameLimits, Hello, Message, WireCounters};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long an accepted connection has to open its link and say hello.
pub(crate) const HELLO_WAIT: Duration = Duration::from_secs(5);

/// The link of an accepted connection and the hello it began with.
pub(crate) struct Greeted {
    pub(crate) link: Link,
    pub(crate) incoming: mpsc::UnboundedReceiver<Incoming>,
    pub(crate) hello: Hello,
}

/// Accepts `conn`'s link and reads its hello within `wait`; `None` (the connection closed,
/// with a reason where a link was open) when the peer said something else or nothing.
pub(crate) async fn greet(
    conn: PeerConnection,
    counters: Arc<WireCounters>,
    wait: Duration,
) -> Option<Greeted> {
    let first_words = async {
        let (link, mut incoming) = Link::accept(conn.clone(), FrameLimits::default(), counters)
            .await
            .ok()?;
        match incoming.recv().await {
            Some(Ok(Message::Hello(hello))) => Some(Greeted {
                link,
                incoming,
                hello,
            }),
            _ => {
                link.close("expected hello");
                None
            }
        }
    };
    match tokio::time::timeout(wait, first_words).await {
        Ok(greeted) => greeted,
        Err(_) => {
            conn.close("no hello in time");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::JobCredentials;
    use harp_net::{NetEndpoint, TransportConfig};
    use harp_wire::NodeRole;
    use std::net::SocketAddr;

    /// How long a test waits for a greeting that must come (a guard against a hang).
    const GUARD: Duration = Duration::from_secs(20);

    fn bind(creds: &JobCredentials) -> NetEndpoint {
        let identity = creds.issue_node().unwrap();
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        NetEndpoint::bind(loopback, creds, &identity, TransportConfig::default()).unwrap()
    }

    /// An acceptor and a peer connected to it: the acceptor's side of the connection and
    /// the peer's.
    async fn connected(creds: &JobCredentials) -> (PeerConnection, PeerConnection) {
        let (acceptor, peer) = (bind(creds), bind(creds));
        let addr = acceptor.local_addr().unwrap();
        let accepted = tokio::spawn(async move { acceptor.accept().await.unwrap().unwrap() });
        let dialled = peer.connect(addr).await.unwrap();
        (accepted.await.unwrap(), dialled)
    }

    fn hello_of(creds: &JobCredentials) -> Message {
        let role = NodeRole {
            worker: true,
            ..NodeRole::default()
        };
        harp_wire::hello(crate::remote::job_id(creds), 3, role, "127.0.0.1:1".into())
    }

    #[tokio::test]
    async fn a_peer_that_says_hello_is_greeted_with_its_hello() {
        let creds = JobCredentials::generate("greeting").unwrap();
        let (accepted, dialled) = connected(&creds).await;
        let limits = FrameLimits::default();
        let _peer = Link::open(dialled, &hello_of(&creds), limits, Arc::default())
            .await
            .unwrap();
        let greeted = tokio::time::timeout(GUARD, greet(accepted, Arc::default(), GUARD))
            .await
            .expect("greeted within the guard")
            .expect("a hello");
        assert_eq!(greeted.hello.node_id, 3);
        assert!(greeted.hello.role.worker && !greeted.hello.role.server);
    }

    /// A peer that connects and opens no stream (its keep-alives hold the connection open)
    /// is dropped once the wait passed: the acceptor gives up and closes the connection.
    #[tokio::test]
    async fn a_peer_that_says_nothing_is_dropped_after_the_wait() {
        let creds = JobCredentials::generate("greeting").unwrap();
        let (accepted, dialled) = connected(&creds).await;
        let wait = Duration::from_millis(300);
        let greeted = tokio::time::timeout(GUARD, greet(accepted, Arc::default(), wait)).await;
        assert!(matches!(greeted, Ok(None)), "a silent peer was not dropped");
        let closed = tokio::time::timeout(GUARD, dialled.quic().closed()).await;
        let why = closed
            .expect("the silent peer's connection closes")
            .to_string();
        assert!(why.contains("no hello in time"), "{why}");
    }

    /// A peer whose first message is not a hello is not greeted.
    #[tokio::test]
    async fn a_peer_that_begins_with_another_message_is_not_greeted() {
        let creds = JobCredentials::generate("greeting").unwrap();
        let (accepted, dialled) = connected(&creds).await;
        let limits = FrameLimits::default();
        let not_hello = Message::Heartbeat {
            node_id: 3,
            lease_seq: 1,
        };
        let _peer = Link::open(dialled, &not_hello, limits, Arc::default())
            .await
            .unwrap();
        let greeted = tokio::time::timeout(GUARD, greet(accepted, Arc::default(), GUARD)).await;
        assert!(matches!(greeted, Ok(None)), "greeted without a hello");
    }
}
