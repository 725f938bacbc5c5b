//! The master's endpoint from the moment it listens until the job ends: the nodes the job
//! starts with, nodes that join later, and `harp scale` clients.
//!
//! Every connection is taken on a task of its own (its handshake, its hello), so a peer
//! that stalls in its handshake or never says hello holds up no other. The first nodes to
//! say hello, as many as the job starts with, take its places (handed to the start in the
//! order their hellos came); while the job is still starting (nodes join, set
//! up their executors and servers, the driver is created) a `harp scale` command is
//! answered at once with the starting answer (the client's `ScaleError::JobStarting`)
//! instead of timing out in a handshake nobody completes, and a node that connects once
//! every place is taken is held until the job runs ([`Accepting::run`]), then taken in like
//! any node joining the running job. At the job's end [`Accepting::stop`] stops taking
//! connections, and [`Accepting::close_endpoint`] closes the endpoint once every `harp
//! scale` client taken has its answer (or a bounded wait passed): closing it discards what
//! is still queued on its connections, and an answer queued as the job ended was lost that
//! way (the client only saw its connection lost).
//!
//! A node of the job (its hello carries the id it was given) that connects again is
//! fetching an executor state the master parked for it (a resumed job's large states):
//! its link is served from the master's [`StateOutbox`].

use super::scale_clients::{answer_starting, serve_scale_client, OwedAnswers};
use super::{admit, RosterContext};
use crate::app::App;
use crate::remote::greeting::{greet, Greeted, HELLO_WAIT};
use crate::remote::listen_addr::reachable_listen_addr;
use crate::remote::state_transfer::{serve_state_fetches, StateOutbox};
use harp_core::NodeRoles;
use harp_net::{NetEndpoint, PeerConnection};
use harp_wire::{check_hello, refusal, JobId, WireCounters, NODE_ID_UNASSIGNED};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// How long the job's exit waits for the answers owed to `harp scale` clients.
const ANSWERS_WAIT: Duration = Duration::from_secs(2);

/// The job's context once it runs (`None` while it starts).
type Running<A> = Option<Arc<RosterContext<A>>>;

/// The places left for the nodes the job starts with, and where a node that takes one goes.
#[derive(Clone)]
struct FounderPlaces(Arc<Mutex<(u32, mpsc::UnboundedSender<Greeted>)>>);

impl FounderPlaces {
    fn new(places: u32) -> (Self, mpsc::UnboundedReceiver<Greeted>) {
        let (to_start, founders) = mpsc::unbounded_channel();
        (Self(Arc::new(Mutex::new((places, to_start)))), founders)
    }

    /// Hands `founder` to the start if a place is left and the start still takes nodes;
    /// gives it back otherwise.
    fn take_place(&self, founder: Greeted) -> Result<(), Greeted> {
        let mut places = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (left, to_start) = &mut *places;
        if *left == 0 {
            return Err(founder);
        }
        to_start.send(founder).map_err(|refused| refused.0)?;
        *left -= 1;
        Ok(())
    }
}

/// Takes the connections to the master's endpoint (see the module doc). Dropping it stops
/// taking them.
pub(crate) struct Accepting<A: App> {
    endpoint: NetEndpoint,
    running: watch::Sender<Running<A>>,
    answers: OwedAnswers,
    accept_loop: JoinHandle<()>,
}

impl<A: App> Accepting<A> {
    /// Starts taking connections on `endpoint` for job `job`, which starts with `places`
    /// nodes: the first `places` nodes to say hello come out of the receiver returned, in
    /// that order. States the master parks in `outbox` are served to the nodes that fetch
    /// them.
    pub(crate) fn start(
        endpoint: NetEndpoint,
        (job, places): (JobId, u32),
        counters: Arc<WireCounters>,
        outbox: Arc<StateOutbox>,
    ) -> (Self, mpsc::UnboundedReceiver<Greeted>) {
        let (running, starting) = watch::channel(None);
        let answers = OwedAnswers::default();
        let (places, founders) = FounderPlaces::new(places);
        let accept_loop = crate::spawn::spawn(accept_loop(
            endpoint.clone(),
            (job, counters),
            outbox,
            starting,
            (answers.clone(), places),
        ));
        let accepting = Self {
            endpoint,
            running,
            answers,
            accept_loop,
        };
        (accepting, founders)
    }

    /// The job runs: nodes held so far and from now on join it, `harp scale` commands are
    /// carried out.
    pub(crate) fn run(&self, ctx: Arc<RosterContext<A>>) {
        self.running.send_replace(Some(ctx));
    }

    /// Takes no more connections (the job ended); clients taken are still answered.
    pub(crate) fn stop(&self) {
        self.accept_loop.abort();
    }

    /// Closes the endpoint (and every connection on it) once every `harp scale` client
    /// taken has its answer (it hung up after reading it, or the master gave up waiting for
    /// that), waiting at most [`ANSWERS_WAIT`].
    pub(crate) async fn close_endpoint(&self) {
        if !self.answers.delivered(ANSWERS_WAIT).await {
            tracing::warn!(
                owed = self.answers.owed(),
                "the master exits before every harp scale client had its answer"
            );
        }
        self.endpoint.close();
    }
}

impl<A: App> Drop for Accepting<A> {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

async fn accept_loop<A: App>(
    endpoint: NetEndpoint,
    (job, counters): (JobId, Arc<WireCounters>),
    outbox: Arc<StateOutbox>,
    running: watch::Receiver<Running<A>>,
    owed: (OwedAnswers, FounderPlaces),
) {
    // Each handshake on a task of its own: a peer that stalls in it (a node that dies or
    // is cut off while it connects) holds up no other joiner or `harp scale` client.
    while let Some(handshaking) = endpoint.accept_handshaking().await {
        let (counters, outbox) = (counters.clone(), outbox.clone());
        let (running, owed) = (running.clone(), owed.clone());
        crate::spawn::spawn(async move {
            match handshaking.finish().await {
                Ok(conn) => take(conn, (job, counters), outbox, running, owed).await,
                Err(e) => {
                    tracing::debug!(error = %e, "a connection to the master failed its handshake")
                }
            }
        });
    }
}

/// One connection: its hello says whether it is a node the job starts with, a node joining
/// later, a node fetching a state or a `harp scale` client.
async fn take<A: App>(
    conn: PeerConnection,
    (job, counters): (JobId, Arc<WireCounters>),
    outbox: Arc<StateOutbox>,
    mut running: watch::Receiver<Running<A>>,
    (answers, places): (OwedAnswers, FounderPlaces),
) {
    let Some(Greeted {
        link,
        incoming,
        hello,
    }) = greet(conn, counters, HELLO_WAIT).await
    else {
        return;
    };
    if let Err(e) = check_hello(&hello, job) {
        tracing::warn!(error = %e, addr = %link.remote_addr(), "refused a connection");
        let _ = link.send(&refusal(&e));
        return;
    }
    if hello.node_id != NODE_ID_UNASSIGNED {
        return serve_state_fetches(link, incoming, outbox).await;
    }
    let roles = NodeRoles {
        worker: hello.role.worker,
        server: hello.role.server,
    };
    if roles.worker || roles.server {
        let greeted = Greeted {
            link,
            incoming,
            hello,
        };
        let Err(Greeted {
            link,
            incoming,
            hello,
        }) = places.take_place(greeted)
        else {
            return;
        };
        // A node that came while the job starts, once its places were taken, joins once it
        // runs.
        let ctx = running.wait_for(Option::is_some).await.map(|r| r.clone());
        match ctx {
            Ok(Some(ctx)) => {
                let listen_addr = reachable_listen_addr(&hello.listen_addr, link.remote_addr());
                admit(&ctx, link, incoming, roles, listen_addr).await
            }
            _ => link.close("the job did not start"),
        }
    } else {
        let _owed = answers.owe();
        let ctx = running.borrow().clone();
        match ctx {
            Some(ctx) => serve_scale_client(&ctx, link, incoming).await,
            None => answer_starting(link, incoming).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::scale_client::{send_scale_command, ScaleError};
    use crate::remote::state_transfer::{StateDialer, CHUNK_BYTES};
    use harp_wire::{NodeRole, StateFetch};
    use std::time::Duration;
    // The acceptor's type parameter; never run (the job here never starts).
    use crate::test_support::OneIteration;
    use crate::JobCredentials;
    use harp_net::TransportConfig;
    use std::net::SocketAddr;

    /// A master's endpoint whose job is starting, and the credentials of its job.
    fn starting_master() -> (Accepting<OneIteration>, SocketAddr, JobCredentials) {
        let (accepting, addr, creds, _) = starting_master_with_outbox();
        (accepting, addr, creds)
    }

    /// [`starting_master`], with the outbox its endpoint serves parked states from.
    fn starting_master_with_outbox() -> (
        Accepting<OneIteration>,
        SocketAddr,
        JobCredentials,
        Arc<StateOutbox>,
    ) {
        let creds = JobCredentials::generate("accepting").unwrap();
        let listen = SocketAddr::from(([127, 0, 0, 1], 0));
        let endpoint = bind(&creds, listen);
        let addr = endpoint.local_addr().unwrap();
        let job = crate::remote::job_id(&creds);
        let outbox = Arc::new(StateOutbox::default());
        let counters = Arc::new(WireCounters::new());
        let (accepting, _founders) = Accepting::start(endpoint, (job, 0), counters, outbox.clone());
        (accepting, addr, creds, outbox)
    }

    fn bind(creds: &JobCredentials, addr: SocketAddr) -> NetEndpoint {
        let identity = creds.issue_node().unwrap();
        NetEndpoint::bind(addr, creds, &identity, TransportConfig::default()).unwrap()
    }

    /// How node 1 of the job (a worker) fetches states from the master at `master`.
    fn node_dialer(creds: &JobCredentials, master: SocketAddr) -> StateDialer {
        let node = bind(creds, SocketAddr::from(([127, 0, 0, 1], 0)));
        StateDialer {
            hello: harp_wire::hello(
                crate::remote::job_id(creds),
                1,
                NodeRole {
                    worker: true,
                    ..NodeRole::default()
                },
                node.local_addr().unwrap().to_string(),
            ),
            endpoint: node,
            counters: Arc::default(),
            master_ip: master.ip(),
            lease_timeout_ms: 3_000,
        }
    }

    /// What names the state parked as `transfer`, of `bytes`.
    fn fetch_of(transfer: u64, bytes: usize) -> StateFetch {
        StateFetch {
            from_addr: harp_wire::STATE_FROM_MASTER.into(),
            transfer,
            bytes: bytes as u64,
        }
    }

    /// A node of the job (its hello names its id) that connects again fetches a state the
    /// master parked (a resumed job's large executor state), in chunks, byte for byte; the
    /// master forgets it once sent.
    #[tokio::test]
    async fn a_node_fetches_a_state_the_master_parked() {
        let (accepting, addr, creds, outbox) = starting_master_with_outbox();
        let state: Vec<u8> = (0..2 * CHUNK_BYTES + 5).map(|i| (i % 251) as u8).collect();
        let transfer = outbox.park(state.clone());
        let dialer = node_dialer(&creds, addr);
        let fetch = fetch_of(transfer, state.len());
        let fetched = dialer.fetch(&addr.to_string(), &fetch, "executor-0").await;
        assert!(
            fetched.as_ref().is_ok_and(|f| *f == state),
            "{:?}",
            fetched.err()
        );
        assert!(outbox.wait_empty(std::time::Duration::from_secs(5)).await);
        // A transfer that is not parked (any more) is refused with its number.
        let again = dialer.fetch(&addr.to_string(), &fetch, "executor-0").await;
        let error = again.expect_err("a second fetch of the same transfer");
        assert!(
            error.to_string().contains(&format!("transfer {transfer}")),
            "{error}"
        );
        accepting.close_endpoint().await;
    }

    /// A state parked with a hold (the fault delay a test sets on a node, so it can be
    /// killed mid-fetch) is served whole once the hold has passed, not before.
    #[tokio::test]
    async fn a_held_state_is_served_whole_once_its_hold_has_passed() {
        let (accepting, addr, creds, outbox) = starting_master_with_outbox();
        let state: Vec<u8> = (0..CHUNK_BYTES + 3).map(|i| (i % 239) as u8).collect();
        let hold = Duration::from_millis(300);
        let transfer = outbox.park_held(state.clone(), Some(hold));
        let dialer = node_dialer(&creds, addr);
        let asked = std::time::Instant::now();
        let fetched = dialer
            .fetch(
                &addr.to_string(),
                &fetch_of(transfer, state.len()),
                "executor-0",
            )
            .await;
        assert!(asked.elapsed() >= hold, "served before its hold passed");
        assert!(
            fetched.as_ref().is_ok_and(|f| *f == state),
            "{:?}",
            fetched.err()
        );
        accepting.close_endpoint().await;
    }

    /// A failed fetch from a node that listens on every interface (`0.0.0.0:PORT`, as the
    /// master tells it to the others) names the address it dialled, not the wildcard one.
    #[tokio::test]
    async fn a_failed_fetch_names_the_address_it_dialled() {
        let (accepting, addr, creds) = starting_master();
        let wildcard = SocketAddr::from(([0, 0, 0, 0], addr.port()));
        let dialer = node_dialer(&creds, addr);
        let error = (dialer.fetch(&wildcard.to_string(), &fetch_of(7, 10), "executor-3"))
            .await
            .expect_err("nothing is parked as transfer 7");
        let said = error.to_string();
        assert!(
            said.contains(&format!("the state of executor-3 from {addr}:")),
            "{said}"
        );
        assert!(!said.contains("0.0.0.0"), "{said}");
        accepting.close_endpoint().await;
    }

    /// Issue 4: `harp scale` while the job still starts gets the typed starting error at
    /// once, not a handshake timeout.
    #[tokio::test]
    async fn a_command_while_the_job_starts_is_answered_that_it_is_starting() {
        let (accepting, addr, creds) = starting_master();
        let answer = send_scale_command(&creds, addr, 1, vec![2]).await;
        assert!(matches!(answer, Err(ScaleError::JobStarting)), "{answer:?}");
        accepting.close_endpoint().await;
    }

    /// Issue 4: the master closing its endpoint right after it took a command (the job
    /// ended) still lets the answer reach the client first.
    #[tokio::test]
    async fn closing_the_endpoint_waits_for_the_answers_owed() {
        let (accepting, addr, creds) = starting_master();
        let client =
            crate::spawn::spawn(async move { send_scale_command(&creds, addr, 0, vec![]).await });
        // As the master's exit does, on a task of its own: as soon as the command was taken
        // (its answer is owed), the job ends and the endpoint closes.
        let exit = crate::spawn::spawn(async move {
            accepting.answers.wait_owed().await;
            accepting.close_endpoint().await;
        });
        let answer = client.await.unwrap();
        exit.await.unwrap();
        assert!(matches!(answer, Err(ScaleError::JobStarting)), "{answer:?}");
    }
}
