//! [`ln_gamma`] and the collapsed joint log-likelihood `log p(w, z)` of an LDA state.
//!
//! The joint is the one the Python `lda` package (and most collapsed-Gibbs LDA codes)
//! report, with symmetric priors:
//!
//! ```text
//! log p(w, z) = Σ_k [ lnΓ(Vβ) − lnΓ(n_k + Vβ) ] + Σ_k Σ_w [ lnΓ(n_wk + β) − lnΓ(β) ]     (log p(w | z))
//!             + Σ_d [ lnΓ(Kα) − lnΓ(n_d + Kα) ] + Σ_d Σ_k [ lnΓ(n_dk + α) − lnΓ(α) ]     (log p(z))
//! ```
//!
//! It is split into three sums so that model-parallel executors can each add up the
//! part they hold ([`log_likelihood_words`] per vocabulary block,
//! [`log_likelihood_docs`] per document partition, [`log_likelihood_topics`] once)
//! and the driver adds the parts. Zero counts contribute 0 to the word and
//! document-topic sums, so any set of word rows holding every nonzero row gives the
//! full word sum. Divide by the number of tokens for the usual per-token figure.

use super::LdaParams;
use crate::error::{check_len, KernelError};

/// `ln Γ(x)` for `x > 0`, to about 1e-14 absolute (relative for large `x`); NaN for
/// `x <= 0` or NaN, `+∞` for `x = +∞`.
///
/// Shifts `x` up to at least 15 with the recurrence `Γ(x+1) = xΓ(x)`, then uses
/// Stirling's series with terms through `x⁻¹³`.
pub fn ln_gamma(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 {
        return f64::NAN;
    }
    if x == f64::INFINITY {
        return f64::INFINITY;
    }
    let mut y = x;
    let mut product = 1.0f64;
    while y < 15.0 {
        product *= y;
        y += 1.0;
    }
    stirling(y) - product.ln()
}

/// Stirling's series for `ln Γ(y)`, `y >= 15`.
fn stirling(y: f64) -> f64 {
    const HALF_LN_2PI: f64 = 0.918_938_533_204_672_8;
    // B_{2m} / (2m (2m − 1)) for m = 1..=7.
    const C: [f64; 7] = [
        1.0 / 12.0,
        -1.0 / 360.0,
        1.0 / 1260.0,
        -1.0 / 1680.0,
        1.0 / 1188.0,
        -691.0 / 360_360.0,
        1.0 / 156.0,
    ];
    let inv = 1.0 / y;
    let inv2 = inv * inv;
    let mut series = 0.0;
    for &c in C.iter().rev() {
        series = series * inv2 + c;
    }
    (y - 0.5) * y.ln() - y + HALF_LN_2PI + series * inv
}

/// `Σ_w Σ_k [lnΓ(n_wk + β) − lnΓ(β)]` over the given word rows (any block; zero counts
/// contribute 0).
///
/// # Errors
/// [`LdaParams::validate`]'s errors; [`KernelError::LengthMismatch`] if `word_topic` is
/// not a whole number of `K`-wide rows.
pub fn log_likelihood_words(params: &LdaParams, word_topic: &[u32]) -> Result<f64, KernelError> {
    params.validate()?;
    whole_rows("word_topic", word_topic.len(), params.topics)?;
    Ok(count_sum(word_topic, f64::from(params.beta)))
}

/// `Σ_k [lnΓ(Vβ) − lnΓ(n_k + Vβ)]`.
///
/// # Errors
/// [`LdaParams::validate`]'s errors; [`KernelError::LengthMismatch`] if `topic_totals`
/// is not `K` long.
pub fn log_likelihood_topics(params: &LdaParams, topic_totals: &[u32]) -> Result<f64, KernelError> {
    params.validate()?;
    check_len("topic_totals", params.topics, topic_totals.len())?;
    let vbeta = params.vocab as f64 * f64::from(params.beta);
    let base = ln_gamma(vbeta);
    Ok(topic_totals
        .iter()
        .map(|&n| base - ln_gamma(f64::from(n) + vbeta))
        .sum())
}

/// `Σ_d ([lnΓ(Kα) − lnΓ(n_d + Kα)] + Σ_k [lnΓ(n_dk + α) − lnΓ(α)])` over the given
/// document rows, `n_d = Σ_k n_dk`. Every row counts, including empty documents
/// (whose term is 0).
///
/// # Errors
/// [`LdaParams::validate`]'s errors; [`KernelError::LengthMismatch`] if `doc_topic` is
/// not a whole number of `K`-wide rows.
pub fn log_likelihood_docs(params: &LdaParams, doc_topic: &[u32]) -> Result<f64, KernelError> {
    params.validate()?;
    let k = params.topics;
    whole_rows("doc_topic", doc_topic.len(), k)?;
    let alpha = f64::from(params.alpha);
    let kalpha = k as f64 * alpha;
    let base = ln_gamma(kalpha);
    let mut sum = 0.0;
    for row in doc_topic.chunks_exact(k) {
        let n_d: u64 = row.iter().map(|&n| u64::from(n)).sum();
        sum += base - ln_gamma(n_d as f64 + kalpha);
    }
    Ok(sum + count_sum(doc_topic, alpha))
}

/// The full joint `log p(w, z)`: the sum of the three parts. `word_topic` must hold
/// every word row with a nonzero count (any `word_base`); `doc_topic` every document.
///
/// # Errors
/// As the three parts.
pub fn log_likelihood(
    params: &LdaParams,
    doc_topic: &[u32],
    word_topic: &[u32],
    topic_totals: &[u32],
) -> Result<f64, KernelError> {
    let words = log_likelihood_words(params, word_topic)?;
    let topics = log_likelihood_topics(params, topic_totals)?;
    let docs = log_likelihood_docs(params, doc_topic)?;
    Ok(words + topics + docs)
}

/// `Σ [lnΓ(n + prior) − lnΓ(prior)]` over the nonzero counts. Small counts (the vast
/// majority) use `lnΓ(n + a) − lnΓ(a) = Σ_{j<n} ln(a + j)` from a table.
fn count_sum(counts: &[u32], prior: f64) -> f64 {
    const TABLE: usize = 64;
    let mut table = [0.0f64; TABLE];
    for n in 1..TABLE {
        table[n] = table[n - 1] + (prior + (n - 1) as f64).ln();
    }
    let base = ln_gamma(prior);
    let mut sum = 0.0;
    for &n in counts {
        let n = n as usize;
        if n < TABLE {
            sum += table[n];
        } else {
            sum += ln_gamma(n as f64 + prior) - base;
        }
    }
    sum
}

fn whole_rows(what: &'static str, len: usize, k: usize) -> Result<(), KernelError> {
    check_len(what, len / k * k, len)
}
