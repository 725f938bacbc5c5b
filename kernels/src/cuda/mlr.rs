//! CUDA version of the MLR minibatch gradient ([`crate::mlr::gradient_scaled`]).
//!
//! Same contract and layouts as the CPU kernel, with `x`, `labels`, `w` and `grad` in
//! device memory. Three launches on [`Gpu::stream`] (see `kernels/cuda/mlr.cu`): a
//! tiled GEMM for the logits `X·W`, a warp-per-row stable softmax / cross-entropy that
//! also checks the labels, and a tiled GEMM `alpha·Xᵀ·(P − Y)` into `grad`. The host
//! reads back the per-row losses and the label check between the second and third
//! launch (one synchronization), so a bad label is reported before `grad` is touched.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::optim::check_device;
use super::{driver_err, CudaSource, Gpu};
use crate::error::{check_len, KernelError};
use crate::mlr::MlrShape;

/// `kernels/cuda/mlr.cu`.
pub const SOURCE: CudaSource = CudaSource {
    name: "mlr.cu",
    code: include_str!("../../cuda/mlr.cu"),
};

/// Output tile edge of `harp_mlr_gemm` (`HARP_TILE` in mlr.cu).
const TILE: usize = 32;
/// `blockDim.y` of `harp_mlr_gemm` (`HARP_ROWS_PER_PASS` in mlr.cu).
const ROWS_PER_PASS: u32 = 8;
/// Largest `classes`: the GEMMs put class tiles on `gridDim.y`, which CUDA caps at 65535.
pub const MAX_CLASSES: usize = 65_535 * TILE;
/// Largest batch: row indices travel as u32, and u32::MAX marks "no bad label".
pub const MAX_ROWS: usize = u32::MAX as usize - 1;
/// "No bad label" marker of the label check.
const NO_BAD_ROW: u32 = u32::MAX;

/// Reusable device buffers for [`gradient`], so the hot loop does not allocate.
///
/// Holds the `rows × classes` logits / probabilities, the per-row losses and the
/// label-check word; it only grows. Tied to the device of the first [`Gpu`] it is used
/// with (it reallocates if used with another).
#[derive(Debug, Default)]
pub struct MlrGpuScratch {
    z: Option<CudaSlice<f32>>,
    row_loss: Option<CudaSlice<f64>>,
    bad_row: Option<CudaSlice<u32>>,
}

impl MlrGpuScratch {
    /// Empty scratch; it grows on first use.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Returns `buf` if it is on `gpu` and holds at least `len` elements, else a new
/// zeroed buffer of `len` elements.
fn ensure<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    gpu: &Gpu,
    buf: &mut Option<CudaSlice<T>>,
    len: usize,
) -> Result<(), KernelError> {
    let fits = buf
        .as_ref()
        .is_some_and(|b| b.len() >= len && b.context() == gpu.context());
    if !fits {
        *buf = None; // free the old buffer before allocating the new one
        *buf = Some(gpu.alloc_zeros::<T>(len.max(1))?);
    }
    Ok(())
}

/// Checks the shape and buffer lengths like the CPU `validate` (labels are checked on
/// the device later) and the GPU limits; returns the batch size.
fn validate(
    gpu: &Gpu,
    shape: MlrShape,
    x: &CudaSlice<f32>,
    labels: &CudaSlice<u32>,
    w: &CudaSlice<f32>,
    grad: &CudaSlice<f32>,
) -> Result<usize, KernelError> {
    if shape.features == 0 {
        return Err(KernelError::ZeroDimension { what: "features" });
    }
    if shape.classes == 0 {
        return Err(KernelError::ZeroDimension { what: "classes" });
    }
    let params = shape.params()?;
    check_len("w", params, w.len())?;
    let rows = labels.len();
    let x_len = rows
        .checked_mul(shape.features)
        .ok_or(KernelError::ShapeOverflow { what: "x" })?;
    check_len("x", x_len, x.len())?;
    check_len("grad", params, grad.len())?;
    rows.checked_mul(shape.classes)
        .ok_or(KernelError::ShapeOverflow { what: "logits" })?;
    if shape.classes > MAX_CLASSES {
        return Err(KernelError::GpuLimit {
            what: "classes",
            value: shape.classes,
            max: MAX_CLASSES,
        });
    }
    if rows > MAX_ROWS {
        return Err(KernelError::GpuLimit {
            what: "rows",
            value: rows,
            max: MAX_ROWS,
        });
    }
    check_device(gpu, "x", x)?;
    check_device(gpu, "labels", labels)?;
    check_device(gpu, "w", w)?;
    check_device(gpu, "grad", grad)?;
    Ok(rows)
}

/// [`gradient_scaled`] with `alpha = 1`: `grad = sum_i x_iᵀ (softmax(x_i W) - onehot(y_i))`.
///
/// # Errors
/// As [`gradient_scaled`].
pub fn gradient(
    gpu: &Gpu,
    shape: MlrShape,
    x: &CudaSlice<f32>,
    labels: &CudaSlice<u32>,
    w: &CudaSlice<f32>,
    grad: &mut CudaSlice<f32>,
    scratch: &mut MlrGpuScratch,
) -> Result<f64, KernelError> {
    gradient_scaled(gpu, shape, x, labels, w, 1.0, grad, scratch)
}

/// The MLR minibatch gradient on the device, same contract as the CPU
/// [`crate::gradient_scaled`]: `x` is rows×features (rows = `labels.len()`), `w` and
/// `grad` features×classes, all row-major; `grad` is OVERWRITTEN with
/// `alpha * sum_i x_iᵀ (softmax(x_i W) - onehot(y_i))` (a sum over the batch).
///
/// Returns the SUM over the batch of the cross-entropy loss (unscaled), as f64. An
/// empty batch zeroes `grad` and returns 0. Waits once for the loss; the write of
/// `grad` is still queued on [`Gpu::stream`] when this returns.
///
/// # Errors
/// [`KernelError::ZeroDimension`], [`KernelError::LengthMismatch`],
/// [`KernelError::ShapeOverflow`] as on the CPU; [`KernelError::LabelOutOfRange`]
/// (naming the first bad row, found on the device) with `grad` untouched;
/// [`KernelError::GpuLimit`] if `classes > MAX_CLASSES` or `rows > MAX_ROWS`;
/// [`KernelError::Cuda`] if a buffer is on another device or a CUDA call fails;
/// [`KernelError::NvrtcUnavailable`] / [`KernelError::CudaCompile`] on first use if the
/// kernels cannot be compiled.
#[allow(clippy::too_many_arguments)]
pub fn gradient_scaled(
    gpu: &Gpu,
    shape: MlrShape,
    x: &CudaSlice<f32>,
    labels: &CudaSlice<u32>,
    w: &CudaSlice<f32>,
    alpha: f32,
    grad: &mut CudaSlice<f32>,
    scratch: &mut MlrGpuScratch,
) -> Result<f64, KernelError> {
    let rows = validate(gpu, shape, x, labels, w, grad)?;
    let stream = gpu.stream();
    if rows == 0 {
        stream
            .memset_zeros(grad)
            .map_err(driver_err("memset grad"))?;
        return Ok(0.0);
    }
    let gemm = gpu.function(&SOURCE, "harp_mlr_gemm")?;
    let softmax = gpu.function(&SOURCE, "harp_mlr_softmax_xent")?;

    let (features, classes) = (shape.features, shape.classes);
    ensure(gpu, &mut scratch.z, rows * classes)?;
    ensure(gpu, &mut scratch.row_loss, rows)?;
    ensure(gpu, &mut scratch.bad_row, 1)?;
    let (Some(z), Some(row_loss), Some(bad_row)) = (
        scratch.z.as_mut(),
        scratch.row_loss.as_mut(),
        scratch.bad_row.as_mut(),
    ) else {
        return Err(KernelError::Cuda {
            op: "scratch allocation",
            message: "scratch buffer missing after allocation".into(),
        });
    };
    gpu.upload_into(&[NO_BAD_ROW], bad_row)?;

    // 1. Z = X · W (rows × classes). A = X: A(i, k) = x[i * features + k].
    let (m, n, k) = (rows as u64, classes as u64, features as u64);
    let (one, a_rs, a_cs) = (1.0f32, features as u64, 1u64);
    let mut launch = stream.launch_builder(&gemm);
    launch
        .arg(&m)
        .arg(&n)
        .arg(&k)
        .arg(&one)
        .arg(x)
        .arg(&a_rs)
        .arg(&a_cs)
        .arg(w)
        .arg(&mut *z);
    // SAFETY: arguments match harp_mlr_gemm(u64 m, u64 n, u64 k, float alpha, const
    // float* a, u64 a_rs, u64 a_cs, const float* b, float* c). It reads A(i,k) for
    // i < rows, k < features (inside x, checked: rows*features), B = w (features ×
    // classes, checked) and writes c[i*classes + j] for i < rows, j < classes (z holds
    // at least rows*classes).
    unsafe { launch.launch(gemm_config(rows, classes)) }
        .map_err(driver_err("launch harp_mlr_gemm (logits)"))?;

    // 2. Softmax, P - Y, per-row loss, label check.
    let rows64 = rows as u64;
    let mut launch = stream.launch_builder(&softmax);
    launch
        .arg(&rows64)
        .arg(&n)
        .arg(&mut *z)
        .arg(labels)
        .arg(&mut *row_loss)
        .arg(&mut *bad_row);
    // SAFETY: arguments match harp_mlr_softmax_xent(u64 rows, u64 classes, float* z,
    // const unsigned* labels, double* row_loss, unsigned* bad_row). It touches z[..rows*
    // classes], labels[..rows] (labels.len() == rows), row_loss[..rows] and bad_row[0],
    // all within the buffers; a label is used as an index only once checked < classes.
    unsafe { launch.launch(softmax_config(rows)) }
        .map_err(driver_err("launch harp_mlr_softmax_xent"))?;

    // Read back the label check (this waits for both kernels).
    let bad = stream
        .clone_dtoh(&bad_row.slice(0..1))
        .map_err(driver_err("download label check"))?;
    if let Some(&row) = bad.first().filter(|&&r| r != NO_BAD_ROW) {
        let row = row as usize;
        let label = stream
            .clone_dtoh(&labels.slice(row..row + 1))
            .map_err(driver_err("download bad label"))?;
        return Err(KernelError::LabelOutOfRange {
            row,
            label: label.first().copied().unwrap_or(u32::MAX),
            classes,
        });
    }
    let losses = stream
        .clone_dtoh(&row_loss.slice(0..rows))
        .map_err(driver_err("download losses"))?;
    let loss: f64 = losses.iter().sum();

    // 3. grad = alpha · Xᵀ · (P - Y) (features × classes). A = Xᵀ: A(i, k) = x[k * features + i].
    let (m, k) = (features as u64, rows as u64);
    let (a_rs, a_cs) = (1u64, features as u64);
    let mut launch = stream.launch_builder(&gemm);
    launch
        .arg(&m)
        .arg(&n)
        .arg(&k)
        .arg(&alpha)
        .arg(x)
        .arg(&a_rs)
        .arg(&a_cs)
        .arg(&*z)
        .arg(&mut *grad);
    // SAFETY: as launch 1 with A = Xᵀ (reads x[k*features + i], k < rows, i < features),
    // B = z (rows × classes, first rows*classes elements) and C = grad (features ×
    // classes, checked).
    unsafe { launch.launch(gemm_config(features, classes)) }
        .map_err(driver_err("launch harp_mlr_gemm (gradient)"))?;
    Ok(loss)
}

/// Grid for an `m × n` output of `harp_mlr_gemm`. `n <= MAX_CLASSES` is checked by
/// [`validate`], so `ceil(n / TILE) <= 65535`; `ceil(m / TILE)` fits gridDim.x (2³¹ − 1)
/// for every `m` a buffer can hold.
fn gemm_config(m: usize, n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            u32::try_from(m.div_ceil(TILE)).unwrap_or(u32::MAX),
            u32::try_from(n.div_ceil(TILE)).unwrap_or(u32::MAX),
            1,
        ),
        block_dim: (TILE as u32, ROWS_PER_PASS, 1),
        shared_mem_bytes: 0,
    }
}

/// Grid for `harp_mlr_softmax_xent`: 8 warps (rows) per block, grid-stride beyond
/// 65535 blocks.
fn softmax_config(rows: usize) -> LaunchConfig {
    const WARPS_PER_BLOCK: usize = 8;
    let blocks = rows.div_ceil(WARPS_PER_BLOCK).clamp(1, 65_535);
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: ((WARPS_PER_BLOCK * 32) as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}
