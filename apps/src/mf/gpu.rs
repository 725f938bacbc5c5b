//! The MF executor's GPU path (`--device cuda`): the rating structures, which never
//! change, are uploaded once (each ALS side's CSR, each SGD item block's ratings); the
//! factor rows are uploaded per task and the solved rows come back to be sent as deltas.
//!
//! The GPU's SGD is Hogwild within a block (`harp_kernels::cuda::mf::sgd_step`: ratings
//! that share a row race), so `--solver sgd --device cuda` is not bit-identical to the
//! CPU's sequential pass; ALS solves each row on its own and matches the CPU to f32
//! rounding.

use crate::device::buffers::{sized, uploaded};
use harp::AppError;
use harp_kernels::cuda::cudarc::driver::CudaSlice;
use harp_kernels::cuda::mf::{als_half_step, sgd_step, DeviceCsr, DeviceRatings, SOURCE};
use harp_kernels::cuda::{CudaSource, Gpu};
use harp_kernels::mf::{Csr, Ratings, Sgd};
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// The kernels compiled when the job starts ([`crate::device::Compute::prepare`]).
pub(super) const KERNELS: [(&CudaSource, &str); 2] =
    [(&SOURCE, "harp_mf_sgd"), (&SOURCE, "harp_mf_als")];

fn gpu_error(e: harp_kernels::KernelError) -> AppError {
    format!("mf on the GPU: {e}").into()
}

/// One ALS side on the device: its CSR structure and its factor buffers.
struct SideOnDevice {
    offsets: CudaSlice<u32>,
    cols: CudaSlice<u32>,
    values: CudaSlice<f32>,
    fixed: Option<CudaSlice<f32>>,
    out: Option<CudaSlice<f32>>,
}

/// Ratings in coordinate form on the device.
struct RatingsOnDevice {
    users: CudaSlice<u32>,
    items: CudaSlice<u32>,
    values: CudaSlice<f32>,
}

/// Which ALS side a structure belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum SideKind {
    Users,
    Items,
}

/// The device buffers of one executor.
pub(super) struct MfGpu {
    gpu: Gpu,
    sides: HashMap<SideKind, SideOnDevice>,
    blocks: HashMap<u32, RatingsOnDevice>,
    p: Option<CudaSlice<f32>>,
    q: Option<CudaSlice<f32>>,
}

impl MfGpu {
    pub(super) fn new(gpu: Gpu) -> Self {
        Self {
            gpu,
            sides: HashMap::new(),
            blocks: HashMap::new(),
            p: None,
            q: None,
        }
    }

    /// The ALS half-step of side `kind` (structure `csr`, uploaded the first time) against
    /// the rows `fixed`: the solved rows, `rows × rank`.
    pub(super) fn als(
        &mut self,
        kind: SideKind,
        csr: Csr<'_>,
        rank: usize,
        lambda: f32,
        fixed: &[f32],
    ) -> Result<Vec<f32>, AppError> {
        let gpu = &self.gpu;
        let side = match self.sides.entry(kind) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(SideOnDevice {
                offsets: gpu.upload(csr.offsets).map_err(gpu_error)?,
                cols: gpu.upload(csr.cols).map_err(gpu_error)?,
                values: gpu.upload(csr.values).map_err(gpu_error)?,
                fixed: None,
                out: None,
            }),
        };
        let rows = csr.offsets.len().saturating_sub(1);
        let fixed = uploaded(gpu, &mut side.fixed, fixed).map_err(gpu_error)?;
        let out = sized(gpu, &mut side.out, rows * rank).map_err(gpu_error)?;
        let device_csr = DeviceCsr {
            offsets: &side.offsets,
            cols: &side.cols,
            values: &side.values,
        };
        als_half_step(gpu, rank, lambda, device_csr, fixed, out).map_err(gpu_error)?;
        gpu.download(out).map_err(gpu_error)
    }

    /// SGD over item block `block` (its ratings `ratings`, uploaded the first time) from
    /// the rows `p` and `q`, which it updates in place.
    pub(super) fn sgd(
        &mut self,
        block: u32,
        ratings: Ratings<'_>,
        rank: usize,
        step: Sgd,
        p: &mut Vec<f32>,
        q: &mut Vec<f32>,
    ) -> Result<(), AppError> {
        let gpu = &self.gpu;
        let on_device = match self.blocks.entry(block) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(RatingsOnDevice {
                users: gpu.upload(ratings.users).map_err(gpu_error)?,
                items: gpu.upload(ratings.items).map_err(gpu_error)?,
                values: gpu.upload(ratings.values).map_err(gpu_error)?,
            }),
        };
        let p_dev = uploaded(gpu, &mut self.p, p).map_err(gpu_error)?;
        let q_dev = uploaded(gpu, &mut self.q, q).map_err(gpu_error)?;
        let device_ratings = DeviceRatings {
            users: &on_device.users,
            items: &on_device.items,
            values: &on_device.values,
        };
        sgd_step(gpu, rank, step, device_ratings, p_dev, q_dev).map_err(gpu_error)?;
        *p = gpu.download(p_dev).map_err(gpu_error)?;
        *q = gpu.download(q_dev).map_err(gpu_error)?;
        Ok(())
    }
}
