//! CUDA versions of the LDA parallel sampling step and count rebuild in
//! [`crate::lda`], on device buffers (`kernels/cuda/lda.cu`).
//!
//! [`sample_parallel`] has exactly the contract and arithmetic of
//! [`crate::lda::sample_parallel`]: the same f32 operations in the same order (chunks of
//! 32 topics, a Hillis–Steele scan per chunk, no fused multiply-adds), so its topics are
//! bit-for-bit the CPU version's. The kernel is chosen by `K` at launch
//! ([`sample_variant`]):
//!
//! * `K <= 32` ([`SampleVariant::ThreadPerToken`]): a warp takes a tile of 32 tokens,
//!   reads the tile's 32 document rows and 32 word rows with coalesced loads (lanes over
//!   the flattened `token × topic` cells), writes the weights to shared memory, and then
//!   each lane scans and samples its own token in registers;
//! * `32 < K <= 112` ([`SampleVariant::ChunkedTiles`]): the same tiles, as many warps per
//!   block as 48 KiB of shared memory holds; each lane scans its token's row chunk by
//!   chunk in registers, writes the cumulative values back over the weights and searches
//!   them (possible up to `K = 256`, but few tiles fit in shared memory there);
//! * `32 < K <= 256`, not yet any `K`'s default ([`SampleVariant::LeanTiles`]): chunked
//!   tiles in under half the instructions per cell (each token's row addresses read from
//!   shared memory, its own topic's cell rewritten once instead of tested in every cell,
//!   full batches and chunks without bounds tests, a four-wide search),
//!   listed by [`sample_variants`] so that the conformance test and the benchmark run it
//!   until a GPU measurement makes it a default; [`SampleVariant::LeanTiles16`] is the same
//!   with 16-token tiles, half the shared memory per warp and so about twice the warps per
//!   SM, for a scan and search on half the lanes (also listed, also not yet measured);
//! * `112 < K <= 256` ([`SampleVariant::WarpRegisters`]): one warp per token, every
//!   chunk's row loads issued at once, the cumulative values kept in registers, one ballot
//!   per chunk for the search — each row is read once (on an H100: 80% of copy bandwidth
//!   at `K = 256`, where tiles reach 28%; 48% at `K = 100`; figures in docs/KERNELS.md);
//! * larger `K` while shared memory allows (about `K <= 2700`,
//!   [`SampleVariant::WarpShared`]): the same with cumulative values in shared memory and
//!   loads issued 8 chunks at a time;
//! * beyond that ([`SampleVariant::WarpRecompute`]): one warp per token, the search pass
//!   re-reads the rows and recomputes the weights.
//!
//! All variants precompute `1 / (n_k + Vβ)` and `1 / (n_k − 1 + Vβ)` per block into shared
//! memory (except the last, which computes them inline) — the same correctly rounded
//! reciprocals, so the same bits. Per token the step reads `8K + 20` logical bytes
//! (document and word rows, ids, topic, uniform, and writes the new topic; topic totals
//! are shared): compare its tokens/s × bytes with the device copy bandwidth
//! (`harp-kernel-bench --kernel lda_sample_k20`).
//!
//! # Validation: once, when the data is built, not on every call
//! The sampling kernels trust their inputs, so the only ways to hand them data are types
//! that carry a proof of validity:
//!
//! * [`DeviceTokens`] — built by [`DeviceTokens::upload`] (the host computes the smallest
//!   and largest document row and word id while uploading) or
//!   [`DeviceTokens::from_device`] (one min/max kernel and one read-back). Its buffers are
//!   never exposed mutably. Each call compares those ranges with the count tables it is
//!   given — `O(1)`, no device work;
//! * [`DeviceTopics`] — carries a bound every topic is below: the uploaded maximum + 1
//!   ([`DeviceTopics::upload`], [`DeviceTopics::from_device`]), 1 for
//!   [`DeviceTopics::zeros`], and `K` for the output of [`sample_parallel`] (the kernels
//!   only produce topics `< K`). A call needs `bound <= K` (`O(1)`). The sampling kernels
//!   only compare topics, never index with them;
//! * [`DeviceUniforms`] — every value is in `[0, 1)`: [`DeviceUniforms::upload`] /
//!   [`DeviceUniforms::refill`] check on the host before copying (the CPU's
//!   `InvalidValue { what: "uniforms", position }` for the first bad one, nothing copied),
//!   [`DeviceUniforms::generate`] / [`DeviceUniforms::regenerate`] produce them on the
//!   device (a counter-based hash, [`counter_uniform`] is the host twin).
//!
//! When an `O(1)` range test fails (tokens of another word block, a document row past the
//! table, a topic bound above `K`), the wrapper runs the exact device check (one kernel
//! and one read-back) to report the CPU version's error with the first bad position; so
//! bad input still gives the CPU's typed error and writes nothing. Lengths,
//! hyperparameters and devices are checked on the host on every call. A valid call
//! queues one kernel and does not wait: launches are asynchronous on [`Gpu::stream`].
//! Uniform errors surface when the uniforms are built, i.e. before id errors that the
//! CPU version would report first.

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

use super::optim::check_device;
use super::{driver_err, CudaSource, Gpu};
use crate::error::{check_len, KernelError};
use crate::lda::{check_uniforms, LdaParams, Tokens};

/// `kernels/cuda/lda.cu`.
pub const SOURCE: CudaSource = CudaSource {
    name: "lda.cu",
    code: include_str!("../../cuda/lda.cu"),
};

/// Largest `K` whose topic totals are histogrammed in shared memory by the count kernel
/// (larger `K` adds to global memory directly).
const SHARED_TOTALS_MAX_TOPICS: usize = 4096;
/// Largest `K` sampled one thread per token ([`SampleVariant::ThreadPerToken`]).
pub const THREAD_PER_TOKEN_MAX_TOPICS: usize = 32;
/// Largest `K` [`sample_variant`] samples in chunked tiles ([`SampleVariant::ChunkedTiles`]);
/// above it [`SampleVariant::WarpRegisters`] is faster (fewer tiles fit in shared memory).
/// Measured on an H100 (docs/KERNELS.md): tiles 55% of copy bandwidth at `K = 100` and
/// 50% at 128, warp-per-token 48% and 61%; the lines cross near 112.
pub const CHUNKED_TILES_PREFERRED_MAX_TOPICS: usize = 112;
/// Largest `K` chunked tiles can sample at all (at 256 one warp's tile, 32 rows of 257
/// floats, is 32.9 KiB).
pub const CHUNKED_TILES_MAX_TOPICS: usize = 256;
/// Largest `K` whose cumulative values stay in registers ([`SampleVariant::WarpRegisters`]:
/// 8 chunks of 32, `HARP_LDA_GROUP` in `lda.cu`).
pub const REGISTER_MAX_TOPICS: usize = 256;
/// Dynamic shared memory a sampling block may use without opting in (48 KiB).
const SHARED_LIMIT_BYTES: usize = 48 * 1024;
/// Threads per block of the sampling kernels (8 warps) where shared memory allows.
const SAMPLE_THREADS: usize = 256;
const WARP: usize = 32;

/// Which sampling kernel [`sample_parallel`] launches (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleVariant {
    /// `K <= 32`: a warp per 32-token tile, one lane per token for the scan and search.
    ThreadPerToken,
    /// `32 < K <= 256`: a warp per 32-token tile, one lane per token, scanned chunk by
    /// chunk with the cumulative values in shared memory.
    ChunkedTiles {
        /// Warps per block (as many tiles as fit in 48 KiB of shared memory, at most 8).
        warps_per_block: u32,
    },
    /// `32 < K <= 256`: [`SampleVariant::ChunkedTiles`] in fewer instructions — each
    /// token's row addresses read from shared memory instead of shuffled, every cell's
    /// weight computed as if it were not its token's topic and each token's own cell
    /// rewritten once, full batches of cells and full chunks without bounds tests, a
    /// search four values a step (under half the instructions per cell in sm_90 SASS).
    /// Not yet measured on a GPU, so not yet any `K`'s default; [`sample_variants`] lists
    /// it.
    LeanTiles {
        /// Warps per block (as many tiles as fit in 48 KiB of shared memory, at most 8).
        warps_per_block: u32,
    },
    /// `32 < K <= 256`: [`SampleVariant::LeanTiles`] with 16-token tiles — half the shared
    /// memory per warp (6.6 KiB at `K = 100`), so about twice the warps per SM to hide the
    /// row loads' latency; the weights use all 32 lanes, the scan and search 16. Not yet
    /// measured on a GPU; [`sample_variants`] lists it.
    LeanTiles16 {
        /// Warps per block (as many tiles as fit in 48 KiB of shared memory, at most 8).
        warps_per_block: u32,
    },
    /// `32 < K <= 256`: a warp per token, cumulative values in registers.
    WarpRegisters,
    /// A warp per token, cumulative values in shared memory.
    WarpShared {
        /// Warps per block (as many as fit in 48 KiB of shared memory, at most 8).
        warps_per_block: u32,
    },
    /// A warp per token, two passes over the rows (`K` too large for shared memory).
    WarpRecompute,
}

/// The sampling kernel used for `topics` topics.
pub fn sample_variant(topics: usize) -> SampleVariant {
    if topics <= THREAD_PER_TOKEN_MAX_TOPICS {
        return SampleVariant::ThreadPerToken;
    }
    if topics <= CHUNKED_TILES_PREFERRED_MAX_TOPICS {
        if let Some(tiles) = chunked_tiles(topics) {
            return tiles;
        }
    }
    warp_variant(topics)
}

/// Every variant that can sample `topics` topics (the one [`sample_variant`] picks first);
/// for tests and benchmarks that compare them through [`sample_parallel_with`].
pub fn sample_variants(topics: usize) -> Vec<SampleVariant> {
    let mut all = vec![sample_variant(topics)];
    let mut add = |v: SampleVariant| {
        if !all.contains(&v) {
            all.push(v);
        }
    };
    if let Some(tiles) = chunked_tiles(topics) {
        add(tiles);
    }
    if let Some(tiles) = lean_tiles(topics) {
        add(tiles);
    }
    if let Some(tiles) = lean_tiles16(topics) {
        add(tiles);
    }
    if topics > THREAD_PER_TOKEN_MAX_TOPICS {
        add(warp_variant(topics));
    }
    add(SampleVariant::WarpRecompute);
    all
}

/// Chunked tiles for `32 < topics <= 256`, with as many warps per block as fit.
fn chunked_tiles(topics: usize) -> Option<SampleVariant> {
    tile_warps(topics, tile_bytes(topics))
        .map(|warps_per_block| SampleVariant::ChunkedTiles { warps_per_block })
}

/// Lean tiles for `32 < topics <= 256`, with as many warps per block as fit.
fn lean_tiles(topics: usize) -> Option<SampleVariant> {
    tile_warps(topics, lean_tile_bytes(topics))
        .map(|warps_per_block| SampleVariant::LeanTiles { warps_per_block })
}

/// Lean 16-token tiles for `32 < topics <= 256`, with as many warps per block as fit.
fn lean_tiles16(topics: usize) -> Option<SampleVariant> {
    tile_warps(topics, lean_tile16_bytes(topics))
        .map(|warps_per_block| SampleVariant::LeanTiles16 { warps_per_block })
}

/// Warps per block of a tile kernel for `32 < topics <= 256` whose warps take
/// `bytes_per_warp` of shared memory each: as many as fit beside the inverses, at most 8.
fn tile_warps(topics: usize, bytes_per_warp: usize) -> Option<u32> {
    if topics <= THREAD_PER_TOKEN_MAX_TOPICS || topics > CHUNKED_TILES_MAX_TOPICS {
        return None;
    }
    let free = SHARED_LIMIT_BYTES.saturating_sub(inverse_bytes(topics));
    let warps = (free / bytes_per_warp).min(SAMPLE_THREADS / WARP);
    (warps >= 1).then_some(warps as u32)
}

/// Bytes of one warp's tile: 32 rows of `K | 1` floats.
fn tile_bytes(topics: usize) -> usize {
    WARP * (topics | 1) * 4
}

/// Bytes of one warp's lean tile: its tokens' document and word row addresses (2 × 32
/// words of 8 bytes), then the tile.
fn lean_tile_bytes(topics: usize) -> usize {
    2 * WARP * 8 + tile_bytes(topics)
}

/// Tokens in a [`SampleVariant::LeanTiles16`] tile.
const HALF_TILE: usize = WARP / 2;

/// Bytes of one warp's 16-token lean tile: 2 × 16 row addresses of 8 bytes, then 16 rows
/// of `K | 1` floats.
fn lean_tile16_bytes(topics: usize) -> usize {
    2 * HALF_TILE * 8 + HALF_TILE * (topics | 1) * 4
}

/// The warp-per-token variant for `topics > 32`: cumulative values in shared memory while
/// they fit, else recomputed.
fn warp_variant(topics: usize) -> SampleVariant {
    if topics <= REGISTER_MAX_TOPICS {
        return SampleVariant::WarpRegisters;
    }
    let chunks = topics.div_ceil(WARP);
    let free = SHARED_LIMIT_BYTES.saturating_sub(inverse_bytes(topics));
    let warps = (free / (chunks * WARP * 4)).min(SAMPLE_THREADS / WARP);
    if warps >= 2 {
        SampleVariant::WarpShared {
            warps_per_block: warps as u32,
        }
    } else {
        SampleVariant::WarpRecompute
    }
}

/// Bytes of the two per-block reciprocal tables (`2K` floats).
fn inverse_bytes(topics: usize) -> usize {
    topics.saturating_mul(8)
}

/// Launch shape of a sampling variant: kernel name, threads and dynamic shared memory per
/// block, tokens one block handles per pass.
struct Plan {
    kernel: &'static str,
    threads: usize,
    shared_bytes: usize,
    tokens_per_block: usize,
}

/// The launch of a tile kernel: `warps` warps, each with a tile of `tokens_per_warp`
/// tokens in `bytes_per_warp` of shared memory, after the block's inverses.
fn tile_plan(
    kernel: &'static str,
    warps: u32,
    bytes_per_warp: usize,
    tokens_per_warp: usize,
    topics: usize,
) -> Plan {
    let w = warps as usize;
    Plan {
        kernel,
        threads: w * WARP,
        shared_bytes: inverse_bytes(topics) + w * bytes_per_warp,
        tokens_per_block: w * tokens_per_warp,
    }
}

fn plan(topics: usize, variant: SampleVariant) -> Plan {
    let warps = SAMPLE_THREADS / WARP;
    match variant {
        SampleVariant::ThreadPerToken => Plan {
            kernel: "harp_lda_sample_small",
            threads: SAMPLE_THREADS,
            // Per warp 32 rows of (K | 1) weights (an odd stride avoids bank conflicts).
            shared_bytes: inverse_bytes(topics) + warps * tile_bytes(topics),
            tokens_per_block: SAMPLE_THREADS,
        },
        SampleVariant::ChunkedTiles { warps_per_block } => tile_plan(
            "harp_lda_sample_tiles",
            warps_per_block,
            tile_bytes(topics),
            WARP,
            topics,
        ),
        SampleVariant::LeanTiles { warps_per_block } => tile_plan(
            "harp_lda_sample_tiles_lean",
            warps_per_block,
            lean_tile_bytes(topics),
            WARP,
            topics,
        ),
        SampleVariant::LeanTiles16 { warps_per_block } => tile_plan(
            "harp_lda_sample_tiles_lean16",
            warps_per_block,
            lean_tile16_bytes(topics),
            HALF_TILE,
            topics,
        ),
        SampleVariant::WarpRegisters => Plan {
            kernel: "harp_lda_sample_warp_reg",
            threads: SAMPLE_THREADS,
            shared_bytes: inverse_bytes(topics),
            tokens_per_block: warps,
        },
        SampleVariant::WarpShared { warps_per_block } => {
            let w = warps_per_block as usize;
            Plan {
                kernel: "harp_lda_sample_warp_smem",
                threads: w * WARP,
                shared_bytes: inverse_bytes(topics) + w * topics.div_ceil(WARP) * WARP * 4,
                tokens_per_block: w,
            }
        }
        SampleVariant::WarpRecompute => Plan {
            kernel: "harp_lda_sample_parallel",
            threads: SAMPLE_THREADS,
            shared_bytes: 0,
            tokens_per_block: warps,
        },
    }
}

/// Tokens on the device whose ids are known: the documents rows and word ids they use
/// span `0..doc_rows_needed()` and `word_span()`. Immutable once built (see the
/// [module docs](self) for why that matters).
#[derive(Debug)]
pub struct DeviceTokens {
    docs: CudaSlice<u32>,
    words: CudaSlice<u32>,
    /// One past the largest document row (0 without tokens).
    doc_end: u64,
    /// Smallest word id and one past the largest (`None` without tokens).
    word_span: Option<(u64, u64)>,
}

impl DeviceTokens {
    /// Uploads `tokens`, recording the largest document row and the word-id span.
    ///
    /// # Errors
    /// [`KernelError::LengthMismatch`] (`"words"`) if the slices differ in length (as
    /// the CPU kernels report it); [`KernelError::Cuda`] if an allocation or copy fails.
    pub fn upload(gpu: &Gpu, tokens: Tokens<'_>) -> Result<DeviceTokens, KernelError> {
        check_len("words", tokens.docs.len(), tokens.words.len())?;
        let doc_end = tokens.docs.iter().max().map_or(0, |&d| u64::from(d) + 1);
        let word_span = tokens
            .words
            .iter()
            .fold(None, |span: Option<(u32, u32)>, &w| match span {
                None => Some((w, w)),
                Some((lo, hi)) => Some((lo.min(w), hi.max(w))),
            })
            .map(|(lo, hi)| (u64::from(lo), u64::from(hi) + 1));
        Ok(DeviceTokens {
            docs: gpu.upload(tokens.docs)?,
            words: gpu.upload(tokens.words)?,
            doc_end,
            word_span,
        })
    }

    /// Takes token buffers already on the device, finding their id ranges with one
    /// min/max kernel per buffer and one read-back each (this waits for the stream).
    ///
    /// # Errors
    /// [`KernelError::LengthMismatch`] (`"words"`) if the buffers differ in length;
    /// [`KernelError::Cuda`] if a buffer is on another device or a launch/copy fails;
    /// [`KernelError::NvrtcUnavailable`] / [`KernelError::CudaCompile`] on first use.
    pub fn from_device(
        gpu: &Gpu,
        docs: CudaSlice<u32>,
        words: CudaSlice<u32>,
    ) -> Result<DeviceTokens, KernelError> {
        check_len("words", docs.len(), words.len())?;
        check_device(gpu, "docs", &docs)?;
        check_device(gpu, "words", &words)?;
        let doc_end = device_range(gpu, &docs)?.map_or(0, |(_, hi)| u64::from(hi) + 1);
        let word_span =
            device_range(gpu, &words)?.map(|(lo, hi)| (u64::from(lo), u64::from(hi) + 1));
        Ok(DeviceTokens {
            docs,
            words,
            doc_end,
            word_span,
        })
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// Local document row of each token.
    pub fn docs(&self) -> &CudaSlice<u32> {
        &self.docs
    }

    /// Global word id of each token.
    pub fn words(&self) -> &CudaSlice<u32> {
        &self.words
    }

    /// Rows `doc_topic` needs: one past the largest document row (0 without tokens).
    pub fn doc_rows_needed(&self) -> u64 {
        self.doc_end
    }

    /// `(smallest word id, largest + 1)`, `None` without tokens.
    pub fn word_span(&self) -> Option<(u64, u64)> {
        self.word_span
    }

    /// Whether every id is valid for `doc_rows` document rows and words `word_lo..word_hi`.
    fn fits(&self, doc_rows: usize, word_lo: u64, word_hi: u64) -> bool {
        self.doc_end <= doc_rows as u64
            && self
                .word_span
                .is_none_or(|(lo, hi)| lo >= word_lo && hi <= word_hi)
    }
}

/// Topic assignments on the device, with a bound every value is known to be below.
#[derive(Debug)]
pub struct DeviceTopics {
    buf: CudaSlice<u32>,
    /// Every topic is `< bound`.
    bound: u64,
}

impl DeviceTopics {
    /// Uploads `topics`; the bound is their maximum + 1.
    ///
    /// # Errors
    /// [`KernelError::Cuda`] if the allocation or copy fails.
    pub fn upload(gpu: &Gpu, topics: &[u32]) -> Result<DeviceTopics, KernelError> {
        let bound = topics.iter().max().map_or(0, |&z| u64::from(z) + 1);
        Ok(DeviceTopics {
            buf: gpu.upload(topics)?,
            bound,
        })
    }

    /// `n` topics, all 0 (bound 1): e.g. the output buffer of [`sample_parallel`].
    ///
    /// # Errors
    /// [`KernelError::Cuda`] if the allocation fails.
    pub fn zeros(gpu: &Gpu, n: usize) -> Result<DeviceTopics, KernelError> {
        Ok(DeviceTopics {
            buf: gpu.alloc_zeros(n)?,
            bound: u64::from(n > 0),
        })
    }

    /// Takes a topic buffer already on the device, finding its maximum with one kernel and
    /// one read-back (this waits for the stream).
    ///
    /// # Errors
    /// [`KernelError::Cuda`] if the buffer is on another device or a launch/copy fails;
    /// [`KernelError::NvrtcUnavailable`] / [`KernelError::CudaCompile`] on first use.
    pub fn from_device(gpu: &Gpu, buf: CudaSlice<u32>) -> Result<DeviceTopics, KernelError> {
        check_device(gpu, "topics", &buf)?;
        let bound = device_range(gpu, &buf)?.map_or(0, |(_, hi)| u64::from(hi) + 1);
        Ok(DeviceTopics { buf, bound })
    }

    /// Number of topics (tokens).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The topics, read-only.
    pub fn as_slice(&self) -> &CudaSlice<u32> {
        &self.buf
    }

    /// A bound every topic is below.
    pub fn bound(&self) -> u64 {
        self.bound
    }

    /// Copies the topics to the host (waits for the stream).
    ///
    /// # Errors
    /// [`KernelError::Cuda`] if the copy fails.
    pub fn download(&self, gpu: &Gpu) -> Result<Vec<u32>, KernelError> {
        gpu.download(&self.buf)
    }
}

/// Uniform random numbers on the device, every one in `[0, 1)`.
#[derive(Debug)]
pub struct DeviceUniforms {
    buf: CudaSlice<f32>,
}

impl DeviceUniforms {
    /// Checks `host` (every value in `[0, 1)`) and uploads it.
    ///
    /// # Errors
    /// [`KernelError::InvalidValue`] (`"uniforms"`, first bad position) before anything
    /// is allocated; [`KernelError::Cuda`] if the allocation or copy fails.
    pub fn upload(gpu: &Gpu, host: &[f32]) -> Result<DeviceUniforms, KernelError> {
        check_uniforms(host)?;
        Ok(DeviceUniforms {
            buf: gpu.upload(host)?,
        })
    }

    /// Checks `host` and overwrites these uniforms with it (same length).
    ///
    /// # Errors
    /// [`KernelError::LengthMismatch`] (`"uniforms"`), or [`KernelError::InvalidValue`]
    /// for the first value outside `[0, 1)`: then nothing is copied.
    /// [`KernelError::Cuda`] if the copy fails.
    pub fn refill(&mut self, gpu: &Gpu, host: &[f32]) -> Result<(), KernelError> {
        check_len("uniforms", self.buf.len(), host.len())?;
        check_uniforms(host)?;
        gpu.upload_into(host, &mut self.buf)
    }

    /// `n` uniforms generated on the device: value `i` is [`counter_uniform`]`(seed, i)`.
    ///
    /// # Errors
    /// [`KernelError::Cuda`] if the allocation or launch fails;
    /// [`KernelError::NvrtcUnavailable`] / [`KernelError::CudaCompile`] on first use.
    pub fn generate(gpu: &Gpu, n: usize, seed: u64) -> Result<DeviceUniforms, KernelError> {
        let mut u = DeviceUniforms {
            buf: gpu.alloc_zeros(n)?,
        };
        u.regenerate(gpu, seed)?;
        Ok(u)
    }

    /// Overwrites these uniforms on the device: value `i` becomes
    /// [`counter_uniform`]`(seed, i)`. Asynchronous.
    ///
    /// # Errors
    /// As [`DeviceUniforms::generate`].
    pub fn regenerate(&mut self, gpu: &Gpu, seed: u64) -> Result<(), KernelError> {
        check_device(gpu, "uniforms", &self.buf)?;
        let n = self.buf.len();
        if n == 0 {
            return Ok(());
        }
        let f = gpu.function(&SOURCE, "harp_lda_uniforms")?;
        let n64 = n as u64;
        let mut launch = gpu.stream().launch_builder(&f);
        launch.arg(&mut self.buf).arg(&n64).arg(&seed);
        // SAFETY: arguments match (float*, u64, u64); the buffer holds n floats and the
        // kernel writes indices < n only.
        unsafe { launch.launch(gpu.grid_stride_config(n)) }
            .map_err(driver_err("launch harp_lda_uniforms"))?;
        Ok(())
    }

    /// Number of uniforms.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The uniforms, read-only.
    pub fn as_slice(&self) -> &CudaSlice<f32> {
        &self.buf
    }
}

pub use crate::lda::counter_uniform;

/// Read-only count tables on the device (see [`crate::lda::Counts`]).
#[derive(Clone, Copy, Debug)]
pub struct DeviceCounts<'a> {
    /// `docs × K` document–topic counts.
    pub doc_topic: &'a CudaSlice<u32>,
    /// `rows × K` word–topic counts; row `r` is word `word_base + r`.
    pub word_topic: &'a CudaSlice<u32>,
    /// Global id of the word in row 0 of `word_topic`.
    pub word_base: u32,
    /// `K` topic totals.
    pub topic_totals: &'a CudaSlice<u32>,
}

/// Mutable count tables on the device (see [`crate::lda::CountsMut`]).
#[derive(Debug)]
pub struct DeviceCountsMut<'a> {
    /// `docs × K` document–topic counts.
    pub doc_topic: &'a mut CudaSlice<u32>,
    /// `rows × K` word–topic counts; row `r` is word `word_base + r`.
    pub word_topic: &'a mut CudaSlice<u32>,
    /// Global id of the word in row 0 of `word_topic`.
    pub word_base: u32,
    /// `K` topic totals.
    pub topic_totals: &'a mut CudaSlice<u32>,
}

/// Shapes of a validated call.
struct Shape {
    n: usize,
    doc_rows: usize,
    word_lo: u64,
    word_hi: u64,
}

/// Host-side checks shared by both wrappers (lengths, params, devices), in the CPU's
/// order.
fn validate_host(
    gpu: &Gpu,
    params: &LdaParams,
    tokens: &DeviceTokens,
    topics: &DeviceTopics,
    counts: DeviceCounts<'_>,
) -> Result<Shape, KernelError> {
    let DeviceCounts {
        doc_topic,
        word_topic,
        word_base,
        topic_totals: totals,
    } = counts;
    params.validate()?;
    let k = params.topics;
    let n = tokens.len();
    check_len("topics", n, topics.len())?;
    check_len("topic_totals", k, totals.len())?;
    let doc_rows = doc_topic.len() / k;
    check_len("doc_topic", doc_rows * k, doc_topic.len())?;
    let word_rows = word_topic.len() / k;
    check_len("word_topic", word_rows * k, word_topic.len())?;
    check_device(gpu, "docs", &tokens.docs)?;
    check_device(gpu, "words", &tokens.words)?;
    check_device(gpu, "topics", &topics.buf)?;
    check_device(gpu, "doc_topic", doc_topic)?;
    check_device(gpu, "word_topic", word_topic)?;
    check_device(gpu, "topic_totals", totals)?;
    let word_lo = u64::from(word_base);
    let word_hi = (word_lo + word_rows as u64).min(params.vocab as u64);
    Ok(Shape {
        n,
        doc_rows,
        word_lo,
        word_hi,
    })
}

/// Splits a bad-input key `(kind << 56) | position`.
fn split_key(key: u64) -> (u64, usize) {
    (key >> 56, (key & ((1u64 << 56) - 1)) as usize)
}

/// Runs a check kernel that `atomicMin`s a bad-input key into a fresh `u64` flag, waits
/// for it, and returns the key found (`None` when everything passed).
pub(crate) fn first_bad(
    gpu: &Gpu,
    launch: impl FnOnce(&mut CudaSlice<u64>) -> Result<(), KernelError>,
) -> Result<Option<(u64, usize)>, KernelError> {
    let mut flag = gpu.upload(&[u64::MAX])?;
    launch(&mut flag)?;
    let key = gpu.download(&flag)?;
    Ok(key
        .first()
        .copied()
        .filter(|&k| k != u64::MAX)
        .map(split_key))
}

/// One element of a device buffer, as `u64` (for error reports).
pub(crate) fn value_at(
    gpu: &Gpu,
    buf: &CudaSlice<u32>,
    position: usize,
) -> Result<u64, KernelError> {
    let v = gpu
        .stream()
        .clone_dtoh(&buf.slice(position..position + 1))
        .map_err(driver_err("download bad value"))?;
    Ok(v.first().map_or(u64::MAX, |&x| u64::from(x)))
}

/// `(min, max)` of a device buffer (`None` when empty); waits for the stream.
fn device_range(gpu: &Gpu, buf: &CudaSlice<u32>) -> Result<Option<(u32, u32)>, KernelError> {
    let n = buf.len();
    if n == 0 {
        return Ok(None);
    }
    let f = gpu.function(&SOURCE, "harp_lda_u32_range")?;
    let mut range = gpu.upload(&[u32::MAX, 0])?;
    let n64 = n as u64;
    let mut launch = gpu.stream().launch_builder(&f);
    launch.arg(buf).arg(&n64).arg(&mut range);
    // SAFETY: arguments match (const u32*, u64, u32*); buf holds n elements, range two.
    unsafe { launch.launch(gpu.grid_stride_config(n)) }
        .map_err(driver_err("launch harp_lda_u32_range"))?;
    match gpu.download(&range)?.as_slice() {
        &[lo, hi] => Ok(Some((lo, hi))),
        _ => Err(KernelError::Cuda {
            op: "download id range",
            message: "expected two values".to_string(),
        }),
    }
}

/// Makes sure every id is valid for this call: `O(1)` from the recorded ranges; when that
/// fails, the exact device check maps the first bad token to the CPU's error.
fn check_ids(
    gpu: &Gpu,
    params: &LdaParams,
    tokens: &DeviceTokens,
    topics: &DeviceTopics,
    shape: &Shape,
) -> Result<(), KernelError> {
    let k = params.topics;
    if shape.n == 0
        || (tokens.fits(shape.doc_rows, shape.word_lo, shape.word_hi) && topics.bound <= k as u64)
    {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_lda_check_tokens")?;
    let bad = first_bad(gpu, |flag| {
        let (n, rows, lo, hi) = (
            shape.n as u64,
            shape.doc_rows as u64,
            shape.word_lo,
            shape.word_hi,
        );
        let k32 = k as u32; // validate: topics <= u32::MAX
        let mut launch = gpu.stream().launch_builder(&f);
        launch
            .arg(&tokens.docs)
            .arg(&tokens.words)
            .arg(&topics.buf)
            .arg(&n)
            .arg(&rows)
            .arg(&lo)
            .arg(&hi)
            .arg(&k32)
            .arg(&mut *flag);
        // SAFETY: arguments match (const u32*, const u32*, const u32*, u64, u64, u64, u64,
        // u32, u64*); the three token buffers hold n elements, flag one; the kernel reads
        // indices < n only.
        unsafe { launch.launch(gpu.grid_stride_config(shape.n)) }
            .map_err(driver_err("launch harp_lda_check_tokens"))?;
        Ok(())
    })?;
    // Nothing found: the ranges were conservative and every id checked valid.
    let Some((kind, position)) = bad else {
        return Ok(());
    };
    let (what, buf) = match kind {
        0 => ("docs", &tokens.docs),
        1 => ("words", &tokens.words),
        _ => ("topics", &topics.buf),
    };
    Err(KernelError::IndexOutOfRange {
        what,
        position,
        index: value_at(gpu, buf, position)?,
    })
}

/// One full wave of `f` (as many blocks as are resident at once, from the occupancy API),
/// or fewer when `blocks_needed` is smaller.
fn wave_config(
    gpu: &Gpu,
    f: &CudaFunction,
    threads: usize,
    shared_bytes: usize,
    blocks_needed: usize,
) -> Result<LaunchConfig, KernelError> {
    // The occupancy query acts on the calling thread's current context: make it ours.
    gpu.context()
        .bind_to_thread()
        .map_err(driver_err("bind context"))?;
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(threads as u32, shared_bytes, None)
        .map_err(driver_err("occupancy query"))?
        .max(1);
    let wave = (gpu.sm_count() as usize).saturating_mul(per_sm as usize);
    let blocks = blocks_needed.clamp(1, wave.max(1));
    Ok(LaunchConfig {
        grid_dim: (u32::try_from(blocks).unwrap_or(u32::MAX), 1, 1),
        block_dim: (threads as u32, 1, 1),
        shared_mem_bytes: shared_bytes as u32,
    })
}

/// [`crate::lda::sample_parallel`] on the device: `new_topics[i]` ← token `i`'s topic
/// sampled from the fixed counts with its own assignment excluded, using `uniforms[i]`.
/// Bit-for-bit the CPU version's topics; the kernel depends on `K`
/// ([`sample_variant`]). On success `new_topics` has bound `K`.
///
/// # Errors
/// As the CPU version (same variants, same first bad position; uniforms are checked when
/// built, see the [module docs](self)), plus [`KernelError::Cuda`] if a buffer is on
/// another device or a launch fails and [`KernelError::NvrtcUnavailable`] /
/// [`KernelError::CudaCompile`] on first use if the kernels cannot be compiled. On error
/// `new_topics` is untouched.
pub fn sample_parallel(
    gpu: &Gpu,
    params: &LdaParams,
    tokens: &DeviceTokens,
    topics: &DeviceTopics,
    counts: DeviceCounts<'_>,
    uniforms: &DeviceUniforms,
    new_topics: &mut DeviceTopics,
) -> Result<(), KernelError> {
    let variant = sample_variant(params.topics);
    sample_parallel_with(
        variant, gpu, params, tokens, topics, counts, uniforms, new_topics,
    )
}

/// [`sample_parallel`] with the kernel `variant` instead of [`sample_variant`]'s choice
/// (one of [`sample_variants`]`(K)`); the same topics whichever it is. For tests and
/// benchmarks that compare the variants.
///
/// # Errors
/// As [`sample_parallel`], plus [`KernelError::InvalidShape`] (`"topics"`) if `variant`
/// cannot sample `K` topics (nothing is launched or written).
#[allow(clippy::too_many_arguments)]
pub fn sample_parallel_with(
    variant: SampleVariant,
    gpu: &Gpu,
    params: &LdaParams,
    tokens: &DeviceTokens,
    topics: &DeviceTopics,
    counts: DeviceCounts<'_>,
    uniforms: &DeviceUniforms,
    new_topics: &mut DeviceTopics,
) -> Result<(), KernelError> {
    // The default kernel (every `sample_parallel` call) needs no list of the alternatives.
    if variant != sample_variant(params.topics)
        && !sample_variants(params.topics).contains(&variant)
    {
        return Err(KernelError::InvalidShape {
            what: "topics",
            reason: "the requested LDA sampling kernel cannot sample this many topics",
        });
    }
    let shape = validate_host(gpu, params, tokens, topics, counts)?;
    let n = shape.n;
    check_device(gpu, "uniforms", &uniforms.buf)?;
    check_device(gpu, "new_topics", &new_topics.buf)?;
    check_ids(gpu, params, tokens, topics, &shape)?;
    check_len("uniforms", n, uniforms.len())?;
    check_len("new_topics", n, new_topics.len())?;
    let k = params.topics;
    if n == 0 {
        new_topics.bound = 0;
        return Ok(());
    }
    let plan = plan(k, variant);
    let f = gpu.function(&SOURCE, plan.kernel)?;
    let cfg = wave_config(
        gpu,
        &f,
        plan.threads,
        plan.shared_bytes,
        n.div_ceil(plan.tokens_per_block),
    )?;
    let (n64, k32, base) = (n as u64, k as u32, counts.word_base);
    let (alpha, beta, vbeta) = (params.alpha, params.beta, params.vbeta());
    let mut launch = gpu.stream().launch_builder(&f);
    launch
        .arg(&tokens.docs)
        .arg(&tokens.words)
        .arg(&topics.buf)
        .arg(&uniforms.buf)
        .arg(counts.doc_topic)
        .arg(counts.word_topic)
        .arg(counts.topic_totals)
        .arg(&mut new_topics.buf)
        .arg(&n64)
        .arg(&k32)
        .arg(&base)
        .arg(&alpha)
        .arg(&beta)
        .arg(&vbeta);
    // SAFETY: every sampling kernel takes (7 const pointers, u32*, u64, u32, u32, float,
    // float, float). check_ids established doc < doc rows, word_base <= word <
    // word_base + word rows and topic < K for every token, so every row read is inside
    // doc_topic / word_topic, and LeanTiles' rewrite of a token's own-topic cell (which
    // indexes the token's rows and its shared-memory row by its topic) stays in that row;
    // totals has K entries; the token buffers, uniforms
    // and new_topics hold n; the dynamic shared memory is what the kernel lays out for K
    // (plan), at most 48 KiB; block sizes are multiples of 32; sample_variants(K) holds
    // `variant`, so the kernel handles K.
    unsafe { launch.launch(cfg) }.map_err(driver_err("launch LDA sampling kernel"))?;
    new_topics.bound = k as u64;
    Ok(())
}

/// [`crate::lda::rebuild_counts`] on the device: zeroes the three tables and adds every
/// token (atomics; topic totals through a per-block shared-memory histogram for
/// `K <= 4096`).
///
/// # Errors
/// As the CPU version, plus [`KernelError::Cuda`] / [`KernelError::NvrtcUnavailable`] /
/// [`KernelError::CudaCompile`] as for [`sample_parallel`]. On error nothing is written.
pub fn rebuild_counts(
    gpu: &Gpu,
    params: &LdaParams,
    tokens: &DeviceTokens,
    topics: &DeviceTopics,
    counts: DeviceCountsMut<'_>,
) -> Result<(), KernelError> {
    let view = DeviceCounts {
        doc_topic: counts.doc_topic,
        word_topic: counts.word_topic,
        word_base: counts.word_base,
        topic_totals: counts.topic_totals,
    };
    let shape = validate_host(gpu, params, tokens, topics, view)?;
    check_ids(gpu, params, tokens, topics, &shape)?;
    if u32::try_from(shape.n).is_err() {
        return Err(KernelError::ShapeOverflow { what: "tokens" });
    }
    let DeviceCountsMut {
        doc_topic,
        word_topic,
        word_base,
        topic_totals,
    } = counts;
    let stream = gpu.stream();
    stream
        .memset_zeros(doc_topic)
        .map_err(driver_err("memset doc_topic"))?;
    stream
        .memset_zeros(word_topic)
        .map_err(driver_err("memset word_topic"))?;
    stream
        .memset_zeros(topic_totals)
        .map_err(driver_err("memset topic_totals"))?;
    if shape.n == 0 {
        return Ok(());
    }
    let f = gpu.function(&SOURCE, "harp_lda_count_tokens")?;
    let k = params.topics;
    let shared = k <= SHARED_TOTALS_MAX_TOPICS;
    let base = gpu.grid_stride_config(shape.n);
    let cfg = LaunchConfig {
        shared_mem_bytes: if shared { (k * 4) as u32 } else { 0 },
        ..base
    };
    let (n64, k32, shared_flag) = (shape.n as u64, k as u32, i32::from(shared));
    let mut launch = stream.launch_builder(&f);
    launch
        .arg(&tokens.docs)
        .arg(&tokens.words)
        .arg(&topics.buf)
        .arg(&n64)
        .arg(&k32)
        .arg(&word_base)
        .arg(&mut *doc_topic)
        .arg(&mut *word_topic)
        .arg(&mut *topic_totals)
        .arg(&shared_flag);
    // SAFETY: arguments match (3 const u32*, u64, u32, u32, 3 u32*, int); check_ids
    // established every doc row, word id and topic (< K) valid, so every counter index is
    // inside its table; the shared histogram has K entries when enabled (K * 4 <= 16 KiB).
    unsafe { launch.launch(cfg) }.map_err(driver_err("launch harp_lda_count_tokens"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kernel a variant launches exists in `lda.cu`, and its launch shape is sound:
    /// whole warps, at most 48 KiB of dynamic shared memory (the host's own checks; the
    /// kernels themselves only run on a GPU).
    #[test]
    fn every_variants_plan_launches_a_kernel_of_the_source_within_the_limits() {
        let mut kernels = std::collections::BTreeSet::new();
        for topics in 1..=3000 {
            for variant in sample_variants(topics) {
                let plan = plan(topics, variant);
                let declaration = format!("__global__ void {}(", plan.kernel);
                assert!(
                    SOURCE.code.contains(&declaration),
                    "K={topics} {variant:?}: no kernel {} in lda.cu",
                    plan.kernel
                );
                assert!(
                    plan.threads > 0 && plan.threads.is_multiple_of(WARP),
                    "K={topics} {variant:?}"
                );
                assert!(plan.threads <= SAMPLE_THREADS, "K={topics} {variant:?}");
                assert!(
                    plan.shared_bytes <= SHARED_LIMIT_BYTES,
                    "K={topics} {variant:?}"
                );
                assert!(plan.tokens_per_block > 0, "K={topics} {variant:?}");
                kernels.insert(plan.kernel);
            }
        }
        // Every sampling kernel of the source is reachable.
        assert_eq!(kernels.len(), 7, "{kernels:?}");
    }

    /// A 16-token tile takes half a 32-token tile's weights and addresses, so at least as
    /// many warps fit in a block; at `K = 100` more than twice as many (7 against 3).
    #[test]
    fn a_16_token_tile_fits_twice_the_warps_where_shared_memory_limits_them() {
        for topics in 33..=CHUNKED_TILES_MAX_TOPICS {
            assert_eq!(
                2 * lean_tile16_bytes(topics),
                lean_tile_bytes(topics),
                "K={topics}"
            );
            let (
                Some(SampleVariant::LeanTiles {
                    warps_per_block: w32,
                }),
                Some(SampleVariant::LeanTiles16 {
                    warps_per_block: w16,
                }),
            ) = (lean_tiles(topics), lean_tiles16(topics))
            else {
                panic!("K={topics}: both lean tiles sample it");
            };
            assert!(w16 >= w32, "K={topics}");
        }
        assert_eq!(
            lean_tiles(100),
            Some(SampleVariant::LeanTiles { warps_per_block: 3 })
        );
        assert_eq!(
            lean_tiles16(100),
            Some(SampleVariant::LeanTiles16 { warps_per_block: 7 })
        );
    }

    /// A lean tile's row addresses start 8-byte aligned in every warp's region (the kernel
    /// reads them as 64-bit words): the inverses, the addresses and each tile are whole
    /// numbers of 8-byte words.
    #[test]
    fn lean_tile_regions_keep_the_row_addresses_aligned() {
        for topics in 33..=CHUNKED_TILES_MAX_TOPICS {
            assert_eq!(inverse_bytes(topics) % 8, 0, "K={topics}");
            assert_eq!(lean_tile_bytes(topics) % 8, 0, "K={topics}");
            assert_eq!(lean_tile16_bytes(topics) % 8, 0, "K={topics}");
        }
    }
}
