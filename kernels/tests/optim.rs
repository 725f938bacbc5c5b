//! The parameter-server update rules agree with their f64 references, move weights
//! against the gradient, and reject bad input.

use harp_kernels::optim::reference::{
    adagrad_step_reference, adam_step_reference, add_assign_reference, axpy_reference,
};
use harp_kernels::{adagrad_step, adam_step, add_assign, axpy, AdaGrad, Adam, KernelError};
use proptest::prelude::*;

fn close(a: &[f32], b: &[f32], rel: f32) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.len(), b.len());
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        prop_assert!(
            (x - y).abs() <= rel * (1.0 + y.abs()),
            "[{}]: {} vs {}",
            i,
            x,
            y
        );
    }
    Ok(())
}

/// Three equal-length vectors in [-2, 2].
fn triple() -> impl Strategy<Value = (Vec<f32>, Vec<f32>, Vec<f32>)> {
    (0usize..200).prop_flat_map(|n| {
        (
            prop::collection::vec(-2.0f32..2.0, n),
            prop::collection::vec(-2.0f32..2.0, n),
            prop::collection::vec(-2.0f32..2.0, n),
        )
    })
}

proptest! {
    #[test]
    fn add_and_axpy_match_reference((dst, src, _) in triple(), alpha in -3.0f32..3.0) {
        let (mut a, mut b) = (dst.clone(), dst.clone());
        add_assign(&mut a, &src).unwrap();
        add_assign_reference(&mut b, &src).unwrap();
        close(&a, &b, 1e-6)?;
        let (mut a, mut b) = (dst.clone(), dst);
        axpy(&mut a, alpha, &src).unwrap();
        axpy_reference(&mut b, alpha, &src).unwrap();
        close(&a, &b, 1e-6)?;
    }

    #[test]
    fn adagrad_matches_reference((w, accum, grad) in triple(), lr in 0.001f32..1.0) {
        let accum: Vec<f32> = accum.iter().map(|a| a.abs()).collect(); // accumulators are >= 0
        let p = AdaGrad { lr, eps: 1e-8 };
        let (mut w1, mut a1) = (w.clone(), accum.clone());
        let (mut w2, mut a2) = (w, accum);
        for _ in 0..3 {
            adagrad_step(&mut w1, &mut a1, &grad, p).unwrap();
            adagrad_step_reference(&mut w2, &mut a2, &grad, p).unwrap();
        }
        close(&a1, &a2, 1e-5)?;
        close(&w1, &w2, 1e-5)?;
    }

    #[test]
    fn adam_matches_reference((w, m, grad) in triple(), v_seed in prop::collection::vec(0.0f32..4.0, 200),
                              start in 1u64..10_000, lr in 0.0001f32..0.1) {
        let v: Vec<f32> = v_seed[..w.len()].to_vec();
        let p = Adam { lr, ..Adam::default() };
        let (mut w1, mut m1, mut v1) = (w.clone(), m.clone(), v.clone());
        let (mut w2, mut m2, mut v2) = (w, m, v);
        for t in start..start + 3 {
            adam_step(&mut w1, &mut m1, &mut v1, &grad, t, p).unwrap();
            adam_step_reference(&mut w2, &mut m2, &mut v2, &grad, t, p).unwrap();
        }
        close(&m1, &m2, 1e-5)?;
        close(&v1, &v2, 1e-5)?;
        close(&w1, &w2, 1e-5)?;
    }

    #[test]
    fn updates_move_against_the_gradient(grad in prop::collection::vec(-2.0f32..2.0, 1..100)) {
        let n = grad.len();
        let w0 = vec![0.5f32; n];

        let (mut w, mut accum) = (w0.clone(), vec![0.0f32; n]);
        adagrad_step(&mut w, &mut accum, &grad, AdaGrad::default()).unwrap();
        for i in 0..n {
            let delta = w[i] - w0[i];
            prop_assert!(delta * grad[i] <= 0.0, "adagrad [{}]: g {} delta {}", i, grad[i], delta);
            if grad[i].abs() > 1e-3 {
                // First AdaGrad step from accum = 0 is lr * sign(g).
                prop_assert!((delta + 0.1 * grad[i].signum()).abs() < 1e-5);
            }
        }

        let (mut w, mut m, mut v) = (w0.clone(), vec![0.0f32; n], vec![0.0f32; n]);
        adam_step(&mut w, &mut m, &mut v, &grad, 1, Adam::default()).unwrap();
        for i in 0..n {
            let delta = w[i] - w0[i];
            prop_assert!(delta * grad[i] <= 0.0, "adam [{}]: g {} delta {}", i, grad[i], delta);
            if grad[i].abs() > 1e-3 {
                // First Adam step is lr * sign(g) after bias correction.
                prop_assert!((delta + 1e-3 * grad[i].signum()).abs() < 1e-6);
            }
        }
    }
}

#[test]
fn defaults_are_the_usual_constants() {
    assert_eq!(AdaGrad::default(), AdaGrad { lr: 0.1, eps: 1e-8 });
    assert_eq!(
        Adam::default(),
        Adam {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8
        }
    );
}

#[test]
fn length_mismatches_are_errors_and_write_nothing() {
    let mismatch = |what, expected, actual| KernelError::LengthMismatch {
        what,
        expected,
        actual,
    };
    let mut w = [1.0f32; 3];
    assert_eq!(add_assign(&mut w, &[1.0; 2]), Err(mismatch("src", 3, 2)));
    assert_eq!(axpy(&mut w, 2.0, &[1.0; 4]), Err(mismatch("src", 3, 4)));

    let mut accum = [0.0f32; 2];
    assert_eq!(
        adagrad_step(&mut w, &mut accum, &[1.0; 3], AdaGrad::default()),
        Err(mismatch("accum", 3, 2))
    );
    let mut accum = [0.0f32; 3];
    assert_eq!(
        adagrad_step(&mut w, &mut accum, &[1.0; 1], AdaGrad::default()),
        Err(mismatch("grad", 3, 1))
    );

    let (mut m, mut v) = ([0.0f32; 3], [0.0f32; 2]);
    assert_eq!(
        adam_step(&mut w, &mut m, &mut v, &[1.0; 3], 1, Adam::default()),
        Err(mismatch("v", 3, 2))
    );
    let (mut m2, mut v3) = ([0.0f32; 2], [0.0f32; 3]);
    assert_eq!(
        adam_step(&mut w, &mut m2, &mut v3, &[1.0; 3], 1, Adam::default()),
        Err(mismatch("m", 3, 2))
    );
    assert_eq!(
        adam_step(&mut w, &mut m, &mut v3, &[1.0; 5], 1, Adam::default()),
        Err(mismatch("grad", 3, 5))
    );
    assert_eq!(w, [1.0; 3]);
    assert_eq!(accum, [0.0; 3]);
    assert_eq!(m, [0.0; 3]);
}

#[test]
fn adam_step_zero_is_an_error() {
    let (mut w, mut m, mut v) = ([1.0f32; 2], [0.0f32; 2], [0.0f32; 2]);
    assert_eq!(
        adam_step(&mut w, &mut m, &mut v, &[1.0; 2], 0, Adam::default()),
        Err(KernelError::ZeroStep)
    );
    assert_eq!(w, [1.0; 2]);
}

#[test]
fn bad_hyperparameters_are_errors() {
    let (mut w, mut m, mut v) = ([1.0f32; 2], [0.0f32; 2], [0.0f32; 2]);
    let g = [1.0f32; 2];
    let bad = |what, value| Err(KernelError::InvalidHyperparameter { what, value });
    let beta1_one = Adam {
        beta1: 1.0,
        ..Adam::default()
    };
    assert_eq!(
        adam_step(&mut w, &mut m, &mut v, &g, 1, beta1_one),
        bad("beta1", 1.0)
    );
    let beta2_neg = Adam {
        beta2: -0.1,
        ..Adam::default()
    };
    assert_eq!(
        adam_step(&mut w, &mut m, &mut v, &g, 1, beta2_neg),
        bad("beta2", -0.1)
    );
    let nan_lr = AdaGrad {
        lr: f32::NAN,
        eps: 1e-8,
    };
    assert!(matches!(
        adagrad_step(&mut w, &mut m, &g, nan_lr),
        Err(KernelError::InvalidHyperparameter { what: "lr", .. })
    ));
    let neg_eps = AdaGrad { lr: 0.1, eps: -1.0 };
    assert_eq!(adagrad_step(&mut w, &mut m, &g, neg_eps), bad("eps", -1.0));
    assert_eq!(w, [1.0; 2]);
}

#[test]
fn adam_late_steps_have_no_bias_correction_blowup() {
    // At very large t the bias corrections are 1 and the update stays bounded.
    let (mut w, mut m, mut v) = ([0.0f32; 1], [0.0f32; 1], [0.0f32; 1]);
    adam_step(&mut w, &mut m, &mut v, &[1.0], u64::MAX, Adam::default()).unwrap();
    assert!(w[0].is_finite() && w[0] < 0.0 && w[0] > -0.01, "{}", w[0]);
}
