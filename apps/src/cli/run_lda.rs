//! `harp run lda`: loads a UCI bag-of-words corpus, samples topics by collapsed Gibbs
//! (vocabulary blocks rotating across executors), prints one line per iteration and each
//! topic's top words at the end, writes metrics.

use super::output::RunOutput;
use super::ClusterArgs;
use crate::data::{load_docword, Corpus, DocwordPaths};
use crate::device::Device;
use crate::lda::{LdaApp, LdaConfig, LdaMetrics, LdaObserver, LdaSampler};
use crate::mlr::Quiet;
use anyhow::{anyhow, bail, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Debug, Clone)]
pub struct LdaCliArgs {
    /// A directory holding `docword.txt` (or `docword.txt.gz`, or one `docword.NAME.txt`)
    /// and `vocab.txt` (or `vocab.NAME.txt`), e.g. `../shared/data/newsgroups-subset`.
    #[arg(long, required_unless_present = "docword")]
    pub data: Option<PathBuf>,
    /// The docword file itself (UCI bag-of-words: D, W, NNZ, then `docID wordID count`
    /// lines; plain or gzip); needs --vocab.
    #[arg(long, requires = "vocab", conflicts_with = "data")]
    pub docword: Option<PathBuf>,
    /// The vocabulary file (one word per line, line i is word id i).
    #[arg(long, requires = "docword")]
    pub vocab: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Topics (K).
    #[arg(long, default_value_t = 20)]
    pub topics: usize,
    /// Symmetric document–topic prior α (0.1 is the Python `lda` package's default; 50/K
    /// is the other common choice).
    #[arg(long, default_value_t = 0.1)]
    pub alpha: f32,
    /// Symmetric topic–word prior β.
    #[arg(long, default_value_t = 0.01)]
    pub beta: f32,
    /// Gibbs sweeps over every token.
    #[arg(long, default_value_t = 50)]
    pub iterations: u32,
    /// Seed of the initial topics and the sampler (same seed and executors: same result).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Words printed per topic at the end.
    #[arg(long, default_value_t = 10)]
    pub top_words: usize,
    /// How a sub-round samples its block: `sequential` (collapsed Gibbs, token after token;
    /// the default on the CPU) or `parallel` (every token from the sub-round's starting
    /// counts, then all moves applied; the default and the only choice on the GPU).
    #[arg(long, value_enum)]
    pub sampler: Option<SamplerArg>,
    /// Where the executors sample: `cpu`, `cuda` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: Device,
    /// After the last iteration, check that the word–topic and topic-total tables hold
    /// exactly the executors' topic assignments (the executors report their counts, the
    /// parameters are collected); the run fails if they do not. A check of a run that lost
    /// a server or a worker node (what the resyncs restore).
    #[arg(long)]
    pub check_counts: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SamplerArg {
    Sequential,
    Parallel,
}

fn load(args: &LdaCliArgs) -> Result<Corpus> {
    let paths = match (&args.data, &args.docword, &args.vocab) {
        (Some(dir), None, None) => DocwordPaths::in_dir(dir)?,
        (None, Some(docword), Some(vocab)) => DocwordPaths {
            docword: docword.clone(),
            vocab: vocab.clone(),
        },
        _ => bail!("give --data DIR, or --docword FILE with --vocab FILE"),
    };
    Ok(load_docword(&paths)?)
}

fn lda_config(args: &LdaCliArgs) -> LdaConfig {
    LdaConfig {
        topics: args.topics,
        alpha: args.alpha,
        beta: args.beta,
        iterations: args.iterations,
        seed: args.seed,
        top_words: args.top_words,
        report_counts: args.check_counts,
        // With SCAR's running checkpoint a lost server comes back with older counts:
        // resync the tables from the topic assignments instead of failing.
        // A lost server's shards come back from the checkpoint, a dead worker's executors
        // afresh: either way the tables stop matching the assignments until a resync.
        recover: args.cluster.scar_fraction.is_some() || args.cluster.recover_workers,
        sampler: match (args.sampler, args.device) {
            (Some(SamplerArg::Sequential), _) => LdaSampler::Sequential,
            (Some(SamplerArg::Parallel), _) | (None, Device::Cuda { .. }) => LdaSampler::Parallel,
            (None, Device::Cpu) => LdaSampler::Sequential,
        },
    }
}

/// The LDA app a node process runs: same corpus and hyperparameters, no output.
pub fn build_app(args: &LdaCliArgs) -> Result<Arc<LdaApp>> {
    let corpus = load(args)?;
    let app = LdaApp::new(lda_config(args), Arc::new(corpus), Arc::new(Quiet))
        .and_then(|app| app.with_compute(args.device.open()?))
        .map_err(|e| anyhow!("{e}"))?;
    Ok(Arc::new(app))
}

/// Iterations on the terminal and in the metrics file.
impl LdaObserver for RunOutput {
    fn iteration_completed(&self, m: &LdaMetrics) {
        self.line(format!(
            "iteration {:>3}  log likelihood per token {:.4}  {:.2}M tokens/s  {:.2}s",
            m.iteration,
            m.log_likelihood,
            m.tokens_per_s / 1e6,
            m.elapsed_s
        ));
        self.record(m);
    }
}

pub fn run(args: LdaCliArgs) -> Result<()> {
    if args.sampler == Some(SamplerArg::Sequential) && args.device != Device::Cpu {
        bail!(
            "lda: the GPU samples a block's tokens in parallel: --sampler sequential cannot \
             run on --device {}",
            args.device
        );
    }
    let compute = args.cluster.master_compute(args.device)?;
    let corpus = load(&args)?;
    let config = lda_config(&args);
    eprintln!(
        "lda on {}: {} documents, {} words, {} tokens, {} topics, alpha {}, beta {}, {} sampler on {}",
        corpus.source,
        corpus.num_docs(),
        corpus.num_words(),
        corpus.num_tokens(),
        args.topics,
        args.alpha,
        args.beta,
        match config.sampler {
            LdaSampler::Sequential => "sequential",
            LdaSampler::Parallel => "parallel",
        },
        args.device
    );
    let output = RunOutput::lines(&args.cluster)?;
    let app = Arc::new(
        LdaApp::new(config, Arc::new(corpus), output.clone())
            .and_then(|app| app.with_compute(compute))
            .map_err(|e| anyhow!("{e}"))?,
    );
    let (outcome, checkpoints) =
        super::execute_app(app.clone(), &args.cluster, args.check_counts, &output)?;
    if let Some(m) = outcome.driver.history().last() {
        eprintln!(
            "done: {} iterations in {:.2}s, log likelihood per token {:.4}",
            m.iteration, outcome.stats.elapsed_s, m.log_likelihood
        );
    }
    for (topic, words) in outcome.driver.top_words().iter().enumerate() {
        let words: Vec<&str> = words.iter().map(|w| w.word.as_str()).collect();
        println!("topic {topic:>3}: {}", words.join(" "));
    }
    super::report_end(
        &outcome.stats,
        &args.cluster.inject,
        checkpoints.as_ref(),
        output.metrics(),
        super::traffic_report::CountersRecord::Write,
    )?;
    if args.check_counts {
        check_counts(&app, &outcome, output.metrics())?;
    }
    Ok(())
}

/// `--check-counts`: the tables against the executors' assignments, printed, written to
/// the metrics file (`{"event":"counts_check","exact":..,"tokens":..,"error":..}`), and an
/// error if they differ.
fn check_counts(
    app: &LdaApp,
    outcome: &harp::JobOutcome<LdaApp>,
    metrics: Option<&crate::metrics::MetricsWriter>,
) -> Result<()> {
    let params = outcome
        .params
        .as_ref()
        .ok_or_else(|| anyhow!("the job returned no parameters to check"))?;
    let checked = app.check_tables(params, &outcome.driver);
    if let Some(writer) = metrics {
        writer.write(&serde_json::json!({
            "event": "counts_check",
            "exact": checked.is_ok(),
            "tokens": checked.as_ref().ok(),
            "error": checked.as_ref().err(),
        }))?;
    }
    match checked {
        Ok(tokens) => {
            eprintln!(
                "lda: the tables hold exactly the executors' topic assignments ({tokens} tokens)"
            );
            Ok(())
        }
        Err(diff) => bail!("lda: the tables differ from the executors' topic assignments\n{diff}"),
    }
}
