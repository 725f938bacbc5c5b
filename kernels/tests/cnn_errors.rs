//! Every bad CNN input is reported as the right `KernelError`, by the fast and the
//! reference kernels alike, without panicking and without touching any output.

use harp_kernels::cnn::reference;
use harp_kernels::{
    conv2d_backward, conv2d_forward, dense_backward, dense_forward, maxpool2x2_backward,
    maxpool2x2_forward, relu_backward, relu_backward_in_place, relu_forward, softmax_xent,
    softmax_xent_evaluate, CnnScratch, Conv2d, Dense, KernelError, LayerGrads, MaxPool2x2,
};

const CONV: Conv2d = Conv2d {
    in_channels: 2,
    out_channels: 3,
    in_h: 5,
    in_w: 4,
    kernel_h: 3,
    kernel_w: 3,
    pad_h: 1,
    pad_w: 0,
};
// x: 2·2·5·4 = 80, w: 3·2·3·3 = 54, b: 3, y: 2·3·5·2 = 60 (batch 2).

fn untouched(buf: &[f32]) -> bool {
    buf.iter().all(|&v| v == 42.0)
}

/// Runs conv forward and backward (fast and reference) on the given lengths and
/// checks both return `expected` and write nothing.
#[allow(clippy::too_many_arguments)]
fn conv_err(
    layer: Conv2d,
    batch: usize,
    (x, w, b, y): (usize, usize, usize, usize),
    (dx, dw, db): (usize, usize, usize),
    fwd: Option<KernelError>,
    bwd: Option<KernelError>,
) {
    let (x, w, b) = (vec![1.0; x], vec![1.0; w], vec![1.0; b]);
    let mut scratch = CnnScratch::new();
    if let Some(expected) = fwd {
        let mut out = vec![42.0; y];
        let got = conv2d_forward(&layer, batch, &x, &w, &b, &mut out, &mut scratch);
        assert_eq!(got, Err(expected.clone()));
        assert!(untouched(&out));
        let got = reference::conv2d_forward(&layer, batch, &x, &w, &b, &mut out);
        assert_eq!(got, Err(expected));
        assert!(untouched(&out));
    }
    if let Some(expected) = bwd {
        let dy = vec![1.0; y];
        let (mut gx, mut gw, mut gb) = (vec![42.0; dx], vec![42.0; dw], vec![42.0; db]);
        let got = conv2d_backward(
            &layer,
            batch,
            &x,
            &w,
            &dy,
            LayerGrads {
                dx: Some(&mut gx),
                dw: &mut gw,
                db: &mut gb,
            },
            &mut scratch,
        );
        assert_eq!(got, Err(expected.clone()));
        let got = reference::conv2d_backward(
            &layer,
            batch,
            &x,
            &w,
            &dy,
            LayerGrads {
                dx: Some(&mut gx),
                dw: &mut gw,
                db: &mut gb,
            },
        );
        assert_eq!(got, Err(expected));
        assert!(untouched(&gx) && untouched(&gw) && untouched(&gb));
    }
}

fn mismatch(what: &'static str, expected: usize, actual: usize) -> KernelError {
    KernelError::LengthMismatch {
        what,
        expected,
        actual,
    }
}

#[test]
fn conv_lengths() {
    let ok = (80, 54, 3, 60);
    let okg = (80, 54, 3);
    conv_err(
        CONV,
        2,
        (79, 54, 3, 60),
        okg,
        Some(mismatch("x", 80, 79)),
        Some(mismatch("x", 80, 79)),
    );
    conv_err(
        CONV,
        2,
        (80, 55, 3, 60),
        okg,
        Some(mismatch("w", 54, 55)),
        Some(mismatch("w", 54, 55)),
    );
    conv_err(
        CONV,
        2,
        (80, 54, 2, 60),
        okg,
        Some(mismatch("b", 3, 2)),
        None,
    );
    conv_err(
        CONV,
        2,
        (80, 54, 3, 61),
        okg,
        Some(mismatch("y", 60, 61)),
        Some(mismatch("dy", 60, 61)),
    );
    conv_err(CONV, 2, ok, (81, 54, 3), None, Some(mismatch("dx", 80, 81)));
    conv_err(CONV, 2, ok, (80, 53, 3), None, Some(mismatch("dw", 54, 53)));
    conv_err(CONV, 2, ok, (80, 54, 4), None, Some(mismatch("db", 3, 4)));
    // The batch is explicit: a buffer for 2 samples is wrong for 3.
    conv_err(
        CONV,
        3,
        ok,
        okg,
        Some(mismatch("x", 120, 80)),
        Some(mismatch("x", 120, 80)),
    );
}

#[test]
fn conv_shapes() {
    let zero = |what| Some(KernelError::ZeroDimension { what });
    for (what, layer) in [
        (
            "in_channels",
            Conv2d {
                in_channels: 0,
                ..CONV
            },
        ),
        (
            "out_channels",
            Conv2d {
                out_channels: 0,
                ..CONV
            },
        ),
        ("in_h", Conv2d { in_h: 0, ..CONV }),
        ("in_w", Conv2d { in_w: 0, ..CONV }),
        (
            "kernel_h",
            Conv2d {
                kernel_h: 0,
                ..CONV
            },
        ),
        (
            "kernel_w",
            Conv2d {
                kernel_w: 0,
                ..CONV
            },
        ),
    ] {
        assert_eq!(layer.validate(), Err(KernelError::ZeroDimension { what }));
        conv_err(layer, 1, (0, 0, 0, 0), (0, 0, 0), zero(what), zero(what));
    }
    let too_big = KernelError::InvalidShape {
        what: "conv2d",
        reason: "kernel larger than the padded input",
    };
    // in_w = 4, pad_w = 0: a kernel 5 wide does not fit; with pad_w = 1 it does.
    let wide = Conv2d {
        kernel_w: 5,
        ..CONV
    };
    assert_eq!(wide.validate(), Err(too_big.clone()));
    conv_err(
        wide,
        1,
        (40, 90, 3, 0),
        (40, 90, 3),
        Some(too_big.clone()),
        Some(too_big),
    );
    assert_eq!(Conv2d { pad_w: 1, ..wide }.out_size(), Ok((5, 2)));
    let huge = Conv2d {
        pad_h: usize::MAX / 2,
        ..CONV
    };
    assert_eq!(
        huge.validate(),
        Err(KernelError::ShapeOverflow {
            what: "padded input"
        })
    );
    let many = Conv2d {
        in_channels: usize::MAX / 4,
        ..CONV
    };
    assert!(matches!(
        many.validate(),
        Err(KernelError::ShapeOverflow { .. })
    ));
    // Batch overflow is caught too.
    conv_err(
        CONV,
        usize::MAX / 8,
        (0, 54, 3, 0),
        (0, 54, 3),
        Some(KernelError::ShapeOverflow { what: "x" }),
        Some(KernelError::ShapeOverflow { what: "x" }),
    );
}

#[test]
fn conv_without_dx_checks_the_rest() {
    let (x, w, dy) = (vec![1.0; 80], vec![1.0; 54], vec![1.0; 60]);
    let (mut dw, mut db) = (vec![42.0; 54], vec![42.0; 2]);
    let grads = LayerGrads {
        dx: None,
        dw: &mut dw,
        db: &mut db,
    };
    let got = conv2d_backward(&CONV, 2, &x, &w, &dy, grads, &mut CnnScratch::new());
    assert_eq!(got, Err(mismatch("db", 3, 2)));
    assert!(untouched(&dw) && untouched(&db));
}

#[test]
fn dense_errors() {
    let layer = Dense {
        inputs: 4,
        outputs: 3,
    };
    let run = |layer: Dense, x: usize, w: usize, b: usize, y: usize, expected: KernelError| {
        let (x, w, b) = (vec![1.0; x], vec![1.0; w], vec![1.0; b]);
        let mut out = vec![42.0; y];
        assert_eq!(
            dense_forward(&layer, 2, &x, &w, &b, &mut out),
            Err(expected.clone())
        );
        assert_eq!(
            reference::dense_forward(&layer, 2, &x, &w, &b, &mut out),
            Err(expected)
        );
        assert!(untouched(&out));
    };
    run(layer, 7, 12, 3, 6, mismatch("x", 8, 7));
    run(layer, 8, 13, 3, 6, mismatch("w", 12, 13));
    run(layer, 8, 12, 4, 6, mismatch("b", 3, 4));
    run(layer, 8, 12, 3, 5, mismatch("y", 6, 5));
    run(
        Dense { inputs: 0, ..layer },
        0,
        0,
        3,
        6,
        KernelError::ZeroDimension { what: "inputs" },
    );
    run(
        Dense {
            outputs: 0,
            ..layer
        },
        8,
        0,
        0,
        0,
        KernelError::ZeroDimension { what: "outputs" },
    );

    let (x, w, dy) = (vec![1.0; 8], vec![1.0; 12], vec![1.0; 6]);
    for (lens, expected) in [
        ((9, 12, 3), mismatch("dx", 8, 9)),
        ((8, 11, 3), mismatch("dw", 12, 11)),
        ((8, 12, 2), mismatch("db", 3, 2)),
    ] {
        let (mut gx, mut gw, mut gb) = (vec![42.0; lens.0], vec![42.0; lens.1], vec![42.0; lens.2]);
        let grads = LayerGrads {
            dx: Some(&mut gx),
            dw: &mut gw,
            db: &mut gb,
        };
        assert_eq!(
            dense_backward(&layer, 2, &x, &w, &dy, grads),
            Err(expected.clone())
        );
        let grads = LayerGrads {
            dx: Some(&mut gx),
            dw: &mut gw,
            db: &mut gb,
        };
        assert_eq!(
            reference::dense_backward(&layer, 2, &x, &w, &dy, grads),
            Err(expected)
        );
        assert!(untouched(&gx) && untouched(&gw) && untouched(&gb));
    }
}

#[test]
fn pool_errors() {
    let layer = MaxPool2x2 {
        channels: 2,
        in_h: 4,
        in_w: 5,
    };
    // x: 2·2·4·5 = 80, y: 2·2·2·2 = 16 (batch 2).
    let fwd = |layer: MaxPool2x2, x: usize, y: usize, a: usize, expected: KernelError| {
        let x = vec![1.0; x];
        let (mut y, mut a) = (vec![42.0; y], vec![42u32; a]);
        assert_eq!(
            maxpool2x2_forward(&layer, 2, &x, &mut y, &mut a),
            Err(expected.clone())
        );
        assert_eq!(
            reference::maxpool2x2_forward(&layer, 2, &x, &mut y, &mut a),
            Err(expected)
        );
        assert!(untouched(&y) && a.iter().all(|&v| v == 42));
    };
    fwd(layer, 81, 16, 16, mismatch("x", 80, 81));
    fwd(layer, 80, 15, 16, mismatch("y", 16, 15));
    fwd(layer, 80, 16, 17, mismatch("argmax", 16, 17));
    fwd(
        MaxPool2x2 {
            channels: 0,
            ..layer
        },
        0,
        0,
        0,
        KernelError::ZeroDimension { what: "channels" },
    );
    let small = KernelError::InvalidShape {
        what: "maxpool2x2",
        reason: "input smaller than the 2x2 window",
    };
    fwd(MaxPool2x2 { in_w: 1, ..layer }, 16, 0, 0, small);
    let wide = MaxPool2x2 {
        channels: 1,
        in_h: 1 << 16,
        in_w: (1 << 16) + 2,
    };
    assert_eq!(
        wide.validate(),
        Err(KernelError::ShapeOverflow { what: "argmax" })
    );

    // Backward: every argmax must lie in its own window.
    let bwd = |argmax: &[u32], dy: usize, dx: usize, expected: KernelError| {
        let dy = vec![1.0; dy];
        let mut out = vec![42.0; dx];
        assert_eq!(
            maxpool2x2_backward(&layer, 2, argmax, &dy, &mut out),
            Err(expected.clone())
        );
        assert_eq!(
            reference::maxpool2x2_backward(&layer, 2, argmax, &dy, &mut out),
            Err(expected)
        );
        assert!(untouched(&out));
    };
    // Valid argmax: for output (oy, ox) the window's top-left, oy·2·5 + ox·2.
    let good: Vec<u32> = (0..16u32).map(|k| (k % 4 / 2) * 10 + (k % 2) * 2).collect();
    bwd(&good, 16, 79, mismatch("dx", 80, 79));
    bwd(&good, 17, 80, mismatch("dy", 16, 17));
    bwd(&good[..15], 16, 80, mismatch("argmax", 16, 15));
    let out_of_range = |position: usize, index: u64| KernelError::IndexOutOfRange {
        what: "argmax",
        position,
        index,
    };
    let mut bad = good.clone();
    bad[5] = 100; // outside the plane
    bwd(&bad, 16, 80, out_of_range(5, 100));
    let mut bad = good.clone();
    bad[9] = 0; // output (0, 1) of plane 2 pointing into window (0, 0)
    bwd(&bad, 16, 80, out_of_range(9, 0));
    let mut bad = good.clone();
    bad[3] = 14; // output (1, 1): row 2, column 4 is in the dropped odd column
    bwd(&bad, 16, 80, out_of_range(3, 14));
    assert_eq!(
        out_of_range(5, 100).to_string(),
        "`argmax[5]` = 100 is out of range"
    );
    // The good indices are accepted.
    let mut out = vec![42.0; 80];
    maxpool2x2_backward(&layer, 2, &good, &[1.0; 16], &mut out).unwrap();
    assert_eq!(out.iter().filter(|&&v| v == 1.0).count(), 16);
}

#[test]
fn relu_errors() {
    let mut y = vec![42.0; 3];
    assert_eq!(relu_forward(&[1.0; 4], &mut y), Err(mismatch("y", 4, 3)));
    assert_eq!(
        reference::relu_forward(&[1.0; 4], &mut y),
        Err(mismatch("y", 4, 3))
    );
    assert!(untouched(&y));
    let mut dx = vec![42.0; 4];
    assert_eq!(
        relu_backward(&[1.0; 4], &[1.0; 3], &mut dx),
        Err(mismatch("dy", 4, 3))
    );
    assert_eq!(
        relu_backward(&[1.0; 3], &[1.0; 3], &mut dx),
        Err(mismatch("dx", 3, 4))
    );
    assert_eq!(
        reference::relu_backward(&[1.0; 4], &[1.0; 3], &mut dx),
        Err(mismatch("dy", 4, 3))
    );
    assert!(untouched(&dx));
    assert_eq!(
        relu_backward_in_place(&[1.0; 3], &mut dx),
        Err(mismatch("grad", 3, 4))
    );
    assert!(untouched(&dx));
}

#[test]
fn softmax_xent_errors() {
    let run =
        |classes: usize, logits: usize, labels: &[u32], grad: usize, expected: KernelError| {
            let z = vec![0.5; logits];
            let mut g = vec![42.0; grad];
            assert_eq!(
                softmax_xent(classes, &z, labels, &mut g),
                Err(expected.clone())
            );
            assert_eq!(
                reference::softmax_xent_scaled(classes, &z, labels, 1.0, &mut g),
                Err(expected.clone())
            );
            assert!(untouched(&g));
            if !matches!(
                expected,
                KernelError::LengthMismatch {
                    what: "dlogits",
                    ..
                }
            ) {
                assert_eq!(
                    softmax_xent_evaluate(classes, &z, labels),
                    Err(expected.clone())
                );
                assert_eq!(
                    reference::softmax_xent_evaluate(classes, &z, labels),
                    Err(expected)
                );
            }
        };
    run(0, 0, &[], 0, KernelError::ZeroDimension { what: "classes" });
    run(3, 5, &[0, 1], 6, mismatch("logits", 6, 5));
    run(3, 6, &[0, 1], 5, mismatch("dlogits", 6, 5));
    run(
        3,
        9,
        &[0, 2, 3],
        9,
        KernelError::LabelOutOfRange {
            row: 2,
            label: 3,
            classes: 3,
        },
    );
    run(
        usize::MAX,
        0,
        &[0, 0],
        0,
        KernelError::ShapeOverflow { what: "logits" },
    );
}

#[test]
fn shape_error_displays() {
    let err = KernelError::InvalidShape {
        what: "conv2d",
        reason: "kernel larger than the padded input",
    };
    assert_eq!(
        err.to_string(),
        "invalid shape for `conv2d`: kernel larger than the padded input"
    );
}

/// Empty batches are valid: forward writes nothing (there is nothing), backward
/// zeroes the weight gradients.
#[test]
fn empty_batches() {
    let mut scratch = CnnScratch::new();
    conv2d_forward(&CONV, 0, &[], &[1.0; 54], &[1.0; 3], &mut [], &mut scratch).unwrap();
    let (mut dw, mut db) = (vec![42.0; 54], vec![42.0; 3]);
    let grads = LayerGrads {
        dx: Some(&mut []),
        dw: &mut dw,
        db: &mut db,
    };
    conv2d_backward(&CONV, 0, &[], &[1.0; 54], &[], grads, &mut scratch).unwrap();
    assert!(dw.iter().chain(&db).all(|&v| v == 0.0));

    let layer = Dense {
        inputs: 4,
        outputs: 3,
    };
    let (mut dw, mut db) = (vec![42.0; 12], vec![42.0; 3]);
    let grads = LayerGrads {
        dx: None,
        dw: &mut dw,
        db: &mut db,
    };
    dense_backward(&layer, 0, &[], &[1.0; 12], &[], grads).unwrap();
    assert!(dw.iter().chain(&db).all(|&v| v == 0.0));
    assert_eq!(softmax_xent(3, &[], &[], &mut []), Ok(0.0));
    assert_eq!(softmax_xent_evaluate(3, &[], &[]), Ok((0, 0.0)));
}
