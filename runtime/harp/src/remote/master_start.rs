//! The start of a job across processes, on the master: nodes join (`Hello` → `Welcome`)
//! until the job has all it waits for, then, once each was sent its assignment, they get
//! ready. Until the driver starts, a stop or a node process its launcher saw exit ends the
//! start ([`start_interrupted`]); a start that ends tells every node that joined why
//! ([`not_started`]).

use super::greeting::Greeted;
use super::identity::AppIdentity;
use super::listen_addr::reachable_listen_addr;
use super::master_side::{ended_by, tell_job_ended, ClusterOptions, NodeFailure};
use super::roster;
use crate::error::HarpError;
use harp_core::NodeRoles;
use harp_net::{Incoming, Link};
use harp_wire::Message;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A node process that joined the job before it started.
pub(super) struct JoinedNode {
    pub(super) id: u32,
    pub(super) link: Link,
    pub(super) incoming: mpsc::UnboundedReceiver<Incoming>,
    pub(super) listen_addr: String,
    pub(super) roles: NodeRoles,
    /// What the launcher of its process named it (known once it is ready; 0: nothing).
    pub(super) launch_id: u64,
}

/// Welcomes the nodes that take the places of the job's first nodes (`founders`, from
/// [`roster::Accepting`], which takes every connection on a task of its own) into `nodes`
/// until the job has all of them or its join timeout passed.
pub(super) async fn accept_nodes(
    founders: &mut mpsc::UnboundedReceiver<Greeted>,
    identity: &AppIdentity,
    job: harp_wire::JobId,
    options: &ClusterOptions,
    nodes: &mut Vec<JoinedNode>,
) -> Result<(), HarpError> {
    let deadline = Instant::now() + Duration::from_millis(options.join_timeout_ms);
    while nodes.len() < options.nodes as usize {
        let left = deadline.saturating_duration_since(Instant::now());
        let founder = match tokio::time::timeout(left, founders.recv()).await {
            Ok(Some(founder)) => founder,
            Ok(None) => return Err(HarpError::Remote("the master's endpoint closed".into())),
            Err(_) => {
                return Err(HarpError::Remote(format!(
                    "only {} of {} nodes joined within {} ms",
                    nodes.len(),
                    options.nodes,
                    options.join_timeout_ms
                )))
            }
        };
        let Greeted {
            link,
            incoming,
            hello,
        } = founder;
        let id = nodes.len() as u32;
        link.send(&identity.welcome(job, id, options.lease_timeout_ms))?;
        tracing::info!(node = id, addr = %link.remote_addr(), "node joined");
        let listen_addr = reachable_listen_addr(&hello.listen_addr, link.remote_addr());
        nodes.push(JoinedNode {
            id,
            link,
            incoming,
            listen_addr,
            launch_id: 0,
            roles: NodeRoles {
                worker: hello.role.worker,
                server: hello.role.server,
            },
        });
    }
    Ok(())
}

/// Waits for each joined node's `Ready` (its launch id).
pub(super) async fn wait_ready(nodes: &mut [JoinedNode], timeout_ms: u64) -> Result<(), HarpError> {
    for node in nodes.iter_mut() {
        node.launch_id = roster::wait_ready(node.id, &mut node.incoming, timeout_ms).await?;
    }
    Ok(())
}

/// Completes with why a job that still starts must not: it was stopped
/// ([`HarpError::Stopped`]), or a node process its launcher started exited
/// ([`HarpError::NodeExitedBeforeStart`]). Any other failure reported meanwhile goes to
/// `early`, for the job to handle once it runs.
pub(super) async fn start_interrupted(
    stop_requested: &mut (impl std::future::Future<Output = String> + Unpin),
    failures: &mut mpsc::UnboundedReceiver<NodeFailure>,
    early: &mut Vec<NodeFailure>,
) -> HarpError {
    let mut reported = true;
    loop {
        tokio::select! {
            reason = &mut *stop_requested => {
                return HarpError::Stopped {
                    reason,
                    started: false,
                    tasks_completed: 0,
                    checkpoints: None,
                }
            }
            failure = failures.recv(), if reported => match failure {
                Some(NodeFailure::Exited { launch_id, how }) => {
                    return HarpError::NodeExitedBeforeStart { launch_id, how }
                }
                Some(other) => early.push(other),
                None => reported = false,
            },
        }
    }
}

/// A job that will not start (`why`): tells the nodes that joined (after a stop each ends
/// as after a stop, exit 0; otherwise it hears the reason) and gives them a moment to read
/// it before the endpoint closes; returns `why`.
pub(super) async fn not_started(nodes: &[JoinedNode], why: HarpError) -> HarpError {
    let told = match &why {
        HarpError::Stopped { .. } => ended_by(&why),
        other => Message::Shutdown {
            reason: other.to_string(),
        },
    };
    tell_job_ended(nodes.iter().map(|node| &node.link), &told).await;
    why
}
