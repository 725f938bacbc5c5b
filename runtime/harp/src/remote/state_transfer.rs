//! Executor state that moves straight from node to node, and large states between a node
//! and the master.
//!
//! A small saved state travels inside the master's messages (`ExecutorReleased`, then
//! `AdoptExecutor`). A state of [`PARK_BYTES_MIN`] or more does not: relaying it through the
//! master would cross the network twice, and a frame holds at most 64 MiB. The releasing
//! node *parks* it here, in its [`StateOutbox`], and tells the master only its size and a
//! transfer number (`ReleaseResult::Parked`). The master's `AdoptExecutor` names the parked
//! state (`StateFetch`: the releasing node's address and the transfer), and the adopting
//! node fetches it on a link of its own ([`fetch_state`]): `FetchState`, answered by
//! [`StateChunk`](harp_wire::Message::StateChunk)s of [`CHUNK_BYTES`], each on a stream of
//! its own, written into place by offset.
//!
//! The state's bytes are copied once between the two executors' states: the sender frames
//! each chunk around a slice of the parked bytes (`encode_state_chunk`: header, data, tail,
//! no copy), and the chunks go out one after the other (each stream's priority is below the
//! previous one's, all below the control stream), so they arrive in turn rather than all
//! at the end; the receiving link keeps each chunk's pieces as quinn hands them over
//! (`Link::open_for_state`), and [`Assembly`] copies them into place.
//!
//! The releasing node keeps a parked state until a fetch has handed every chunk to QUIC (or
//! failed to: a failed fetch is not retried), and
//! a node that was asked to leave waits (a bounded time) for its parked states to be fetched
//! before it exits. A fetch that fails (the releasing node died, a chunk does not fit the
//! announced size) is an error the adopting node reports; the master then ends the job with
//! it, because the executor has no host, or, in a job that recovers worker nodes, creates
//! the executor afresh there (`master/moves_under_recovery.rs`). A node fetches a state it
//! parked itself the same way, over a link to its own endpoint (a move that went back).
//!
//! The master uses the same transfer for consistent checkpoints ([`MasterCourier`]): a
//! worker node parks a large saved state (`ExecutorSaveResult::Parked`) and the master
//! fetches it from the node's endpoint; a resumed job's large state the master parks in its
//! own outbox, names it in `AdoptExecutor` as [`STATE_FROM_MASTER`], and the node fetches it
//! from the master's endpoint, which serves a node's second connection
//! ([`serve_state_fetches`]).
//!
//! [`STATE_FROM_MASTER`]: harp_wire::STATE_FROM_MASTER

use super::listen_addr::{dial_addr, loopback_hint};
use crate::error::HarpError;
use bytes::Bytes;
use dashmap::DashMap;
use harp_net::{Incoming, IncomingChunk, Link, NetEndpoint, PeerConnection};
use harp_wire::frame::state_chunk::{encode_state_chunk, ReceivedStateChunk};
use harp_wire::{FrameLimits, Message, StateFetch, WireCounters};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};

/// Saved states this large or larger are parked and fetched node to node.
pub(crate) const PARK_BYTES_MIN: usize = 1 << 20;

/// Whether a saved state of `bytes` is parked and fetched rather than carried in a
/// message (one rule for moves, checkpoints and resumes).
pub(crate) fn is_parked(bytes: usize) -> bool {
    bytes >= PARK_BYTES_MIN
}

/// The size of one [`Message::StateChunk`]'s data.
pub(crate) const CHUNK_BYTES: usize = 8 << 20;

/// How long a fetch waits for the next chunk before it gives up (under a lease over 29 s, a
/// lease and a second: [`chunk_wait`]).
const CHUNK_TIMEOUT: Duration = Duration::from_secs(30);

/// Saved executor states parked on this node until the adopting node fetches them.
#[derive(Default)]
pub(crate) struct StateOutbox {
    next: AtomicU64,
    parked: DashMap<u64, Parked>,
    emptied: Notify,
}

/// A parked state, and how long its fetch is held before it is served (a fault delay).
#[derive(Clone)]
struct Parked {
    state: Bytes,
    held: Option<Duration>,
}

impl StateOutbox {
    /// Parks `state`; returns its transfer number.
    pub(crate) fn park(&self, state: Vec<u8>) -> u64 {
        self.park_held(state, None)
    }

    /// Parks `state`, whose fetch waits `held` before it is served (fault injection:
    /// [`RELEASED_STATE_SERVE_DELAY_VAR`](super::fault_delays::RELEASED_STATE_SERVE_DELAY_VAR));
    /// returns its transfer number.
    pub(crate) fn park_held(&self, state: Vec<u8>, held: Option<Duration>) -> u64 {
        let transfer = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Bytes::from(state);
        self.parked.insert(transfer, Parked { state, held });
        transfer
    }

    /// How many parked states wait to be fetched.
    pub(crate) fn waiting(&self) -> usize {
        self.parked.len()
    }

    /// Waits until no state is parked here, or `limit` passed; says whether it is empty.
    pub(crate) async fn wait_empty(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let emptied = self.emptied.notified();
            if self.parked.is_empty() {
                return true;
            }
            if tokio::time::timeout_at(deadline, emptied).await.is_err() {
                return self.parked.is_empty();
            }
        }
    }

    /// Sends the state parked as `transfer` on `link` in chunks, and forgets it once every
    /// chunk is handed to QUIC. An unknown transfer is refused.
    pub(crate) async fn serve_fetch(&self, link: &Link, request_id: u64, transfer: u64) {
        let Some(Parked { state, held }) = self.parked.get(&transfer).map(|p| p.clone()) else {
            let _ = link.send(&Message::Refused {
                reason: format!("no executor state is parked here as transfer {transfer}"),
            });
            return;
        };
        if let Some(held) = held {
            tracing::info!(
                transfer,
                held_ms = held.as_millis() as u64,
                "a parked executor state's fetch is held by a fault delay"
            );
            tokio::time::sleep(held).await;
        }
        let total = state.len() as u64;
        let began = Instant::now();
        let mut offset = 0;
        for index in 0.. {
            let end = (offset + CHUNK_BYTES).min(state.len());
            let sent = match encode_state_chunk(
                request_id,
                total,
                offset as u64,
                state.slice(offset..end),
                &link.limits(),
            ) {
                Ok(frame) => link
                    .send_bulk_parts(&mut frame.into_parts(), chunk_priority(index))
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = sent {
                // The fetch failed for good (the adopting node reports it and the executor
                // is created afresh, or the job ends): nothing will fetch this state again.
                tracing::warn!(transfer, error = %e, "a parked executor state could not be sent; it is dropped");
                link.close("the executor state could not be sent");
                self.forget(transfer);
                return;
            }
            offset = end;
            if offset >= state.len() {
                break;
            }
        }
        let send_s = began.elapsed().as_secs_f64();
        tracing::info!(
            transfer,
            bytes = total,
            send_ms = send_s * 1e3,
            mb_s = total as f64 / 1e6 / send_s.max(1e-9),
            "parked executor state handed to QUIC"
        );
        self.forget(transfer);
    }

    /// [`serve_fetch`](Self::serve_fetch) on a task of its own, so the link's other
    /// requests are read meanwhile.
    pub(crate) fn spawn_serve_fetch(self: &Arc<Self>, link: &Link, request_id: u64, transfer: u64) {
        let (link, outbox) = (link.clone(), self.clone());
        crate::spawn::spawn(async move { outbox.serve_fetch(&link, request_id, transfer).await });
    }

    /// Drops the state parked as `transfer`.
    fn forget(&self, transfer: u64) {
        self.parked.remove(&transfer);
        if self.parked.is_empty() {
            self.emptied.notify_waiters();
        }
    }
}

/// The priority of the stream of chunk `index`: below the control stream's (0) and below
/// every earlier chunk's, so quinn sends the chunks one after the other.
fn chunk_priority(index: usize) -> i32 {
    i32::try_from(index).map_or(i32::MIN, |i| -1 - i.min(i32::MAX - 1))
}

/// The parts of a fetched state that have arrived, written in place by offset. The sender
/// cuts the state into chunks of `chunk` bytes (the last one shorter); each must arrive
/// exactly once, whole, at its own offset.
struct Assembly {
    buffer: Vec<u8>,
    chunk: usize,
    arrived: Vec<bool>,
    missing: usize,
}

impl Assembly {
    fn new(bytes: u64, chunk: usize) -> Result<Self, HarpError> {
        let len = usize::try_from(bytes).map_err(|_| {
            HarpError::Remote(format!(
                "an executor state of {bytes} bytes does not fit here"
            ))
        })?;
        let chunks = len.div_ceil(chunk.max(1));
        Ok(Self {
            buffer: vec![0; len],
            chunk: chunk.max(1),
            arrived: vec![false; chunks],
            missing: chunks,
        })
    }

    /// Writes one received chunk into place.
    fn put_received(&mut self, chunk: &ReceivedStateChunk) -> Result<(), HarpError> {
        self.put(chunk.total, chunk.offset, chunk.len(), |place| {
            chunk.copy_to(place)
        })
    }

    /// Writes one chunk of `len` bytes (`write` fills its place, and says whether the
    /// place had its size); an inconsistent or repeated chunk is an error, and nothing is
    /// written.
    fn put(
        &mut self,
        total: u64,
        offset: u64,
        len: usize,
        write: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<(), HarpError> {
        let (data_len, len) = (len, self.buffer.len());
        if total != len as u64 {
            return Err(HarpError::Remote(format!(
                "the state was announced as {len} bytes but a chunk says {total}"
            )));
        }
        let start = usize::try_from(offset)
            .ok()
            .filter(|o| o % self.chunk == 0 && *o < len);
        let Some(start) = start else {
            return Err(HarpError::Remote(format!(
                "a chunk at offset {offset} does not start a chunk of a state of {len} bytes"
            )));
        };
        let end = (start + self.chunk).min(len);
        if data_len != end - start {
            return Err(HarpError::Remote(format!(
                "the chunk at offset {offset} has {data_len} bytes, not {}",
                end - start
            )));
        }
        let index = start / self.chunk;
        if self.arrived[index] {
            return Err(HarpError::Remote(format!(
                "the chunk at offset {offset} arrived twice"
            )));
        }
        if !write(&mut self.buffer[start..end]) {
            return Err(HarpError::Remote(format!(
                "the chunk at offset {offset} could not be written"
            )));
        }
        self.arrived[index] = true;
        self.missing -= 1;
        Ok(())
    }

    fn complete(&self) -> bool {
        self.missing == 0
    }
}

/// What a link opened for a fetch (`Link::open_for_state`) receives: control messages and
/// state chunks.
pub(crate) type FetchLink = (
    Link,
    mpsc::UnboundedReceiver<Incoming>,
    mpsc::UnboundedReceiver<IncomingChunk>,
);

/// What opens links to other processes of the job (a node's peers' servers, parked
/// states): this process's endpoint, the hello it sends first, its wire counters and where
/// it reaches the master's host.
#[derive(Clone)]
pub(crate) struct StateDialer {
    pub endpoint: NetEndpoint,
    pub hello: Message,
    pub counters: Arc<WireCounters>,
    /// The master's IP as this process reaches it (a loopback address on the master's
    /// host): where a listen address with a wildcard IP is dialled (`listen_addr`).
    pub master_ip: IpAddr,
    /// The job's lease (`ClusterOptions::lease_timeout_ms`, a node's from its welcome): a
    /// fetch waits for a peer silent for less than it.
    pub lease_timeout_ms: u64,
}

/// How long a fetch waits for the next chunk in a job whose lease is `lease_timeout_ms`:
/// [`CHUNK_TIMEOUT`], or a lease and a second when that is longer
/// (`lease::outlasting_verdict`), so a peer silent for less than the lease fails no fetch.
fn chunk_wait(lease_timeout_ms: u64) -> Duration {
    super::lease::outlasting_verdict(CHUNK_TIMEOUT, lease_timeout_ms)
}

impl StateDialer {
    /// Connects to the process listening at `addr` (`what` it is, for errors).
    pub(crate) async fn dial(&self, addr: &str, what: &str) -> Result<PeerConnection, HarpError> {
        let parsed: SocketAddr = addr
            .parse()
            .map_err(|_| HarpError::Remote(format!("bad address for {what}: {addr}")))?;
        let target = dial_addr(parsed, self.master_ip);
        match self.endpoint.connect(target).await {
            Ok(conn) => Ok(conn),
            Err(e) => Err(
                match self
                    .endpoint
                    .local_addr()
                    .ok()
                    .and_then(|bound| loopback_hint(parsed, self.master_ip, bound.ip()))
                {
                    Some(hint) => HarpError::Remote(format!("{e} ({what}: {hint})")),
                    None => e.into(),
                },
            ),
        }
    }

    /// Fetches the state `fetch` names from the process listening at `addr` (`what` the
    /// state is, for errors), on a link of its own.
    pub(crate) async fn fetch(
        &self,
        addr: &str,
        fetch: &StateFetch,
        what: &str,
    ) -> Result<Vec<u8>, HarpError> {
        let fetched = async {
            let conn = self.dial(addr, what).await?;
            let link = Link::open_for_state(
                conn,
                &self.hello,
                FrameLimits::default(),
                self.counters.clone(),
            )
            .await?;
            fetch_state(link, fetch, chunk_wait(self.lease_timeout_ms)).await
        };
        // The address dialled, not a wildcard one the node listens on (`0.0.0.0:PORT`).
        let from = (addr.parse())
            .map(|parsed| dial_addr(parsed, self.master_ip).to_string())
            .unwrap_or_else(|_| addr.to_string());
        fetched.await.map_err(|e| {
            HarpError::Remote(format!(
                "could not fetch the state of {what} from {from}: {e}"
            ))
        })
    }
}

/// The master's end of parked states: it fetches the large states worker nodes park for a
/// consistent checkpoint, and parks the large states a resumed job's nodes adopt (they fetch
/// them from the master's endpoint, [`serve_state_fetches`]).
#[derive(Clone)]
pub(crate) struct MasterCourier {
    pub dialer: StateDialer,
    pub outbox: Arc<StateOutbox>,
}

impl MasterCourier {
    /// Parks `state` here for a node to fetch; returns where it fetches it from.
    pub(crate) fn park(&self, state: Vec<u8>) -> StateFetch {
        let bytes = state.len() as u64;
        StateFetch {
            from_addr: harp_wire::STATE_FROM_MASTER.to_string(),
            transfer: self.outbox.park(state),
            bytes,
        }
    }

    /// How `state` goes to a node in a message: in it when small, else parked here for the
    /// node to fetch (one of [`PARK_BYTES_MIN`] or more).
    pub(crate) fn carry(&self, state: Vec<u8>) -> (Vec<u8>, Option<StateFetch>) {
        if is_parked(state.len()) {
            (Vec::new(), Some(self.park(state)))
        } else {
            (state, None)
        }
    }
}

/// Serves the state fetches of a peer that dialled this process (a node fetching a state
/// the master parked) from `outbox` until the link closes; anything else is ignored.
pub(crate) async fn serve_state_fetches(
    link: Link,
    mut incoming: mpsc::UnboundedReceiver<Incoming>,
    outbox: Arc<StateOutbox>,
) {
    while let Some(Ok(message)) = incoming.recv().await {
        match message {
            Message::FetchState {
                request_id,
                transfer,
            } => outbox.spawn_serve_fetch(&link, request_id, transfer),
            other => tracing::debug!(kind = ?other.kind(), "ignored on a state fetch link"),
        }
    }
}

/// Fetches the state named by `fetch` on a link of its own to the node that parked it
/// (closed when the state is in), waiting `chunk_wait` at most for each chunk.
pub(crate) async fn fetch_state(
    (link, mut incoming, mut chunks): FetchLink,
    fetch: &StateFetch,
    chunk_wait: Duration,
) -> Result<Vec<u8>, HarpError> {
    let began = Instant::now();
    let mut assembly = Assembly::new(fetch.bytes, CHUNK_BYTES)?;
    let allocate_ms = began.elapsed().as_secs_f64() * 1e3;
    let asked = Instant::now();
    if !assembly.complete() {
        link.send(&Message::FetchState {
            request_id: 0,
            transfer: fetch.transfer,
        })?;
        let result = receive_chunks(
            (&mut incoming, &mut chunks),
            &mut assembly,
            (link.remote_addr(), chunk_wait),
        )
        .await;
        if let Err(e) = result {
            link.close("state fetch failed");
            return Err(e);
        }
    }
    link.close("state fetched");
    let receive_s = asked.elapsed().as_secs_f64();
    tracing::info!(
        transfer = fetch.transfer,
        bytes = fetch.bytes,
        allocate_ms,
        receive_ms = receive_s * 1e3,
        mb_s = fetch.bytes as f64 / 1e6 / receive_s.max(1e-9),
        "executor state fetched"
    );
    Ok(assembly.buffer)
}

/// What a fetch hears next: a chunk, or a control message.
enum Next {
    Chunk(Option<IncomingChunk>),
    Message(Option<Incoming>),
}

async fn receive_chunks(
    (incoming, chunks): (
        &mut mpsc::UnboundedReceiver<Incoming>,
        &mut mpsc::UnboundedReceiver<IncomingChunk>,
    ),
    assembly: &mut Assembly,
    (addr, chunk_wait): (SocketAddr, Duration),
) -> Result<(), HarpError> {
    let lost = |e: Option<harp_net::NetError>| {
        let why = e.map(|e| format!(": {e}")).unwrap_or_default();
        HarpError::Remote(format!("lost {addr} while fetching an executor state{why}"))
    };
    while !assembly.complete() {
        let next = tokio::time::timeout(chunk_wait, async {
            tokio::select! {
                chunk = chunks.recv() => Next::Chunk(chunk),
                message = incoming.recv() => Next::Message(message),
            }
        })
        .await
        .map_err(|_| {
            HarpError::Remote(format!(
                "{addr} sent no part of an executor state for {} s",
                chunk_wait.as_secs()
            ))
        })?;
        match next {
            Next::Chunk(Some(Ok(chunk))) => assembly.put_received(&chunk)?,
            Next::Chunk(Some(Err(e))) | Next::Message(Some(Err(e))) => return Err(lost(Some(e))),
            Next::Chunk(None) | Next::Message(None) => return Err(lost(None)),
            Next::Message(Some(Ok(Message::Refused { reason }))) => {
                return Err(HarpError::Remote(format!(
                    "{addr} refused to send an executor state: {reason}"
                )))
            }
            Next::Message(Some(Ok(other))) => {
                tracing::debug!(kind = ?other.kind(), "ignored while fetching a state")
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(assembly: &mut Assembly, total: u64, offset: u64, data: &[u8]) -> Result<(), HarpError> {
        assembly.put(total, offset, data.len(), |place| {
            place.copy_from_slice(data);
            true
        })
    }

    #[test]
    fn chunks_in_any_order_rebuild_the_state() {
        let state: Vec<u8> = (0..100u32).map(|i| (i * 7) as u8).collect();
        let mut assembly = Assembly::new(100, 30).unwrap();
        for start in [60usize, 0, 90, 30] {
            let end = (start + 30).min(100);
            assert!(!assembly.complete());
            put(&mut assembly, 100, start as u64, &state[start..end]).unwrap();
        }
        assert!(assembly.complete());
        assert_eq!(assembly.buffer, state);
    }

    #[test]
    fn chunks_that_do_not_fit_are_refused_and_write_nothing() {
        let mut assembly = Assembly::new(10, 4).unwrap();
        for (total, offset, data, why) in [
            (10, 8, &[1u8, 2, 3][..], "has 3 bytes, not 2"),
            (11, 0, &[1, 2, 3, 4][..], "announced as 10"),
            (10, 2, &[1, 2, 3, 4][..], "does not start a chunk"),
            (10, 12, &[1, 2][..], "does not start a chunk"),
            (10, u64::MAX, &[1][..], "does not start a chunk"),
            (10, 0, &[][..], "has 0 bytes"),
        ] {
            let e = put(&mut assembly, total, offset, data).unwrap_err();
            assert!(e.to_string().contains(why), "{e} (wanted: {why})");
        }
        assert_eq!(assembly.missing, 3);
        assert_eq!(assembly.buffer, vec![0; 10]);
    }

    #[test]
    fn a_repeated_chunk_cannot_pass_for_a_missing_one() {
        let mut assembly = Assembly::new(8, 4).unwrap();
        put(&mut assembly, 8, 0, &[1, 2, 3, 4]).unwrap();
        let e = put(&mut assembly, 8, 0, &[9, 9, 9, 9]).unwrap_err();
        assert!(e.to_string().contains("arrived twice"), "{e}");
        assert!(!assembly.complete());
        assert_eq!(assembly.buffer, vec![1, 2, 3, 4, 0, 0, 0, 0]);
    }

    /// A message carries a state of up to a byte under a mebibyte; from a mebibyte on,
    /// it is parked (and then its message carries no state, so it stays small).
    #[test]
    fn states_from_a_mebibyte_on_are_parked_and_smaller_ones_carried() {
        assert!(!is_parked(0));
        assert!(!is_parked(PARK_BYTES_MIN - 1));
        assert!(is_parked(PARK_BYTES_MIN));
        assert!(is_parked(300_000_000));
    }

    /// A fetch waits for the next part as long as the lease says: a peer that answers
    /// (here: refuses) after 35 s of silence is heard under a 40 s lease, and taken for
    /// silent under the default one, after the usual 30 s.
    #[tokio::test(start_paused = true)]
    async fn a_fetch_waits_for_a_peer_silent_for_less_than_the_lease() {
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        for lease_timeout_ms in [3_000, 40_000] {
            let (tx, mut incoming) = mpsc::unbounded_channel();
            let (_chunk_tx, mut chunks) = mpsc::unbounded_channel();
            let mut assembly = Assembly::new(10, CHUNK_BYTES).unwrap();
            crate::spawn::spawn(async move {
                tokio::time::sleep(Duration::from_secs(35)).await;
                let reason = "no such transfer".to_string();
                let _ = tx.send(Ok(Message::Refused { reason }));
            });
            let began = tokio::time::Instant::now();
            let wait = chunk_wait(lease_timeout_ms);
            let received =
                receive_chunks((&mut incoming, &mut chunks), &mut assembly, (addr, wait)).await;
            let err = received.unwrap_err().to_string();
            if lease_timeout_ms == 3_000 {
                assert!(
                    err.contains("sent no part of an executor state for 30 s"),
                    "{err}"
                );
                assert_eq!(began.elapsed(), Duration::from_secs(30));
            } else {
                assert!(err.contains("refused to send an executor state"), "{err}");
                assert_eq!(wait, Duration::from_secs(41));
            }
        }
    }

    #[test]
    fn an_empty_state_is_complete_at_once() {
        assert!(Assembly::new(0, 4).unwrap().complete());
    }

    /// A link from one endpoint to another (both in this process), as the releasing node
    /// sees it when the adopting node dialled it.
    async fn accepted_link() -> Link {
        crate::test_support::link_pair().await.acceptor.0
    }

    /// A fetch whose link fails mid-way is not retried, so the state it was sending is
    /// dropped rather than kept until the job ends.
    #[tokio::test]
    async fn a_state_whose_fetch_failed_is_dropped() {
        let outbox = StateOutbox::default();
        let transfer = outbox.park(vec![7; 3 * CHUNK_BYTES]);
        let link = accepted_link().await;
        link.close("the adopting node died");
        outbox.serve_fetch(&link, 0, transfer).await;
        assert_eq!(outbox.waiting(), 0, "the state stayed parked");
        assert!(outbox.wait_empty(Duration::from_millis(1)).await);
    }

    #[tokio::test]
    async fn the_outbox_is_empty_once_nothing_is_parked() {
        let outbox = StateOutbox::default();
        assert!(outbox.wait_empty(Duration::from_millis(1)).await);
        let t = outbox.park(vec![1, 2, 3]);
        assert_eq!(outbox.waiting(), 1);
        assert!(!outbox.wait_empty(Duration::from_millis(5)).await);
        outbox.parked.remove(&t);
        assert!(outbox.wait_empty(Duration::from_millis(5)).await);
    }
}
