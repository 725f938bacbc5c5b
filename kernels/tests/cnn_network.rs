//! The layer kernels composed into SCAR's MNIST network:
//! conv 5×5 (1→c1) + ReLU + maxpool 2×2, conv 5×5 (c1→c2) + ReLU + maxpool 2×2,
//! dense → ReLU → dense → ReLU → dense, softmax cross-entropy.
//!
//! * the fast network's gradient matches the same network built from the reference
//!   kernels;
//! * a few SGD (and Adam) steps on a random batch lower its loss;
//! * an ignored timing test prints one forward+backward at batch 64 (run it with
//!   `cargo test --release -p harp-kernels --test cnn_network -- --ignored --nocapture`).

use harp_kernels::cnn::reference;
use harp_kernels::{
    adam_step, conv2d_backward, conv2d_forward, dense_backward, dense_forward, maxpool2x2_backward,
    maxpool2x2_forward, relu_backward_in_place, relu_in_place, softmax_xent_evaluate,
    softmax_xent_scaled, Adam, CnnScratch, Conv2d, Dense, LayerGrads, MaxPool2x2,
};
use std::ops::Range;

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

/// Sizes of the network: `c1`, `c2` conv channels and the dense widths after the
/// flattened conv output (the last one is the number of classes).
struct Arch {
    c1: usize,
    c2: usize,
    hidden: [usize; 2],
    classes: usize,
}

const SCAR: Arch = Arch {
    c1: 32,
    c2: 64,
    hidden: [512, 128],
    classes: 10,
};

/// The network: layer descriptors, parameter ranges within one flat vector, and
/// every activation buffer (sized for `batch`), allocated once.
struct Net {
    batch: usize,
    conv: [Conv2d; 2],
    pool: [MaxPool2x2; 2],
    dense: [Dense; 3],
    /// (weights, bias) ranges of conv1, conv2, dense1..3 in the parameter vector.
    ranges: Vec<(Range<usize>, Range<usize>)>,
    params: usize,
    // Activations (post-ReLU where there is one) and pooling indices.
    a: [Vec<f32>; 2],
    p: [Vec<f32>; 2],
    arg: [Vec<u32>; 2],
    h: [Vec<f32>; 2],
    z: Vec<f32>,
    // Gradients of the activations.
    da: [Vec<f32>; 2],
    dp: [Vec<f32>; 2],
    dh: [Vec<f32>; 2],
    dz: Vec<f32>,
    scratch: CnnScratch,
}

impl Net {
    fn new(arch: &Arch, batch: usize) -> Net {
        let conv = [
            Conv2d::square(1, arch.c1, 28, 5, 0),
            Conv2d::square(arch.c1, arch.c2, 12, 5, 0),
        ];
        let pool = [
            MaxPool2x2 {
                channels: arch.c1,
                in_h: 24,
                in_w: 24,
            },
            MaxPool2x2 {
                channels: arch.c2,
                in_h: 8,
                in_w: 8,
            },
        ];
        let flat = arch.c2 * 16;
        let dense = [
            Dense {
                inputs: flat,
                outputs: arch.hidden[0],
            },
            Dense {
                inputs: arch.hidden[0],
                outputs: arch.hidden[1],
            },
            Dense {
                inputs: arch.hidden[1],
                outputs: arch.classes,
            },
        ];
        let mut ranges = Vec::new();
        let mut at = 0;
        let sizes = conv
            .iter()
            .map(|c| (c.weight_len().unwrap(), c.out_channels))
            .chain(dense.iter().map(|d| (d.weight_len().unwrap(), d.outputs)));
        for (w, b) in sizes {
            ranges.push((at..at + w, at + w..at + w + b));
            at += w + b;
        }
        let zeros = |n: usize| vec![0.0f32; batch * n];
        let a = [
            zeros(conv[0].out_len().unwrap()),
            zeros(conv[1].out_len().unwrap()),
        ];
        let p = [
            zeros(pool[0].out_len().unwrap()),
            zeros(pool[1].out_len().unwrap()),
        ];
        Net {
            batch,
            arg: [vec![0; p[0].len()], vec![0; p[1].len()]],
            da: a.clone(),
            dp: p.clone(),
            a,
            p,
            h: [zeros(arch.hidden[0]), zeros(arch.hidden[1])],
            dh: [zeros(arch.hidden[0]), zeros(arch.hidden[1])],
            z: zeros(arch.classes),
            dz: zeros(arch.classes),
            conv,
            pool,
            dense,
            ranges,
            params: at,
            scratch: CnnScratch::new(),
        }
    }

    /// He-style uniform initialization: weights in ±sqrt(6 / fan_in), biases 0.
    fn init(&self, seed: u64) -> Vec<f32> {
        let mut theta = vec![0.0f32; self.params];
        let fan_in = [
            25,
            self.conv[1].in_channels * 25,
            self.dense[0].inputs,
            self.dense[1].inputs,
            self.dense[2].inputs,
        ];
        for (k, ((w, _), fan)) in self.ranges.iter().zip(fan_in).enumerate() {
            let bound = (6.0 / fan as f32).sqrt();
            let v = values(seed + k as u64, w.len());
            for (t, r) in theta[w.clone()].iter_mut().zip(v) {
                *t = r * bound;
            }
        }
        theta
    }

    /// Forward and backward over one batch; writes the gradient of the loss scaled
    /// by `scale` into `grad` and returns the (unscaled, summed) loss.
    fn step(
        &mut self,
        fast: bool,
        theta: &[f32],
        x: &[f32],
        labels: &[u32],
        scale: f32,
        grad: &mut [f32],
    ) -> f64 {
        let n = self.batch;
        let r = self.ranges.clone();
        let wb = |k: usize| (&theta[r[k].0.clone()], &theta[r[k].1.clone()]);

        // Forward.
        for l in 0..2 {
            let (w, b) = wb(l);
            let input = if l == 0 { x } else { &self.p[0] };
            if fast {
                conv2d_forward(
                    &self.conv[l],
                    n,
                    input,
                    w,
                    b,
                    &mut self.a[l],
                    &mut self.scratch,
                )
            } else {
                reference::conv2d_forward(&self.conv[l], n, input, w, b, &mut self.a[l])
            }
            .unwrap();
            relu_in_place(&mut self.a[l]);
            if fast {
                maxpool2x2_forward(
                    &self.pool[l],
                    n,
                    &self.a[l],
                    &mut self.p[l],
                    &mut self.arg[l],
                )
            } else {
                reference::maxpool2x2_forward(
                    &self.pool[l],
                    n,
                    &self.a[l],
                    &mut self.p[l],
                    &mut self.arg[l],
                )
            }
            .unwrap();
        }
        for l in 0..3 {
            let (w, b) = wb(2 + l);
            let [h0, h1] = &mut self.h;
            let (input, out): (&[f32], &mut Vec<f32>) = match l {
                0 => (&self.p[1], h0),
                1 => (h0, h1),
                _ => (h1, &mut self.z),
            };
            if fast {
                dense_forward(&self.dense[l], n, input, w, b, out)
            } else {
                reference::dense_forward(&self.dense[l], n, input, w, b, out)
            }
            .unwrap();
            if l < 2 {
                relu_in_place(out);
            }
        }
        let classes = self.dense[2].outputs;
        let loss = if fast {
            softmax_xent_scaled(classes, &self.z, labels, scale, &mut self.dz)
        } else {
            reference::softmax_xent_scaled(classes, &self.z, labels, scale, &mut self.dz)
        }
        .unwrap();

        // Backward: split the gradient vector into per-layer (dw, db) slices.
        let mut slices: Vec<(&mut [f32], &mut [f32])> = Vec::new();
        let mut rest = grad;
        for (w, b) in &r {
            let (dw, tail) = rest.split_at_mut(w.len());
            let (db, tail) = tail.split_at_mut(b.len());
            slices.push((dw, db));
            rest = tail;
        }
        for l in (0..3).rev() {
            let (w, _) = wb(2 + l);
            let input = if l == 0 { &self.p[1] } else { &self.h[l - 1] };
            let [dh0, dh1] = &mut self.dh;
            let (dy, dx): (&[f32], &mut [f32]) = match l {
                0 => (dh0, &mut self.dp[1]),
                1 => (dh1, dh0),
                _ => (&self.dz, dh1),
            };
            let (dw, db) = &mut slices[2 + l];
            let grads = LayerGrads {
                dx: Some(dx),
                dw,
                db,
            };
            if fast {
                dense_backward(&self.dense[l], n, input, w, dy, grads)
            } else {
                reference::dense_backward(&self.dense[l], n, input, w, dy, grads)
            }
            .unwrap();
            if l > 0 {
                relu_backward_in_place(&self.h[l - 1], &mut self.dh[l - 1]).unwrap();
            }
        }
        for l in (0..2).rev() {
            if fast {
                maxpool2x2_backward(&self.pool[l], n, &self.arg[l], &self.dp[l], &mut self.da[l])
            } else {
                reference::maxpool2x2_backward(
                    &self.pool[l],
                    n,
                    &self.arg[l],
                    &self.dp[l],
                    &mut self.da[l],
                )
            }
            .unwrap();
            relu_backward_in_place(&self.a[l], &mut self.da[l]).unwrap();
            let (w, _) = wb(l);
            let input = if l == 0 { x } else { &self.p[0] };
            let (dw, db) = &mut slices[l];
            let grads = LayerGrads {
                dx: if l == 0 { None } else { Some(&mut self.dp[0]) },
                dw,
                db,
            };
            if fast {
                conv2d_backward(
                    &self.conv[l],
                    n,
                    input,
                    w,
                    &self.da[l],
                    grads,
                    &mut self.scratch,
                )
            } else {
                reference::conv2d_backward(&self.conv[l], n, input, w, &self.da[l], grads)
            }
            .unwrap();
        }
        loss
    }

    /// (correct, summed loss) of the current logits.
    fn evaluate(&self, labels: &[u32]) -> (usize, f64) {
        softmax_xent_evaluate(self.dense[2].outputs, &self.z, labels).unwrap()
    }
}

fn batch_data(batch: usize, classes: usize, seed: u64) -> (Vec<f32>, Vec<u32>) {
    // MNIST-like range: pixels in [0, 1).
    let x = values(seed, batch * 784)
        .iter()
        .map(|v| 0.5 * (v + 1.0))
        .collect();
    let labels = values(seed + 1, batch)
        .iter()
        .map(|v| ((v + 1.0) * 0.5 * classes as f32) as u32 % classes as u32)
        .collect();
    (x, labels)
}

fn norm(v: &[f32]) -> f64 {
    v.iter().map(|&a| f64::from(a).powi(2)).sum::<f64>().sqrt()
}

/// The fast kernels and the reference kernels give the same network gradient. The
/// comparison is per parameter block, relative to the block's norm (`1e-4`): an f32
/// rounding difference can flip a near-tie in max pooling, which moves a few entries.
#[test]
fn fast_network_gradient_matches_reference() {
    let batch = 3;
    let mut net = Net::new(&SCAR, batch);
    let theta = net.init(1);
    let (x, labels) = batch_data(batch, SCAR.classes, 2);
    let mut g_fast = vec![f32::NAN; net.params];
    let mut g_ref = vec![f32::NAN; net.params];
    let l_fast = net.step(true, &theta, &x, &labels, 1.0, &mut g_fast);
    let l_ref = net.step(false, &theta, &x, &labels, 1.0, &mut g_ref);
    assert!(
        (l_fast - l_ref).abs() <= 1e-4 * l_ref.abs(),
        "loss {l_fast} vs {l_ref}"
    );
    for (k, (w, b)) in net.ranges.iter().enumerate() {
        for (name, r) in [("w", w), ("b", b)] {
            let (f, s) = (&g_fast[r.clone()], &g_ref[r.clone()]);
            let diff: Vec<f32> = f.iter().zip(s).map(|(a, b)| a - b).collect();
            let scale = norm(s);
            assert!(scale > 0.0, "layer {k} {name}: zero gradient");
            assert!(
                norm(&diff) <= 1e-4 * scale,
                "layer {k} {name}: |fast - ref| = {} vs |ref| = {scale}",
                norm(&diff)
            );
        }
    }
}

/// Plain SGD on one random batch (random labels: the network memorizes them) lowers
/// the loss; so does the crate's Adam rule on the flat parameter vector.
#[test]
fn sgd_and_adam_steps_lower_the_loss() {
    let batch = 16;
    let mut net = Net::new(&SCAR, batch);
    let (x, labels) = batch_data(batch, SCAR.classes, 3);
    let scale = 1.0 / batch as f32;

    let mut theta = net.init(4);
    let mut grad = vec![0.0f32; net.params];
    let first = net.step(true, &theta, &x, &labels, scale, &mut grad);
    let (_, eval_loss) = net.evaluate(&labels);
    assert!((eval_loss - first).abs() <= 1e-9 * first);
    let mut last = first;
    for _ in 0..8 {
        for (t, g) in theta.iter_mut().zip(&grad) {
            *t -= 0.05 * g;
        }
        last = net.step(true, &theta, &x, &labels, scale, &mut grad);
    }
    assert!(
        last < 0.8 * first,
        "SGD: loss {first} -> {last} did not drop by 20%"
    );

    let mut theta = net.init(4);
    let (mut m, mut v) = (vec![0.0; net.params], vec![0.0; net.params]);
    let first = net.step(true, &theta, &x, &labels, scale, &mut grad);
    let mut last = first;
    for step in 1..=8 {
        adam_step(&mut theta, &mut m, &mut v, &grad, step, Adam::default()).unwrap();
        last = net.step(true, &theta, &x, &labels, scale, &mut grad);
    }
    let (correct, _) = net.evaluate(&labels);
    assert!(
        last < 0.5 * first,
        "Adam: loss {first} -> {last} did not halve"
    );
    assert!(
        correct > batch / 2,
        "Adam: only {correct}/{batch} memorized"
    );
}

/// One forward+backward of the SCAR network at batch 64 on one CPU thread.
#[test]
#[ignore = "timing; run with --release -- --ignored --nocapture"]
fn scar_network_step_timing() {
    let batch = 64;
    let mut net = Net::new(&SCAR, batch);
    let theta = net.init(5);
    let (x, labels) = batch_data(batch, SCAR.classes, 6);
    let mut grad = vec![0.0f32; net.params];
    for _ in 0..3 {
        net.step(true, &theta, &x, &labels, 1.0 / 64.0, &mut grad);
    }
    let iters = 20;
    let start = std::time::Instant::now();
    for _ in 0..iters {
        net.step(true, &theta, &x, &labels, 1.0 / 64.0, &mut grad);
    }
    let per = start.elapsed().as_secs_f64() / f64::from(iters);
    println!(
        "SCAR CNN forward+backward, batch {batch}, 1 thread: {:.2} ms/step ({:.0} samples/s; {} parameters)",
        per * 1e3,
        batch as f64 / per,
        net.params
    );
}
