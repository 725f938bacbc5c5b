//! The cache against servers whose answers the test gives by hand: shared fetches, version
//! rules, out-of-order replies, failed fetches, and that fetches retire themselves.

use super::*;
use harp_core::{ShardMap, TableId};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Mutex;

type GetReply = oneshot::Sender<Result<Vec<Arc<RowData>>, HarpError>>;
type Held = Arc<Mutex<Vec<(Vec<ParamKey>, GetReply)>>>;

/// A server that hands every read to the test (`held`) instead of answering it.
struct HandServer;

impl Actor for HandServer {
    type Msg = ServerMsg;
    type State = Held;
    type Arguments = Held;

    async fn pre_start(
        &self,
        _myself: ActorRef<ServerMsg>,
        held: Held,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(held)
    }

    async fn handle(
        &self,
        _myself: ActorRef<ServerMsg>,
        msg: ServerMsg,
        held: &mut Held,
    ) -> Result<(), ActorProcessingErr> {
        if let ServerMsg::Get { keys, reply } = msg {
            held.lock().unwrap().push((keys, reply));
        }
        Ok(())
    }
}

const DEADLINE: Duration = Duration::from_secs(30);

struct Setup {
    cache: Arc<ParamCache>,
    routing: Arc<RwLock<Routing>>,
    counters: Arc<NodeCounters>,
    held: Vec<Held>,
}

/// A cache in front of `servers` hand-answered servers, 8 shards spread over them.
async fn setup(servers: u32) -> Setup {
    let ids: Vec<ServerId> = (0..servers).map(ServerId).collect();
    let mut actors = BTreeMap::new();
    let mut held = Vec::new();
    for id in &ids {
        let h: Held = Arc::default();
        let (actor, _) = Actor::spawn(None, HandServer, h.clone()).await.unwrap();
        actors.insert(*id, actor);
        held.push(h);
    }
    let routing = Routing {
        shard_map: ShardMap::round_robin(8, &ids).unwrap(),
        servers: actors,
    };
    Setup {
        cache: Arc::new(ParamCache::default()),
        routing: Arc::new(RwLock::new(routing)),
        counters: Arc::default(),
        held,
    }
}

fn key(row: u64) -> ParamKey {
    ParamKey::new(TableId(0), row)
}

fn value(row: &RowData) -> f32 {
    match row {
        RowData::F32(v) => v[0],
        other => panic!("not an f32 row: {other:?}"),
    }
}

impl Setup {
    /// Starts a read on its own task.
    fn read(
        &self,
        keys: Vec<ParamKey>,
        version: u64,
    ) -> tokio::task::JoinHandle<Result<Vec<f32>, HarpError>> {
        let (cache, routing, counters) = (
            self.cache.clone(),
            self.routing.clone(),
            self.counters.clone(),
        );
        crate::spawn::spawn(async move {
            let mut kept = KeptRows::new(keys.len());
            let mut keep = |i: usize, row: &Arc<RowData>| kept.keep(i, row);
            cache
                .visit(
                    &keys,
                    Version(version),
                    &routing,
                    &counters,
                    DEADLINE,
                    &mut keep,
                )
                .await?;
            Ok(kept.into_rows()?.iter().map(|r| value(r)).collect())
        })
    }

    /// Waits until server `server` holds `n` unanswered reads.
    async fn wait_for_gets(&self, server: usize, n: usize) {
        until(&format!("server {server} holds {n} reads"), || {
            self.held_reads(server) >= n
        })
        .await;
    }

    /// Answers server `server`'s held read number `which` (in arrival order among those
    /// still held) with `value` for every key.
    fn answer(&self, server: usize, which: usize, value: f32) -> Vec<ParamKey> {
        self.reply(server, which, |keys| {
            Ok(keys
                .iter()
                .map(|_| Arc::new(RowData::F32(vec![value])))
                .collect())
        })
    }

    /// Answers server `server`'s held read number `which` with what `reply` makes of its
    /// keys; returns the keys.
    fn reply(
        &self,
        server: usize,
        which: usize,
        reply: impl FnOnce(&[ParamKey]) -> Result<Vec<Arc<RowData>>, HarpError>,
    ) -> Vec<ParamKey> {
        let (keys, sender) = self.held[server].lock().unwrap().remove(which);
        sender.send(reply(&keys)).unwrap();
        keys
    }

    /// Reads the server has received and not yet been answered.
    fn held_reads(&self, server: usize) -> usize {
        self.held[server].lock().unwrap().len()
    }

    /// Keys with a fetch still noted as in flight.
    fn pending_keys(&self) -> usize {
        self.cache.entries.count(|state| state.pending.is_some())
    }

    async fn wait_for_waits(&self, n: u64) {
        until(&format!("{n} rows wait on fetches"), || {
            self.counters.fetch_waits.load(Ordering::Relaxed) >= n
        })
        .await;
    }
}

/// Yields until `done`; a watchdog turns a broken cache's endless wait into a failure that
/// says what never happened (not a time limit on anything measured).
async fn until(what: &str, done: impl Fn() -> bool) {
    let wait = async {
        while !done() {
            tokio::task::yield_now().await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(20), wait)
        .await
        .is_err()
    {
        panic!("never happened: {what}");
    }
}

#[tokio::test]
async fn tasks_of_one_version_share_one_fetch() {
    let s = setup(1).await;
    let keys: Vec<ParamKey> = (0..5).map(key).collect();
    let first = s.read(keys.clone(), 3);
    s.wait_for_gets(0, 1).await;
    let second = s.read(keys.clone(), 3);
    let older = s.read(keys.clone(), 2);
    s.wait_for_waits(10).await;
    assert_eq!(
        s.held_reads(0),
        1,
        "the later reads sent requests of their own"
    );
    s.answer(0, 0, 7.0);
    for read in [first, second, older] {
        assert_eq!(read.await.unwrap().unwrap(), vec![7.0; 5]);
    }
    assert_eq!(s.counters.cache_misses.load(Ordering::Relaxed), 5);
    assert_eq!(s.counters.fetch_waits.load(Ordering::Relaxed), 10);
    assert_eq!(
        s.pending_keys(),
        0,
        "an answered fetch stays noted as in flight"
    );
    assert_eq!(s.cache.len(), 5);
}

#[tokio::test]
async fn a_cached_row_serves_its_version_and_older_ones_and_a_newer_task_refetches() {
    let s = setup(1).await;
    let read = s.read(vec![key(1)], 4);
    s.wait_for_gets(0, 1).await;
    s.answer(0, 0, 1.0);
    assert_eq!(read.await.unwrap().unwrap(), vec![1.0]);
    for version in [0, 3, 4] {
        assert_eq!(s.read(vec![key(1)], version).await.unwrap().unwrap(), [1.0]);
    }
    assert_eq!(s.held_reads(0), 0, "a usable cached row was fetched again");
    assert_eq!(s.counters.cache_hits.load(Ordering::Relaxed), 3);

    let newer = s.read(vec![key(1)], 5);
    s.wait_for_gets(0, 1).await;
    s.answer(0, 0, 2.0);
    assert_eq!(newer.await.unwrap().unwrap(), vec![2.0]);
    assert_eq!(s.counters.cache_misses.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn an_older_fetch_answered_last_does_not_replace_a_newer_row() {
    let s = setup(1).await;
    let old = s.read(vec![key(2)], 1);
    s.wait_for_gets(0, 1).await;
    let new = s.read(vec![key(2)], 2);
    s.wait_for_gets(0, 2).await;
    s.answer(0, 1, 20.0); // version 2's fetch answers first
    assert_eq!(new.await.unwrap().unwrap(), vec![20.0]);
    s.answer(0, 0, 10.0); // then version 1's
    assert_eq!(old.await.unwrap().unwrap(), vec![10.0]);

    // Version 2's row is still cached: no new request, and its value.
    assert_eq!(s.read(vec![key(2)], 2).await.unwrap().unwrap(), vec![20.0]);
    assert_eq!(s.held_reads(0), 0);
    assert_eq!(s.pending_keys(), 0);
}

#[tokio::test]
async fn a_failed_fetch_retires_so_the_next_read_sends_a_new_request() {
    let s = setup(1).await;
    let read = s.read(vec![key(3), key(4)], 1);
    s.wait_for_gets(0, 1).await;
    s.reply(0, 0, |_| {
        Err(HarpError::InvalidConfig("no such row".into()))
    });
    let err = read.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("refused a read: "), "{err}");
    assert_eq!(s.pending_keys(), 0, "the failed fetch is still noted");

    let again = s.read(vec![key(3), key(4)], 1);
    s.wait_for_gets(0, 1).await;
    s.answer(0, 0, 5.0);
    assert_eq!(again.await.unwrap().unwrap(), vec![5.0, 5.0]);
}

#[tokio::test]
async fn a_read_over_two_servers_sends_one_request_to_each_and_keeps_the_keys_order() {
    let s = setup(2).await;
    let keys: Vec<ParamKey> = (0..40).map(key).collect();
    let read = s.read(keys.clone(), 1);
    s.wait_for_gets(0, 1).await;
    s.wait_for_gets(1, 1).await;
    let on_0 = s.answer(0, 0, 100.0);
    let on_1 = s.answer(1, 0, 200.0);
    assert!(!on_0.is_empty() && !on_1.is_empty());
    assert_eq!(on_0.len() + on_1.len(), keys.len());
    let got = read.await.unwrap().unwrap();
    for (k, v) in keys.iter().zip(&got) {
        let want = if on_0.contains(k) { 100.0 } else { 200.0 };
        assert_eq!(*v, want, "{k:?}");
    }
}

#[tokio::test]
async fn a_fetch_nobody_awaits_does_not_keep_the_cache_alive() {
    let s = setup(1).await;
    let read = s.read(vec![key(6)], 1);
    s.wait_for_gets(0, 1).await;
    read.abort();
    let _ = read.await;
    assert_eq!(s.pending_keys(), 1);
    assert_eq!(Arc::strong_count(&s.cache.entries), 1);
    // A later read of the same version waits on that fetch and gets its answer.
    let later = s.read(vec![key(6)], 1);
    s.wait_for_waits(1).await;
    s.answer(0, 0, 6.0);
    assert_eq!(later.await.unwrap().unwrap(), vec![6.0]);
    assert_eq!(s.held_reads(0), 0);
}

#[tokio::test]
async fn a_short_reply_fails_its_read_and_the_next_read_asks_again() {
    let s = setup(1).await;
    let read = s.read(vec![key(8), key(9)], 1);
    s.wait_for_gets(0, 1).await;
    s.reply(0, 0, |_| Ok(vec![Arc::new(RowData::F32(vec![1.0]))]));
    let err = read.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("short reply"), "{err}");
    assert_eq!(s.pending_keys(), 0, "the short fetch is still noted");

    let again = s.read(vec![key(8), key(9)], 1);
    // key 8's row came back and serves the read; key 9 is asked for again.
    s.wait_for_gets(0, 1).await;
    let keys = s.answer(0, 0, 2.0);
    assert_eq!(keys, vec![key(9)]);
    assert_eq!(again.await.unwrap().unwrap(), vec![1.0, 2.0]);
}

#[tokio::test]
async fn a_visitors_error_ends_the_read_for_cached_and_fetched_rows() {
    let s = setup(1).await;
    let refuse = |i: usize, _: &Arc<RowData>| -> Result<(), HarpError> {
        Err(HarpError::InvalidConfig(format!("visitor refused {i}")))
    };
    // Fetched: the error comes after the reply.
    let (cache, routing, counters) = (s.cache.clone(), s.routing.clone(), s.counters.clone());
    let fetched = crate::spawn::spawn(async move {
        let mut visit = refuse;
        cache
            .visit(
                &[key(1)],
                Version(1),
                &routing,
                &counters,
                DEADLINE,
                &mut visit,
            )
            .await
    });
    s.wait_for_gets(0, 1).await;
    s.answer(0, 0, 1.0);
    let err = fetched.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("visitor refused 0"), "{err}");
    // Cached now: the error comes at once, and the lock it came under is released.
    let mut visit = refuse;
    let err = s
        .cache
        .visit(
            &[key(1)],
            Version(1),
            &s.routing,
            &s.counters,
            DEADLINE,
            &mut visit,
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("visitor refused 0"), "{err}");
    // A newer read's reply takes that shard's write lock.
    let newer = s.read(vec![key(1)], 2);
    s.wait_for_gets(0, 1).await;
    s.answer(0, 0, 2.0);
    assert_eq!(newer.await.unwrap().unwrap(), vec![2.0]);
}
