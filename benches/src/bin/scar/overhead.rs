//! `harp-scar --figure overhead`: what SCAR's running checkpoint costs a failure-free job —
//! MLR's epoch time with checkpoints on (prioritized, fraction `r`, every `r·C` iterations)
//! against off, the two runs interleaved `--repeats` times so that both see the same machine.

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

/// The median of the epoch durations after the first, from the driver's cumulative
/// `elapsed_s` after each epoch.
pub fn median_epoch(elapsed_after_epoch: &[f64]) -> Result<f64> {
    let mut epochs: Vec<f64> = elapsed_after_epoch
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .collect();
    if epochs.is_empty() {
        return Err(anyhow!("an overhead run needs at least 2 epochs"));
    }
    Ok(median(&mut epochs))
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
