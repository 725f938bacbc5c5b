//! The `harp scale` side of the master's control endpoint: one command to a running job.

use super::job_id;
use crate::error::HarpError;
use harp_net::{JobCredentials, Link, NetEndpoint, TransportConfig};
use harp_wire::{
    FrameLimits, Hello, Message, NodeRole, WireCounters, NODE_ID_UNASSIGNED, PROTOCOL_VERSION,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long `harp scale` waits for the master to carry a command out.
const SCALE_ANSWER_WAIT: Duration = Duration::from_secs(300);

/// Asks the master of the job at `master` to start `add` more node processes and to let the
/// nodes in `remove` leave (their load moves to the others, then they exit). Returns the
/// master's account of what it did once every named node is gone.
pub async fn send_scale_command(
    creds: &JobCredentials,
    master: SocketAddr,
    add: u32,
    remove: Vec<u32>,
) -> Result<String, HarpError> {
    let job = job_id(creds);
    let identity = creds.issue_node()?;
    let bind = SocketAddr::new(
        if master.is_ipv4() {
            std::net::Ipv4Addr::UNSPECIFIED.into()
        } else {
            std::net::Ipv6Addr::UNSPECIFIED.into()
        },
        0,
    );
    let endpoint = NetEndpoint::bind(bind, creds, &identity, TransportConfig::default())?;
    let hello = Message::Hello(Hello {
        protocol_version: PROTOCOL_VERSION,
        job_id: job,
        node_id: NODE_ID_UNASSIGNED,
        // Neither a worker nor a server: a control client.
        role: NodeRole {
            worker: false,
            server: false,
            master: false,
        },
        listen_addr: String::new(),
    });
    let conn = endpoint.connect(master).await?;
    let counters = Arc::new(WireCounters::new());
    let (link, mut incoming) = Link::open(conn, &hello, FrameLimits::default(), counters).await?;
    link.send(&Message::ScaleCommand { add, remove })?;
    let answer = tokio::time::timeout(SCALE_ANSWER_WAIT, incoming.recv()).await;
    link.close("done");
    endpoint.close();
    match answer {
        Ok(Some(Ok(Message::ScaleDone { ok: true, message }))) => Ok(message),
        // Refused before anything moved, or failed while carrying it out: the master's
        // message says which.
        Ok(Some(Ok(Message::ScaleDone { ok: false, message }))) => Err(HarpError::Remote(format!(
            "the scale command did not succeed: {message}"
        ))),
        Ok(Some(Ok(Message::Refused { reason }))) => Err(HarpError::Remote(format!(
            "the master refused this client: {reason}"
        ))),
        Ok(Some(Ok(other))) => Err(HarpError::Remote(format!(
            "expected the command's answer, got {:?}",
            other.kind()
        ))),
        Ok(Some(Err(e))) => Err(e.into()),
        Ok(None) => Err(HarpError::Remote(
            "the master hung up before answering".into(),
        )),
        Err(_) => Err(HarpError::Remote(format!(
            "no answer from the master within {} s",
            SCALE_ANSWER_WAIT.as_secs()
        ))),
    }
}
