//! The figure reported beside the bulk benchmark: plain TCP over loopback (no TLS), the same
//! bytes as harp's `DumpRows` frame behind an 8-byte length, read by the peer into a buffer
//! and acked with the byte count.

use crate::peer::announce;
use crate::via_harp::REPLY_TIMEOUT;
use anyhow::{bail, Context, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

/// Largest payload the peer accepts.
const PAYLOAD_MAX: u64 = 4 << 30;

/// The parent's end.
pub struct TcpClient {
    stream: TcpStream,
}

impl TcpClient {
    pub fn connect(peer: SocketAddr) -> Result<Self> {
        let stream = TcpStream::connect(peer)
            .with_context(|| format!("cannot connect to the tcp peer at {peer}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
        Ok(Self { stream })
    }

    /// Sends `payload` and waits for the peer's ack.
    pub fn bulk(&mut self, payload: &[u8]) -> Result<()> {
        self.stream
            .write_all(&(payload.len() as u64).to_le_bytes())?;
        self.stream.write_all(payload)?;
        let mut ack = [0u8; 8];
        self.stream
            .read_exact(&mut ack)
            .context("no ack from the tcp peer")?;
        let got = u64::from_le_bytes(ack);
        if got != payload.len() as u64 {
            bail!("the tcp peer received {got} bytes of {}", payload.len());
        }
        Ok(())
    }
}

/// The peer's end: accepts one connection and acks every payload until it closes.
pub fn serve(bind: SocketAddr) -> Result<()> {
    let listener = TcpListener::bind(bind).with_context(|| format!("cannot listen on {bind}"))?;
    announce(listener.local_addr()?)?;
    let (mut stream, _) = listener.accept().context("no connection from the parent")?;
    stream.set_nodelay(true)?;
    let mut buf = Vec::new();
    loop {
        let mut len = [0u8; 8];
        match stream.read_exact(&mut len) {
            Ok(()) => {}
            // The parent closed the connection: done.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
                ) =>
            {
                return Ok(())
            }
            Err(e) => return Err(e.into()),
        }
        let len = u64::from_le_bytes(len);
        if len > PAYLOAD_MAX {
            bail!("a payload of {len} bytes (at most {PAYLOAD_MAX})");
        }
        buf.resize(len as usize, 0);
        stream.read_exact(&mut buf)?;
        stream.write_all(&len.to_le_bytes())?;
    }
}
