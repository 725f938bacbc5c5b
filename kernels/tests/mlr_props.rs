//! Property tests: the fast MLR kernels agree with the f64 reference on random
//! shapes and data.

use harp_kernels::{evaluate, gradient, gradient_reference, MlrScratch, MlrShape};
use proptest::prelude::*;

/// A random MLR problem: shape, x (rows×features), labels, w (features×classes).
#[derive(Debug, Clone)]
struct Problem {
    shape: MlrShape,
    x: Vec<f32>,
    labels: Vec<u32>,
    w: Vec<f32>,
}

fn problem() -> impl Strategy<Value = Problem> {
    (0usize..40, 1usize..50, 1usize..12).prop_flat_map(|(rows, features, classes)| {
        (
            prop::collection::vec(-2.0f32..2.0, rows * features),
            prop::collection::vec(0..classes as u32, rows),
            prop::collection::vec(-2.0f32..2.0, features * classes),
        )
            .prop_map(move |(x, labels, w)| Problem {
                shape: MlrShape { features, classes },
                x,
                labels,
                w,
            })
    })
}

/// f64 logits of row `i`.
fn logits_f64(p: &Problem, i: usize) -> Vec<f64> {
    let (f, c) = (p.shape.features, p.shape.classes);
    (0..c)
        .map(|k| {
            (0..f)
                .map(|j| f64::from(p.x[i * f + j]) * f64::from(p.w[j * c + k]))
                .sum()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn gradient_matches_reference(p in problem()) {
        let n = p.w.len();
        let rows = p.labels.len();
        let mut fast = vec![f32::NAN; n]; // must be fully overwritten
        let mut slow = vec![f32::NAN; n];
        let mut scratch = MlrScratch::new();
        let loss_fast = gradient(p.shape, &p.x, &p.labels, &p.w, &mut fast, &mut scratch).unwrap();
        let loss_slow = gradient_reference(p.shape, &p.x, &p.labels, &p.w, &mut slow).unwrap();

        // Loss: 1e-4 relative, with a floor of 1e-4 per row (each row's loss is
        // 1-Lipschitz-ish in its logits, which carry f32 rounding error).
        let loss_tol = 1e-4 * (loss_slow.abs() + rows as f64);
        prop_assert!((loss_fast - loss_slow).abs() <= loss_tol,
            "loss fast {loss_fast} vs reference {loss_slow}");

        // grad[j][c] = sum_i x_ij d_ic with |d_ic| <= 1, so the natural absolute scale
        // of entry (j, c) is sum_i |x_ij|.
        let (f, c) = (p.shape.features, p.shape.classes);
        for j in 0..f {
            let scale: f64 = (0..rows).map(|i| f64::from(p.x[i * f + j].abs())).sum();
            for k in 0..c {
                let (a, b) = (f64::from(fast[j * c + k]), f64::from(slow[j * c + k]));
                let tol = 1e-4 * (b.abs() + scale) + 1e-6;
                prop_assert!((a - b).abs() <= tol,
                    "grad[{j}][{k}]: fast {a} vs reference {b} (tol {tol})");
            }
        }

        // Reusing a scratch that has grown must give identical results.
        let mut again = vec![0.0f32; n];
        let loss_again = gradient(p.shape, &p.x, &p.labels, &p.w, &mut again, &mut scratch).unwrap();
        prop_assert_eq!(loss_again, loss_fast);
        prop_assert_eq!(again, fast);
    }

    #[test]
    fn evaluate_matches_reference(p in problem()) {
        let rows = p.labels.len();
        let mut slow = vec![0.0f32; p.w.len()];
        let loss_slow = gradient_reference(p.shape, &p.x, &p.labels, &p.w, &mut slow).unwrap();
        let mut scratch = MlrScratch::new();
        let (correct, loss) = evaluate(p.shape, &p.x, &p.labels, &p.w, &mut scratch).unwrap();

        let loss_tol = 1e-4 * (loss_slow.abs() + rows as f64);
        prop_assert!((loss - loss_slow).abs() <= loss_tol,
            "loss eval {loss} vs reference {loss_slow}");

        // Accuracy: count rows whose f64 argmax is the label; rows whose top two
        // logits are within f32 rounding of each other may go either way.
        let (mut sure, mut unsure) = (0usize, 0usize);
        for i in 0..rows {
            let z = logits_f64(&p, i);
            let y = p.labels[i] as usize;
            let best = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let near_tie = z.iter().enumerate()
                .filter(|&(k, &v)| k != y && (v - z[y]).abs() < 1e-3)
                .count() > 0;
            if near_tie && (best - z[y]).abs() < 1e-3 {
                unsure += 1;
            } else if z[y] == best {
                sure += 1;
            }
        }
        prop_assert!(correct >= sure && correct <= sure + unsure,
            "correct {correct}, reference {sure} (+{unsure} near ties)");
    }
}

#[test]
fn empty_batch_zeroes_grad() {
    let shape = MlrShape {
        features: 3,
        classes: 2,
    };
    let w = [0.5f32; 6];
    let mut grad = [7.0f32; 6];
    let mut scratch = MlrScratch::default();
    let loss = gradient(shape, &[], &[], &w, &mut grad, &mut scratch).unwrap();
    assert_eq!(loss, 0.0);
    assert_eq!(grad, [0.0; 6]);
    let mut grad_ref = [7.0f32; 6];
    assert_eq!(
        gradient_reference(shape, &[], &[], &w, &mut grad_ref).unwrap(),
        0.0
    );
    assert_eq!(grad_ref, [0.0; 6]);
    assert_eq!(
        evaluate(shape, &[], &[], &w, &mut scratch).unwrap(),
        (0, 0.0)
    );
}

#[test]
fn zero_weights_give_uniform_loss() {
    // With W = 0 every class has probability 1/C, so each row's loss is ln C.
    let shape = MlrShape {
        features: 4,
        classes: 5,
    };
    let x: Vec<f32> = (0..12).map(|i| i as f32 * 0.1 - 0.5).collect();
    let labels = [0u32, 3, 4];
    let w = vec![0.0f32; 20];
    let mut grad = vec![0.0f32; 20];
    let mut scratch = MlrScratch::new();
    let loss = gradient(shape, &x, &labels, &w, &mut grad, &mut scratch).unwrap();
    assert!((loss - 3.0 * 5f64.ln()).abs() < 1e-5, "{loss}");
    let (_, eval_loss) = evaluate(shape, &x, &labels, &w, &mut scratch).unwrap();
    assert!((eval_loss - 3.0 * 5f64.ln()).abs() < 1e-5, "{eval_loss}");
}
