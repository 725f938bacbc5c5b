//! The LDA driver: the initial assignment, then per iteration `B` sub-rounds of one
//! micro-task per executor with a barrier between them (the rotation of vocabulary blocks),
//! the likelihood per iteration, the top words at the end; optionally the executors'
//! token counts (tests). With [`LdaConfig::recover`], the resync of the tables after an
//! iteration that read counts that differ from what the driver expected (see [`super`]).

use super::blocks::Blocks;
use super::{LdaArgs, LdaConfig, LdaOutput};
use crate::data::Corpus;
use harp::{AppError, Completion, Driver, DriverContext, ExecutorId};
use harp_kernels::lda::{log_likelihood_topics, LdaParams};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

/// Figures of one finished iteration.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LdaMetrics {
    /// 1-based.
    pub iteration: u32,
    /// `log p(w, z)` divided by the number of tokens.
    pub log_likelihood: f64,
    /// Tokens sampled per second of this iteration (its sub-rounds and barriers).
    pub tokens_per_s: f64,
    /// Seconds of this iteration.
    pub iteration_s: f64,
    /// Seconds since the driver started.
    pub elapsed_s: f64,
    /// Resyncs of the tables so far (counts that no longer matched the topic assignments,
    /// after a lost server; always 0 without [`LdaConfig::recover`]).
    #[serde(default)]
    pub resyncs: u32,
}

/// One of a topic's most frequent words.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TopWord {
    pub word: String,
    pub count: u32,
}

/// Receives progress from the driver.
pub trait LdaObserver: Send + Sync {
    fn iteration_completed(&self, _metrics: &LdaMetrics) {}
}

impl LdaObserver for crate::mlr::Quiet {}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
enum Phase {
    Init,
    /// Sub-round of the current iteration (0-based).
    Sample(u32),
    /// The resync's phases (after the sub-rounds of the current iteration).
    ResyncZero,
    ResyncAdd,
    ResyncCheck,
    Counts,
    Done,
}

/// Resyncs in a row (with no clean iteration between them) before the driver gives up.
const MAX_RESYNCS_IN_A_ROW: u32 = 3;

/// What the sub-rounds of one iteration add up.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Tally {
    /// `(docs, words)` likelihood parts by executor, added in executor order so that the
    /// sum does not depend on the order completions arrive in.
    parts: BTreeMap<u32, (f64, f64)>,
    topic_sums: Vec<i64>,
    tokens: u64,
}

#[derive(Serialize, Deserialize)]
struct Saved {
    iteration: u32,
    phase: Phase,
    pending: u32,
    step: u64,
    checksums: Vec<Option<u64>>,
    /// Blocks found stale since the last resync (empty in drivers saved before).
    #[serde(default)]
    stale_blocks: Vec<bool>,
    tally: Tally,
    history: Vec<LdaMetrics>,
    top: Vec<Vec<(u32, u32)>>,
    elapsed_s: f64,
    #[serde(default)]
    totals: Option<Vec<i64>>,
    #[serde(default)]
    resync_pending: bool,
    #[serde(default)]
    resyncs: u32,
    #[serde(default)]
    resyncs_in_a_row: u32,
}

pub struct LdaDriver {
    params: LdaParams,
    iterations: u32,
    executors: u32,
    top_words: usize,
    report_counts: bool,
    /// [`LdaConfig::recover`].
    recover: bool,
    corpus: Arc<Corpus>,
    tokens: u64,
    /// The iteration running (1-based) and its phase.
    iteration: u32,
    phase: Phase,
    /// Tasks of the phase not completed yet.
    pending: u32,
    /// Sub-rounds dispatched since the start (the step of the last dispatched one).
    step: u64,
    /// Each block's checksum as its last owner left it, or that it is stale.
    blocks: Blocks,
    /// The topic totals after the last completed sub-round (`None`: not known, e.g. a job
    /// resumed from a driver saved before they were tracked).
    totals: Option<Vec<i64>>,
    /// An executor of this iteration read counts that differ from what was expected.
    resync_pending: bool,
    resyncs: u32,
    resyncs_in_a_row: u32,
    tally: Tally,
    history: Vec<LdaMetrics>,
    /// `(count, word)` of each topic's most frequent words, best first.
    top: Vec<Vec<(u32, u32)>>,
    /// The executors' word–topic counts, `(word, topic) → count` (with `report_counts`).
    token_counts: BTreeMap<(u32, u32), u64>,
    started: Instant,
    iteration_started: Instant,
    /// Seconds of earlier runs (a resumed job).
    elapsed_before: f64,
    observer: Arc<dyn LdaObserver>,
}

impl LdaDriver {
    pub(super) fn new(
        config: &LdaConfig,
        params: LdaParams,
        executors: u32,
        corpus: Arc<Corpus>,
        observer: Arc<dyn LdaObserver>,
    ) -> Self {
        let now = Instant::now();
        Self {
            params,
            iterations: config.iterations,
            executors,
            top_words: config.top_words,
            report_counts: config.report_counts,
            recover: config.recover,
            tokens: corpus.num_tokens(),
            corpus,
            iteration: 1,
            phase: Phase::Init,
            pending: 0,
            step: 0,
            blocks: Blocks::new(executors as usize),
            totals: Some(vec![0; params.topics]),
            resync_pending: false,
            resyncs: 0,
            resyncs_in_a_row: 0,
            tally: Tally::default(),
            history: Vec::new(),
            top: vec![Vec::new(); params.topics],
            token_counts: BTreeMap::new(),
            started: now,
            iteration_started: now,
            elapsed_before: 0.0,
            observer,
        }
    }

    /// Every finished iteration's figures.
    pub fn history(&self) -> &[LdaMetrics] {
        &self.history
    }

    /// The most frequent words of each topic after the last iteration, best first.
    pub fn top_words(&self) -> Vec<Vec<TopWord>> {
        self.top
            .iter()
            .map(|words| {
                words
                    .iter()
                    .map(|&(count, w)| TopWord {
                        word: self
                            .corpus
                            .vocab
                            .get(w as usize)
                            .cloned()
                            .unwrap_or_default(),
                        count,
                    })
                    .collect()
            })
            .collect()
    }

    /// Resyncs of the tables in the run (see [`LdaMetrics::resyncs`]).
    pub fn resyncs(&self) -> u32 {
        self.resyncs
    }

    /// The executors' word–topic counts after the last iteration, `(word, topic) → count`
    /// (empty unless [`LdaConfig::report_counts`]).
    pub fn token_counts(&self) -> &BTreeMap<(u32, u32), u64> {
        &self.token_counts
    }

    /// The topic-totals row that holds the totals now: the one the last sub-round wrote
    /// (sub-round `t` writes row `(t + 1) mod 2`; a resync writes both).
    pub fn current_totals_row(&self) -> u64 {
        (self.step + 1) % 2
    }

    fn dispatch_all(
        &mut self,
        ctx: &mut DriverContext<'_, LdaArgs>,
        args: impl Fn(u32) -> LdaArgs,
    ) -> Result<(), AppError> {
        self.pending = self.executors;
        for e in 0..self.executors {
            ctx.dispatch(ExecutorId(e), args(e))?;
        }
        Ok(())
    }

    fn dispatch_sub_round(
        &mut self,
        sub_round: u32,
        ctx: &mut DriverContext<'_, LdaArgs>,
    ) -> Result<(), AppError> {
        if sub_round == 0 {
            self.iteration_started = Instant::now();
        }
        self.phase = Phase::Sample(sub_round);
        self.step += 1;
        let blocks = self.executors;
        let (iteration, step) = (self.iteration, self.step);
        let report = sub_round + 1 == blocks;
        let last = report && iteration == self.iterations;
        let expected: Vec<_> = (0..blocks as usize)
            .map(|b| self.blocks.expectation(b))
            .collect();
        let expected_totals = self.totals.as_deref().map(super::totals_checksum);
        self.dispatch_all(ctx, |e| LdaArgs::Sample {
            iteration,
            sub_round,
            step,
            expected: expected[((e + sub_round) % blocks) as usize],
            expected_totals,
            report,
            top_words: last,
        })
    }

    fn record(&mut self, output: LdaOutput, executor: ExecutorId) -> Result<(), AppError> {
        match output {
            LdaOutput::Initialized { totals, .. } => self.add_to_totals(&totals),
            LdaOutput::Resynced => {}
            LdaOutput::Checked {
                block,
                checksum,
                stale,
                likelihood,
                top,
            } => {
                self.resync_pending |= stale;
                self.blocks
                    .checked(block as usize, checksum, stale)
                    .ok_or_else(|| self.no_such_block(block, executor))?;
                self.record_likelihood(executor, &likelihood);
                self.record_top(top);
            }
            LdaOutput::Sampled {
                block,
                checksum,
                tokens,
                likelihood,
                top,
                totals_delta,
                stale,
            } => {
                // Only possible with `recover` (otherwise the executor fails the task).
                self.resync_pending |= stale;
                self.blocks
                    .sampled(block as usize, checksum, stale)
                    .ok_or_else(|| self.no_such_block(block, executor))?;
                self.add_to_totals(&totals_delta);
                self.tally.tokens += tokens;
                if let Some(part) = likelihood {
                    self.record_likelihood(executor, &part);
                }
                self.record_top(top);
            }
            LdaOutput::Counts(counts) => {
                for (w, z, n) in counts {
                    *self.token_counts.entry((w, z)).or_default() += u64::from(n);
                }
            }
        }
        Ok(())
    }

    fn no_such_block(&self, block: u32, executor: ExecutorId) -> AppError {
        format!(
            "lda: {executor} reported block {block} of {}",
            self.executors
        )
        .into()
    }

    fn record_likelihood(&mut self, executor: ExecutorId, part: &super::LikelihoodPart) {
        self.tally.parts.insert(executor.0, (part.docs, part.words));
        if self.tally.topic_sums.is_empty() {
            self.tally.topic_sums = vec![0; self.params.topics];
        }
        for (s, v) in self.tally.topic_sums.iter_mut().zip(&part.topic_sums) {
            *s += v;
        }
    }

    fn record_top(&mut self, top: Vec<(u32, u32, u32)>) {
        for (topic, word, count) in top {
            if let Some(list) = self.top.get_mut(topic as usize) {
                list.push((count, word));
            }
        }
    }

    /// Adds an executor's change to the tracked topic totals.
    fn add_to_totals(&mut self, delta: &[i64]) {
        if let Some(totals) = &mut self.totals {
            if delta.len() == totals.len() {
                totals.iter_mut().zip(delta).for_each(|(t, d)| *t += d);
            } else {
                self.totals = None;
            }
        }
    }

    /// Starts a resync of the tables (with `recover`), or fails the job, after an iteration
    /// whose counts differ from what was expected.
    fn start_resync(
        &mut self,
        problem: String,
        ctx: &mut DriverContext<'_, LdaArgs>,
    ) -> Result<(), AppError> {
        if !self.recover {
            return Err(problem.into());
        }
        if self.resyncs_in_a_row >= MAX_RESYNCS_IN_A_ROW {
            return Err(format!(
                "{problem}, and {} resyncs in a row did not make the tables consistent",
                self.resyncs_in_a_row
            )
            .into());
        }
        tracing::warn!("{problem}: resyncing the word-topic and topic-total tables from the executors' topic assignments");
        self.resyncs += 1;
        self.resyncs_in_a_row += 1;
        self.resync_pending = false;
        // The likelihood and the top words come again from the resync's check.
        self.tally.parts.clear();
        self.tally.topic_sums.clear();
        self.top.iter_mut().for_each(Vec::clear);
        self.phase = Phase::ResyncZero;
        self.dispatch_all(ctx, |_| LdaArgs::ResyncZero)
    }

    fn finish_iteration(&mut self, ctx: &mut DriverContext<'_, LdaArgs>) -> Result<(), AppError> {
        let totals = &self.tally.topic_sums;
        let total: i64 = totals.iter().sum();
        if totals.len() != self.params.topics || total != self.tokens as i64 {
            let problem = format!(
                "lda: after iteration {} the word-topic table holds {total} tokens, the corpus {}",
                self.iteration, self.tokens
            );
            return self.start_resync(problem, ctx);
        }
        if self.resync_pending {
            let problem = format!(
                "lda: in iteration {} an executor read counts that differ from what their \
                 previous writers left",
                self.iteration
            );
            return self.start_resync(problem, ctx);
        }
        self.resyncs_in_a_row = 0;
        let totals: Vec<u32> = totals
            .iter()
            .map(|&t| u32::try_from(t))
            .collect::<Result<_, _>>()
            .map_err(|_| format!("lda: a topic total out of range: {totals:?}"))?;
        let topics = log_likelihood_topics(&self.params, &totals)
            .map_err(|e| -> AppError { format!("lda: {e}").into() })?;
        let parts: f64 = self.tally.parts.values().map(|(d, w)| d + w).sum();
        let log_likelihood = (parts + topics) / self.tokens as f64;
        let iteration_s = self.iteration_started.elapsed().as_secs_f64();
        let metrics = LdaMetrics {
            iteration: self.iteration,
            log_likelihood,
            tokens_per_s: self.tally.tokens as f64 / iteration_s.max(1e-9),
            iteration_s,
            elapsed_s: self.elapsed_before + self.started.elapsed().as_secs_f64(),
            resyncs: self.resyncs,
        };
        self.observer.iteration_completed(&metrics);
        self.history.push(metrics);
        self.tally = Tally::default();
        ctx.iteration_completed(u64::from(self.iteration));
        if self.iteration < self.iterations {
            self.iteration += 1;
            return self.dispatch_sub_round(0, ctx);
        }
        for list in &mut self.top {
            list.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            list.truncate(self.top_words);
        }
        if self.report_counts {
            self.phase = Phase::Counts;
            return self.dispatch_all(ctx, |_| LdaArgs::Counts);
        }
        self.phase = Phase::Done;
        ctx.finish();
        Ok(())
    }
}

impl Driver<super::LdaApp> for LdaDriver {
    fn dispatch_initial_tasks(
        &mut self,
        ctx: &mut DriverContext<'_, LdaArgs>,
    ) -> Result<(), AppError> {
        self.started = Instant::now();
        self.iteration_started = self.started;
        if self.pending > 0 {
            return Ok(()); // resumed: the phase's tasks were restored with the checkpoint
        }
        match self.phase {
            Phase::Init => self.dispatch_all(ctx, |_| LdaArgs::Init),
            Phase::Sample(sub_round) => {
                // Resumed between phases: dispatch the saved phase again.
                self.step = self.step.saturating_sub(1);
                self.dispatch_sub_round(sub_round, ctx)
            }
            Phase::ResyncZero | Phase::ResyncAdd | Phase::ResyncCheck => {
                // Resumed between the resync's phases: it starts over (every phase is
                // computed afresh from the tables and the assignments).
                self.phase = Phase::ResyncZero;
                self.dispatch_all(ctx, |_| LdaArgs::ResyncZero)
            }
            Phase::Counts => self.dispatch_all(ctx, |_| LdaArgs::Counts),
            Phase::Done => {
                ctx.finish();
                Ok(())
            }
        }
    }

    fn handle_task_completion(
        &mut self,
        completion: Completion<LdaOutput>,
        ctx: &mut DriverContext<'_, LdaArgs>,
    ) -> Result<(), AppError> {
        self.record(completion.output, completion.executor)?;
        self.pending = self.pending.checked_sub(1).ok_or_else(|| -> AppError {
            format!(
                "lda: a completion from {} that the driver did not wait for",
                completion.executor
            )
            .into()
        })?;
        if self.pending > 0 {
            return Ok(());
        }
        match self.phase {
            Phase::Init => self.dispatch_sub_round(0, ctx),
            Phase::Sample(sub_round) if sub_round + 1 < self.executors => {
                self.dispatch_sub_round(sub_round + 1, ctx)
            }
            Phase::Sample(_) => self.finish_iteration(ctx),
            Phase::ResyncZero => {
                self.phase = Phase::ResyncAdd;
                self.dispatch_all(ctx, |_| LdaArgs::ResyncAdd)
            }
            Phase::ResyncAdd => {
                self.phase = Phase::ResyncCheck;
                let top_words = self.iteration == self.iterations;
                self.dispatch_all(ctx, |_| LdaArgs::ResyncCheck { top_words })
            }
            Phase::ResyncCheck => {
                // Both totals rows now hold the column sums of the table.
                self.totals = Some(self.tally.topic_sums.clone());
                self.finish_iteration(ctx)
            }
            Phase::Counts | Phase::Done => {
                self.phase = Phase::Done;
                ctx.finish();
                Ok(())
            }
        }
    }

    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        let saved = Saved {
            iteration: self.iteration,
            phase: self.phase,
            pending: self.pending,
            step: self.step,
            checksums: self.blocks.checksums().to_vec(),
            stale_blocks: self.blocks.stale().to_vec(),
            tally: self.tally.clone(),
            history: self.history.clone(),
            top: self.top.clone(),
            elapsed_s: self.elapsed_before + self.started.elapsed().as_secs_f64(),
            totals: self.totals.clone(),
            resync_pending: self.resync_pending,
            resyncs: self.resyncs,
            resyncs_in_a_row: self.resyncs_in_a_row,
        };
        Ok(serde_json::to_vec(&saved)?)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), AppError> {
        let saved: Saved = serde_json::from_slice(state)?;
        if saved.iteration == 0
            || saved.iteration > self.iterations
            || saved.pending > self.executors
            || saved.checksums.len() != self.executors as usize
            || saved.top.len() != self.params.topics
        {
            return Err(format!(
                "saved LDA driver (iteration {}, {} tasks pending, {} blocks) does not fit a job of {} iterations, {} executors and {} topics",
                saved.iteration, saved.pending, saved.checksums.len(), self.iterations, self.executors, self.params.topics
            )
            .into());
        }
        let blocks_saved = saved.stale_blocks.len();
        self.blocks = Blocks::from_saved(saved.checksums, saved.stale_blocks).ok_or_else(
            || -> AppError {
                format!(
                    "saved LDA driver has {blocks_saved} stale-block flags for {} blocks",
                    self.executors
                )
                .into()
            },
        )?;
        self.iteration = saved.iteration;
        self.phase = saved.phase;
        self.pending = saved.pending;
        self.step = saved.step;
        self.tally = saved.tally;
        self.history = saved.history;
        self.top = saved.top;
        self.elapsed_before = saved.elapsed_s;
        self.totals = saved.totals;
        self.resync_pending = saved.resync_pending;
        self.resyncs = saved.resyncs;
        self.resyncs_in_a_row = saved.resyncs_in_a_row;
        Ok(())
    }
}
