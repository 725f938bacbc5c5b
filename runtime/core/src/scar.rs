//! SCAR's checkpoint decisions: which parameters a running checkpoint saves, what a partial
//! recovery restores, and the statistics SCAR's experiments report (SCAR §5.4, §5.5;
//! DESIGN §2.4).
//!
//! SCAR keeps a *running checkpoint*: persistent storage holds, for every parameter (one row
//! of a table, a [`ParamKey`]), its last saved value; it starts as the initial values
//! `w⁽⁰⁾` (§5.4.2). Every `r·C` iterations the checkpoint coordinator gathers from every
//! shard the distance of each parameter from its saved value, picks a fraction `r` of all
//! parameters, and those are saved (§5.4.3, "Actions During a Checkpoint").
//! When servers fail, only their parameters are restored from the running checkpoint; every
//! other parameter keeps its live value (partial recovery, §5.4.1).
//!
//! This module owns the *decisions* only, as pure functions and one small state machine. It
//! does no IO, reads no clock and draws no OS randomness: random selection is seeded by the
//! caller. Reading rows, writing checkpoints and re-creating shards is the shell's job.
//!
//! | item | owns | SCAR |
//! |---|---|---|
//! | [`Norm`], [`distance`] | distance between a row's current and saved values | §5.4.2, §5.5.1 |
//! | [`CheckpointSelector`], [`Selection`] | which keys a checkpoint round saves: priority, round-robin, random, full | §5.4.2, §5.5.4 |
//! | [`selection_count`] | how many keys a round saves: `⌈r·n⌉` | §5.4.2 |
//! | [`checkpoint_schedule`], [`due`] | the budget rule: save `r` of the parameters every `r·C` iterations | §5.4.2, §5.5.4 |
//! | [`plan_recovery`], [`recovery_report`] | partial recovery: the restore set and the size of the perturbation it causes | §5.4.1 |
//! | [`rework_cost`], [`iterations_to_reach`], [`fractional_rework_cost`] | rework cost of a perturbed run against the failure-free run (whole or interpolated iterations) | §5.3.1, §5.5 |
//! | [`mean_confidence_interval`], [`student_t_quantile`] | the 95% error bars of Figs. 5.7–5.10 | §5.5.3, §5.5.4 |
//!
//! Every function that can be handed invalid input returns a [`ScarError`]; a
//! [`CheckpointSelector`] that refuses an input is left unchanged.

mod distance;
mod interval;
mod recovery;
mod rework;
mod select;

pub use distance::{distance, Norm};
pub use interval::{mean_confidence_interval, student_t_quantile};
pub use recovery::{plan_recovery, recovery_report, RecoveryPlan, RecoveryReport};
pub use rework::{
    fractional_iterations_to_reach, fractional_rework_cost, iterations_to_reach, rework_cost,
    ConvergenceCriterion, ReworkCost,
};
pub use select::{
    checkpoint_schedule, due, selection_count, CheckpointSelector, Selection, SplitMix64,
};

use crate::ids::ParamKey;
use crate::rows::RowKind;

/// An input the SCAR logic refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScarError {
    #[error("cannot compare rows: the current value is {current_kind:?} of width {current_width} but the saved value is {saved_kind:?} of width {saved_width}")]
    RowMismatch {
        current_kind: RowKind,
        current_width: usize,
        saved_kind: RowKind,
        saved_width: usize,
    },
    #[error("the {row} row holds a non-finite value ({value}) at index {index}")]
    NonFiniteValue {
        row: &'static str,
        index: usize,
        value: f64,
    },
    #[error("scaled total variation needs non-negative counts, but the {row} row holds {value} at index {index}")]
    NotADistribution {
        row: &'static str,
        index: usize,
        value: f64,
    },
    #[error("parameter {key}: {source}")]
    AtKey {
        key: ParamKey,
        #[source]
        source: Box<ScarError>,
    },
    #[error("the checkpoint fraction r must be in (0, 1], got {0}")]
    InvalidFraction(f64),
    #[error("the full-checkpoint period C must be at least 1 iteration")]
    ZeroPeriod,
    #[error("the distance of parameter {key} must be a finite number >= 0, got {distance}")]
    InvalidDistance { key: ParamKey, distance: f64 },
    #[error("parameter {0} is listed more than once")]
    DuplicateKey(ParamKey),
    #[error("no samples were given")]
    EmptySamples,
    #[error("a confidence interval needs at least 2 samples, got {0}")]
    TooFewSamples(usize),
    #[error("sample {index} is not a finite number ({value})")]
    NonFiniteSample { index: usize, value: f64 },
    #[error("the confidence level must be in (0, 1), got {0}")]
    InvalidLevel(f64),
    #[error("the probability must be in (0, 1), got {0}")]
    InvalidProbability(f64),
    #[error("Student's t distribution needs at least 1 degree of freedom")]
    ZeroDegreesOfFreedom,
    #[error("the {run} run's loss curve is empty")]
    EmptyLosses { run: &'static str },
    #[error("the convergence criterion must be a finite loss, got {0}")]
    InvalidCriterion(f64),
    #[error("the failure-free run never reaches the convergence criterion {criterion}, so the rework cost is undefined")]
    BaselineNotReached { criterion: f64 },
}

impl ScarError {
    /// Wraps `self` with the parameter it concerns.
    pub(crate) fn at(self, key: ParamKey) -> ScarError {
        ScarError::AtKey {
            key,
            source: Box::new(self),
        }
    }
}
