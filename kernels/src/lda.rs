//! Latent Dirichlet allocation: collapsed Gibbs sampling over token assignments.
//!
//! This module owns the hyperparameter type ([`LdaParams`]), the count layouts shared by
//! every LDA kernel, their validation, and the small random-number generator the
//! samplers draw from ([`FastRng`]). The kernels live in submodules:
//!
//! * `sweep` — [`gibbs_sweep`], the sequential collapsed Gibbs sweep (the CPU hot loop);
//! * `parallel` — [`sample_parallel`], one "parallel sampling step" where every token is
//!   sampled from the same fixed counts (the GPU kernel's contract, CPU version for
//!   conformance), and [`rebuild_counts`];
//! * `likelihood` — [`ln_gamma`] and the collapsed joint log-likelihood `log p(w, z)`;
//! * [`reference`](mod@reference) — plain `f64` versions for the tests.
//!
//! # Layouts
//! `K = params.topics`, `V = params.vocab`. Everything is flat and row-major:
//! * tokens: three parallel slices of equal length — `docs[i]` (a *local* document row
//!   index into `doc_topic`), `words[i]` (a *global* word id, `< V`) and `topics[i]`
//!   (the token's current topic, `< K`);
//! * `doc_topic`: `docs × K` `u32` counts, row `d` = topic counts of local document `d`;
//! * `word_topic`: `rows × K` `u32` counts for a *block* of consecutive words: row `r`
//!   holds word `word_base + r`. A single-machine sampler passes all `V` rows and
//!   `word_base = 0`; a model-parallel (Strads/Litz style) executor passes the rows of
//!   the vocabulary block it currently owns, and every token it samples must fall in it;
//! * `topic_totals`: `K` `u32` counts, `n_k` = number of tokens assigned to topic `k`
//!   (in model-parallel use, the executor's local copy).
//!
//! The sampling distribution of a token of document `d`, word `w`, with its own
//! assignment removed from the counts, is the standard collapsed conditional
//! `p(k) ∝ (n_dk + α)(n_wk + β) / (n_k + Vβ)` with symmetric priors `α`, `β`.
//!
//! Public functions never panic on bad input: lengths, ids and hyperparameters are
//! validated before anything is written.

mod likelihood;
mod parallel;
pub mod reference;
mod rng;
mod sweep;

pub use likelihood::{
    ln_gamma, log_likelihood, log_likelihood_docs, log_likelihood_topics, log_likelihood_words,
};
pub use parallel::{rebuild_counts, sample_parallel, PARALLEL_CHUNK};
pub use rng::{counter_uniform, FastRng};
pub use sweep::gibbs_sweep;

use crate::error::{check_len, KernelError};

/// LDA hyperparameters: `topics` (K), `vocab` (V), symmetric Dirichlet priors `alpha`
/// (document–topic) and `beta` (topic–word).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LdaParams {
    /// Number of topics K (at least 1, at most `u32::MAX`).
    pub topics: usize,
    /// Vocabulary size V (at least 1); word ids are `0..V`.
    pub vocab: usize,
    /// Document–topic prior α (finite, > 0).
    pub alpha: f32,
    /// Topic–word prior β (finite, > 0).
    pub beta: f32,
}

impl LdaParams {
    /// Checks `topics` and `vocab` are positive (and `topics` fits in `u32`), `alpha` and
    /// `beta` are finite and positive, and `V·β` is finite.
    ///
    /// # Errors
    /// [`KernelError::ZeroDimension`] for a zero `topics`/`vocab`;
    /// [`KernelError::ShapeOverflow`] if `topics > u32::MAX`;
    /// [`KernelError::InvalidHyperparameter`] naming the first bad prior.
    pub fn validate(&self) -> Result<(), KernelError> {
        if self.topics == 0 {
            return Err(KernelError::ZeroDimension { what: "topics" });
        }
        if self.vocab == 0 {
            return Err(KernelError::ZeroDimension { what: "vocab" });
        }
        if u32::try_from(self.topics).is_err() {
            return Err(KernelError::ShapeOverflow { what: "topics" });
        }
        positive("alpha", self.alpha)?;
        positive("beta", self.beta)?;
        positive("vocab * beta", self.vbeta())
    }

    /// `V·β` in `f32`, the value every single-precision kernel (CPU and CUDA) uses.
    pub fn vbeta(&self) -> f32 {
        self.vocab as f32 * self.beta
    }
}

fn positive(what: &'static str, value: f32) -> Result<(), KernelError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(KernelError::InvalidHyperparameter { what, value })
    }
}

/// The tokens to sample: `docs[i]` is the local document row of token `i` and `words[i]`
/// its global word id. The slices must have equal length (checked by every kernel).
#[derive(Clone, Copy, Debug)]
pub struct Tokens<'a> {
    /// Local document row (index into `doc_topic` rows) of each token.
    pub docs: &'a [u32],
    /// Global word id (`< V`) of each token.
    pub words: &'a [u32],
}

/// Mutable count tables (see the module docs for the layouts).
#[derive(Debug)]
pub struct CountsMut<'a> {
    /// `docs × K` document–topic counts.
    pub doc_topic: &'a mut [u32],
    /// `rows × K` word–topic counts; row `r` is word `word_base + r`.
    pub word_topic: &'a mut [u32],
    /// Global id of the word in row 0 of `word_topic`.
    pub word_base: u32,
    /// `K` topic totals.
    pub topic_totals: &'a mut [u32],
}

/// Read-only count tables (see the module docs for the layouts).
#[derive(Clone, Copy, Debug)]
pub struct Counts<'a> {
    /// `docs × K` document–topic counts.
    pub doc_topic: &'a [u32],
    /// `rows × K` word–topic counts; row `r` is word `word_base + r`.
    pub word_topic: &'a [u32],
    /// Global id of the word in row 0 of `word_topic`.
    pub word_base: u32,
    /// `K` topic totals.
    pub topic_totals: &'a [u32],
}

impl<'a> CountsMut<'a> {
    /// A read-only view of the same tables.
    pub fn as_counts(&self) -> Counts<'_> {
        Counts {
            doc_topic: self.doc_topic,
            word_topic: self.word_topic,
            word_base: self.word_base,
            topic_totals: self.topic_totals,
        }
    }
}

/// Validates the parameters, the count-table shapes and every token (lengths, document
/// rows, word ids against `V` and the word block, topics against `K`).
pub(crate) fn validate(
    params: &LdaParams,
    tokens: Tokens<'_>,
    topics: &[u32],
    counts: Counts<'_>,
) -> Result<(), KernelError> {
    params.validate()?;
    let k = params.topics;
    let n = tokens.docs.len();
    check_len("words", n, tokens.words.len())?;
    check_len("topics", n, topics.len())?;
    check_len("topic_totals", k, counts.topic_totals.len())?;
    let docs = rows_of("doc_topic", counts.doc_topic.len(), k)?;
    let word_rows = rows_of("word_topic", counts.word_topic.len(), k)?;
    if let Some(position) = tokens.docs.iter().position(|&d| d as usize >= docs) {
        return Err(out_of_range("docs", position, tokens.docs[position]));
    }
    let base = u64::from(counts.word_base);
    let block_end = (base + word_rows as u64).min(params.vocab as u64);
    if let Some(position) = tokens
        .words
        .iter()
        .position(|&w| u64::from(w) < base || u64::from(w) >= block_end)
    {
        return Err(out_of_range("words", position, tokens.words[position]));
    }
    if let Some(position) = topics.iter().position(|&z| z as usize >= k) {
        return Err(out_of_range("topics", position, topics[position]));
    }
    Ok(())
}

/// [`validate`], plus a parallel step's own inputs: one uniform in `[0, 1)` per token and
/// `new_topics` output slots, one per token.
pub(crate) fn validate_parallel(
    params: &LdaParams,
    tokens: Tokens<'_>,
    topics: &[u32],
    counts: Counts<'_>,
    uniforms: &[f32],
    new_topics: usize,
) -> Result<(), KernelError> {
    validate(params, tokens, topics, counts)?;
    let n = topics.len();
    check_len("uniforms", n, uniforms.len())?;
    check_len("new_topics", n, new_topics)?;
    check_uniforms(uniforms)
}

/// The first uniform outside `[0, 1)`, as [`KernelError::InvalidValue`].
pub(crate) fn check_uniforms(uniforms: &[f32]) -> Result<(), KernelError> {
    match uniforms.iter().position(|u| !(0.0..1.0).contains(u)) {
        Some(position) => Err(KernelError::InvalidValue {
            what: "uniforms",
            position,
        }),
        None => Ok(()),
    }
}

/// `len / k` if `len` is a multiple of `k`, else a length mismatch naming `what`.
fn rows_of(what: &'static str, len: usize, k: usize) -> Result<usize, KernelError> {
    let rows = len / k;
    check_len(what, rows * k, len)?;
    Ok(rows)
}

fn out_of_range(what: &'static str, position: usize, index: u32) -> KernelError {
    KernelError::IndexOutOfRange {
        what,
        position,
        index: u64::from(index),
    }
}
