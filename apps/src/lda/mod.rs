//! Latent Dirichlet allocation by collapsed Gibbs sampling, model-parallel in the
//! Strads/Litz style (Litz §4.5) on harp.
//!
//! **Data.** Executor `e` of `E` owns a contiguous range of documents (balanced by token
//! count, [`layout::doc_ranges`]): their tokens, each token's topic and the
//! document–topic counts (`docs × K`, `u32`) live in the executor, which is stateful
//! ([`LdaExecutor`] saves its topics when it moves). Initial topics are drawn from
//! `--seed` per document, so they do not depend on `E`.
//!
//! **Tables.** `lda.word_topic`: the `V × K` word–topic counts, `i64`, one row per *group*
//! of `G` consecutive words (`G·K` values, word-major; [`layout::WordRows`] picks `G` from
//! `V` and `K` only, so rows stay a few KiB and a sub-round reads a few hundred rows at
//! most). `lda.topic_totals`: the `K` topic totals, `i64`, kept twice (rows 0 and 1, see
//! below). Both take additive updates: executors push count deltas.
//!
//! **Vocabulary blocks.** The word groups are cut into `B = E` contiguous blocks balanced
//! by token count ([`layout::word_blocks`]). One iteration is `B` sub-rounds with a
//! barrier between them; in sub-round `s` executor `e` samples its tokens whose word is in
//! block `(e + s) mod B`, so every block is sampled by exactly one executor at a time and
//! each executor visits every block once per iteration. It reads that block's rows at the
//! start of the sub-round: the task was dispatched after the completion of the block's
//! previous owner, whose deltas were applied before that completion, so the version rule
//! makes the read fetch them (DESIGN §2.1) and nobody else writes the block meanwhile. The
//! word–topic counts are therefore exact. Each sub-round also checks it: an executor
//! reports a checksum of its block after sampling, and the driver hands it to the block's
//! next owner, which refuses rows that do not match: its micro-task fails with an error naming
//! the executor, the block and the sub-round, which ends the job (unless
//! [`LdaConfig::recover`] is on).
//!
//! **Topic totals.** An executor samples against the totals as they were at the start of
//! the sub-round plus its own changes: other executors' changes in the same sub-round are
//! not seen until the next one (stale within a sub-round, as in Strads/Litz; the word
//! counts, which dominate the conditional, are exact). To make that start value the same
//! however tasks interleave (in one process and across processes), the totals are double
//! buffered: sub-round `t` (counted over the whole run from 1; the initial assignment is
//! step 0 and writes both rows) reads row `t mod 2`, which nobody writes during it, and
//! pushes its delta of this and of the previous sub-round to row `(t + 1) mod 2`, which
//! then holds the totals after sub-round `t`. So the same seed and the same executor count
//! give identical results, whatever the worker count, thread count or process split.
//!
//! **Likelihood.** In the last sub-round of an iteration each executor reports
//! `log_likelihood_docs` of its documents, and `log_likelihood_words` and the per-topic
//! column sums of the block it just sampled (final for the iteration); the driver adds
//! them, computes `log_likelihood_topics` from the summed column sums (checked against the
//! token count), and reports `log p(w, z)` per token ([`LdaMetrics`]). After the last
//! iteration the same executors report the `top_words` most frequent words of each topic
//! in their block, which the driver merges.
//!
//! **Checks.** Besides each block's checksum, the driver tracks the topic totals (the
//! executors report their change every sub-round) and hands each sub-round the checksum
//! ([`totals_checksum`]) of the totals row it reads; and after each iteration it checks
//! that the table holds as many tokens as the corpus. Without [`LdaConfig::recover`] any
//! difference fails the job: in a job that loses nothing it can only be an exclusivity bug.
//!
//! **Recovery from a lost server** ([`LdaConfig::recover`], on in `harp run lda` with
//! `--scar-fraction`). A server's shards restored from SCAR's running checkpoint hold
//! counts up to a round old, which no longer match the executors' topic assignments (the
//! executors' state survives). An executor that reads a block or a totals row that differs
//! from what was expected (or holds a negative count) samples anyway, with the counts as
//! read clamped at 0 and raised to at least its own tokens' counts (so every token can be
//! taken out), and reports the sub-round stale. The driver then tells the block's later
//! owners that it is stale ([`BlockExpectation::Stale`]) until the resync: the first
//! owner raised the counts for its own tokens only, so a checksum that matches what it
//! left proves nothing for the next owner's tokens. At the end of such an iteration (or when
//! the token count is off) the driver logs a warning, counts a resync
//! ([`LdaMetrics::resyncs`], in the metrics line) and runs three phases of one task per
//! executor before it reports the iteration: (1) executor `e` reads block `e`'s rows and
//! pushes their negation, executor 0 does so for both totals rows (each row has one
//! writer, and the phase runs after every update of the iteration was applied); (2) every
//! executor pushes the counts of its own tokens to the word rows and both totals rows (as
//! in step 0; additive, so the order does not matter) and forgets its previous totals
//! delta; (3) executor `e` reads block `e` and reports its checksum, likelihood parts and
//! column sums, from which the driver reports the iteration and takes the totals and the
//! checksums it expects next. The tables then equal the assignments exactly. The
//! iteration's samples drawn from stale counts stay (a small perturbation of the chain, as
//! SCAR intends); three resyncs in a row that do not make the tables consistent fail the
//! job.
//!
//! **Recovery from a dead worker node** (`--recover-workers`, which turns
//! [`LdaConfig::recover`] on too). The runtime makes the node's executors again on the
//! live workers and runs their uncommitted sub-rounds again; their state died with the
//! node, so they hold their documents' *initial* topics, or, when the job writes consistent
//! checkpoints, the topics they saved in the newest one (`App::recover_executor`): either
//! way topics the tables, which moved on, do not count. An
//! executor knows whether the tables count its topics (it pushed them at step 0 or in a
//! resync, or was restored from its saved state after a move or a resume): one that does not
//! reports every sub-round stale, samples as above, and tolerates counts it cannot check,
//! until the resync's second phase pushes its topics. So the same resync brings the tables
//! back to the assignments; the dead executor's documents start their chain again from
//! their initial topics, or from the checkpoint's.

mod blocks;
mod check;
mod driver;
mod executor;
#[cfg(feature = "cuda")]
mod gpu;
pub mod layout;
mod parallel;

pub use driver::{LdaDriver, LdaMetrics, LdaObserver, TopWord};
pub use executor::{totals_checksum, LdaExecutor};

use crate::data::Corpus;
use crate::device::Compute;
use harp::Norm;
use harp::{App, AppError, ExecutorId, JobInfo, Table, TableSet};
use harp_kernels::lda::LdaParams;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Hyperparameters and run length.
#[derive(Clone, Debug, PartialEq)]
pub struct LdaConfig {
    /// K.
    pub topics: usize,
    /// Symmetric document–topic prior α (default 0.1, the Python `lda` package's default;
    /// 50/K is the other common choice).
    pub alpha: f32,
    /// Symmetric topic–word prior β.
    pub beta: f32,
    pub iterations: u32,
    /// Seed of the initial topics and of the sampler's draws.
    pub seed: u64,
    /// Words listed per topic at the end.
    pub top_words: usize,
    /// After the last iteration, every executor also reports the word–topic counts of its
    /// own tokens ([`LdaDriver::token_counts`]): the tests' check that the tables equal the
    /// assignments.
    pub report_counts: bool,
    /// Recover from lost parameter rows (a server restored from SCAR's running checkpoint):
    /// counts that no longer match the executors' topic assignments are sampled as read
    /// (clamped) and the tables are resynchronised from the assignments before the next
    /// iteration (see the module doc). Off, such a mismatch fails the job (the exclusivity
    /// check). Needed too where worker nodes are recovered: a dead node's executors are
    /// created afresh with their initial topics, which the tables do not count. `harp run
    /// lda` turns it on with `--scar-fraction` or `--recover-workers`.
    pub recover: bool,
    /// How a sub-round samples its block ([`LdaSampler`]); the GPU needs `Parallel`.
    pub sampler: LdaSampler,
}

/// How an executor samples its tokens of a block in a sub-round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LdaSampler {
    /// Collapsed Gibbs, one token after the other, each seeing the previous moves
    /// (`harp_kernels::lda::gibbs_sweep`).
    #[default]
    Sequential,
    /// Every token drawn from the counts at the start of the sub-round, then all moves
    /// applied (`lda/parallel.rs`); the same bits on the CPU and on the GPU.
    Parallel,
}

impl Default for LdaConfig {
    fn default() -> Self {
        Self {
            topics: 20,
            alpha: 0.1,
            beta: 0.01,
            iterations: 50,
            seed: 1,
            top_words: 10,
            report_counts: false,
            recover: false,
            sampler: LdaSampler::Sequential,
        }
    }
}

/// One LDA micro-task.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum LdaArgs {
    /// Push the counts of the initial assignment (step 0).
    Init,
    /// Sample the executor's tokens of block `(e + sub_round) mod B`.
    Sample {
        iteration: u32,
        sub_round: u32,
        /// Sub-rounds since the start of the run, from 1 (picks the totals rows).
        step: u64,
        /// What the driver knows of the block as its previous owner left it.
        expected: BlockExpectation,
        /// The checksum ([`totals_checksum`]) of the topic totals the driver expects in the
        /// row this sub-round reads (`None` when it does not know them).
        expected_totals: Option<u64>,
        /// The last sub-round of the iteration: report the likelihood parts.
        report: bool,
        /// The last sub-round of the run: report the block's top words.
        top_words: bool,
    },
    /// Report the word–topic counts of the executor's tokens.
    Counts,
    /// Resync, first phase: zero block `e` (push the negation of its rows as read);
    /// executor 0 also zeroes both topic-totals rows.
    ResyncZero,
    /// Resync, second phase: push the counts of the executor's own tokens to every row and
    /// its topic totals to both totals rows.
    ResyncAdd,
    /// Resync, third phase: read block `e` and report its checksum and likelihood parts
    /// (and its top words after the last iteration).
    ResyncCheck { top_words: bool },
}

/// What the driver tells a block's next owner about the block ([`LdaArgs::Sample`]).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum BlockExpectation {
    /// Nobody has sampled the block yet in this run: nothing to check.
    Unknown,
    /// The checksum of the block as its previous owner left it: the rows must match.
    Checksum(u64),
    /// An earlier owner found the block stale since the last resync (only with
    /// [`LdaConfig::recover`]). A matching checksum then proves nothing: that owner raised
    /// the counts to its own tokens only, so the next owner must raise them to its own
    /// too, whatever it reads.
    Stale,
}

/// The likelihood parts one executor reports in an iteration's last sub-round.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LikelihoodPart {
    pub docs: f64,
    pub words: f64,
    /// Column sums of the sampled block's rows (K values).
    pub topic_sums: Vec<i64>,
}

/// What a micro-task reports.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum LdaOutput {
    Initialized {
        tokens: u64,
        /// The executor's topic totals (K values).
        totals: Vec<i64>,
    },
    Sampled {
        block: u32,
        checksum: u64,
        tokens: u64,
        likelihood: Option<LikelihoodPart>,
        /// `(topic, word, count)` of the block's `top_words` most frequent words per topic.
        top: Vec<(u32, u32, u32)>,
        /// The executor's change to the topic totals in this sub-round (K values).
        totals_delta: Vec<i64>,
        /// The block or the topic totals as read differed from what the driver expected
        /// (only with [`LdaConfig::recover`]; otherwise that is an error).
        stale: bool,
    },
    /// A resync phase that reports nothing.
    Resynced,
    /// What [`LdaArgs::ResyncCheck`] reports.
    Checked {
        block: u32,
        checksum: u64,
        /// A count was negative (clamped): the tables were disturbed again meanwhile.
        stale: bool,
        likelihood: LikelihoodPart,
        top: Vec<(u32, u32, u32)>,
    },
    /// `(word, topic, count)` of the executor's tokens, nonzero counts only.
    Counts(Vec<(u32, u32, u32)>),
}

/// The LDA app over one corpus.
pub struct LdaApp {
    config: LdaConfig,
    params: LdaParams,
    corpus: Arc<Corpus>,
    rows: layout::WordRows,
    tables: TableSet,
    word_topic: Table<i64>,
    topic_totals: Table<i64>,
    observer: Arc<dyn LdaObserver>,
    compute: Compute,
}

impl LdaApp {
    pub fn new(
        config: LdaConfig,
        corpus: Arc<Corpus>,
        observer: Arc<dyn LdaObserver>,
    ) -> Result<Self, AppError> {
        if config.topics == 0 || config.topics > 65_536 {
            return Err(format!(
                "lda: the number of topics must be in 1..=65536, got {}",
                config.topics
            )
            .into());
        }
        if config.iterations == 0 {
            return Err("lda: iterations must be at least 1".into());
        }
        if corpus.num_tokens() == 0 {
            return Err(format!("lda: no tokens in {}", corpus.source).into());
        }
        if corpus.num_tokens() > u64::from(u32::MAX) {
            return Err(format!("lda: {} has more than 2^32 - 1 tokens", corpus.source).into());
        }
        let params = LdaParams {
            topics: config.topics,
            vocab: corpus.num_words(),
            alpha: config.alpha,
            beta: config.beta,
        };
        params
            .validate()
            .map_err(|e| -> AppError { format!("lda: {e}").into() })?;
        let rows = layout::WordRows::new(corpus.num_words(), config.topics);
        let mut tables = TableSet::new();
        let word_topic = tables.counters_i64("lda.word_topic", rows.width())?;
        let topic_totals = tables.counters_i64("lda.topic_totals", config.topics)?;
        // SCAR §5.5.1: counts move by total variation, not by Euclidean distance.
        tables.set_norm(word_topic.id(), Norm::ScaledTotalVariation)?;
        tables.set_norm(topic_totals.id(), Norm::ScaledTotalVariation)?;
        Ok(Self {
            config,
            params,
            corpus,
            rows,
            tables,
            word_topic,
            topic_totals,
            observer,
            compute: Compute::Cpu,
        })
    }

    /// Samples on `compute` (`--device`); the CPU by default. The GPU needs the parallel
    /// sampler ([`LdaSampler::Parallel`]).
    pub fn with_compute(mut self, compute: Compute) -> Result<Self, AppError> {
        if compute.is_gpu() && self.config.sampler != LdaSampler::Parallel {
            return Err(
                "lda: the GPU samples a block's tokens in parallel: use the parallel sampler \
                 (`--sampler parallel`, the default with `--device cuda`)"
                    .into(),
            );
        }
        #[cfg(feature = "cuda")]
        compute.prepare(&gpu::KERNELS)?;
        self.compute = compute;
        Ok(self)
    }

    pub fn word_topic(&self) -> &Table<i64> {
        &self.word_topic
    }

    pub fn topic_totals(&self) -> &Table<i64> {
        &self.topic_totals
    }

    /// How words map to rows of [`word_topic`](Self::word_topic).
    pub fn word_rows(&self) -> layout::WordRows {
        self.rows
    }

    pub fn corpus(&self) -> &Arc<Corpus> {
        &self.corpus
    }

    pub fn config(&self) -> &LdaConfig {
        &self.config
    }
}

impl App for LdaApp {
    type Args = LdaArgs;
    type Output = LdaOutput;
    type Driver = LdaDriver;
    type Executor = LdaExecutor;

    fn name(&self) -> &str {
        "lda"
    }

    fn settings(&self) -> Vec<String> {
        let c = &self.config;
        vec![
            format!("alpha {:?}", c.alpha),
            format!("beta {:?}", c.beta),
            format!("iterations {}", c.iterations),
            format!("seed {}", c.seed),
            format!("sampler {:?}", c.sampler),
            format!("recover {}", c.recover),
            format!("documents {}", self.corpus.num_docs()),
            format!("tokens {}", self.corpus.num_tokens()),
        ]
    }

    fn tables(&self) -> &TableSet {
        &self.tables
    }

    fn create_driver(&self, job: &JobInfo) -> Result<LdaDriver, AppError> {
        Ok(LdaDriver::new(
            &self.config,
            self.params,
            job.num_executors,
            self.corpus.clone(),
            self.observer.clone(),
        ))
    }

    fn create_executor(&self, id: ExecutorId, job: &JobInfo) -> Result<LdaExecutor, AppError> {
        LdaExecutor::new(
            id.0,
            job.num_executors.max(1),
            &self.config,
            self.params,
            &self.corpus,
            self.rows,
            self.word_topic.clone(),
            self.topic_totals.clone(),
            &self.compute,
        )
    }

    /// A dead worker node's executor: with its topics from a consistent checkpoint, which the
    /// tables (newer) do not count, so it reports its sub-rounds stale and the driver's
    /// resync counts them; its documents go on from the checkpoint's sampling rather than
    /// their initial topics. Without a saved state, afresh.
    fn recover_executor(
        &self,
        id: ExecutorId,
        job: &JobInfo,
        saved: Option<Vec<u8>>,
    ) -> Result<LdaExecutor, AppError> {
        let mut executor = self.create_executor(id, job)?;
        if let Some(state) = saved {
            harp::Executor::restore_state(&mut executor, &state)?;
            executor.forget_counted();
        }
        Ok(executor)
    }
}
