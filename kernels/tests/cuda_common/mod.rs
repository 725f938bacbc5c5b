//! Shared helpers for the CUDA test suites (`tests/cuda_*.rs`): open the GPU once or
//! skip, random data, and closeness checks. Use from a test file with
//! `mod cuda_common;` and start each case with `let gpu = gpu_or_skip!();`.
//!
//! Without a usable device every case prints `skipped: no CUDA device (<reason>)` and
//! returns (passing). On the GPU machine `gpu-bundle/run.sh` sets `HARP_REQUIRE_GPU=1`,
//! which turns a missing device into a failure so nothing is skipped silently there.
#![allow(dead_code)] // each test file uses a different subset

use std::sync::OnceLock;

use harp_kernels::cuda::Gpu;
use harp_kernels::KernelError;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Whether a missing GPU must fail the test instead of skipping it.
pub fn gpu_required() -> bool {
    std::env::var("HARP_REQUIRE_GPU")
        .map(|v| v == "1" || v.eq_ignore_ascii_case("true"))
        .unwrap_or(false)
}

/// Device 0, opened once per test binary and shared by every case; `None` (after
/// printing why) when there is no usable device.
pub fn gpu() -> Option<&'static Gpu> {
    static GPU: OnceLock<Result<Gpu, KernelError>> = OnceLock::new();
    match GPU.get_or_init(|| Gpu::open(0)) {
        Ok(gpu) => Some(gpu),
        Err(e) => {
            let reason = match e {
                KernelError::GpuUnavailable { reason } => reason.clone(),
                other => other.to_string(),
            };
            assert!(
                !gpu_required(),
                "HARP_REQUIRE_GPU is set but no CUDA device: {reason}"
            );
            println!("skipped: no CUDA device ({reason})");
            None
        }
    }
}

/// `let gpu = gpu_or_skip!();` — the shared [`Gpu`], or return from the test.
#[macro_export]
macro_rules! gpu_or_skip {
    () => {
        match $crate::cuda_common::gpu() {
            Some(gpu) => gpu,
            None => return,
        }
    };
}

/// A deterministic RNG for case `seed`.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `n` uniform values in `[lo, hi)`.
pub fn uniform(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// Asserts `|got - want| <= rel * (1 + |want|)` element-wise, naming the first bad index.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rel * (1.0 + w.abs()),
            "{what}[{i}]: GPU {g} vs CPU {w} (n = {}, rel tol {rel})",
            want.len()
        );
    }
}
