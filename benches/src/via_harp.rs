//! The candidate of the transport benchmarks: harp's own transport (`harp_net`'s
//! `NetEndpoint` and `Link`), used the way harp's nodes use it.
//!
//! Bulk: the client sends `Message::DumpRows` with `Link::send_bulk` (a stream of its own);
//! the peer receives it decoded and validated from the link's receiver and acks with
//! `Message::Applied` on the control stream. Round trip: the client sends `Message::Get`
//! with `Link::send` and the peer answers with `Message::Rows` (one small row), both on the
//! control stream.

use crate::peer::{announce, ACCEPT_TIMEOUT};
use anyhow::{anyhow, bail, Context, Result};
use harp_net::{Incoming, JobCredentials, Link, NetEndpoint, NodeIdentity, TransportConfig};
use harp_wire::{
    FrameLimits, Hello, Message, NodeRole, ParamKeyWire, RowWire, RowsResult, WireCounters,
    NODE_ID_UNASSIGNED, PROTOCOL_VERSION,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// How long a client waits for one reply before giving up.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// `rows` parameter rows of `values` f32 each, as a server's dump sends them.
pub fn dump_rows(rows: usize, values: usize) -> Message {
    let rows = (0..rows)
        .map(|r| {
            let key = ParamKeyWire {
                table: 0,
                row: r as u64,
            };
            let row = (0..values).map(|v| (v % 1000) as f32 * 1e-3).collect();
            (key, RowWire::F32(row))
        })
        .collect();
    Message::DumpRows {
        request_id: 0,
        rows,
        part: 0,
        parts: 1,
    }
}

/// A read of one parameter row.
pub fn get_request(request_id: u64) -> Message {
    Message::Get {
        request_id,
        server: 0,
        keys: vec![ParamKeyWire {
            table: 0,
            row: request_id % 1024,
        }],
        part: 0,
        parts: 1,
    }
}

/// The answer to [`get_request`]: one row of `values` f32.
pub fn rows_reply(request_id: u64, values: usize) -> Message {
    Message::Rows {
        request_id,
        rows: RowsResult::Ok(vec![RowWire::F32(vec![0.5; values])]),
        part: 0,
        parts: 1,
    }
}

/// The parent's end: a link to the harp peer.
pub struct HarpClient {
    endpoint: NetEndpoint,
    link: Link,
    incoming: UnboundedReceiver<Incoming>,
    next_id: u64,
}

impl HarpClient {
    pub async fn connect(
        creds: &JobCredentials,
        peer: SocketAddr,
        limits: FrameLimits,
    ) -> Result<Self> {
        let identity = creds.issue_node()?;
        let endpoint = NetEndpoint::bind(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            creds,
            &identity,
            TransportConfig::default(),
        )?;
        let conn = endpoint.connect(peer).await?;
        let hello = Message::Hello(Hello {
            protocol_version: PROTOCOL_VERSION,
            job_id: [0; 16],
            node_id: NODE_ID_UNASSIGNED,
            role: NodeRole {
                worker: true,
                server: false,
                master: false,
            },
            listen_addr: endpoint.local_addr()?.to_string(),
        });
        let (link, incoming) =
            Link::open(conn, &hello, limits, Arc::new(WireCounters::default())).await?;
        Ok(Self {
            endpoint,
            link,
            incoming,
            next_id: 0,
        })
    }

    /// Sends `dump` (a `DumpRows`) on a stream of its own and waits for the peer's ack.
    pub async fn bulk(&mut self, dump: &mut Message) -> Result<()> {
        let id = self.take_id();
        match dump {
            Message::DumpRows { request_id, .. } => *request_id = id,
            other => bail!("bulk sends DumpRows, not {:?}", other.kind()),
        }
        self.link.send_bulk(dump).await?;
        match self.reply(id).await? {
            Message::Applied { error: None, .. } => Ok(()),
            Message::Applied { error: Some(e), .. } => bail!("the harp peer refused the rows: {e}"),
            other => bail!("the harp peer acked with {:?}", other.kind()),
        }
    }

    /// Sends a `Get` on the control stream and waits for its `Rows`.
    pub async fn get(&mut self) -> Result<()> {
        let id = self.take_id();
        self.link.send(&get_request(id))?;
        match self.reply(id).await? {
            Message::Rows {
                rows: RowsResult::Ok(rows),
                ..
            } if rows.len() == 1 => Ok(()),
            other => bail!("the harp peer answered a Get with {other:?}"),
        }
    }

    fn take_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    async fn reply(&mut self, id: u64) -> Result<Message> {
        let next = tokio::time::timeout(REPLY_TIMEOUT, self.incoming.recv())
            .await
            .map_err(|_| anyhow!("no reply from the harp peer within {REPLY_TIMEOUT:?}"))?;
        let message = next.ok_or_else(|| anyhow!("the harp peer's link closed"))??;
        let request_id = match &message {
            Message::Applied { request_id, .. } | Message::Rows { request_id, .. } => *request_id,
            other => bail!("unexpected {:?} from the harp peer", other.kind()),
        };
        if request_id != id {
            bail!("the harp peer answered request {request_id}, expected {id}");
        }
        Ok(message)
    }

    pub fn close(&self) {
        self.link.close("benchmark done");
        self.endpoint.close();
    }
}

/// The peer's end: accepts one connection and answers until it closes.
pub async fn serve(
    bind: SocketAddr,
    creds: &JobCredentials,
    identity: &NodeIdentity,
    frame_bytes_max: Option<usize>,
    reply_values: usize,
) -> Result<()> {
    let endpoint = NetEndpoint::bind(bind, creds, identity, TransportConfig::default())?;
    announce(endpoint.local_addr()?)?;
    let conn = tokio::time::timeout(ACCEPT_TIMEOUT, endpoint.accept())
        .await
        .context("the parent did not connect")?
        .ok_or_else(|| anyhow!("the endpoint closed before the parent connected"))??;
    let limits = frame_bytes_max.map(FrameLimits::new).unwrap_or_default();
    let (link, mut incoming) =
        Link::accept(conn, limits, Arc::new(WireCounters::default())).await?;
    while let Some(next) = incoming.recv().await {
        let Ok(message) = next else {
            break; // the parent closed the connection: done
        };
        match message {
            Message::DumpRows {
                request_id, rows, ..
            } => {
                let all_f32 = rows.iter().all(|(_, row)| matches!(row, RowWire::F32(_)));
                let error = (!all_f32).then(|| "expected f32 rows".to_string());
                link.send(&Message::Applied {
                    request_id,
                    error,
                    save_epoch: None,
                })?;
            }
            Message::Get { request_id, .. } => {
                link.send(&rows_reply(request_id, reply_values))?;
            }
            _ => {} // the parent's Hello
        }
    }
    endpoint.close();
    Ok(())
}
