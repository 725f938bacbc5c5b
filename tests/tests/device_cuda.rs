//! `harp run APP --device cuda`: without a usable GPU (CI) the command is refused with the
//! reason before any work, never a panic and never a silent CPU run; with one, each app's
//! GPU path trains like its CPU path (MLR's losses and MF ALS's RMSE to f32 rounding, MF SGD
//! — Hogwild on the GPU — to a comparable RMSE). The GPU comparisons skip with a message
//! where no device opens.

use harp::JobConfig;
use harp_apps::data::{parse_ratings_reader, synthetic_classification, RatingRange};
use harp_apps::device::{Compute, Device};
use harp_apps::lda::{LdaApp, LdaConfig, LdaSampler};
use harp_apps::mf::{MfApp, MfConfig, MfSolver};
use harp_apps::mlr::{MlrApp, MlrConfig, Quiet};
use harp_tests::{
    harp_binary, run_process, runtime, shared_data, LoggedNode, MasterProcess, Threads, PATIENCE,
};
use std::path::Path;
use std::sync::Arc;

fn job() -> JobConfig {
    JobConfig {
        workers: 2,
        servers: 2,
        executors_per_worker: 1,
        shards_per_server: 2,
        collect_params: false,
        scar: None,
    }
}

/// The GPU, or `None` (with the reason printed) where none opens; with
/// `HARP_REQUIRE_GPU=1` (the GPU bundle's `run.sh`) a missing GPU fails the test instead.
fn gpu_or_skip(test: &str) -> Option<Compute> {
    match (Device::Cuda { ordinal: 0 }).open() {
        // Opening `cuda` must give a GPU or an error, never the CPU.
        Ok(compute) => {
            assert!(compute.is_gpu(), "{test}: --device cuda opened {compute:?}");
            Some(compute)
        }
        Err(e) if std::env::var("HARP_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("{test}: HARP_REQUIRE_GPU=1 but {e}")
        }
        Err(e) => {
            eprintln!("skipped {test}: {e}");
            None
        }
    }
}

#[test]
fn every_app_refuses_cuda_without_a_gpu_and_says_why() {
    // Only a real GPU skips this test: `cuda` silently opening the CPU must fail it.
    if (Device::Cuda { ordinal: 0 })
        .open()
        .is_ok_and(|compute| compute.is_gpu())
    {
        eprintln!("skipped: a GPU is present (the GPU tests below cover --device cuda)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ratings = dir.path().join("ratings.csv");
    std::fs::write(&ratings, ratings_csv()).unwrap();
    let ratings = ratings.to_str().unwrap();
    let runs: [&[&str]; 4] = [
        &["run", "mlr", "--epochs", "1", "--quiet", "--device", "cuda"],
        &["run", "mf", "--data", ratings, "--device", "cuda:0"],
        // The device is opened before the data is read.
        &["run", "lda", "--data", "/nonexistent", "--device", "cuda"],
        &[
            "run",
            "cnn",
            "--data",
            "/nonexistent",
            "--device",
            "cuda",
            "--quiet",
        ],
    ];
    for args in runs {
        let out = run_process(&harp_binary!(), args);
        assert!(!out.status.success(), "{args:?}: {}", out.describe());
        assert!(
            out.stderr.contains("--device cuda:0: no CUDA device"),
            "{args:?}: {}",
            out.describe()
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.describe());
    }
    // With `--processes` the master checks the device before it starts any node process
    // (they would each fail the same way), and computes nothing on it itself.
    let out = run_process(
        &harp_binary!(),
        ["run", "mlr", "--epochs", "1", "--quiet", "--device", "cuda"]
            .into_iter()
            .chain(["--processes", "2"]),
    );
    assert!(!out.status.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("--device cuda:0: no CUDA device")
            && !out.stderr.contains("master listening"),
        "{}",
        out.describe()
    );
    // A device name that means nothing is a usage error naming the choices.
    let out = run_process(&harp_binary!(), ["run", "mlr", "--device", "tpu"]);
    assert!(!out.status.success());
    assert!(
        out.stderr.contains("expected cpu, cuda or cuda:N"),
        "{}",
        out.describe()
    );
}

/// A master whose nodes are started by hand (`--nodes`) runs no executor, so it opens no
/// device: its host may have no GPU while its nodes have one each. Here the master says
/// `--device cuda` and its node computes on the CPU (a node opens the device its own run
/// arguments name), on this machine with or without a GPU; before, a master without a
/// GPU refused the job.
#[test]
fn a_master_of_nodes_started_by_hand_opens_no_device() {
    let run = ["run", "mlr", "--epochs", "1", "--quiet"];
    let master_args: Vec<&str> = (run.iter().copied())
        .chain(["--device", "cuda", "--nodes", "1"])
        .collect();
    let master = MasterProcess::start(harp_binary!(), &master_args);
    let node_args: Vec<&str> = run.iter().copied().chain(["--device", "cpu"]).collect();
    let node = LoggedNode::start(&master, &node_args);
    let (status, stderr) = master.finish_within(PATIENCE);
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("done: 1 epochs"), "{stderr}");
    let (node_status, node_log) = node.exit("the node");
    assert!(node_status.success(), "{node_log}");
}

/// LDA's sequential sampler cannot run on a GPU: said at once by the master, whatever its
/// own device and before it reads the corpus or waits for nodes.
#[test]
fn lda_refuses_the_sequential_sampler_on_a_gpu_at_once() {
    for layout in [&[][..], &["--nodes", "2"][..]] {
        let args = ["run", "lda", "--data", "/nonexistent", "--device", "cuda"];
        let out = run_process(
            &harp_binary!(),
            (args.iter().copied())
                .chain(["--sampler", "sequential"])
                .chain(layout.iter().copied()),
        );
        assert!(!out.status.success(), "{}", out.describe());
        assert!(
            out.stderr
                .contains("--sampler sequential cannot run on --device cuda:0"),
            "{layout:?}: {}",
            out.describe()
        );
        assert!(!out.stderr.contains("panicked"), "{}", out.describe());
    }
}

fn mlr_losses(compute: Compute) -> Vec<(f64, f64)> {
    let data = synthetic_classification(2_000, 64, 5, 3).unwrap();
    let (train, test) = data.split_tail_fraction(0.2).unwrap();
    let config = MlrConfig {
        epochs: 4,
        lr: 0.2,
        batch: 100,
        staleness: 0,
        block_features: Some(16),
        weight_per_row: false,
    };
    let app = MlrApp::new(config, Arc::new(train), Arc::new(test), Arc::new(Quiet))
        .and_then(|app| app.with_compute(compute))
        .unwrap();
    let outcome = runtime(Threads::Multi(2))
        .block_on(harp::run_job(Arc::new(app), &job()))
        .unwrap();
    outcome
        .driver
        .history()
        .iter()
        .map(|m| (m.loss, m.test_loss))
        .collect()
}

#[test]
fn mlr_on_the_gpu_trains_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("mlr_on_the_gpu_trains_like_the_cpu") else {
        return;
    };
    let cpu = mlr_losses(Compute::Cpu);
    let on_gpu = mlr_losses(gpu);
    assert!(cpu[3].0 < cpu[0].0, "the CPU run must learn: {cpu:?}");
    for (epoch, (c, g)) in cpu.iter().zip(&on_gpu).enumerate() {
        // Bulk-synchronous, so both see the same weights each step; only the gradient's
        // f32 summation order differs.
        assert!(
            (c.0 - g.0).abs() < 1e-3 * c.0.abs().max(1.0),
            "epoch {epoch}: {c:?} vs {g:?}"
        );
        assert!(
            (c.1 - g.1).abs() < 1e-3 * c.1.abs().max(1.0),
            "epoch {epoch}: {c:?} vs {g:?}"
        );
    }
}

/// Ratings of a rank-3 model plus noise: 120 users × 60 items, about half observed.
fn ratings_csv() -> String {
    let mut state = 5u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as f64) / (1u64 << 31) as f64
    };
    let users: Vec<[f64; 3]> = (0..120).map(|_| [next(), next(), next()]).collect();
    let items: Vec<[f64; 3]> = (0..60).map(|_| [next(), next(), next()]).collect();
    let mut csv = String::from("userId,movieId,rating\n");
    for (u, p) in users.iter().enumerate() {
        for (i, q) in items.iter().enumerate() {
            if next() < 0.5 {
                let dot: f64 = p.iter().zip(q).map(|(a, b)| a * b).sum();
                let rating = (1.0 + 1.5 * dot + 0.1 * next()).clamp(0.5, 5.0);
                csv.push_str(&format!("{},{},{rating:.3}\n", u + 1, i + 1));
            }
        }
    }
    csv
}

fn mf_test_rmse(solver: MfSolver, lambda: f32, compute: Compute) -> f64 {
    let data = parse_ratings_reader(
        ratings_csv().as_bytes(),
        Path::new("r.csv"),
        RatingRange::default(),
    )
    .unwrap();
    let config = MfConfig {
        rank: 8,
        lambda,
        solver,
        iterations: 8,
        ..MfConfig::default()
    };
    let (train, test) = data.split(0.2, config.seed).unwrap();
    let app = MfApp::new(config, Arc::new(train), Arc::new(test), Arc::new(Quiet))
        .and_then(|app| app.with_compute(compute))
        .unwrap();
    let outcome = runtime(Threads::Multi(2))
        .block_on(harp::run_job(Arc::new(app), &job()))
        .unwrap();
    let last = outcome.driver.history().last().unwrap();
    last.test_rmse.expect("ratings are held out")
}

#[test]
fn mf_on_the_gpu_trains_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("mf_on_the_gpu_trains_like_the_cpu") else {
        return;
    };
    let cpu = mf_test_rmse(MfSolver::Als, 0.1, Compute::Cpu);
    let on_gpu = mf_test_rmse(MfSolver::Als, 0.1, gpu.clone());
    assert!(
        (cpu - on_gpu).abs() < 1e-3,
        "ALS: cpu {cpu} vs gpu {on_gpu}"
    );
    let sgd = MfSolver::Sgd { lr: 0.02 };
    let cpu = mf_test_rmse(sgd, 0.05, Compute::Cpu);
    let on_gpu = mf_test_rmse(sgd, 0.05, gpu);
    assert!(on_gpu < cpu + 0.05, "SGD: cpu {cpu} vs gpu {on_gpu}");
}

fn lda_log_likelihoods(compute: Compute) -> Option<Vec<f64>> {
    let dir = shared_data("newsgroups-subset")?;
    let corpus = harp_apps::data::load_docword_dir(&dir).unwrap();
    let config = LdaConfig {
        iterations: 5,
        sampler: LdaSampler::Parallel,
        ..LdaConfig::default()
    };
    let app = LdaApp::new(config, Arc::new(corpus), Arc::new(Quiet))
        .and_then(|app| app.with_compute(compute))
        .unwrap();
    let outcome = runtime(Threads::Multi(2))
        .block_on(harp::run_job(Arc::new(app), &job()))
        .unwrap();
    Some(
        outcome
            .driver
            .history()
            .iter()
            .map(|m| m.log_likelihood)
            .collect(),
    )
}

#[test]
fn lda_on_the_gpu_draws_the_cpu_parallel_samplers_topics() {
    let Some(gpu) = gpu_or_skip("lda_on_the_gpu_draws_the_cpu_parallel_samplers_topics") else {
        return;
    };
    let Some(cpu) = lda_log_likelihoods(Compute::Cpu) else {
        return;
    };
    // The CUDA sampling kernel does the CPU's f32 arithmetic in the same order, and the
    // uniforms are the same counter-based draws: the same topics, so the same run.
    let on_gpu = lda_log_likelihoods(gpu).unwrap();
    assert_eq!(cpu, on_gpu);
}

#[test]
fn the_gpu_refuses_the_sequential_lda_sampler() {
    let Some(gpu) = gpu_or_skip("the_gpu_refuses_the_sequential_lda_sampler") else {
        return;
    };
    let Some(dir) = shared_data("newsgroups-subset") else {
        return;
    };
    let corpus = harp_apps::data::load_docword_dir(&dir).unwrap();
    let error = LdaApp::new(LdaConfig::default(), Arc::new(corpus), Arc::new(Quiet))
        .and_then(|app| app.with_compute(gpu))
        .err()
        .expect("the sequential sampler on the GPU must be refused")
        .to_string();
    assert!(error.contains("--sampler parallel"), "{error}");
}

fn cnn_figures(compute: Compute) -> Option<Vec<(f64, f64)>> {
    let dir = shared_data("mnist10k")?;
    let data = harp_apps::data::load_path(&dir).unwrap();
    let mut data = data;
    for v in &mut data.features {
        *v /= 255.0;
    }
    let (train, test) = data.split_tail(2_000).unwrap();
    let config = harp_apps::cnn::CnnConfig {
        epochs: 1,
        max_batches: Some(30),
        ..harp_apps::cnn::CnnConfig::default()
    };
    let app = harp_apps::cnn::CnnApp::new(config, Arc::new(train), Arc::new(test), Arc::new(Quiet))
        .and_then(|app| app.with_compute(compute))
        .unwrap();
    let outcome = runtime(Threads::Multi(2))
        .block_on(harp::run_job(Arc::new(app), &job()))
        .unwrap();
    Some(
        outcome
            .driver
            .history()
            .iter()
            .map(|m| (m.loss, m.accuracy))
            .collect(),
    )
}

#[test]
fn cnn_on_the_gpu_trains_like_the_cpu() {
    let Some(gpu) = gpu_or_skip("cnn_on_the_gpu_trains_like_the_cpu") else {
        return;
    };
    let Some(cpu) = cnn_figures(Compute::Cpu) else {
        return;
    };
    let on_gpu = cnn_figures(gpu).unwrap();
    assert_eq!(cpu.len(), on_gpu.len());
    // The GPU's convolution weight gradients add with atomics (their last bits vary), so
    // the runs agree to rounding, not bit for bit.
    for ((c_loss, c_acc), (g_loss, g_acc)) in cpu.iter().zip(&on_gpu) {
        assert!(
            (c_loss - g_loss).abs() < 1e-2 * c_loss.abs().max(1.0),
            "{cpu:?} vs {on_gpu:?}"
        );
        assert!((c_acc - g_acc).abs() < 0.01, "{cpu:?} vs {on_gpu:?}");
    }
}
