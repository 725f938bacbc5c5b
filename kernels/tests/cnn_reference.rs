//! The fast CNN kernels agree with the f64 reference kernels: property tests over
//! random shapes (padding, odd sizes, empty batches) and deterministic cases whose
//! batch spans several im2col chunks.
//!
//! Tolerance: `|fast − ref| <= 1e-4 · (1 + |ref|)` per element for outputs that are
//! sums of a few hundred products of values in [-1, 1] (f32 accumulation vs f64).

use harp_kernels::cnn::reference;
use harp_kernels::{
    conv2d_backward, conv2d_forward, dense_backward, dense_forward, maxpool2x2_backward,
    maxpool2x2_forward, relu_backward, relu_backward_in_place, relu_forward, relu_in_place,
    softmax_xent_evaluate, softmax_xent_scaled, CnnScratch, Conv2d, Dense, LayerGrads, MaxPool2x2,
};
use proptest::prelude::*;

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

fn assert_close(what: &str, fast: &[f32], slow: &[f32], rel: f32) {
    assert_eq!(fast.len(), slow.len(), "{what}: lengths");
    for (k, (&a, &b)) in fast.iter().zip(slow).enumerate() {
        assert!(
            (a - b).abs() <= rel * (1.0 + b.abs()),
            "{what}[{k}]: fast {a} vs reference {b}"
        );
    }
}

/// Runs conv forward and backward (with and without dx) through both paths and
/// compares every output. Output buffers start as NaN: they must be overwritten.
fn check_conv(layer: Conv2d, batch: usize, seed: u64, scratch: &mut CnnScratch) {
    let x = values(seed, batch * layer.in_len().unwrap());
    let w = values(seed + 1, layer.weight_len().unwrap());
    let b = values(seed + 2, layer.out_channels);
    let y_len = batch * layer.out_len().unwrap();
    let dy = values(seed + 3, y_len);

    let (mut y_fast, mut y_ref) = (vec![f32::NAN; y_len], vec![f32::NAN; y_len]);
    conv2d_forward(&layer, batch, &x, &w, &b, &mut y_fast, scratch).unwrap();
    reference::conv2d_forward(&layer, batch, &x, &w, &b, &mut y_ref).unwrap();
    assert_close("y", &y_fast, &y_ref, 1e-4);

    let nan = |n: usize| vec![f32::NAN; n];
    let (mut dx_f, mut dw_f, mut db_f) = (nan(x.len()), nan(w.len()), nan(b.len()));
    let (mut dx_r, mut dw_r, mut db_r) = (nan(x.len()), nan(w.len()), nan(b.len()));
    conv2d_backward(
        &layer,
        batch,
        &x,
        &w,
        &dy,
        LayerGrads {
            dx: Some(&mut dx_f),
            dw: &mut dw_f,
            db: &mut db_f,
        },
        scratch,
    )
    .unwrap();
    reference::conv2d_backward(
        &layer,
        batch,
        &x,
        &w,
        &dy,
        LayerGrads {
            dx: Some(&mut dx_r),
            dw: &mut dw_r,
            db: &mut db_r,
        },
    )
    .unwrap();
    assert_close("dx", &dx_f, &dx_r, 1e-4);
    assert_close("dw", &dw_f, &dw_r, 1e-4);
    assert_close("db", &db_f, &db_r, 1e-4);

    // Without dx: the weight gradients are the same.
    let (mut dw2, mut db2) = (nan(w.len()), nan(b.len()));
    conv2d_backward(
        &layer,
        batch,
        &x,
        &w,
        &dy,
        LayerGrads {
            dx: None,
            dw: &mut dw2,
            db: &mut db2,
        },
        scratch,
    )
    .unwrap();
    assert_eq!(dw2, dw_f);
    assert_eq!(db2, db_f);
}

fn conv_case() -> impl Strategy<Value = (Conv2d, usize, u64)> {
    (
        (1usize..4, 1usize..5, 1usize..9, 1usize..9),
        (1usize..5, 1usize..5, 0usize..3, 0usize..3),
        0usize..4,
        any::<u64>(),
    )
        .prop_filter_map(
            "kernel larger than padded input",
            |((c, o, h, w), (kh, kw, ph, pw), batch, seed)| {
                let layer = Conv2d {
                    in_channels: c,
                    out_channels: o,
                    in_h: h,
                    in_w: w,
                    kernel_h: kh,
                    kernel_w: kw,
                    pad_h: ph,
                    pad_w: pw,
                };
                layer.validate().ok().map(|()| (layer, batch, seed))
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn conv_matches_reference((layer, batch, seed) in conv_case()) {
        check_conv(layer, batch, seed, &mut CnnScratch::new());
    }

    #[test]
    fn pool_matches_reference(
        c in 1usize..4, h in 2usize..9, w in 2usize..9, batch in 0usize..4, seed in any::<u64>()
    ) {
        let layer = MaxPool2x2 { channels: c, in_h: h, in_w: w };
        let x = values(seed, batch * layer.in_len().unwrap());
        let y_len = batch * layer.out_len().unwrap();
        let (mut yf, mut yr) = (vec![f32::NAN; y_len], vec![f32::NAN; y_len]);
        let (mut af, mut ar) = (vec![u32::MAX; y_len], vec![u32::MAX; y_len]);
        maxpool2x2_forward(&layer, batch, &x, &mut yf, &mut af).unwrap();
        reference::maxpool2x2_forward(&layer, batch, &x, &mut yr, &mut ar).unwrap();
        prop_assert_eq!(&yf, &yr);
        prop_assert_eq!(&af, &ar);

        let dy = values(seed + 1, y_len);
        let (mut dxf, mut dxr) = (vec![f32::NAN; x.len()], vec![f32::NAN; x.len()]);
        maxpool2x2_backward(&layer, batch, &af, &dy, &mut dxf).unwrap();
        reference::maxpool2x2_backward(&layer, batch, &ar, &dy, &mut dxr).unwrap();
        prop_assert_eq!(dxf, dxr);
    }

    #[test]
    fn dense_matches_reference(
        i in 1usize..40, o in 1usize..20, batch in 0usize..9, seed in any::<u64>()
    ) {
        let layer = Dense { inputs: i, outputs: o };
        let x = values(seed, batch * i);
        let w = values(seed + 1, i * o);
        let b = values(seed + 2, o);
        let dy = values(seed + 3, batch * o);
        let nan = |n: usize| vec![f32::NAN; n];
        let (mut yf, mut yr) = (nan(batch * o), nan(batch * o));
        dense_forward(&layer, batch, &x, &w, &b, &mut yf).unwrap();
        reference::dense_forward(&layer, batch, &x, &w, &b, &mut yr).unwrap();
        assert_close("y", &yf, &yr, 1e-4);

        let (mut dxf, mut dwf, mut dbf) = (nan(x.len()), nan(w.len()), nan(o));
        let (mut dxr, mut dwr, mut dbr) = (nan(x.len()), nan(w.len()), nan(o));
        dense_backward(&layer, batch, &x, &w, &dy,
            LayerGrads { dx: Some(&mut dxf), dw: &mut dwf, db: &mut dbf }).unwrap();
        reference::dense_backward(&layer, batch, &x, &w, &dy,
            LayerGrads { dx: Some(&mut dxr), dw: &mut dwr, db: &mut dbr }).unwrap();
        assert_close("dx", &dxf, &dxr, 1e-4);
        assert_close("dw", &dwf, &dwr, 1e-4);
        assert_close("db", &dbf, &dbr, 1e-4);
    }

    #[test]
    fn relu_matches_reference(n in 0usize..100, seed in any::<u64>()) {
        let x = values(seed, n);
        let dy = values(seed + 1, n);
        let (mut yf, mut yr) = (vec![f32::NAN; n], vec![f32::NAN; n]);
        relu_forward(&x, &mut yf).unwrap();
        reference::relu_forward(&x, &mut yr).unwrap();
        prop_assert_eq!(&yf, &yr);
        let mut in_place = x.clone();
        relu_in_place(&mut in_place);
        prop_assert_eq!(&in_place, &yr);

        let (mut dxf, mut dxr) = (vec![f32::NAN; n], vec![f32::NAN; n]);
        relu_backward(&yf, &dy, &mut dxf).unwrap();
        reference::relu_backward(&yr, &dy, &mut dxr).unwrap();
        prop_assert_eq!(&dxf, &dxr);
        let mut g = dy.clone();
        relu_backward_in_place(&yf, &mut g).unwrap();
        prop_assert_eq!(&g, &dxr);
    }

    #[test]
    fn softmax_xent_matches_reference(
        classes in 1usize..12, batch in 0usize..9, spread in 0.1f32..50.0,
        scale in -2.0f32..2.0, seed in any::<u64>()
    ) {
        let logits: Vec<f32> = values(seed, batch * classes).iter().map(|v| v * spread).collect();
        let labels: Vec<u32> = values(seed + 1, batch).iter()
            .map(|v| ((v + 1.0) * 0.5 * classes as f32) as u32 % classes as u32).collect();
        let (mut gf, mut gr) = (vec![f32::NAN; logits.len()], vec![f32::NAN; logits.len()]);
        let lf = softmax_xent_scaled(classes, &logits, &labels, scale, &mut gf).unwrap();
        let lr = reference::softmax_xent_scaled(classes, &logits, &labels, scale, &mut gr).unwrap();
        prop_assert!((lf - lr).abs() <= 1e-5 * (lr.abs() + batch as f64), "{} vs {}", lf, lr);
        assert_close("dlogits", &gf, &gr, 1e-5);

        let (cf, ef) = softmax_xent_evaluate(classes, &logits, &labels).unwrap();
        let (cr, er) = reference::softmax_xent_evaluate(classes, &logits, &labels).unwrap();
        prop_assert_eq!(cf, cr);
        prop_assert!((ef - lr).abs() <= 1e-5 * (lr.abs() + batch as f64));
        prop_assert!((er - lr).abs() <= 1e-9 * (lr.abs() + batch as f64));
    }
}

/// The SCAR network's second convolution (32→64 channels, 5×5, 12×12 input): a batch
/// of 11 spans three im2col chunks, the last one partial.
#[test]
fn conv_matches_reference_across_chunks() {
    let layer = Conv2d::square(32, 64, 12, 5, 0);
    check_conv(layer, 11, 7, &mut CnnScratch::new());
}

/// The SCAR network's first convolution (1→32, 5×5 on 28×28), and a padded variant;
/// one scratch serves layers of different sizes in turn.
#[test]
fn conv_first_layer_and_padding_share_a_scratch() {
    let mut scratch = CnnScratch::new();
    check_conv(Conv2d::square(1, 32, 28, 5, 0), 3, 11, &mut scratch);
    check_conv(Conv2d::square(3, 8, 9, 3, 1), 40, 12, &mut scratch);
    check_conv(Conv2d::square(32, 64, 12, 5, 2), 2, 13, &mut scratch);
    check_conv(Conv2d::square(1, 32, 28, 5, 0), 20, 14, &mut scratch);
}

/// Ties and NaN handling of max pooling are the documented ones.
#[test]
fn pool_ties_go_to_the_first_element() {
    let layer = MaxPool2x2 {
        channels: 1,
        in_h: 2,
        in_w: 4,
    };
    let x = [1.0, 1.0, f32::NAN, 5.0, 1.0, 1.0, 2.0, 7.0];
    let (mut y, mut a) = (vec![0.0; 2], vec![0; 2]);
    maxpool2x2_forward(&layer, 1, &x, &mut y, &mut a).unwrap();
    assert_eq!(y[0], 1.0);
    assert_eq!(a[0], 0);
    // A NaN in the window's first position propagates.
    assert!(y[1].is_nan());
    assert_eq!(a[1], 2);
}
