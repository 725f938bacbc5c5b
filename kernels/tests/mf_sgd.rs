//! SGD agrees with its f64 reference, applies the documented update, and fits a
//! low-rank matrix; RMSE and squared-error sums are what they say.

use harp_kernels::lda::FastRng;
use harp_kernels::mf::reference::sgd_step_reference;
use harp_kernels::mf::{rmse, sgd_step, squared_error_sum, Ratings, Sgd};

fn uniform(rng: &mut FastRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| scale * (2.0 * rng.next_f32() - 1.0))
        .collect()
}

#[test]
fn one_rating_applies_the_documented_update() {
    let k = 3;
    let mut p = vec![0.5f32, -1.0, 2.0];
    let mut q = vec![1.0f32, 0.25, -0.5];
    let (lr, lambda) = (0.1f32, 0.2f32);
    let r = 3.0f32;
    let e = r - (0.5 * 1.0 - 0.25 - 2.0 * 0.5);
    let want_p: Vec<f32> = (0..k)
        .map(|j| p[j] + lr * (e * q[j] - lambda * p[j]))
        .collect();
    let want_q: Vec<f32> = (0..k)
        .map(|j| q[j] + lr * (e * p[j] - lambda * q[j]))
        .collect();
    let ratings = Ratings {
        users: &[0],
        items: &[0],
        values: &[r],
    };
    sgd_step(k, Sgd { lr, lambda }, ratings, &mut p, &mut q).unwrap();
    for j in 0..k {
        assert!((p[j] - want_p[j]).abs() < 1e-6, "{p:?} vs {want_p:?}");
        assert!((q[j] - want_q[j]).abs() < 1e-6, "{q:?} vs {want_q:?}");
    }
}

#[test]
fn matches_the_f64_reference() {
    let mut rng = FastRng::new(8);
    for k in [1usize, 7, 16, 64, 128] {
        let (users, items, n) = (30usize, 20usize, 500usize);
        let u: Vec<u32> = (0..n).map(|_| rng.below(users as u32)).collect();
        let i: Vec<u32> = (0..n).map(|_| rng.below(items as u32)).collect();
        let r: Vec<f32> = uniform(&mut rng, n, 2.0);
        let ratings = Ratings {
            users: &u,
            items: &i,
            values: &r,
        };
        let p0 = uniform(&mut rng, users * k, 0.3);
        let q0 = uniform(&mut rng, items * k, 0.3);
        let sgd = Sgd {
            lr: 0.01,
            lambda: 0.05,
        };
        let (mut p1, mut q1) = (p0.clone(), q0.clone());
        let (mut p2, mut q2) = (p0, q0);
        sgd_step(k, sgd, ratings, &mut p1, &mut q1).unwrap();
        sgd_step_reference(k, sgd, ratings, &mut p2, &mut q2).unwrap();
        for (a, b) in p1.iter().zip(&p2).chain(q1.iter().zip(&q2)) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "k={k}: {a} vs {b}");
        }
    }
}

#[test]
fn sgd_fits_a_low_rank_matrix() {
    let (users, items, k) = (100usize, 80usize, 3usize);
    let mut rng = FastRng::new(21);
    let pt = uniform(&mut rng, users * k, 1.0);
    let qt = uniform(&mut rng, items * k, 1.0);
    let (mut u, mut i, mut r) = (vec![], vec![], vec![]);
    for a in 0..users {
        for b in 0..items {
            if rng.next_f32() < 0.5 {
                u.push(a as u32);
                i.push(b as u32);
                r.push((0..k).map(|m| pt[a * k + m] * qt[b * k + m]).sum::<f32>());
            }
        }
    }
    let ratings = Ratings {
        users: &u,
        items: &i,
        values: &r,
    };
    let mut p = uniform(&mut rng, users * k, 0.3);
    let mut q = uniform(&mut rng, items * k, 0.3);
    let start = rmse(k, ratings, &p, &q).unwrap();
    let sgd = Sgd {
        lr: 0.05,
        lambda: 0.001,
    };
    for _ in 0..300 {
        sgd_step(k, sgd, ratings, &mut p, &mut q).unwrap();
    }
    let end = rmse(k, ratings, &p, &q).unwrap();
    assert!(end < 0.1 * start, "RMSE {start} -> {end}");
    assert!(end < 0.05, "RMSE {end}");
}

#[test]
fn rmse_and_squared_error_sums() {
    let k = 2;
    let p = [1.0f32, 2.0, 0.0, -1.0];
    let q = [3.0f32, 1.0, 0.5, 0.5];
    // Predictions: (0,0) 5, (0,1) 1.5, (1,0) -1, (1,1) -0.5.
    let u = [0u32, 0, 1, 1];
    let i = [0u32, 1, 0, 1];
    let r = [4.0f32, 1.5, 1.0, 0.5];
    // Errors: -1, 0, 2, 1 -> squares 1, 0, 4, 1 -> sum 6.
    let all = Ratings {
        users: &u,
        items: &i,
        values: &r,
    };
    assert_eq!(squared_error_sum(k, all, &p, &q).unwrap(), 6.0);
    assert!((rmse(k, all, &p, &q).unwrap() - 1.5f64.sqrt()).abs() < 1e-15);
    let first = Ratings {
        users: &u[..2],
        items: &i[..2],
        values: &r[..2],
    };
    let second = Ratings {
        users: &u[2..],
        items: &i[2..],
        values: &r[2..],
    };
    let shards = squared_error_sum(k, first, &p, &q).unwrap()
        + squared_error_sum(k, second, &p, &q).unwrap();
    assert_eq!(shards, 6.0);
}
