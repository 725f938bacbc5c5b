//! `harp scale` clients on the master: one command, one answer.
//!
//! A command taken while the job runs is carried out ([`scale_command`]) and answered with
//! its outcome; one that arrives while the job is still starting is answered at once with
//! the starting answer (`scale_client::job_starting_answer`), and nothing is done.

use super::{desired, leave, lock, RosterContext};
use crate::app::App;
use crate::error::HarpError;
use crate::remote::scale_client::job_starting_answer;
use harp_net::{Incoming, Link};
use harp_wire::Message;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a client has to send its command after its hello.
const COMMAND_WAIT: Duration = Duration::from_secs(10);

/// How long the master waits for a client to hang up after its answer was sent.
const ANSWER_ACK_WAIT: Duration = Duration::from_secs(2);

/// A `harp scale` client of the running job: its command is carried out and answered.
pub(crate) async fn serve_scale_client<A: App>(
    ctx: &Arc<RosterContext<A>>,
    link: Link,
    mut incoming: mpsc::UnboundedReceiver<Incoming>,
) {
    let Some(command) = read_command(&link, &mut incoming).await else {
        return;
    };
    let (ok, message) = match scale_command(ctx, command).await {
        Ok(message) => (true, message),
        Err(e) => (false, e.to_string()),
    };
    answer(&link, &Message::ScaleDone { ok, message }).await;
}

/// A `harp scale` client while the job is still starting: answered at once, nothing done.
pub(crate) async fn answer_starting(link: Link, mut incoming: mpsc::UnboundedReceiver<Incoming>) {
    if read_command(&link, &mut incoming).await.is_some() {
        answer(&link, &job_starting_answer()).await;
    }
}

/// The client's command; `None` (and the link closed) if it sent something else or nothing.
async fn read_command(
    link: &Link,
    incoming: &mut mpsc::UnboundedReceiver<Incoming>,
) -> Option<(u32, Vec<u32>)> {
    match tokio::time::timeout(COMMAND_WAIT, incoming.recv()).await {
        Ok(Some(Ok(Message::ScaleCommand { add, remove }))) => Some((add, remove)),
        _ => {
            link.close("expected a scale command");
            None
        }
    }
}

/// Sends `message` and waits (a bounded time) for the client to hang up, which it does once
/// it has read the answer.
async fn answer(link: &Link, message: &Message) {
    if link.send(message).is_err() {
        return;
    }
    let _ = tokio::time::timeout(ANSWER_ACK_WAIT, link.connection().quic().closed()).await;
}

/// Carries out `harp scale`: the named nodes leave (one after the other), and `add` node
/// processes are started by the launcher; with neither, lists the job's nodes.
pub(crate) async fn scale_command<A: App>(
    ctx: &Arc<RosterContext<A>>,
    (add, remove): (u32, Vec<u32>),
) -> Result<String, HarpError> {
    if add == 0 && remove.is_empty() {
        // Nothing to change: say who is in the job.
        let roster = lock(&ctx.roster);
        let nodes: Vec<String> = roster
            .live()
            .map(|n| {
                let role = match (n.roles.worker, n.roles.server) {
                    (true, true) => "worker+server",
                    (true, false) => "worker",
                    _ => "server",
                };
                let leaving = if roster.leaving.contains(&n.id) {
                    ", leaving"
                } else {
                    ""
                };
                format!("{} ({role}{leaving})", n.id)
            })
            .collect();
        return Ok(format!("nodes: {}", nodes.join(", ")));
    }
    {
        let roster = lock(&ctx.roster);
        if let Some(unknown) = remove.iter().find(|n| !roster.nodes.contains_key(n)) {
            let live: Vec<String> = roster.live().map(|n| n.id.to_string()).collect();
            return Err(HarpError::InvalidConfig(format!(
                "node {unknown} is not one of the job's nodes (they are: {})",
                live.join(", ")
            )));
        }
    }
    let mut done = Vec::new();
    for node in remove {
        leave(ctx, node).await?;
        done.push(format!("node {node} left"));
    }
    if add > 0 {
        desired::launch(ctx, add)?;
        done.push(format!(
            "started {add} node processes; they get load as they join"
        ));
    }
    Ok(done.join("; "))
}
