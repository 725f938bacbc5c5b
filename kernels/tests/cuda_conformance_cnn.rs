//! CUDA conformance of the CNN kernels: every layer, forward and backward, agrees
//! with the CPU f64 reference on random shapes (padding, odd sizes, the SCAR network's
//! layers, empty batches), and refuses bad input like the CPU version, writing nothing.
//!
//! Tolerances: ReLU and max pooling (values and argmax) must match exactly; GEMM-based
//! outputs (convolution, dense) `|gpu − ref| <= 1e-4 · (1 + |ref|)` per element; the
//! logit gradient `1e-5 · (1 + |ref|)`; the loss `1e-5 · (|loss| + rows)`.
//!
//! Without a CUDA device every case prints `skipped: no CUDA device (<reason>)` and
//! passes (see `cuda_common` and `HARP_REQUIRE_GPU`).
#![cfg(feature = "cuda")]

mod cuda_common;

use cuda_common::{assert_close, rng, uniform};
use harp_kernels::cnn::reference;
use harp_kernels::cuda::cnn::{self as gpu_cnn, CnnGpuScratch, GpuLayerGrads};
use harp_kernels::cuda::Gpu;
use harp_kernels::{Conv2d, Dense, KernelError, LayerGrads, MaxPool2x2};
use rand::Rng;

/// Tolerance of the GEMM-based outputs.
const GEMM_TOL: f32 = 1e-4;

fn conv_cases() -> Vec<(Conv2d, usize)> {
    let general = |c, o, (h, w), (kh, kw), (ph, pw)| Conv2d {
        in_channels: c,
        out_channels: o,
        in_h: h,
        in_w: w,
        kernel_h: kh,
        kernel_w: kw,
        pad_h: ph,
        pad_w: pw,
    };
    vec![
        (Conv2d::square(1, 32, 28, 5, 0), 3),  // SCAR conv1
        (Conv2d::square(32, 64, 12, 5, 0), 5), // SCAR conv2
        (Conv2d::square(3, 8, 9, 3, 1), 4),
        (general(2, 3, (5, 7), (2, 5), (2, 1)), 2),
        (general(5, 70, (6, 4), (3, 3), (0, 1)), 3), // more than one 64-row tile
        (general(1, 1, (1, 1), (1, 1), (0, 0)), 1),
        (Conv2d::square(4, 6, 8, 3, 0), 0), // empty batch
    ]
}

fn conv_case_matches(gpu: &Gpu, layer: Conv2d, batch: usize, seed: u64) {
    let mut r = rng(seed);
    let x = uniform(&mut r, batch * layer.in_len().unwrap(), -1.0, 1.0);
    let w = uniform(&mut r, layer.weight_len().unwrap(), -1.0, 1.0);
    let b = uniform(&mut r, layer.out_channels, -1.0, 1.0);
    let y_len = batch * layer.out_len().unwrap();
    let dy = uniform(&mut r, y_len, -1.0, 1.0);

    let mut y_ref = vec![0.0; y_len];
    reference::conv2d_forward(&layer, batch, &x, &w, &b, &mut y_ref).unwrap();
    let (mut dx_ref, mut dw_ref, mut db_ref) =
        (vec![0.0; x.len()], vec![0.0; w.len()], vec![0.0; b.len()]);
    let grads = LayerGrads {
        dx: Some(&mut dx_ref),
        dw: &mut dw_ref,
        db: &mut db_ref,
    };
    reference::conv2d_backward(&layer, batch, &x, &w, &dy, grads).unwrap();

    let (d_x, d_w, d_b, d_dy) = (
        gpu.upload(&x).unwrap(),
        gpu.upload(&w).unwrap(),
        gpu.upload(&b).unwrap(),
        gpu.upload(&dy).unwrap(),
    );
    // Outputs start as NaN: they must be overwritten.
    let mut d_y = gpu.upload(&vec![f32::NAN; y_len]).unwrap();
    gpu_cnn::conv2d_forward(gpu, &layer, batch, &d_x, &d_w, &d_b, &mut d_y).unwrap();
    let what = format!("{layer:?} batch {batch}");
    assert_close(
        &format!("conv y, {what}"),
        &gpu.download(&d_y).unwrap(),
        &y_ref,
        GEMM_TOL,
    );

    let mut d_dx = gpu.upload(&vec![f32::NAN; x.len()]).unwrap();
    let mut d_dw = gpu.upload(&vec![f32::NAN; w.len()]).unwrap();
    let mut d_db = gpu.upload(&vec![f32::NAN; b.len()]).unwrap();
    let grads = GpuLayerGrads {
        dx: Some(&mut d_dx),
        dw: &mut d_dw,
        db: &mut d_db,
    };
    gpu_cnn::conv2d_backward(gpu, &layer, batch, &d_x, &d_w, &d_dy, grads).unwrap();
    let dw_gpu = gpu.download(&d_dw).unwrap();
    let db_gpu = gpu.download(&d_db).unwrap();
    assert_close(
        &format!("conv dx, {what}"),
        &gpu.download(&d_dx).unwrap(),
        &dx_ref,
        GEMM_TOL,
    );
    assert_close(&format!("conv dw, {what}"), &dw_gpu, &dw_ref, GEMM_TOL);
    assert_close(&format!("conv db, {what}"), &db_gpu, &db_ref, GEMM_TOL);

    // Without dx, the weight gradients are the same (up to the atomics' order).
    let mut d_dw2 = gpu.upload(&vec![f32::NAN; w.len()]).unwrap();
    let grads = GpuLayerGrads {
        dx: None,
        dw: &mut d_dw2,
        db: &mut d_db,
    };
    gpu_cnn::conv2d_backward(gpu, &layer, batch, &d_x, &d_w, &d_dy, grads).unwrap();
    assert_close(
        &format!("conv dw (no dx), {what}"),
        &gpu.download(&d_dw2).unwrap(),
        &dw_ref,
        GEMM_TOL,
    );
}

#[test]
fn conv_matches_reference() {
    let gpu = gpu_or_skip!();
    for (case, (layer, batch)) in conv_cases().into_iter().enumerate() {
        conv_case_matches(gpu, layer, batch, 1000 + case as u64);
    }
}

/// Random small shapes, as the CPU property test draws them.
#[test]
fn conv_matches_reference_on_random_shapes() {
    let gpu = gpu_or_skip!();
    let mut r = rng(7);
    let mut done = 0;
    while done < 40 {
        let layer = Conv2d {
            in_channels: r.random_range(1..4),
            out_channels: r.random_range(1..6),
            in_h: r.random_range(1..10),
            in_w: r.random_range(1..10),
            kernel_h: r.random_range(1..5),
            kernel_w: r.random_range(1..5),
            pad_h: r.random_range(0..3),
            pad_w: r.random_range(0..3),
        };
        if layer.validate().is_err() {
            continue;
        }
        conv_case_matches(gpu, layer, r.random_range(0..5), 2000 + done);
        done += 1;
    }
}

#[test]
fn dense_matches_reference() {
    let gpu = gpu_or_skip!();
    let cases = [
        (1024, 512, 8),
        (512, 128, 3),
        (128, 10, 64),
        (7, 3, 5),
        (1, 1, 1),
        (100, 70, 130), // several tiles each way
        (5, 4, 0),
    ];
    for (case, &(inputs, outputs, batch)) in cases.iter().enumerate() {
        let layer = Dense { inputs, outputs };
        let mut r = rng(3000 + case as u64);
        let x = uniform(&mut r, batch * inputs, -1.0, 1.0);
        let w = uniform(&mut r, inputs * outputs, -1.0, 1.0);
        let b = uniform(&mut r, outputs, -1.0, 1.0);
        let dy = uniform(&mut r, batch * outputs, -1.0, 1.0);
        let mut y_ref = vec![0.0; batch * outputs];
        reference::dense_forward(&layer, batch, &x, &w, &b, &mut y_ref).unwrap();
        let (mut dx_ref, mut dw_ref, mut db_ref) =
            (vec![0.0; x.len()], vec![0.0; w.len()], vec![0.0; outputs]);
        let grads = LayerGrads {
            dx: Some(&mut dx_ref),
            dw: &mut dw_ref,
            db: &mut db_ref,
        };
        reference::dense_backward(&layer, batch, &x, &w, &dy, grads).unwrap();

        let (d_x, d_w, d_b, d_dy) = (
            gpu.upload(&x).unwrap(),
            gpu.upload(&w).unwrap(),
            gpu.upload(&b).unwrap(),
            gpu.upload(&dy).unwrap(),
        );
        let mut d_y = gpu.upload(&vec![f32::NAN; y_ref.len()]).unwrap();
        gpu_cnn::dense_forward(gpu, &layer, batch, &d_x, &d_w, &d_b, &mut d_y).unwrap();
        let what = format!("{layer:?} batch {batch}");
        assert_close(
            &format!("dense y, {what}"),
            &gpu.download(&d_y).unwrap(),
            &y_ref,
            GEMM_TOL,
        );

        let mut d_dx = gpu.upload(&vec![f32::NAN; x.len()]).unwrap();
        let mut d_dw = gpu.upload(&vec![f32::NAN; w.len()]).unwrap();
        let mut d_db = gpu.upload(&vec![f32::NAN; outputs]).unwrap();
        let grads = GpuLayerGrads {
            dx: Some(&mut d_dx),
            dw: &mut d_dw,
            db: &mut d_db,
        };
        gpu_cnn::dense_backward(gpu, &layer, batch, &d_x, &d_w, &d_dy, grads).unwrap();
        assert_close(
            &format!("dense dx, {what}"),
            &gpu.download(&d_dx).unwrap(),
            &dx_ref,
            GEMM_TOL,
        );
        assert_close(
            &format!("dense dw, {what}"),
            &gpu.download(&d_dw).unwrap(),
            &dw_ref,
            GEMM_TOL,
        );
        assert_close(
            &format!("dense db, {what}"),
            &gpu.download(&d_db).unwrap(),
            &db_ref,
            GEMM_TOL,
        );
    }
}

#[test]
fn relu_matches_cpu_exactly() {
    let gpu = gpu_or_skip!();
    for (case, &n) in [0usize, 1, 5, 1000, 1_000_003].iter().enumerate() {
        let mut r = rng(4000 + case as u64);
        let mut x = uniform(&mut r, n, -1.0, 1.0);
        if n > 3 {
            x[0] = f32::NAN;
            x[1] = 0.0;
            x[2] = -0.0;
        }
        let dy = uniform(&mut r, n, -1.0, 1.0);
        let mut y_ref = vec![0.0; n];
        reference::relu_forward(&x, &mut y_ref).unwrap();
        let mut dx_ref = vec![0.0; n];
        reference::relu_backward(&y_ref, &dy, &mut dx_ref).unwrap();

        let d_x = gpu.upload(&x).unwrap();
        let mut d_y = gpu.upload(&vec![7.0f32; n]).unwrap();
        gpu_cnn::relu_forward(gpu, &d_x, &mut d_y).unwrap();
        let y = gpu.download(&d_y).unwrap();
        let same = |a: &[f32], b: &[f32]| {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|(p, q)| (p.is_nan() && q.is_nan()) || p == q)
        };
        assert!(same(&y, &y_ref), "relu forward n = {n}");
        let mut d_inplace = gpu.upload(&x).unwrap();
        gpu_cnn::relu_in_place(gpu, &mut d_inplace).unwrap();
        assert!(same(&gpu.download(&d_inplace).unwrap(), &y_ref));

        let d_dy = gpu.upload(&dy).unwrap();
        let mut d_dx = gpu.upload(&vec![7.0f32; n]).unwrap();
        gpu_cnn::relu_backward(gpu, &d_y, &d_dy, &mut d_dx).unwrap();
        assert_eq!(
            gpu.download(&d_dx).unwrap(),
            dx_ref,
            "relu backward n = {n}"
        );
        let mut d_g = gpu.upload(&dy).unwrap();
        gpu_cnn::relu_backward_in_place(gpu, &d_y, &mut d_g).unwrap();
        assert_eq!(gpu.download(&d_g).unwrap(), dx_ref);
    }
}

#[test]
fn maxpool_matches_cpu_exactly() {
    let gpu = gpu_or_skip!();
    let cases = [
        (32, 24, 24, 4),
        (64, 8, 8, 3),
        (3, 5, 7, 2),
        (1, 2, 2, 1),
        (2, 4, 4, 0),
    ];
    for (case, &(channels, in_h, in_w, batch)) in cases.iter().enumerate() {
        let layer = MaxPool2x2 {
            channels,
            in_h,
            in_w,
        };
        let mut r = rng(5000 + case as u64);
        // Coarse values so the windows have ties.
        let x: Vec<f32> = (0..batch * layer.in_len().unwrap())
            .map(|_| r.random_range(0..6) as f32)
            .collect();
        let y_len = batch * layer.out_len().unwrap();
        let dy = uniform(&mut r, y_len, -1.0, 1.0);
        let (mut y_ref, mut a_ref) = (vec![0.0; y_len], vec![0u32; y_len]);
        reference::maxpool2x2_forward(&layer, batch, &x, &mut y_ref, &mut a_ref).unwrap();
        let mut dx_ref = vec![0.0; x.len()];
        reference::maxpool2x2_backward(&layer, batch, &a_ref, &dy, &mut dx_ref).unwrap();

        let d_x = gpu.upload(&x).unwrap();
        let mut d_y = gpu.upload(&vec![f32::NAN; y_len]).unwrap();
        let mut d_a = gpu.upload(&vec![u32::MAX; y_len]).unwrap();
        gpu_cnn::maxpool2x2_forward(gpu, &layer, batch, &d_x, &mut d_y, &mut d_a).unwrap();
        assert_eq!(gpu.download(&d_y).unwrap(), y_ref, "pool y {layer:?}");
        assert_eq!(gpu.download(&d_a).unwrap(), a_ref, "pool argmax {layer:?}");

        let d_dy = gpu.upload(&dy).unwrap();
        let mut d_dx = gpu.upload(&vec![f32::NAN; x.len()]).unwrap();
        let mut scratch = CnnGpuScratch::new();
        gpu_cnn::maxpool2x2_backward(gpu, &layer, batch, &d_a, &d_dy, &mut d_dx, &mut scratch)
            .unwrap();
        assert_eq!(gpu.download(&d_dx).unwrap(), dx_ref, "pool dx {layer:?}");
    }
}

#[test]
fn maxpool_backward_refuses_a_bad_argmax_and_writes_nothing() {
    let gpu = gpu_or_skip!();
    let layer = MaxPool2x2 {
        channels: 2,
        in_h: 4,
        in_w: 5,
    };
    let batch = 2;
    // Valid argmax: each window's top-left (oy·10 + ox·2 within the plane).
    let mut argmax: Vec<u32> = (0..16u32).map(|k| (k % 4 / 2) * 10 + (k % 2) * 2).collect();
    argmax[9] = 0; // output (0, 1) of plane 2 pointing into window (0, 0)
    argmax[12] = 100; // also bad, but later
    let d_a = gpu.upload(&argmax).unwrap();
    let d_dy = gpu.upload(&[1.0f32; 16]).unwrap();
    let mut d_dx = gpu.upload(&[42.0f32; 80]).unwrap();
    let got = gpu_cnn::maxpool2x2_backward(
        gpu,
        &layer,
        batch,
        &d_a,
        &d_dy,
        &mut d_dx,
        &mut CnnGpuScratch::new(),
    );
    assert_eq!(
        got,
        Err(KernelError::IndexOutOfRange {
            what: "argmax",
            position: 9,
            index: 0
        })
    );
    assert!(gpu.download(&d_dx).unwrap().iter().all(|&v| v == 42.0));
}

#[test]
fn softmax_xent_matches_reference() {
    let gpu = gpu_or_skip!();
    let cases = [
        (10, 64, 5.0),
        (10, 1, 1.0),
        (3, 17, 40.0),
        (100, 9, 3.0),
        (40, 0, 1.0),
    ];
    let mut scratch = CnnGpuScratch::new();
    for (case, &(classes, rows, spread)) in cases.iter().enumerate() {
        let mut r = rng(6000 + case as u64);
        let logits = uniform(&mut r, rows * classes, -spread, spread);
        let labels: Vec<u32> = (0..rows)
            .map(|_| r.random_range(0..classes as u32))
            .collect();
        let scale = 1.0 / rows.max(1) as f32;
        let mut g_ref = vec![0.0; logits.len()];
        let loss_ref =
            reference::softmax_xent_scaled(classes, &logits, &labels, scale, &mut g_ref).unwrap();
        let (correct_ref, _) = reference::softmax_xent_evaluate(classes, &logits, &labels).unwrap();

        let d_z = gpu.upload(&logits).unwrap();
        let d_l = gpu.upload(&labels).unwrap();
        let mut d_g = gpu.upload(&vec![f32::NAN; logits.len()]).unwrap();
        let loss =
            gpu_cnn::softmax_xent_scaled(gpu, classes, &d_z, &d_l, scale, &mut d_g, &mut scratch)
                .unwrap();
        let tol = 1e-5 * (loss_ref.abs() + rows as f64);
        assert!((loss - loss_ref).abs() <= tol, "loss {loss} vs {loss_ref}");
        assert_close("dlogits", &gpu.download(&d_g).unwrap(), &g_ref, 1e-5);

        let (correct, eval_loss) =
            gpu_cnn::softmax_xent_evaluate(gpu, classes, &d_z, &d_l, &mut scratch).unwrap();
        assert_eq!(correct, correct_ref, "correct count");
        assert!((eval_loss - loss_ref).abs() <= tol);
    }
}

#[test]
fn softmax_xent_refuses_a_bad_label_and_writes_nothing() {
    let gpu = gpu_or_skip!();
    let d_z = gpu.upload(&[0.5f32; 12]).unwrap();
    let d_l = gpu.upload(&[0u32, 2, 3, 7]).unwrap();
    let mut d_g = gpu.upload(&[42.0f32; 12]).unwrap();
    let mut scratch = CnnGpuScratch::new();
    let expected = KernelError::LabelOutOfRange {
        row: 2,
        label: 3,
        classes: 3,
    };
    assert_eq!(
        gpu_cnn::softmax_xent(gpu, 3, &d_z, &d_l, &mut d_g, &mut scratch),
        Err(expected.clone())
    );
    assert!(gpu.download(&d_g).unwrap().iter().all(|&v| v == 42.0));
    assert_eq!(
        gpu_cnn::softmax_xent_evaluate(gpu, 3, &d_z, &d_l, &mut scratch),
        Err(expected)
    );
}

/// Length and shape errors are the CPU's, found before anything is launched.
#[test]
fn bad_lengths_are_refused_before_launching() {
    let gpu = gpu_or_skip!();
    let layer = Conv2d::square(2, 3, 5, 3, 0); // x 50/sample, w 54, y 27/sample
    let (d_x, d_w, d_b) = (
        gpu.upload(&[1.0f32; 99]).unwrap(),
        gpu.upload(&[1.0f32; 54]).unwrap(),
        gpu.upload(&[1.0f32; 3]).unwrap(),
    );
    let mut d_y = gpu.upload(&[42.0f32; 54]).unwrap();
    assert_eq!(
        gpu_cnn::conv2d_forward(gpu, &layer, 2, &d_x, &d_w, &d_b, &mut d_y),
        Err(KernelError::LengthMismatch {
            what: "x",
            expected: 100,
            actual: 99
        })
    );
    assert!(gpu.download(&d_y).unwrap().iter().all(|&v| v == 42.0));
    let bad = Conv2d::square(2, 3, 2, 3, 0);
    assert!(matches!(
        gpu_cnn::conv2d_forward(gpu, &bad, 2, &d_x, &d_w, &d_b, &mut d_y),
        Err(KernelError::InvalidShape { .. })
    ));

    let dense = Dense {
        inputs: 4,
        outputs: 3,
    };
    let d_dy = gpu.upload(&[1.0f32; 6]).unwrap();
    let mut d_dw = gpu.upload(&[42.0f32; 11]).unwrap();
    let mut d_db = gpu.upload(&[42.0f32; 3]).unwrap();
    let d_x8 = gpu.upload(&[1.0f32; 8]).unwrap();
    let d_w12 = gpu.upload(&[1.0f32; 12]).unwrap();
    let grads = GpuLayerGrads {
        dx: None,
        dw: &mut d_dw,
        db: &mut d_db,
    };
    assert_eq!(
        gpu_cnn::dense_backward(gpu, &dense, 2, &d_x8, &d_w12, &d_dy, grads),
        Err(KernelError::LengthMismatch {
            what: "dw",
            expected: 12,
            actual: 11
        })
    );
    assert!(gpu.download(&d_db).unwrap().iter().all(|&v| v == 42.0));

    let d_short = gpu.upload(&[1.0f32; 3]).unwrap();
    let mut d_out = gpu.upload(&[42.0f32; 4]).unwrap();
    assert_eq!(
        gpu_cnn::relu_forward(gpu, &d_short, &mut d_out),
        Err(KernelError::LengthMismatch {
            what: "y",
            expected: 3,
            actual: 4
        })
    );
}
