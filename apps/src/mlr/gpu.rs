//! The MLR executor's GPU path (`--device cuda`): each minibatch is uploaded once and kept
//! on the device (an executor revisits the same minibatches every epoch), the weights are
//! uploaded per task, and `harp_kernels::cuda::mlr::gradient_scaled` computes the scaled
//! gradient there; it comes back as one features × classes matrix, which the executor cuts
//! into the table's blocks.

use crate::device::buffers::{sized, uploaded};
use harp::AppError;
use harp_kernels::cuda::cudarc::driver::CudaSlice;
use harp_kernels::cuda::mlr::{gradient_scaled, MlrGpuScratch, SOURCE};
use harp_kernels::cuda::Gpu;
use harp_kernels::MlrShape;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// The kernel compiled when the job starts ([`crate::device::Compute::prepare`]).
pub(super) const KERNELS: [(&harp_kernels::cuda::CudaSource, &str); 1] =
    [(&SOURCE, "harp_mlr_gemm")];

/// One minibatch on the device.
struct DeviceBatch {
    x: CudaSlice<f32>,
    labels: CudaSlice<u32>,
}

/// The device buffers of one executor.
pub(super) struct MlrGpu {
    gpu: Gpu,
    /// Minibatches by index within the epoch, uploaded on first use.
    batches: HashMap<u32, DeviceBatch>,
    w: Option<CudaSlice<f32>>,
    grad: Option<CudaSlice<f32>>,
    scratch: MlrGpuScratch,
}

fn gpu_error(e: harp_kernels::KernelError) -> AppError {
    format!("mlr on the GPU: {e}").into()
}

impl MlrGpu {
    pub(super) fn new(gpu: Gpu) -> Self {
        Self {
            gpu,
            batches: HashMap::new(),
            w: None,
            grad: None,
            scratch: MlrGpuScratch::new(),
        }
    }

    /// `alpha × gradient` of minibatch `index` (rows `x`, `labels`, uploaded the first time
    /// the index is seen) at the weights `w` (features × classes): the gradient, as
    /// features × classes, and the batch's summed loss.
    pub(super) fn gradient(
        &mut self,
        shape: MlrShape,
        index: u32,
        x: &[f32],
        labels: &[u32],
        w: &[f32],
        alpha: f32,
    ) -> Result<(Vec<f32>, f64), AppError> {
        let gpu = &self.gpu;
        if let Some(batch) = self.batches.get(&index) {
            if batch.labels.len() != labels.len() {
                // The executor's slice changed size (a different job shape): upload again.
                self.batches.remove(&index);
            }
        }
        let batch = match self.batches.entry(index) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(DeviceBatch {
                x: gpu.upload(x).map_err(gpu_error)?,
                labels: gpu.upload(labels).map_err(gpu_error)?,
            }),
        };
        let w_dev = uploaded(gpu, &mut self.w, w).map_err(gpu_error)?;
        let grad = sized(gpu, &mut self.grad, w.len()).map_err(gpu_error)?;
        let loss = gradient_scaled(
            gpu,
            shape,
            &batch.x,
            &batch.labels,
            w_dev,
            alpha,
            grad,
            &mut self.scratch,
        )
        .map_err(gpu_error)?;
        let host = gpu.download(grad).map_err(gpu_error)?;
        Ok((host, loss))
    }
}
