//! Confidence intervals for SCAR's error bars (Figs. 5.7–5.10: "95% confidence
//! intervals, calculated by repeating each trial 100 times"), with a hand-written
//! Student's t quantile.

use super::ScarError;

/// The mean of `samples` and the half-width of its two-sided confidence interval at
/// `level` (e.g. `0.95`): `t · s / √n`, with `s` the sample standard deviation and `t` the
/// `(1 + level) / 2` quantile of Student's t with `n − 1` degrees of freedom
/// ([`student_t_quantile`]).
///
/// Errors: no samples; a single sample (no spread to estimate); a NaN or infinite sample;
/// `level` outside `(0, 1)`.
pub fn mean_confidence_interval(samples: &[f64], level: f64) -> Result<(f64, f64), ScarError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(ScarError::InvalidLevel(level));
    }
    match samples.len() {
        0 => return Err(ScarError::EmptySamples),
        1 => return Err(ScarError::TooFewSamples(1)),
        _ => {}
    }
    if let Some(index) = samples.iter().position(|x| !x.is_finite()) {
        return Err(ScarError::NonFiniteSample {
            index,
            value: samples[index],
        });
    }
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n;
    let variance = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let t = student_t_quantile(0.5 + level / 2.0, samples.len() as u64 - 1)?;
    Ok((mean, t * (variance / n).sqrt()))
}

/// Above this many degrees of freedom the t quantile comes from the Cornish–Fisher
/// expansion instead of inverting the exact distribution function.
const SERIES_MAX_DF: u64 = 1000;

/// The `p` quantile of Student's t distribution with `df` degrees of freedom: the `t` with
/// `P(T <= t) = p`.
///
/// For `df <= 1000` the exact distribution function (the finite series of Abramowitz &
/// Stegun 26.7.3–26.7.4) is inverted by bisection to within a few ulps of `t`, so the
/// result is accurate to about `1e-12` relative, limited by rounding in the series. Above
/// that, the Cornish–Fisher expansion to `ν⁻⁴` (A&S 26.7.5) around the normal quantile
/// (Acklam's rational approximation, relative error below `1.2e-9`) is used; the result
/// is then accurate to about `1e-9` relative (the tests check the expansion against the
/// exact inversion to `3e-9` at 200–1000 degrees of freedom, where its truncation error is
/// larger than beyond the switch). Errors: `df = 0`; `p` outside `(0, 1)`.
pub fn student_t_quantile(p: f64, df: u64) -> Result<f64, ScarError> {
    if df == 0 {
        return Err(ScarError::ZeroDegreesOfFreedom);
    }
    if !(p > 0.0 && p < 1.0) {
        return Err(ScarError::InvalidProbability(p));
    }
    if p < 0.5 {
        return Ok(-upper_t_quantile(1.0 - p, df));
    }
    Ok(upper_t_quantile(p, df))
}

/// The t quantile for `0.5 <= p < 1`.
fn upper_t_quantile(p: f64, df: u64) -> f64 {
    if p == 0.5 {
        return 0.0;
    }
    if df > SERIES_MAX_DF {
        return cornish_fisher(normal_quantile(p), df as f64);
    }
    // Invert A(t) = P(|T| <= t) = 2p − 1, increasing in t.
    let target = 2.0 * p - 1.0;
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    while two_sided_cdf(hi, df) < target && hi < 1e300 {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..2000 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if two_sided_cdf(mid, df) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// `P(|T| <= t)` for `t >= 0` and `1 <= df`, exactly (A&S 26.7.3 for odd `df`, 26.7.4
/// for even): with `θ = atan(t / √df)`,
/// odd: `(2/π)(θ + sin θ cos θ (1 + ⅔cos²θ + (2·4)/(3·5)cos⁴θ + …))`, `df − 3` over 2 terms after the 1
/// (`2θ/π` for `df = 1`); even: `sin θ (1 + ½cos²θ + (1·3)/(2·4)cos⁴θ + …)`, `(df − 2) / 2` terms after the 1.
fn two_sided_cdf(t: f64, df: u64) -> f64 {
    let theta = (t / (df as f64).sqrt()).atan();
    let (sin, cos) = theta.sin_cos();
    let cos2 = cos * cos;
    let mut sum = 1.0;
    let mut term = 1.0;
    if df % 2 == 1 {
        if df == 1 {
            return 2.0 * theta / std::f64::consts::PI;
        }
        for k in 1..=(df - 3) / 2 {
            term *= cos2 * (2 * k) as f64 / (2 * k + 1) as f64;
            sum += term;
        }
        2.0 / std::f64::consts::PI * (theta + sin * cos * sum)
    } else {
        for k in 1..=(df - 2) / 2 {
            term *= cos2 * (2 * k - 1) as f64 / (2 * k) as f64;
            sum += term;
        }
        sin * sum
    }
}

/// A&S 26.7.5: `t ≈ z + g₁/ν + g₂/ν² + g₃/ν³ + g₄/ν⁴`.
fn cornish_fisher(z: f64, nu: f64) -> f64 {
    let z2 = z * z;
    let g1 = z * (z2 + 1.0) / 4.0;
    let g2 = z * ((5.0 * z2 + 16.0) * z2 + 3.0) / 96.0;
    let g3 = z * (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) / 384.0;
    let g4 = z * ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) / 92160.0;
    z + (g1 + (g2 + (g3 + g4 / nu) / nu) / nu) / nu
}

/// The standard normal quantile for `0 < p < 1`, by Acklam's rational approximation
/// (relative error below `1.15e-9`).
fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const P_LOW: f64 = 0.02425;
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < P_LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - P_LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel_close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    #[test]
    fn interval_of_a_small_sample_by_hand() {
        // Samples 1..=5: mean 3, s² = (4+1+0+1+4)/4 = 2.5, s/√n = √0.5;
        // t(0.975, 4) = 2.776445 (standard table).
        let (mean, half) = mean_confidence_interval(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.95).unwrap();
        assert!(rel_close(mean, 3.0, 1e-15));
        assert!(rel_close(half, 2.776_445_1 * 0.5f64.sqrt(), 1e-7), "{half}");
        // Two samples 0 and 2: mean 1, s = √2, s/√2 = 1, t(0.975, 1) = 12.706205.
        let (mean, half) = mean_confidence_interval(&[0.0, 2.0], 0.95).unwrap();
        assert_eq!(mean, 1.0);
        assert!(rel_close(half, 12.706_204_7, 1e-8), "{half}");
    }

    #[test]
    fn identical_samples_have_zero_width() {
        let (mean, half) = mean_confidence_interval(&[7.5; 10], 0.95).unwrap();
        assert_eq!((mean, half), (7.5, 0.0));
    }

    #[test]
    fn interval_inputs_are_validated() {
        assert_eq!(
            mean_confidence_interval(&[], 0.95),
            Err(ScarError::EmptySamples)
        );
        assert_eq!(
            mean_confidence_interval(&[1.0], 0.95),
            Err(ScarError::TooFewSamples(1))
        );
        assert!(matches!(
            mean_confidence_interval(&[1.0, f64::INFINITY], 0.95),
            Err(ScarError::NonFiniteSample { index: 1, .. })
        ));
        for bad in [0.0, 1.0, -0.1, f64::NAN] {
            assert!(matches!(
                mean_confidence_interval(&[1.0, 2.0], bad),
                Err(ScarError::InvalidLevel(_))
            ));
        }
    }

    // ---- quantiles ----

    #[test]
    fn t_quantiles_match_published_tables() {
        // (p, df, t) from standard two-sided tables, rounded to 4 decimals.
        let table = [
            (0.975, 1, 12.7062),
            (0.975, 2, 4.3027),
            (0.975, 3, 3.1824),
            (0.975, 4, 2.7764),
            (0.975, 5, 2.5706),
            (0.975, 10, 2.2281),
            (0.975, 20, 2.0860),
            (0.975, 30, 2.0423),
            (0.975, 60, 2.0003),
            (0.975, 100, 1.9840),
            (0.975, 120, 1.9799),
            (0.975, 1000, 1.9623),
            (0.995, 1, 63.6567),
            (0.995, 5, 4.0321),
            (0.995, 10, 3.1693),
            (0.995, 30, 2.7500),
            (0.95, 1, 6.3138),
            (0.95, 5, 2.0150),
            (0.95, 10, 1.8125),
        ];
        for (p, df, t) in table {
            let got = student_t_quantile(p, df).unwrap();
            assert!((got - t).abs() < 6e-5, "t({p}, {df}) = {got}, table {t}");
            let lower = student_t_quantile(1.0 - p, df).unwrap();
            assert!((lower + got).abs() < 1e-9 * got);
        }
        assert_eq!(student_t_quantile(0.5, 7).unwrap(), 0.0);
    }

    #[test]
    fn t_quantiles_match_closed_forms() {
        // df 1: tan(π(p − ½)); df 2: (2p − 1)/√(2p(1 − p));
        // df 4: 2√(q − 1)·sign, q = cos(⅓ acos √α)/√α, α = 4p(1 − p).
        for &p in &[0.51, 0.6, 0.75, 0.9, 0.975, 0.99, 0.999, 0.9999] {
            let t1 = (std::f64::consts::PI * (p - 0.5)).tan();
            assert!(
                rel_close(student_t_quantile(p, 1).unwrap(), t1, 1e-11),
                "df1 p={p}"
            );
            let t2 = (2.0 * p - 1.0) / (2.0 * p * (1.0 - p)).sqrt();
            assert!(
                rel_close(student_t_quantile(p, 2).unwrap(), t2, 1e-11),
                "df2 p={p}"
            );
            let alpha = 4.0 * p * (1.0 - p);
            let q = ((alpha.sqrt()).acos() / 3.0).cos() / alpha.sqrt();
            let t4 = 2.0 * (q - 1.0).sqrt();
            assert!(
                rel_close(student_t_quantile(p, 4).unwrap(), t4, 1e-9),
                "df4 p={p}"
            );
        }
    }

    #[test]
    fn large_df_expansion_agrees_with_the_exact_inversion() {
        for &p in &[0.6, 0.9, 0.975, 0.995, 0.9999] {
            for df in [200, 500, 1000] {
                let exact = upper_t_quantile(p, df);
                let expansion = cornish_fisher(normal_quantile(p), df as f64);
                assert!(rel_close(expansion, exact, 3e-9), "p={p} df={df}");
            }
            // Across the switch-over the quantile keeps decreasing towards the normal.
            let at = student_t_quantile(p, 1000).unwrap();
            let after = student_t_quantile(p, 1001).unwrap();
            let far = student_t_quantile(p, 1_000_000_000).unwrap();
            assert!(at > after && after > far && far > normal_quantile(p) * (1.0 - 1e-8));
        }
    }

    #[test]
    fn normal_quantiles_match_known_values() {
        let known = [
            (0.5, 0.0),
            (0.975, 1.959_963_984_540_054),
            (0.995, 2.575_829_303_548_900_4),
            (0.841_344_746_068_542_9, 1.0),
            (0.01, -2.326_347_874_040_840_8),
            (0.001, -3.090_232_306_167_813_5),
            (0.999_999, 4.753_424_308_817_089),
        ];
        for (p, z) in known {
            let got = normal_quantile(p);
            assert!(
                (got - z).abs() <= 1.2e-9 * z.abs().max(1.0),
                "z({p}) = {got}, want {z}"
            );
        }
    }

    #[test]
    fn quantile_inputs_are_validated() {
        assert_eq!(
            student_t_quantile(0.9, 0),
            Err(ScarError::ZeroDegreesOfFreedom)
        );
        for bad in [0.0, 1.0, 1.5, f64::NAN] {
            assert!(matches!(
                student_t_quantile(bad, 3),
                Err(ScarError::InvalidProbability(_))
            ));
        }
    }
}
