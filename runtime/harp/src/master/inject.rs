//! Fault injection at iteration boundaries (SCAR §5.5's experiments): losing a fraction of
//! the parameters and recovering them from the running checkpoint (partially or fully),
//! resetting a fraction to their initial values, or adding a random perturbation of a given
//! norm.
//!
//! When the driver reports an iteration that has injections
//! ([`crate::scar::ScarOptions::inject`]), the master holds every micro-task the driver
//! dispatches from then on ([`MasterState::hold`]), runs [`inject`] (read every row from
//! the servers, choose rows with the fault's seed, send each server a `Reset` of its rows),
//! and only then routes the held tasks: every task after the boundary sees the fault, none
//! before it does. The checkpoint round of that iteration, if due, starts afterwards, or,
//! for a fault that strikes after it ([`crate::scar::FaultTiming::AfterRound`]), first:
//! the faults are applied once it has ended.

use super::checkpoints::{spawn_round, FaultsDue};
use super::recovery::scalar_differences;
use super::{MasterMsg, MasterState};
use crate::app::App;
use crate::error::HarpError;
use crate::scar::{Fault, Injection, InjectionReport, Recovery};
use crate::server::checkpoint_round::InTransit;
use crate::server::{dump_servers, reset_on_servers, RowsToReset, ServerMsg};
use crate::table::{initial_row, TableSet};
use harp_core::scar::{selection_count, SplitMix64};
use harp_core::{ExecutorId, KeyMap, ParamKey, RowData, ServerId, Version};
use ractor::ActorRef;
use std::sync::Arc;

/// Dispatches held back while an injection is applied, in dispatch order.
pub(crate) type Held<Args> = Vec<(Vec<(ExecutorId, Args)>, Version)>;

/// Injections that ended (internal).
pub(crate) type Injected = Result<Vec<InjectionReport>, HarpError>;

impl<A: App> MasterState<A> {
    /// Holds `dispatched` (tagged `version`) until the running injection ends; they count
    /// as in flight meanwhile, so the job does not end under them.
    pub(super) fn hold(&mut self, dispatched: Vec<(ExecutorId, A::Args)>, version: Version) {
        self.in_flight += dispatched.len() as u64;
        self.held
            .get_or_insert_with(Vec::new)
            .push((dispatched, version));
    }

    /// Starts the injections due at `iteration`, if any; says whether it did (the caller
    /// then holds what the driver dispatched). Faults that strike after the iteration's
    /// checkpoint round start once it has ended ([`MasterState::after_round_done`]).
    pub(super) fn start_injections(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        iteration: u64,
    ) -> bool {
        let Some(checkpoint) = self.checkpoint.as_mut() else {
            return false;
        };
        match checkpoint.take_faults(iteration) {
            FaultsDue::None => false,
            FaultsDue::Now(faults) => {
                self.spawn_injections(myself, faults);
                // The iteration's round runs once the faults are in place.
                self.deferred_iteration = Some(iteration);
                true
            }
            FaultsDue::AfterRound { iteration } => {
                self.held = Some(Vec::new());
                self.injecting = true;
                // Starts the round now, or is skipped while an earlier one runs: then
                // `after_round_done` starts it once that one ends.
                self.iteration_completed(myself, iteration);
                true
            }
        }
    }

    /// A checkpoint round ended: start the round that faults wait for, if it was skipped,
    /// or inject those faults, if it was theirs.
    pub(super) fn after_round_done(&mut self, myself: &ActorRef<MasterMsg<A>>) {
        let round_servers = self.round_servers();
        let Some(checkpoint) = self.checkpoint.as_mut() else {
            return;
        };
        if let Some(iteration) = checkpoint.wait_for_round() {
            if let Some(round) = checkpoint.start_round(iteration, round_servers) {
                spawn_round(myself, round);
            }
        } else if let Some(faults) = checkpoint.faults_after_round() {
            self.spawn_injections(myself, faults);
        }
    }

    fn server_list(&self) -> Vec<(ServerId, ActorRef<ServerMsg>)> {
        self.servers
            .iter()
            .map(|(id, actor)| (*id, actor.clone()))
            .collect()
    }

    /// What a checkpoint round asks now: every server, leaving out the rows the new owners
    /// of unconfirmed hand-offs report (`server::checkpoint_round::InTransit`).
    pub(super) fn round_servers(&self) -> super::checkpoints::RoundServers {
        let in_transit = self
            .unconfirmed_hand_offs
            .iter()
            .map(|(shard, (_, to))| (*shard, *to))
            .collect();
        (
            self.server_list(),
            InTransit::new(self.shards.num_shards(), in_transit),
        )
    }

    /// Holds what the driver dispatches and applies `faults` on a task of their own, with
    /// the image as it is now.
    fn spawn_injections(&mut self, myself: &ActorRef<MasterMsg<A>>, faults: Vec<Injection>) {
        let Some(checkpoint) = self.checkpoint.as_ref() else {
            return;
        };
        let image = checkpoint.image_snapshot();
        let image_round = checkpoint.last_round();
        let recovery = checkpoint.recovery();
        let servers = self.server_list();
        let tables = self.tables.clone();
        self.held.get_or_insert_with(Vec::new);
        self.injecting = true;
        let myself = myself.clone();
        crate::spawn::spawn(async move {
            let mut reports = Vec::with_capacity(faults.len());
            let mut result = Ok(());
            for injection in faults {
                match inject(&servers, &injection, &image, &tables, recovery).await {
                    Ok(report) => reports.push(InjectionReport {
                        image_round,
                        ..report
                    }),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            let _ = myself.send_message(MasterMsg::Injected(result.map(|()| reports)));
        });
    }

    /// The injections ended: route the held micro-tasks, then run the deferred iteration's
    /// checkpoint round (unless a consistent checkpoint waits to capture first; see
    /// [`MasterState::release_held`]). A failed injection ends the job.
    pub(super) fn on_injected(
        &mut self,
        myself: &ActorRef<MasterMsg<A>>,
        injected: Injected,
    ) -> Result<(), HarpError> {
        self.injecting = false;
        for report in injected? {
            tracing::info!(?report, "fault injected");
            self.events
                .tell(crate::control::JobEvent::Fault(report.clone()));
            self.injections.push(report);
        }
        self.release_held(myself)
    }
}

/// Applies one fault to the rows of `servers`; see [`Fault`].
async fn inject(
    servers: &[(ServerId, ActorRef<ServerMsg>)],
    injection: &Injection,
    image: &KeyMap<Arc<RowData>>,
    tables: &TableSet,
    recovery: Recovery,
) -> Result<InjectionReport, HarpError> {
    // Every row, with the index of the server that holds it, in key order.
    let dumps = dump_servers(servers.iter().map(|(id, server)| (*id, server.clone()))).await?;
    let mut rows: Vec<(ParamKey, RowData, usize)> = Vec::new();
    for (index, dump) in dumps.into_iter().enumerate() {
        rows.extend(dump.into_iter().map(|(key, value)| (key, value, index)));
    }
    rows.sort_unstable_by_key(|(key, _, _)| *key);

    let fault = &injection.fault;
    let mut report = InjectionReport::new(injection, recovery);
    let saved_or_initial = |key: ParamKey| -> Result<Arc<RowData>, HarpError> {
        match image.get(&key) {
            Some(value) => Ok(value.clone()),
            None => Ok(Arc::new(initial_row(tables.get(key.table)?, key.row))),
        }
    };
    // (row index, new value)
    let mut replaced: Vec<(usize, Arc<RowData>)> = Vec::new();
    match fault {
        Fault::Lose { fraction, seed } => {
            let chosen = choose(rows.len(), *fraction, *seed)?;
            report.rows_chosen = chosen.len();
            let restore: Vec<usize> = match recovery {
                Recovery::Partial => chosen,
                Recovery::Full => (0..rows.len()).collect(),
            };
            for i in restore {
                replaced.push((i, saved_or_initial(rows[i].0)?));
            }
        }
        Fault::ResetToInitial { fraction, seed } => {
            let chosen = choose(rows.len(), *fraction, *seed)?;
            report.rows_chosen = chosen.len();
            for i in chosen {
                let (key, _, _) = &rows[i];
                let spec = tables.get(key.table)?;
                replaced.push((i, Arc::new(initial_row(spec, key.row))));
            }
        }
        Fault::Perturb { norm, seed } => {
            let mut rng = SplitMix64::new(*seed);
            let mut noise: Vec<(usize, Vec<f64>)> = Vec::new();
            let mut total = 0.0;
            for (i, (_, value, _)) in rows.iter().enumerate() {
                if let RowData::F32(v) = value {
                    let n: Vec<f64> = v.iter().map(|_| gaussian(&mut rng)).collect();
                    total += n.iter().map(|x| x * x).sum::<f64>();
                    noise.push((i, n));
                }
            }
            let scale = if total > 0.0 {
                norm / total.sqrt()
            } else {
                0.0
            };
            report.rows_chosen = noise.len();
            for (i, n) in noise {
                if let RowData::F32(v) = &rows[i].1 {
                    let moved = v
                        .iter()
                        .zip(&n)
                        .map(|(x, d)| (f64::from(*x) + d * scale) as f32)
                        .collect();
                    replaced.push((i, Arc::new(RowData::F32(moved))));
                }
            }
        }
    }

    let mut squared = 0.0;
    let mut per_server: Vec<RowsToReset> = vec![Vec::new(); servers.len()];
    for (i, value) in replaced {
        let (key, old, server) = &rows[i];
        squared += scalar_differences(old, &value).map(|d| d * d).sum::<f64>();
        per_server[*server].push((*key, Some(value)));
        report.rows_replaced += 1;
    }
    report.perturbation_l2 = squared.sqrt();
    reset_on_servers(
        servers
            .iter()
            .zip(per_server)
            .map(|((id, server), rows)| (*id, server.clone(), rows)),
    )
    .await?;
    Ok(report)
}

/// `⌈fraction·n⌉` distinct indices of `0..n`, uniform at random from `seed`, ascending.
fn choose(n: usize, fraction: f64, seed: u64) -> Result<Vec<usize>, HarpError> {
    let k = selection_count(n, fraction)
        .map_err(|e| HarpError::InvalidConfig(format!("SCAR fault injection: {e}")))?;
    let mut rng = SplitMix64::new(seed);
    let mut order: Vec<usize> = (0..n).collect();
    for i in 0..k.min(n) {
        let j = i + rng.below((n - i) as u64) as usize;
        order.swap(i, j);
    }
    order.truncate(k.min(n));
    order.sort_unstable();
    Ok(order)
}

/// A standard normal draw (Box–Muller).
fn gaussian(rng: &mut SplitMix64) -> f64 {
    let unit = |rng: &mut SplitMix64| ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let (u, v) = (unit(rng), unit(rng));
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choose_draws_the_ceiling_of_the_fraction_without_repeats() {
        for n in [1usize, 2, 7, 100, 1000] {
            for fraction in [0.01, 0.25, 0.5, 0.75, 1.0] {
                let chosen = choose(n, fraction, 42).unwrap();
                let want = ((fraction * n as f64) - 1e-9).ceil().max(1.0) as usize;
                assert_eq!(chosen.len(), want.min(n), "n={n} r={fraction}");
                assert!(chosen.windows(2).all(|w| w[0] < w[1]));
                assert!(chosen.iter().all(|i| *i < n));
                assert_eq!(chosen, choose(n, fraction, 42).unwrap(), "seeded");
            }
        }
        assert_ne!(choose(1000, 0.5, 1).unwrap(), choose(1000, 0.5, 2).unwrap());
        assert!(choose(10, 0.0, 1).is_err());
    }

    #[test]
    fn gaussian_draws_have_mean_zero_and_unit_variance() {
        let mut rng = SplitMix64::new(7);
        let draws: Vec<f64> = (0..100_000).map(|_| gaussian(&mut rng)).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let var = draws.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / draws.len() as f64;
        assert!(mean.abs() < 0.02, "{mean}");
        assert!((var - 1.0).abs() < 0.03, "{var}");
    }
}
