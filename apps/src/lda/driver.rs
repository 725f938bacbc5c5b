//! The LDA driver: the initial assignment, then per iteration `B` sub-rounds of one
//! micro-task per executor with a barrier between them (the rotation of vocabulary blocks),
//! the likelihood per iteration, the top words at the end; optionally the executors'
//! token counts (tests).

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
    Counts,
    Done,
}

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
    tally: Tally,
    history: Vec<LdaMetrics>,
    top: Vec<Vec<(u32, u32)>>,
    elapsed_s: f64,
}

pub struct LdaDriver {
    params: LdaParams,
    iterations: u32,
    executors: u32,
    top_words: usize,
    report_counts: bool,
    corpus: Arc<Corpus>,
    tokens: u64,
    /// The iteration running (1-based) and its phase.
    iteration: u32,
    phase: Phase,
    /// Tasks of the phase not completed yet.
    pending: u32,
    /// Sub-rounds dispatched since the start (the step of the last dispatched one).
    step: u64,
    /// Each block's checksum as its last owner left it.
    checksums: Vec<Option<u64>>,
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
            tokens: corpus.num_tokens(),
            corpus,
            iteration: 1,
            phase: Phase::Init,
            pending: 0,
            step: 0,
            checksums: vec![None; executors as usize],
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

    /// The executors' word–topic counts after the last iteration, `(word, topic) → count`
    /// (empty unless [`LdaConfig::report_counts`]).
    pub fn token_counts(&self) -> &BTreeMap<(u32, u32), u64> {
        &self.token_counts
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
        let checksums = self.checksums.clone();
        self.dispatch_all(ctx, |e| LdaArgs::Sample {
            iteration,
            sub_round,
            step,
            expected: checksums[((e + sub_round) % blocks) as usize],
            report,
            top_words: last,
        })
    }

    fn record(&mut self, output: LdaOutput, executor: ExecutorId) -> Result<(), AppError> {
        match output {
            LdaOutput::Initialized { .. } => {}
            LdaOutput::Sampled {
                block,
                checksum,
                tokens,
                likelihood,
                top,
            } => {
                let slot = self.checksums.get_mut(block as usize).ok_or_else(|| {
                    format!(
                        "lda: {executor} reported block {block} of {}",
                        self.executors
                    )
                })?;
                *slot = Some(checksum);
                self.tally.tokens += tokens;
                if let Some(part) = likelihood {
                    self.tally.parts.insert(executor.0, (part.docs, part.words));
                    if self.tally.topic_sums.is_empty() {
                        self.tally.topic_sums = vec![0; self.params.topics];
                    }
                    for (s, v) in self.tally.topic_sums.iter_mut().zip(&part.topic_sums) {
                        *s += v;
                    }
                }
                for (topic, word, count) in top {
                    if let Some(list) = self.top.get_mut(topic as usize) {
                        list.push((count, word));
                    }
                }
            }
            LdaOutput::Counts(counts) => {
                for (w, z, n) in counts {
                    *self.token_counts.entry((w, z)).or_default() += u64::from(n);
                }
            }
        }
        Ok(())
    }

    fn finish_iteration(&mut self, ctx: &mut DriverContext<'_, LdaArgs>) -> Result<(), AppError> {
        let totals = &self.tally.topic_sums;
        let total: i64 = totals.iter().sum();
        if totals.len() != self.params.topics || total != self.tokens as i64 {
            return Err(format!(
                "lda: after iteration {} the word-topic table holds {total} tokens, the corpus {}",
                self.iteration, self.tokens
            )
            .into());
        }
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
            checksums: self.checksums.clone(),
            tally: self.tally.clone(),
            history: self.history.clone(),
            top: self.top.clone(),
            elapsed_s: self.elapsed_before + self.started.elapsed().as_secs_f64(),
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
        self.iteration = saved.iteration;
        self.phase = saved.phase;
        self.pending = saved.pending;
        self.step = saved.step;
        self.checksums = saved.checksums;
        self.tally = saved.tally;
        self.history = saved.history;
        self.top = saved.top;
        self.elapsed_before = saved.elapsed_s;
        Ok(())
    }
}
