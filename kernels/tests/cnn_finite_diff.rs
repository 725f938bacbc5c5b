//! Finite-difference checks: the backward kernels are the derivatives of their
//! forward kernels. Each layer output `y` is reduced to the scalar `L = Σ r·y` for a
//! fixed random `r`, so `dL/dy = r` is what goes into the backward kernel, and each
//! gradient entry is compared to a central difference of `L` (computed in f64).
//!
//! The reference kernels are checked (they are the oracle for everything else), and
//! the fast kernels on the same cases. Tolerance: `1e-3 · (1 + |g|)`; convolution and
//! dense layers are linear in each input, so the only error is f32 rounding.

use harp_kernels::cnn::reference;
use harp_kernels::{
    conv2d_backward, conv2d_forward, dense_backward, dense_forward, maxpool2x2_backward,
    maxpool2x2_forward, relu_backward, relu_forward, softmax_xent, CnnScratch, Conv2d, Dense,
    LayerGrads, MaxPool2x2,
};

/// Deterministic pseudo-random values in [-1, 1) (a tiny LCG).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn dot(r: &[f32], y: &[f32]) -> f64 {
    r.iter()
        .zip(y)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum()
}

/// Compares `grad[k]` with the central difference of `loss` in `param[k]`, for every k.
fn check_fd(
    what: &str,
    param: &[f32],
    grad: &[f32],
    h: f32,
    tol: f64,
    mut loss: impl FnMut(&[f32]) -> f64,
) {
    assert_eq!(param.len(), grad.len());
    for k in 0..param.len() {
        let (mut plus, mut minus) = (param.to_vec(), param.to_vec());
        plus[k] += h;
        minus[k] -= h;
        // The perturbation actually representable in f32.
        let step = f64::from(plus[k]) - f64::from(minus[k]);
        let fd = (loss(&plus) - loss(&minus)) / step;
        let g = f64::from(grad[k]);
        assert!(
            (fd - g).abs() <= tol * (1.0 + g.abs()),
            "{what}[{k}]: analytic {g} vs finite difference {fd}"
        );
    }
}

/// A convolution whose gradients come from `backward`, checked against differences
/// of `forward`, for both the reference and the fast kernels.
#[test]
fn conv_gradients_match_finite_differences() {
    let layers = [
        Conv2d::square(2, 3, 6, 3, 0),
        Conv2d::square(2, 3, 5, 3, 1),
        Conv2d {
            in_channels: 1,
            out_channels: 2,
            in_h: 4,
            in_w: 7,
            kernel_h: 2,
            kernel_w: 5,
            pad_h: 2,
            pad_w: 1,
        },
    ];
    for (seed, layer) in (0u64..).step_by(10).zip(layers) {
        let batch = 2;
        let x = values(seed, batch * layer.in_len().unwrap());
        let w = values(seed + 1, layer.weight_len().unwrap());
        let b = values(seed + 2, layer.out_channels);
        let r = values(seed + 3, batch * layer.out_len().unwrap());
        let loss = |x: &[f32], w: &[f32], b: &[f32]| {
            let mut y = vec![0.0; r.len()];
            reference::conv2d_forward(&layer, batch, x, w, b, &mut y).unwrap();
            dot(&r, &y)
        };
        let (mut dx, mut dw, mut db) = (vec![0.0; x.len()], vec![0.0; w.len()], vec![0.0; b.len()]);
        let grads = LayerGrads {
            dx: Some(&mut dx),
            dw: &mut dw,
            db: &mut db,
        };
        reference::conv2d_backward(&layer, batch, &x, &w, &r, grads).unwrap();
        let h = 1.0 / 64.0;
        check_fd("conv dx", &x, &dx, h, 1e-3, |p| loss(p, &w, &b));
        check_fd("conv dw", &w, &dw, h, 1e-3, |p| loss(&x, p, &b));
        check_fd("conv db", &b, &db, h, 1e-3, |p| loss(&x, &w, p));

        // The fast kernels, differentiated through their own forward.
        let mut scratch = CnnScratch::new();
        let mut fast_loss = |x: &[f32], w: &[f32], b: &[f32]| {
            let mut y = vec![0.0; r.len()];
            conv2d_forward(&layer, batch, x, w, b, &mut y, &mut scratch).unwrap();
            dot(&r, &y)
        };
        let (mut fdx, mut fdw, mut fdb) =
            (vec![0.0; x.len()], vec![0.0; w.len()], vec![0.0; b.len()]);
        let grads = LayerGrads {
            dx: Some(&mut fdx),
            dw: &mut fdw,
            db: &mut fdb,
        };
        conv2d_backward(&layer, batch, &x, &w, &r, grads, &mut CnnScratch::new()).unwrap();
        check_fd("fast conv dx", &x, &fdx, h, 1e-3, |p| fast_loss(p, &w, &b));
        check_fd("fast conv dw", &w, &fdw, h, 1e-3, |p| fast_loss(&x, p, &b));
        check_fd("fast conv db", &b, &fdb, h, 1e-3, |p| fast_loss(&x, &w, p));
    }
}

#[test]
fn dense_gradients_match_finite_differences() {
    let layer = Dense {
        inputs: 7,
        outputs: 4,
    };
    let batch = 3;
    let x = values(1, batch * 7);
    let w = values(2, 7 * 4);
    let b = values(3, 4);
    let r = values(4, batch * 4);
    for fast in [false, true] {
        let loss = |x: &[f32], w: &[f32], b: &[f32]| {
            let mut y = vec![0.0; r.len()];
            if fast {
                dense_forward(&layer, batch, x, w, b, &mut y).unwrap();
            } else {
                reference::dense_forward(&layer, batch, x, w, b, &mut y).unwrap();
            }
            dot(&r, &y)
        };
        let (mut dx, mut dw, mut db) = (vec![0.0; x.len()], vec![0.0; w.len()], vec![0.0; 4]);
        let grads = LayerGrads {
            dx: Some(&mut dx),
            dw: &mut dw,
            db: &mut db,
        };
        if fast {
            dense_backward(&layer, batch, &x, &w, &r, grads).unwrap();
        } else {
            reference::dense_backward(&layer, batch, &x, &w, &r, grads).unwrap();
        }
        let h = 1.0 / 64.0;
        check_fd("dense dx", &x, &dx, h, 1e-3, |p| loss(p, &w, &b));
        check_fd("dense dw", &w, &dw, h, 1e-3, |p| loss(&x, p, &b));
        check_fd("dense db", &b, &db, h, 1e-3, |p| loss(&x, &w, p));
    }
}

/// Max pooling is differentiable away from ties: the inputs are distinct multiples
/// of 1/8 in shuffled order, and the step (1/64) never changes a window's winner.
#[test]
fn pool_gradient_matches_finite_differences() {
    let layer = MaxPool2x2 {
        channels: 2,
        in_h: 5,
        in_w: 6,
    };
    let batch = 2;
    let n = batch * layer.in_len().unwrap();
    let keys = values(9, n);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
    let mut x = vec![0.0f32; n];
    for (rank, &k) in order.iter().enumerate() {
        x[k] = rank as f32 / 8.0 - 4.0;
    }
    let y_len = batch * layer.out_len().unwrap();
    let r = values(10, y_len);
    for fast in [false, true] {
        let loss = |x: &[f32]| {
            let (mut y, mut a) = (vec![0.0; y_len], vec![0; y_len]);
            if fast {
                maxpool2x2_forward(&layer, batch, x, &mut y, &mut a).unwrap();
            } else {
                reference::maxpool2x2_forward(&layer, batch, x, &mut y, &mut a).unwrap();
            }
            dot(&r, &y)
        };
        let (mut y, mut a) = (vec![0.0; y_len], vec![0; y_len]);
        maxpool2x2_forward(&layer, batch, &x, &mut y, &mut a).unwrap();
        let mut dx = vec![f32::NAN; n];
        if fast {
            maxpool2x2_backward(&layer, batch, &a, &r, &mut dx).unwrap();
        } else {
            reference::maxpool2x2_backward(&layer, batch, &a, &r, &mut dx).unwrap();
        }
        check_fd("pool dx", &x, &dx, 1.0 / 64.0, 1e-4, loss);
        // The odd last row (in_h = 5) gets no gradient: it is never pooled.
        for plane in 0..batch * layer.channels {
            let last_row = &dx[plane * 30 + 24..plane * 30 + 30];
            assert!(last_row.iter().all(|&g| g == 0.0));
        }
    }
}

/// ReLU away from its kink at 0.
#[test]
fn relu_gradient_matches_finite_differences() {
    let x: Vec<f32> = values(5, 40)
        .iter()
        .map(|&v| if v.abs() < 0.1 { v + 0.2 } else { v })
        .collect();
    let r = values(6, x.len());
    let loss = |x: &[f32]| {
        let mut y = vec![0.0; x.len()];
        relu_forward(x, &mut y).unwrap();
        dot(&r, &y)
    };
    let mut y = vec![0.0; x.len()];
    relu_forward(&x, &mut y).unwrap();
    let mut dx = vec![f32::NAN; x.len()];
    relu_backward(&y, &r, &mut dx).unwrap();
    check_fd("relu dx", &x, &dx, 1.0 / 64.0, 1e-4, loss);
}

/// The softmax cross-entropy gradient is the derivative of the loss it returns.
#[test]
fn softmax_xent_gradient_matches_finite_differences() {
    let classes = 5;
    let labels = [0u32, 4, 2, 2, 1, 3];
    let logits: Vec<f32> = values(7, labels.len() * classes)
        .iter()
        .map(|v| 3.0 * v)
        .collect();
    for fast in [false, true] {
        let loss = |z: &[f32]| {
            let mut g = vec![0.0; z.len()];
            if fast {
                softmax_xent(classes, z, &labels, &mut g).unwrap()
            } else {
                reference::softmax_xent_scaled(classes, z, &labels, 1.0, &mut g).unwrap()
            }
        };
        let mut g = vec![f32::NAN; logits.len()];
        reference::softmax_xent_scaled(classes, &logits, &labels, 1.0, &mut g).unwrap();
        let tol = if fast { 2e-3 } else { 1e-4 };
        check_fd("dlogits", &logits, &g, 1.0 / 256.0, tol, loss);
    }
}
