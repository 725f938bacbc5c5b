//! `lda`: harp's LDA (1 worker, 1 server, 1 executor, a 1-thread runtime) against the
//! Python `lda` package (collapsed Gibbs sampling in Cython, `target/bench-venv`, made by
//! `scripts/python-bench-venv.sh`), with the same topics, α, β and iterations, in the same
//! run on the same machine, on (a) the newsgroups subset and (b) a synthetic corpus drawn
//! from LDA's generative process (written as docword files under
//! `target/lda-bench/synthetic`, seeded).
//!
//! Throughput is tokens × iterations / seconds. Python's seconds are its `fit` call (its
//! random initialization included); harp's are the whole job (start-up and the initial
//! assignment included), and the median iteration's figure is reported beside it. The log
//! likelihood per token is `log p(w, z) / tokens` of the final state for both, computed by
//! the same function (`harp_kernels::lda::log_likelihood`): the Python script writes its
//! final `ndz` and `nzw` counts and they are read back here; the package's own
//! `loglikelihood()` is printed beside as a cross-check of the formula.

use crate::{emit, round_to};
use anyhow::{bail, Context, Result};
use harp_apps::data::{load_docword, load_docword_dir, Corpus, DocwordPaths};
use harp_apps::lda::{LdaApp, LdaConfig};
use harp_apps::mlr::Quiet;
use harp_kernels::lda::{log_likelihood, FastRng, LdaParams};
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// Tokens per synthetic document.
const DOC_TOKENS: usize = 500;
/// The generating priors of the synthetic corpus.
const GEN_ALPHA: f64 = 0.1;
const GEN_BETA: f64 = 0.05;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn run(args: &crate::Args) -> Result<()> {
    let root = repo_root();
    let python = root.join("target/bench-venv/bin/python");
    if !python.exists() {
        bail!(
            "{} not found: run scripts/python-bench-venv.sh first",
            python.display()
        );
    }
    let work = root.join("target/lda-bench");
    std::fs::create_dir_all(&work)?;
    let newsgroups = root.join("../shared/data/newsgroups-subset");
    let synthetic = work.join("synthetic");
    write_synthetic(
        &synthetic,
        args.lda_synthetic_tokens,
        args.lda_synthetic_words,
        args.lda_topics,
        7,
    )?;
    for (name, dir) in [("newsgroups-subset", newsgroups), ("synthetic", synthetic)] {
        let corpus = load_docword_dir(&dir).with_context(|| format!("{}", dir.display()))?;
        compare(name, &dir, &corpus, &python, &work, args)?;
    }
    Ok(())
}

fn compare(
    name: &str,
    dir: &Path,
    corpus: &Corpus,
    python: &Path,
    work: &Path,
    args: &crate::Args,
) -> Result<()> {
    let params = LdaParams {
        topics: args.lda_topics,
        vocab: corpus.num_words(),
        alpha: 0.1,
        beta: 0.01,
    };
    let iterations = args.lda_iterations;
    let tokens = corpus.num_tokens();
    let work_total = tokens as f64 * f64::from(iterations);

    // harp.
    let config = LdaConfig {
        topics: params.topics,
        alpha: params.alpha,
        beta: params.beta,
        iterations,
        seed: 1,
        ..LdaConfig::default()
    };
    let app = Arc::new(
        LdaApp::new(config, Arc::new(corpus.clone()), Arc::new(Quiet))
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let job = harp::JobConfig {
        workers: 1,
        servers: 1,
        executors_per_worker: 1,
        shards_per_server: 4,
        collect_params: false,
        scar: None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let started = std::time::Instant::now();
    let outcome = runtime.block_on(harp::run_job(app, &job))?;
    let harp_s = started.elapsed().as_secs_f64();
    let history = outcome.driver.history();
    let harp_ll = history.last().map(|m| m.log_likelihood).unwrap_or(f64::NAN);
    let mut per_iteration: Vec<f64> = history.iter().map(|m| m.tokens_per_s).collect();
    per_iteration.sort_by(f64::total_cmp);
    let harp_median = per_iteration
        .get(per_iteration.len() / 2)
        .copied()
        .unwrap_or(0.0);

    // Python `lda`.
    let docword = DocwordPaths::in_dir(dir)?.docword;
    let counts_path = work.join(format!("{name}.python-counts.bin"));
    let output = Command::new(python)
        .arg(repo_root().join("benches/python/lda_bench.py"))
        .arg("--docword")
        .arg(&docword)
        .args(["--topics", &params.topics.to_string()])
        .args(["--alpha", &params.alpha.to_string()])
        .args(["--beta", &params.beta.to_string()])
        .args(["--iterations", &iterations.to_string()])
        .args(["--seed", "1"])
        .arg("--counts")
        .arg(&counts_path)
        .output()
        .context("cannot start the Python benchmark")?;
    if !output.status.success() {
        bail!(
            "the Python benchmark failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let report: serde_json::Value = serde_json::from_slice(
        output
            .stdout
            .split(|&b| b == b'\n')
            .rfind(|l| !l.is_empty())
            .unwrap_or_default(),
    )
    .context("the Python benchmark's report")?;
    let python_s = report["fit_s"].as_f64().unwrap_or(f64::NAN);
    if report["tokens"].as_u64() != Some(tokens) {
        bail!(
            "the Python side read {} tokens, harp {tokens}",
            report["tokens"]
        );
    }
    let python_ll = python_log_likelihood(&counts_path, corpus, &params)? / tokens as f64;
    let package_ll = report["package_log_likelihood"]
        .as_f64()
        .unwrap_or(f64::NAN)
        / tokens as f64;

    let harp_rate = work_total / harp_s;
    let python_rate = work_total / python_s;
    emit(json!({
        "bench": "lda", "dataset": name, "docs": corpus.num_docs(), "words": corpus.num_words(),
        "tokens": tokens, "topics": params.topics,
        "alpha": round_to(f64::from(params.alpha), 6), "beta": round_to(f64::from(params.beta), 6),
        "iterations": iterations,
        "harp_s": round_to(harp_s, 3), "python_s": round_to(python_s, 3),
        "harp_tokens_per_s": round_to(harp_rate, 0),
        "harp_median_iteration_tokens_per_s": round_to(harp_median, 0),
        "python_tokens_per_s": round_to(python_rate, 0),
        "ratio": round_to(harp_rate / python_rate, 3), "target_min": 2.0,
        "harp_log_likelihood": round_to(harp_ll, 5),
        "python_log_likelihood": round_to(python_ll, 5),
        "python_package_log_likelihood": round_to(package_ll, 5),
        "lda_version": report["lda_version"],
    }));
    Ok(())
}

/// `log p(w, z)` of the counts the Python script wrote (`ndz` D×K, then `nzw` K×W, int32).
fn python_log_likelihood(path: &Path, corpus: &Corpus, params: &LdaParams) -> Result<f64> {
    let bytes = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
    let (d, k, w) = (corpus.num_docs(), params.topics, corpus.num_words());
    if bytes.len() != 4 * (d * k + k * w) {
        bail!(
            "{}: {} bytes, expected {}",
            path.display(),
            bytes.len(),
            4 * (d * k + k * w)
        );
    }
    let values: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .map(|v| u32::try_from(v).context("a negative count"))
        .collect::<Result<_>>()?;
    let (doc_topic, topic_word) = values.split_at(d * k);
    let mut word_topic = vec![0u32; w * k];
    let mut totals = vec![0u32; k];
    for topic in 0..k {
        for word in 0..w {
            let n = topic_word[topic * w + word];
            word_topic[word * k + topic] = n;
            totals[topic] += n;
        }
    }
    Ok(log_likelihood(params, doc_topic, &word_topic, &totals)?)
}

/// A standard normal (Box–Muller).
fn normal(rng: &mut FastRng) -> f64 {
    let u = 1.0 - rng.next_f64();
    let v = rng.next_f64();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A Gamma(shape, 1) draw (Marsaglia–Tsang; shape < 1 boosted by `U^(1/shape)`).
fn gamma(rng: &mut FastRng, shape: f64) -> f64 {
    if shape < 1.0 {
        let u = 1.0 - rng.next_f64();
        return gamma(rng, shape + 1.0) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = 1.0 - rng.next_f64();
        if u.ln() < 0.5 * x * x + d * (1.0 - v + v.ln()) {
            return d * v;
        }
    }
}

/// Cumulative Dirichlet(`prior`) weights of `n` outcomes (last value = total).
fn dirichlet_cdf(rng: &mut FastRng, n: usize, prior: f64) -> Vec<f64> {
    let mut total = 0.0;
    (0..n)
        .map(|_| {
            total += gamma(rng, prior);
            total
        })
        .collect()
}

fn draw(rng: &mut FastRng, cdf: &[f64]) -> usize {
    let target = rng.next_f64() * cdf.last().copied().unwrap_or(0.0);
    cdf.partition_point(|&c| c <= target).min(cdf.len() - 1)
}

/// Writes a corpus of `tokens` tokens (documents of 500) over `words` words drawn from
/// LDA's generative process with `topics` topics (`θ_d ~ Dir(0.1)`, `φ_k ~ Dir(0.05)`)
/// as `docword.txt` and `vocab.txt` in `dir`, unless a corpus with that header is there.
fn write_synthetic(
    dir: &Path,
    tokens: usize,
    words: usize,
    topics: usize,
    seed: u64,
) -> Result<()> {
    let docs = tokens.div_ceil(DOC_TOKENS);
    let docword = dir.join("docword.txt");
    let vocab = dir.join("vocab.txt");
    if let Ok(corpus) = load_docword(&DocwordPaths {
        docword: docword.clone(),
        vocab: vocab.clone(),
    }) {
        if corpus.num_docs() == docs
            && corpus.num_words() == words
            && corpus.num_tokens() == (docs * DOC_TOKENS) as u64
        {
            return Ok(());
        }
    }
    std::fs::create_dir_all(dir)?;
    let mut rng = FastRng::new(seed);
    let phi: Vec<Vec<f64>> = (0..topics)
        .map(|_| dirichlet_cdf(&mut rng, words, GEN_BETA))
        .collect();
    let mut lines = Vec::new();
    for d in 0..docs {
        let theta = dirichlet_cdf(&mut rng, topics, GEN_ALPHA);
        let mut doc = vec![0u32; 0];
        for _ in 0..DOC_TOKENS {
            let z = draw(&mut rng, &theta);
            doc.push(draw(&mut rng, &phi[z]) as u32);
        }
        doc.sort_unstable();
        let mut i = 0;
        while i < doc.len() {
            let j = doc[i..].partition_point(|&w| w == doc[i]) + i;
            lines.push(format!("{} {} {}", d + 1, doc[i] + 1, j - i));
            i = j;
        }
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(&docword)?);
    writeln!(out, "{docs}\n{words}\n{}", lines.len())?;
    for line in &lines {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    let mut out = std::io::BufWriter::new(std::fs::File::create(&vocab)?);
    for w in 0..words {
        writeln!(out, "word{w}")?;
    }
    out.flush()?;
    Ok(())
}
