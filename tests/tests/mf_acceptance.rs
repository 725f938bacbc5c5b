//! Matrix factorization (`harp run mf`): ALS and SGD on MovieLens reach the held-out
//! RMSE, the model-parallel ALS split gives the same factors on any number of executors
//! (each row's solve sees the same ratings in the same order), stratified SGD gives the
//! same factors however its executors are spread over workers, a job across node processes
//! matches the in-process one, and bad ratings files are refused with the file and line.

use harp::JobConfig;
use harp_apps::data::{parse_ratings_reader, RatingRange, RatingsData};
use harp_apps::mf::{MfApp, MfConfig, MfMetrics, MfSolver};
use harp_apps::mlr::Quiet;
use harp_tests::{harp_binary, run_cli, run_with_metrics, runtime, shared_data, Threads};
use std::path::Path;
use std::sync::Arc;

fn job(workers: u32, executors_per_worker: u32) -> JobConfig {
    JobConfig {
        workers,
        servers: 2,
        executors_per_worker,
        shards_per_server: 4,
        collect_params: false,
        scar: None,
    }
}

fn train(data: &RatingsData, config: MfConfig, job: &JobConfig) -> Vec<MfMetrics> {
    let (train, test) = data.split(0.2, config.seed).unwrap();
    let app =
        Arc::new(MfApp::new(config, Arc::new(train), Arc::new(test), Arc::new(Quiet)).unwrap());
    let outcome = runtime(Threads::Multi(2))
        .block_on(harp::run_job(app, job))
        .unwrap();
    outcome.driver.history().to_vec()
}

/// Ratings of a rank-3 model plus noise: 150 users × 80 items, about 40% observed, as CSV.
fn synthetic_csv() -> String {
    let mut state = 7u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as f64) / (1u64 << 31) as f64
    };
    let users: Vec<[f64; 3]> = (0..150)
        .map(|_| [next() - 0.5, next() - 0.5, next() - 0.5])
        .collect();
    let items: Vec<[f64; 3]> = (0..80)
        .map(|_| [next() - 0.5, next() - 0.5, next() - 0.5])
        .collect();
    let mut csv = String::from("userId,movieId,rating,timestamp\n");
    for (u, p) in users.iter().enumerate() {
        for (i, q) in items.iter().enumerate() {
            if next() < 0.4 {
                let dot: f64 = p.iter().zip(q).map(|(a, b)| a * b).sum();
                let rating = (3.0 + 8.0 * dot + 0.2 * (next() - 0.5)).clamp(0.5, 5.0);
                csv.push_str(&format!("{},{},{rating:.3},0\n", u + 1, i + 10));
            }
        }
    }
    csv
}

fn synthetic() -> RatingsData {
    parse_ratings_reader(
        synthetic_csv().as_bytes(),
        Path::new("synthetic.csv"),
        RatingRange::default(),
    )
    .unwrap()
}

#[test]
fn mf_on_movielens_small_reaches_a_held_out_rmse_of_at_most_0_95() {
    let Some(path) = shared_data("movielens-small/ratings.csv") else {
        return;
    };
    let data = harp_apps::data::load_ratings(&path, RatingRange::default()).unwrap();
    let history = train(&data, MfConfig::default(), &job(2, 2));
    assert_eq!(history.len(), 10);
    for m in &history {
        eprintln!(
            "iteration {}: train {:.4} test {:?}",
            m.iteration, m.train_rmse, m.test_rmse
        );
    }
    let (first, last) = (&history[0], &history[history.len() - 1]);
    assert!(last.train_rmse < first.train_rmse, "{history:?}");
    let held_out = last.test_rmse.expect("ratings are held out");
    assert!(held_out <= 0.95, "held-out RMSE {held_out}");
}

fn sgd() -> MfConfig {
    MfConfig {
        solver: MfSolver::Sgd { lr: 0.01 },
        lambda: 0.05,
        iterations: 20,
        ..MfConfig::default()
    }
}

#[test]
fn sgd_on_movielens_small_reaches_a_held_out_rmse_of_at_most_0_95() {
    let Some(path) = shared_data("movielens-small/ratings.csv") else {
        return;
    };
    let data = harp_apps::data::load_ratings(&path, RatingRange::default()).unwrap();
    let history = train(&data, sgd(), &job(2, 2));
    assert_eq!(history.len(), 20);
    for m in &history {
        eprintln!(
            "SGD iteration {}: train {:.4} test {:?}",
            m.iteration, m.train_rmse, m.test_rmse
        );
    }
    let (first, last) = (&history[0], &history[history.len() - 1]);
    assert!(last.train_rmse < first.train_rmse - 0.2, "{history:?}");
    let held_out = last.test_rmse.expect("ratings are held out");
    assert!(held_out <= 0.95, "held-out RMSE {held_out}");
}

/// Each SGD sub-round gives every item block to one executor and every user to its owner,
/// so the factors depend on the executors' ratings and order, not on where they run or how
/// their tasks interleave.
#[test]
fn sgd_gives_the_same_factors_on_one_or_several_workers() {
    let data = synthetic();
    let config = MfConfig {
        rank: 4,
        iterations: 5,
        solver: MfSolver::Sgd { lr: 0.05 },
        ..sgd()
    };
    let one = train(&data, config.clone(), &job(1, 4));
    let spread = train(&data, config, &job(2, 2));
    assert_eq!(one.len(), 5);
    assert_eq!(spread.len(), 5);
    // The executors' squared errors are summed in completion order: equal up to rounding.
    for (a, b) in one.iter().zip(&spread) {
        assert!((a.train_rmse - b.train_rmse).abs() < 1e-9, "{a:?} vs {b:?}");
        let (ta, tb) = (a.test_rmse.unwrap(), b.test_rmse.unwrap());
        assert!((ta - tb).abs() < 1e-9, "{a:?} vs {b:?}");
    }
    assert!(one[4].train_rmse < one[0].train_rmse, "{one:?}");
}

#[test]
fn the_factors_do_not_depend_on_how_many_executors_solve_them() {
    let data = synthetic();
    let config = MfConfig {
        rank: 4,
        iterations: 4,
        ..MfConfig::default()
    };
    let one = train(&data, config.clone(), &job(1, 1));
    let many = train(&data, config, &job(2, 3));
    assert_eq!(one.len(), 4);
    for (a, b) in one.iter().zip(&many) {
        assert!((a.train_rmse - b.train_rmse).abs() < 1e-6, "{a:?} vs {b:?}");
        let (ta, tb) = (a.test_rmse.unwrap(), b.test_rmse.unwrap());
        assert!((ta - tb).abs() < 1e-6, "{a:?} vs {b:?}");
    }
    // ALS fits the rank-3 model: the training error falls several-fold after the first
    // iteration (to about 0.2, the clamping and λ·n shrinkage's floor).
    assert!(one[3].train_rmse < one[0].train_rmse / 3.0, "{one:?}");
}

#[test]
fn mf_across_node_processes_matches_the_run_in_one_process() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("ratings.csv");
    std::fs::write(&csv, synthetic_csv()).unwrap();
    let run = |extra: &[&str], metrics: &str| -> Vec<serde_json::Value> {
        let metrics = dir.path().join(metrics);
        let mut args = vec![
            "run",
            "mf",
            "--data",
            csv.to_str().unwrap(),
            "--rank",
            "4",
            "--iterations",
            "3",
            "--executors-per-worker",
            "2",
        ];
        args.extend_from_slice(extra);
        run_with_metrics(&harp_binary!(), &args, &metrics, "test_rmse").1
    };
    let local = run(&["--workers", "2"], "local.jsonl");
    let across = run(&["--processes", "2"], "across.jsonl");
    assert_eq!(local.len(), 3);
    assert_eq!(across.len(), 3);
    for (a, b) in local.iter().zip(&across) {
        let (a, b) = (
            a["test_rmse"].as_f64().unwrap(),
            b["test_rmse"].as_f64().unwrap(),
        );
        assert!((a - b).abs() < 1e-6, "{a} vs {b}");
    }
}

#[test]
fn bad_ratings_files_are_refused_with_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text, needle) in [
        (
            "dup.csv",
            "1,2,3\n1,5,4\n1,2,4\n",
            "line 3: user 1 rated item 2 a second time",
        ),
        (
            "range.csv",
            "userId,movieId,rating\n1,2,9\n",
            "line 2: the rating 9 is outside",
        ),
        ("short.csv", "1,2\n", "line 1: expected user,item,rating"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let error = run_cli(["run", "mf", "--data", path.to_str().unwrap()])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(name) && error.contains(needle),
            "{name}: {error}"
        );
    }
    let missing = run_cli(["run", "mf", "--data", "/nonexistent/ratings.csv"])
        .unwrap_err()
        .to_string();
    assert!(missing.contains("/nonexistent/ratings.csv"), "{missing}");
}

/// `--test-fraction 0` holds nothing out: there is no held-out RMSE, so the metrics file
/// leaves it out and the terminal says so (it said `test RMSE 0.0000`, a perfect fit, and
/// `harp plot` drew it as a line at 0).
#[test]
fn nothing_held_out_means_no_test_rmse_rather_than_zero() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("ratings.csv");
    std::fs::write(&csv, synthetic_csv()).unwrap();
    let metrics = dir.path().join("all.jsonl");
    let args = [
        "run",
        "mf",
        "--data",
        csv.to_str().unwrap(),
        "--rank",
        "4",
        "--iterations",
        "2",
        "--test-fraction",
        "0",
    ];
    let (out, records) = run_with_metrics(&harp_binary!(), &args, &metrics, "train_rmse");
    assert_eq!(records.len(), 2, "{}", out.describe());
    for record in &records {
        assert!(record.get("test_rmse").is_none(), "{record}");
        assert!(
            record["train_rmse"].as_f64().is_some_and(|r| r > 0.0),
            "{record}"
        );
    }
    assert!(
        out.stderr.contains("test RMSE n/a (none held out)"),
        "{}",
        out.describe()
    );
}
