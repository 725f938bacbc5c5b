//! ALS half-steps solve their normal equations, agree with the f64 reference, and
//! alternate down to the noise level of a low-rank matrix.

use harp_kernels::lda::FastRng;
use harp_kernels::mf::reference::{als_half_step_reference, normal_equations};
use harp_kernels::mf::{als_half_step, rmse, Csr, Ratings};

/// A low-rank rating set: `users × items` with a `true_rank` ground truth, each entry
/// observed with probability `density`, plus uniform noise of amplitude `noise`.
struct Data {
    users: usize,
    items: usize,
    u: Vec<u32>,
    i: Vec<u32>,
    r: Vec<f32>,
}

fn gaussian(rng: &mut FastRng) -> f32 {
    // Sum of 4 uniforms, centred and scaled to unit variance.
    let s: f32 = (0..4).map(|_| rng.next_f32()).sum();
    (s - 2.0) * 3.0f32.sqrt()
}

fn low_rank(users: usize, items: usize, true_rank: usize, density: f32, noise: f32) -> Data {
    let mut rng = FastRng::new(17);
    let pt: Vec<f32> = (0..users * true_rank).map(|_| gaussian(&mut rng)).collect();
    let qt: Vec<f32> = (0..items * true_rank).map(|_| gaussian(&mut rng)).collect();
    let (mut u, mut i, mut r) = (vec![], vec![], vec![]);
    for a in 0..users {
        for b in 0..items {
            if rng.next_f32() < density {
                let dot: f32 = (0..true_rank)
                    .map(|m| pt[a * true_rank + m] * qt[b * true_rank + m])
                    .sum();
                u.push(a as u32);
                i.push(b as u32);
                r.push(dot + noise * (2.0 * rng.next_f32() - 1.0));
            }
        }
    }
    Data {
        users,
        items,
        u,
        i,
        r,
    }
}

/// CSR of the ratings keyed by `rows` (users or items) with columns `cols`.
fn csr(
    rows: &[u32],
    cols: &[u32],
    values: &[f32],
    n_rows: usize,
) -> (Vec<u32>, Vec<u32>, Vec<f32>) {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&j| (rows[j], cols[j]));
    let mut offsets = vec![0u32; n_rows + 1];
    for &row in rows {
        offsets[row as usize + 1] += 1;
    }
    for j in 0..n_rows {
        offsets[j + 1] += offsets[j];
    }
    let c = order.iter().map(|&j| cols[j]).collect();
    let v = order.iter().map(|&j| values[j]).collect();
    (offsets, c, v)
}

fn random_factors(rows: usize, k: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = FastRng::new(seed);
    (0..rows * k).map(|_| scale * gaussian(&mut rng)).collect()
}

/// Max over rows of `‖A x − b‖∞ / (‖A‖∞ ‖x‖∞ + ‖b‖∞)`, with the f64 normal equations.
fn worst_residual(k: usize, lambda: f32, c: Csr<'_>, fixed: &[f32], x: &[f32]) -> f64 {
    let rows = c.offsets.len() - 1;
    let mut worst = 0.0f64;
    for row in 0..rows {
        let (a, b) = normal_equations(k, lambda, c, fixed, row).unwrap();
        let xr = &x[row * k..(row + 1) * k];
        let mut res = 0.0f64;
        let mut a_norm = 0.0f64;
        for i in 0..k {
            let ax: f64 = (0..k).map(|m| a[i * k + m] * f64::from(xr[m])).sum();
            res = res.max((ax - b[i]).abs());
            a_norm = a_norm.max((0..k).map(|m| a[i * k + m].abs()).sum());
        }
        let x_norm = xr.iter().fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
        let b_norm = b.iter().fold(0.0f64, |m, &v| m.max(v.abs()));
        worst = worst.max(res / (a_norm * x_norm + b_norm + f64::MIN_POSITIVE));
    }
    worst
}

#[test]
fn solutions_satisfy_the_normal_equations_and_match_the_reference() {
    for (k, density) in [(1usize, 0.3f32), (8, 0.3), (37, 0.5), (128, 0.9)] {
        let d = low_rank(40, 200, 5, density, 0.1);
        let (offsets, cols, values) = csr(&d.u, &d.i, &d.r, d.users);
        let c = Csr {
            offsets: &offsets,
            cols: &cols,
            values: &values,
        };
        let q = random_factors(d.items, k, 3, 0.5);
        let lambda = 0.05;
        let mut fast = vec![9.0f32; d.users * k];
        let mut slow = vec![9.0f32; d.users * k];
        als_half_step(k, lambda, c, &q, &mut fast).unwrap();
        als_half_step_reference(k, lambda, c, &q, &mut slow).unwrap();

        let res_slow = worst_residual(k, lambda, c, &q, &slow);
        let res_fast = worst_residual(k, lambda, c, &q, &fast);
        // The reference is exact up to its final rounding to f32; the fast path carries
        // f32 assembly and factorization error.
        assert!(res_slow < 1e-6, "k={k}: reference residual {res_slow}");
        assert!(res_fast < 1e-4, "k={k}: fast residual {res_fast}");

        for row in 0..d.users {
            let (f, s) = (&fast[row * k..(row + 1) * k], &slow[row * k..(row + 1) * k]);
            let scale = s.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for (a, b) in f.iter().zip(s) {
                assert!(
                    (a - b).abs() <= 1e-3 * scale.max(1e-3),
                    "k={k} row {row}: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn rows_without_ratings_are_zero() {
    let offsets = [0u32, 2, 2, 3];
    let cols = [0u32, 1, 1];
    let values = [1.0f32, 2.0, 3.0];
    let c = Csr {
        offsets: &offsets,
        cols: &cols,
        values: &values,
    };
    let q = [1.0f32, 0.5, -0.5, 2.0];
    let mut out = vec![7.0f32; 6];
    als_half_step(2, 0.1, c, &q, &mut out).unwrap();
    assert_eq!(&out[2..4], &[0.0, 0.0]);
    assert!(out[0] != 0.0 && out[4] != 0.0);
    // Row 2, one entry q_1 = (-0.5, 2), r = 3: (q qᵀ + 0.1 I) x = 3 q
    // ⇒ x = 3 q / (|q|² + 0.1) (q is an eigenvector).
    let s = 3.0 / (0.25 + 4.0 + 0.1);
    assert!(
        (out[4] - (-0.5 * s)).abs() < 1e-5 && (out[5] - 2.0 * s).abs() < 1e-5,
        "{out:?} vs {s}"
    );
}

#[test]
fn alternating_half_steps_fit_a_low_rank_matrix() {
    let k = 4;
    let d = low_rank(120, 100, k, 0.4, 0.05);
    let (uo, uc, uv) = csr(&d.u, &d.i, &d.r, d.users);
    let (io, ic, iv) = csr(&d.i, &d.u, &d.r, d.items);
    let by_user = Csr {
        offsets: &uo,
        cols: &uc,
        values: &uv,
    };
    let by_item = Csr {
        offsets: &io,
        cols: &ic,
        values: &iv,
    };
    let ratings = Ratings {
        users: &d.u,
        items: &d.i,
        values: &d.r,
    };
    let mut p = random_factors(d.users, k, 5, 0.1);
    let mut q = random_factors(d.items, k, 6, 0.1);
    let start = rmse(k, ratings, &p, &q).unwrap();
    let mut last = start;
    for _ in 0..15 {
        als_half_step(k, 0.01, by_user, &q, &mut p).unwrap();
        als_half_step(k, 0.01, by_item, &p, &mut q).unwrap();
        let now = rmse(k, ratings, &p, &q).unwrap();
        assert!(
            now <= last * 1.0001,
            "ALS must not increase the loss much: {last} -> {now}"
        );
        last = now;
    }
    // Noise is uniform in ±0.05 (RMS 0.029): a rank-4 fit reaches about that level.
    assert!(start > 1.0, "start {start}");
    assert!(last < 0.05, "training RMSE after ALS {last}");
}
