//! CUDA versions of the parameter-server update rules in [`crate::optim`]:
//! `+=`, axpy, AdaGrad and Adam on device buffers, same math in f32.
//!
//! Each wrapper validates like its CPU version (equal lengths, hyperparameters, Adam's
//! step) and that every buffer lives on `gpu`'s context, before launching anything;
//! on error nothing is written. Launches are asynchronous on [`Gpu::stream`]: read
//! the results with [`Gpu::download`] (which waits) or queue more work behind them.
//! The kernels (`kernels/cuda/optim.cu`) use float4 loads/stores with a scalar tail
//! and grid-stride loops, since these rules are bound by memory bandwidth.

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::{driver_err, CudaSource, Gpu};
use crate::error::{check_len, KernelError};
use crate::optim::{AdaGrad, Adam};

/// `kernels/cuda/optim.cu`.
pub const SOURCE: CudaSource = CudaSource {
    name: "optim.cu",
    code: include_str!("../../cuda/optim.cu"),
};

/// Fails unless `buf` was allocated on `gpu`'s context.
pub(crate) fn check_device<T>(
    gpu: &Gpu,
    what: &'static str,
    buf: &CudaSlice<T>,
) -> Result<(), KernelError> {
    if buf.context() == gpu.context() {
        Ok(())
    } else {
        Err(KernelError::Cuda {
            op: "argument check",
            message: format!("buffer `{what}` belongs to another CUDA context"),
        })
    }
}

/// Launch geometry for an element-wise kernel over `n` floats (one thread per float4).
fn config(gpu: &Gpu, n: usize) -> cudarc::driver::LaunchConfig {
    gpu.grid_stride_config(n.div_ceil(4))
}

/// `dst += src` element-wise, on the device.
///
/// # Errors
/// [`KernelError::LengthMismatch`] if the buffers differ in length;
/// [`KernelError::Cuda`] if a buffer is on another device, or compiling/launching fails;
/// [`KernelError::NvrtcUnavailable`] / [`KernelError::CudaCompile`] on first use if the
/// kernel cannot be compiled.
pub fn add_assign(
    gpu: &Gpu,
    dst: &mut CudaSlice<f32>,
    src: &CudaSlice<f32>,
) -> Result<(), KernelError> {
    check_len("src", dst.len(), src.len())?;
    check_device(gpu, "dst", dst)?;
    check_device(gpu, "src", src)?;
    let n = dst.len();
    if n == 0 {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_add_assign_f32")?;
    let n64 = n as u64;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(&mut *dst).arg(src).arg(&n64);
    // SAFETY: the argument list matches the kernel's signature
    // (float*, const float*, u64); both buffers hold n floats on this context, and the
    // kernel touches only indices < n.
    unsafe { launch.launch(config(gpu, n)) }.map_err(driver_err("launch harp_add_assign_f32"))?;
    Ok(())
}

/// `dst += alpha * src` element-wise, on the device.
///
/// # Errors
/// As [`add_assign`].
pub fn axpy(
    gpu: &Gpu,
    dst: &mut CudaSlice<f32>,
    alpha: f32,
    src: &CudaSlice<f32>,
) -> Result<(), KernelError> {
    check_len("src", dst.len(), src.len())?;
    check_device(gpu, "dst", dst)?;
    check_device(gpu, "src", src)?;
    let n = dst.len();
    if n == 0 {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_axpy_f32")?;
    let n64 = n as u64;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(&mut *dst).arg(&alpha).arg(src).arg(&n64);
    // SAFETY: arguments match (float*, float, const float*, u64); both buffers hold
    // n floats on this context; the kernel touches only indices < n.
    unsafe { launch.launch(config(gpu, n)) }.map_err(driver_err("launch harp_axpy_f32"))?;
    Ok(())
}

/// AdaGrad on the device: `accum += g²; w -= lr * g / (sqrt(accum) + eps)`.
///
/// # Errors
/// [`KernelError::InvalidHyperparameter`] if [`AdaGrad::validate`] fails;
/// [`KernelError::LengthMismatch`] if `grad` or `accum` differs in length from `w`;
/// otherwise as [`add_assign`].
pub fn adagrad_step(
    gpu: &Gpu,
    w: &mut CudaSlice<f32>,
    grad: &CudaSlice<f32>,
    accum: &mut CudaSlice<f32>,
    p: &AdaGrad,
) -> Result<(), KernelError> {
    p.check_step([w.len(), accum.len(), grad.len()])?;
    check_device(gpu, "w", w)?;
    check_device(gpu, "grad", grad)?;
    check_device(gpu, "accum", accum)?;
    let n = w.len();
    if n == 0 {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_adagrad_f32")?;
    let (lr, eps, n64) = (p.lr, p.eps, n as u64);
    let mut launch = gpu.stream().launch_builder(&f);
    launch
        .arg(&mut *w)
        .arg(&mut *accum)
        .arg(grad)
        .arg(&lr)
        .arg(&eps)
        .arg(&n64);
    // SAFETY: arguments match (float*, float*, const float*, float, float, u64); all
    // three buffers hold n floats on this context; the kernel touches indices < n.
    unsafe { launch.launch(config(gpu, n)) }.map_err(driver_err("launch harp_adagrad_f32"))?;
    Ok(())
}

/// Adam with bias correction on the device; `step` is the 1-based step count of this
/// row AFTER this update (t), as in [`crate::adam_step`]:
///
/// `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²; w -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)`
///
/// The bias corrections are computed on the host in f64 exactly as the CPU rule does.
///
/// # Errors
/// [`KernelError::ZeroStep`] if `step == 0`;
/// [`KernelError::InvalidHyperparameter`] if [`Adam::validate`] fails;
/// [`KernelError::LengthMismatch`] if `m`, `v` or `grad` differs in length from `w`;
/// otherwise as [`add_assign`].
pub fn adam_step(
    gpu: &Gpu,
    w: &mut CudaSlice<f32>,
    grad: &CudaSlice<f32>,
    m: &mut CudaSlice<f32>,
    v: &mut CudaSlice<f32>,
    p: &Adam,
    step: u64,
) -> Result<(), KernelError> {
    p.check_step(step, [w.len(), m.len(), v.len(), grad.len()])?;
    check_device(gpu, "w", w)?;
    check_device(gpu, "grad", grad)?;
    check_device(gpu, "m", m)?;
    check_device(gpu, "v", v)?;
    let n = w.len();
    if n == 0 {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_adam_f32")?;

    // Same hoisting as the CPU rule:
    // (m/bc1) / (sqrt(v/bc2) + eps) == (lr/bc1) * m / (sqrt(v) * (1/sqrt(bc2)) + eps).
    let t = step as f64;
    let bc1 = 1.0 - f64::from(p.beta1).powf(t);
    let bc2 = 1.0 - f64::from(p.beta2).powf(t);
    let step_size = (f64::from(p.lr) / bc1) as f32;
    let inv_sqrt_bc2 = (1.0 / bc2.sqrt()) as f32;
    let (b1, b2, eps, n64) = (p.beta1, p.beta2, p.eps, n as u64);

    let mut launch = gpu.stream().launch_builder(&f);
    launch
        .arg(&mut *w)
        .arg(&mut *m)
        .arg(&mut *v)
        .arg(grad)
        .arg(&b1)
        .arg(&b2)
        .arg(&eps)
        .arg(&step_size)
        .arg(&inv_sqrt_bc2)
        .arg(&n64);
    // SAFETY: arguments match (float* w, float* m, float* v, const float* grad, float b1,
    // float b2, float eps, float step_size, float inv_sqrt_bc2, u64 n); all four buffers
    // hold n floats on this context; the kernel touches only indices < n.
    unsafe { launch.launch(config(gpu, n)) }.map_err(driver_err("launch harp_adam_f32"))?;
    Ok(())
}
