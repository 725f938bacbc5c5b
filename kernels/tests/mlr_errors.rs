//! Every bad MLR input is reported as the right `KernelError`, without panicking
//! and without touching the output buffer.

use harp_kernels::{evaluate, gradient, gradient_reference, KernelError, MlrScratch, MlrShape};

const SHAPE: MlrShape = MlrShape {
    features: 3,
    classes: 2,
};

/// Runs all three kernels on the inputs, checks they return `expected`, and that
/// `grad` was left untouched.
fn expect_err(
    shape: MlrShape,
    x: &[f32],
    labels: &[u32],
    w: &[f32],
    grad_len: usize,
    expected: KernelError,
) {
    let mut scratch = MlrScratch::new();
    let mut grad = vec![42.0f32; grad_len];
    assert_eq!(
        gradient(shape, x, labels, w, &mut grad, &mut scratch),
        Err(expected.clone())
    );
    assert!(grad.iter().all(|&g| g == 42.0), "gradient wrote on error");
    assert_eq!(
        gradient_reference(shape, x, labels, w, &mut grad),
        Err(expected.clone())
    );
    assert!(
        grad.iter().all(|&g| g == 42.0),
        "gradient_reference wrote on error"
    );
    if !matches!(expected, KernelError::LengthMismatch { what: "grad", .. }) {
        assert_eq!(evaluate(shape, x, labels, w, &mut scratch), Err(expected));
    }
}

#[test]
fn zero_features() {
    let shape = MlrShape {
        features: 0,
        classes: 2,
    };
    expect_err(
        shape,
        &[],
        &[],
        &[],
        0,
        KernelError::ZeroDimension { what: "features" },
    );
}

#[test]
fn zero_classes() {
    let shape = MlrShape {
        features: 3,
        classes: 0,
    };
    expect_err(
        shape,
        &[0.0; 3],
        &[0],
        &[],
        0,
        KernelError::ZeroDimension { what: "classes" },
    );
}

#[test]
fn x_length_mismatch() {
    let err = KernelError::LengthMismatch {
        what: "x",
        expected: 6,
        actual: 5,
    };
    expect_err(SHAPE, &[0.0; 5], &[0, 1], &[0.0; 6], 6, err);
}

#[test]
fn w_length_mismatch() {
    let err = KernelError::LengthMismatch {
        what: "w",
        expected: 6,
        actual: 7,
    };
    expect_err(SHAPE, &[0.0; 6], &[0, 1], &[0.0; 7], 6, err);
}

#[test]
fn grad_length_mismatch() {
    let err = KernelError::LengthMismatch {
        what: "grad",
        expected: 6,
        actual: 4,
    };
    expect_err(SHAPE, &[0.0; 6], &[0, 1], &[0.0; 6], 4, err);
}

#[test]
fn label_out_of_range_names_the_row() {
    let err = KernelError::LabelOutOfRange {
        row: 2,
        label: 2,
        classes: 2,
    };
    expect_err(SHAPE, &[0.0; 9], &[0, 1, 2], &[0.0; 6], 6, err.clone());
    assert_eq!(
        err.to_string(),
        "label 2 at row 2 is out of range (classes = 2)"
    );
}

#[test]
fn shape_overflow() {
    let shape = MlrShape {
        features: usize::MAX,
        classes: 2,
    };
    expect_err(
        shape,
        &[],
        &[],
        &[],
        0,
        KernelError::ShapeOverflow { what: "w" },
    );
}

#[test]
fn errors_display_and_are_std_errors() {
    let err: Box<dyn std::error::Error> = Box::new(KernelError::LengthMismatch {
        what: "x",
        expected: 6,
        actual: 5,
    });
    assert_eq!(err.to_string(), "`x` has length 5, expected 6");
}
