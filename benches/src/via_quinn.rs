//! The reference of the transport benchmarks: raw quinn with the same TLS (harp's mutual-TLS
//! configurations from `harp_net::tls`, the same job authority) and the same transport
//! settings as harp's `NetEndpoint` (idle timeout, keep-alive, flow-control windows), but no
//! framing, encoding, validation, tasks or channels of harp's own.
//!
//! Bulk: the client writes the bytes of an encoded `DumpRows` frame on a unidirectional
//! stream of its own; the peer reads the stream to its end into a buffer and acks with the
//! byte count (8 bytes) on a control stream opened first. Round trip: on one bidirectional
//! stream, the client writes the bytes of an encoded `Get` frame (length-prefixed) and the
//! peer answers with the bytes of an encoded `Rows` frame, so both carry exactly what harp
//! carries.

use crate::peer::{announce, ACCEPT_TIMEOUT};
use crate::via_harp::{rows_reply, REPLY_TIMEOUT};
use anyhow::{anyhow, bail, Context, Result};
use harp_net::credentials::NODE_NAME;
use harp_net::{JobCredentials, NodeIdentity, TransportConfig};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Connection, Endpoint, RecvStream, SendStream};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Largest round-trip message the peer accepts (they are small).
const RTT_MESSAGE_MAX: usize = 1 << 20;

/// quinn's transport settings as harp's `NetEndpoint` sets them.
fn transport() -> Result<Arc<quinn::TransportConfig>> {
    Ok(TransportConfig::default().quinn_transport()?)
}

/// A UDP endpoint on a socket bound as harp binds its own (the same socket buffers).
fn endpoint(bind: SocketAddr, server: Option<quinn::ServerConfig>) -> Result<Endpoint> {
    let socket = harp_net::bind_udp(bind).with_context(|| format!("cannot bind {bind}"))?;
    let runtime = quinn::default_runtime().ok_or_else(|| anyhow!("no async runtime"))?;
    Endpoint::new(Default::default(), server, socket, runtime)
        .with_context(|| format!("cannot bind {bind}"))
}

fn server_endpoint(
    bind: SocketAddr,
    creds: &JobCredentials,
    identity: &NodeIdentity,
) -> Result<Endpoint> {
    let tls = QuicServerConfig::try_from(harp_net::tls::server_config(creds, identity)?)?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(tls));
    server.transport_config(transport()?);
    endpoint(bind, Some(server))
}

async fn connect(creds: &JobCredentials, peer: SocketAddr) -> Result<(Endpoint, Connection)> {
    let identity = creds.issue_node()?;
    let tls = QuicClientConfig::try_from(harp_net::tls::client_config(creds, &identity)?)?;
    let mut client = quinn::ClientConfig::new(Arc::new(tls));
    client.transport_config(transport()?);
    let mut endpoint = endpoint(SocketAddr::from(([127, 0, 0, 1], 0)), None)?;
    endpoint.set_default_client_config(client);
    let connecting = endpoint.connect(peer, NODE_NAME)?;
    let conn = tokio::time::timeout(Duration::from_secs(10), connecting)
        .await
        .map_err(|_| anyhow!("connecting to the quinn peer at {peer} timed out"))??;
    Ok((endpoint, conn))
}

async fn accept_one(endpoint: &Endpoint) -> Result<Connection> {
    let incoming = tokio::time::timeout(ACCEPT_TIMEOUT, endpoint.accept())
        .await
        .context("the parent did not connect")?
        .ok_or_else(|| anyhow!("the endpoint closed before the parent connected"))?;
    Ok(incoming.await?)
}

/// The parent's end of the bulk reference.
pub struct QuinnBulkClient {
    endpoint: Endpoint,
    conn: Connection,
    /// The control stream; the peer acks every bulk stream on it.
    _control: SendStream,
    acks: RecvStream,
}

impl QuinnBulkClient {
    pub async fn connect(creds: &JobCredentials, peer: SocketAddr) -> Result<Self> {
        let (endpoint, conn) = connect(creds, peer).await?;
        let (mut control, acks) = conn.open_bi().await?;
        control.write_all(&[1]).await?; // a stream is seen by the peer once it carries data
        Ok(Self {
            endpoint,
            conn,
            _control: control,
            acks,
        })
    }

    /// Sends `payload` on a stream of its own (handed to quinn without a copy) and waits
    /// for the peer's ack.
    pub async fn bulk(&mut self, payload: &bytes::Bytes) -> Result<()> {
        let mut stream = self.conn.open_uni().await?;
        stream.write_chunk(payload.clone()).await?;
        stream.finish()?;
        let mut ack = [0u8; 8];
        tokio::time::timeout(REPLY_TIMEOUT, self.acks.read_exact(&mut ack))
            .await
            .map_err(|_| anyhow!("no ack from the quinn peer within {REPLY_TIMEOUT:?}"))??;
        let got = u64::from_le_bytes(ack);
        if got != payload.len() as u64 {
            bail!("the quinn peer received {got} bytes of {}", payload.len());
        }
        Ok(())
    }

    pub fn close(&self) {
        self.conn.close(0u32.into(), b"benchmark done");
        self.endpoint.close(0u32.into(), b"benchmark done");
    }
}

/// The peer's end of the bulk reference.
pub async fn serve_bulk(
    bind: SocketAddr,
    creds: &JobCredentials,
    identity: &NodeIdentity,
) -> Result<()> {
    let endpoint = server_endpoint(bind, creds, identity)?;
    announce(endpoint.local_addr()?)?;
    let conn = accept_one(&endpoint).await?;
    let (mut acks, mut control) = conn.accept_bi().await?;
    control.read_exact(&mut [0u8; 1]).await?;
    let mut buf: Vec<u8> = Vec::new();
    // Ends when the parent closes the connection.
    while let Ok(mut stream) = conn.accept_uni().await {
        buf.clear();
        while let Some(chunk) = stream.read_chunk(1 << 20, true).await? {
            buf.extend_from_slice(&chunk.bytes);
        }
        acks.write_all(&(buf.len() as u64).to_le_bytes()).await?;
    }
    Ok(())
}

/// The parent's end of the round-trip reference.
pub struct QuinnRttClient {
    endpoint: Endpoint,
    conn: Connection,
    send: SendStream,
    recv: RecvStream,
    request: Vec<u8>,
    reply: Vec<u8>,
}

impl QuinnRttClient {
    /// `request` is one whole length-prefixed message (an encoded harp frame).
    pub async fn connect(
        creds: &JobCredentials,
        peer: SocketAddr,
        request: Vec<u8>,
    ) -> Result<Self> {
        let (endpoint, conn) = connect(creds, peer).await?;
        let (send, recv) = conn.open_bi().await?;
        Ok(Self {
            endpoint,
            conn,
            send,
            recv,
            request,
            reply: Vec::new(),
        })
    }

    /// Sends the request and waits for the whole reply.
    pub async fn request(&mut self) -> Result<()> {
        self.send.write_all(&self.request).await?;
        let reply = async {
            let mut len = [0u8; 4];
            self.recv.read_exact(&mut len).await?;
            let len = u32::from_le_bytes(len) as usize;
            self.reply.resize(len, 0);
            self.recv.read_exact(&mut self.reply).await?;
            anyhow::Ok(())
        };
        tokio::time::timeout(REPLY_TIMEOUT, reply)
            .await
            .map_err(|_| anyhow!("no reply from the quinn peer within {REPLY_TIMEOUT:?}"))?
    }

    pub fn close(&self) {
        self.conn.close(0u32.into(), b"benchmark done");
        self.endpoint.close(0u32.into(), b"benchmark done");
    }
}

/// The peer's end of the round-trip reference: answers every request with the bytes of an
/// encoded `Rows` frame of one row of `reply_values` f32.
pub async fn serve_rtt(
    bind: SocketAddr,
    creds: &JobCredentials,
    identity: &NodeIdentity,
    reply_values: usize,
) -> Result<()> {
    let reply = harp_wire::encode(&rows_reply(0, reply_values))?;
    let endpoint = server_endpoint(bind, creds, identity)?;
    announce(endpoint.local_addr()?)?;
    let conn = accept_one(&endpoint).await?;
    let (mut send, mut recv) = conn.accept_bi().await?;
    let mut request = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if recv.read_exact(&mut len).await.is_err() {
            return Ok(()); // the parent closed the connection: done
        }
        let len = u32::from_le_bytes(len) as usize;
        if len > RTT_MESSAGE_MAX {
            bail!("a request of {len} bytes (at most {RTT_MESSAGE_MAX})");
        }
        request.resize(len, 0);
        recv.read_exact(&mut request).await?;
        send.write_all(&reply).await?;
    }
}
