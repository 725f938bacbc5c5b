//! The bulk streams of a link opened to fetch an executor state
//! ([`Link::open_for_state`](crate::Link::open_for_state)): each carries one `StateChunk`
//! frame, read with harp-wire's [`StateChunkReader`], which keeps the pieces quinn hands
//! over instead of copying them; the adopting node then copies each chunk once, into place.
//! A stream that is not a well-formed state chunk closes the connection like any protocol
//! error (counted, reported to the receiver).

use crate::endpoint::PeerConnection;
use crate::error::NetError;
use crate::link::{for_each_uni_stream, lost, protocol_error};
use harp_wire::frame::state_chunk::{ReceivedStateChunk, StateChunkReader};
use harp_wire::{FrameLimits, WireCounters};
use std::sync::Arc;
use tokio::sync::mpsc;

/// What the state-chunk receiver of a link yields.
pub type IncomingChunk = Result<ReceivedStateChunk, NetError>;

/// Accepts the peer's streams until the connection ends, reading each as one state chunk.
pub(crate) async fn read_state_chunks(
    conn: PeerConnection,
    limits: FrameLimits,
    counters: Arc<WireCounters>,
    out: mpsc::UnboundedSender<IncomingChunk>,
) {
    for_each_uni_stream(&conn.clone(), |stream| {
        let (conn, counters, out) = (conn.clone(), counters.clone(), out.clone());
        async move {
            let mut stream = stream;
            let mut reader = StateChunkReader::new(limits, counters);
            loop {
                match stream.read_chunk(usize::MAX, true).await {
                    Ok(Some(piece)) => {
                        if let Err(e) = reader.push(piece.bytes) {
                            return protocol_error(&conn, e, &out);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let _ = out.send(Err(lost(conn.remote_addr(), e)));
                        return;
                    }
                }
            }
            match reader.finish() {
                Ok(chunk) => {
                    let _ = out.send(Ok(chunk));
                }
                Err(e) => protocol_error(&conn, e, &out),
            }
        }
    })
    .await;
}
