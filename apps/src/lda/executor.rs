//! The LDA executor: its documents' tokens grouped by vocabulary block, each token's topic,
//! the document–topic counts, and its previous change to the topic totals (the
//! double-buffered totals, see the module doc of [`super`]). The tokens of a block are in
//! document order; the topics are the state that moves with the executor.

use super::layout::{self, WordRows};
use super::parallel;
use super::{BlockExpectation, LdaArgs, LdaConfig, LdaOutput, LdaSampler, LikelihoodPart};
use crate::data::Corpus;
use crate::device::Compute;
use harp::{AppError, Executor, ParamClient, Table};
use harp_kernels::lda::{
    gibbs_sweep, log_likelihood_docs, log_likelihood_words, sample_parallel, Counts, CountsMut,
    FastRng, LdaParams, Tokens,
};
use std::ops::Range;

/// The executor's tokens whose words fall in one vocabulary block.
#[derive(Default)]
struct BlockTokens {
    /// Local document row of each token.
    docs: Vec<u32>,
    /// Global word id of each token.
    words: Vec<u32>,
    /// Current topic of each token.
    topics: Vec<u32>,
}

/// What an executor holds per token: its document, word and topic ([`BlockTokens`]).
const BYTES_PER_TOKEN: u64 = 12;

impl BlockTokens {
    fn with_capacity(tokens: usize) -> Self {
        Self {
            docs: Vec::with_capacity(tokens),
            words: Vec::with_capacity(tokens),
            topics: Vec::with_capacity(tokens),
        }
    }
}

pub struct LdaExecutor {
    me: u32,
    params: LdaParams,
    seed: u64,
    top_words: usize,
    rows: WordRows,
    word_topic: Table<i64>,
    topic_totals: Table<i64>,
    /// Word–topic rows of each vocabulary block.
    blocks: Vec<Range<usize>>,
    /// This executor's tokens of each block.
    tokens: Vec<BlockTokens>,
    /// `docs × K` document–topic counts of its documents.
    doc_topic: Vec<u32>,
    /// Its change to the topic totals in the previous sub-round (pushed again, with this
    /// sub-round's, to the other totals row).
    previous_delta: Vec<i64>,
    /// [`super::LdaConfig::recover`]: sample counts that differ from what was expected
    /// (clamped) and report them stale instead of failing.
    recover: bool,
    /// The tables count this executor's topic assignments: it pushed them (step 0 or a
    /// resync's second phase) or it was restored from its saved state. `false` in an
    /// executor created afresh in the middle of a run (a dead worker node's, re-created by
    /// worker recovery with its initial topics): it then reports every sub-round stale, so
    /// that the driver resyncs the tables from the assignments.
    counted: bool,
    // Buffers kept between sub-rounds.
    keys: Vec<u64>,
    counts: Vec<u32>,
    counts_before: Vec<u32>,
    totals: Vec<u32>,
    sampler: LdaSampler,
    /// The GPU path (`--device cuda`, parallel sampler); `None` samples on the CPU.
    #[cfg(feature = "cuda")]
    gpu: Option<super::gpu::LdaGpu>,
}

/// SplitMix64's finalizer over a combination of inputs: seeds of the per-document and
/// per-sub-round generators.
fn mix(parts: &[u64]) -> u64 {
    let mut z = 0x853c_49e6_748f_ea9b_u64;
    for &p in parts {
        z = harp::mix64((z ^ p).wrapping_add(0x9e37_79b9_7f4a_7c15));
    }
    z
}

/// A checksum of a block's counts (its first row and every value, in order).
fn checksum(first_row: usize, counts: &[u32]) -> u64 {
    let mut lanes = [
        first_row as u64 ^ 0xcbf2_9ce4_8422_2325,
        0x100_0000_01b3,
        0x9e37_79b9_7f4a_7c15,
        0xbf58_476d_1ce4_e5b9,
    ];
    let mut chunks = counts.chunks_exact(4);
    for chunk in &mut chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = (*lane ^ u64::from(v)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    for &v in chunks.remainder() {
        lanes[0] = (lanes[0] ^ u64::from(v)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(&lanes)
}

/// A checksum of topic totals (the driver's expectation of a totals row).
pub fn totals_checksum(totals: &[i64]) -> u64 {
    let mut parts = Vec::with_capacity(totals.len() + 1);
    parts.push(totals.len() as u64);
    parts.extend(totals.iter().map(|&t| t as u64));
    mix(&parts)
}

/// A count read from a table as `u32`: `None` if it is negative or too large.
fn as_count(v: i64) -> Option<u32> {
    u32::try_from(v).ok()
}

/// [`as_count`], clamped into `0..=u32::MAX`.
fn clamped_count(v: i64) -> u32 {
    v.clamp(0, i64::from(u32::MAX)) as u32
}

fn lda_error(message: String) -> AppError {
    message.into()
}

/// Refuses executor `me`'s `tokens` (in `docs` documents of corpus `source`) when they do
/// not fit in the memory `available` ([`BYTES_PER_TOKEN`] each).
fn tokens_fit(
    (me, docs, tokens): (u32, usize, u64),
    source: &str,
    available: Option<u64>,
) -> Result<(), AppError> {
    let what = || {
        format!(
            "lda: the {docs} documents of executor {me} hold {tokens} tokens (is the count column of {source} right?)"
        )
    };
    let needed = tokens.saturating_mul(BYTES_PER_TOKEN);
    crate::host_memory::check_fits(needed, available, what, "12 bytes a token").map_err(lda_error)
}

impl LdaExecutor {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        me: u32,
        executors: u32,
        config: &LdaConfig,
        params: LdaParams,
        corpus: &Corpus,
        rows: WordRows,
        word_topic: Table<i64>,
        topic_totals: Table<i64>,
        compute: &Compute,
    ) -> Result<Self, AppError> {
        #[cfg(not(feature = "cuda"))]
        let _ = compute;
        let k = params.topics;
        let blocks = layout::word_blocks(&rows, &corpus.tokens_per_word(), executors as usize);
        let mut block_of_row = vec![0u32; rows.rows()];
        for (b, range) in blocks.iter().enumerate() {
            for row in range.clone() {
                block_of_row[row] = b as u32;
            }
        }
        let tokens_per_doc: Vec<u64> = (0..corpus.num_docs())
            .map(|d| corpus.doc(d).map(|(_, c)| u64::from(c)).sum())
            .collect();
        let my_docs = layout::doc_ranges(&tokens_per_doc, executors as usize)
            .into_iter()
            .nth(me as usize)
            .ok_or_else(|| lda_error(format!("lda: executor {me} of {executors}")))?;
        // Each token's document, word and topic, in the block of its word: presized, and
        // refused with a message when this machine cannot hold them.
        let mut block_tokens = vec![0u64; blocks.len()];
        for d in my_docs.clone() {
            for (word, count) in corpus.doc(d) {
                block_tokens[block_of_row[rows.row_of(word)] as usize] += u64::from(count);
            }
        }
        let my_tokens: u64 = block_tokens.iter().sum();
        let held = (me, my_docs.len(), my_tokens);
        tokens_fit(held, &corpus.source, crate::host_memory::available_bytes())?;
        let mut tokens: Vec<BlockTokens> = (block_tokens.iter())
            .map(|&n| BlockTokens::with_capacity(n as usize))
            .collect();
        let mut doc_topic = vec![0u32; my_docs.len() * k];
        for (local, d) in my_docs.clone().enumerate() {
            // Topics drawn per document from the seed: the same for any executor count.
            let mut rng = FastRng::new(mix(&[config.seed, d as u64]));
            let row = &mut doc_topic[local * k..(local + 1) * k];
            for (word, count) in corpus.doc(d) {
                let block = &mut tokens[block_of_row[rows.row_of(word)] as usize];
                for _ in 0..count {
                    let topic = rng.below(k as u32);
                    row[topic as usize] += 1;
                    block.docs.push(local as u32);
                    block.words.push(word);
                    block.topics.push(topic);
                }
            }
        }
        Ok(Self {
            me,
            params,
            seed: config.seed,
            top_words: config.top_words,
            rows,
            word_topic,
            topic_totals,
            blocks,
            tokens,
            doc_topic,
            previous_delta: vec![0; k],
            recover: config.recover,
            counted: false,
            keys: Vec::new(),
            counts: Vec::new(),
            counts_before: Vec::new(),
            totals: Vec::new(),
            sampler: config.sampler,
            #[cfg(feature = "cuda")]
            gpu: match compute {
                Compute::Gpu(gpu) => Some(super::gpu::LdaGpu::new(gpu.clone())),
                Compute::Cpu => None,
            },
        })
    }

    /// Forgets that the tables count this executor's topics, as for one created afresh: its
    /// state came from a consistent checkpoint older than the tables (a dead worker node's
    /// executor made again, [`super::LdaApp`]'s `recover_executor`). Its sub-rounds are then
    /// stale until the driver's resync pushes its topics; the totals delta it pushed before
    /// the checkpoint is forgotten.
    pub(super) fn forget_counted(&mut self) {
        self.counted = false;
        self.previous_delta.fill(0);
    }

    fn num_tokens(&self) -> u64 {
        self.tokens.iter().map(|b| b.topics.len() as u64).sum()
    }

    /// The word–topic counts of this executor's tokens, as rows of the table: `(row, G·K
    /// counts)` for every row it has a token in.
    fn own_word_topic_rows(&self) -> Vec<(u64, Vec<i64>)> {
        let k = self.params.topics;
        let g = self.rows.words_per_row();
        let mut rows: std::collections::BTreeMap<u64, Vec<i64>> = Default::default();
        for block in &self.tokens {
            for (&w, &z) in block.words.iter().zip(&block.topics) {
                let row = self.rows.row_of(w);
                let values = rows
                    .entry(row as u64)
                    .or_insert_with(|| vec![0; self.rows.width()]);
                values[(w as usize - row * g) * k + z as usize] += 1;
            }
        }
        rows.into_iter().collect()
    }

    /// Step 0: pushes the counts of the initial assignment, and the topic totals to both
    /// totals rows.
    fn init(&mut self, ps: &mut ParamClient) -> Result<LdaOutput, AppError> {
        let own = self.own_word_topic_rows();
        let keys: Vec<u64> = own.iter().map(|(r, _)| *r).collect();
        let deltas: Vec<Vec<i64>> = own.into_iter().map(|(_, v)| v).collect();
        ps.update_many_owned(&self.word_topic, &keys, deltas)?;
        let totals = self.own_totals();
        ps.update(&self.topic_totals, 0, &totals)?;
        ps.update(&self.topic_totals, 1, &totals)?;
        self.counted = true;
        Ok(LdaOutput::Initialized {
            tokens: self.num_tokens(),
            totals,
        })
    }

    /// The topic totals of this executor's tokens.
    fn own_totals(&self) -> Vec<i64> {
        let k = self.params.topics;
        let mut totals = vec![0i64; k];
        for row in self.doc_topic.chunks_exact(k) {
            for (t, &n) in totals.iter_mut().zip(row) {
                *t += i64::from(n);
            }
        }
        totals
    }

    /// Whether counts that differ from what was expected are sampled (clamped, raised to
    /// this executor's own) and reported stale rather than refused: with `recover`, and in
    /// an executor whose topics the tables do not count (`counted`), whose sub-rounds are
    /// stale by construction. (A sub-round also tolerates a block the driver calls
    /// [`BlockExpectation::Stale`]: the driver says so only when it recovers.)
    fn tolerates_mismatch(&self) -> bool {
        self.recover || !self.counted
    }

    /// Reads the rows of `rows` into `self.counts` as `u32`, refusing counts that are
    /// negative or too large (when `tolerant`: clamping them); returns the checksum of what
    /// was read and whether a count was clamped.
    async fn read_block(
        &mut self,
        rows: &Range<usize>,
        tolerant: bool,
        ps: &mut ParamClient,
    ) -> Result<(u64, bool), AppError> {
        self.keys.clear();
        self.keys.extend(rows.clone().map(|r| r as u64));
        let got = ps.get_many(&self.word_topic, &self.keys).await?;
        self.counts.clear();
        self.counts.reserve(rows.len() * self.rows.width());
        let mut clamped = false;
        for (row, values) in rows.clone().zip(&got) {
            for &v in values.iter() {
                let count = match as_count(v) {
                    Some(count) => count,
                    None if tolerant => {
                        clamped = true;
                        clamped_count(v)
                    }
                    None => {
                        return Err(lda_error(format!(
                            "lda: word-topic row {row} holds the count {v} (executor {})",
                            self.me
                        )))
                    }
                };
                self.counts.push(count);
            }
        }
        Ok((checksum(rows.start, &self.counts), clamped))
    }

    /// Raises every count of block `b` (in `self.counts`, rows `rows`) to at least this
    /// executor's own tokens' count, so the sampler can take each of its tokens out of the
    /// counts (stale counts after a lost server; the resync fixes the table afterwards).
    fn raise_to_own_counts(&mut self, b: usize, rows: &Range<usize>) {
        let k = self.params.topics;
        let base = self.rows.words_of(rows).start as usize;
        let mut own = vec![0u32; self.counts.len()];
        let block = &self.tokens[b];
        for (&w, &z) in block.words.iter().zip(&block.topics) {
            own[(w as usize - base) * k + z as usize] += 1;
        }
        for (count, &mine) in self.counts.iter_mut().zip(&own) {
            *count = (*count).max(mine);
        }
    }

    /// The parallel sampler over block `b` (rows `rows`, read into `self.counts`): draws
    /// every token's new topic from the counts as read (on the GPU when there is one),
    /// then moves the tokens in the counts (see [`super::parallel`]).
    fn sample_block_parallel(
        &mut self,
        b: usize,
        rows: &Range<usize>,
        seed: u64,
    ) -> Result<(), AppError> {
        let word_base = self.rows.words_of(rows).start;
        let block = &self.tokens[b];
        let tokens = Tokens {
            docs: &block.docs,
            words: &block.words,
        };
        let me = self.me;
        let fail = move |e: String| lda_error(format!("lda: executor {me}: {e}"));
        #[cfg(feature = "cuda")]
        let on_gpu = match self.gpu.as_mut() {
            Some(gpu) => {
                let counts = super::gpu::HostCounts {
                    doc_topic: &self.doc_topic,
                    word_topic: &self.counts,
                    word_base,
                    totals: &self.totals,
                };
                Some(gpu.sample(b, &self.params, tokens, &block.topics, counts, seed)?)
            }
            None => None,
        };
        #[cfg(not(feature = "cuda"))]
        let on_gpu: Option<Vec<u32>> = None;
        let drawn = match on_gpu {
            Some(drawn) => drawn,
            None => {
                let uniforms = parallel::uniforms(seed, block.topics.len());
                let mut drawn = vec![0u32; block.topics.len()];
                let counts = Counts {
                    doc_topic: &self.doc_topic,
                    word_topic: &self.counts,
                    word_base,
                    topic_totals: &self.totals,
                };
                sample_parallel(
                    &self.params,
                    tokens,
                    &block.topics,
                    counts,
                    &uniforms,
                    &mut drawn,
                )
                .map_err(|e| fail(e.to_string()))?;
                drawn
            }
        };
        let block = &mut self.tokens[b];
        let counts = parallel::BlockCounts {
            topics: self.params.topics,
            doc_topic: &mut self.doc_topic,
            word_topic: &mut self.counts,
            word_base,
            totals: &mut self.totals,
        };
        parallel::apply_moves(&block.docs, &block.words, &mut block.topics, &drawn, counts)
            .map_err(fail)
    }

    /// The likelihood parts of this executor's documents and of the block in `self.counts`.
    fn likelihood_part(&self) -> Result<LikelihoodPart, AppError> {
        let k = self.params.topics;
        let mut topic_sums = vec![0i64; k];
        for word in self.counts.chunks_exact(k) {
            for (s, &n) in topic_sums.iter_mut().zip(word) {
                *s += i64::from(n);
            }
        }
        Ok(LikelihoodPart {
            docs: log_likelihood_docs(&self.params, &self.doc_topic)
                .map_err(|e| lda_error(format!("lda: {e}")))?,
            words: log_likelihood_words(&self.params, &self.counts)
                .map_err(|e| lda_error(format!("lda: {e}")))?,
            topic_sums,
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn sample(
        &mut self,
        iteration: u32,
        sub_round: u32,
        step: u64,
        expected: BlockExpectation,
        expected_totals: Option<u64>,
        report: bool,
        top_words: bool,
        ps: &mut ParamClient,
    ) -> Result<LdaOutput, AppError> {
        let k = self.params.topics;
        let num_blocks = self.blocks.len() as u32;
        let b = ((self.me + sub_round) % num_blocks) as usize;
        let rows = self.blocks[b].clone();
        let tolerant = self.tolerates_mismatch() || expected == BlockExpectation::Stale;
        let (found, clamped) = self.read_block(&rows, tolerant, ps).await?;
        // Counts of topics this executor does not hold (it was created afresh mid-run)
        // differ from its own however the block reads.
        let uncounted = !self.counted;
        let differs = uncounted
            || match expected {
                BlockExpectation::Unknown => false,
                BlockExpectation::Checksum(expected) => found != expected,
                BlockExpectation::Stale => true,
            };
        if differs && !tolerant {
            return Err(lda_error(format!(
                "lda: executor {} read block {b} (word-topic rows {}..{}) in iteration \
                 {iteration}, sub-round {sub_round}, and it differs from what its previous \
                 owner left: another executor wrote it meanwhile",
                self.me, rows.start, rows.end
            )));
        }
        let mut stale = clamped || differs;
        if stale {
            self.raise_to_own_counts(b, &rows);
        }
        let mut delta = vec![0i64; k];
        if !self.tokens[b].topics.is_empty() {
            let totals = ps.get(&self.topic_totals, step % 2).await?;
            let totals_stale = expected_totals.is_some_and(|e| e != totals_checksum(&totals));
            if totals_stale && !tolerant {
                return Err(lda_error(format!(
                    "lda: executor {} read the topic totals (row {}) in iteration {iteration}, \
                     sub-round {sub_round}, and they differ from what the driver expects: \
                     another executor wrote them meanwhile",
                    self.me,
                    step % 2
                )));
            }
            self.totals.clear();
            let mut totals_clamped = false;
            for &t in totals.iter() {
                self.totals.push(match as_count(t) {
                    Some(t) => t,
                    None if tolerant => {
                        totals_clamped = true;
                        clamped_count(t)
                    }
                    None => {
                        return Err(lda_error(format!(
                            "lda: a topic total is {t} (executor {})",
                            self.me
                        )))
                    }
                });
            }
            if totals_stale || totals_clamped || uncounted {
                stale = true;
                let own = self.own_totals();
                for (total, mine) in self.totals.iter_mut().zip(own) {
                    *total = (*total).max(clamped_count(mine));
                }
            }
            for (d, &t) in delta.iter_mut().zip(&self.totals) {
                *d = -i64::from(t);
            }
            self.counts_before.clone_from(&self.counts);
            let seed = mix(&[self.seed, u64::from(self.me), step]);
            match self.sampler {
                LdaSampler::Sequential => {
                    let tokens = &mut self.tokens[b];
                    let mut rng = FastRng::new(seed);
                    gibbs_sweep(
                        &self.params,
                        Tokens {
                            docs: &tokens.docs,
                            words: &tokens.words,
                        },
                        &mut tokens.topics,
                        CountsMut {
                            doc_topic: &mut self.doc_topic,
                            word_topic: &mut self.counts,
                            word_base: self.rows.words_of(&rows).start,
                            topic_totals: &mut self.totals,
                        },
                        &mut rng,
                    )
                    .map_err(|e| lda_error(format!("lda: executor {}: {e}", self.me)))?;
                }
                LdaSampler::Parallel => self.sample_block_parallel(b, &rows, seed)?,
            }
            for (d, &t) in delta.iter_mut().zip(&self.totals) {
                *d += i64::from(t);
            }
            self.push_block_deltas(&rows, ps)?;
        }
        // The other totals row gets this sub-round's change and the previous one's (it
        // missed that one while it was being read).
        let push: Vec<i64> = delta
            .iter()
            .zip(&self.previous_delta)
            .map(|(a, b)| a + b)
            .collect();
        if push.iter().any(|&v| v != 0) {
            ps.update(&self.topic_totals, (step + 1) % 2, &push)?;
        }
        self.previous_delta.clone_from(&delta);
        let likelihood = if report {
            Some(self.likelihood_part()?)
        } else {
            None
        };
        let top = if top_words {
            self.block_top_words(&rows)
        } else {
            Vec::new()
        };
        Ok(LdaOutput::Sampled {
            block: b as u32,
            checksum: checksum(rows.start, &self.counts),
            tokens: self.tokens[b].topics.len() as u64,
            likelihood,
            top,
            totals_delta: delta,
            stale,
        })
    }

    /// This executor's block in a resync (block `e`; blocks are as many as executors).
    fn resync_block(&self) -> Result<Range<usize>, AppError> {
        self.blocks.get(self.me as usize).cloned().ok_or_else(|| {
            lda_error(format!(
                "lda: executor {} of {} blocks",
                self.me,
                self.blocks.len()
            ))
        })
    }

    /// Resync, phase 1: pushes the negation of block `e`'s rows as read (it is the only
    /// writer of them in this phase), and executor 0 that of both totals rows.
    async fn resync_zero(&mut self, ps: &mut ParamClient) -> Result<LdaOutput, AppError> {
        let rows = self.resync_block()?;
        let keys: Vec<u64> = rows.map(|r| r as u64).collect();
        let got = ps.get_many(&self.word_topic, &keys).await?;
        let mut zero_keys = Vec::new();
        let mut deltas = Vec::new();
        for (&key, values) in keys.iter().zip(&got) {
            if values.iter().any(|&v| v != 0) {
                zero_keys.push(key);
                deltas.push(values.iter().map(|&v| -v).collect::<Vec<i64>>());
            }
        }
        ps.update_many_owned(&self.word_topic, &zero_keys, deltas)?;
        if self.me == 0 {
            for row in 0..2 {
                let totals = ps.get(&self.topic_totals, row).await?;
                if totals.iter().any(|&t| t != 0) {
                    let negated: Vec<i64> = totals.iter().map(|&t| -t).collect();
                    ps.update(&self.topic_totals, row, &negated)?;
                }
            }
        }
        Ok(LdaOutput::Resynced)
    }

    /// Resync, phase 2: pushes the counts of this executor's tokens (as step 0 does) and
    /// forgets its previous totals delta (both totals rows are now current).
    fn resync_add(&mut self, ps: &mut ParamClient) -> Result<LdaOutput, AppError> {
        self.init(ps)?;
        self.previous_delta.iter_mut().for_each(|d| *d = 0);
        Ok(LdaOutput::Resynced)
    }

    /// Resync, phase 3: reads block `e` (nobody writes it in this phase) and reports its
    /// checksum, the likelihood parts and, after the last iteration, its top words.
    async fn resync_check(
        &mut self,
        top_words: bool,
        ps: &mut ParamClient,
    ) -> Result<LdaOutput, AppError> {
        let rows = self.resync_block()?;
        let (checksum, clamped) = self
            .read_block(&rows, self.tolerates_mismatch(), ps)
            .await?;
        Ok(LdaOutput::Checked {
            block: self.me,
            checksum,
            // Re-created after this resync's second phase: the block counts the topics the
            // dead executor pushed, not this one's.
            stale: clamped || !self.counted,
            likelihood: self.likelihood_part()?,
            top: if top_words {
                self.block_top_words(&rows)
            } else {
                Vec::new()
            },
        })
    }

    /// Pushes `counts − counts_before` for every row of the block that changed.
    fn push_block_deltas(
        &mut self,
        rows: &Range<usize>,
        ps: &mut ParamClient,
    ) -> Result<(), AppError> {
        let width = self.rows.width();
        let mut keys = Vec::new();
        let mut deltas = Vec::new();
        for (i, row) in rows.clone().enumerate() {
            let span = i * width..(i + 1) * width;
            let (now, before) = (&self.counts[span.clone()], &self.counts_before[span]);
            if now == before {
                continue;
            }
            keys.push(row as u64);
            deltas.push(
                now.iter()
                    .zip(before)
                    .map(|(&a, &b)| i64::from(a) - i64::from(b))
                    .collect::<Vec<i64>>(),
            );
        }
        ps.update_many_owned(&self.word_topic, &keys, deltas)?;
        Ok(())
    }

    /// `(topic, word, count)` of the `top_words` most frequent words of each topic among
    /// the block's words (counts from `self.counts`, the block just sampled).
    fn block_top_words(&self, rows: &Range<usize>) -> Vec<(u32, u32, u32)> {
        let k = self.params.topics;
        let words = self.rows.words_of(rows);
        let mut out = Vec::new();
        for topic in 0..k {
            let mut best: Vec<(u32, u32)> = words
                .clone()
                .map(|w| {
                    let i = (w - words.start) as usize * k + topic;
                    (self.counts[i], w)
                })
                .filter(|&(n, _)| n > 0)
                .collect();
            // Most frequent first; ties by word id.
            best.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            best.truncate(self.top_words);
            out.extend(best.into_iter().map(|(n, w)| (topic as u32, w, n)));
        }
        out
    }

    /// `(word, topic, count)` of this executor's tokens.
    fn token_counts(&self) -> Vec<(u32, u32, u32)> {
        let mut counts: std::collections::BTreeMap<(u32, u32), u32> = Default::default();
        for block in &self.tokens {
            for (&w, &z) in block.words.iter().zip(&block.topics) {
                *counts.entry((w, z)).or_default() += 1;
            }
        }
        counts.into_iter().map(|((w, z), n)| (w, z, n)).collect()
    }

    /// Recomputes the document–topic counts from the topics (after a restore).
    fn rebuild_doc_topic(&mut self) {
        let k = self.params.topics;
        self.doc_topic.iter_mut().for_each(|n| *n = 0);
        for block in &self.tokens {
            for (&d, &z) in block.docs.iter().zip(&block.topics) {
                self.doc_topic[d as usize * k + z as usize] += 1;
            }
        }
    }
}

/// The saved state: `LDA1`, K and the block count (`u32` each), then per block its token
/// count (`u64`) and topics (`u32` each), then the K previous totals deltas (`i64`), all
/// little-endian.
const STATE_MAGIC: &[u8; 4] = b"LDA1";

struct StateReader<'a> {
    bytes: &'a [u8],
}

impl StateReader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], AppError> {
        let (head, rest) = self
            .bytes
            .split_first_chunk::<N>()
            .ok_or_else(|| lda_error("lda: the saved executor state is truncated".into()))?;
        self.bytes = rest;
        Ok(*head)
    }
}

impl Executor<super::LdaApp> for LdaExecutor {
    async fn run_task(
        &mut self,
        args: LdaArgs,
        ps: &mut ParamClient,
    ) -> Result<LdaOutput, AppError> {
        match args {
            LdaArgs::Init => self.init(ps),
            LdaArgs::Sample {
                iteration,
                sub_round,
                step,
                expected,
                expected_totals,
                report,
                top_words,
            } => {
                self.sample(
                    iteration,
                    sub_round,
                    step,
                    expected,
                    expected_totals,
                    report,
                    top_words,
                    ps,
                )
                .await
            }
            LdaArgs::Counts => Ok(LdaOutput::Counts(self.token_counts())),
            LdaArgs::ResyncZero => self.resync_zero(ps).await,
            LdaArgs::ResyncAdd => self.resync_add(ps),
            LdaArgs::ResyncCheck { top_words } => self.resync_check(top_words, ps).await,
        }
    }

    fn save_state(&self) -> Result<Vec<u8>, AppError> {
        let mut out = Vec::with_capacity(16 + self.num_tokens() as usize * 4);
        out.extend_from_slice(STATE_MAGIC);
        out.extend_from_slice(&(self.params.topics as u32).to_le_bytes());
        out.extend_from_slice(&(self.tokens.len() as u32).to_le_bytes());
        for block in &self.tokens {
            out.extend_from_slice(&(block.topics.len() as u64).to_le_bytes());
            for &z in &block.topics {
                out.extend_from_slice(&z.to_le_bytes());
            }
        }
        for &d in &self.previous_delta {
            out.extend_from_slice(&d.to_le_bytes());
        }
        Ok(out)
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<(), AppError> {
        let k = self.params.topics;
        let mut reader = StateReader { bytes: state };
        let shape = |what: &str| lda_error(format!("lda: the saved executor state {what}"));
        if &reader.take::<4>()? != STATE_MAGIC {
            return Err(shape("does not start with LDA1"));
        }
        let topics = u32::from_le_bytes(reader.take()?) as usize;
        let blocks = u32::from_le_bytes(reader.take()?) as usize;
        if topics != k || blocks != self.tokens.len() {
            return Err(shape(&format!(
                "has {topics} topics and {blocks} blocks, this job {k} and {}",
                self.tokens.len()
            )));
        }
        let mut restored = Vec::with_capacity(blocks);
        for block in &self.tokens {
            let n = u64::from_le_bytes(reader.take()?);
            if n != block.topics.len() as u64 {
                return Err(shape("does not match this executor's tokens"));
            }
            let mut topics = Vec::with_capacity(block.topics.len());
            for _ in 0..n {
                let z = u32::from_le_bytes(reader.take()?);
                if z as usize >= k {
                    return Err(shape(&format!("holds topic {z} (K = {k})")));
                }
                topics.push(z);
            }
            restored.push(topics);
        }
        let mut previous = Vec::with_capacity(k);
        for _ in 0..k {
            previous.push(i64::from_le_bytes(reader.take()?));
        }
        if !reader.bytes.is_empty() {
            return Err(shape("has bytes after its end"));
        }
        for (block, topics) in self.tokens.iter_mut().zip(restored) {
            block.topics = topics;
        }
        self.previous_delta = previous;
        self.rebuild_doc_topic();
        // A moved or resumed executor: the tables count the topics it saved.
        self.counted = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Corpus;
    use crate::lda::{LdaApp, LdaConfig};
    use harp::{App, Executor, ExecutorId, JobInfo};

    /// Tokens this machine cannot hold are refused before they are laid out, naming the
    /// executor, its documents, the corpus and both figures (a six-line docword that claims
    /// four billion tokens used to grow until the OOM killer ended the process).
    #[test]
    fn tokens_beyond_the_memory_available_are_refused_with_a_message() {
        let refused = tokens_fit((2, 1, 4_000_000_005), "hugecount.txt", Some(16 << 30));
        assert_eq!(
            refused.unwrap_err().to_string(),
            "lda: the 1 documents of executor 2 hold 4000000005 tokens (is the count column of hugecount.txt right?); that needs 44.7 GiB (12 bytes a token), more than the 16.0 GiB this machine has available"
        );
        assert!(tokens_fit((0, 1, 1 << 30), "fits", Some(12 << 30)).is_ok());
        assert!(tokens_fit((0, 1, u64::MAX), "unknown machine", None).is_ok());
    }

    /// Two executors' worth of documents over 6 words, 4 topics.
    fn tiny_app() -> LdaApp {
        let corpus = Corpus {
            doc_offsets: vec![0, 3, 5, 8, 10],
            words: vec![0, 2, 5, 1, 3, 0, 4, 5, 2, 3],
            counts: vec![2, 1, 3, 1, 2, 1, 1, 2, 3, 1],
            vocab: (0..6).map(|w| format!("w{w}")).collect(),
            source: "test".into(),
        };
        let config = LdaConfig {
            topics: 4,
            iterations: 2,
            ..LdaConfig::default()
        };
        LdaApp::new(
            config,
            std::sync::Arc::new(corpus),
            std::sync::Arc::new(crate::mlr::Quiet),
        )
        .unwrap()
    }

    fn job() -> JobInfo {
        JobInfo {
            num_executors: 2,
            num_workers: 2,
            num_servers: 1,
        }
    }

    /// The saved state with every topic moved on by one (mod K), and a totals delta.
    fn moved_on(state: &[u8], k: u32) -> Vec<u8> {
        let mut out = state.to_vec();
        let mut at = 12;
        for _ in 0..u32::from_le_bytes(state[8..12].try_into().unwrap()) {
            let n = u64::from_le_bytes(out[at..at + 8].try_into().unwrap()) as usize;
            at += 8;
            for _ in 0..n {
                let z = u32::from_le_bytes(out[at..at + 4].try_into().unwrap());
                out[at..at + 4].copy_from_slice(&((z + 1) % k).to_le_bytes());
                at += 4;
            }
        }
        out[at..at + 8].copy_from_slice(&5i64.to_le_bytes());
        out
    }

    /// A dead worker's executor made from its checkpointed state holds that state's topics
    /// (and so its documents' counts), but the tables are not taken to count them: it
    /// tolerates counts it cannot check until a resync, and its old totals delta is
    /// forgotten. Without a state it is the executor created afresh. A moved executor
    /// restored from the same state is counted.
    #[test]
    fn a_recovered_executor_holds_its_checkpointed_topics_uncounted() {
        let app = tiny_app();
        let id = ExecutorId(1);
        let fresh = app.create_executor(id, &job()).unwrap();
        let initial = fresh.save_state().unwrap();
        assert_eq!(
            app.recover_executor(id, &job(), None)
                .unwrap()
                .save_state()
                .unwrap(),
            initial
        );

        let saved = moved_on(&initial, 4);
        let recovered = app
            .recover_executor(id, &job(), Some(saved.clone()))
            .unwrap();
        assert!(!recovered.counted && recovered.tolerates_mismatch());
        assert_eq!(recovered.previous_delta, vec![0; 4]);
        let mut expected = saved.clone();
        let delta_at = expected.len() - 4 * 8;
        expected[delta_at..].fill(0);
        assert_eq!(recovered.save_state().unwrap(), expected);
        assert_ne!(expected, initial);
        assert_eq!(recovered.own_totals(), {
            let mut moved = fresh.own_totals();
            moved.rotate_right(1);
            moved
        });

        let moved = app.restore_executor(id, &job(), saved.clone()).unwrap();
        assert!(moved.counted && !moved.tolerates_mismatch());
        assert_eq!(moved.save_state().unwrap(), saved);
    }

    #[test]
    fn checksums_see_every_value_and_the_position() {
        let a = vec![1u32, 2, 3, 4, 5, 6, 7];
        let mut b = a.clone();
        assert_eq!(checksum(3, &a), checksum(3, &b));
        b[6] += 1;
        assert_ne!(checksum(3, &a), checksum(3, &b));
        assert_ne!(checksum(3, &a), checksum(4, &a));
        let mut swapped = a.clone();
        swapped.swap(0, 4);
        assert_ne!(checksum(3, &a), checksum(3, &swapped));
    }
}
