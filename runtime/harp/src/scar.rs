//! SCAR in a running job (SCAR §5.4, DESIGN §2.4): the options of the running checkpoint,
//! what it did, and the report of each partial recovery.
//!
//! A job with [`ScarOptions`] (`JobConfig::scar`) keeps a running checkpoint: every
//! `r·C` iterations the driver reports (`DriverContext::iteration_completed`), the master
//! runs one checkpoint round over the servers (`server::checkpoint_round`) without stopping
//! training, and keeps every saved row (the checkpoint's image). When a server fails, only
//! its shards are re-created on the live servers from that image ([`ServerRecovery`]).
//! The rounds, their failures and their bytes are counted in [`CheckpointStats`].

use crate::error::HarpError;
/// The statistics of SCAR's experiments (rework cost and its confidence intervals).
pub use harp_core::scar::{
    checkpoint_schedule, due, fractional_rework_cost, iterations_to_reach,
    mean_confidence_interval, rework_cost, ConvergenceCriterion, ReworkCost, SplitMix64,
};
use harp_core::scar::{RecoveryReport, Selection};

/// How a job keeps SCAR's running checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct ScarOptions {
    /// `C`: a full checkpoint's period in iterations (the budget: the saved bytes per
    /// iteration of a full checkpoint every `C` iterations).
    pub period: u64,
    /// `r` in `(0, 1]`: each round saves this fraction of the rows, every `r·C` iterations.
    pub fraction: f64,
    /// Which rows a round saves.
    pub selection: Selection,
    /// What an injected loss of parameters restores ([`Fault::Lose`]).
    pub recovery: Recovery,
    /// Failures and perturbations to inject, each at the end of an iteration (SCAR §5.5's
    /// experiments).
    pub inject: Vec<Injection>,
}

/// What is restored from the running checkpoint when parameters are lost (SCAR §5.4.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum Recovery {
    /// Only the lost parameters (SCAR's partial recovery).
    #[default]
    Partial,
    /// Every parameter, as a traditional checkpoint recovery does (for comparison).
    Full,
}

/// A fault injected when the driver reports iteration `at_iteration` complete: applied
/// before any micro-task the driver dispatches from then on runs (those wait for it).
#[derive(Clone, Debug, PartialEq)]
pub struct Injection {
    pub at_iteration: u64,
    pub fault: Fault,
    /// Whether it strikes before or after that iteration's checkpoint round.
    pub timing: FaultTiming,
}

/// When an injected fault strikes, against the checkpoint round due at the end of its
/// iteration. A real failure strikes at some moment of an iteration; these are the two ends
/// of that interval, and a rework cost measured at both brackets it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum FaultTiming {
    /// Before the round (a failure at the very end of the iteration): the image it
    /// recovers from is one round older than the iteration.
    #[default]
    BeforeRound,
    /// After the round has saved (a failure at the very start of the next iteration): the
    /// image includes what that round saved. A round that is not due at that iteration
    /// changes nothing; one that was skipped because an earlier round still ran is run
    /// first, once that round ends.
    AfterRound,
}

/// What an [`Injection`] does to the parameters (each choice of rows is uniform at random,
/// drawn from `seed`, over every row the servers hold).
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Lose the fraction `fraction` of the rows and recover as [`ScarOptions::recovery`]
    /// says: the lost rows (partial) or every row (full) go back to their value in the
    /// running checkpoint (their initial value if never saved).
    Lose { fraction: f64, seed: u64 },
    /// Reset the fraction `fraction` of the rows to their initial values (SCAR Fig. 5.6).
    ResetToInitial { fraction: f64, seed: u64 },
    /// Add to the `f32` rows a random Gaussian direction scaled to this L2 norm (SCAR
    /// Fig. 5.5a).
    Perturb { norm: f64, seed: u64 },
}

impl Fault {
    /// Refuses fractions outside `(0, 1]` and norms that are negative or not finite.
    pub fn validate(&self) -> Result<(), HarpError> {
        let ok = match self {
            Fault::Lose { fraction, .. } | Fault::ResetToInitial { fraction, .. } => {
                *fraction > 0.0 && *fraction <= 1.0
            }
            Fault::Perturb { norm, .. } => norm.is_finite() && *norm >= 0.0,
        };
        if ok {
            return Ok(());
        }
        let (name, why) = match self {
            Fault::Lose { fraction, .. } | Fault::ResetToInitial { fraction, .. } => (
                self.name(),
                format!("a fraction of {fraction}: it must be in (0, 1]"),
            ),
            Fault::Perturb { norm, .. } => (
                self.name(),
                format!("a norm of {norm}: it must be finite and at least 0"),
            ),
        };
        Err(HarpError::InvalidConfig(format!(
            "SCAR fault injection: {name} with {why}"
        )))
    }

    fn name(&self) -> &'static str {
        match self {
            Fault::Lose { .. } => "lose",
            Fault::ResetToInitial { .. } => "reset-to-initial",
            Fault::Perturb { .. } => "perturb",
        }
    }
}

/// What one injection did.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct InjectionReport {
    /// Always `"fault"`, to tell these metrics lines from the app's.
    pub event: &'static str,
    pub at_iteration: u64,
    /// `"lose"`, `"reset-to-initial"` or `"perturb"`.
    pub fault: &'static str,
    /// For a loss: the recovery that followed.
    pub recovery: Option<Recovery>,
    /// Rows the fault chose (lost, reset, perturbed).
    pub rows_chosen: usize,
    /// Rows whose value was replaced (for a full recovery: every row).
    pub rows_replaced: usize,
    /// `‖new − old‖₂` over every scalar replaced: the size of the perturbation.
    pub perturbation_l2: f64,
    /// Whether it struck before or after its iteration's checkpoint round.
    pub timing: FaultTiming,
    /// The iteration of the last checkpoint round that had ended when the fault struck:
    /// the image a loss recovers from (`None`: no round yet, every row at its initial
    /// value). A round saves while training goes on, so it may hold updates of later
    /// iterations too.
    pub image_round: Option<u64>,
}

impl InjectionReport {
    pub(crate) fn new(injection: &Injection, recovery: Recovery) -> Self {
        let fault = &injection.fault;
        Self {
            event: "fault",
            at_iteration: injection.at_iteration,
            timing: injection.timing,
            fault: fault.name(),
            recovery: matches!(fault, Fault::Lose { .. }).then_some(recovery),
            rows_chosen: 0,
            rows_replaced: 0,
            perturbation_l2: 0.0,
            image_round: None,
        }
    }
}

impl Default for ScarOptions {
    fn default() -> Self {
        Self {
            period: 8,
            fraction: 0.125,
            selection: Selection::Priority,
            recovery: Recovery::Partial,
            inject: Vec::new(),
        }
    }
}

impl ScarOptions {
    /// The interval between rounds in iterations (`r·C`, at least 1); refuses a fraction
    /// outside `(0, 1]` or a period of 0.
    pub fn interval(&self) -> Result<u64, HarpError> {
        checkpoint_schedule(self.period, self.fraction)
            .map_err(|e| HarpError::InvalidConfig(format!("SCAR checkpoints: {e}")))
    }

    /// Refuses an invalid interval or injection.
    pub fn validate(&self) -> Result<(), HarpError> {
        self.interval()?;
        for injection in &self.inject {
            injection.fault.validate()?;
        }
        Ok(())
    }
}

/// What the running checkpoint did during a job.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct CheckpointStats {
    /// Rounds that ran to their end (each server saved its rows, or its save failed).
    pub rounds: u64,
    /// Saves of one server within those rounds that failed (the server unreachable, or its
    /// answer lost): that server's rows stay at their previous saved values.
    pub saves_failed: u64,
    /// Rounds that failed before saving (a server unreachable, e.g. a failed one).
    pub rounds_failed: u64,
    /// Rounds due while the previous one still ran (not run; the next due one is).
    pub rounds_skipped: u64,
    /// Rounds still running when the job ended that did not end within the wait the job
    /// gives them (5 s after the driver finished; a round normally takes milliseconds):
    /// what they saved is not counted here. A job whose driver finishes while a round
    /// runs waits for that round, so a round due at the last iteration is counted.
    pub rounds_unfinished: u64,
    /// Rows saved over all rounds (a row saved twice counts twice).
    pub rows_saved: u64,
    /// Bytes of the saved values over all rounds.
    pub bytes_saved: u64,
    /// Rows the checkpoint holds a saved value for now (the others are at their initial
    /// value in it).
    pub rows_held: usize,
    /// The last iteration the driver reported complete.
    pub last_iteration: Option<u64>,
}

/// One partial recovery: a failed server's shards re-created on the live servers from the
/// running checkpoint (SCAR §5.4.1).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ServerRecovery {
    /// The server that failed.
    pub server: u32,
    /// `(shard, new server)` for each of its shards.
    pub shards: Vec<(u32, u32)>,
    /// Rows re-created at their saved value (the others start again at their initial
    /// value).
    pub rows_restored: usize,
    /// Bytes of those rows.
    pub bytes_restored: u64,
    /// Seconds from the job's start to the master handling the failure.
    pub detected_at_s: f64,
    /// Seconds from the failure being handled to the shards being served again.
    pub duration_s: f64,
    /// The perturbation, when the values at the failure are known (an injected failure
    /// answers with them; a process that died does not): every row the server held,
    /// compared with what replaced it (its saved value, or its initial value if it was
    /// never saved).
    pub lost: Option<LostValues>,
}

/// How far a recovery moved the lost rows, when their values at the failure are known.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LostValues {
    /// Per table (by name): the distance between the values at the failure and the
    /// restored ones, in the table's norm (see [`RecoveryReport`]).
    pub tables: Vec<(String, RecoveryReport)>,
    /// `Σ (value at failure − restored value)` over every scalar of the lost rows: for
    /// tables updated by addition only, the sum of the updates the failure lost.
    pub lost_sum: f64,
}

/// One worker node's death survived (`ClusterOptions::worker_recovery`, jobs across
/// processes): its executors re-created on the live workers and every micro-task of theirs
/// whose updates were not committed dispatched again, so each update is applied exactly
/// once (DESIGN §4, G2).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WorkerRecovery {
    /// The node (its worker has the same id) that died.
    pub node: u32,
    /// How the master learnt it (its lease expired, its link closed, etcd reported it).
    pub cause: String,
    /// `(executor, new worker)` for each executor it hosted, made again there.
    pub executors: Vec<(u32, u32)>,
    /// `(executor, checkpoint)` for each of them made from its state in that consistent
    /// checkpoint (a job that writes them, `App::recover_executor`); the others were
    /// created afresh.
    pub restored_from_checkpoint: Vec<(u32, u64)>,
    /// Micro-tasks dispatched again (their flush was not committed when it died).
    pub tasks_rerun: usize,
    /// Seconds from the job's start to the master handling the death.
    pub detected_at_s: f64,
    /// Seconds from handling the death to every executor running on its new worker.
    pub duration_s: f64,
}
