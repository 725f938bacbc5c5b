// Matrix-factorization kernels of harp-kernels (wrappers: kernels/src/cuda/mf.rs).
// Layouts are documented in kernels/src/mf.rs: row-major f32 factors (rank k), ratings in
// coordinate form (users, items, values) or CSR (offsets, cols, values).
//
//   harp_mf_check_ratings  first bad rating (user id, item id, non-finite value), as a key
//   harp_mf_check_csr      first bad CSR entry (offset, column id, value) or factor entry
//   harp_mf_sgd            one warp per rating, grid-stride, Hogwild (no locking)
//   harp_mf_als            one block per CSR row: normal equations in shared memory, Cholesky
//
// Bad-input keys: (kind << 56) | position, combined with atomicMin; *first_bad must hold
// ~0ull before the launch. The smallest kind wins, then the first position: the order in
// which the CPU validation reports.

#define HARP_FULL_MASK 0xffffffffu

__device__ __forceinline__ bool harp_finite(float v) { return fabsf(v) <= 3.402823466e38f; }

extern "C" __global__ void harp_mf_check_ratings(const unsigned int* __restrict__ users,
                                                 const unsigned int* __restrict__ items,
                                                 const float* __restrict__ values,
                                                 unsigned long long n, unsigned long long n_users,
                                                 unsigned long long n_items,
                                                 unsigned long long* __restrict__ first_bad) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        unsigned long long key = ~0ull;
        if (users[i] >= n_users) {
            key = i;
        } else if (items[i] >= n_items) {
            key = (1ull << 56) | i;
        } else if (!harp_finite(values[i])) {
            key = (2ull << 56) | i;
        }
        if (key != ~0ull) atomicMin(first_bad, key);
    }
}

// Kinds: 0 offsets (position 0 not 0, a decrease at position j, last != nnz), 1 cols
// (>= n_cols), 2 values (non-finite), 3 fixed factor entries (non-finite).
extern "C" __global__ void harp_mf_check_csr(const unsigned int* __restrict__ offsets,
                                             unsigned long long rows,
                                             const unsigned int* __restrict__ cols,
                                             const float* __restrict__ values,
                                             unsigned long long nnz, unsigned long long n_cols,
                                             const float* __restrict__ fixed,
                                             unsigned long long fixed_len,
                                             unsigned long long* __restrict__ first_bad) {
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (unsigned long long j = t; j <= rows; j += stride) {
        bool bad = (j == 0) ? offsets[0] != 0u : offsets[j] < offsets[j - 1];
        if (!bad && j == rows) bad = (unsigned long long)offsets[rows] != nnz;
        if (bad) atomicMin(first_bad, j);
    }
    for (unsigned long long j = t; j < nnz; j += stride) {
        if (cols[j] >= n_cols) {
            atomicMin(first_bad, (1ull << 56) | j);
        } else if (!harp_finite(values[j])) {
            atomicMin(first_bad, (2ull << 56) | j);
        }
    }
    for (unsigned long long j = t; j < fixed_len; j += stride) {
        if (!harp_finite(fixed[j])) atomicMin(first_bad, (3ull << 56) | j);
    }
}

// e = r - p_u.q_i (warp reduction), then p_u += lr (e q_i - l p_u), q_i += lr (e p_u - l q_i)
// from the old values. Ratings of different warps that share a row race (Hogwild).
extern "C" __global__ void harp_mf_sgd(const unsigned int* __restrict__ users,
                                       const unsigned int* __restrict__ items,
                                       const float* __restrict__ values, unsigned long long n,
                                       unsigned int k, float lr, float lambda, float* p, float* q) {
    const unsigned int lane = threadIdx.x & 31u;
    const unsigned long long warps = ((unsigned long long)gridDim.x * blockDim.x) >> 5;
    for (unsigned long long i = ((unsigned long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
         i < n; i += warps) {
        float* pu = p + (size_t)users[i] * k;
        float* qi = q + (size_t)items[i] * k;
        float dot = 0.0f;
        for (unsigned int j = lane; j < k; j += 32u) dot += pu[j] * qi[j];
#pragma unroll
        for (unsigned int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(HARP_FULL_MASK, dot, off);
        const float e = values[i] - dot;
        for (unsigned int j = lane; j < k; j += 32u) {
            float a = pu[j], b = qi[j];
            pu[j] = a + lr * (e * b - lambda * a);
            qi[j] = b + lr * (e * a - lambda * b);
        }
    }
}

#define HARP_ALS_TILE 16u

// Packed lower-triangle index of (i, l), l <= i.
__device__ __forceinline__ unsigned int harp_tri(unsigned int i, unsigned int l) {
    return i * (i + 1u) / 2u + l;
}

// One block per row (grid-stride over rows). Dynamic shared memory, in floats:
// k(k+1)/2 (packed A) + k (b, then x) + TILE*k (factor tile) + TILE (rating tile).
// Solves (sum q q^T + lambda n I) x = sum r q into x_out (rows x k). A row whose
// factorization fails records its index in *bad_row (atomicMin; ~0u before the launch).
extern "C" __global__ void harp_mf_als(const unsigned int* __restrict__ offsets,
                                       const unsigned int* __restrict__ cols,
                                       const float* __restrict__ values,
                                       const float* __restrict__ fixed, unsigned int rows,
                                       unsigned int k, float lambda,
                                       float* __restrict__ x_out,
                                       unsigned int* __restrict__ bad_row) {
    extern __shared__ float smem[];
    const unsigned int tri = k * (k + 1u) / 2u;
    float* a = smem;
    float* b = a + tri;
    float* tq = b + k;
    float* tr = tq + HARP_ALS_TILE * k;
    __shared__ int failed;
    const unsigned int tid = threadIdx.x, nt = blockDim.x;

    for (unsigned int row = blockIdx.x; row < rows; row += gridDim.x) {
        const unsigned int s = offsets[row], e = offsets[row + 1];
        float* x = x_out + (size_t)row * k;
        if (s == e) {
            for (unsigned int m = tid; m < k; m += nt) x[m] = 0.0f;
            continue;
        }
        for (unsigned int idx = tid; idx < tri; idx += nt) a[idx] = 0.0f;
        for (unsigned int m = tid; m < k; m += nt) b[m] = 0.0f;
        if (tid == 0) failed = 0;
        __syncthreads();

        for (unsigned int t0 = s; t0 < e; t0 += HARP_ALS_TILE) {
            const unsigned int cnt = min(HARP_ALS_TILE, e - t0);
            for (unsigned int idx = tid; idx < cnt * k; idx += nt) {
                unsigned int j = idx / k, m = idx - j * k;
                tq[idx] = fixed[(size_t)cols[t0 + j] * k + m];
            }
            if (tid < cnt) tr[tid] = values[t0 + tid];
            __syncthreads();
            for (unsigned int idx = tid; idx < tri; idx += nt) {
                unsigned int i = (unsigned int)((sqrtf(8.0f * (float)idx + 1.0f) - 1.0f) * 0.5f);
                while (harp_tri(i, 0) > idx) --i;
                while (harp_tri(i + 1u, 0) <= idx) ++i;
                const unsigned int l = idx - harp_tri(i, 0);
                float acc = 0.0f;
                for (unsigned int j = 0; j < cnt; ++j) acc += tq[j * k + i] * tq[j * k + l];
                a[idx] += acc;
            }
            for (unsigned int m = tid; m < k; m += nt) {
                float acc = 0.0f;
                for (unsigned int j = 0; j < cnt; ++j) acc += tr[j] * tq[j * k + m];
                b[m] += acc;
            }
            __syncthreads();
        }
        const float reg = lambda * (float)(e - s);
        for (unsigned int i = tid; i < k; i += nt) a[harp_tri(i, i)] += reg;
        __syncthreads();

        // Right-looking Cholesky on the packed lower triangle.
        for (unsigned int j = 0; j < k; ++j) {
            if (tid == 0) {
                float d = a[harp_tri(j, j)];
                if (!(d > 0.0f && harp_finite(d))) {
                    failed = 1;
                    d = 1.0f;
                }
                a[harp_tri(j, j)] = sqrtf(d);
            }
            __syncthreads();
            const float ljj = a[harp_tri(j, j)];
            for (unsigned int i = j + 1u + tid; i < k; i += nt) a[harp_tri(i, j)] /= ljj;
            __syncthreads();
            for (unsigned int i = j + 1u + tid; i < k; i += nt) {
                const float aij = a[harp_tri(i, j)];
                float* ai = a + harp_tri(i, 0);
                for (unsigned int l = j + 1u; l <= i; ++l) ai[l] -= aij * a[harp_tri(l, j)];
            }
            __syncthreads();
        }
        // Forward substitution L y = b, then back substitution L^T x = y, in b.
        for (unsigned int j = 0; j < k; ++j) {
            if (tid == 0) b[j] /= a[harp_tri(j, j)];
            __syncthreads();
            const float yj = b[j];
            for (unsigned int i = j + 1u + tid; i < k; i += nt) b[i] -= a[harp_tri(i, j)] * yj;
            __syncthreads();
        }
        for (unsigned int jj = k; jj-- > 0;) {
            if (tid == 0) b[jj] /= a[harp_tri(jj, jj)];
            __syncthreads();
            const float xj = b[jj];
            for (unsigned int i = tid; i < jj; i += nt) b[i] -= a[harp_tri(jj, i)] * xj;
            __syncthreads();
        }
        for (unsigned int m = tid; m < k; m += nt) x[m] = b[m];
        if (tid == 0 && failed) atomicMin(bad_row, row);
        __syncthreads();
    }
}
