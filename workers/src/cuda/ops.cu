// The element-wise parts of a block, computed as the CPU path computes
// them (`model::ops`): sums of squares and softmax denominators in double,
// the rope angle stepped by multiplication, exponentials by the CPU's
// formulas and every per-thread sum in the CPU's order (`cuda::emulate`
// replays these functions on the host against the CPU's).

#define THREADS 256

// `model::ops::v_expf` (ggml's AVX-512 exp, lane by lane), line for line:
// explicit fmaf, which --fmad=false leaves fused; `scalef` as the product
// with 2^n in double, rounded once.
__device__ __forceinline__ float v_expf(float x) {
    const float r = __uint_as_float(0x4b400000u); // 0x1.8p23
    float z = fmaf(x, __uint_as_float(0x3fb8aa3bu), r);
    float n = z - r;
    float b = fmaf(-n, __uint_as_float(0x35bfbe8eu), fmaf(-n, __uint_as_float(0x3f317200u), x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : __int_as_float(0x7f800000);
    float u = b * b;
    float j = fmaf(fmaf(fmaf(__uint_as_float(0x3c072010u), b, __uint_as_float(0x3d2b9f17u)), u,
                        fmaf(__uint_as_float(0x3e2aaf33u), b, __uint_as_float(0x3efffedbu))),
                   u, fmaf(__uint_as_float(0x3f7ffff6u), b, 1.0f));
    int whole = (int)n; // NaN: 0, as the CPU's cast
    return (float)((double)j * __longlong_as_double((long long)(whole + 1023) << 52));
}

// 2^(i/32) as binary64 words less i << 47 (glibc's exp2f_data.c).
__device__ const unsigned long long EXPF_TABLE[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};

// Rust's `f32::exp` on Linux: glibc's expf, as its FMA build (the one
// every x86-64 with FMA selects) computes it, multiply-adds fused. CUDA's
// own expf differs from it by an ulp here and there.
__device__ float libm_expf(float x) {
    u32 ix = __float_as_uint(x);
    u32 abstop = (ix >> 20) & 0x7ffu;
    if (abstop >= 0x42bu) { // |x| >= 88, or NaN
        if (ix == 0xff800000u) return 0.0f;
        if (abstop >= 0x7f8u) return x + x;
        if (x > 0x1.62e42ep6f) return __uint_as_float(0x7f800000u);
        if (x < -0x1.9fe368p6f) return 0.0f;
    }
    const double inv_ln2_n = 0x1.71547652b82fep+0 * 32, shift = 0x1.8p+52;
    const double c0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, c1 = 0x1.ebfce50fac4f3p-3 / 32 / 32;
    const double c2 = 0x1.62e42ff0c52d6p-1 / 32;
    double xd = (double)x;
    double kd = fma(inv_ln2_n, xd, shift);
    unsigned long long ki = (unsigned long long)__double_as_longlong(kd);
    kd -= shift;
    double r = fma(inv_ln2_n, xd, -kd);
    double s = __longlong_as_double((long long)(EXPF_TABLE[ki % 32] + (ki << 47)));
    double z = fma(c0, r, c1);
    double r2 = r * r;
    double y = fma(c2, r, 1.0);
    y = fma(z, r2, y);
    return (float)(y * s);
}

// GCC's `_mm512_reduce_add_ps` of 16 lanes (`model::ops::reduce16`).
__device__ __forceinline__ float reduce16(const float* v) {
    float a[8];
#pragma unroll
    for (int i = 0; i < 8; i++) a[i] = v[i + 8] + v[i];
    float b0 = a[4] + a[0], b1 = a[5] + a[1], b2 = a[6] + a[2], b3 = a[7] + a[3];
    return (b0 + b2) + (b1 + b3);
}

// ggml's GGML_F32x16_REDUCE of four 16-lane accumulators, back to back in
// `v` (`model::ops::reduce64`).
__device__ __forceinline__ float reduce64(const float* v) {
    float x[16];
#pragma unroll
    for (int l = 0; l < 16; l++) x[l] = (v[l] + v[32 + l]) + (v[16 + l] + v[48 + l]);
    return reduce16(x);
}

// `model::ops::dot` (ggml's AVX-512 `ggml_vec_dot_f32`): whole groups of
// 64 in 64 fused lanes, reduce64, then the tail one by one.
__device__ float dot64(const float* a, const float* b, int n) {
    float lanes[64];
#pragma unroll
    for (int l = 0; l < 64; l++) lanes[l] = 0.0f;
    int whole = n / 64 * 64;
    for (int i = 0; i < whole; i += 64) {
#pragma unroll
        for (int l = 0; l < 64; l++) lanes[l] = fmaf(a[i + l], b[i + l], lanes[l]);
    }
    float sum = reduce64(lanes);
    for (int i = whole; i < n; i++) sum += a[i] * b[i];
    return sum;
}

// The sum of the group of 16 at `v` of which `n` exist (the rest zeros).
__device__ float group16(const float* v, int n) {
    float lanes[16];
#pragma unroll
    for (int l = 0; l < 16; l++) lanes[l] = l < n ? v[l] : 0.0f;
    return reduce16(lanes);
}

// The sum of `v` over the block (THREADS threads); every thread gets it.
__device__ double block_sum(double v, double* scratch) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
        __syncthreads();
    }
    double total = scratch[0];
    __syncthreads();
    return total;
}

__device__ float block_max(float v, float* scratch) {
    scratch[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) scratch[threadIdx.x] = fmaxf(scratch[threadIdx.x], scratch[threadIdx.x + s]);
        __syncthreads();
    }
    float m = scratch[0];
    __syncthreads();
    return m;
}

// out = x / rms(x) * weight, one block per row of `dim` values.
extern "C" __global__ void rms_norm(const float* x, const float* weight, float* out, int dim, float eps) {
    __shared__ double scratch[THREADS];
    const float* row = x + (size_t)blockIdx.x * dim;
    float* o = out + (size_t)blockIdx.x * dim;
    double sum = 0.0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) sum += (double)(row[i] * row[i]);
    sum = block_sum(sum, scratch);
    float mean = (float)(sum / (double)dim);
    float scale = 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = row[i] * scale * weight[i];
}

// x[i] += bias[i % dim] over `total` values.
extern "C" __global__ void add_bias(float* x, const float* bias, int dim, int total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) x[i] += bias[i % dim];
}

// x += y.
extern "C" __global__ void add(float* x, const float* y, int total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) x[i] += y[i];
}

// gate = silu(gate) * up over the whole buffer as `model::ops::swiglu`:
// whole groups of 16 with v_expf, the last total % 16 with libm's expf.
extern "C" __global__ void swiglu(float* gate, const float* up, int total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) {
        float g = gate[i];
        float e = i < total / 16 * 16 ? v_expf(0.0f - g) : libm_expf(-g);
        gate[i] = g / (1.0f + e) * up[i];
    }
}

// Stores `total` values of new keys and values (tokens × kv_dim) in the
// caches from position `*pos` on: `keys[*pos * kv_dim + i] = k[i]`.
extern "C" __global__ void kv_store(const float* k, const float* v, float* keys, float* values,
                                    const int* pos, int kv_dim, int total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) {
        size_t at = (size_t)*pos * kv_dim + i;
        keys[at] = k[i];
        values[at] = v[i];
    }
}

// Rotates the first `dims` dimensions of every `head_dim` head of `x`
// (tokens × heads × head_dim) for positions pos0, pos0 + 1, ... (`*pos`,
// read from device memory so that a captured decode step replays at any
// position): one
// thread per (token, head, pair). `neox` pairs (i, i + dims/2), otherwise
// (2i, 2i + 1). The angle of pair i is the position times theta_scale^i,
// multiplied up step by step as the CPU does.
extern "C" __global__ void rope(float* x, int tokens, int heads, int head_dim, int dims,
                                float theta_scale, int neox, const int* pos) {
    int pos0 = *pos;
    int pairs = dims / 2;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= tokens * heads * pairs) return;
    int pair = i % pairs, head = (i / pairs) % heads, t = i / (pairs * heads);
    float theta = (float)(pos0 + t);
    for (int k = 0; k < pair; k++) theta *= theta_scale;
    float c = cosf(theta), s = sinf(theta);
    float* h = x + ((size_t)t * heads + head) * head_dim;
    int a = neox ? pair : 2 * pair;
    int b = neox ? pair + pairs : 2 * pair + 1;
    float x0 = h[a], x1 = h[b];
    h[a] = fmaf(x0, c, -(x1 * s));
    h[b] = fmaf(x0, s, x1 * c);
}

// Causal grouped-query attention: block (head, token) attends over the
// cached positions 0..=pos0 + token (pos0 = `*pos`, in device memory as
// for `rope`). Block y is token t0 + y; `scores` holds `stride` floats (at
// least pos0 + t0 + gridDim.y) per (y, head).
// Query head h reads key/value head h / (heads / kv_heads). As
// `model::ops::attend`: scores by dot64, softmax with v_expf and its
// denominator summed group by group of 16 in order, each value's sum in
// 16 fused lanes for a token computed with others in its piece of 512
// (`model::ops::in_batch`; `n` tokens in all) or 64 for one alone, reduced
// as the CPU reduces them.
extern "C" __global__ void attention(const float* q, const float* keys, const float* values,
                                     float* out, float* scores, int heads, int kv_heads,
                                     int head_dim, const int* pos, int stride, float scale,
                                     int t0, int n) {
    __shared__ float fscratch[THREADS];
    int pos0 = *pos;
    __shared__ double total;
    int head = blockIdx.x, t = t0 + blockIdx.y;
    int len = pos0 + t + 1;
    int kv_dim = kv_heads * head_dim;
    int offset = (head / (heads / kv_heads)) * head_dim;
    const float* qh = q + ((size_t)t * heads + head) * head_dim;
    float* s = scores + ((size_t)blockIdx.y * heads + head) * stride;
    float max = __int_as_float(0xff800000); // -infinity
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        const float* k = keys + (size_t)j * kv_dim + offset;
        s[j] = dot64(k, qh, head_dim) * scale;
        max = fmaxf(max, s[j]);
    }
    max = block_max(max, fscratch);
    for (int j = threadIdx.x; j < len; j += blockDim.x) s[j] = v_expf(s[j] - max);
    if (threadIdx.x == 0) total = 0.0;
    __syncthreads();
    // Each group's sum in parallel, THREADS groups at a time; thread 0 adds
    // them to the double in group order, as the CPU's loop does.
    int groups = (len + 15) / 16;
    for (int g0 = 0; g0 < groups; g0 += blockDim.x) {
        int g = g0 + threadIdx.x;
        if (g < groups) fscratch[threadIdx.x] = group16(s + 16 * g, len - 16 * g);
        __syncthreads();
        if (threadIdx.x == 0) {
            int n = min((int)blockDim.x, groups - g0);
            for (int i = 0; i < n; i++) total += (double)fscratch[i];
        }
        __syncthreads();
    }
    float inverse = (float)(1.0 / total);
    for (int j = threadIdx.x; j < len; j += blockDim.x) s[j] *= inverse;
    __syncthreads();
    float* o = out + ((size_t)t * heads + head) * head_dim;
    int piece = t / 512 * 512;
    int batch = min(n, piece + 512) - piece > 1;
    int slots = batch ? 16 : 64;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float lanes[64];
        for (int k = 0; k < slots; k++) {
            float acc = 0.0f;
            for (int j = k; j < len; j += slots) acc = fmaf(values[(size_t)j * kv_dim + offset + d], s[j], acc);
            lanes[k] = acc;
        }
        o[d] = batch ? reduce16(lanes) : reduce64(lanes);
    }
}
