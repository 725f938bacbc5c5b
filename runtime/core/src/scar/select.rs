//! Which parameters a checkpoint round saves, and how often rounds happen (SCAR §5.4.2,
//! §5.5.4).
//!
//! A round is given every candidate parameter with its distance from its saved value (the
//! union of what the shards reported, §5.4.3 steps 1–2) and the fraction `r`, and picks
//! [`selection_count`]`(n, r) = ⌈r·n⌉` keys (step 3). The strategies are the three of the
//! Fig. 5.9 experiment plus full checkpoints.

use super::ScarError;
use crate::ids::ParamKey;
use crate::key_hash::mix64;
use serde::{Deserialize, Serialize};

/// How a checkpoint round chooses the keys it saves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Selection {
    /// SCAR's priority checkpoint (§5.4.2): the keys whose values moved farthest from their
    /// saved values. Equal distances are broken by key order (lower key first).
    #[default]
    Priority,
    /// `round` in §5.5.4: a cursor walks the keys in key order, each round taking the next
    /// keys after the last one it took and wrapping past the largest key to the smallest.
    ///
    /// The cursor is a position in key order (the last key taken), not an index, so keys
    /// that appear between rounds are taken when the cursor reaches their place and keys
    /// that disappear are simply no longer there to take; a vanished cursor key still marks
    /// where the walk resumes. With a stable key set of `n` keys, consecutive rounds take
    /// the keys in cyclic key order, so every key is saved once in the first
    /// `⌈n / ⌈r·n⌉⌉ <= ⌈1/r⌉` rounds before any key is saved twice.
    RoundRobin,
    /// `random` in §5.5.4: keys drawn uniformly without replacement. The draw depends only
    /// on `seed`, the round number ([`CheckpointSelector::rounds`]) and the *set* of
    /// candidate keys (not their order or distances).
    Random { seed: u64 },
    /// Every key, every round: a traditional full checkpoint (the baseline of §5.5.4).
    Full,
}

/// Tolerance for treating `r·n` (or `r·C`) as an integer: fractions such as `0.1` are not
/// exact in binary, and `0.1 · 30` evaluates to `3.0000000000000004`; any product within a
/// relative `1e-9` of an integer is taken to be that integer.
const SNAP: f64 = 1e-9;

fn snapped(x: f64) -> Option<f64> {
    let r = x.round();
    ((x - r).abs() <= SNAP * r.max(1.0)).then_some(r)
}

fn check_fraction(fraction: f64) -> Result<(), ScarError> {
    if fraction > 0.0 && fraction <= 1.0 {
        Ok(())
    } else {
        Err(ScarError::InvalidFraction(fraction))
    }
}

/// How many of `n` parameters a round with fraction `r` saves: `⌈r·n⌉` (at least 1 when
/// `n >= 1`, exactly `n` when `r = 1`). Errors unless `0 < r <= 1`.
pub fn selection_count(n: usize, fraction: f64) -> Result<usize, ScarError> {
    check_fraction(fraction)?;
    let x = fraction * n as f64;
    let k = snapped(x).unwrap_or_else(|| x.ceil()) as usize;
    Ok(k.clamp(n.min(1), n))
}

/// The budget rule of SCAR §5.4.2 and the Fig. 5.9 experiment: a checkpoint saving a
/// fraction `r` of the parameters is taken every `r·C` iterations, so that as many
/// parameters are saved per `C` iterations as with full checkpoints every `C` iterations
/// (fraction 1/8 saves 1/8 of the parameters 8× as often).
///
/// Returns the interval in iterations, `r·C` rounded to the nearest integer (halves up),
/// and at least 1. It is exact when `r·C` is an integer, as in the paper's settings
/// (`r = 1/2, 1/4, 1/8` with `C` a multiple of 8); otherwise rounding to the nearest
/// integer keeps the saved bytes per iteration as close to the full-checkpoint budget as
/// an integer interval allows. Errors: `C = 0`, or `r` outside `(0, 1]`.
pub fn checkpoint_schedule(period_c: u64, fraction: f64) -> Result<u64, ScarError> {
    check_fraction(fraction)?;
    if period_c == 0 {
        return Err(ScarError::ZeroPeriod);
    }
    let x = fraction * period_c as f64;
    let interval = snapped(x).unwrap_or_else(|| x.round());
    Ok((interval as u64).clamp(1, period_c))
}

/// Whether a checkpoint round is due once `iteration` iterations have completed: every
/// `interval`-th iteration, `interval, 2·interval, …`. Never at iteration 0 (the running
/// checkpoint already holds the initial values, §5.4.2), and never for `interval = 0`.
pub fn due(iteration: u64, interval: u64) -> bool {
    iteration > 0 && iteration.checked_rem(interval) == Some(0)
}

/// The checkpoint coordinator's selection state: the strategy, the number of rounds run and
/// the round-robin cursor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointSelector {
    selection: Selection,
    rounds: u64,
    cursor: Option<ParamKey>,
}

impl CheckpointSelector {
    pub fn new(selection: Selection) -> Self {
        Self {
            selection,
            rounds: 0,
            cursor: None,
        }
    }

    pub fn selection(&self) -> Selection {
        self.selection
    }

    /// Rounds run so far; the next [`select`](Self::select) is round number `rounds()`.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// The last key the round-robin walk took (`None` before it took any).
    pub fn cursor(&self) -> Option<ParamKey> {
        self.cursor
    }

    /// Runs one checkpoint round: picks [`selection_count`]`(n, fraction)` of the `n`
    /// candidates (`(key, distance from the saved value)`) by the selector's strategy and
    /// returns their keys in ascending key order.
    ///
    /// Every call counts as a round, including one with no candidates. Errors, leaving the
    /// selector unchanged: `fraction` outside `(0, 1]`; a distance that is negative or not
    /// finite (checked for every strategy, as it means a broken input); a key listed twice.
    pub fn select(
        &mut self,
        candidates: &[(ParamKey, f64)],
        fraction: f64,
    ) -> Result<Vec<ParamKey>, ScarError> {
        let k = selection_count(candidates.len(), fraction)?;
        if let Some(&(key, distance)) = candidates
            .iter()
            .find(|(_, d)| !(d.is_finite() && *d >= 0.0))
        {
            return Err(ScarError::InvalidDistance { key, distance });
        }
        let mut sorted: Vec<(ParamKey, f64)> = candidates.to_vec();
        sorted.sort_unstable_by_key(|&(key, _)| key);
        if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(ScarError::DuplicateKey(w[0].0));
        }
        let keys: Vec<ParamKey> = sorted.iter().map(|&(key, _)| key).collect();

        let mut chosen: Vec<ParamKey> = match self.selection {
            Selection::Full => keys,
            Selection::Priority => {
                // The k first in the order "largest distance first, equal distances by
                // ascending key": a selection, not a full sort (O(n); keys are distinct).
                let order = |a: &(ParamKey, f64), b: &(ParamKey, f64)| {
                    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
                };
                if k > 0 && k < sorted.len() {
                    sorted.select_nth_unstable_by(k - 1, order);
                }
                sorted.iter().take(k).map(|&(key, _)| key).collect()
            }
            Selection::RoundRobin => {
                let start = match self.cursor {
                    Some(cursor) => keys.partition_point(|&key| key <= cursor),
                    None => 0,
                };
                let n = keys.len();
                let taken: Vec<ParamKey> = (0..k).map(|i| keys[(start + i) % n]).collect();
                if let Some(&last) = taken.last() {
                    self.cursor = Some(last);
                }
                taken
            }
            Selection::Random { seed } => {
                let mut rng = SplitMix64::for_round(seed, self.rounds);
                let mut order: Vec<usize> = (0..keys.len()).collect();
                // Partial Fisher–Yates: the first k slots become a uniform k-subset.
                for i in 0..k {
                    let j = i + rng.below((keys.len() - i) as u64) as usize;
                    order.swap(i, j);
                }
                order[..k].iter().map(|&i| keys[i]).collect()
            }
        };
        chosen.sort_unstable();
        self.rounds += 1;
        Ok(chosen)
    }
}

/// A tiny deterministic PRNG (Steele, Lea & Flood's SplitMix64), so that random selection
/// depends only on the caller's seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// An independent-looking stream for `(seed, round)`: the round is hashed into the
    /// seed, so streams of consecutive rounds are not shifted copies of each other.
    pub fn for_round(seed: u64, round: u64) -> Self {
        Self::new(mix64(
            seed ^ mix64(round.wrapping_add(0x9E37_79B9_7F4A_7C15)),
        ))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// A uniform integer in `0..bound` (`bound >= 1`), without modulo bias (Lemire's
    /// multiply-and-reject).
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "SplitMix64::below needs a positive bound");
        let threshold = bound.wrapping_neg() % bound; // 2^64 mod bound
        loop {
            let m = u128::from(self.next_u64()) * u128::from(bound);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::TableId;
    use std::collections::BTreeSet;

    fn key(row: u64) -> ParamKey {
        ParamKey::new(TableId(0), row)
    }

    fn keys(rows: &[u64]) -> Vec<ParamKey> {
        rows.iter().map(|&r| key(r)).collect()
    }

    fn cands(ds: &[(u64, f64)]) -> Vec<(ParamKey, f64)> {
        ds.iter().map(|&(r, d)| (key(r), d)).collect()
    }

    #[test]
    fn counts_are_the_ceiling_of_r_n() {
        assert_eq!(selection_count(8, 0.125).unwrap(), 1);
        assert_eq!(selection_count(9, 0.125).unwrap(), 2);
        assert_eq!(selection_count(10, 0.25).unwrap(), 3);
        assert_eq!(selection_count(10, 1.0).unwrap(), 10);
        assert_eq!(selection_count(1, 1e-12).unwrap(), 1);
        assert_eq!(selection_count(0, 0.5).unwrap(), 0);
        // 0.1·30 is 3.0000000000000004 in f64; it is still 3.
        assert_eq!(selection_count(30, 0.1).unwrap(), 3);
        assert_eq!(selection_count(1000, 0.3).unwrap(), 300);
    }

    #[test]
    fn fractions_outside_zero_one_are_refused() {
        for bad in [0.0, -0.5, 1.0000001, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                selection_count(4, bad),
                Err(ScarError::InvalidFraction(_))
            ));
            assert!(matches!(
                checkpoint_schedule(8, bad),
                Err(ScarError::InvalidFraction(_))
            ));
            let mut s = CheckpointSelector::new(Selection::Priority);
            assert!(s.select(&cands(&[(1, 1.0)]), bad).is_err());
            assert_eq!(s.rounds(), 0);
        }
    }

    #[test]
    fn priority_takes_the_largest_distances_with_ties_by_key() {
        let mut s = CheckpointSelector::new(Selection::Priority);
        let c = cands(&[(5, 0.1), (2, 3.0), (9, 2.0), (1, 0.5), (7, 2.0)]);
        // ⌈0.4·5⌉ = 2: distances 3.0 (key 2) and 2.0, tie between keys 7 and 9 → 7.
        assert_eq!(s.select(&c, 0.4).unwrap(), keys(&[2, 7]));
        // Selection is stateless for priority: same input, same answer.
        assert_eq!(s.select(&c, 0.4).unwrap(), keys(&[2, 7]));
        assert_eq!(s.select(&c, 0.6).unwrap(), keys(&[2, 7, 9]));
        assert_eq!(s.rounds(), 3);
    }

    #[test]
    fn round_robin_walks_the_keys_in_order_and_wraps() {
        let mut s = CheckpointSelector::new(Selection::RoundRobin);
        let c = cands(&[(40, 0.0), (10, 9.0), (30, 0.0), (20, 0.0), (50, 0.0)]);
        // ⌈0.4·5⌉ = 2 per round: 10 20 | 30 40 | 50 10 | 20 30
        assert_eq!(s.select(&c, 0.4).unwrap(), keys(&[10, 20]));
        assert_eq!(s.select(&c, 0.4).unwrap(), keys(&[30, 40]));
        assert_eq!(s.select(&c, 0.4).unwrap(), keys(&[10, 50]));
        assert_eq!(s.cursor(), Some(key(10)));
        assert_eq!(s.select(&c, 0.4).unwrap(), keys(&[20, 30]));
    }

    #[test]
    fn round_robin_handles_keys_that_come_and_go() {
        let mut s = CheckpointSelector::new(Selection::RoundRobin);
        assert_eq!(
            s.select(&cands(&[(10, 0.0), (20, 0.0), (30, 0.0)]), 0.5)
                .unwrap(),
            keys(&[10, 20])
        );
        // Key 20 (the cursor) vanished and 25 and 5 appeared: the walk resumes after 20's
        // place, so 25 and 30 come next, then it wraps to 5.
        let c = cands(&[(5, 0.0), (10, 0.0), (25, 0.0), (30, 0.0)]);
        assert_eq!(s.select(&c, 0.5).unwrap(), keys(&[25, 30]));
        assert_eq!(s.select(&c, 0.5).unwrap(), keys(&[5, 10]));
        // No candidates: nothing taken, cursor kept, the round still counts.
        assert_eq!(s.select(&[], 0.5).unwrap(), vec![]);
        assert_eq!(s.cursor(), Some(key(10)));
        assert_eq!(s.rounds(), 4);
    }

    #[test]
    fn random_is_reproducible_per_seed_and_round() {
        let c: Vec<(ParamKey, f64)> = (0..100).map(|r| (key(r), r as f64)).collect();
        let mut a = CheckpointSelector::new(Selection::Random { seed: 7 });
        let mut b = CheckpointSelector::new(Selection::Random { seed: 7 });
        let mut reversed = c.clone();
        reversed.reverse();
        let rounds_a: Vec<_> = (0..5).map(|_| a.select(&c, 0.1).unwrap()).collect();
        let rounds_b: Vec<_> = (0..5).map(|_| b.select(&reversed, 0.1).unwrap()).collect();
        assert_eq!(rounds_a, rounds_b);
        for chosen in &rounds_a {
            assert_eq!(chosen.len(), 10);
            assert_eq!(chosen.iter().collect::<BTreeSet<_>>().len(), 10);
        }
        // Different rounds and different seeds draw different sets (overwhelmingly likely
        // for 10 of 100; fixed seeds make this deterministic).
        assert_ne!(rounds_a[0], rounds_a[1]);
        let mut other = CheckpointSelector::new(Selection::Random { seed: 8 });
        assert_ne!(other.select(&c, 0.1).unwrap(), rounds_a[0]);
    }

    #[test]
    fn random_is_roughly_uniform() {
        // 4000 rounds of 1 of 8 keys: each key expected 500 times; a count outside
        // 500 ± 5σ (σ ≈ 20.9) would flag a biased draw.
        let c: Vec<(ParamKey, f64)> = (0..8).map(|r| (key(r), 0.0)).collect();
        let mut s = CheckpointSelector::new(Selection::Random { seed: 42 });
        let mut counts = [0u32; 8];
        for _ in 0..4000 {
            let chosen = s.select(&c, 0.125).unwrap();
            counts[chosen[0].row as usize] += 1;
        }
        for n in counts {
            assert!((396..=604).contains(&n), "{counts:?}");
        }
    }

    #[test]
    fn full_takes_everything() {
        let mut s = CheckpointSelector::new(Selection::Full);
        let c = cands(&[(3, 0.0), (1, 5.0), (2, 0.0)]);
        assert_eq!(s.select(&c, 0.125).unwrap(), keys(&[1, 2, 3]));
    }

    #[test]
    fn bad_candidates_are_refused_and_leave_the_selector_unchanged() {
        let mut s = CheckpointSelector::new(Selection::RoundRobin);
        s.select(&cands(&[(1, 0.0), (2, 0.0)]), 0.5).unwrap();
        let before = s.clone();
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let err = s.select(&cands(&[(1, 0.0), (2, bad)]), 0.5).unwrap_err();
            assert!(matches!(err, ScarError::InvalidDistance { key: k, .. } if k == key(2)));
        }
        let err = s
            .select(&cands(&[(1, 0.0), (2, 0.0), (1, 3.0)]), 0.5)
            .unwrap_err();
        assert_eq!(err, ScarError::DuplicateKey(key(1)));
        assert_eq!(s, before);
    }

    #[test]
    fn schedule_keeps_the_bytes_per_period_constant() {
        assert_eq!(checkpoint_schedule(8, 1.0).unwrap(), 8);
        assert_eq!(checkpoint_schedule(8, 0.5).unwrap(), 4);
        assert_eq!(checkpoint_schedule(8, 0.125).unwrap(), 1);
        assert_eq!(checkpoint_schedule(80, 0.1).unwrap(), 8);
        // r·C not an integer: nearest, and never below 1.
        assert_eq!(checkpoint_schedule(10, 0.125).unwrap(), 1); // 1.25
        assert_eq!(checkpoint_schedule(10, 0.375).unwrap(), 4); // 3.75
        assert_eq!(checkpoint_schedule(3, 0.01).unwrap(), 1); // 0.03
        assert_eq!(checkpoint_schedule(0, 0.5), Err(ScarError::ZeroPeriod));
    }

    #[test]
    fn due_every_interval_but_not_at_zero() {
        let hits: Vec<u64> = (0..=10).filter(|&i| due(i, 4)).collect();
        assert_eq!(hits, vec![4, 8]);
        assert!((1..=5).all(|i| due(i, 1)));
        assert!(!due(0, 1));
        assert!(!due(8, 0));
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // First outputs of the reference C implementation seeded with 0
        // (https://prng.di.unimi.it/splitmix64.c).
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(rng.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = SplitMix64::new(1);
        for bound in [1, 2, 3, 7, 1 << 40, u64::MAX] {
            for _ in 0..100 {
                assert!(rng.below(bound) < bound);
            }
        }
    }
}
