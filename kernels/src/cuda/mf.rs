//! CUDA versions of the matrix-factorization kernels in [`crate::mf`]: SGD over a
//! batch of ratings and the ALS half-step, on device buffers (`kernels/cuda/mf.cu`).
//!
//! * [`sgd_step`]: one warp per rating, Hogwild-style: ratings that share a user or
//!   item row race, so the result equals the sequential CPU pass only for batches
//!   without repeated users or items (then within f32 rounding of the dot product);
//! * [`als_half_step`]: one thread block per CSR row; the packed normal matrix, the
//!   right-hand side and a 16-rating tile of factors live in shared memory
//!   (`(k(k+1)/2 + 17k + 16) · 4` bytes, 41.8 KiB at the largest supported rank, 128);
//!   right-looking Cholesky in f32. Rows are solved into a scratch buffer that is
//!   copied to `out` only when every factorization succeeded.
//!
//! The wrappers validate lengths and hyperparameters on the host and ids, offsets and
//! values with a check kernel on the device (read back before anything is written), so
//! they return the CPU version's errors and write nothing on error.

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};

use super::lda::{first_bad, value_at};
use super::optim::check_device;
use super::{driver_err, CudaSource, Gpu};
use crate::error::{check_len, KernelError};
use crate::mf::Sgd;

/// `kernels/cuda/mf.cu`.
pub const SOURCE: CudaSource = CudaSource {
    name: "mf.cu",
    code: include_str!("../../cuda/mf.cu"),
};

/// Largest rank [`als_half_step`] supports (its shared-memory system must fit in 48 KiB).
pub const ALS_MAX_RANK: usize = 128;
/// Ratings per shared-memory tile of the ALS kernel (`HARP_ALS_TILE` in `mf.cu`).
const ALS_TILE: usize = 16;
/// Threads per ALS block.
const ALS_THREADS: u32 = 128;

/// Ratings in coordinate form on the device (see [`crate::mf::Ratings`]).
#[derive(Clone, Copy, Debug)]
pub struct DeviceRatings<'a> {
    /// User id (row of `p`) of each rating.
    pub users: &'a CudaSlice<u32>,
    /// Item id (row of `q`) of each rating.
    pub items: &'a CudaSlice<u32>,
    /// The rating values.
    pub values: &'a CudaSlice<f32>,
}

/// A CSR rating structure on the device (see [`crate::mf::Csr`]).
#[derive(Clone, Copy, Debug)]
pub struct DeviceCsr<'a> {
    /// `rows + 1` offsets into `cols` / `values`.
    pub offsets: &'a CudaSlice<u32>,
    /// Column id of each entry.
    pub cols: &'a CudaSlice<u32>,
    /// Rating of each entry.
    pub values: &'a CudaSlice<f32>,
}

/// Rows of a `len`-long factor matrix of rank `k` (the CPU's `factor_rows`).
fn factor_rows(what: &'static str, len: usize, k: usize) -> Result<usize, KernelError> {
    if k == 0 {
        return Err(KernelError::ZeroDimension { what: "rank" });
    }
    let rows = len / k;
    check_len(what, rows * k, len)?;
    Ok(rows)
}

/// [`crate::mf::sgd_step`] on the device (Hogwild; see the [module docs](self)).
///
/// # Errors
/// As the CPU version (same variants and first bad position), plus
/// [`KernelError::Cuda`] if a buffer is on another device or a launch fails, and
/// [`KernelError::NvrtcUnavailable`] / [`KernelError::CudaCompile`] on first use.
/// On error `p` and `q` are untouched.
pub fn sgd_step(
    gpu: &Gpu,
    rank: usize,
    sgd: Sgd,
    ratings: DeviceRatings<'_>,
    p: &mut CudaSlice<f32>,
    q: &mut CudaSlice<f32>,
) -> Result<(), KernelError> {
    sgd.validate()?;
    let users = factor_rows("p", p.len(), rank)?;
    let items = factor_rows("q", q.len(), rank)?;
    let n = ratings.values.len();
    check_len("users", n, ratings.users.len())?;
    check_len("items", n, ratings.items.len())?;
    let k = u32::try_from(rank).map_err(|_| KernelError::GpuLimit {
        what: "rank",
        value: rank,
        max: u32::MAX as usize,
    })?;
    for (what, buf) in [("users", ratings.users), ("items", ratings.items)] {
        check_device(gpu, what, buf)?;
    }
    check_device(gpu, "values", ratings.values)?;
    check_device(gpu, "p", p)?;
    check_device(gpu, "q", q)?;
    if n == 0 {
        return Ok(());
    }
    let check = gpu.function(&SOURCE, "harp_mf_check_ratings")?;
    let bad = first_bad(gpu, |flag| {
        let (n64, nu, ni) = (n as u64, users as u64, items as u64);
        let mut launch = gpu.stream().launch_builder(&check);
        launch
            .arg(ratings.users)
            .arg(ratings.items)
            .arg(ratings.values)
            .arg(&n64)
            .arg(&nu)
            .arg(&ni)
            .arg(&mut *flag);
        // SAFETY: arguments match (const u32*, const u32*, const float*, u64, u64, u64,
        // u64*); the three rating buffers hold n elements.
        unsafe { launch.launch(gpu.grid_stride_config(n)) }
            .map_err(driver_err("launch harp_mf_check_ratings"))?;
        Ok(())
    })?;
    if let Some((kind, position)) = bad {
        return Err(match kind {
            0 => KernelError::IndexOutOfRange {
                what: "users",
                position,
                index: value_at(gpu, ratings.users, position)?,
            },
            1 => KernelError::IndexOutOfRange {
                what: "items",
                position,
                index: value_at(gpu, ratings.items, position)?,
            },
            _ => KernelError::InvalidValue {
                what: "values",
                position,
            },
        });
    }
    let f = gpu.function(&SOURCE, "harp_mf_sgd")?;
    let n64 = n as u64;
    let (lr, lambda) = (sgd.lr, sgd.lambda);
    let mut launch = gpu.stream().launch_builder(&f);
    launch
        .arg(ratings.users)
        .arg(ratings.items)
        .arg(ratings.values)
        .arg(&n64)
        .arg(&k)
        .arg(&lr)
        .arg(&lambda)
        .arg(&mut *p)
        .arg(&mut *q);
    // SAFETY: arguments match (const u32*, const u32*, const float*, u64, u32, float,
    // float, float*, float*); every user id < p rows and item id < q rows was checked on
    // the device, so rows u*k..u*k+k and i*k..i*k+k are inside p and q.
    unsafe { launch.launch(gpu.grid_stride_config(n.saturating_mul(32))) }
        .map_err(driver_err("launch harp_mf_sgd"))?;
    Ok(())
}

/// [`crate::mf::als_half_step`] on the device, for `rank <= 128`.
///
/// # Errors
/// As the CPU version (same variants and first bad position, including
/// [`KernelError::NotPositiveDefinite`] naming the first failing row), plus
/// [`KernelError::GpuLimit`] for `rank > 128` or more than `u32::MAX` rows,
/// [`KernelError::Cuda`] if a buffer is on another device or a launch fails, and
/// [`KernelError::NvrtcUnavailable`] / [`KernelError::CudaCompile`] on first use.
/// On error `out` is untouched.
pub fn als_half_step(
    gpu: &Gpu,
    rank: usize,
    lambda: f32,
    csr: DeviceCsr<'_>,
    fixed: &CudaSlice<f32>,
    out: &mut CudaSlice<f32>,
) -> Result<(), KernelError> {
    if !(lambda.is_finite() && lambda > 0.0) {
        return Err(KernelError::InvalidHyperparameter {
            what: "lambda",
            value: lambda,
        });
    }
    let cols = factor_rows("fixed", fixed.len(), rank)?;
    let nnz = csr.cols.len();
    check_len("values", nnz, csr.values.len())?;
    if csr.offsets.is_empty() {
        return Err(KernelError::LengthMismatch {
            what: "offsets",
            expected: 1,
            actual: 0,
        });
    }
    let rows = csr.offsets.len() - 1;
    let out_len = rows
        .checked_mul(rank)
        .ok_or(KernelError::ShapeOverflow { what: "out" })?;
    if rank > ALS_MAX_RANK {
        return Err(KernelError::GpuLimit {
            what: "rank",
            value: rank,
            max: ALS_MAX_RANK,
        });
    }
    let rows32 = u32::try_from(rows).map_err(|_| KernelError::GpuLimit {
        what: "rows",
        value: rows,
        max: u32::MAX as usize,
    })?;
    check_device(gpu, "offsets", csr.offsets)?;
    check_device(gpu, "cols", csr.cols)?;
    check_device(gpu, "values", csr.values)?;
    check_device(gpu, "fixed", fixed)?;
    check_device(gpu, "out", out)?;

    // Offsets, columns and values first, as the CPU validates them before `out`'s length.
    let check = gpu.function(&SOURCE, "harp_mf_check_csr")?;
    let bad = first_bad(gpu, |flag| {
        let (rows64, nnz64, cols64) = (rows as u64, nnz as u64, cols as u64);
        let fixed_len = 0u64; // `fixed` is checked after `out`'s length, below
        let mut launch = gpu.stream().launch_builder(&check);
        launch
            .arg(csr.offsets)
            .arg(&rows64)
            .arg(csr.cols)
            .arg(csr.values)
            .arg(&nnz64)
            .arg(&cols64)
            .arg(fixed)
            .arg(&fixed_len)
            .arg(&mut *flag);
        // SAFETY: arguments match (const u32*, u64, const u32*, const float*, u64, u64,
        // const float*, u64, u64*); offsets holds rows + 1 entries, cols and values nnz.
        unsafe { launch.launch(gpu.grid_stride_config(nnz.max(rows + 1))) }
            .map_err(driver_err("launch harp_mf_check_csr"))?;
        Ok(())
    })?;
    if let Some((kind, position)) = bad {
        return Err(match kind {
            0 => KernelError::IndexOutOfRange {
                what: "offsets",
                position,
                index: value_at(gpu, csr.offsets, position)?,
            },
            1 => KernelError::IndexOutOfRange {
                what: "cols",
                position,
                index: value_at(gpu, csr.cols, position)?,
            },
            _ => KernelError::InvalidValue {
                what: "values",
                position,
            },
        });
    }
    check_len("out", out_len, out.len())?;
    let bad = first_bad(gpu, |flag| {
        let (zero, fixed_len) = (0u64, fixed.len() as u64);
        // With rows = 0 and nnz = 0 only the offsets[0] test runs, which passed above.
        let mut launch = gpu.stream().launch_builder(&check);
        launch
            .arg(csr.offsets)
            .arg(&zero)
            .arg(csr.cols)
            .arg(csr.values)
            .arg(&zero)
            .arg(&zero)
            .arg(fixed)
            .arg(&fixed_len)
            .arg(&mut *flag);
        // SAFETY: as above; only offsets[0] and fixed[..fixed_len] are read.
        unsafe { launch.launch(gpu.grid_stride_config(fixed.len().max(1))) }
            .map_err(driver_err("launch harp_mf_check_csr (fixed)"))?;
        Ok(())
    })?;
    if let Some((_, position)) = bad {
        return Err(KernelError::InvalidValue {
            what: "fixed",
            position,
        });
    }
    if rows == 0 {
        return Ok(());
    }

    let stream = gpu.stream();
    let mut x = gpu.alloc_zeros::<f32>(out_len)?;
    let mut bad_row = gpu.upload(&[u32::MAX])?;
    let f = gpu.function(&SOURCE, "harp_mf_als")?;
    let shared_floats = rank * (rank + 1) / 2 + rank + ALS_TILE * rank + ALS_TILE;
    let blocks = rows.min((gpu.sm_count().max(1) as usize) * 16);
    let cfg = LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (ALS_THREADS, 1, 1),
        shared_mem_bytes: (shared_floats * 4) as u32,
    };
    let k32 = rank as u32;
    let mut launch = stream.launch_builder(&f);
    launch
        .arg(csr.offsets)
        .arg(csr.cols)
        .arg(csr.values)
        .arg(fixed)
        .arg(&rows32)
        .arg(&k32)
        .arg(&lambda)
        .arg(&mut x)
        .arg(&mut bad_row);
    // SAFETY: arguments match (const u32*, const u32*, const float*, const float*, u32,
    // u32, float, float*, u32*). Offsets were checked (start 0, non-decreasing, end nnz)
    // and every column < fixed rows, so every entry and factor row read is in bounds; x
    // holds rows * rank floats; the dynamic shared memory is sized for rank as the
    // kernel lays it out (<= 41.8 KiB for rank <= 128).
    unsafe { launch.launch(cfg) }.map_err(driver_err("launch harp_mf_als"))?;
    let failed = gpu.download(&bad_row)?;
    if let Some(&row) = failed.first().filter(|&&r| r != u32::MAX) {
        return Err(KernelError::NotPositiveDefinite { row: row as usize });
    }
    stream
        .memcpy_dtod(&x, out)
        .map_err(driver_err("copy ALS result"))?;
    Ok(())
}
