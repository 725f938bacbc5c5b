// LDA kernels of harp-kernels (wrappers: kernels/src/cuda/lda.rs). Layouts and the exact
// arithmetic of the parallel sampling step are documented in kernels/src/lda.rs and
// kernels/src/lda/parallel.rs; the CPU version there performs the same f32 operations in
// the same order, so every float operation here is an explicit round-to-nearest
// intrinsic (no FMA contraction, IEEE division/reciprocal).
//
//   harp_lda_check_tokens    first bad token (doc row, word id / block, topic), as a key
//   harp_lda_check_uniforms  first uniform outside [0, 1)
//   harp_lda_sample_parallel one warp per token, grid-stride over tokens
//   harp_lda_count_tokens    adds every token to the (zeroed) count tables
//
// Bad-input keys: (kind << 56) | position, combined with atomicMin, so the smallest kind
// wins and, within a kind, the first position -- the order the CPU validation reports.
// *first_bad must hold ~0ull before the launch.

#define HARP_FULL_MASK 0xffffffffu

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

extern "C" __global__ void harp_lda_check_uniforms(const float* __restrict__ uniforms,
                                                   unsigned long long n,
                                                   unsigned long long* __restrict__ first_bad) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        float u = uniforms[i];
        if (!(u >= 0.0f && u < 1.0f)) atomicMin(first_bad, (3ull << 56) | i);
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

// Inclusive Hillis-Steele scan across the warp (offsets 1, 2, 4, 8, 16).
__device__ __forceinline__ float harp_warp_scan(float v, unsigned int lane) {
#pragma unroll
    for (unsigned int off = 1; off < 32; off <<= 1) {
        float up = __shfl_up_sync(HARP_FULL_MASK, v, off);
        if (lane >= off) v = __fadd_rn(v, up);
    }
    return v;
}

// One warp per token; blockDim.x must be a multiple of 32.
extern "C" __global__ void harp_lda_sample_parallel(
    const unsigned int* __restrict__ docs, const unsigned int* __restrict__ words,
    const unsigned int* __restrict__ topics, const float* __restrict__ uniforms,
    const unsigned int* __restrict__ doc_topic, const unsigned int* __restrict__ word_topic,
    const unsigned int* __restrict__ totals, unsigned int* __restrict__ new_topics,
    unsigned long long n, unsigned int topic_count, unsigned int word_base, float alpha,
    float beta, float vbeta) {
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
