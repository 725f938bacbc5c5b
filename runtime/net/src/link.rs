//! Messages between two nodes over one QUIC connection.
//!
//! Small messages (task dispatches, completions, reads, acks, heartbeats) travel in order on
//! one bidirectional *control* stream. Bulk messages (rows, flushed updates, dumps, executor
//! state) each travel on a unidirectional stream of their own, so a large transfer never
//! holds up a small request behind it. Every frame is decoded with harp-wire's bounded,
//! validating decoder; a malformed frame closes the connection and is counted, and the
//! receiver sees a typed error, never a panic. A link opened to fetch an executor state
//! ([`Link::open_for_state`]) reads its bulk streams as state chunks instead, without
//! copying their data ([`crate::state_link`]).

use crate::endpoint::PeerConnection;
use crate::error::NetError;
use crate::state_link::{read_state_chunks, IncomingChunk};
use bytes::Bytes;
use harp_wire::{encode_with, FrameDecoder, FrameLimits, Message, WireCounters};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Application error code a link closes its connection with after a protocol error.
pub const CLOSE_PROTOCOL_ERROR: u32 = 1;

/// What the receiving half of a link yields.
pub type Incoming = Result<Message, NetError>;

/// The sending half of a link. Cheap to clone.
#[derive(Clone)]
pub struct Link {
    conn: PeerConnection,
    control: mpsc::UnboundedSender<bytes::Bytes>,
    limits: FrameLimits,
}

impl Link {
    /// Opens the control stream on a connection this node dialed and starts the readers.
    /// `first` is sent before anything else (the dialer speaks first: its `Hello`).
    pub async fn open(
        conn: PeerConnection,
        first: &Message,
        limits: FrameLimits,
        counters: Arc<WireCounters>,
    ) -> Result<(Link, mpsc::UnboundedReceiver<Incoming>), NetError> {
        let (send, recv) = Self::open_control(&conn, first, &limits).await?;
        Ok(Self::start(
            conn,
            send,
            recv,
            (limits, counters),
            Bulk::Messages,
        ))
    }

    /// Like [`open`](Self::open), for fetching an executor state: every bulk stream the
    /// peer opens must carry one `StateChunk` frame, which arrives on the second receiver
    /// with its data as received (not copied). Control messages arrive on the first.
    pub async fn open_for_state(
        conn: PeerConnection,
        first: &Message,
        limits: FrameLimits,
        counters: Arc<WireCounters>,
    ) -> Result<
        (
            Link,
            mpsc::UnboundedReceiver<Incoming>,
            mpsc::UnboundedReceiver<IncomingChunk>,
        ),
        NetError,
    > {
        let (send, recv) = Self::open_control(&conn, first, &limits).await?;
        let (chunks_tx, chunks) = mpsc::unbounded_channel();
        let (link, incoming) = Self::start(
            conn,
            send,
            recv,
            (limits, counters),
            Bulk::StateChunks(chunks_tx),
        );
        Ok((link, incoming, chunks))
    }

    /// Opens the control stream and writes `first` on it.
    async fn open_control(
        conn: &PeerConnection,
        first: &Message,
        limits: &FrameLimits,
    ) -> Result<(quinn::SendStream, quinn::RecvStream), NetError> {
        let addr = conn.remote_addr();
        let (mut send, recv) = conn.quic().open_bi().await.map_err(|e| lost(addr, e))?;
        let frame = encode_with(first, limits).map_err(|e| NetError::Protocol {
            addr,
            message: e.to_string(),
        })?;
        send.write_all(&frame).await.map_err(|e| lost(addr, e))?;
        Ok((send, recv))
    }

    /// Accepts the control stream of a connection another node dialed and starts the readers.
    pub async fn accept(
        conn: PeerConnection,
        limits: FrameLimits,
        counters: Arc<WireCounters>,
    ) -> Result<(Link, mpsc::UnboundedReceiver<Incoming>), NetError> {
        let addr = conn.remote_addr();
        let (send, recv) = conn.quic().accept_bi().await.map_err(|e| lost(addr, e))?;
        Ok(Self::start(
            conn,
            send,
            recv,
            (limits, counters),
            Bulk::Messages,
        ))
    }

    fn start(
        conn: PeerConnection,
        send: quinn::SendStream,
        recv: quinn::RecvStream,
        (limits, counters): (FrameLimits, Arc<WireCounters>),
        bulk: Bulk,
    ) -> (Link, mpsc::UnboundedReceiver<Incoming>) {
        let (in_tx, in_rx) = mpsc::unbounded_channel();
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        tokio::spawn(write_control(send, control_rx));
        tokio::spawn(read_control(
            conn.clone(),
            recv,
            limits,
            counters.clone(),
            in_tx.clone(),
        ));
        match bulk {
            Bulk::Messages => tokio::spawn(read_bulk(conn.clone(), limits, counters, in_tx)),
            Bulk::StateChunks(chunks) => {
                tokio::spawn(read_state_chunks(conn.clone(), limits, counters, chunks))
            }
        };
        (
            Link {
                conn,
                control: control_tx,
                limits,
            },
            in_rx,
        )
    }

    pub fn remote_addr(&self) -> SocketAddr {
        self.conn.remote_addr()
    }

    /// Queues `message` on the control stream (in order with every other control message).
    pub fn send(&self, message: &Message) -> Result<(), NetError> {
        let addr = self.remote_addr();
        let frame = encode_with(message, &self.limits).map_err(|e| NetError::Protocol {
            addr,
            message: e.to_string(),
        })?;
        self.control
            .send(frame)
            .map_err(|_| NetError::ConnectionLost {
                addr,
                message: "the control stream is closed".into(),
            })
    }

    /// Sends `message` on a stream of its own and waits until it is handed to QUIC.
    pub async fn send_bulk(&self, message: &Message) -> Result<(), NetError> {
        let addr = self.remote_addr();
        let frame = encode_with(message, &self.limits).map_err(|e| NetError::Protocol {
            addr,
            message: e.to_string(),
        })?;
        let mut stream = self
            .conn
            .quic()
            .open_uni()
            .await
            .map_err(|e| lost(addr, e))?;
        // Hands the encoded frame to quinn without another copy.
        stream.write_chunk(frame).await.map_err(|e| lost(addr, e))?;
        stream.finish().map_err(|e| lost(addr, e))?;
        Ok(())
    }

    /// Writes `parts` (one frame, e.g. a state chunk's header, data and tail, none of them
    /// copied) on a stream of its own sent with `priority` (higher first; control messages
    /// have 0), and waits until they are handed to QUIC.
    pub async fn send_bulk_parts(
        &self,
        parts: &mut [Bytes],
        priority: i32,
    ) -> Result<(), NetError> {
        let addr = self.remote_addr();
        let mut stream = self
            .conn
            .quic()
            .open_uni()
            .await
            .map_err(|e| lost(addr, e))?;
        stream.set_priority(priority).map_err(|e| lost(addr, e))?;
        stream
            .write_all_chunks(parts)
            .await
            .map_err(|e| lost(addr, e))?;
        stream.finish().map_err(|e| lost(addr, e))?;
        Ok(())
    }

    /// The frame limits this link sends and receives under.
    pub fn limits(&self) -> FrameLimits {
        self.limits
    }

    /// Closes the connection with `reason`.
    pub fn close(&self, reason: &str) {
        self.conn.close(reason);
    }

    pub fn connection(&self) -> &PeerConnection {
        &self.conn
    }
}

/// How a link reads the streams of its own that the peer opens.
enum Bulk {
    /// Any message, decoded ([`read_bulk`]).
    Messages,
    /// State chunks only, their data as received.
    StateChunks(mpsc::UnboundedSender<IncomingChunk>),
}

pub(crate) fn lost(addr: SocketAddr, e: impl std::fmt::Display) -> NetError {
    NetError::ConnectionLost {
        addr,
        message: e.to_string(),
    }
}

/// A read that failed: with why the connection ended where it did (quinn's read error
/// says only "connection lost"; its connection error says how, e.g. the reason the peer
/// closed it with).
fn lost_reading(conn: &PeerConnection, e: quinn::ReadError) -> NetError {
    match e {
        quinn::ReadError::ConnectionLost(why) => lost(conn.remote_addr(), why),
        other => lost(conn.remote_addr(), other),
    }
}

async fn write_control(
    mut send: quinn::SendStream,
    mut frames: mpsc::UnboundedReceiver<bytes::Bytes>,
) {
    while let Some(frame) = frames.recv().await {
        if send.write_chunk(frame).await.is_err() {
            return; // the reader side reports the lost connection
        }
    }
    let _ = send.finish();
}

/// Rejects the peer after a protocol error: counts (in the decoder), closes, reports.
pub(crate) fn protocol_error<T>(
    conn: &PeerConnection,
    error: harp_wire::WireError,
    out: &mpsc::UnboundedSender<Result<T, NetError>>,
) {
    let addr = conn.remote_addr();
    tracing::warn!(%addr, %error, "closing connection after a protocol error");
    conn.quic().close(
        quinn::VarInt::from_u32(CLOSE_PROTOCOL_ERROR),
        error.to_string().as_bytes(),
    );
    let _ = out.send(Err(NetError::Protocol {
        addr,
        message: error.to_string(),
    }));
}

async fn read_control(
    conn: PeerConnection,
    mut recv: quinn::RecvStream,
    limits: FrameLimits,
    counters: Arc<WireCounters>,
    out: mpsc::UnboundedSender<Incoming>,
) {
    let mut decoder = FrameDecoder::with_counters(limits, counters);
    loop {
        match recv.read_chunk(64 * 1024, true).await {
            Ok(Some(chunk)) => decoder.push(&chunk.bytes),
            Ok(None) => {
                if let Err(e) = decoder.finish() {
                    protocol_error(&conn, e, &out);
                }
                return;
            }
            Err(e) => {
                let _ = out.send(Err(lost_reading(&conn, e)));
                return;
            }
        }
        loop {
            match decoder.next_frame() {
                Ok(Some(message)) => {
                    if out.send(Ok(message)).is_err() {
                        return; // nobody listens any more
                    }
                }
                Ok(None) => break,
                Err(e) => return protocol_error(&conn, e, &out),
            }
        }
    }
}

/// Accepts the peer's unidirectional streams until the connection ends, each read by a task
/// of its own: `read(stream)`. The control reader reports the lost connection.
pub(crate) async fn for_each_uni_stream<F, Fut>(conn: &PeerConnection, mut read: F)
where
    F: FnMut(quinn::RecvStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    while let Ok(stream) = conn.quic().accept_uni().await {
        tokio::spawn(read(stream));
    }
}

async fn read_bulk(
    conn: PeerConnection,
    limits: FrameLimits,
    counters: Arc<WireCounters>,
    out: mpsc::UnboundedSender<Incoming>,
) {
    for_each_uni_stream(&conn.clone(), |stream| {
        let (conn, counters, out) = (conn.clone(), counters.clone(), out.clone());
        async move {
            let mut stream = stream;
            let mut decoder = FrameDecoder::with_counters(limits, counters);
            loop {
                match stream.read_chunk(1 << 20, true).await {
                    Ok(Some(chunk)) => decoder.push(&chunk.bytes),
                    Ok(None) => break,
                    Err(e) => {
                        let _ = out.send(Err(lost(conn.remote_addr(), e)));
                        return;
                    }
                }
                // A bulk stream carries one frame; refuse anything past it promptly.
                match decoder.next_frame() {
                    Ok(Some(message)) => {
                        let _ = out.send(Ok(message));
                        return;
                    }
                    Ok(None) => {}
                    Err(e) => return protocol_error(&conn, e, &out),
                }
            }
            match decoder
                .next_frame()
                .and_then(|m| decoder.finish().map(|_| m))
            {
                Ok(Some(message)) => {
                    let _ = out.send(Ok(message));
                }
                Ok(None) => {
                    // A bulk stream that ended without a whole frame.
                    let error = harp_wire::WireError::Truncated;
                    decoder.counters().record_error(&error);
                    protocol_error(&conn, error, &out)
                }
                Err(e) => protocol_error(&conn, e, &out),
            }
        }
    })
    .await;
}
