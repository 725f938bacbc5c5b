//! Numerical stability: huge logits must not overflow `exp` or produce NaNs.

use harp_kernels::{evaluate, gradient, gradient_reference, MlrScratch, MlrShape};

#[test]
fn logits_of_plus_minus_1000_stay_finite() {
    // One feature, x = ±1, w = [1000, -1000, 0]: logits are ±1000 and 0.
    let shape = MlrShape {
        features: 1,
        classes: 3,
    };
    let x = [1.0f32, -1.0, 1.0];
    let labels = [1u32, 0, 0];
    let w = [1000.0f32, -1000.0, 0.0];
    // Row 0: logits [1000, -1000, 0], label 1 -> loss 2000.
    // Row 1: logits [-1000, 1000, 0], label 0 -> loss 2000.
    // Row 2: logits [1000, -1000, 0], label 0 -> loss ~0 (e^-1000 underflows).
    let expected = 4000.0;

    let mut scratch = MlrScratch::new();
    let mut grad = [0.0f32; 3];
    let loss = gradient(shape, &x, &labels, &w, &mut grad, &mut scratch).unwrap();
    assert!(
        loss.is_finite() && (loss - expected).abs() < 1e-3,
        "loss {loss}"
    );
    assert!(grad.iter().all(|g| g.is_finite()), "grad {grad:?}");
    // d/dw = sum_i x_i (p_i - y_i): row 0 gives [1, -1, 0], row 1 gives
    // -1 * [-1, 1, 0] = [1, -1, 0], row 2 gives [0, 0, 0].
    let want = [2.0f32, -2.0, 0.0];
    for (g, w) in grad.iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "grad {grad:?}");
    }

    let mut grad_ref = [0.0f32; 3];
    let loss_ref = gradient_reference(shape, &x, &labels, &w, &mut grad_ref).unwrap();
    assert!(
        (loss_ref - expected).abs() < 1e-6,
        "reference loss {loss_ref}"
    );
    assert_eq!(grad_ref, want);

    let (correct, eval_loss) = evaluate(shape, &x, &labels, &w, &mut scratch).unwrap();
    assert_eq!(correct, 1);
    assert!((eval_loss - expected).abs() < 1e-3, "eval loss {eval_loss}");
}

#[test]
fn huge_equal_logits_split_evenly() {
    // All logits 1e30: naive exp overflows to inf/inf = NaN; stable softmax gives 1/C.
    let shape = MlrShape {
        features: 1,
        classes: 4,
    };
    let x = [1.0f32];
    let w = [1e30f32; 4];
    let mut grad = [0.0f32; 4];
    let loss = gradient(shape, &x, &[2], &w, &mut grad, &mut MlrScratch::new()).unwrap();
    assert!((loss - 4f64.ln()).abs() < 1e-6, "loss {loss}");
    assert_eq!(grad, [0.25, 0.25, -0.75, 0.25]);
}
