//! The LDA executor's GPU path (`--device cuda`, the parallel sampler): each block's token
//! ids are uploaded once; per sub-round the topics and the three count tables go up, the
//! uniforms are generated on the device, `harp_kernels::cuda::lda::sample_parallel` draws
//! the new topics (bit-identical to the CPU's `sample_parallel`), and they come back for
//! [`super::parallel::apply_moves`].

use harp::AppError;
use harp_kernels::cuda::lda::{
    sample_parallel, DeviceCounts, DeviceTokens, DeviceTopics, DeviceUniforms, SOURCE,
};
use harp_kernels::cuda::{CudaSource, Gpu};
use harp_kernels::lda::{LdaParams, Tokens};
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// The kernels compiled when the job starts ([`crate::device::Compute::prepare`]).
pub(super) const KERNELS: [(&CudaSource, &str); 2] = [
    (&SOURCE, "harp_lda_uniforms"),
    (&SOURCE, "harp_lda_sample_small"),
];

fn gpu_error(e: harp_kernels::KernelError) -> AppError {
    format!("lda on the GPU: {e}").into()
}

/// A block's count tables as the sub-round read them.
pub(super) struct HostCounts<'a> {
    pub doc_topic: &'a [u32],
    pub word_topic: &'a [u32],
    pub word_base: u32,
    pub totals: &'a [u32],
}

/// The device buffers of one executor.
pub(super) struct LdaGpu {
    gpu: Gpu,
    /// Token ids of each block, uploaded on first use.
    blocks: HashMap<usize, DeviceTokens>,
}

impl LdaGpu {
    pub(super) fn new(gpu: Gpu) -> Self {
        Self {
            gpu,
            blocks: HashMap::new(),
        }
    }

    /// The new topics of block `block`'s tokens (`tokens`, current `topics`) drawn from
    /// `counts` with the uniforms of `seed`.
    pub(super) fn sample(
        &mut self,
        block: usize,
        params: &LdaParams,
        tokens: Tokens<'_>,
        topics: &[u32],
        counts: HostCounts<'_>,
        seed: u64,
    ) -> Result<Vec<u32>, AppError> {
        let gpu = &self.gpu;
        let device_tokens = match self.blocks.entry(block) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                entry.insert(DeviceTokens::upload(gpu, tokens).map_err(gpu_error)?)
            }
        };
        let current = DeviceTopics::upload(gpu, topics).map_err(gpu_error)?;
        let doc_topic = gpu.upload(counts.doc_topic).map_err(gpu_error)?;
        let word_topic = gpu.upload(counts.word_topic).map_err(gpu_error)?;
        let totals = gpu.upload(counts.totals).map_err(gpu_error)?;
        let uniforms = DeviceUniforms::generate(gpu, topics.len(), seed).map_err(gpu_error)?;
        let mut drawn = DeviceTopics::zeros(gpu, topics.len()).map_err(gpu_error)?;
        let device_counts = DeviceCounts {
            doc_topic: &doc_topic,
            word_topic: &word_topic,
            word_base: counts.word_base,
            topic_totals: &totals,
        };
        sample_parallel(
            gpu,
            params,
            device_tokens,
            &current,
            device_counts,
            &uniforms,
            &mut drawn,
        )
        .map_err(gpu_error)?;
        drawn.download(gpu).map_err(gpu_error)
    }
}
