// LDA kernels of harp-kernels (wrappers: kernels/src/cuda/lda.rs). Layouts and the exact
// arithmetic of the parallel sampling step are documented in kernels/src/lda.rs and
// kernels/src/lda/parallel.rs; the CPU version there performs the same f32 operations in
// the same order, so every float operation here is an explicit round-to-nearest
// intrinsic (no FMA contraction, IEEE reciprocal), and every sampling kernel below yields
// bit-for-bit the CPU's topics.
//
//   harp_lda_check_tokens     first bad token (doc row, word id / block, topic), as a key
//   harp_lda_u32_range        min and max of a u32 buffer (ids of device-built tokens)
//   harp_lda_uniforms         counter-based uniforms in [0, 1) (host twin in lda.rs)
//   harp_lda_sample_small     K <= 32: a warp samples a tile of 32 tokens; it computes the
//                             tile's 32*K weights with coalesced row reads into shared
//                             memory, then each lane scans and samples its own token
//   harp_lda_sample_tiles     32 < K <= 256: as sample_small, the lane's scan chunk by chunk,
//                             cumulative values written back to shared memory
//   harp_lda_sample_tiles_lean  the same in fewer instructions (row addresses in shared
//                             memory, the own topic's cell rewritten once per token,
//                             unpredicated full batches and chunks, 4-wide search)
//   harp_lda_sample_tiles_lean16  tiles_lean with 16-token tiles: half the shared memory
//                             per warp, so twice the warps per SM; lanes 16-31 help with
//                             the weights and idle in the scan and search
//   harp_lda_sample_warp_reg  32 < K <= 256: one warp per token, every row chunk loaded at
//                             once, cumulative values kept in registers, one ballot per chunk
//   harp_lda_sample_warp_smem 256 < K (while shared memory allows): as above, cumulative
//                             values in shared memory, loads issued 8 chunks at a time
//   harp_lda_sample_parallel  any K (beyond the shared-memory limit): one warp per token,
//                             weights recomputed in the search pass
//   harp_lda_count_tokens     adds every token to the (zeroed) count tables
//
// Summation order (all variants): topics in chunks of 32; within a chunk a 32-wide
// Hillis-Steele inclusive scan (offsets 1, 2, 4, 8, 16; zeros past K); the total adds the
// chunks' last prefixes in chunk order; a token takes the first k whose value
// fadd(running sum before its chunk, its in-chunk prefix) exceeds u * total, else K - 1.
//
// The sampling kernels trust their ids: the wrappers only launch them once every doc row,
// word id (inside the word block) and topic (< K) is known to be valid, and uniforms in
// [0, 1) (see the module docs of lda.rs). Topics are only compared, never used as indices.
//
// Bad-input keys: (kind << 56) | position, combined with atomicMin, so the smallest kind
// wins and, within a kind, the first position -- the order the CPU validation reports.
// *first_bad must hold ~0ull before the launch.

#define HARP_FULL_MASK 0xffffffffu
// Chunks whose loads a warp issues together (and, for K <= 8 * 32, keeps in registers).
#define HARP_LDA_GROUP 8u

// The parameters every sampling kernel takes (the wrappers in lda.rs push them in this
// order), and the same names passed on to a shared body.
#define HARP_LDA_SAMPLE_PARAMS                                                            \
    const unsigned int* __restrict__ docs, const unsigned int* __restrict__ words,        \
    const unsigned int* __restrict__ topics, const float* __restrict__ uniforms,          \
    const unsigned int* __restrict__ doc_topic, const unsigned int* __restrict__ word_topic, \
    const unsigned int* __restrict__ totals, unsigned int* __restrict__ new_topics,       \
    unsigned long long n, unsigned int topic_count, unsigned int word_base, float alpha,  \
    float beta, float vbeta
#define HARP_LDA_SAMPLE_ARGS                                                              \
    docs, words, topics, uniforms, doc_topic, word_topic, totals, new_topics, n,          \
    topic_count, word_base, alpha, beta, vbeta

// Dynamic shared memory of the sampling kernels (each lays it out as documented there).
extern __shared__ float harp_lda_smem[];

extern "C" __global__ void harp_lda_check_tokens(const unsigned int* __restrict__ docs,
                                                 const unsigned int* __restrict__ words,
                                                 const unsigned int* __restrict__ topics,
                                                 unsigned long long n,
                                                 unsigned long long doc_rows,
                                                 unsigned long long word_lo,
                                                 unsigned long long word_hi,
                                                 unsigned int topic_count,
                                                 unsigned long long* __restrict__ first_bad) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        unsigned long long key = ~0ull;
        unsigned long long w = words[i];
        if (docs[i] >= doc_rows) {
            key = i;
        } else if (w < word_lo || w >= word_hi) {
            key = (1ull << 56) | i;
        } else if (topics[i] >= topic_count) {
            key = (2ull << 56) | i;
        }
        if (key != ~0ull) atomicMin(first_bad, key);
    }
}

// range[0] = min(range[0], a[..]), range[1] = max(range[1], a[..]); the host initializes
// range to {~0u, 0}.
extern "C" __global__ void harp_lda_u32_range(const unsigned int* __restrict__ a,
                                              unsigned long long n,
                                              unsigned int* __restrict__ range) {
    unsigned int lo = ~0u, hi = 0u;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        unsigned int v = a[i];
        lo = min(lo, v);
        hi = max(hi, v);
    }
#pragma unroll
    for (unsigned int off = 16; off > 0; off >>= 1) {
        lo = min(lo, __shfl_xor_sync(HARP_FULL_MASK, lo, off));
        hi = max(hi, __shfl_xor_sync(HARP_FULL_MASK, hi, off));
    }
    if ((threadIdx.x & 31u) == 0u) {
        atomicMin(&range[0], lo);
        atomicMax(&range[1], hi);
    }
}

// SplitMix64's finalizer (Steele, Lea, Flood 2014).
__device__ __forceinline__ unsigned long long harp_splitmix64(unsigned long long x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// out[i] = top 24 bits of splitmix64(seed ^ splitmix64(i)) * 2^-24: exact in f32, in [0, 1).
extern "C" __global__ void harp_lda_uniforms(float* __restrict__ out, unsigned long long n,
                                             unsigned long long seed) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        unsigned long long h = harp_splitmix64(seed ^ harp_splitmix64(i));
        out[i] = __fmul_rn(__uint2float_rn((unsigned int)(h >> 40)), 5.9604644775390625e-8f);
    }
}

// Weight of topic k for a token whose own assignment z is excluded (saturating at 0):
// ((n_dk + a) * (n_wk + b)) * (1 / (n_k + vb)); 0 past the last topic.
__device__ __forceinline__ float harp_lda_weight(unsigned int k, unsigned int topic_count,
                                                 unsigned int z,
                                                 const unsigned int* __restrict__ drow,
                                                 const unsigned int* __restrict__ wrow,
                                                 const unsigned int* __restrict__ totals,
                                                 float alpha, float beta, float vbeta) {
    if (k >= topic_count) return 0.0f;
    unsigned int e = (k == z) ? 1u : 0u;
    unsigned int nd = drow[k], nw = wrow[k], nt = totals[k];
    nd = nd >= e ? nd - e : 0u;
    nw = nw >= e ? nw - e : 0u;
    nt = nt >= e ? nt - e : 0u;
    float a = __fadd_rn(__uint2float_rn(nd), alpha);
    float b = __fadd_rn(__uint2float_rn(nw), beta);
    float inv = __frcp_rn(__fadd_rn(__uint2float_rn(nt), vbeta));
    return __fmul_rn(__fmul_rn(a, b), inv);
}

// The same weight from loaded counts and the precomputed 1 / (n_k - own + vb).
__device__ __forceinline__ float harp_lda_weight_inv(unsigned int nd, unsigned int nw,
                                                     unsigned int own, float inv, float alpha,
                                                     float beta) {
    nd = nd >= own ? nd - own : 0u;
    nw = nw >= own ? nw - own : 0u;
    float a = __fadd_rn(__uint2float_rn(nd), alpha);
    float b = __fadd_rn(__uint2float_rn(nw), beta);
    return __fmul_rn(__fmul_rn(a, b), inv);
}

// inv[k] = 1 / (n_k + vb), inv[K + k] = 1 / (sat(n_k - 1) + vb), for the whole block;
// ends with __syncthreads().
__device__ __forceinline__ void harp_lda_inverses(float* inv,
                                                  const unsigned int* __restrict__ totals,
                                                  unsigned int topic_count, float vbeta) {
    for (unsigned int k = threadIdx.x; k < topic_count; k += blockDim.x) {
        unsigned int nt = totals[k];
        unsigned int nt1 = nt >= 1u ? nt - 1u : 0u;
        inv[k] = __frcp_rn(__fadd_rn(__uint2float_rn(nt), vbeta));
        inv[topic_count + k] = __frcp_rn(__fadd_rn(__uint2float_rn(nt1), vbeta));
    }
    __syncthreads();
}

// Inclusive Hillis-Steele scan across the warp (offsets 1, 2, 4, 8, 16).
__device__ __forceinline__ float harp_warp_scan(float v, unsigned int lane) {
#pragma unroll
    for (unsigned int off = 1; off < 32; off <<= 1) {
        float up = __shfl_up_sync(HARP_FULL_MASK, v, off);
        if (lane >= off) v = __fadd_rn(v, up);
    }
    return v;
}

// Phase 1 of the tile kernels: the weights of a tile's `count` tokens into wts (token
// t's row at t * stride, stride = K | 1), lane-contiguous cells (t, k), 8 cells per lane in
// flight. Lanes 0..count hold their token's document row d, word row w and topic z. Trip
// counts are warp-uniform (the shuffles need every lane). Ends with __syncwarp().
__device__ __forceinline__ void harp_lda_tile_weights(
    float* wts, const float* inv, const unsigned int* __restrict__ doc_topic,
    const unsigned int* __restrict__ word_topic, unsigned int count, unsigned int K,
    unsigned int lane, unsigned int d, unsigned int w, unsigned int z, float alpha,
    float beta) {
    const unsigned int stride = K | 1u;
    // Advancing a flat cell index (t * K + k) by 32 (for K > 32: t stays, k += 32, and
    // one wrap at most, since 32 < K).
    const unsigned int step_t = 32u / K, step_k = 32u % K;
    const unsigned int cells = count * K;
    unsigned int t = lane / K, k = lane % K;
    for (unsigned int base = 0; base < cells; base += 256u) {
        // Per cell: both counts and a packed code, (shared index of the weight) |
        // (index of its reciprocal: own * K + k) << 16.
        unsigned int nd[8], nw[8], code[8];
#pragma unroll
        for (unsigned int j = 0; j < 8u; ++j) {
            const bool active = base + 32u * j + lane < cells;
            const unsigned int src = t & 31u;
            const unsigned int dt = __shfl_sync(HARP_FULL_MASK, d, src);
            const unsigned int wt = __shfl_sync(HARP_FULL_MASK, w, src);
            const unsigned int zt = __shfl_sync(HARP_FULL_MASK, z, src);
            nd[j] = active ? doc_topic[(size_t)dt * K + k] : 0u;
            nw[j] = active ? word_topic[(size_t)wt * K + k] : 0u;
            const unsigned int own = k == zt ? 1u : 0u;
            code[j] = active ? (t * stride + k) | ((own * K + k) << 16) : ~0u;
            t += step_t;
            k += step_k;
            if (k >= K) {
                k -= K;
                ++t;
            }
        }
#pragma unroll
        for (unsigned int j = 0; j < 8u; ++j) {
            if (code[j] != ~0u) {
                const unsigned int r = code[j] >> 16;
                const unsigned int own = r >= K ? 1u : 0u;
                wts[code[j] & 0xffffu] =
                    harp_lda_weight_inv(nd[j], nw[j], own, inv[r], alpha, beta);
            }
        }
    }
    __syncwarp();
}

// The inclusive Hillis-Steele scan of W values in registers (W = 32: the order of
// harp_warp_scan, s[j] = s[j] + s[j - off] with the values before the pass). For W < 32 it
// is the first W values of the 32-wide scan of s followed by zeros (W a power of two):
// the same bits, since those positions only ever read lower ones, in log2(W) passes. Its
// last value then equals the 32-wide scan's s[31], which sums the same tree with zeros
// added (x + 0 is x).
template <unsigned int W>
__device__ __forceinline__ void harp_lda_lane_scan(float* s) {
#pragma unroll
    for (unsigned int off = 1; off < W; off <<= 1) {
#pragma unroll
        for (unsigned int j = W - 1u; j >= off; --j) s[j] = __fadd_rn(s[j], s[j - off]);
    }
}

// Phase 2 of harp_lda_sample_small (K <= 32): the token's topic from its row of K weights,
// scanned in registers as one chunk (running sum 0).
__device__ __forceinline__ unsigned int harp_lda_sample_row_small(const float* row,
                                                                  unsigned int K, float u) {
    float s[32];
#pragma unroll
    for (unsigned int j = 0; j < 32u; ++j) s[j] = j < K ? row[j] : 0.0f;
    harp_lda_lane_scan<32>(s);
    const float target = __fmul_rn(u, s[31]);
    unsigned int result = K - 1u;
    bool found = false;
#pragma unroll
    for (unsigned int j = 0; j < 32u; ++j) {
        const bool hit = j < K && s[j] > target;
        if (hit && !found) {
            result = j;
            found = true;
        }
    }
    return result;
}

// Phase 2 of harp_lda_sample_tiles (K > 32): the row scanned chunk by chunk in registers,
// the cumulative values fadd(running, prefix) written back over the weights, then searched
// in order.
__device__ __forceinline__ unsigned int harp_lda_sample_row_chunked(float* row, unsigned int K,
                                                                    float u) {
    const unsigned int chunks = (K + 31u) >> 5;
    float running = 0.0f;
    for (unsigned int c = 0; c < chunks; ++c) {
        const unsigned int k0 = c << 5;
        float s[32];
#pragma unroll
        for (unsigned int j = 0; j < 32u; ++j) s[j] = k0 + j < K ? row[k0 + j] : 0.0f;
        harp_lda_lane_scan<32>(s);
#pragma unroll
        for (unsigned int j = 0; j < 32u; ++j) {
            if (k0 + j < K) row[k0 + j] = __fadd_rn(running, s[j]);
        }
        running = __fadd_rn(running, s[31]);
    }
    const float target = __fmul_rn(u, running);
    for (unsigned int k = 0; k < K; ++k) {
        if (row[k] > target) return k;
    }
    return K - 1u;
}

// ---- harp_lda_sample_tiles_lean: harp_lda_sample_tiles in fewer instructions ----------
// The tile kernels issue instructions faster than memory delivers rows at K ~ 100 (Nsight
// Compute, docs/KERNELS.md), so this variant cuts the instructions per cell and per token
// without changing a single float operation:
//  * each lane publishes its token's document and word row addresses (64-bit) in shared
//    memory once per tile; a cell reads them there (one base register, immediate
//    offsets) instead of three shuffles and a 64-bit multiply per row;
//  * a cell computes its weight as if it were not its token's own topic (no topic
//    compare, no saturating subtraction), and each lane then rewrites the one cell of its
//    token's own topic with the assignment excluded: the same weight, once per token;
//  * the batches of 256 cells that a tile fills entirely run without bounds tests, and so
//    do the scan's full 32-topic chunks; the last, partial chunk is scanned over the
//    fewest registers that hold it (4 at K = 100, not 32);
//  * the search tests four cumulative values per step.
// Per 8 cells a lane issues 212 instructions here against 577 in harp_lda_tile_weights,
// per full chunk 229 against 322, per 4 searched values 20 against 36 (sm_90 SASS,
// scripts/sass.sh). Shared memory per warp: 64 64-bit words, then 32 rows of (K | 1)
// weights; the block starts with the 2K inverses.

// The first k < K with row[k] > target, else K - 1 (the linear search of
// harp_lda_sample_row_chunked, four values per step).
__device__ __forceinline__ unsigned int harp_lda_first_above(const float* row, unsigned int K,
                                                             float target) {
    unsigned int k = 0u;
    for (; k + 4u <= K; k += 4u) {
        const float a = row[k], b = row[k + 1u], c = row[k + 2u], d = row[k + 3u];
        if (a > target || b > target || c > target || d > target) {
            return a > target ? k : b > target ? k + 1u : c > target ? k + 2u : k + 3u;
        }
    }
    for (; k < K; ++k) {
        if (row[k] > target) return k;
    }
    return K - 1u;
}

// One chunk of harp_lda_sample_row_chunked_lean: the cumulative values fadd(running,
// prefix) of row[k0..k0 + W) written back over the weights (every one below K unless
// TAIL; a tail chunk's values past K are zeros, W the power of two that covers the rest of
// the row); returns the running sum after the chunk.
template <unsigned int W, bool TAIL>
__device__ __forceinline__ float harp_lda_scan_chunk(float* row, unsigned int k0,
                                                     unsigned int K, float running) {
    float s[W];
#pragma unroll
    for (unsigned int j = 0; j < W; ++j) s[j] = !TAIL || k0 + j < K ? row[k0 + j] : 0.0f;
    harp_lda_lane_scan<W>(s);
#pragma unroll
    for (unsigned int j = 0; j < W; ++j) {
        if (!TAIL || k0 + j < K) row[k0 + j] = __fadd_rn(running, s[j]);
    }
    return __fadd_rn(running, s[W - 1u]);
}

// harp_lda_sample_row_chunked with the full chunks scanned without bounds tests and the
// last, partial one (K % 32 topics) over the fewest registers that hold it.
__device__ __forceinline__ unsigned int harp_lda_sample_row_chunked_lean(float* row,
                                                                         unsigned int K,
                                                                         float u) {
    const unsigned int full = K >> 5, rest = K & 31u, k0 = full << 5;
    float running = 0.0f;
    for (unsigned int c = 0; c < full; ++c) {
        running = harp_lda_scan_chunk<32, false>(row, c << 5, K, running);
    }
    if (rest == 0u) {
    } else if (rest <= 2u) {
        running = harp_lda_scan_chunk<2, true>(row, k0, K, running);
    } else if (rest <= 4u) {
        running = harp_lda_scan_chunk<4, true>(row, k0, K, running);
    } else if (rest <= 8u) {
        running = harp_lda_scan_chunk<8, true>(row, k0, K, running);
    } else if (rest <= 16u) {
        running = harp_lda_scan_chunk<16, true>(row, k0, K, running);
    } else {
        running = harp_lda_scan_chunk<32, true>(row, k0, K, running);
    }
    const float target = __fmul_rn(u, running);
    return harp_lda_first_above(row, K, target);
}

// One batch of 32 * 8 cells of harp_lda_tile_weights_lean (TAIL: the tile's last, partly
// past its cells), every weight as if the cell were not its token's own topic. `rows`
// holds the tile's T document row addresses, then its T word row addresses; (t, k) is
// the lane's cell, advanced by 32 per cell (K > 32: one wrap at most).
template <bool TAIL, unsigned int T>
__device__ __forceinline__ void harp_lda_tile_batch(
    float* wts, const float* inv, const unsigned long long* rows, unsigned int cells,
    unsigned int base, unsigned int K, unsigned int stride, unsigned int lane, unsigned int& t,
    unsigned int& k, float alpha, float beta) {
    unsigned int nd[8], nw[8], slot[8], topic[8];
#pragma unroll
    for (unsigned int j = 0; j < 8u; ++j) {
        const bool active = !TAIL || base + 32u * j + lane < cells;
        const unsigned long long* row = rows + (TAIL ? (t & (T - 1u)) : t);
        nd[j] = active ? __ldg(reinterpret_cast<const unsigned int*>(row[0]) + k) : 0u;
        nw[j] = active ? __ldg(reinterpret_cast<const unsigned int*>(row[T]) + k) : 0u;
        slot[j] = active ? t * stride + k : ~0u;
        topic[j] = k;
        k += 32u;
        if (k >= K) {
            k -= K;
            ++t;
        }
    }
#pragma unroll
    for (unsigned int j = 0; j < 8u; ++j) {
        if (!TAIL || slot[j] != ~0u) {
            wts[slot[j]] = harp_lda_weight_inv(nd[j], nw[j], 0u, inv[topic[j]], alpha, beta);
        }
    }
}

// Phase 1 of harp_lda_sample_tiles_lean (T = 32 tokens a tile) and _lean16 (T = 16):
// harp_lda_tile_weights for 32 < K, the tile's rows addressed through `rows` (2T 64-bit
// words of this warp, published by lanes 0..T). The cells compute every
// weight as if it were not its token's own topic (no topic compare, no saturating
// subtraction); then each lane rewrites its own token's cell (t, z) with the assignment
// excluded: the same weight harp_lda_tile_weights computes there. Ends with __syncwarp().
template <unsigned int T>
__device__ __forceinline__ void harp_lda_tile_weights_lean(
    float* wts, const float* inv, unsigned long long* rows,
    const unsigned int* __restrict__ doc_topic, const unsigned int* __restrict__ word_topic,
    unsigned int count, unsigned int K, unsigned int lane, unsigned int d, unsigned int w,
    unsigned int z, float alpha, float beta) {
    const unsigned int stride = K | 1u;
    const unsigned int* drow = doc_topic + (size_t)d * K;
    const unsigned int* wrow = word_topic + (size_t)w * K;
    if (lane < T) {
        rows[lane] = reinterpret_cast<unsigned long long>(drow);
        rows[T + lane] = reinterpret_cast<unsigned long long>(wrow);
    }
    __syncwarp();
    const unsigned int cells = count * K;
    unsigned int t = 0u, k = lane, base = 0u;
    for (; base + 256u <= cells; base += 256u) {
        harp_lda_tile_batch<false, T>(wts, inv, rows, cells, base, K, stride, lane, t, k, alpha,
                                      beta);
    }
    if (base < cells) {
        harp_lda_tile_batch<true, T>(wts, inv, rows, cells, base, K, stride, lane, t, k, alpha,
                                     beta);
    }
    __syncwarp();
    if (lane < count) {
        wts[lane * stride + z] =
            harp_lda_weight_inv(__ldg(drow + z), __ldg(wrow + z), 1u, inv[K + z], alpha, beta);
    }
    __syncwarp();
}

// How a tile kernel samples its tokens (harp_lda_sample_tiles_of).
#define HARP_LDA_TILES_SMALL 0
#define HARP_LDA_TILES_CHUNKED 1
#define HARP_LDA_TILES_LEAN 2
#define HARP_LDA_TILES_LEAN16 3

// The tile kernels: a warp takes a tile of T tokens (32; LEAN16: 16; grid-stride over
// tiles), writes the tile's weights to shared memory (harp_lda_tile_weights, or
// harp_lda_tile_weights_lean), then lane t < T samples token t from its row: in registers
// for K <= 32 (SMALL), chunk by chunk for larger K (CHUNKED, LEAN, LEAN16). Dynamic shared
// memory (floats): 2K inverses, then per warp (LEAN, LEAN16: 2T 64-bit row addresses,
// then) T rows of (K | 1) weights (an odd row stride, so lane t reading row t is
// conflict-free). blockDim.x must be a multiple of 32.
template <int MODE>
__device__ __forceinline__ void harp_lda_sample_tiles_of(HARP_LDA_SAMPLE_PARAMS) {
    const unsigned int K = topic_count;
    float* inv = harp_lda_smem;
    harp_lda_inverses(inv, totals, K, vbeta);
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned int stride = K | 1u;
    constexpr bool lean = MODE == HARP_LDA_TILES_LEAN || MODE == HARP_LDA_TILES_LEAN16;
    constexpr unsigned int T = MODE == HARP_LDA_TILES_LEAN16 ? 16u : 32u;
    // 2T 64-bit words: 4T floats (an even count, so every warp's rows stay 8-byte aligned).
    constexpr unsigned int addresses = lean ? 4u * T : 0u;
    float* region = harp_lda_smem + 2u * K + warp * (addresses + T * stride);
    unsigned long long* rows = reinterpret_cast<unsigned long long*>(region);
    float* wts = region + addresses;
    const unsigned long long tiles = (n + (T - 1u)) / T;
    const unsigned long long warps = (unsigned long long)gridDim.x * (blockDim.x >> 5);
    for (unsigned long long tile = (unsigned long long)blockIdx.x * (blockDim.x >> 5) + warp;
         tile < tiles; tile += warps) {
        const unsigned long long first = tile * T;
        const unsigned long long left = n - first;
        const unsigned int count = left < T ? (unsigned int)left : T;
        const unsigned long long i = first + lane;
        unsigned int d = 0u, w = 0u, z = 0u;
        float u = 0.0f;
        if (lane < count) {
            d = docs[i];
            w = words[i] - word_base;
            z = topics[i];
            u = uniforms[i];
        }
        if (lean) {
            harp_lda_tile_weights_lean<T>(wts, inv, rows, doc_topic, word_topic, count, K, lane,
                                          d, w, z, alpha, beta);
        } else {
            harp_lda_tile_weights(wts, inv, doc_topic, word_topic, count, K, lane, d, w, z,
                                  alpha, beta);
        }
        if (lane < count) {
            float* row = wts + lane * stride;
            new_topics[i] = MODE == HARP_LDA_TILES_SMALL     ? harp_lda_sample_row_small(row, K, u)
                            : MODE == HARP_LDA_TILES_CHUNKED ? harp_lda_sample_row_chunked(row, K, u)
                                                             : harp_lda_sample_row_chunked_lean(row, K, u);
        }
        __syncwarp();
    }
}

// K <= 32.
extern "C" __global__ void harp_lda_sample_small(HARP_LDA_SAMPLE_PARAMS) {
    harp_lda_sample_tiles_of<HARP_LDA_TILES_SMALL>(HARP_LDA_SAMPLE_ARGS);
}

// 32 < K while a warp's tile fits in 48 KiB of shared memory (the host allows K <= 256).
extern "C" __global__ void harp_lda_sample_tiles(HARP_LDA_SAMPLE_PARAMS) {
    harp_lda_sample_tiles_of<HARP_LDA_TILES_CHUNKED>(HARP_LDA_SAMPLE_ARGS);
}

// 32 < K while a warp's tile (and its 512 bytes of row addresses) fits in 48 KiB of shared
// memory (the host allows K <= 256).
extern "C" __global__ void harp_lda_sample_tiles_lean(HARP_LDA_SAMPLE_PARAMS) {
    harp_lda_sample_tiles_of<HARP_LDA_TILES_LEAN>(HARP_LDA_SAMPLE_ARGS);
}

// harp_lda_sample_tiles_lean with 16-token tiles (16 rows of K | 1 weights and 256 bytes
// of row addresses a warp): at K = 100 a warp's tile is 6.6 KiB instead of 13.1, so about
// twice the warps fit on an SM (about 28 against 15) to hide the row loads' latency, for a scan
// and search that use half the lanes. For 32 < K <= 256, as tiles_lean.
extern "C" __global__ void harp_lda_sample_tiles_lean16(HARP_LDA_SAMPLE_PARAMS) {
    harp_lda_sample_tiles_of<HARP_LDA_TILES_LEAN16>(HARP_LDA_SAMPLE_ARGS);
}

// 32 < K. One warp per token (grid-stride; the next token's ids are loaded while this one
// is sampled). Loads of HARP_LDA_GROUP chunks are issued together; the cumulative value
// fadd(running, prefix) of each (chunk, lane) is kept in registers (SMEM_V false, K <= 8 *
// 32) or in shared memory (SMEM_V true). Dynamic shared memory (floats): 2K inverses, then
// (SMEM_V) per warp chunks * 32 cumulative values. blockDim.x must be a multiple of 32.
template <bool SMEM_V>
__device__ __forceinline__ void harp_lda_sample_warp(HARP_LDA_SAMPLE_PARAMS) {
    const unsigned int K = topic_count;
    float* inv = harp_lda_smem;
    harp_lda_inverses(inv, totals, K, vbeta);
    const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned int chunks = (K + 31u) >> 5;
    float* vbuf = harp_lda_smem + 2u * K + warp * (chunks << 5);
    const unsigned long long warps = (unsigned long long)gridDim.x * (blockDim.x >> 5);
    unsigned long long i = (unsigned long long)blockIdx.x * (blockDim.x >> 5) + warp;
    unsigned int d = 0u, w = 0u, z = 0u;
    float u = 0.0f;
    if (i < n) {
        d = docs[i];
        w = words[i] - word_base;
        z = topics[i];
        u = uniforms[i];
    }
    for (; i < n; i += warps) {
        const unsigned int* drow = doc_topic + (size_t)d * K;
        const unsigned int* wrow = word_topic + (size_t)w * K;
        const unsigned int zc = z;
        const float uc = u;
        const unsigned long long next = i + warps;
        if (next < n) {
            d = docs[next];
            w = words[next] - word_base;
            z = topics[next];
            u = uniforms[next];
        }
        float v[HARP_LDA_GROUP];
        float total = 0.0f;
        for (unsigned int c0 = 0; c0 < chunks; c0 += HARP_LDA_GROUP) {
            unsigned int nd[HARP_LDA_GROUP], nw[HARP_LDA_GROUP];
#pragma unroll
            for (unsigned int g = 0; g < HARP_LDA_GROUP; ++g) {
                const unsigned int k = ((c0 + g) << 5) + lane;
                nd[g] = k < K ? drow[k] : 0u;
                nw[g] = k < K ? wrow[k] : 0u;
            }
#pragma unroll
            for (unsigned int g = 0; g < HARP_LDA_GROUP; ++g) {
                if (c0 + g < chunks) {  // warp-uniform
                    const unsigned int k = ((c0 + g) << 5) + lane;
                    const unsigned int own = k == zc ? 1u : 0u;
                    const float wt =
                        k < K ? harp_lda_weight_inv(nd[g], nw[g], own, inv[own * K + k], alpha, beta)
                              : 0.0f;
                    const float s = harp_warp_scan(wt, lane);
                    const float val = __fadd_rn(total, s);
                    if (SMEM_V) {
                        vbuf[((c0 + g) << 5) + lane] = val;
                    } else {
                        v[g] = val;
                    }
                    total = __fadd_rn(total, __shfl_sync(HARP_FULL_MASK, s, 31));
                }
            }
        }
        const float target = __fmul_rn(uc, total);
        unsigned int result = K - 1u;
        if (SMEM_V) {
            // Each lane reads back only what it wrote itself: no synchronization needed.
            for (unsigned int c = 0; c < chunks; ++c) {
                const unsigned int k = (c << 5) + lane;
                const bool hit = k < K && vbuf[k] > target;
                const unsigned int mask = __ballot_sync(HARP_FULL_MASK, hit);
                if (mask != 0u) {
                    result = (c << 5) + (unsigned int)(__ffs(mask) - 1);
                    break;
                }
            }
        } else {
            bool done = false;
#pragma unroll
            for (unsigned int c = 0; c < HARP_LDA_GROUP; ++c) {
                if (!done && c < chunks) {  // warp-uniform
                    const unsigned int k = (c << 5) + lane;
                    const bool hit = k < K && v[c] > target;
                    const unsigned int mask = __ballot_sync(HARP_FULL_MASK, hit);
                    if (mask != 0u) {
                        result = (c << 5) + (unsigned int)(__ffs(mask) - 1);
                        done = true;
                    }
                }
            }
        }
        if (lane == 0u) new_topics[i] = result;
    }
}

extern "C" __global__ void harp_lda_sample_warp_reg(HARP_LDA_SAMPLE_PARAMS) {
    harp_lda_sample_warp<false>(HARP_LDA_SAMPLE_ARGS);
}

extern "C" __global__ void harp_lda_sample_warp_smem(HARP_LDA_SAMPLE_PARAMS) {
    harp_lda_sample_warp<true>(HARP_LDA_SAMPLE_ARGS);
}

// Any K: one warp per token, two passes over the rows (the search pass recomputes the
// weights). Used where the shared-memory variants do not fit. blockDim.x must be a
// multiple of 32.
extern "C" __global__ void harp_lda_sample_parallel(HARP_LDA_SAMPLE_PARAMS) {
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned long long warps = ((unsigned long long)gridDim.x * blockDim.x) >> 5;
    const unsigned int chunks = (topic_count + 31u) / 32u;
    for (unsigned long long i = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
         i < n; i += warps) {
        const unsigned int z = topics[i];
        const unsigned int* drow = doc_topic + (size_t)docs[i] * topic_count;
        const unsigned int* wrow = word_topic + (size_t)(words[i] - word_base) * topic_count;
        float total = 0.0f;
        for (unsigned int c = 0; c < chunks; ++c) {
            float w = harp_lda_weight(c * 32u + lane, topic_count, z, drow, wrow, totals, alpha,
                                      beta, vbeta);
            float s = harp_warp_scan(w, lane);
            total = __fadd_rn(total, __shfl_sync(HARP_FULL_MASK, s, 31));
        }
        const float target = __fmul_rn(uniforms[i], total);
        float running = 0.0f;
        unsigned int result = topic_count - 1u;
        for (unsigned int c = 0; c < chunks; ++c) {
            unsigned int k = c * 32u + lane;
            float w = harp_lda_weight(k, topic_count, z, drow, wrow, totals, alpha, beta, vbeta);
            float s = harp_warp_scan(w, lane);
            bool hit = k < topic_count && __fadd_rn(running, s) > target;
            unsigned int mask = __ballot_sync(HARP_FULL_MASK, hit);
            if (mask != 0u) {
                result = c * 32u + (unsigned int)(__ffs(mask) - 1);
                break;
            }
            running = __fadd_rn(running, __shfl_sync(HARP_FULL_MASK, s, 31));
        }
        if (lane == 0) new_topics[i] = result;
    }
}

// Adds every token to doc_topic, word_topic and totals (zeroed by the host). With
// shared_totals != 0 the block first histograms topic totals in dynamic shared memory
// (topic_count unsigned ints), then adds one atomic per topic per block.
extern "C" __global__ void harp_lda_count_tokens(const unsigned int* __restrict__ docs,
                                                 const unsigned int* __restrict__ words,
                                                 const unsigned int* __restrict__ topics,
                                                 unsigned long long n, unsigned int topic_count,
                                                 unsigned int word_base,
                                                 unsigned int* __restrict__ doc_topic,
                                                 unsigned int* __restrict__ word_topic,
                                                 unsigned int* __restrict__ totals,
                                                 int shared_totals) {
    extern __shared__ unsigned int hist[];
    if (shared_totals) {
        for (unsigned int k = threadIdx.x; k < topic_count; k += blockDim.x) hist[k] = 0u;
        __syncthreads();
    }
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        unsigned int z = topics[i];
        atomicAdd(&doc_topic[(size_t)docs[i] * topic_count + z], 1u);
        atomicAdd(&word_topic[(size_t)(words[i] - word_base) * topic_count + z], 1u);
        if (shared_totals) {
            atomicAdd(&hist[z], 1u);
        } else {
            atomicAdd(&totals[z], 1u);
        }
    }
    if (shared_totals) {
        __syncthreads();
        for (unsigned int k = threadIdx.x; k < topic_count; k += blockDim.x) {
            if (hist[k] != 0u) atomicAdd(&totals[k], hist[k]);
        }
    }
}
