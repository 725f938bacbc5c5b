//! CUDA versions of harp's kernels (feature `cuda`).
//!
//! This module owns the CUDA plumbing every GPU kernel in the crate shares:
//!
//! * [`CudaSource`] — one `.cu` file under `kernels/cuda/`, embedded with
//!   `include_str!`; [`SOURCES`] lists every one of them (the NVRTC compile test
//!   compiles each);
//! * [`Gpu`] — an open device: context, one stream, and a cache of compiled modules;
//!   [`Gpu::function`] compiles a source with NVRTC the first time it is needed, for
//!   the device's own architecture (`sm_XY`), and loads the cubin;
//! * [`compile_check`] — NVRTC only, no device: does a source compile?
//!
//! The kernels themselves live in [`mlr`] (minibatch gradient), [`optim`]
//! (element-wise update rules), [`lda`] (parallel sampling step, count rebuild), [`mf`]
//! (SGD, ALS) and [`cnn`] (layers forward and backward); they take cudarc device buffers
//! ([`CudaSlice`](cudarc::driver::CudaSlice)), validate lengths and hyperparameters
//! like their CPU versions, and write nothing on error.
//!
//! Nothing CUDA is needed to build: the CUDA driver (`libcuda.so.1`) and NVRTC
//! (`libnvrtc.so.13`, or `.so.12`) are loaded at run time, on first use. Without them
//! [`Gpu::open`] returns [`KernelError::GpuUnavailable`] and [`compile_check`]
//! [`KernelError::NvrtcUnavailable`]; nothing panics. See `docs/KERNELS.md`.

mod gpu;
mod nvrtc;

pub mod cnn;
pub mod lda;
pub mod mf;
pub mod mlr;
pub mod optim;

pub use cudarc;
pub use gpu::Gpu;
pub use nvrtc::{compile_check, compile_cubin, nvrtc_version, CHECK_ARCHS};

use crate::error::KernelError;

/// One CUDA C source file, compiled at run time by NVRTC.
///
/// Kernels in it must be `extern "C" __global__` (so their names are not mangled)
/// and the file must not `#include` anything (NVRTC has no system headers here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaSource {
    /// Short unique name, used in error messages and as the NVRTC program name
    /// (by convention the file name, e.g. `"mlr.cu"`).
    pub name: &'static str,
    /// The CUDA C source text (`include_str!("../../cuda/<file>.cu")`).
    pub code: &'static str,
}

/// Every CUDA source of the crate. Add yours here: the NVRTC compile test
/// (`tests/cuda_nvrtc_compile.rs`) compiles each entry.
pub const SOURCES: &[&CudaSource] = &[
    &mlr::SOURCE,
    &optim::SOURCE,
    &lda::SOURCE,
    &mf::SOURCE,
    &cnn::SOURCE,
];

/// Maps a cudarc driver error to [`KernelError::Cuda`], naming the operation.
pub(crate) fn driver_err(
    op: &'static str,
) -> impl FnOnce(cudarc::driver::DriverError) -> KernelError {
    move |e| KernelError::Cuda {
        op,
        message: e.to_string(),
    }
}
