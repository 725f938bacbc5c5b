//! The embedded membership service: the core [`MembershipView`] run by a tokio task on the
//! master (the default when there is no etcd).
//!
//! The task is the view's only owner and its driver loop (like quinn's connection driver):
//! it applies commands (join, heartbeat, leave, watch, members) in arrival order, sleeps
//! until the view's [`next_deadline_ms`](MembershipView::next_deadline_ms) and ticks it
//! then, and forwards every event the view emits to every watcher. Time is milliseconds
//! since the service started, read from tokio's clock (so tests can pause and advance it).
//!
//! Invariants: a member that heartbeats at least every `lease_timeout_ms - 1` ms is never
//! reported dead; a silent one is reported by the tick at its deadline, at most
//! `lease_timeout_ms` after its last heartbeat (plus scheduling delay); every watcher sees
//! every event after its snapshot exactly once, in order.
//!
//! Nodes in the master's process use [`register`](MembershipBackend::register). Nodes in
//! other processes reach the master through the transport; the master answers their
//! messages with [`join`](EmbeddedMembership::join),
//! [`heartbeat`](EmbeddedMembership::heartbeat) and [`leave`](EmbeddedMembership::leave),
//! and the node side renews with [`LeaseHandle::spawn_heartbeats`].

use crate::error::MembershipBackendError;
use crate::lease::LeaseHandle;
use crate::watch::{MembershipWatch, WatchItem};
use crate::{BoxFuture, MembershipBackend};
use harp_core::{
    LeaseGrant, MemberInfo, MembershipConfig, MembershipError, MembershipView, NodeId,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Commands queued to the service task before it pushes back.
const COMMAND_QUEUE_LEN: usize = 1024;

type Reply<T> = oneshot::Sender<Result<T, MembershipError>>;

enum Command {
    Join {
        node: NodeId,
        info: MemberInfo,
        reply: Reply<LeaseGrant>,
    },
    Heartbeat {
        node: NodeId,
        reply: Reply<LeaseGrant>,
    },
    Leave {
        node: NodeId,
        reply: Reply<()>,
    },
    Watch {
        reply: oneshot::Sender<mpsc::UnboundedReceiver<WatchItem>>,
    },
    Members {
        reply: oneshot::Sender<Vec<(NodeId, MemberInfo)>>,
    },
}

struct Shared {
    commands: mpsc::Sender<Command>,
    config: MembershipConfig,
    epoch: Instant,
    /// Deadline of one request to the service task.
    request_timeout: Duration,
}

/// Handle to the embedded membership service. Cheap to clone; the service task stops when
/// the last handle (including those held by lease renewals) is dropped.
#[derive(Clone)]
pub struct EmbeddedMembership {
    shared: Arc<Shared>,
}

impl EmbeddedMembership {
    /// Starts the service task on the current tokio runtime. Fails if `config` is invalid.
    pub fn start(config: MembershipConfig) -> Result<Self, MembershipBackendError> {
        let view = MembershipView::new(config)?;
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE_LEN);
        let epoch = Instant::now();
        tokio::spawn(run(view, rx, epoch));
        let request_timeout = Duration::from_millis(config.lease_timeout_ms);
        Ok(Self {
            shared: Arc::new(Shared {
                commands: tx,
                config,
                epoch,
                request_timeout,
            }),
        })
    }

    /// The service clock: milliseconds since it started. Event times are on this clock.
    pub fn now_ms(&self) -> u64 {
        now_ms(self.shared.epoch)
    }

    /// A node joins (the master's answer to a join message).
    pub async fn join(
        &self,
        node: NodeId,
        info: MemberInfo,
    ) -> Result<LeaseGrant, MembershipBackendError> {
        self.ask("join", |reply| Command::Join { node, info, reply })
            .await?
            .map_err(Into::into)
    }

    /// A node renews its lease (the master's answer to a heartbeat message).
    pub async fn heartbeat(&self, node: NodeId) -> Result<LeaseGrant, MembershipBackendError> {
        self.ask("heartbeat", |reply| Command::Heartbeat { node, reply })
            .await?
            .map_err(Into::into)
    }

    /// A node leaves, or the master removes it: watchers see `Left`.
    pub async fn leave(&self, node: NodeId) -> Result<(), MembershipBackendError> {
        self.ask("leave", |reply| Command::Leave { node, reply })
            .await?
            .map_err(Into::into)
    }

    /// Sends one command and waits for its answer, all within the request deadline.
    async fn ask<T>(
        &self,
        operation: &'static str,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, MembershipBackendError> {
        let (reply, answer) = oneshot::channel();
        let exchange = async {
            self.shared
                .commands
                .send(make(reply))
                .await
                .map_err(|_| MembershipBackendError::Stopped)?;
            answer.await.map_err(|_| MembershipBackendError::Stopped)
        };
        let deadline = self.shared.request_timeout;
        tokio::time::timeout(deadline, exchange)
            .await
            .unwrap_or(Err(MembershipBackendError::DeadlineExceeded {
                operation,
                deadline_ms: deadline.as_millis() as u64,
            }))
    }
}

impl MembershipBackend for EmbeddedMembership {
    fn config(&self) -> &MembershipConfig {
        &self.shared.config
    }

    fn register(
        &self,
        node: NodeId,
        info: MemberInfo,
    ) -> BoxFuture<'_, Result<LeaseHandle, MembershipBackendError>> {
        Box::pin(async move {
            let grant = self.join(node, info).await?;
            let beat = self.clone();
            let quit = self.clone();
            Ok(LeaseHandle::spawn_heartbeats(
                node,
                Duration::from_millis(grant.heartbeat_interval_ms),
                move || {
                    let service = beat.clone();
                    async move { service.heartbeat(node).await.map(|_| ()) }
                },
                move || async move { quit.leave(node).await },
            ))
        })
    }

    fn watch(&self) -> BoxFuture<'_, Result<MembershipWatch, MembershipBackendError>> {
        Box::pin(async move {
            let rx = self.ask("watch", |reply| Command::Watch { reply }).await?;
            Ok(MembershipWatch::new(rx))
        })
    }

    fn members(&self) -> BoxFuture<'_, Result<Vec<(NodeId, MemberInfo)>, MembershipBackendError>> {
        Box::pin(self.ask("members", |reply| Command::Members { reply }))
    }

    fn revoke(&self, node: NodeId) -> BoxFuture<'_, Result<(), MembershipBackendError>> {
        Box::pin(self.leave(node))
    }
}

fn now_ms(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The service task: the view's driver loop.
async fn run(mut view: MembershipView, mut commands: mpsc::Receiver<Command>, epoch: Instant) {
    let mut watchers: Vec<mpsc::UnboundedSender<WatchItem>> = Vec::new();
    loop {
        let wake = view
            .next_deadline_ms()
            .and_then(|ms| epoch.checked_add(Duration::from_millis(ms)));
        tokio::select! {
            biased;
            command = commands.recv() => match command {
                Some(command) => apply(&mut view, command, &mut watchers, now_ms(epoch)),
                None => break,
            },
            () = sleep_until(wake) => view.tick(now_ms(epoch)),
        }
        while let Some(event) = view.poll_event() {
            tracing::debug!(?event, "membership event");
            watchers.retain(|w| w.send(Ok(event.clone())).is_ok());
        }
    }
    // Watchers see the end of the service as `Stopped` when their channel closes.
}

async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn apply(
    view: &mut MembershipView,
    command: Command,
    watchers: &mut Vec<mpsc::UnboundedSender<WatchItem>>,
    now: u64,
) {
    // A requester that gave up (its deadline passed) no longer listens: ignore send errors.
    match command {
        Command::Join { node, info, reply } => {
            let _ = reply.send(view.handle_join(node, info, now));
        }
        Command::Heartbeat { node, reply } => {
            let _ = reply.send(view.handle_heartbeat(node, now));
        }
        Command::Leave { node, reply } => {
            let _ = reply.send(view.handle_leave(node, now));
        }
        Command::Watch { reply } => {
            // Bring the view up to date first, so the snapshot holds no member already dead
            // and the events this tick emits go to the older watchers only.
            view.tick(now);
            while let Some(event) = view.poll_event() {
                watchers.retain(|w| w.send(Ok(event.clone())).is_ok());
            }
            let (tx, rx) = mpsc::unbounded_channel();
            for (node, member) in view.members() {
                // The receiver is still in hand, so this send cannot fail.
                let _ = tx.send(Ok(harp_core::MembershipEvent::Joined {
                    node,
                    info: member.info.clone(),
                }));
            }
            if reply.send(rx).is_ok() {
                watchers.push(tx);
            }
        }
        Command::Members { reply } => {
            view.tick(now);
            let members = view
                .members()
                .map(|(node, m)| (node, m.info.clone()))
                .collect();
            let _ = reply.send(members);
        }
    }
}
