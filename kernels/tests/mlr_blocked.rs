//! The blocked gradient equals the contiguous one on the assembled weight matrix, for
//! narrow blocks (assembled into one matrix by the kernel) and wide ones (multiplied in
//! place).

use harp_kernels::{
    gradient_blocked, gradient_scaled, KernelError, MlrScratch, MlrShape,
    GATHER_BELOW_BLOCK_FEATURES,
};
use proptest::prelude::*;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut h = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    (0..n)
        .map(|_| {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            ((h >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn matches_contiguous_gradient(rows in 0usize..30, features in 1usize..100, classes in 1usize..9,
                                   block in 1usize..2 * GATHER_BELOW_BLOCK_FEATURES, seed in any::<u64>()) {
        let shape = MlrShape { features, classes };
        let x = values(rows * features, seed);
        let labels: Vec<u32> = (0..rows).map(|i| ((i as u64 + seed) % classes as u64) as u32).collect();
        let blocks = features.div_ceil(block);
        // Padded block storage; padding rows hold garbage that must be ignored.
        let mut w_store = values(blocks * block * classes, seed ^ 1);
        let w: Vec<f32> = w_store[..features * classes].to_vec();
        for v in &mut w_store[features * classes..] { *v = 1e6; }
        let w_blocks: Vec<&[f32]> = w_store.chunks_exact(block * classes).collect();
        let mut grads = vec![vec![7.0f32; block * classes]; blocks];
        let mut grad_refs: Vec<&mut [f32]> = grads.iter_mut().map(|g| g.as_mut_slice()).collect();
        let mut scratch = MlrScratch::new();
        let loss = gradient_blocked(shape, block, &x, &labels, &w_blocks, -0.5, &mut grad_refs, &mut scratch).unwrap();
        let mut want = vec![0f32; features * classes];
        let want_loss = gradient_scaled(shape, &x, &labels, &w, -0.5, &mut want, &mut scratch).unwrap();
        prop_assert!((loss - want_loss).abs() <= 1e-4 * (1.0 + want_loss.abs()));
        let flat: Vec<f32> = grads.concat();
        for (i, (g, e)) in flat[..features * classes].iter().zip(&want).enumerate() {
            prop_assert!((g - e).abs() <= 1e-3 * (1.0 + e.abs()), "entry {i}: {g} vs {e}");
        }
        prop_assert!(flat[features * classes..].iter().all(|v| *v == 0.0), "padding not zeroed");
    }
}

#[test]
fn wrong_block_count_or_length_is_an_error() {
    let shape = MlrShape {
        features: 5,
        classes: 2,
    };
    let x = vec![0.0; 5];
    let w = vec![0.0; 6];
    let mut g = vec![0.0; 6];
    let mut scratch = MlrScratch::new();
    let err = gradient_blocked(shape, 3, &x, &[0], &[&w], 1.0, &mut [&mut g], &mut scratch);
    assert!(matches!(err, Err(KernelError::LengthMismatch { .. })));
    let short = vec![0.0; 4];
    let mut g2 = vec![0.0; 6];
    let err = gradient_blocked(
        shape,
        3,
        &x,
        &[0],
        &[&w, &short],
        1.0,
        &mut [&mut g, &mut g2],
        &mut scratch,
    );
    assert!(matches!(err, Err(KernelError::LengthMismatch { .. })));
    let err = gradient_blocked(shape, 0, &x, &[0], &[], 1.0, &mut [], &mut scratch);
    assert!(matches!(err, Err(KernelError::ZeroDimension { .. })));
}
