//! Randomized checks of SCAR's checkpoint-selection logic (`harp_core::scar`).
//!
//! Each property generates candidate sets (keys over a few tables, distances with and
//! without ties), rows, fractions and samples, and checks one behaviour stated in the
//! module's docs from first principles: which keys each strategy must pick, what a norm
//! must satisfy, what the budget rule and the confidence interval must do.

use harp_core::scar::{
    checkpoint_schedule, distance, due, mean_confidence_interval, plan_recovery, selection_count,
    student_t_quantile, CheckpointSelector, Norm, ScarError, Selection,
};
use harp_core::{ParamKey, RowData, TableId};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const EXACT_NORMS: [Norm; 3] = [Norm::L2, Norm::L1, Norm::LInf];
const ALL_NORMS: [Norm; 4] = [Norm::L2, Norm::L1, Norm::LInf, Norm::ScaledTotalVariation];

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

fn param_key() -> impl Strategy<Value = ParamKey> {
    (0u16..3, 0u64..200).prop_map(|(t, r)| ParamKey::new(TableId(t), r))
}

/// Distances drawn from a handful of values (many ties) or from a continuous range.
fn distance_value() -> impl Strategy<Value = f64> {
    prop_oneof![(0u8..4).prop_map(f64::from), 0.0f64..1e6,]
}

/// Up to 120 candidates with distinct keys, listed in a shuffled order.
fn candidates() -> impl Strategy<Value = Vec<(ParamKey, f64)>> {
    prop::collection::btree_map(param_key(), distance_value(), 0..120)
        .prop_map(|m| m.into_iter().collect::<Vec<_>>())
        .prop_shuffle()
}

/// A fraction in (0, 1]: the paper's 1/m values, a decimal, or anything.
fn fraction() -> impl Strategy<Value = f64> {
    prop_oneof![
        (1u32..=16).prop_map(|m| 1.0 / f64::from(m)),
        (1u32..=10).prop_map(|d| f64::from(d) / 10.0),
        (1e-6f64..=1.0),
    ]
}

/// The number `⌈r·n⌉` must be, checked against its definition: the least `k` with
/// `k >= r·n` (to a relative 1e-9, for fractions like 0.1 that are inexact in binary).
fn assert_is_ceiling(k: usize, n: usize, r: f64) {
    let rn = r * n as f64;
    let slack = 1e-9 * rn.max(1.0);
    assert!(k <= n);
    if n > 0 {
        assert!(k >= 1);
        assert!(k as f64 >= rn - slack, "k={k} < r·n={rn}");
        assert!(
            k == 1 || ((k - 1) as f64) < rn - slack,
            "k-1={} >= r·n={rn}",
            k - 1
        );
    } else {
        assert_eq!(k, 0);
    }
}

fn sorted_keys(cands: &[(ParamKey, f64)]) -> Vec<ParamKey> {
    let mut keys: Vec<ParamKey> = cands.iter().map(|&(k, _)| k).collect();
    keys.sort();
    keys
}

proptest! {
    #![proptest_config(config(400))]

    #[test]
    fn priority_selects_the_largest_distances(cands in candidates(), r in fraction()) {
        let mut sel = CheckpointSelector::new(Selection::Priority);
        let chosen = sel.select(&cands, r).unwrap();
        assert_is_ceiling(chosen.len(), cands.len(), r);
        prop_assert_eq!(chosen.len(), selection_count(cands.len(), r).unwrap());
        let chosen: BTreeSet<ParamKey> = chosen.into_iter().collect();
        prop_assert_eq!(chosen.len(), selection_count(cands.len(), r).unwrap());
        for &(uk, ud) in cands.iter().filter(|(k, _)| !chosen.contains(k)) {
            for &(sk, sd) in cands.iter().filter(|(k, _)| chosen.contains(k)) {
                prop_assert!(ud <= sd, "unselected {} ({}) > selected {} ({})", uk, ud, sk, sd);
                if ud == sd {
                    prop_assert!(uk > sk, "tie not broken by key: {} left out, {} taken", uk, sk);
                }
            }
        }
    }

    #[test]
    fn round_robin_walks_stable_keys_cyclically(
        cands in candidates(),
        r in prop_oneof![fraction(), 1.0 / 64.0..=1.0f64].prop_filter("≤ 64 rounds", |r| *r >= 1.0 / 64.0),
    ) {
        let keys = sorted_keys(&cands);
        let n = keys.len();
        let k = selection_count(n, r).unwrap();
        let rounds = (1.0 / r).ceil() as usize;
        let mut sel = CheckpointSelector::new(Selection::RoundRobin);
        let mut seen: BTreeMap<ParamKey, usize> = BTreeMap::new();
        for round in 0..rounds {
            let chosen = sel.select(&cands, r).unwrap();
            // Round i takes the keys at cyclic positions i·k .. i·k + k of the key order.
            let expected: BTreeSet<ParamKey> =
                (0..k).map(|j| keys[(round * k + j) % n]).collect();
            prop_assert_eq!(chosen.iter().copied().collect::<BTreeSet<_>>(), expected);
            prop_assert_eq!(chosen.len(), k);
            for key in chosen {
                *seen.entry(key).or_default() += 1;
            }
        }
        // Over ⌈1/r⌉ rounds every key is saved, and (cyclic order) no key is saved twice
        // before all have been saved once: save counts differ by at most one.
        prop_assert_eq!(seen.len(), n);
        if let (Some(lo), Some(hi)) = (seen.values().min(), seen.values().max()) {
            prop_assert!(*lo >= 1 && hi - lo <= 1, "counts {}..={}", lo, hi);
        }
    }

    #[test]
    fn round_robin_with_r_one_over_m_saves_each_key_exactly_once_per_m_rounds(
        m in 1usize..=16,
        per in 1usize..12,
        table in 0u16..4,
        gaps in prop::collection::vec(1u64..5, 192),
    ) {
        // n = m·per keys with gaps between rows, r = 1/m: ⌈1/r⌉ = m rounds of n/m keys.
        let n = m * per;
        let mut row = 0;
        let cands: Vec<(ParamKey, f64)> = gaps[..n].iter().map(|g| {
            row += g;
            (ParamKey::new(TableId(table), row), 0.0)
        }).collect();
        let mut sel = CheckpointSelector::new(Selection::RoundRobin);
        for _pass in 0..2 {
            let mut seen = BTreeMap::<ParamKey, usize>::new();
            for _ in 0..m {
                for key in sel.select(&cands, 1.0 / m as f64).unwrap() {
                    *seen.entry(key).or_default() += 1;
                }
            }
            prop_assert_eq!(seen.len(), n);
            prop_assert!(seen.values().all(|&c| c == 1));
        }
    }

    #[test]
    fn random_is_deterministic_distinct_and_right_sized(
        cands in candidates(),
        r in fraction(),
        seed in any::<u64>(),
        round in 0u64..6,
    ) {
        let n = cands.len();
        let k = selection_count(n, r).unwrap();
        let all: BTreeSet<ParamKey> = cands.iter().map(|&(key, _)| key).collect();
        // Selector A runs rounds on other inputs first; selector B sees nothing but empty
        // rounds, and its candidates in another order with other distances. At the same
        // round number with the same key set they must agree.
        let mut a = CheckpointSelector::new(Selection::Random { seed });
        let mut b = CheckpointSelector::new(Selection::Random { seed });
        let other: Vec<(ParamKey, f64)> = cands.iter().take(n / 2).copied().collect();
        for _ in 0..round {
            a.select(&other, 0.5).unwrap();
            b.select(&[], 1.0).unwrap();
        }
        let mut reordered: Vec<(ParamKey, f64)> =
            cands.iter().rev().map(|&(key, d)| (key, d * 2.0 + 1.0)).collect();
        reordered.rotate_left(n / 3);
        let from_a = a.select(&cands, r).unwrap();
        let from_b = b.select(&reordered, r).unwrap();
        prop_assert_eq!(&from_a, &from_b);
        prop_assert_eq!(from_a.len(), k);
        let distinct: BTreeSet<ParamKey> = from_a.iter().copied().collect();
        prop_assert_eq!(distinct.len(), k);
        prop_assert!(distinct.is_subset(&all));
    }

    #[test]
    fn full_selects_every_key(cands in candidates(), r in fraction()) {
        let mut sel = CheckpointSelector::new(Selection::Full);
        prop_assert_eq!(sel.select(&cands, r).unwrap(), sorted_keys(&cands));
    }
}

/// Two rows of one kind and width: `f32` rows (finite, with many equal elements) or `i64`
/// counter rows (non-negative, so scaled total variation applies).
fn row_pair() -> impl Strategy<Value = (RowData, RowData)> {
    let f32_value = prop_oneof![
        (-3i8..=3).prop_map(f32::from),
        -1e6f32..1e6,
        (0u8..=3).prop_map(f32::from),
        0.0f32..1e6,
    ];
    let f32_rows = (0usize..16).prop_flat_map(move |w| {
        (
            prop::collection::vec(f32_value.clone(), w),
            prop::collection::vec(f32_value.clone(), w),
        )
            .prop_map(|(a, b)| (RowData::F32(a), RowData::F32(b)))
    });
    let i64_rows = (0usize..16).prop_flat_map(|w| {
        (
            prop::collection::vec(0i64..6, w),
            prop::collection::vec(0i64..6, w),
        )
            .prop_map(|(a, b)| (RowData::I64(a), RowData::I64(b)))
    });
    prop_oneof![f32_rows, i64_rows]
}

/// Moves `moves` single counts between entries of a count row: the mass stays the same,
/// as when an LDA document's tokens are re-sampled.
fn resampled(row: &[i64], moves: &[(usize, usize)]) -> Vec<i64> {
    let mut out = row.to_vec();
    for &(from, to) in moves {
        let (from, to) = (from % out.len(), to % out.len());
        if out[from] > 0 {
            out[from] -= 1;
            out[to] += 1;
        }
    }
    out
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn distances_are_non_negative_and_symmetric((a, b) in row_pair()) {
        let non_negative = |r: &RowData| match r {
            RowData::F32(v) => v.iter().all(|&x| x >= 0.0),
            RowData::I64(v) => v.iter().all(|&x| x >= 0),
        };
        for norm in ALL_NORMS {
            if norm == Norm::ScaledTotalVariation && !(non_negative(&a) && non_negative(&b)) {
                // Total variation is defined on distributions only.
                let refused = matches!(distance(norm, &a, &b), Err(ScarError::NotADistribution { .. }));
                prop_assert!(refused);
                continue;
            }
            let ab = distance(norm, &a, &b).unwrap();
            let ba = distance(norm, &b, &a).unwrap();
            prop_assert!(ab.is_finite() && ab >= 0.0, "{:?}: {}", norm, ab);
            prop_assert_eq!(ab.to_bits(), ba.to_bits(), "{:?} not symmetric", norm);
            prop_assert_eq!(distance(norm, &a, &a).unwrap(), 0.0);
        }
        for norm in EXACT_NORMS {
            let d = distance(norm, &a, &b).unwrap();
            prop_assert_eq!(d == 0.0, a == b, "{:?}: zero iff equal", norm);
        }
    }

    #[test]
    fn exact_norms_are_ordered_and_satisfy_the_triangle_inequality(
        (a, b) in row_pair(),
        shift in prop::collection::vec(-4i64..=4, 16),
    ) {
        // c = a shifted element-wise, same kind and width.
        let c = match &a {
            RowData::F32(v) => RowData::F32(v.iter().zip(&shift).map(|(x, s)| x + *s as f32).collect()),
            RowData::I64(v) => RowData::I64(v.iter().zip(&shift).map(|(x, s)| x + s).collect()),
        };
        let d = |norm, x: &RowData, y: &RowData| distance(norm, x, y).unwrap();
        let (linf, l2, l1) = (d(Norm::LInf, &a, &b), d(Norm::L2, &a, &b), d(Norm::L1, &a, &b));
        prop_assert!(linf <= l2 * (1.0 + 1e-12) && l2 <= l1 * (1.0 + 1e-12), "{} {} {}", linf, l2, l1);
        for norm in EXACT_NORMS {
            let direct = d(norm, &a, &b);
            let via = d(norm, &a, &c) + d(norm, &c, &b);
            prop_assert!(direct <= via * (1.0 + 1e-9) + 1e-9, "{:?}: {} > {}", norm, direct, via);
        }
    }

    #[test]
    fn scaled_total_variation_of_a_resampled_document_is_half_the_count_l1(
        doc in prop::collection::vec(0i64..50, 1..20),
        moves in prop::collection::vec((0usize..20, 0usize..20), 0..30),
    ) {
        // Same document length, tokens moved between topics (SCAR §5.5.1): the scaled TV is
        // ½ Σ|aᵢ − bᵢ|, and at most the number of tokens moved.
        let after = resampled(&doc, &moves);
        let half_l1: f64 = doc.iter().zip(&after).map(|(x, y)| (x - y).abs() as f64).sum::<f64>() / 2.0;
        let stv = distance(Norm::ScaledTotalVariation, &RowData::I64(doc.clone()), &RowData::I64(after)).unwrap();
        prop_assert!((stv - half_l1).abs() <= 1e-9 * half_l1.max(1.0), "{} vs {}", stv, half_l1);
        prop_assert!(stv <= moves.len() as f64 + 1e-9);
    }

    #[test]
    fn mismatched_widths_are_refused(w in 0usize..8, extra in 1usize..4) {
        for norm in ALL_NORMS {
            prop_assert!(distance(norm, &RowData::F32(vec![0.0; w]), &RowData::F32(vec![0.0; w + extra])).is_err());
            prop_assert!(distance(norm, &RowData::I64(vec![0; w]), &RowData::F32(vec![0.0; w])).is_err());
        }
    }

    #[test]
    fn partial_recovery_perturbs_no_more_than_full_recovery(
        rows in prop::collection::vec(
            (prop::collection::vec(-10i64..10, 3), prop::collection::vec(-10i64..10, 3), any::<bool>()),
            0..40,
        ),
    ) {
        // Each parameter has a live value, a saved value, and whether it was lost. Full
        // recovery restores every parameter; partial recovery only the lost ones
        // (Theorem 5.4.1: ‖δ'‖ <= ‖δ‖).
        let key = |i: usize| ParamKey::new(TableId(0), i as u64);
        let saved: BTreeMap<ParamKey, RowData> =
            rows.iter().enumerate().map(|(i, (_, s, _))| (key(i), RowData::I64(s.clone()))).collect();
        let all: Vec<(ParamKey, RowData)> =
            rows.iter().enumerate().map(|(i, (live, _, _))| (key(i), RowData::I64(live.clone()))).collect();
        let lost: Vec<(ParamKey, RowData)> =
            all.iter().zip(&rows).filter(|(_, r)| r.2).map(|(kv, _)| kv.clone()).collect();
        for norm in EXACT_NORMS {
            let full = plan_recovery(&all, |k| saved.get(&k).cloned(), norm).unwrap();
            let partial = plan_recovery(&lost, |k| saved.get(&k).cloned(), norm).unwrap();
            prop_assert!(partial.report.perturbation <= full.report.perturbation * (1.0 + 1e-12));
            prop_assert_eq!(partial.report.keys_restored, lost.len());
            prop_assert_eq!(partial.report.values_restored, 3 * lost.len());
            let restored: Vec<ParamKey> = partial.restore.iter().map(|(k, _)| *k).collect();
            let mut lost_keys: Vec<ParamKey> = lost.iter().map(|(k, _)| *k).collect();
            lost_keys.sort();
            prop_assert_eq!(restored, lost_keys);
            for (k, v) in &partial.restore {
                prop_assert_eq!(Some(v), saved.get(k));
            }
            let unchanged = lost.iter().all(|(k, v)| saved.get(k) == Some(v));
            prop_assert_eq!(partial.report.perturbation == 0.0, unchanged);
        }
    }
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn schedule_intervals_follow_the_budget_rule(
        m in 1u64..=16,
        q in 1u64..50,
        n in 1usize..500,
        r in fraction(),
        c in 1u64..10_000,
    ) {
        // Any fraction: an interval between 1 and C, nearest to r·C.
        let interval = checkpoint_schedule(c, r).unwrap();
        prop_assert!((1..=c).contains(&interval));
        prop_assert!(interval == 1 || (interval as f64 - r * c as f64).abs() <= 0.5 + 1e-9);
        prop_assert_eq!(checkpoint_schedule(c, 1.0).unwrap(), c);
        // r = 1/m with m | C: r·C exactly, so m rounds per C iterations, each saving
        // ⌈n/m⌉ parameters: as many per C iterations as one full checkpoint (to rounding).
        let period = m * q;
        let interval = checkpoint_schedule(period, 1.0 / m as f64).unwrap();
        prop_assert_eq!(interval, q);
        let rounds = (1..=period).filter(|&i| due(i, interval)).count() as u64;
        prop_assert_eq!(rounds, m);
        let saved = rounds as usize * selection_count(n, 1.0 / m as f64).unwrap();
        prop_assert!(saved >= n && saved < n + m as usize, "saved {} of {}", saved, n);
    }

    #[test]
    fn due_hits_every_multiple_of_the_interval(interval in 1u64..50, horizon in 0u64..2000) {
        let hits: Vec<u64> = (0..=horizon).filter(|&i| due(i, interval)).collect();
        prop_assert_eq!(hits.len() as u64, horizon / interval);
        prop_assert!(hits.iter().all(|&i| i > 0 && i % interval == 0));
    }

    #[test]
    fn schedule_is_monotone_in_the_fraction(c in 1u64..10_000, a in fraction(), b in fraction()) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        prop_assert!(checkpoint_schedule(c, lo).unwrap() <= checkpoint_schedule(c, hi).unwrap());
    }

    #[test]
    fn confidence_interval_shrinks_with_more_samples_of_the_same_spread(
        base in prop::collection::vec(-100.0f64..100.0, 2..12),
        level in prop_oneof![Just(0.95), Just(0.9), Just(0.99), 0.5f64..0.999],
    ) {
        // Repeating a sample m times keeps its spread (same empirical distribution); the
        // half-width must then strictly decrease with m and the mean stay put.
        prop_assume!(base.iter().any(|&x| (x - base[0]).abs() > 1e-6));
        let mut previous: Option<(f64, f64)> = None;
        for m in 1..=8 {
            let samples: Vec<f64> = (0..m).flat_map(|_| base.iter().copied()).collect();
            let (mean, half) = mean_confidence_interval(&samples, level).unwrap();
            prop_assert!(half > 0.0);
            if let Some((prev_mean, prev_half)) = previous {
                prop_assert!((mean - prev_mean).abs() <= 1e-9 * prev_mean.abs().max(1.0));
                prop_assert!(half < prev_half, "m={}: {} >= {}", m, half, prev_half);
            }
            previous = Some((mean, half));
        }
    }

    #[test]
    fn t_quantiles_decrease_with_df_and_increase_with_p(
        p in 0.5001f64..0.9999,
        dp in 1e-4f64..0.01,
        df in 1u64..1500,
    ) {
        let t = student_t_quantile(p, df).unwrap();
        prop_assert!(t > 0.0);
        prop_assert!(student_t_quantile(p, df + 1).unwrap() < t);
        if p + dp < 1.0 {
            prop_assert!(student_t_quantile(p + dp, df).unwrap() > t);
        }
        prop_assert!((student_t_quantile(1.0 - p, df).unwrap() + t).abs() <= 1e-9 * t);
    }
}
