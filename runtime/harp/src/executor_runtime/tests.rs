use super::*;
use std::time::Duration;

#[test]
fn the_variable_chooses_the_layout_and_nonsense_is_refused() {
    assert_eq!(parse_layout("", Layout::Own(3)).unwrap(), Layout::Own(3));
    assert_eq!(parse_layout("", Layout::Shared).unwrap(), Layout::Shared);
    assert_eq!(parse_layout(" 4 ", Layout::Shared).unwrap(), Layout::Own(4));
    assert_eq!(parse_layout("0", Layout::Own(8)).unwrap(), Layout::Shared);
    let refused = parse_layout("many", Layout::Shared)
        .unwrap_err()
        .to_string();
    assert!(refused.contains("HARP_EXECUTOR_THREADS") && refused.contains("many"));
    assert_eq!(
        parse_layout("1024", Layout::Shared).unwrap(),
        Layout::Own(MAX_RUNTIME_THREADS)
    );
    let refused = parse_layout("100000", Layout::Shared)
        .unwrap_err()
        .to_string();
    assert!(refused.contains("up to 1024"), "{refused}");
}

fn node_runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap()
}

/// A node of `threads` runtime threads with as many executors, laid out as `layout`. The
/// executors start computing (block their threads) together; each sends a request to a
/// server task on the node's runtime and computes until it is answered (for at most
/// `patience`) and every executor is done waiting. The server notes, for each answer,
/// whether every executor was still computing. Returns how many answers came while all
/// were: on one shared runtime none can, as the server needs a thread that a compute holds.
/// `None` when the computes did not all start together within 5 s.
fn answered_while_all_compute_once(
    layout: Layout,
    threads: usize,
    patience: Duration,
) -> Option<usize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};
    node_runtime(threads).block_on(async move {
        let executors = ExecutorRuntime::start(Handle::current(), layout).unwrap();
        let computing = Arc::new(AtomicUsize::new(threads));
        let (to_server, mut requests) =
            tokio::sync::mpsc::unbounded_channel::<std::sync::mpsc::Sender<bool>>();
        let seen_by_server = computing.clone();
        executors.spawn_on_node(async move {
            while let Some(answer) = requests.recv().await {
                let _ = answer.send(seen_by_server.load(Ordering::SeqCst) == threads);
            }
        });
        let started = Arc::new(AtomicUsize::new(0));
        let done_waiting = Arc::new(Barrier::new(threads));
        let mut outcomes = Vec::new();
        for _ in 0..threads {
            let (to_server, computing) = (to_server.clone(), computing.clone());
            let (started, done_waiting) = (started.clone(), done_waiting.clone());
            let (outcome, seen) = tokio::sync::oneshot::channel();
            outcomes.push(seen);
            executors.spawn(async move {
                // The compute: this thread is taken from here to the end of the future. Its
                // threads must all compute at once; if the scheduler queued two computes on
                // one thread (which then blocks here), the round is given up, not hung.
                started.fetch_add(1, Ordering::SeqCst);
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                while started.load(Ordering::SeqCst) < threads {
                    if std::time::Instant::now() > deadline {
                        let _ = outcome.send(None);
                        return;
                    }
                    std::thread::yield_now();
                }
                let (answer, answered) = std::sync::mpsc::channel();
                let _ = to_server.send(answer);
                let while_all_computed = answered.recv_timeout(patience) == Ok(true);
                done_waiting.wait();
                computing.fetch_sub(1, Ordering::SeqCst);
                let _ = outcome.send(Some(while_all_computed));
            });
        }
        let mut answered = Some(0);
        for seen in outcomes {
            match seen.await.unwrap() {
                Some(all) => answered = answered.map(|n| n + usize::from(all)),
                None => answered = None,
            }
        }
        answered
    })
}

/// [`answered_while_all_compute_once`] until a round in which every compute started
/// together (at most 5 rounds).
fn answered_while_all_compute(layout: Layout, threads: usize, patience: Duration) -> usize {
    (0..5)
        .find_map(|_| answered_while_all_compute_once(layout, threads, patience))
        .expect("in 5 rounds the computes never all started together")
}

#[test]
fn a_nodes_servers_answer_while_every_executor_computes() {
    let node = node_runtime(2);
    let layout = node.block_on(async { parse_layout("", Layout::Own(2)).unwrap() });
    // Generous patience: this only bounds the wait if the layout is broken.
    assert_eq!(
        answered_while_all_compute(layout, 2, Duration::from_secs(30)),
        2,
        "a server on the node's runtime must answer while executors compute on their own"
    );
}

#[test]
fn on_a_shared_runtime_computing_executors_starve_the_servers() {
    // Why nodes keep executors apart: with every runtime thread computing, the server task
    // cannot run until a compute ends (here: the executors give up waiting).
    assert_eq!(
        answered_while_all_compute(Layout::Shared, 2, Duration::from_millis(300)),
        0
    );
}

#[test]
fn a_node_gives_its_executors_as_many_threads_as_it_has() {
    node_runtime(3).block_on(async {
        let layout = match std::env::var(EXECUTOR_THREADS_VAR) {
            Ok(value) if !value.trim().is_empty() => {
                eprintln!("skipped: {EXECUTOR_THREADS_VAR}={value:?} overrides the default layout");
                return;
            }
            _ => ExecutorRuntime::for_node(true).unwrap(),
        };
        let threads = layout.own.as_ref().map(|r| r.metrics().num_workers());
        assert_eq!(threads, Some(3));
        let server_only = ExecutorRuntime::for_node(false).unwrap();
        assert!(
            server_only.own.is_none(),
            "a node without a worker starts no executor threads"
        );
        let job = ExecutorRuntime::for_job().unwrap();
        assert!(
            job.own.is_none(),
            "a job in one process keeps the caller's runtime"
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn an_own_runtime_runs_tasks_on_its_threads_and_drops_inside_async_code() {
    let runtime = ExecutorRuntime::start(Handle::current(), Layout::Own(1)).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    runtime.spawn(async move {
        let _ = tx.send(std::thread::current().name().map(str::to_string));
    });
    assert_eq!(rx.await.unwrap().as_deref(), Some("harp-executor"));
    let (tx, rx) = tokio::sync::oneshot::channel();
    runtime.spawn_on_node(async move {
        let _ = tx.send(std::thread::current().name().map(str::to_string));
    });
    assert_ne!(rx.await.unwrap().as_deref(), Some("harp-executor"));
    drop(runtime);
    let (tx, rx) = tokio::sync::oneshot::channel();
    ExecutorRuntime::start(Handle::current(), Layout::Shared)
        .unwrap()
        .spawn(async move {
            let _ = tx.send(std::thread::current().name().map(str::to_string));
        });
    assert_ne!(rx.await.unwrap().as_deref(), Some("harp-executor"));
}
