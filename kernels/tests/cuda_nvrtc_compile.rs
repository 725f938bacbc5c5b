//! Every CUDA source in `harp_kernels::cuda::SOURCES` compiles with NVRTC (no GPU
//! needed). Skips with a message when libnvrtc cannot be loaded, except in CI
//! (`CI=true`) or on the GPU machine (`HARP_REQUIRE_GPU=1`), where NVRTC is installed
//! and a missing library is a failure. A source that fails to compile always fails.
#![cfg(feature = "cuda")]

use harp_kernels::cuda::{compile_check, nvrtc_version, CHECK_ARCHS, SOURCES};
use harp_kernels::KernelError;

fn nvrtc_required() -> bool {
    let set = |var: &str| {
        std::env::var(var)
            .map(|v| v == "1" || v.eq_ignore_ascii_case("true"))
            .unwrap_or(false)
    };
    set("CI") || set("HARP_REQUIRE_GPU")
}

/// NVRTC's version, or `None` (after printing why) when the test must be skipped.
fn nvrtc_or_skip() -> Option<(i32, i32)> {
    match nvrtc_version() {
        Ok(version) => Some(version),
        Err(KernelError::NvrtcUnavailable { reason }) if !nvrtc_required() => {
            println!("skipped: NVRTC unavailable ({reason})");
            None
        }
        Err(e) => panic!("NVRTC is required here (CI or HARP_REQUIRE_GPU) but: {e}"),
    }
}

#[test]
fn every_source_compiles() {
    let Some((major, minor)) = nvrtc_or_skip() else {
        return;
    };
    println!("NVRTC {major}.{minor}, architectures {CHECK_ARCHS:?}");
    let mut failures = Vec::new();
    for src in SOURCES {
        match compile_check(src) {
            Ok(()) => println!("compiled {}", src.name),
            Err(e) => failures.push(format!("{}: {e}", src.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} CUDA sources failed to compile:\n{}",
        failures.len(),
        SOURCES.len(),
        failures.join("\n\n")
    );
}

#[test]
fn source_names_are_unique_and_sources_nonempty() {
    let mut names: Vec<&str> = SOURCES.iter().map(|s| s.name).collect();
    assert!(SOURCES.iter().all(|s| !s.code.trim().is_empty()));
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(before, names.len(), "duplicate CudaSource names: {names:?}");
}

#[test]
fn a_broken_source_is_reported_with_the_log() {
    let Some(_) = nvrtc_or_skip() else {
        return;
    };
    let broken = harp_kernels::cuda::CudaSource {
        name: "broken.cu",
        code: "extern \"C\" __global__ void k(float* x) { x[0] = undeclared_name; }",
    };
    match compile_check(&broken) {
        Err(KernelError::CudaCompile { source_name, log }) => {
            assert_eq!(source_name, "broken.cu");
            assert!(log.contains("undeclared_name"), "log: {log}");
        }
        other => panic!("expected CudaCompile, got {other:?}"),
    }
}
