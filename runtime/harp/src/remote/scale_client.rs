//! The `harp scale` side of the master's control endpoint: one command to a running job, and
//! what its answer (or the lack of one) means, as a [`ScaleError`].
//!
//! The master answers every command it took with `ScaleDone`; a command that arrives while
//! the job is still starting is answered at once with [`JOB_STARTING`] instead of being
//! carried out (see `roster/accepting.rs`). A connection that ends before the answer means
//! the master went away (the job ended, or the master process died).

use super::job_id;
use crate::error::HarpError;
use harp_net::{Incoming, JobCredentials, Link, NetEndpoint, TransportConfig};
use harp_wire::{FrameLimits, Message, NodeRole, WireCounters, NODE_ID_UNASSIGNED};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long `harp scale` waits for the master to carry a command out.
const SCALE_ANSWER_WAIT: Duration = Duration::from_secs(300);

/// The message of the master's `ScaleDone` for a command that came while the job was still
/// starting; the client turns exactly this answer into [`ScaleError::JobStarting`].
pub(crate) const JOB_STARTING: &str = "the job is still starting";

/// What the master answers a `harp scale` command while the job is still starting (its
/// nodes joining, or setting up their executors and tables).
pub(crate) fn job_starting_answer() -> Message {
    Message::ScaleDone {
        ok: false,
        message: JOB_STARTING.into(),
    }
}

/// Why a `harp scale` command did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ScaleError {
    /// The job has not started yet: its nodes are still joining or setting up. Nothing was
    /// done; the same command may be sent again once the job runs.
    #[error("the job has not started yet: it is still starting; try again when it runs")]
    JobStarting,
    /// The master carried the command out (or tried to) and it failed, or refused it before
    /// anything moved; `0` is the master's reason.
    #[error("the scale command did not succeed: {0}")]
    NotCarriedOut(String),
    /// The master refused this client at the handshake (e.g. another job's credentials).
    #[error("the master refused this client: {0}")]
    Refused(String),
    /// The connection ended after the command was sent and before its answer arrived: the
    /// master process exited (typically because the job ended) or died. Whether the command
    /// took effect is unknown.
    #[error("the master exited before answering; the job may have ended ({detail})")]
    MasterExited { detail: String },
    /// No answer within the client's patience; the command may still be running.
    #[error("no answer from the master within {after_s} s")]
    NoAnswer { after_s: u64 },
    /// The master answered with something that is not an answer to a command.
    #[error("expected the command's answer, got {0}")]
    Unexpected(String),
    /// The command could not be sent or its answer not read: credentials, connecting, the
    /// handshake, a broken frame.
    #[error(transparent)]
    Transport(#[from] HarpError),
}

impl From<harp_net::NetError> for ScaleError {
    fn from(e: harp_net::NetError) -> Self {
        ScaleError::Transport(e.into())
    }
}

/// Asks the master of the job at `master` to start `add` more node processes and to let the
/// nodes in `remove` leave (their load moves to the others, then they exit); with neither,
/// asks for the job's nodes. Returns the master's account of what it did once every named
/// node is gone.
pub async fn send_scale_command(
    creds: &JobCredentials,
    master: SocketAddr,
    add: u32,
    remove: Vec<u32>,
) -> Result<String, ScaleError> {
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
    // Neither a worker nor a server: a control client.
    let hello = harp_wire::hello(job, NODE_ID_UNASSIGNED, NodeRole::default(), String::new());
    let conn = endpoint
        .connect(super::listen_addr::dialable(master))
        .await?;
    let counters = Arc::new(WireCounters::new());
    let (link, mut incoming) = Link::open(conn, &hello, FrameLimits::default(), counters).await?;
    link.send(&Message::ScaleCommand { add, remove })?;
    let answer = tokio::time::timeout(SCALE_ANSWER_WAIT, incoming.recv()).await;
    // Hanging up tells the master that its answer arrived.
    link.close("done");
    endpoint.close();
    match answer {
        Ok(answer) => outcome(answer),
        Err(_) => Err(ScaleError::NoAnswer {
            after_s: SCALE_ANSWER_WAIT.as_secs(),
        }),
    }
}

/// What the first thing read from the master after the command means (`None`: the link's
/// readers ended, i.e. the connection is gone).
fn outcome(answer: Option<Incoming>) -> Result<String, ScaleError> {
    match answer {
        Some(Ok(Message::ScaleDone { ok: true, message })) => Ok(message),
        Some(Ok(Message::ScaleDone { ok: false, message })) if message == JOB_STARTING => {
            Err(ScaleError::JobStarting)
        }
        // Refused before anything moved, or failed while carrying it out: the master's
        // message says which.
        Some(Ok(Message::ScaleDone { ok: false, message })) => {
            Err(ScaleError::NotCarriedOut(message))
        }
        Some(Ok(Message::Refused { reason })) => Err(ScaleError::Refused(reason)),
        Some(Ok(other)) => Err(ScaleError::Unexpected(format!("{:?}", other.kind()))),
        Some(Err(harp_net::NetError::ConnectionLost { message, .. })) => {
            Err(ScaleError::MasterExited { detail: message })
        }
        Some(Err(e)) => Err(e.into()),
        None => Err(ScaleError::MasterExited {
            detail: "it hung up".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(ok: bool, message: &str) -> Option<Incoming> {
        Some(Ok(Message::ScaleDone {
            ok,
            message: message.into(),
        }))
    }

    #[test]
    fn the_starting_answer_is_the_typed_starting_error() {
        let error = outcome(Some(Ok(job_starting_answer()))).unwrap_err();
        assert!(matches!(error, ScaleError::JobStarting), "{error:?}");
        assert_eq!(
            error.to_string(),
            "the job has not started yet: it is still starting; try again when it runs"
        );
    }

    #[test]
    fn answers_map_to_what_happened() {
        assert_eq!(outcome(done(true, "node 2 left")).unwrap(), "node 2 left");
        let failed = outcome(done(false, "node 0 is the last worker")).unwrap_err();
        assert!(
            matches!(&failed, ScaleError::NotCarriedOut(m) if m == "node 0 is the last worker"),
            "{failed:?}"
        );
        let refused = outcome(Some(Ok(Message::Refused {
            reason: "another job".into(),
        })))
        .unwrap_err();
        assert!(matches!(refused, ScaleError::Refused(_)), "{refused:?}");
    }

    #[test]
    fn a_connection_that_ends_before_the_answer_says_the_master_exited() {
        let lost = harp_net::NetError::ConnectionLost {
            addr: SocketAddr::from(([127, 0, 0, 1], 9)),
            message: "closed by peer: endpoint closed".into(),
        };
        for answer in [Some(Err(lost)), None] {
            let error = outcome(answer).unwrap_err();
            assert!(
                matches!(error, ScaleError::MasterExited { .. }),
                "{error:?}"
            );
            assert!(
                error
                    .to_string()
                    .starts_with("the master exited before answering; the job may have ended"),
                "{error}"
            );
        }
    }
}
