//! The handshake's checks: same protocol version, same job.
//!
//! This module owns [`PROTOCOL_VERSION`] and the pure checks a receiver runs on the first
//! message of a connection ([`check_hello`] on the accepting side, [`check_welcome`] on the
//! joining side) before anything else from that peer is used. A failed check is answered
//! with [`refusal`] and the connection is closed; the caller counts it with
//! [`WireCounters::record_error`](crate::WireCounters::record_error).

use crate::error::WireError;
use crate::message::{Hello, JobId, Message, NodeRole, Welcome};

/// The version of this wire format. Bump it whenever a message's layout or a kind number
/// changes; peers of different versions refuse each other.
pub const PROTOCOL_VERSION: u32 = 22;

/// Accepts `hello` only if it speaks our protocol version and belongs to `expected_job`.
pub fn check_hello(hello: &Hello, expected_job: JobId) -> Result<(), WireError> {
    check(hello.protocol_version, hello.job_id, expected_job)
}

/// The joining side's check of the master's answer.
pub fn check_welcome(welcome: &Welcome, expected_job: JobId) -> Result<(), WireError> {
    check(welcome.protocol_version, welcome.job_id, expected_job)
}

fn check(theirs: u32, job_id: JobId, expected_job: JobId) -> Result<(), WireError> {
    if theirs != PROTOCOL_VERSION {
        return Err(WireError::ProtocolVersion {
            ours: PROTOCOL_VERSION,
            theirs,
        });
    }
    if job_id != expected_job {
        return Err(WireError::WrongJob);
    }
    Ok(())
}

/// The hello this build sends first on every connection it opens: its protocol version,
/// the job, the sender's node id ([`NODE_ID_UNASSIGNED`](crate::NODE_ID_UNASSIGNED) until
/// it has one), its roles and where it listens (empty for a client that listens nowhere).
pub fn hello(job_id: JobId, node_id: u32, role: NodeRole, listen_addr: String) -> Message {
    Message::Hello(Hello {
        protocol_version: PROTOCOL_VERSION,
        job_id,
        node_id,
        role,
        listen_addr,
    })
}

/// The message that tells a peer why it was refused.
pub fn refusal(error: &WireError) -> Message {
    Message::Refused {
        reason: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(version: u32, job: JobId) -> Hello {
        Hello {
            protocol_version: version,
            job_id: job,
            node_id: 0,
            role: NodeRole::default(),
            listen_addr: String::new(),
        }
    }

    #[test]
    fn accepts_same_version_and_job() {
        check_hello(&hello(PROTOCOL_VERSION, [1; 16]), [1; 16]).unwrap();
    }

    #[test]
    fn refuses_other_version_first() {
        let err = check_hello(&hello(PROTOCOL_VERSION + 1, [2; 16]), [1; 16]).unwrap_err();
        assert_eq!(
            err,
            WireError::ProtocolVersion {
                ours: PROTOCOL_VERSION,
                theirs: PROTOCOL_VERSION + 1
            }
        );
        assert_eq!(
            refusal(&err),
            Message::Refused {
                reason: format!(
                    "protocol version {} is not ours ({})",
                    PROTOCOL_VERSION + 1,
                    PROTOCOL_VERSION
                )
            }
        );
    }

    #[test]
    fn refuses_other_job() {
        let mut other = [1; 16];
        other[15] = 0;
        assert_eq!(
            check_hello(&hello(PROTOCOL_VERSION, other), [1; 16]),
            Err(WireError::WrongJob)
        );
        let welcome = Welcome {
            protocol_version: PROTOCOL_VERSION,
            job_id: other,
            assigned_node_id: 1,
            app_name: "mlr".into(),
            app_tables: vec!["'weights' (table 0)".into()],
            app_settings: vec!["lr 0.5".into()],
            lease_timeout_ms: 3000,
            heartbeat_interval_ms: 500,
        };
        assert_eq!(check_welcome(&welcome, [1; 16]), Err(WireError::WrongJob));
        check_welcome(&welcome, other).unwrap();
    }
}
