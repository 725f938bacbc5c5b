//! CUDA versions of the CNN layer kernels in [`crate::cnn`]: convolution, dense,
//! ReLU, 2×2 max pooling and softmax cross-entropy, forward and backward, on device
//! buffers, with the CPU kernels' layer descriptors, layouts and conventions (NCHW,
//! `y = x·W + b` for dense layers, gradients are sums over the batch and overwrite
//! their outputs).
//!
//! Convolutions run as implicit GEMMs (`kernels/cuda/cnn.cu`): one tiled sgemm whose
//! operand loads gather from the activations, so no lowered matrix is stored; the
//! weight gradient splits its long reduction over blocks and adds with atomics (its
//! summation order, and so its last bits, vary from run to run). Dense layers use the
//! same sgemm with strided operands.
//!
//! Every wrapper validates like its CPU version (shapes, lengths) plus the kernels'
//! index limits ([`KernelError::GpuLimit`]) and that every buffer lives on `gpu`,
//! before launching anything; on error nothing is written. Indices that live on the
//! device (pooling argmax, labels) are checked by a kernel and read back before any
//! output is written, which costs one synchronization. Everything else is queued on
//! [`Gpu::stream`] without waiting.

use cudarc::driver::{CudaFunction, CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};

use super::optim::check_device;
use super::{driver_err, CudaSource, Gpu};
use crate::cnn::{Conv2d, Dense, LayerLens, MaxPool2x2};
use crate::error::{check_len, KernelError};

/// `kernels/cuda/cnn.cu`.
pub const SOURCE: CudaSource = CudaSource {
    name: "cnn.cu",
    code: include_str!("../../cuda/cnn.cu"),
};

/// Output tile rows and columns of the sgemm (`HARP_BM`, `HARP_BN` in cnn.cu).
const TILE: usize = 64;
/// k step of the sgemm (`HARP_BK`).
const TILE_K: usize = 16;
/// Threads per sgemm block (`HARP_GEMM_THREADS`).
const GEMM_THREADS: u32 = 256;
/// Largest GEMM row count: row tiles go on `gridDim.y`, which CUDA caps at 65535.
pub const MAX_ROWS: usize = 65_535 * TILE;
/// Largest index the convolution kernels decompose in 32 bits (e.g. `batch · out_h ·
/// out_w`, `in_channels · kernel_h · kernel_w`).
pub const MAX_INDEX: usize = u32::MAX as usize;
/// Largest padded input side: the convolution kernels compute coordinates in `int`.
pub const MAX_SIDE: usize = i32::MAX as usize / 2;

/// Gradient outputs of a layer with weights, on the device (see
/// [`crate::cnn::LayerGrads`]); all overwritten.
#[derive(Debug)]
pub struct GpuLayerGrads<'a> {
    /// Gradient with respect to the input, or `None` to skip it.
    pub dx: Option<&'a mut CudaSlice<f32>>,
    /// Gradient with respect to the weights.
    pub dw: &'a mut CudaSlice<f32>,
    /// Gradient with respect to the bias.
    pub db: &'a mut CudaSlice<f32>,
}

/// Reusable device buffers for the kernels that read something back (pooling
/// backward, the loss): per-row losses and the check words. They only grow; a
/// buffer from another device is replaced.
#[derive(Debug, Default)]
pub struct CnnGpuScratch {
    row_loss: Option<CudaSlice<f64>>,
    word32: Option<CudaSlice<u32>>,
    word64: Option<CudaSlice<u64>>,
}

impl CnnGpuScratch {
    /// Empty scratch; it grows on first use.
    pub fn new() -> Self {
        Self::default()
    }
}

/// `buf`, grown to at least `len` elements on `gpu` (reallocated, zeroed, if it is
/// smaller or on another device).
fn ensure<'b, T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    gpu: &Gpu,
    buf: &'b mut Option<CudaSlice<T>>,
    len: usize,
) -> Result<&'b mut CudaSlice<T>, KernelError> {
    let fits = buf
        .as_ref()
        .is_some_and(|b| b.len() >= len && b.context() == gpu.context());
    if !fits {
        *buf = None; // free the old buffer first
        *buf = Some(gpu.alloc_zeros::<T>(len.max(1))?);
    }
    buf.as_mut().ok_or(KernelError::Cuda {
        op: "scratch allocation",
        message: "scratch buffer missing after allocation".into(),
    })
}

/// Convolution geometry as the kernels take it (`ConvGeom` in cnn.cu).
#[allow(dead_code)] // the fields are read on the device
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ConvGeom {
    c: u32,
    o: u32,
    h: u32,
    w: u32,
    kh: u32,
    kw: u32,
    ph: u32,
    pw: u32,
    oh: u32,
    ow: u32,
    batch: u32,
    pad: u32,
}

// SAFETY: a #[repr(C)] struct of twelve u32, no padding, matching `ConvGeom` in
// cnn.cu field for field; any bit pattern is valid.
unsafe impl DeviceRepr for ConvGeom {}

fn limit(what: &'static str, value: usize, max: usize) -> Result<(), KernelError> {
    if value > max {
        Err(KernelError::GpuLimit { what, value, max })
    } else {
        Ok(())
    }
}

fn to_u32(value: usize) -> u32 {
    // Callers check `value <= MAX_INDEX` first.
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Validates a convolution for the kernels and builds its geometry.
fn conv_geom(layer: &Conv2d, batch: usize) -> Result<ConvGeom, KernelError> {
    let d = layer.dims(batch)?;
    limit("padded height", d.h + 2 * d.ph, MAX_SIDE)?;
    limit("padded width", d.w + 2 * d.pw, MAX_SIDE)?;
    limit("in_channels * kernel", d.ckk, MAX_INDEX)?;
    limit("out_channels * kernel", d.o * d.kh * d.kw, MAX_INDEX)?;
    limit("input sample", d.x_sample, MAX_INDEX)?;
    limit("output sample", d.y_sample, MAX_INDEX)?;
    let positions = |plane: usize| batch.saturating_mul(plane);
    limit("batch * output plane", positions(d.out_plane), MAX_INDEX)?;
    limit("batch * input plane", positions(d.in_plane), MAX_INDEX)?;
    limit("out_channels", d.o, MAX_ROWS)?;
    limit("in_channels", d.c, MAX_ROWS)?;
    Ok(ConvGeom {
        c: to_u32(d.c),
        o: to_u32(d.o),
        h: to_u32(d.h),
        w: to_u32(d.w),
        kh: to_u32(d.kh),
        kw: to_u32(d.kw),
        ph: to_u32(d.ph),
        pw: to_u32(d.pw),
        oh: to_u32(d.oh),
        ow: to_u32(d.ow),
        batch: to_u32(batch),
        pad: 0,
    })
}

/// Grid for an `m × n` sgemm output, `z` blocks deep.
fn gemm_config(m: usize, n: usize, z: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (
            u32::try_from(n.div_ceil(TILE)).unwrap_or(u32::MAX),
            u32::try_from(m.div_ceil(TILE)).unwrap_or(u32::MAX),
            u32::try_from(z).unwrap_or(u32::MAX),
        ),
        block_dim: (GEMM_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Forward convolution on the device: `y = conv(x, w) + b`, same contract and
/// layouts as [`crate::conv2d_forward`].
///
/// # Errors
/// As the CPU version; [`KernelError::GpuLimit`] beyond the kernels' index limits;
/// [`KernelError::Cuda`] if a buffer is on another device or a CUDA call fails;
/// [`KernelError::NvrtcUnavailable`] / [`KernelError::CudaCompile`] on first use if
/// the kernels cannot be compiled.
pub fn conv2d_forward(
    gpu: &Gpu,
    layer: &Conv2d,
    batch: usize,
    x: &CudaSlice<f32>,
    w: &CudaSlice<f32>,
    b: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    d.lens().check_x_w_b(x.len(), w.len(), b.len())?;
    check_len("y", d.y_len, y.len())?;
    let g = conv_geom(layer, batch)?;
    for (what, buf) in [("x", x), ("w", w), ("b", b)] {
        check_device(gpu, what, buf)?;
    }
    check_device(gpu, "y", y)?;
    if batch == 0 {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_cnn_conv_fwd")?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(&g).arg(x).arg(w).arg(b).arg(&mut *y);
    // SAFETY: arguments match harp_cnn_conv_fwd(ConvGeom, const float* x, const float*
    // w, const float* bias, float* y). The kernel reads x at (n, c, iy, ix) inside the
    // checked batch × C × H × W, w at o·CKK + q < O·CKK, bias[o < O], and writes y at
    // (n, o, p) inside batch × O × P, all lengths checked above; its 32-bit index
    // arithmetic stays within the limits `conv_geom` checked.
    unsafe { launch.launch(gemm_config(d.o, batch * d.out_plane, 1)) }
        .map_err(driver_err("launch harp_cnn_conv_fwd"))?;
    Ok(())
}

/// The checks every layer's backward runs before it writes: each buffer's length and that
/// each lives on `gpu`.
fn check_backward_buffers(
    gpu: &Gpu,
    lens: LayerLens,
    [x, w, dy]: [&CudaSlice<f32>; 3],
    grads: &GpuLayerGrads<'_>,
) -> Result<(), KernelError> {
    lens.check_backward(
        [x.len(), w.len(), dy.len()],
        grads.dx.as_deref().map(CudaSlice::len),
        [grads.dw.len(), grads.db.len()],
    )?;
    for (what, buf) in [("x", x), ("w", w), ("dy", dy)] {
        check_device(gpu, what, buf)?;
    }
    if let Some(dx) = grads.dx.as_deref() {
        check_device(gpu, "dx", dx)?;
    }
    check_device(gpu, "dw", grads.dw)?;
    check_device(gpu, "db", grads.db)
}

/// Backward convolution on the device, same contract as [`crate::conv2d_backward`]:
/// overwrites `grads.dw`, `grads.db` and (when present) `grads.dx`.
///
/// # Errors
/// As [`conv2d_forward`].
pub fn conv2d_backward(
    gpu: &Gpu,
    layer: &Conv2d,
    batch: usize,
    x: &CudaSlice<f32>,
    w: &CudaSlice<f32>,
    dy: &CudaSlice<f32>,
    grads: GpuLayerGrads<'_>,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    check_backward_buffers(gpu, d.lens(), [x, w, dy], &grads)?;
    let g = conv_geom(layer, batch)?;
    let GpuLayerGrads { dx, dw, db } = grads;

    let stream = gpu.stream();
    stream.memset_zeros(dw).map_err(driver_err("memset dw"))?;
    if batch == 0 {
        stream.memset_zeros(db).map_err(driver_err("memset db"))?;
        if let Some(dx) = dx {
            stream.memset_zeros(dx).map_err(driver_err("memset dx"))?;
        }
        return Ok(());
    }
    let f_dw = gpu.function(&SOURCE, "harp_cnn_conv_dw")?;
    let f_db = gpu.function(&SOURCE, "harp_cnn_bias_grad")?;
    let f_dx = gpu.function(&SOURCE, "harp_cnn_conv_dx")?;

    // dw: split the batch·P reduction so the small O × CKK output still fills the GPU.
    let k_total = batch * d.out_plane;
    let tiles = d.o.div_ceil(TILE) * d.ckk.div_ceil(TILE);
    let wanted = (4 * gpu.sm_count() as usize).div_ceil(tiles.max(1));
    let splits = wanted.clamp(1, k_total.div_ceil(TILE_K));
    let k_chunk = k_total
        .div_ceil(splits)
        .div_ceil(TILE_K)
        .max(k_total.div_ceil(65_535).div_ceil(TILE_K))
        * TILE_K;
    let splits = k_total.div_ceil(k_chunk);
    let k_chunk64 = k_chunk as u64;
    let mut launch = stream.launch_builder(&f_dw);
    launch.arg(&g).arg(x).arg(dy).arg(&mut *dw).arg(&k_chunk64);
    // SAFETY: arguments match harp_cnn_conv_dw(ConvGeom, const float* x, const float*
    // dy, float* dw, u64 k_chunk). It reads x and dy inside their checked lengths (as
    // the forward kernel) and adds into dw[o·CKK + q] for o < O, q < CKK (checked);
    // blocks whose k range starts past batch·P return at once.
    unsafe { launch.launch(gemm_config(d.o, d.ckk, splits)) }
        .map_err(driver_err("launch harp_cnn_conv_dw"))?;

    bias_grad(gpu, &f_db, batch, d.o, d.out_plane, dy, db)?;

    if let Some(dx) = dx {
        let mut launch = stream.launch_builder(&f_dx);
        launch.arg(&g).arg(w).arg(dy).arg(&mut *dx);
        // SAFETY: arguments match harp_cnn_conv_dx(ConvGeom, const float* w, const
        // float* dy, float* dx). It reads w[(o·C + c)·KK + r] < O·CKK, dy at (n, o, oy,
        // ox) inside batch × O × OH × OW (only for in-range oy, ox), and writes every
        // dx element (n, c, iy, ix) of the checked batch × C × H × W exactly once.
        unsafe { launch.launch(gemm_config(d.c, batch * d.in_plane, 1)) }
            .map_err(driver_err("launch harp_cnn_conv_dx"))?;
    }
    Ok(())
}

/// `db[j] = Σ_{r < rows, p < plane} dy[(r·cols + j)·plane + p]`.
fn bias_grad(
    gpu: &Gpu,
    f: &CudaFunction,
    rows: usize,
    cols: usize,
    plane: usize,
    dy: &CudaSlice<f32>,
    db: &mut CudaSlice<f32>,
) -> Result<(), KernelError> {
    let (rows64, cols64, plane64) = (rows as u64, cols as u64, plane as u64);
    let mut launch = gpu.stream().launch_builder(f);
    launch
        .arg(&rows64)
        .arg(&cols64)
        .arg(&plane64)
        .arg(dy)
        .arg(&mut *db);
    let config = LaunchConfig {
        grid_dim: (u32::try_from(cols.clamp(1, 65_535)).unwrap_or(1), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: arguments match harp_cnn_bias_grad(u64 rows, u64 cols, u64 plane, const
    // float* dy, float* db) with blockDim 256 as it requires; callers pass dy of length
    // rows·cols·plane and db of length cols (checked), the only elements it touches.
    unsafe { launch.launch(config) }.map_err(driver_err("launch harp_cnn_bias_grad"))?;
    Ok(())
}

/// One strided operand of the dense sgemm: `(buffer, row stride, column stride)`.
type Operand<'a> = (&'a CudaSlice<f32>, usize, usize);

/// `c (m × n, row stride ldc) = a · b (+ bias) (+ beta · c)` on the device.
#[allow(clippy::too_many_arguments)]
fn gemm(
    gpu: &Gpu,
    f: &CudaFunction,
    (m, n, k): (usize, usize, usize),
    a: Operand<'_>,
    b: Operand<'_>,
    c: &mut CudaSlice<f32>,
    bias: Option<&CudaSlice<f32>>,
    beta: f32,
) -> Result<(), KernelError> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    let (m64, n64, k64) = (m as u64, n as u64, k as u64);
    let (a_rs, a_cs, b_rs, b_cs) = (a.1 as u64, a.2 as u64, b.1 as u64, b.2 as u64);
    let has_bias = i32::from(bias.is_some());
    // A null pointer for the unused bias: the kernel never reads it then.
    let null = 0u64;
    let mut launch = gpu.stream().launch_builder(f);
    launch
        .arg(&m64)
        .arg(&n64)
        .arg(&k64)
        .arg(a.0)
        .arg(&a_rs)
        .arg(&a_cs)
        .arg(b.0)
        .arg(&b_rs)
        .arg(&b_cs)
        .arg(&mut *c)
        .arg(&n64);
    match bias {
        Some(bias) => launch.arg(bias),
        None => launch.arg(&null),
    };
    launch.arg(&has_bias).arg(&beta);
    // SAFETY: arguments match harp_cnn_gemm(u64 m, u64 n, u64 k, const float* a, u64
    // a_rs, u64 a_cs, const float* b, u64 b_rs, u64 b_cs, float* c, u64 ldc, const
    // float* bias, int has_bias, float beta) (a u64 0 is a null pointer, read only
    // when has_bias = 1). Callers pass strides under which every A(i, k), B(k, j) with
    // i < m, k < k, j < n lies inside its buffer and C is m × n row-major with ldc = n
    // inside c; bias, when present, holds n values.
    unsafe { launch.launch(gemm_config(m, n, 1)) }.map_err(driver_err("launch harp_cnn_gemm"))?;
    Ok(())
}

/// Validates a dense layer for the kernels.
fn dense_limits(layer: &Dense, batch: usize) -> Result<(), KernelError> {
    limit("batch", batch, MAX_ROWS)?;
    limit("inputs", layer.inputs, MAX_ROWS)
}

/// Dense forward on the device: `y = x·W + b`, same contract and layouts as
/// [`crate::dense_forward`].
///
/// # Errors
/// As [`conv2d_forward`].
pub fn dense_forward(
    gpu: &Gpu,
    layer: &Dense,
    batch: usize,
    x: &CudaSlice<f32>,
    w: &CudaSlice<f32>,
    b: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    d.lens().check_x_w_b(x.len(), w.len(), b.len())?;
    check_len("y", d.y_len, y.len())?;
    dense_limits(layer, batch)?;
    for (what, buf) in [("x", x), ("w", w), ("b", b)] {
        check_device(gpu, what, buf)?;
    }
    check_device(gpu, "y", y)?;
    if batch == 0 {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_cnn_gemm")?;
    // y (batch × o) = x (batch × i) · W (i × o) + b
    gemm(
        gpu,
        &f,
        (batch, d.o, d.i),
        (x, d.i, 1),
        (w, d.o, 1),
        y,
        Some(b),
        0.0,
    )
}

/// Dense backward on the device, same contract as [`crate::dense_backward`]:
/// `dw = xᵀ·dy`, `db` = column sums of `dy`, `dx = dy·Wᵀ` (when present).
///
/// # Errors
/// As [`conv2d_forward`].
pub fn dense_backward(
    gpu: &Gpu,
    layer: &Dense,
    batch: usize,
    x: &CudaSlice<f32>,
    w: &CudaSlice<f32>,
    dy: &CudaSlice<f32>,
    grads: GpuLayerGrads<'_>,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    check_backward_buffers(gpu, d.lens(), [x, w, dy], &grads)?;
    dense_limits(layer, batch)?;
    let GpuLayerGrads { dx, dw, db } = grads;
    let stream = gpu.stream();
    if batch == 0 {
        stream.memset_zeros(dw).map_err(driver_err("memset dw"))?;
        stream.memset_zeros(db).map_err(driver_err("memset db"))?;
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_cnn_gemm")?;
    let f_db = gpu.function(&SOURCE, "harp_cnn_bias_grad")?;
    // dw (i × o) = xᵀ (i × batch) · dy (batch × o)
    gemm(
        gpu,
        &f,
        (d.i, d.o, batch),
        (x, 1, d.i),
        (dy, d.o, 1),
        dw,
        None,
        0.0,
    )?;
    bias_grad(gpu, &f_db, batch, d.o, 1, dy, db)?;
    if let Some(dx) = dx {
        // dx (batch × i) = dy (batch × o) · Wᵀ (o × i)
        gemm(
            gpu,
            &f,
            (batch, d.i, d.o),
            (dy, d.o, 1),
            (w, 1, d.o),
            dx,
            None,
            0.0,
        )?;
    }
    Ok(())
}

/// The element-wise kernel `name`, its grid-stride launch geometry and `n` as the
/// kernels take it, or `None` when there is nothing to do.
fn elementwise(
    gpu: &Gpu,
    name: &'static str,
    n: usize,
) -> Result<Option<(CudaFunction, LaunchConfig, u64)>, KernelError> {
    if n == 0 {
        return Ok(None);
    }
    Ok(Some((
        gpu.function(&SOURCE, name)?,
        gpu.grid_stride_config(n),
        n as u64,
    )))
}

/// `y = max(x, 0)` on the device (NaN passes through), as [`crate::relu_forward`].
///
/// # Errors
/// [`KernelError::LengthMismatch`] if the lengths differ; [`KernelError::Cuda`] as
/// [`conv2d_forward`].
pub fn relu_forward(
    gpu: &Gpu,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
) -> Result<(), KernelError> {
    check_len("y", x.len(), y.len())?;
    check_device(gpu, "x", x)?;
    check_device(gpu, "y", y)?;
    let Some((f, config, n)) = elementwise(gpu, "harp_cnn_relu_fwd", x.len())? else {
        return Ok(());
    };
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(x).arg(&mut *y).arg(&n);
    // SAFETY: arguments match harp_cnn_relu_fwd(const float* x, float* y, u64 n); both
    // buffers hold n floats (checked) and the kernel touches indices < n only.
    unsafe { launch.launch(config) }.map_err(driver_err("launch harp_cnn_relu_fwd"))?;
    Ok(())
}

/// `x = max(x, 0)` in place on the device.
///
/// # Errors
/// [`KernelError::Cuda`] as [`conv2d_forward`].
pub fn relu_in_place(gpu: &Gpu, x: &mut CudaSlice<f32>) -> Result<(), KernelError> {
    check_device(gpu, "x", x)?;
    let Some((f, config, n)) = elementwise(gpu, "harp_cnn_relu_inplace", x.len())? else {
        return Ok(());
    };
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(&mut *x).arg(&n);
    // SAFETY: arguments match harp_cnn_relu_inplace(float* x, u64 n); x holds n floats.
    unsafe { launch.launch(config) }.map_err(driver_err("launch harp_cnn_relu_inplace"))?;
    Ok(())
}

/// `dx = dy` where `y > 0`, else 0, on the device, as [`crate::relu_backward`].
///
/// # Errors
/// [`KernelError::LengthMismatch`] if the lengths differ; [`KernelError::Cuda`] as
/// [`conv2d_forward`].
pub fn relu_backward(
    gpu: &Gpu,
    y: &CudaSlice<f32>,
    dy: &CudaSlice<f32>,
    dx: &mut CudaSlice<f32>,
) -> Result<(), KernelError> {
    check_len("dy", y.len(), dy.len())?;
    check_len("dx", y.len(), dx.len())?;
    check_device(gpu, "y", y)?;
    check_device(gpu, "dy", dy)?;
    check_device(gpu, "dx", dx)?;
    let Some((f, config, n)) = elementwise(gpu, "harp_cnn_relu_bwd", y.len())? else {
        return Ok(());
    };
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(y).arg(dy).arg(&mut *dx).arg(&n);
    // SAFETY: arguments match harp_cnn_relu_bwd(const float* y, const float* dy, float*
    // dx, u64 n); all three buffers hold n floats (checked).
    unsafe { launch.launch(config) }.map_err(driver_err("launch harp_cnn_relu_bwd"))?;
    Ok(())
}

/// [`relu_backward`] in place: `grad` holds `dy` on entry and `dx` on return.
///
/// # Errors
/// As [`relu_backward`].
pub fn relu_backward_in_place(
    gpu: &Gpu,
    y: &CudaSlice<f32>,
    grad: &mut CudaSlice<f32>,
) -> Result<(), KernelError> {
    check_len("grad", y.len(), grad.len())?;
    check_device(gpu, "y", y)?;
    check_device(gpu, "grad", grad)?;
    let Some((f, config, n)) = elementwise(gpu, "harp_cnn_relu_bwd_inplace", y.len())? else {
        return Ok(());
    };
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(y).arg(&mut *grad).arg(&n);
    // SAFETY: arguments match harp_cnn_relu_bwd_inplace(const float* y, float* g, u64
    // n); both buffers hold n floats (checked).
    unsafe { launch.launch(config) }.map_err(driver_err("launch harp_cnn_relu_bwd_inplace"))?;
    Ok(())
}

/// Launch geometry and the common leading arguments of the pooling kernels.
fn pool_args(layer: &MaxPool2x2, batch: usize) -> Result<(u64, u32, u32, usize), KernelError> {
    let d = layer.dims(batch)?;
    // `dims` checked in_h · in_w <= u32::MAX + 1, so both sides fit in u32.
    let (h, w) = (to_u32(layer.in_h), to_u32(layer.in_w));
    Ok((d.planes as u64, h, w, d.y_len))
}

/// 2×2 max pooling forward on the device, as [`crate::maxpool2x2_forward`] (same
/// tie rule, same plane-local argmax).
///
/// # Errors
/// As the CPU version; [`KernelError::Cuda`] as [`conv2d_forward`].
pub fn maxpool2x2_forward(
    gpu: &Gpu,
    layer: &MaxPool2x2,
    batch: usize,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
    argmax: &mut CudaSlice<u32>,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    check_len("x", d.x_len, x.len())?;
    check_len("y", d.y_len, y.len())?;
    check_len("argmax", d.y_len, argmax.len())?;
    check_device(gpu, "x", x)?;
    check_device(gpu, "y", y)?;
    check_device(gpu, "argmax", argmax)?;
    let (planes, h, w, outputs) = pool_args(layer, batch)?;
    if outputs == 0 {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_cnn_maxpool_fwd")?;
    let mut launch = gpu.stream().launch_builder(&f);
    launch
        .arg(&planes)
        .arg(&h)
        .arg(&w)
        .arg(x)
        .arg(&mut *y)
        .arg(&mut *argmax);
    // SAFETY: arguments match harp_cnn_maxpool_fwd(u64 planes, u32 h, u32 w, const
    // float* x, float* y, u32* argmax); it reads x inside planes × h × w and writes
    // y[k], argmax[k] for k < planes × (h/2) × (w/2), all lengths checked above.
    unsafe { launch.launch(gpu.grid_stride_config(outputs)) }
        .map_err(driver_err("launch harp_cnn_maxpool_fwd"))?;
    Ok(())
}

/// 2×2 max pooling backward on the device, as [`crate::maxpool2x2_backward`]. The
/// argmax indices are checked on the device first and the check is read back (one
/// synchronization), so a bad index is reported before `dx` is written.
///
/// # Errors
/// As the CPU version ([`KernelError::IndexOutOfRange`] naming the first bad
/// position); [`KernelError::Cuda`] as [`conv2d_forward`].
pub fn maxpool2x2_backward(
    gpu: &Gpu,
    layer: &MaxPool2x2,
    batch: usize,
    argmax: &CudaSlice<u32>,
    dy: &CudaSlice<f32>,
    dx: &mut CudaSlice<f32>,
    scratch: &mut CnnGpuScratch,
) -> Result<(), KernelError> {
    let d = layer.dims(batch)?;
    check_len("argmax", d.y_len, argmax.len())?;
    check_len("dy", d.y_len, dy.len())?;
    check_len("dx", d.x_len, dx.len())?;
    check_device(gpu, "argmax", argmax)?;
    check_device(gpu, "dy", dy)?;
    check_device(gpu, "dx", dx)?;
    let (planes, h, w, outputs) = pool_args(layer, batch)?;
    if outputs == 0 {
        return Ok(());
    }
    let stream = gpu.stream();
    let check = gpu.function(&SOURCE, "harp_cnn_maxpool_check")?;
    let scatter = gpu.function(&SOURCE, "harp_cnn_maxpool_bwd")?;
    let bad = ensure(gpu, &mut scratch.word64, 1)?;
    gpu.upload_into(&[u64::MAX], bad)?;
    let mut launch = stream.launch_builder(&check);
    launch
        .arg(&planes)
        .arg(&h)
        .arg(&w)
        .arg(argmax)
        .arg(&mut *bad);
    // SAFETY: arguments match harp_cnn_maxpool_check(u64 planes, u32 h, u32 w, const
    // u32* argmax, u64* bad); it reads argmax[k] for k < planes·(h/2)·(w/2) (= its
    // checked length) and atomically updates bad[0].
    unsafe { launch.launch(gpu.grid_stride_config(outputs)) }
        .map_err(driver_err("launch harp_cnn_maxpool_check"))?;
    let first_bad = stream
        .clone_dtoh(&bad.slice(0..1))
        .map_err(driver_err("download argmax check"))?;
    if let Some(&k) = first_bad.first().filter(|&&k| k != u64::MAX) {
        let k = usize::try_from(k).unwrap_or(usize::MAX).min(outputs - 1);
        let index = stream
            .clone_dtoh(&argmax.slice(k..k + 1))
            .map_err(driver_err("download bad argmax"))?;
        return Err(KernelError::IndexOutOfRange {
            what: "argmax",
            position: k,
            index: u64::from(index.first().copied().unwrap_or(u32::MAX)),
        });
    }
    stream.memset_zeros(dx).map_err(driver_err("memset dx"))?;
    let mut launch = stream.launch_builder(&scatter);
    launch
        .arg(&planes)
        .arg(&h)
        .arg(&w)
        .arg(argmax)
        .arg(dy)
        .arg(&mut *dx);
    // SAFETY: arguments match harp_cnn_maxpool_bwd(u64 planes, u32 h, u32 w, const
    // u32* argmax, const float* dy, float* dx); every argmax was just checked to lie
    // in its own window inside its plane, so each write dx[plane·h·w + argmax[k]] is
    // inside the checked planes × h × w and no two outputs write the same element.
    unsafe { launch.launch(gpu.grid_stride_config(outputs)) }
        .map_err(driver_err("launch harp_cnn_maxpool_bwd"))?;
    Ok(())
}

/// Checks `classes` and the logits length; returns the batch (`labels.len()`).
fn loss_shape(
    gpu: &Gpu,
    classes: usize,
    logits: &CudaSlice<f32>,
    labels: &CudaSlice<u32>,
) -> Result<usize, KernelError> {
    if classes == 0 {
        return Err(KernelError::ZeroDimension { what: "classes" });
    }
    let rows = labels.len();
    let len = rows
        .checked_mul(classes)
        .ok_or(KernelError::ShapeOverflow { what: "logits" })?;
    check_len("logits", len, logits.len())?;
    limit("rows", rows, u32::MAX as usize - 1)?;
    check_device(gpu, "logits", logits)?;
    check_device(gpu, "labels", labels)?;
    Ok(rows)
}

/// Checks every label on the device (one synchronization).
fn check_labels(
    gpu: &Gpu,
    classes: usize,
    labels: &CudaSlice<u32>,
    scratch: &mut CnnGpuScratch,
) -> Result<(), KernelError> {
    let rows = labels.len();
    let stream = gpu.stream();
    let f = gpu.function(&SOURCE, "harp_cnn_check_labels")?;
    let bad = ensure(gpu, &mut scratch.word32, 1)?;
    gpu.upload_into(&[u32::MAX], bad)?;
    let (rows64, classes64) = (rows as u64, classes as u64);
    let mut launch = stream.launch_builder(&f);
    launch
        .arg(&rows64)
        .arg(&classes64)
        .arg(labels)
        .arg(&mut *bad);
    // SAFETY: arguments match harp_cnn_check_labels(u64 rows, u64 classes, const u32*
    // labels, u32* bad_row); it reads labels[..rows] (its length) and updates bad[0].
    unsafe { launch.launch(gpu.grid_stride_config(rows)) }
        .map_err(driver_err("launch harp_cnn_check_labels"))?;
    let first_bad = stream
        .clone_dtoh(&bad.slice(0..1))
        .map_err(driver_err("download label check"))?;
    if let Some(&row) = first_bad.first().filter(|&&r| r != u32::MAX) {
        let row = (row as usize).min(rows.saturating_sub(1));
        let label = stream
            .clone_dtoh(&labels.slice(row..row + 1))
            .map_err(driver_err("download bad label"))?;
        return Err(KernelError::LabelOutOfRange {
            row,
            label: label.first().copied().unwrap_or(u32::MAX),
            classes,
        });
    }
    Ok(())
}

/// Launches `harp_cnn_softmax_xent` and sums the per-row losses on the host
/// (waits). `dz` is written, or with `correct` (evaluation) only counted.
#[allow(clippy::too_many_arguments)]
fn softmax_launch(
    gpu: &Gpu,
    classes: usize,
    logits: &CudaSlice<f32>,
    labels: &CudaSlice<u32>,
    scale: f32,
    dz: Option<&mut CudaSlice<f32>>,
    scratch: &mut CnnGpuScratch,
) -> Result<(f64, usize), KernelError> {
    let rows = labels.len();
    let stream = gpu.stream();
    let f = gpu.function(&SOURCE, "harp_cnn_softmax_xent")?;
    let counting = dz.is_none();
    if counting {
        let count = ensure(gpu, &mut scratch.word32, 1)?;
        gpu.upload_into(&[0u32], count)?;
    }
    let CnnGpuScratch {
        row_loss, word32, ..
    } = scratch;
    let row_loss = ensure(gpu, row_loss, rows)?;
    let (rows64, classes64, null) = (rows as u64, classes as u64, 0u64);
    let mut launch = stream.launch_builder(&f);
    launch
        .arg(&rows64)
        .arg(&classes64)
        .arg(logits)
        .arg(labels)
        .arg(&scale);
    match dz {
        Some(dz) => launch.arg(dz),
        None => launch.arg(&null),
    };
    launch.arg(&mut *row_loss);
    let count = match word32.as_mut() {
        Some(count) if counting => Some(count),
        _ => None,
    };
    match count {
        Some(count) => launch.arg(count),
        None => launch.arg(&null),
    };
    const WARPS_PER_BLOCK: usize = 8;
    let config = LaunchConfig {
        grid_dim: (
            u32::try_from(rows.div_ceil(WARPS_PER_BLOCK).clamp(1, 65_535)).unwrap_or(1),
            1,
            1,
        ),
        block_dim: ((WARPS_PER_BLOCK * 32) as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: arguments match harp_cnn_softmax_xent(u64 rows, u64 classes, const
    // float* z, const u32* labels, float scale, float* dz, double* row_loss, u32*
    // correct) (a u64 0 is a null pointer: dz is null exactly when correct is not, and
    // the kernel writes only the non-null one). It reads z[..rows·classes] (checked)
    // and labels[..rows], every label already checked < classes; writes dz[..rows·
    // classes] (checked by the caller), row_loss[..rows] (allocated) and correct[0].
    unsafe { launch.launch(config) }.map_err(driver_err("launch harp_cnn_softmax_xent"))?;
    let losses = stream
        .clone_dtoh(&row_loss.slice(0..rows))
        .map_err(driver_err("download losses"))?;
    let correct = match (counting, word32.as_ref()) {
        (true, Some(count)) => stream
            .clone_dtoh(&count.slice(0..1))
            .map_err(driver_err("download correct count"))?
            .first()
            .copied()
            .unwrap_or(0) as usize,
        _ => 0,
    };
    Ok((losses.iter().sum(), correct))
}

/// [`softmax_xent_scaled`] with `scale = 1`.
///
/// # Errors
/// As [`softmax_xent_scaled`].
pub fn softmax_xent(
    gpu: &Gpu,
    classes: usize,
    logits: &CudaSlice<f32>,
    labels: &CudaSlice<u32>,
    dlogits: &mut CudaSlice<f32>,
    scratch: &mut CnnGpuScratch,
) -> Result<f64, KernelError> {
    softmax_xent_scaled(gpu, classes, logits, labels, 1.0, dlogits, scratch)
}

/// Softmax cross-entropy on the device, as [`crate::softmax_xent_scaled`]: overwrites
/// `dlogits` with `scale · (softmax − onehot)` and returns the summed (unscaled) loss.
/// Labels are checked on the device first (one synchronization) and the losses read
/// back (a second one).
///
/// # Errors
/// As the CPU version ([`KernelError::LabelOutOfRange`] with `dlogits` untouched);
/// [`KernelError::GpuLimit`] for more than `u32::MAX − 1` rows; [`KernelError::Cuda`]
/// as [`conv2d_forward`].
pub fn softmax_xent_scaled(
    gpu: &Gpu,
    classes: usize,
    logits: &CudaSlice<f32>,
    labels: &CudaSlice<u32>,
    scale: f32,
    dlogits: &mut CudaSlice<f32>,
    scratch: &mut CnnGpuScratch,
) -> Result<f64, KernelError> {
    let rows = loss_shape(gpu, classes, logits, labels)?;
    check_len("dlogits", logits.len(), dlogits.len())?;
    check_device(gpu, "dlogits", dlogits)?;
    if rows == 0 {
        return Ok(0.0);
    }
    check_labels(gpu, classes, labels, scratch)?;
    let (loss, _) = softmax_launch(gpu, classes, logits, labels, scale, Some(dlogits), scratch)?;
    Ok(loss)
}

/// Evaluation on the device, as [`crate::softmax_xent_evaluate`]: (rows whose first
/// argmax logit is the label, summed loss).
///
/// # Errors
/// As [`softmax_xent_scaled`] (without `dlogits`).
pub fn softmax_xent_evaluate(
    gpu: &Gpu,
    classes: usize,
    logits: &CudaSlice<f32>,
    labels: &CudaSlice<u32>,
    scratch: &mut CnnGpuScratch,
) -> Result<(usize, f64), KernelError> {
    let rows = loss_shape(gpu, classes, logits, labels)?;
    if rows == 0 {
        return Ok((0, 0.0));
    }
    check_labels(gpu, classes, labels, scratch)?;
    let (loss, correct) = softmax_launch(gpu, classes, logits, labels, 1.0, None, scratch)?;
    Ok((correct, loss))
}
