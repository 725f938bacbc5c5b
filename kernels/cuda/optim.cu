// Element-wise parameter-server update rules (harp_kernels::cuda::optim).
//
// Same math as the CPU rules in kernels/src/optim/rules.rs, in f32. These kernels are
// bandwidth-bound, so every one of them:
//   * runs a grid-stride loop (the host launches about one full wave of blocks), and
//   * moves data as float4 (16-byte loads/stores) when every pointer it touches is
//     16-byte aligned, with a scalar loop for the last n % 4 elements; when some pointer
//     is not aligned (a view into the middle of a buffer) it falls back to the scalar
//     loop for everything.
// Sizes are 64-bit; n == 0 is valid (nothing happens).
//
// Compiled at run time by NVRTC: no #include, no C++ standard library.

typedef unsigned long long u64;

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<u64>(p) & 15ull) == 0ull;
}

__device__ __forceinline__ u64 thread_index() {
    return (u64)blockIdx.x * (u64)blockDim.x + (u64)threadIdx.x;
}

__device__ __forceinline__ u64 thread_count() {
    return (u64)gridDim.x * (u64)blockDim.x;
}

// ---------------------------------------------------------------- dst += alpha * src

__device__ __forceinline__ float axpy1(float d, float alpha, float s) {
    return d + alpha * s;
}

// One body for add_assign (alpha = 1, exact: 1 * s == s) and axpy.
__device__ __forceinline__ void axpy_body(float* __restrict__ dst, float alpha,
                                          const float* __restrict__ src, u64 n) {
    const u64 tid = thread_index();
    const u64 stride = thread_count();
    u64 done = 0;
    if (aligned16(dst) && aligned16(src)) {
        const u64 n4 = n / 4;
        float4* d4 = reinterpret_cast<float4*>(dst);
        const float4* s4 = reinterpret_cast<const float4*>(src);
        for (u64 i = tid; i < n4; i += stride) {
            float4 d = d4[i];
            const float4 s = s4[i];
            d.x = axpy1(d.x, alpha, s.x);
            d.y = axpy1(d.y, alpha, s.y);
            d.z = axpy1(d.z, alpha, s.z);
            d.w = axpy1(d.w, alpha, s.w);
            d4[i] = d;
        }
        done = n4 * 4;
    }
    for (u64 i = done + tid; i < n; i += stride) {
        dst[i] = axpy1(dst[i], alpha, src[i]);
    }
}

extern "C" __global__ void harp_add_assign_f32(float* __restrict__ dst,
                                               const float* __restrict__ src, u64 n) {
    axpy_body(dst, 1.0f, src, n);
}

extern "C" __global__ void harp_axpy_f32(float* __restrict__ dst, float alpha,
                                         const float* __restrict__ src, u64 n) {
    axpy_body(dst, alpha, src, n);
}

// ---------------------------------------------------------------- AdaGrad
// accum += g*g; w -= lr * g / (sqrt(accum) + eps)

__device__ __forceinline__ void adagrad1(float& w, float& a, float g, float lr, float eps) {
    a += g * g;
    w -= lr * g / (sqrtf(a) + eps);
}

extern "C" __global__ void harp_adagrad_f32(float* __restrict__ w, float* __restrict__ accum,
                                            const float* __restrict__ grad, float lr,
                                            float eps, u64 n) {
    const u64 tid = thread_index();
    const u64 stride = thread_count();
    u64 done = 0;
    if (aligned16(w) && aligned16(accum) && aligned16(grad)) {
        const u64 n4 = n / 4;
        float4* w4 = reinterpret_cast<float4*>(w);
        float4* a4 = reinterpret_cast<float4*>(accum);
        const float4* g4 = reinterpret_cast<const float4*>(grad);
        for (u64 i = tid; i < n4; i += stride) {
            float4 wv = w4[i];
            float4 av = a4[i];
            const float4 gv = g4[i];
            adagrad1(wv.x, av.x, gv.x, lr, eps);
            adagrad1(wv.y, av.y, gv.y, lr, eps);
            adagrad1(wv.z, av.z, gv.z, lr, eps);
            adagrad1(wv.w, av.w, gv.w, lr, eps);
            a4[i] = av;
            w4[i] = wv;
        }
        done = n4 * 4;
    }
    for (u64 i = done + tid; i < n; i += stride) {
        float wi = w[i];
        float ai = accum[i];
        adagrad1(wi, ai, grad[i], lr, eps);
        accum[i] = ai;
        w[i] = wi;
    }
}

// ---------------------------------------------------------------- Adam
// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g²;
// w -= step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
// with step_size = lr / (1 - b1^t) and inv_sqrt_bc2 = 1 / sqrt(1 - b2^t), both computed
// on the host in f64 exactly as the CPU rule does.

struct AdamArgs {
    float b1, one_minus_b1, b2, one_minus_b2, eps, step_size, inv_sqrt_bc2;
};

__device__ __forceinline__ void adam1(float& w, float& m, float& v, float g, const AdamArgs& p) {
    m = p.b1 * m + p.one_minus_b1 * g;
    v = p.b2 * v + p.one_minus_b2 * g * g;
    w -= p.step_size * m / (sqrtf(v) * p.inv_sqrt_bc2 + p.eps);
}

extern "C" __global__ void harp_adam_f32(float* __restrict__ w, float* __restrict__ m,
                                         float* __restrict__ v, const float* __restrict__ grad,
                                         float b1, float b2, float eps, float step_size,
                                         float inv_sqrt_bc2, u64 n) {
    const AdamArgs p = {b1, 1.0f - b1, b2, 1.0f - b2, eps, step_size, inv_sqrt_bc2};
    const u64 tid = thread_index();
    const u64 stride = thread_count();
    u64 done = 0;
    if (aligned16(w) && aligned16(m) && aligned16(v) && aligned16(grad)) {
        const u64 n4 = n / 4;
        float4* w4 = reinterpret_cast<float4*>(w);
        float4* m4 = reinterpret_cast<float4*>(m);
        float4* v4 = reinterpret_cast<float4*>(v);
        const float4* g4 = reinterpret_cast<const float4*>(grad);
        for (u64 i = tid; i < n4; i += stride) {
            float4 wv = w4[i];
            float4 mv = m4[i];
            float4 vv = v4[i];
            const float4 gv = g4[i];
            adam1(wv.x, mv.x, vv.x, gv.x, p);
            adam1(wv.y, mv.y, vv.y, gv.y, p);
            adam1(wv.z, mv.z, vv.z, gv.z, p);
            adam1(wv.w, mv.w, vv.w, gv.w, p);
            m4[i] = mv;
            v4[i] = vv;
            w4[i] = wv;
        }
        done = n4 * 4;
    }
    for (u64 i = done + tid; i < n; i += stride) {
        float wi = w[i];
        float mi = m[i];
        float vi = v[i];
        adam1(wi, mi, vi, grad[i], p);
        m[i] = mi;
        v[i] = vi;
        w[i] = wi;
    }
}
