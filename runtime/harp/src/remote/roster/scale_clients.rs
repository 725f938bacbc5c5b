//! `harp scale` clients on the master: one command, one answer, and the answers the master
//! still owes.
//!
//! A command taken while the job runs is carried out ([`scale_command`]) and answered with
//! its outcome; one that arrives while the job is still starting is answered at once with
//! the starting answer (`scale_client::job_starting_answer`), and nothing is done. Every
//! client being served holds an [`Owed`] until its answer is acknowledged (the client hangs
//! up once it has read it) or a bounded wait passed; the job's exit waits for
//! [`OwedAnswers::delivered`] before it closes the endpoint, which would otherwise discard
//! an answer still queued on its way out (and the client would only see its connection
//! lost).

use super::{desired, leave, lock, RosterContext};
use crate::app::App;
use crate::error::HarpError;
use crate::remote::scale_client::job_starting_answer;
use harp_net::{Incoming, Link};
use harp_wire::Message;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How long a client has to send its command after its hello.
const COMMAND_WAIT: Duration = Duration::from_secs(10);

/// How long the master waits for a client to hang up after its answer was sent.
const ANSWER_ACK_WAIT: Duration = Duration::from_secs(2);

/// The `harp scale` clients the master took and has not finished answering.
#[derive(Clone)]
pub(crate) struct OwedAnswers(Arc<watch::Sender<usize>>);

impl Default for OwedAnswers {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(0)))
    }
}

/// One client's answer is owed until this is dropped.
pub(crate) struct Owed(Arc<watch::Sender<usize>>);

impl Drop for Owed {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl OwedAnswers {
    /// A client was taken: its answer is owed until the returned guard drops.
    pub(crate) fn owe(&self) -> Owed {
        self.0.send_modify(|n| *n += 1);
        Owed(self.0.clone())
    }

    /// How many answers are owed now.
    pub(crate) fn owed(&self) -> usize {
        *self.0.borrow()
    }

    /// Waits until some answer is owed.
    #[cfg(test)]
    pub(crate) async fn wait_owed(&self) {
        let mut owed = self.0.subscribe();
        let _ = owed.wait_for(|n| *n > 0).await;
    }

    /// Waits until no answer is owed, at most `within`; whether none is.
    pub(crate) async fn delivered(&self, within: Duration) -> bool {
        let mut owed = self.0.subscribe();
        let none = tokio::time::timeout(within, owed.wait_for(|n| *n == 0)).await;
        matches!(none, Ok(Ok(_)))
    }
}

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
                } else if roster.waits_to_leave(n.id) {
                    ", waits to leave"
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
        if roster.ended {
            return Err(HarpError::Remote(
                "the job has ended; nothing was changed".into(),
            ));
        }
        if let Some(unknown) = remove.iter().find(|n| !roster.nodes.contains_key(n)) {
            let live: Vec<String> = roster.live().map(|n| n.id.to_string()).collect();
            return Err(HarpError::InvalidConfig(format!(
                "node {unknown} is not one of the job's nodes (they are: {})",
                live.join(", ")
            )));
        }
    }
    // Refused before any node leaves: a command is carried out whole or not at all, as far
    // as its own words can tell.
    let mut named = std::collections::BTreeSet::new();
    if let Some(twice) = remove.iter().find(|n| !named.insert(**n)) {
        return Err(HarpError::InvalidConfig(format!(
            "node {twice} is named twice"
        )));
    }
    if add > 0 {
        desired::can_launch(ctx, add)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_are_delivered_once_every_guard_dropped() {
        let owed = OwedAnswers::default();
        assert!(owed.delivered(Duration::ZERO).await, "none owed at first");
        let first = owed.owe();
        let second = owed.owe();
        assert_eq!(owed.owed(), 2);
        assert!(!owed.delivered(Duration::ZERO).await);
        drop(first);
        assert!(!owed.delivered(Duration::ZERO).await);
        let waiting = crate::spawn::spawn({
            let owed = owed.clone();
            async move { owed.delivered(Duration::from_secs(60)).await }
        });
        drop(second);
        assert!(waiting.await.unwrap(), "the waiter sees the last answer go");
        assert_eq!(owed.owed(), 0);
    }
}
