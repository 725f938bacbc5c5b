// Multinomial logistic regression minibatch gradient (harp_kernels::cuda::mlr).
//
// Same contract as the CPU `gradient_scaled` (kernels/src/mlr/fast.rs):
//   grad = alpha * sum_i x_iᵀ (softmax(x_i W) - onehot(y_i)),  loss_i = -ln softmax(x_i W)[y_i]
// computed in three launches on one stream:
//   1. harp_mlr_gemm:         Z = X · W                      (rows × classes, scratch)
//   2. harp_mlr_softmax_xent: Z <- softmax(Z) - Y per row, per-row loss in f64, and the
//                             first row whose label is >= classes (labels are checked on
//                             the device; rows with a bad label are skipped)
//   3. harp_mlr_gemm:         grad = alpha · Xᵀ · Z          (features × classes)
// The host launches 3 only after it has read back the label check, so a bad label leaves
// `grad` untouched.
//
// Layouts are row-major as on the CPU: x is rows × features, w and grad features × classes.
// Sizes are 64-bit. Compiled at run time by NVRTC: no #include.

typedef unsigned long long u64;

#define HARP_TILE 32    // C tile is HARP_TILE × HARP_TILE, k advances HARP_TILE at a time
#define HARP_ROWS_PER_PASS 8  // blockDim = (HARP_TILE, HARP_ROWS_PER_PASS): 4 outputs/thread

// C (m × n, row-major, leading dimension n) = alpha · A · B where
//   A(i, k) = a[i * a_rs + k * a_cs]   (strided, so Xᵀ is read straight out of x)
//   B(k, j) = b[k * n + j]             (k × n, row-major)
// Grid: (ceil(m / HARP_TILE), ceil(n / HARP_TILE)); block: (HARP_TILE, HARP_ROWS_PER_PASS).
// Thread (tx, ty) computes C(row0 + ty + 8q, col0 + tx) for q = 0..3. The A tile is loaded
// so that consecutive threads read consecutive addresses whichever of A's strides is 1;
// the +1 padding keeps the transposed shared-memory stores free of bank conflicts.
extern "C" __global__ void harp_mlr_gemm(u64 m, u64 n, u64 k, float alpha,
                                         const float* __restrict__ a, u64 a_rs, u64 a_cs,
                                         const float* __restrict__ b, float* __restrict__ c) {
    __shared__ float a_tile[HARP_TILE][HARP_TILE + 1];  // [i][kk]
    __shared__ float b_tile[HARP_TILE][HARP_TILE + 1];  // [kk][j]
    const unsigned int tx = threadIdx.x;
    const unsigned int ty = threadIdx.y;
    const u64 row0 = (u64)blockIdx.x * HARP_TILE;
    const u64 col0 = (u64)blockIdx.y * HARP_TILE;
    // A's k index is contiguous in memory (A = X): let tx run along k. Otherwise
    // (A = Xᵀ, whose row index is contiguous) let tx run along i.
    const bool k_contiguous = (a_cs == 1);

    float acc[HARP_TILE / HARP_ROWS_PER_PASS];
#pragma unroll
    for (int q = 0; q < HARP_TILE / HARP_ROWS_PER_PASS; ++q) acc[q] = 0.0f;

    for (u64 k0 = 0; k0 < k; k0 += HARP_TILE) {
        for (unsigned int r = ty; r < HARP_TILE; r += HARP_ROWS_PER_PASS) {
            const unsigned int i = k_contiguous ? r : tx;
            const unsigned int kk = k_contiguous ? tx : r;
            const u64 gi = row0 + i;
            const u64 gk = k0 + kk;
            a_tile[i][kk] = (gi < m && gk < k) ? a[gi * a_rs + gk * a_cs] : 0.0f;
            const u64 bk = k0 + r;
            const u64 bj = col0 + tx;
            b_tile[r][tx] = (bk < k && bj < n) ? b[bk * n + bj] : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < HARP_TILE; ++kk) {
            const float bv = b_tile[kk][tx];
#pragma unroll
            for (int q = 0; q < HARP_TILE / HARP_ROWS_PER_PASS; ++q) {
                acc[q] += a_tile[ty + q * HARP_ROWS_PER_PASS][kk] * bv;
            }
        }
        __syncthreads();
    }

    const u64 gj = col0 + tx;
#pragma unroll
    for (int q = 0; q < HARP_TILE / HARP_ROWS_PER_PASS; ++q) {
        const u64 gi = row0 + ty + q * HARP_ROWS_PER_PASS;
        if (gi < m && gj < n) c[gi * n + gj] = alpha * acc[q];
    }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// One warp per row (grid-stride over rows; blockDim.x must be a multiple of 32).
// z (rows × classes): logits in, softmax(z) - onehot(label) out.
// row_loss[row] = ln(sum_c exp(z_c - max)) - (z_label - max), the stable form the CPU uses.
// bad_row must hold 0xffffffff before the launch; it ends as the smallest row whose label
// is >= classes (that row is left as it was), or unchanged if every label is valid.
extern "C" __global__ void harp_mlr_softmax_xent(u64 rows, u64 classes, float* __restrict__ z,
                                                 const unsigned int* __restrict__ labels,
                                                 double* __restrict__ row_loss,
                                                 unsigned int* __restrict__ bad_row) {
    const unsigned int lane = threadIdx.x & 31u;
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 row = warp; row < rows; row += warps) {
        const unsigned int label = labels[row];
        if ((u64)label >= classes) {
            if (lane == 0) atomicMin(bad_row, (unsigned int)row);
            continue;
        }
        float* zr = z + row * classes;
        const float z_label = zr[label];

        float mx = __int_as_float((int)0xff800000u);  // -inf; fmaxf skips NaNs like f32::max
        for (u64 c = lane; c < classes; c += 32) mx = fmaxf(mx, zr[c]);
        mx = warp_max(mx);
        // Every lane has read z_label (which another lane owns) before any lane below
        // overwrites its logits: order those reads before the writes.
        __syncwarp();

        float sum = 0.0f;
        for (u64 c = lane; c < classes; c += 32) {
            const float e = expf(zr[c] - mx);
            zr[c] = e;
            sum += e;
        }
        sum = warp_sum(sum);  // >= 1: the max element contributes exp(0)

        const float inv = 1.0f / sum;
        for (u64 c = lane; c < classes; c += 32) {
            zr[c] = zr[c] * inv - (c == (u64)label ? 1.0f : 0.0f);
        }
        if (lane == 0) row_loss[row] = log((double)sum) - (double)(z_label - mx);
    }
}
