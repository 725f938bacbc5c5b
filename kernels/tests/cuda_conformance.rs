//! CUDA conformance: every CUDA kernel agrees with its CPU version on random inputs of
//! several sizes (tiny ones, non-multiples of 4, and sizes that need several
//! grid-stride passes), and refuses bad input like the CPU version, writing nothing.
//!
//! Tolerances (stated per case): element-wise updates `|gpu - cpu| <= 1e-5 (1 + |cpu|)`
//! against the CPU fast rules; MLR gradient against the f64 reference with the same
//! bounds as the CPU fast path's tests (`1e-4 (|ref| + sum_i |x_ij|) + 1e-6` per entry,
//! `1e-4 (|loss| + rows)` for the loss).
//!
//! Without a CUDA device every case prints `skipped: no CUDA device (<reason>)` and
//! passes; see `cuda_common` (and `HARP_REQUIRE_GPU`). To add cases for another kernel,
//! write `let gpu = gpu_or_skip!();` at the top of the test.
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::{assert_close, rng, uniform};
use harp_kernels::cuda::{mlr as gpu_mlr, optim as gpu_optim};
use harp_kernels::{
    adagrad_step, adam_step, add_assign, axpy, gradient, gradient_reference, AdaGrad, Adam,
    KernelError, MlrScratch, MlrShape,
};
use rand::Rng;

/// Element counts for the update rules: empty, tiny, around multiples of 4, and large
/// enough (3M) for several grid-stride passes on an H100 (one wave is 132 × 2048 threads
/// × 4 floats ≈ 1.08M floats).
const SIZES: &[usize] = &[
    0, 1, 2, 3, 4, 5, 7, 8, 31, 1000, 4099, 65_537, 1_000_003, 3_000_001,
];

/// Relative tolerance for the element-wise updates.
const UPDATE_TOL: f32 = 1e-5;

#[test]
fn add_assign_matches_cpu() {
    let gpu = gpu_or_skip!();
    for (case, &n) in SIZES.iter().enumerate() {
        let mut r = rng(100 + case as u64);
        let dst = uniform(&mut r, n, -2.0, 2.0);
        let src = uniform(&mut r, n, -2.0, 2.0);
        let mut want = dst.clone();
        add_assign(&mut want, &src).unwrap();

        let mut d_dst = gpu.upload(&dst).unwrap();
        let d_src = gpu.upload(&src).unwrap();
        gpu_optim::add_assign(gpu, &mut d_dst, &d_src).unwrap();
        assert_close(
            "add_assign dst",
            &gpu.download(&d_dst).unwrap(),
            &want,
            UPDATE_TOL,
        );
        assert_eq!(gpu.download(&d_src).unwrap(), src, "src must be left alone");
    }
}

#[test]
fn axpy_matches_cpu() {
    let gpu = gpu_or_skip!();
    for (case, &n) in SIZES.iter().enumerate() {
        let mut r = rng(200 + case as u64);
        let alpha = r.random_range(-3.0f32..3.0);
        let dst = uniform(&mut r, n, -2.0, 2.0);
        let src = uniform(&mut r, n, -2.0, 2.0);
        let mut want = dst.clone();
        axpy(&mut want, alpha, &src).unwrap();

        let mut d_dst = gpu.upload(&dst).unwrap();
        let d_src = gpu.upload(&src).unwrap();
        gpu_optim::axpy(gpu, &mut d_dst, alpha, &d_src).unwrap();
        assert_close(
            "axpy dst",
            &gpu.download(&d_dst).unwrap(),
            &want,
            UPDATE_TOL,
        );
    }
}

#[test]
fn adagrad_matches_cpu_over_three_steps() {
    let gpu = gpu_or_skip!();
    for (case, &n) in SIZES.iter().enumerate() {
        let mut r = rng(300 + case as u64);
        let p = AdaGrad {
            lr: r.random_range(0.001f32..1.0),
            eps: 1e-8,
        };
        let w = uniform(&mut r, n, -2.0, 2.0);
        let accum = uniform(&mut r, n, 0.0, 4.0); // accumulators are >= 0
        let grads: Vec<Vec<f32>> = (0..3).map(|_| uniform(&mut r, n, -2.0, 2.0)).collect();

        let (mut cw, mut ca) = (w.clone(), accum.clone());
        let mut dw = gpu.upload(&w).unwrap();
        let mut da = gpu.upload(&accum).unwrap();
        for g in &grads {
            adagrad_step(&mut cw, &mut ca, g, p).unwrap();
            let dg = gpu.upload(g).unwrap();
            gpu_optim::adagrad_step(gpu, &mut dw, &dg, &mut da, &p).unwrap();
        }
        assert_close(
            "adagrad accum",
            &gpu.download(&da).unwrap(),
            &ca,
            UPDATE_TOL,
        );
        assert_close("adagrad w", &gpu.download(&dw).unwrap(), &cw, UPDATE_TOL);
    }
}

#[test]
fn adam_matches_cpu_over_three_steps() {
    let gpu = gpu_or_skip!();
    for (case, &n) in SIZES.iter().enumerate() {
        let mut r = rng(400 + case as u64);
        let p = Adam {
            lr: r.random_range(0.0001f32..0.1),
            ..Adam::default()
        };
        // Early steps (large bias correction) for half the cases, late ones for the rest.
        let start: u64 = if case % 2 == 0 {
            1
        } else {
            r.random_range(2..10_000)
        };
        let w = uniform(&mut r, n, -2.0, 2.0);
        let m = uniform(&mut r, n, -2.0, 2.0);
        let v = uniform(&mut r, n, 0.0, 4.0);
        let grads: Vec<Vec<f32>> = (0..3).map(|_| uniform(&mut r, n, -2.0, 2.0)).collect();

        let (mut cw, mut cm, mut cv) = (w.clone(), m.clone(), v.clone());
        let mut dw = gpu.upload(&w).unwrap();
        let mut dm = gpu.upload(&m).unwrap();
        let mut dv = gpu.upload(&v).unwrap();
        for (t, g) in (start..).zip(&grads) {
            adam_step(&mut cw, &mut cm, &mut cv, g, t, p).unwrap();
            let dg = gpu.upload(g).unwrap();
            gpu_optim::adam_step(gpu, &mut dw, &dg, &mut dm, &mut dv, &p, t).unwrap();
        }
        assert_close("adam m", &gpu.download(&dm).unwrap(), &cm, UPDATE_TOL);
        assert_close("adam v", &gpu.download(&dv).unwrap(), &cv, UPDATE_TOL);
        assert_close("adam w", &gpu.download(&dw).unwrap(), &cw, UPDATE_TOL);
    }
}

#[test]
fn updates_refuse_bad_input_and_write_nothing() {
    let gpu = gpu_or_skip!();
    let w0 = vec![1.0f32, 2.0, 3.0, 4.0, 5.0];
    let mut w = gpu.upload(&w0).unwrap();
    let mut m = gpu.upload(&w0).unwrap();
    let mut v = gpu.upload(&w0).unwrap();
    let short = gpu.upload(&[1.0f32; 4]).unwrap();
    let grad = gpu.upload(&[1.0f32; 5]).unwrap();
    let mismatch = |what, actual| KernelError::LengthMismatch {
        what,
        expected: 5,
        actual,
    };

    assert_eq!(
        gpu_optim::add_assign(gpu, &mut w, &short),
        Err(mismatch("src", 4))
    );
    assert_eq!(
        gpu_optim::axpy(gpu, &mut w, 2.0, &short),
        Err(mismatch("src", 4))
    );
    assert_eq!(
        gpu_optim::adagrad_step(gpu, &mut w, &short, &mut m, &AdaGrad::default()),
        Err(mismatch("grad", 4))
    );
    let mut short_accum = gpu.upload(&[0.0f32; 4]).unwrap();
    assert_eq!(
        gpu_optim::adagrad_step(gpu, &mut w, &grad, &mut short_accum, &AdaGrad::default()),
        Err(mismatch("accum", 4))
    );
    let bad_lr = AdaGrad {
        lr: f32::NAN,
        eps: 1e-8,
    };
    assert!(matches!(
        gpu_optim::adagrad_step(gpu, &mut w, &grad, &mut m, &bad_lr),
        Err(KernelError::InvalidHyperparameter { what: "lr", .. })
    ));
    let adam = Adam::default();
    assert_eq!(
        gpu_optim::adam_step(gpu, &mut w, &grad, &mut m, &mut v, &adam, 0),
        Err(KernelError::ZeroStep)
    );
    let bad_beta = Adam {
        beta2: 1.0,
        ..Adam::default()
    };
    assert!(matches!(
        gpu_optim::adam_step(gpu, &mut w, &grad, &mut m, &mut v, &bad_beta, 1),
        Err(KernelError::InvalidHyperparameter { what: "beta2", .. })
    ));
    let mut short_v = gpu.upload(&[0.0f32; 4]).unwrap();
    assert_eq!(
        gpu_optim::adam_step(gpu, &mut w, &grad, &mut m, &mut short_v, &adam, 1),
        Err(mismatch("v", 4))
    );
    assert_eq!(
        gpu_optim::adam_step(gpu, &mut w, &short, &mut m, &mut v, &adam, 1),
        Err(mismatch("grad", 4))
    );

    assert_eq!(gpu.download(&w).unwrap(), w0, "w written on error");
    assert_eq!(gpu.download(&m).unwrap(), w0, "m written on error");
    assert_eq!(gpu.download(&v).unwrap(), w0, "v written on error");
}

/// A random MLR problem of the given size: x in [-1, 1), w in [-0.5, 0.5).
struct Problem {
    shape: MlrShape,
    x: Vec<f32>,
    labels: Vec<u32>,
    w: Vec<f32>,
}

fn problem(seed: u64, rows: usize, features: usize, classes: usize) -> Problem {
    let mut r = rng(seed);
    Problem {
        shape: MlrShape { features, classes },
        x: uniform(&mut r, rows * features, -1.0, 1.0),
        labels: (0..rows)
            .map(|_| r.random_range(0..classes as u32))
            .collect(),
        w: uniform(&mut r, features * classes, -0.5, 0.5),
    }
}

/// (rows, features, classes): tiny, odd sizes that straddle the 32-wide tiles, MNIST-like,
/// many classes (several warp passes per row), and a batch larger than one tile row.
const MLR_SHAPES: &[(usize, usize, usize)] = &[
    (1, 1, 1),
    (1, 1, 2),
    (3, 5, 2),
    (2, 3, 7),
    (33, 31, 10),
    (37, 50, 33),
    (128, 784, 10),
    (64, 100, 1000),
    (300, 65, 97),
];

/// Checks GPU (grad, loss) against the f64 reference with the CPU fast path's bounds.
fn check_against_reference(p: &Problem, alpha: f32, grad: &[f32], loss: f64) {
    let (f, c) = (p.shape.features, p.shape.classes);
    let rows = p.labels.len();
    let mut want = vec![0.0f32; f * c];
    let want_loss = gradient_reference(p.shape, &p.x, &p.labels, &p.w, &mut want).unwrap();

    let loss_tol = 1e-4 * (want_loss.abs() + rows as f64);
    assert!(
        (loss - want_loss).abs() <= loss_tol,
        "loss: GPU {loss} vs reference {want_loss} (shape {rows}x{f}x{c})"
    );
    for j in 0..f {
        let scale: f64 = (0..rows).map(|i| f64::from(p.x[i * f + j].abs())).sum();
        for k in 0..c {
            let a = f64::from(grad[j * c + k]);
            let b = f64::from(alpha) * f64::from(want[j * c + k]);
            // The reference bound, scaled by alpha like the gradient itself.
            let tol = 1e-4 * (b.abs() + f64::from(alpha.abs()) * scale) + 1e-6;
            assert!(
                (a - b).abs() <= tol,
                "grad[{j}][{k}]: GPU {a} vs reference {b} (tol {tol}, shape {rows}x{f}x{c})"
            );
        }
    }
}

#[test]
fn mlr_gradient_matches_reference_and_cpu() {
    let gpu = gpu_or_skip!();
    let mut scratch = gpu_mlr::MlrGpuScratch::new();
    for (case, &(rows, features, classes)) in MLR_SHAPES.iter().enumerate() {
        let p = problem(500 + case as u64, rows, features, classes);
        let dx = gpu.upload(&p.x).unwrap();
        let dl = gpu.upload(&p.labels).unwrap();
        let dw = gpu.upload(&p.w).unwrap();
        // NaN-filled: every entry must be overwritten.
        let mut dg = gpu.upload(&vec![f32::NAN; features * classes]).unwrap();
        let loss = gpu_mlr::gradient(gpu, p.shape, &dx, &dl, &dw, &mut dg, &mut scratch).unwrap();
        let grad = gpu.download(&dg).unwrap();
        check_against_reference(&p, 1.0, &grad, loss);

        // And against the CPU fast path, with the same bounds.
        let mut cpu = vec![0.0f32; features * classes];
        let cpu_loss = gradient(
            p.shape,
            &p.x,
            &p.labels,
            &p.w,
            &mut cpu,
            &mut MlrScratch::new(),
        )
        .unwrap();
        assert!((loss - cpu_loss).abs() <= 1e-4 * (cpu_loss.abs() + rows as f64));
        for j in 0..features {
            let scale: f32 = (0..rows).map(|i| p.x[i * features + j].abs()).sum();
            for k in 0..classes {
                let (a, b) = (grad[j * classes + k], cpu[j * classes + k]);
                assert!(
                    (a - b).abs() <= 1e-4 * (b.abs() + scale) + 1e-6,
                    "grad[{j}][{k}]: GPU {a} vs CPU {b}"
                );
            }
        }
    }
}

#[test]
fn mlr_gradient_scaled_and_scratch_reuse() {
    let gpu = gpu_or_skip!();
    // Grow the scratch on a big batch first, then reuse it for smaller ones.
    let mut scratch = gpu_mlr::MlrGpuScratch::new();
    for (case, &(rows, features, classes)) in
        [(300, 65, 97), (7, 3, 5), (40, 20, 12)].iter().enumerate()
    {
        let p = problem(600 + case as u64, rows, features, classes);
        let alpha = -0.05f32;
        let dx = gpu.upload(&p.x).unwrap();
        let dl = gpu.upload(&p.labels).unwrap();
        let dw = gpu.upload(&p.w).unwrap();
        let mut dg = gpu.alloc_zeros::<f32>(features * classes).unwrap();
        let loss =
            gpu_mlr::gradient_scaled(gpu, p.shape, &dx, &dl, &dw, alpha, &mut dg, &mut scratch)
                .unwrap();
        check_against_reference(&p, alpha, &gpu.download(&dg).unwrap(), loss);

        // Same inputs again: bit-identical (no atomics in the sums).
        let mut again = gpu.alloc_zeros::<f32>(features * classes).unwrap();
        let loss_again =
            gpu_mlr::gradient_scaled(gpu, p.shape, &dx, &dl, &dw, alpha, &mut again, &mut scratch)
                .unwrap();
        assert_eq!(loss_again, loss);
        assert_eq!(gpu.download(&again).unwrap(), gpu.download(&dg).unwrap());
    }
}

#[test]
fn mlr_empty_batch_zeroes_grad() {
    let gpu = gpu_or_skip!();
    let shape = MlrShape {
        features: 3,
        classes: 4,
    };
    let dx = gpu.alloc_zeros::<f32>(0).unwrap();
    let dl = gpu.alloc_zeros::<u32>(0).unwrap();
    let dw = gpu.upload(&[0.5f32; 12]).unwrap();
    let mut dg = gpu.upload(&[f32::NAN; 12]).unwrap();
    let mut scratch = gpu_mlr::MlrGpuScratch::new();
    let loss = gpu_mlr::gradient(gpu, shape, &dx, &dl, &dw, &mut dg, &mut scratch).unwrap();
    assert_eq!(loss, 0.0);
    assert_eq!(gpu.download(&dg).unwrap(), vec![0.0f32; 12]);
}

#[test]
fn mlr_refuses_bad_input_and_leaves_grad_untouched() {
    let gpu = gpu_or_skip!();
    let p = problem(700, 10, 6, 4);
    let shape = p.shape;
    let sentinel = vec![7.0f32; 24];
    let dx = gpu.upload(&p.x).unwrap();
    let dw = gpu.upload(&p.w).unwrap();
    let mut dg = gpu.upload(&sentinel).unwrap();
    let mut scratch = gpu_mlr::MlrGpuScratch::new();

    // Labels out of range at rows 6 and 3: the first one (3) is reported.
    let mut labels = p.labels.clone();
    labels[6] = 9;
    labels[3] = 4;
    let dl_bad = gpu.upload(&labels).unwrap();
    assert_eq!(
        gpu_mlr::gradient(gpu, shape, &dx, &dl_bad, &dw, &mut dg, &mut scratch),
        Err(KernelError::LabelOutOfRange {
            row: 3,
            label: 4,
            classes: 4
        })
    );
    assert_eq!(gpu.download(&dg).unwrap(), sentinel);

    let dl = gpu.upload(&p.labels).unwrap();
    let dl_short = gpu.upload(&p.labels[..9]).unwrap();
    assert_eq!(
        gpu_mlr::gradient(gpu, shape, &dx, &dl_short, &dw, &mut dg, &mut scratch),
        Err(KernelError::LengthMismatch {
            what: "x",
            expected: 54,
            actual: 60
        })
    );
    let dw_short = gpu.upload(&p.w[..23]).unwrap();
    assert!(matches!(
        gpu_mlr::gradient(gpu, shape, &dx, &dl, &dw_short, &mut dg, &mut scratch),
        Err(KernelError::LengthMismatch { what: "w", .. })
    ));
    let mut dg_short = gpu.upload(&sentinel[..23]).unwrap();
    assert!(matches!(
        gpu_mlr::gradient(gpu, shape, &dx, &dl, &dw, &mut dg_short, &mut scratch),
        Err(KernelError::LengthMismatch { what: "grad", .. })
    ));
    let zero = MlrShape {
        features: 6,
        classes: 0,
    };
    assert_eq!(
        gpu_mlr::gradient(gpu, zero, &dx, &dl, &dw, &mut dg, &mut scratch),
        Err(KernelError::ZeroDimension { what: "classes" })
    );
    assert_eq!(gpu.download(&dg).unwrap(), sentinel);
    assert_eq!(gpu.download(&dg_short).unwrap(), sentinel[..23].to_vec());

    // After the refusals the same scratch still computes the right answer.
    let loss = gpu_mlr::gradient(gpu, shape, &dx, &dl, &dw, &mut dg, &mut scratch).unwrap();
    check_against_reference(&p, 1.0, &gpu.download(&dg).unwrap(), loss);
}

#[test]
fn kernels_compile_and_load_on_the_device() {
    let gpu = gpu_or_skip!();
    println!(
        "device: {} ({}, {} SMs)",
        gpu.name(),
        gpu.arch(),
        gpu.sm_count()
    );
    for (src, names) in [
        (
            &gpu_optim::SOURCE,
            &[
                "harp_add_assign_f32",
                "harp_axpy_f32",
                "harp_adagrad_f32",
                "harp_adam_f32",
            ][..],
        ),
        (
            &gpu_mlr::SOURCE,
            &["harp_mlr_gemm", "harp_mlr_softmax_xent"][..],
        ),
    ] {
        for name in names {
            gpu.function(src, name).unwrap();
        }
    }
    assert!(matches!(
        gpu.function(&gpu_optim::SOURCE, "no_such_kernel"),
        Err(KernelError::Cuda { .. })
    ));
}

#[test]
fn opening_a_missing_device_is_a_typed_error() {
    // Runs everywhere: without a driver, or with one but no device 1 << 20, the answer is
    // GpuUnavailable, never a panic.
    match harp_kernels::cuda::Gpu::open(1 << 20) {
        Err(KernelError::GpuUnavailable { reason }) => assert!(!reason.is_empty()),
        other => panic!("expected GpuUnavailable, got {other:?}"),
    }
}

#[test]
fn sources_sharing_a_name_get_their_own_modules() {
    let gpu = gpu_or_skip!();
    use harp_kernels::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
    use harp_kernels::cuda::CudaSource;
    let one = CudaSource {
        name: "same_name.cu",
        code: "extern \"C\" __global__ void fill(float* x) { x[threadIdx.x] = 1.0f; }",
    };
    let two = CudaSource {
        name: "same_name.cu",
        code: "extern \"C\" __global__ void fill(float* x) { x[threadIdx.x] = 2.0f; }",
    };
    for (src, want) in [(&one, 1.0f32), (&two, 2.0), (&one, 1.0)] {
        let f = gpu.function(src, "fill").unwrap();
        let mut buf = gpu.alloc_zeros::<f32>(32).unwrap();
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(&mut buf);
        let cfg = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: `fill(float*)` writes x[0..32]; buf holds 32 floats on this device.
        unsafe { launch.launch(cfg) }.unwrap();
        assert_eq!(gpu.download(&buf).unwrap(), vec![want; 32]);
    }
}
