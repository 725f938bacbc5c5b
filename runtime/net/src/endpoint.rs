//! A node's QUIC endpoint: listens for and opens connections to other nodes of the job.
//!
//! Every operation has a deadline: connecting (handshake included) gives up after
//! `connect_timeout_ms`, and a connection whose peer stops answering is closed by QUIC's idle
//! timeout (`idle_timeout_ms`, kept alive every `keep_alive_ms` while the peer lives), so a
//! dead peer surfaces as an error within seconds instead of a hang.

use crate::credentials::{JobCredentials, NodeIdentity, NODE_NAME};
use crate::error::NetError;
use crate::tls;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Deadlines and limits of the transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportConfig {
    pub connect_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    pub keep_alive_ms: u64,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 3_000,
            idle_timeout_ms: 3_000,
            keep_alive_ms: 500,
        }
    }
}

impl TransportConfig {
    /// quinn's transport settings for these deadlines and limits (also used by the
    /// benchmarks' raw-quinn reference, so both run with the same settings).
    pub fn quinn_transport(&self) -> Result<Arc<quinn::TransportConfig>, NetError> {
        if self.keep_alive_ms == 0 || self.keep_alive_ms >= self.idle_timeout_ms {
            return Err(NetError::Tls(format!(
                "keep-alive ({} ms) must be shorter than the idle timeout ({} ms)",
                self.keep_alive_ms, self.idle_timeout_ms
            )));
        }
        let idle = quinn::IdleTimeout::try_from(Duration::from_millis(self.idle_timeout_ms))
            .map_err(|e| NetError::Tls(format!("idle timeout: {e}")))?;
        let mut t = quinn::TransportConfig::default();
        t.max_idle_timeout(Some(idle));
        t.keep_alive_interval(Some(Duration::from_millis(self.keep_alive_ms)));
        // Bulk transfers of parameter rows and executor state: large windows.
        t.stream_receive_window(quinn::VarInt::from_u32(64 << 20));
        t.receive_window(quinn::VarInt::from_u32(256 << 20));
        t.send_window(256 << 20);
        Ok(Arc::new(t))
    }
}

/// Socket buffers asked of the kernel (it caps them at `net.core.[rw]mem_max`): bulk
/// transfers arrive faster than one wake-up drains the default ~200 KiB, and a dropped
/// datagram halves QUIC's congestion window.
const SOCKET_BUFFER_BYTES: usize = 8 << 20;

/// Binds a UDP socket for a QUIC endpoint with large send and receive buffers.
pub fn bind_udp(addr: SocketAddr) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    // Best effort: a smaller buffer than asked is still a working socket.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER_BYTES);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER_BYTES);
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// A bound endpoint that accepts and opens connections to nodes of one job. Clones share
/// the endpoint, and its transport settings ([`NetEndpoint::set_transport`]).
#[derive(Clone)]
pub struct NetEndpoint {
    endpoint: quinn::Endpoint,
    config: TransportConfig,
    tls: Arc<EndpointTls>,
    /// How connections this endpoint opens from now on are made (quinn keeps a default
    /// client configuration per handle, so clones would not see a change to it).
    dialing: Arc<std::sync::RwLock<Dialing>>,
}

/// The settings of the connections an endpoint opens.
struct Dialing {
    client: quinn::ClientConfig,
    connect_timeout_ms: u64,
}

/// The endpoint's TLS settings, kept to build its QUIC settings again with other
/// transport settings.
struct EndpointTls {
    server: Arc<QuicServerConfig>,
    client: Arc<QuicClientConfig>,
}

impl EndpointTls {
    /// The server and client settings for `transport`.
    fn quic_configs(
        &self,
        transport: &TransportConfig,
    ) -> Result<(quinn::ServerConfig, quinn::ClientConfig), NetError> {
        let transport = transport.quinn_transport()?;
        let mut server = quinn::ServerConfig::with_crypto(self.server.clone());
        server.transport_config(transport.clone());
        let mut client = quinn::ClientConfig::new(self.client.clone());
        client.transport_config(transport);
        Ok((server, client))
    }
}

/// A connection to another node.
#[derive(Clone)]
pub struct PeerConnection {
    pub(crate) conn: quinn::Connection,
}

impl PeerConnection {
    pub fn remote_addr(&self) -> SocketAddr {
        self.conn.remote_address()
    }

    /// The underlying QUIC connection (streams are opened through it).
    pub fn quic(&self) -> &quinn::Connection {
        &self.conn
    }

    /// Closes the connection with a reason the peer sees.
    pub fn close(&self, reason: &str) {
        self.conn
            .close(quinn::VarInt::from_u32(0), reason.as_bytes());
    }
}

/// A peer's connection whose handshake is under way ([`NetEndpoint::accept_handshaking`]).
pub struct Handshaking {
    incoming: quinn::Incoming,
    deadline_ms: u64,
}

impl Handshaking {
    /// Where the peer connects from.
    pub fn remote_addr(&self) -> SocketAddr {
        self.incoming.remote_address()
    }

    /// The connection once the handshake is done; an error if the peer fails it (no or
    /// foreign credentials) or does not finish it within the deadline.
    pub async fn finish(self) -> Result<PeerConnection, NetError> {
        let addr = self.remote_addr();
        let what = format!("handshake with {addr}");
        within_deadline(self.incoming, (addr, &what), self.deadline_ms).await
    }
}

/// Waits at most `deadline_ms` for a handshake (`what` it is, with the peer at `addr`, for
/// the timeout's error): a dial's or an accepted one's.
async fn within_deadline(
    handshake: impl std::future::IntoFuture<Output = Result<quinn::Connection, quinn::ConnectionError>>,
    (addr, what): (SocketAddr, &str),
    deadline_ms: u64,
) -> Result<PeerConnection, NetError> {
    let deadline = Duration::from_millis(deadline_ms);
    let started = std::time::Instant::now();
    let timed_out = |after_ms| NetError::Timeout {
        what: what.to_string(),
        after_ms,
    };
    match tokio::time::timeout(deadline, handshake).await {
        Ok(Ok(conn)) => Ok(PeerConnection { conn }),
        // QUIC's idle timeout can end a handshake nobody answers before the deadline
        // does (with the default settings, a moment before): the same silence, said the
        // same way.
        Ok(Err(quinn::ConnectionError::TimedOut)) => {
            Err(timed_out(started.elapsed().as_millis() as u64))
        }
        Ok(Err(e)) => Err(NetError::Handshake {
            addr,
            message: e.to_string(),
        }),
        Err(_) => Err(timed_out(deadline_ms)),
    }
}

impl NetEndpoint {
    /// Binds `addr` (port 0 picks a free port) with the job's credentials.
    pub fn bind(
        addr: SocketAddr,
        creds: &JobCredentials,
        identity: &NodeIdentity,
        config: TransportConfig,
    ) -> Result<Self, NetError> {
        let server_tls = QuicServerConfig::try_from(tls::server_config(creds, identity)?)
            .map_err(|e| NetError::Tls(e.to_string()))?;
        let client_tls = QuicClientConfig::try_from(tls::client_config(creds, identity)?)
            .map_err(|e| NetError::Tls(e.to_string()))?;
        let tls = Arc::new(EndpointTls {
            server: Arc::new(server_tls),
            client: Arc::new(client_tls),
        });
        let (server, client) = tls.quic_configs(&config)?;
        let bind_error = |e: std::io::Error| NetError::Bind {
            addr,
            message: e.to_string(),
        };
        let socket = bind_udp(addr).map_err(bind_error)?;
        let runtime = quinn::default_runtime()
            .ok_or_else(|| bind_error(std::io::Error::other("no async runtime found")))?;
        let endpoint = quinn::Endpoint::new(Default::default(), Some(server), socket, runtime)
            .map_err(bind_error)?;
        let dialing = Dialing {
            client,
            connect_timeout_ms: config.connect_timeout_ms,
        };
        Ok(Self {
            endpoint,
            config,
            tls,
            dialing: Arc::new(std::sync::RwLock::new(dialing)),
        })
    }

    /// `config` for the connections this endpoint (and every clone of it) opens or accepts
    /// from now on: their idle timeout and keep-alive (QUIC takes the shorter of the two
    /// ends' idle timeouts) and the deadline of the connections it opens (an accepted
    /// handshake keeps the deadline the endpoint was bound with, so a stalled peer holds a
    /// caller of [`Self::accept`] no longer than that). Connections already open keep theirs.
    pub fn set_transport(&self, config: &TransportConfig) -> Result<(), NetError> {
        let (server, client) = self.tls.quic_configs(config)?;
        self.endpoint.set_server_config(Some(server));
        *self
            .dialing
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Dialing {
            client,
            connect_timeout_ms: config.connect_timeout_ms,
        };
        Ok(())
    }

    pub fn local_addr(&self) -> Result<SocketAddr, NetError> {
        self.endpoint.local_addr().map_err(|e| NetError::Bind {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            message: e.to_string(),
        })
    }

    /// Connects to the node at `addr`, within the connect deadline.
    pub async fn connect(&self, addr: SocketAddr) -> Result<PeerConnection, NetError> {
        let (client, connect_timeout_ms) = {
            let dialing = (self.dialing.read()).unwrap_or_else(std::sync::PoisonError::into_inner);
            (dialing.client.clone(), dialing.connect_timeout_ms)
        };
        let connecting = self
            .endpoint
            .connect_with(client, addr, NODE_NAME)
            .map_err(|e| NetError::Connect {
                addr,
                message: e.to_string(),
            })?;
        let what = format!("connecting to {addr}");
        within_deadline(connecting, (addr, &what), connect_timeout_ms).await
    }

    /// Waits for the next incoming connection and its handshake; `None` once the endpoint
    /// is closed. A peer that fails the handshake (no or foreign credentials) yields an
    /// error, and the endpoint keeps accepting. One handshake at a time: a loop that takes
    /// many peers uses [`Self::accept_handshaking`] instead, so that a peer whose handshake
    /// stalls does not hold the others up to the handshake deadline.
    pub async fn accept(&self) -> Option<Result<PeerConnection, NetError>> {
        Some(self.accept_handshaking().await?.finish().await)
    }

    /// Waits for the next incoming connection, whose handshake is still to finish
    /// ([`Handshaking::finish`], within the deadline the endpoint was bound with); `None`
    /// once the endpoint is closed.
    pub async fn accept_handshaking(&self) -> Option<Handshaking> {
        let incoming = self.endpoint.accept().await?;
        Some(Handshaking {
            incoming,
            deadline_ms: self.config.connect_timeout_ms,
        })
    }

    /// Closes every connection and stops accepting.
    pub fn close(&self) {
        self.endpoint
            .close(quinn::VarInt::from_u32(0), b"endpoint closed");
    }

    /// [`Self::close`], then waits (at most `wait`) until every connection has sent its
    /// close and drained, so that peers learn of it at once: a process that exits right
    /// after a plain `close` may not have sent the close yet, and its peers then wait for
    /// their idle timeout.
    pub async fn close_and_drain(&self, wait: Duration) {
        self.close();
        if tokio::time::timeout(wait, self.endpoint.wait_idle())
            .await
            .is_err()
        {
            tracing::debug!(
                wait_ms = wait.as_millis() as u64,
                "connections still draining when the endpoint stopped waiting"
            );
        }
    }

    pub fn config(&self) -> &TransportConfig {
        &self.config
    }
}
