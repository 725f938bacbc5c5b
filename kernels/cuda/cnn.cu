// CNN layer kernels (harp_kernels::cuda::cnn): convolution, dense, ReLU, 2x2 max
// pooling and softmax cross-entropy, forward and backward, with the layouts and
// conventions of the CPU kernels (kernels/src/cnn.rs): NCHW activations, conv weights
// out x in x kh x kw, dense weights in x out with y = x W + b, sums over the batch.
//
// Convolutions are implicit GEMMs: one tiled sgemm (harp_gemm_block below) whose
// operand loads gather straight from the activations, so no im2col buffer exists:
//   forward   y (O x N*P)     = W (O x CKK)     . col(x) (CKK x N*P)        + bias
//   weights   dW (O x CKK)   += dy (O x N*P)    . col(x)^T (N*P x CKK)      split over K, atomics
//   input     dx (C x N*H*W)  = W' (C x O*KK)   . rows of dy (O*KK x N*H*W) (transposed conv)
// with P = OH*OW, KK = KH*KW, CKK = C*KK. Index decomposition is 32-bit (the host
// checks the limits); global offsets are 64-bit. Compiled at run time by NVRTC: no
// #include.

typedef unsigned long long u64;
typedef unsigned int u32;

#define HARP_BM 64   // C tile rows
#define HARP_BN 64   // C tile columns
#define HARP_BK 16   // k step
#define HARP_GEMM_THREADS 256  // 16 x 16 threads, each 4 x 4 outputs

// Convolution geometry (mirrors `ConvGeom` in kernels/src/cuda/cnn.rs).
struct ConvGeom {
    u32 c, o, h, w, kh, kw, ph, pw, oh, ow, batch, pad_;
};

// The tiled GEMM every kernel here shares. P supplies the operands and the store:
//   P::a(i, k), P::b(k, j)  — operand elements (0 outside is handled here),
//   P::store(i, j, v)       — writes C(i, j),
//   P::a_k_fast(), P::b_n_fast() — which index is contiguous in memory, so the tile
//                             loads let consecutive threads read consecutive addresses.
// Block (blockIdx.x, blockIdx.y) computes the C tile at column blockIdx.x * BN, row
// blockIdx.y * BM, over k in [k_begin, k_end). Thread (tx, ty) owns rows ty + 16r and
// columns tx + 16c (r, c < 4): shared-memory reads are broadcasts or 16 consecutive
// words, and the +1 padding keeps the transposing tile stores conflict-free.
template <class P>
__device__ __forceinline__ void harp_gemm_block(const P& p, u64 m, u64 n, u64 k_begin,
                                                u64 k_end) {
    __shared__ float as[HARP_BK][HARP_BM + 1];
    __shared__ float bs[HARP_BK][HARP_BN + 1];
    const u32 tid = threadIdx.x;
    const u32 tx = tid & 15u;
    const u32 ty = tid >> 4;
    const u64 row0 = (u64)blockIdx.y * HARP_BM;
    const u64 col0 = (u64)blockIdx.x * HARP_BN;
    const bool a_k_fast = p.a_k_fast();
    const bool b_n_fast = p.b_n_fast();

    float acc[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] = 0.0f;

    for (u64 k0 = k_begin; k0 < k_end; k0 += HARP_BK) {
#pragma unroll
        for (u32 l = 0; l < (HARP_BM * HARP_BK) / HARP_GEMM_THREADS; ++l) {
            const u32 e = tid + HARP_GEMM_THREADS * l;
            const u32 i = a_k_fast ? e / HARP_BK : e % HARP_BM;
            const u32 kk = a_k_fast ? e % HARP_BK : e / HARP_BM;
            const u64 gi = row0 + i;
            const u64 gk = k0 + kk;
            as[kk][i] = (gi < m && gk < k_end) ? p.a(gi, gk) : 0.0f;
        }
#pragma unroll
        for (u32 l = 0; l < (HARP_BN * HARP_BK) / HARP_GEMM_THREADS; ++l) {
            const u32 e = tid + HARP_GEMM_THREADS * l;
            const u32 j = b_n_fast ? e % HARP_BN : e / HARP_BK;
            const u32 kk = b_n_fast ? e / HARP_BN : e % HARP_BK;
            const u64 gj = col0 + j;
            const u64 gk = k0 + kk;
            bs[kk][j] = (gj < n && gk < k_end) ? p.b(gk, gj) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < HARP_BK; ++kk) {
            float av[4], bv[4];
#pragma unroll
            for (int r = 0; r < 4; ++r) av[r] = as[kk][ty + 16 * r];
#pragma unroll
            for (int c = 0; c < 4; ++c) bv[c] = bs[kk][tx + 16 * c];
#pragma unroll
            for (int r = 0; r < 4; ++r)
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int r = 0; r < 4; ++r) {
        const u64 gi = row0 + ty + 16 * r;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            const u64 gj = col0 + tx + 16 * c;
            if (gi < m && gj < n) p.store(gi, gj, acc[r][c]);
        }
    }
}

// ---------------------------------------------------------------------------------
// Plain strided GEMM (dense layers): C = A . B (+ bias[j]) (+ beta . C).
// A(i, k) = a[i*a_rs + k*a_cs], B(k, j) = b[k*b_rs + j*b_cs], C(i, j) = c[i*ldc + j].

struct HarpDense {
    const float* pa;
    u64 a_rs, a_cs;
    const float* pb;
    u64 b_rs, b_cs;
    float* pc;
    u64 ldc;
    const float* bias;
    int has_bias;
    float beta;
    __device__ bool a_k_fast() const { return a_cs == 1; }
    __device__ bool b_n_fast() const { return b_cs == 1; }
    __device__ float a(u64 i, u64 k) const { return pa[i * a_rs + k * a_cs]; }
    __device__ float b(u64 k, u64 j) const { return pb[k * b_rs + j * b_cs]; }
    __device__ void store(u64 i, u64 j, float v) const {
        float* out = pc + i * ldc + j;
        if (has_bias) v += bias[j];
        if (beta != 0.0f) v = fmaf(beta, *out, v);
        *out = v;
    }
};

// Grid: (ceil(n / BN), ceil(m / BM)); block: 256 threads.
extern "C" __global__ void harp_cnn_gemm(u64 m, u64 n, u64 k, const float* __restrict__ a,
                                         u64 a_rs, u64 a_cs, const float* __restrict__ b,
                                         u64 b_rs, u64 b_cs, float* __restrict__ c, u64 ldc,
                                         const float* __restrict__ bias, int has_bias,
                                         float beta) {
    HarpDense op;
    op.pa = a;
    op.a_rs = a_rs;
    op.a_cs = a_cs;
    op.pb = b;
    op.b_rs = b_rs;
    op.b_cs = b_cs;
    op.pc = c;
    op.ldc = ldc;
    op.bias = bias;
    op.has_bias = has_bias;
    op.beta = beta;
    harp_gemm_block(op, m, n, 0, k);
}

// ---------------------------------------------------------------------------------
// Convolution forward: M = O, N = batch*P, K = CKK.
struct HarpConvFwd {
    ConvGeom g;
    const float* x;
    const float* w;
    const float* bias;
    float* y;
    __device__ bool a_k_fast() const { return true; }
    __device__ bool b_n_fast() const { return true; }
    __device__ float a(u64 o, u64 q) const { return w[o * (u64)(g.c * g.kh * g.kw) + q]; }
    __device__ float b(u64 q64, u64 col64) const {
        const u32 q = (u32)q64, col = (u32)col64;
        const u32 p_len = g.oh * g.ow, kk_len = g.kh * g.kw;
        const u32 n = col / p_len, p = col % p_len;
        const u32 oy = p / g.ow, ox = p % g.ow;
        const u32 c = q / kk_len, r = q % kk_len;
        const int iy = (int)(oy + r / g.kw) - (int)g.ph;
        const int ix = (int)(ox + r % g.kw) - (int)g.pw;
        if (iy < 0 || ix < 0 || iy >= (int)g.h || ix >= (int)g.w) return 0.0f;
        return x[(((u64)n * g.c + c) * g.h + (u32)iy) * g.w + (u32)ix];
    }
    __device__ void store(u64 o, u64 col64, float v) const {
        const u32 col = (u32)col64, p_len = g.oh * g.ow;
        const u32 n = col / p_len, p = col % p_len;
        y[((u64)n * g.o + o) * p_len + p] = v + bias[o];
    }
};

// Grid: (ceil(batch*P / BN), ceil(O / BM)); block: 256 threads.
extern "C" __global__ void harp_cnn_conv_fwd(ConvGeom g, const float* __restrict__ x,
                                             const float* __restrict__ w,
                                             const float* __restrict__ bias,
                                             float* __restrict__ y) {
    HarpConvFwd op;
    op.g = g;
    op.x = x;
    op.w = w;
    op.bias = bias;
    op.y = y;
    const u64 ckk = (u64)g.c * g.kh * g.kw;
    harp_gemm_block(op, g.o, (u64)g.batch * g.oh * g.ow, 0, ckk);
}

// ---------------------------------------------------------------------------------
// Convolution weight gradient: M = O, N = CKK, K = batch*P, K split over gridDim.z;
// each block adds its partial sums into dw with atomicAdd (dw zeroed before).
struct HarpConvDw {
    ConvGeom g;
    const float* x;
    const float* dy;
    float* dw;
    __device__ bool a_k_fast() const { return true; }
    __device__ bool b_n_fast() const { return false; }
    __device__ float a(u64 o, u64 k64) const {
        const u32 k = (u32)k64, p_len = g.oh * g.ow;
        const u32 n = k / p_len, p = k % p_len;
        return dy[((u64)n * g.o + o) * p_len + p];
    }
    __device__ float b(u64 k64, u64 q64) const {
        const u32 k = (u32)k64, q = (u32)q64;
        const u32 p_len = g.oh * g.ow, kk_len = g.kh * g.kw;
        const u32 n = k / p_len, p = k % p_len;
        const u32 oy = p / g.ow, ox = p % g.ow;
        const u32 c = q / kk_len, r = q % kk_len;
        const int iy = (int)(oy + r / g.kw) - (int)g.ph;
        const int ix = (int)(ox + r % g.kw) - (int)g.pw;
        if (iy < 0 || ix < 0 || iy >= (int)g.h || ix >= (int)g.w) return 0.0f;
        return x[(((u64)n * g.c + c) * g.h + (u32)iy) * g.w + (u32)ix];
    }
    __device__ void store(u64 o, u64 q, float v) const {
        atomicAdd(dw + o * (u64)(g.c * g.kh * g.kw) + q, v);
    }
};

// Grid: (ceil(CKK / BN), ceil(O / BM), splits); block: 256 threads. Block z covers
// k in [z * k_chunk, min((z + 1) * k_chunk, batch*P)); k_chunk is a multiple of BK.
extern "C" __global__ void harp_cnn_conv_dw(ConvGeom g, const float* __restrict__ x,
                                            const float* __restrict__ dy,
                                            float* __restrict__ dw, u64 k_chunk) {
    HarpConvDw op;
    op.g = g;
    op.x = x;
    op.dy = dy;
    op.dw = dw;
    const u64 k_total = (u64)g.batch * g.oh * g.ow;
    const u64 k_begin = (u64)blockIdx.z * k_chunk;
    if (k_begin >= k_total) return;
    const u64 k_end = k_begin + k_chunk < k_total ? k_begin + k_chunk : k_total;
    harp_gemm_block(op, g.o, (u64)g.c * g.kh * g.kw, k_begin, k_end);
}

// ---------------------------------------------------------------------------------
// Convolution input gradient (a transposed convolution): M = C, N = batch*H*W,
// K = O*KK. dx(c, (n, iy, ix)) = sum over (o, i, j) of w[o, c, i, j] *
// dy[n, o, iy + ph - i, ix + pw - j] (0 outside the output).
struct HarpConvDx {
    ConvGeom g;
    const float* w;
    const float* dy;
    float* dx;
    __device__ bool a_k_fast() const { return true; }
    __device__ bool b_n_fast() const { return true; }
    __device__ float a(u64 c, u64 k64) const {
        const u32 k = (u32)k64, kk_len = g.kh * g.kw;
        const u32 o = k / kk_len, r = k % kk_len;
        return w[((u64)o * g.c + c) * kk_len + r];
    }
    __device__ float b(u64 k64, u64 col64) const {
        const u32 k = (u32)k64, col = (u32)col64;
        const u32 kk_len = g.kh * g.kw, hw = g.h * g.w;
        const u32 o = k / kk_len, r = k % kk_len;
        const u32 n = col / hw, pix = col % hw;
        const int oy = (int)(pix / g.w + g.ph) - (int)(r / g.kw);
        const int ox = (int)(pix % g.w + g.pw) - (int)(r % g.kw);
        if (oy < 0 || ox < 0 || oy >= (int)g.oh || ox >= (int)g.ow) return 0.0f;
        return dy[(((u64)n * g.o + o) * g.oh + (u32)oy) * g.ow + (u32)ox];
    }
    __device__ void store(u64 c, u64 col64, float v) const {
        const u32 col = (u32)col64, hw = g.h * g.w;
        const u32 n = col / hw, pix = col % hw;
        dx[((u64)n * g.c + c) * hw + pix] = v;
    }
};

// Grid: (ceil(batch*H*W / BN), ceil(C / BM)); block: 256 threads.
extern "C" __global__ void harp_cnn_conv_dx(ConvGeom g, const float* __restrict__ w,
                                            const float* __restrict__ dy,
                                            float* __restrict__ dx) {
    HarpConvDx op;
    op.g = g;
    op.w = w;
    op.dy = dy;
    op.dx = dx;
    harp_gemm_block(op, g.c, (u64)g.batch * g.h * g.w, 0, (u64)g.o * g.kh * g.kw);
}

// ---------------------------------------------------------------------------------
// Bias gradient: db[j] = sum over r < rows, p < plane of dy[(r*cols + j)*plane + p]
// (conv: rows = batch, cols = O, plane = P; dense: plane = 1). One block per j
// (grid-stride), a shared-memory tree sum; blockDim.x must be 256.
extern "C" __global__ void harp_cnn_bias_grad(u64 rows, u64 cols, u64 plane,
                                              const float* __restrict__ dy,
                                              float* __restrict__ db) {
    __shared__ float part[256];
    const u64 per_col = rows * plane;
    for (u64 j = blockIdx.x; j < cols; j += gridDim.x) {
        float s = 0.0f;
        for (u64 t = threadIdx.x; t < per_col; t += blockDim.x) {
            const u64 r = t / plane, p = t % plane;
            s += dy[(r * cols + j) * plane + p];
        }
        part[threadIdx.x] = s;
        __syncthreads();
        for (u32 half = 128; half > 0; half >>= 1) {
            if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
            __syncthreads();
        }
        if (threadIdx.x == 0) db[j] = part[0];
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------
// ReLU. Forward: max(x, 0) with NaN passed through; backward: dy where y > 0, else 0.

extern "C" __global__ void harp_cnn_relu_fwd(const float* __restrict__ x,
                                             float* __restrict__ y, u64 n) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const float v = x[i];
        y[i] = v <= 0.0f ? 0.0f : v;
    }
}

extern "C" __global__ void harp_cnn_relu_inplace(float* __restrict__ x, u64 n) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const float v = x[i];
        x[i] = v <= 0.0f ? 0.0f : v;
    }
}

extern "C" __global__ void harp_cnn_relu_bwd(const float* __restrict__ y,
                                             const float* __restrict__ dy,
                                             float* __restrict__ dx, u64 n) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    }
}

extern "C" __global__ void harp_cnn_relu_bwd_inplace(const float* __restrict__ y,
                                                     float* __restrict__ g, u64 n) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        if (!(y[i] > 0.0f)) g[i] = 0.0f;
    }
}

// ---------------------------------------------------------------------------------
// 2x2 max pooling, stride 2, over `planes` planes of h x w (output h/2 x w/2).
// argmax holds the index within the input plane; ties go to the first element of the
// window in row-major order (comparisons are >, so a NaN in the first position wins).

extern "C" __global__ void harp_cnn_maxpool_fwd(u64 planes, u32 h, u32 w,
                                                const float* __restrict__ x,
                                                float* __restrict__ y,
                                                u32* __restrict__ argmax) {
    const u32 oh = h / 2, ow = w / 2;
    const u64 total = planes * oh * ow;
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (u64)gridDim.x * blockDim.x) {
        const u64 plane = k / ((u64)oh * ow);
        const u32 p = (u32)(k % ((u64)oh * ow));
        const u32 oy = p / ow, ox = p % ow;
        const float* xp = x + plane * h * w;
        const u32 first = 2 * oy * w + 2 * ox;
        float best = xp[first];
        u32 at = first;
        const u32 others[3] = {first + 1, first + w, first + w + 1};
#pragma unroll
        for (int t = 0; t < 3; ++t) {
            const float v = xp[others[t]];
            if (v > best) {
                best = v;
                at = others[t];
            }
        }
        y[k] = best;
        argmax[k] = at;
    }
}

// Sets *bad to the smallest position k whose argmax is not inside its own window
// (*bad must hold ~0 before the launch).
extern "C" __global__ void harp_cnn_maxpool_check(u64 planes, u32 h, u32 w,
                                                  const u32* __restrict__ argmax,
                                                  u64* __restrict__ bad) {
    const u32 oh = h / 2, ow = w / 2;
    const u64 total = planes * oh * ow;
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (u64)gridDim.x * blockDim.x) {
        const u32 p = (u32)(k % ((u64)oh * ow));
        const u32 oy = p / ow, ox = p % ow;
        const u32 base = 2 * oy * w + 2 * ox;
        const u32 off = argmax[k] - base;  // wraps when below the window
        if (off > 1u && off - w > 1u) atomicMin(bad, k);
    }
}

// dx (zeroed before) gets dy[k] at argmax[k] of each output k (checked before).
extern "C" __global__ void harp_cnn_maxpool_bwd(u64 planes, u32 h, u32 w,
                                                const u32* __restrict__ argmax,
                                                const float* __restrict__ dy,
                                                float* __restrict__ dx) {
    const u32 oh = h / 2, ow = w / 2;
    const u64 total = planes * oh * ow;
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (u64)gridDim.x * blockDim.x) {
        const u64 plane = k / ((u64)oh * ow);
        dx[plane * h * w + argmax[k]] = dy[k];
    }
}

// ---------------------------------------------------------------------------------
// Softmax cross-entropy, one warp per row (grid-stride; blockDim.x a multiple of 32).

__device__ __forceinline__ float harp_warp_max(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float harp_warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// *bad_row (u32 ~0 before the launch) ends as the smallest row whose label is >= classes.
extern "C" __global__ void harp_cnn_check_labels(u64 rows, u64 classes,
                                                 const u32* __restrict__ labels,
                                                 u32* __restrict__ bad_row) {
    for (u64 r = (u64)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (u64)gridDim.x * blockDim.x) {
        if ((u64)labels[r] >= classes) atomicMin(bad_row, (u32)r);
    }
}

// Labels checked before. dz = scale * (softmax(z) - onehot(label)) per row;
// row_loss[row] = ln(sum exp(z - max)) - (z[label] - max) in f64. When `correct` is not
// null (evaluation), dz is not written and `correct` counts rows whose first argmax
// equals the label (NaNs never win).
extern "C" __global__ void harp_cnn_softmax_xent(u64 rows, u64 classes,
                                                 const float* __restrict__ z,
                                                 const u32* __restrict__ labels, float scale,
                                                 float* __restrict__ dz,
                                                 double* __restrict__ row_loss,
                                                 u32* __restrict__ correct) {
    const u32 lane = threadIdx.x & 31u;
    const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const u64 warps = ((u64)gridDim.x * blockDim.x) >> 5;
    for (u64 row = warp; row < rows; row += warps) {
        const u32 label = labels[row];
        const float* zr = z + row * classes;
        float mx = __int_as_float((int)0xff800000u);  // -inf; fmaxf skips NaNs
        for (u64 c = lane; c < classes; c += 32) mx = fmaxf(mx, zr[c]);
        mx = harp_warp_max(mx);
        float sum = 0.0f;
        for (u64 c = lane; c < classes; c += 32) sum += expf(zr[c] - mx);
        sum = harp_warp_sum(sum);  // >= 1 unless every logit is NaN
        if (lane == 0) row_loss[row] = log((double)sum) - (double)(zr[label] - mx);
        if (correct != 0) {
            // First index holding the maximum (the CPU's strict > scan).
            u64 first = classes;
            for (u64 c = lane; c < classes; c += 32)
                if (zr[c] == mx && c < first) first = c;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) {
                const u64 other = __shfl_xor_sync(0xffffffffu, first, off);
                first = other < first ? other : first;
            }
            const u64 predicted = first == classes ? 0 : first;
            if (lane == 0 && predicted == (u64)label) atomicAdd(correct, 1u);
        } else {
            const float inv = scale / sum;
            float* dr = dz + row * classes;
            for (u64 c = lane; c < classes; c += 32)
                dr[c] = expf(zr[c] - mx) * inv - (c == (u64)label ? scale : 0.0f);
        }
    }
}
