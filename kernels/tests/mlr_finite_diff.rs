//! Finite-difference check: `gradient_reference` is the derivative of the loss it
//! returns, which is what makes it a trustworthy oracle for the fast path.

use harp_kernels::{gradient, gradient_reference, MlrScratch, MlrShape};

/// Deterministic pseudo-random values in [-1, 1) (a tiny LCG; no RNG dependency).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn loss_at(shape: MlrShape, x: &[f32], labels: &[u32], w: &[f32]) -> f64 {
    let mut scratch_grad = vec![0.0f32; w.len()];
    gradient_reference(shape, x, labels, w, &mut scratch_grad).unwrap()
}

#[test]
fn reference_gradient_matches_central_differences() {
    let shape = MlrShape {
        features: 4,
        classes: 3,
    };
    let labels = [0u32, 2, 1, 2, 0];
    let x = values(1, labels.len() * shape.features);
    let w = values(2, shape.features * shape.classes);
    let mut grad = vec![0.0f32; w.len()];
    gradient_reference(shape, &x, &labels, &w, &mut grad).unwrap();

    let h = 1.0f32 / 128.0;
    for k in 0..w.len() {
        let (mut plus, mut minus) = (w.clone(), w.clone());
        plus[k] += h;
        minus[k] -= h;
        // Use the perturbation actually representable in f32.
        let step = f64::from(plus[k]) - f64::from(minus[k]);
        let fd = (loss_at(shape, &x, &labels, &plus) - loss_at(shape, &x, &labels, &minus)) / step;
        let g = f64::from(grad[k]);
        assert!(
            (fd - g).abs() <= 1e-3 * (1.0 + g.abs()),
            "w[{k}]: analytic {g} vs finite difference {fd}"
        );
    }

    // And the fast path agrees on this case too.
    let mut fast = vec![0.0f32; w.len()];
    gradient(shape, &x, &labels, &w, &mut fast, &mut MlrScratch::new()).unwrap();
    for (a, b) in fast.iter().zip(&grad) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
    }
}
