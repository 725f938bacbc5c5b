//! `harp-scar --figure overhead`: what SCAR's running checkpoint costs a failure-free job —
//! MLR's epoch time with checkpoints on (prioritized, fraction `r`, every `r·C` iterations)
//! against off, the two runs interleaved `--repeats` times so that both see the same machine.
//!
//! Whole runs of this job differ by up to ±10% on a shared machine whatever they do, so a
//! 1% effect needs many pairs ([`pair_ratios`], reported with a confidence interval) or a
//! comparison inside one run: [`round_epoch_ratios`] reads a run whose rounds come every
//! *other* iteration and compares each epoch a round ran in with its two neighbours, which
//! ran none. That ratio is what a round costs one epoch, so it is the overhead of a round
//! every iteration, measured without the run-to-run noise.

use anyhow::{anyhow, Result};

/// One run's seconds per epoch (the mean over all but its first epoch, which also pays for
/// start-up), its median epoch (robust to a few slow epochs) and its checkpoint rounds.
pub struct EpochTiming {
    pub seconds_per_epoch: f64,
    pub median_epoch_s: f64,
    pub rounds: u64,
}

/// The middle value (mean of the two middle ones for an even count).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Seconds per epoch from the driver's cumulative `elapsed_s` after each epoch.
pub fn seconds_per_epoch(elapsed_after_epoch: &[f64]) -> Result<f64> {
    match (elapsed_after_epoch.first(), elapsed_after_epoch.last()) {
        (Some(first), Some(last)) if elapsed_after_epoch.len() >= 2 => {
            Ok((last - first) / (elapsed_after_epoch.len() - 1) as f64)
        }
        _ => Err(anyhow!("an overhead run needs at least 2 epochs")),
    }
}

/// The epoch durations after the first, from the driver's cumulative `elapsed_s` after
/// each epoch; an error for fewer than 2 epochs.
fn epoch_durations(elapsed_after_epoch: &[f64]) -> Result<Vec<f64>> {
    let epochs: Vec<f64> = elapsed_after_epoch
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .collect();
    if epochs.is_empty() {
        return Err(anyhow!("an overhead run needs at least 2 epochs"));
    }
    Ok(epochs)
}

/// The median of the epoch durations after the first.
pub fn median_epoch(elapsed_after_epoch: &[f64]) -> Result<f64> {
    Ok(median(&mut epoch_durations(elapsed_after_epoch)?))
}

/// The epoch durations after the first at each quantile of `quantiles` (in `[0, 1]`, the
/// nearest rank), for `--side`'s per-run spread.
pub fn epoch_quantiles(elapsed_after_epoch: &[f64], quantiles: &[f64]) -> Result<Vec<f64>> {
    let mut epochs = epoch_durations(elapsed_after_epoch)?;
    epochs.sort_by(f64::total_cmp);
    let last = epochs.len() - 1; // at least one epoch: checked above
    Ok(quantiles
        .iter()
        .map(|q| epochs[((last as f64 * q.clamp(0.0, 1.0)).round() as usize).min(last)])
        .collect())
}

/// The ratio of the medians of the runs' mean epochs, with checkpoints on over off, and
/// both medians.
pub fn overhead_ratio(on: &[EpochTiming], off: &[EpochTiming]) -> (f64, f64, f64) {
    ratio_of_medians(on, off, |t| t.seconds_per_epoch)
}

/// The same for the runs' median epochs.
pub fn median_epoch_ratio(on: &[EpochTiming], off: &[EpochTiming]) -> f64 {
    ratio_of_medians(on, off, |t| t.median_epoch_s).0
}

/// Per repeat, the run with checkpoints over the run without (mean epochs).
pub fn pair_ratios(on: &[EpochTiming], off: &[EpochTiming]) -> Vec<f64> {
    on.iter()
        .zip(off)
        .map(|(on, off)| on.seconds_per_epoch / off.seconds_per_epoch)
        .collect()
}

/// From the driver's cumulative `elapsed_s` after each epoch (epoch `i + 1` at index `i`) of
/// a run whose checkpoint round is due after every `interval`-th iteration (an iteration is an
/// epoch): for each epoch that a round overlapped (the one after a due iteration) and whose
/// two neighbours none did, its duration over the mean of theirs. The first epoch (start-up)
/// is never a neighbour. Empty for an interval below 2 (no epoch without a round).
pub fn round_epoch_ratios(elapsed_after_epoch: &[f64], interval: u64) -> Vec<f64> {
    if interval < 2 {
        return Vec::new();
    }
    // durations[j] is epoch j + 2's (epoch 1 includes start-up).
    let durations: Vec<f64> = elapsed_after_epoch
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .collect();
    let epoch_of = |j: usize| j as u64 + 2;
    let after_round = |epoch: u64| epoch >= 2 && harp::scar::due(epoch - 1, interval);
    (1..durations.len().saturating_sub(1))
        .filter(|&j| after_round(epoch_of(j)))
        .filter(|&j| !after_round(epoch_of(j - 1)) && !after_round(epoch_of(j + 1)))
        .map(|j| durations[j] / ((durations[j - 1] + durations[j + 1]) / 2.0))
        .collect()
}

fn ratio_of_medians(
    on: &[EpochTiming],
    off: &[EpochTiming],
    figure: fn(&EpochTiming) -> f64,
) -> (f64, f64, f64) {
    let mut on: Vec<f64> = on.iter().map(figure).collect();
    let mut off: Vec<f64> = off.iter().map(figure).collect();
    let (on, off) = (median(&mut on), median(&mut off));
    (on / off, on, off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn seconds_per_epoch_leaves_the_first_epoch_out() {
        // The first epoch ends at 5 s (start-up), then one epoch per 0.5 s.
        let elapsed = [5.0, 5.5, 6.0, 6.5];
        assert!((seconds_per_epoch(&elapsed).unwrap() - 0.5).abs() < 1e-12);
        assert!(seconds_per_epoch(&[1.0]).is_err());
    }

    #[test]
    fn median_epoch_ignores_the_first_epoch_and_a_slow_one() {
        // Start-up to 5 s, then epochs of 0.5, 0.5, 3.0 (a stall) and 0.5 s.
        let elapsed = [5.0, 5.5, 6.0, 9.0, 9.5];
        assert!((median_epoch(&elapsed).unwrap() - 0.5).abs() < 1e-12);
        assert!(median_epoch(&[1.0]).is_err());
    }

    #[test]
    fn epoch_quantiles_take_the_nearest_rank_after_the_first_epoch() {
        // Start-up to 5 s, then epochs of 0.5, 0.1, 0.3, 0.2 and 0.4 s.
        let elapsed = [5.0, 5.5, 5.6, 5.9, 6.1, 6.5];
        let q = epoch_quantiles(&elapsed, &[0.0, 0.5, 1.0]).unwrap();
        let expected = [0.1, 0.3, 0.5];
        for (got, want) in q.iter().zip(expected) {
            assert!((got - want).abs() < 1e-9, "{q:?} against {expected:?}");
        }
        assert!(epoch_quantiles(&[1.0], &[0.5]).is_err());
    }

    #[test]
    fn round_epochs_are_compared_with_their_neighbours() {
        // Rounds due after even iterations: they overlap epochs 3, 5, 7. Epochs last 1 s,
        // those with a round 1.1 s, except epoch 5 at 1.3 s; epoch 1 ends at 10 s.
        let durations = [1.0, 1.1, 1.0, 1.3, 1.0, 1.1, 1.0];
        let mut elapsed = vec![10.0];
        for d in durations {
            elapsed.push(elapsed[elapsed.len() - 1] + d);
        }
        let ratios = round_epoch_ratios(&elapsed, 2);
        assert_eq!(ratios.len(), 3, "{ratios:?}");
        for (ratio, want) in ratios.iter().zip([1.1, 1.3, 1.1]) {
            assert!((ratio - want).abs() < 1e-9, "{ratios:?}");
        }
        // Every third iteration: epochs 4 and 7 after a round; epoch 8 is the last.
        let ratios = round_epoch_ratios(&elapsed, 3);
        assert_eq!(ratios.len(), 2, "{ratios:?}");
        assert!((ratios[0] - 1.0 / 1.2).abs() < 1e-9, "{ratios:?}");
        // Without epoch 8, epoch 7 has one neighbour and is left out.
        assert_eq!(round_epoch_ratios(&elapsed[..7], 3).len(), 1);
        // A round every iteration leaves no epoch to compare with.
        assert!(round_epoch_ratios(&elapsed, 1).is_empty());
        assert!(round_epoch_ratios(&elapsed[..2], 2).is_empty());
    }

    #[test]
    fn pair_ratios_divide_each_repeat() {
        let t = |s| EpochTiming {
            seconds_per_epoch: s,
            median_epoch_s: s,
            rounds: 0,
        };
        let ratios = pair_ratios(&[t(1.1), t(2.0)], &[t(1.0), t(2.5)]);
        assert!((ratios[0] - 1.1).abs() < 1e-12 && (ratios[1] - 0.8).abs() < 1e-12);
    }

    #[test]
    fn ratio_is_on_over_off() {
        let t = |s| EpochTiming {
            seconds_per_epoch: s,
            median_epoch_s: s,
            rounds: 0,
        };
        let (ratio, on, off) = overhead_ratio(&[t(1.1), t(1.0), t(5.0)], &[t(1.0), t(0.9), t(1.1)]);
        assert_eq!((on, off), (1.1, 1.0));
        assert!((ratio - 1.1).abs() < 1e-12);
        // The median-epoch ratio reads the runs' median epochs, not their means.
        let m = |mean, median| EpochTiming {
            seconds_per_epoch: mean,
            median_epoch_s: median,
            rounds: 0,
        };
        let ratio = median_epoch_ratio(&[m(9.0, 1.2)], &[m(1.0, 1.0)]);
        assert!((ratio - 1.2).abs() < 1e-12);
    }
}
