// The element-wise parts of a block, computed as the CPU path computes
// them (`model::ops`): sums of squares and softmax denominators in double,
// the rope angle stepped by multiplication.

#define THREADS 256

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

// gate = silu(gate) * up.
extern "C" __global__ void swiglu(float* gate, const float* up, int total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(0.0f - g)) * up[i];
    }
}

// Rotates the first `dims` dimensions of every `head_dim` head of `x`
// (tokens × heads × head_dim) for positions pos0, pos0 + 1, ...: one
// thread per (token, head, pair). `neox` pairs (i, i + dims/2), otherwise
// (2i, 2i + 1). The angle of pair i is the position times theta_scale^i,
// multiplied up step by step as the CPU does.
extern "C" __global__ void rope(float* x, int tokens, int heads, int head_dim, int dims,
                                float theta_scale, int neox, int pos0) {
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
    h[a] = x0 * c - x1 * s;
    h[b] = x0 * s + x1 * c;
}

// Causal grouped-query attention: block (head, token) attends over the
// cached positions 0..=pos0 + token. `scores` holds `stride` floats per
// (token, head), at least pos0 + tokens. Query head h reads key/value head h / (heads / kv_heads).
extern "C" __global__ void attention(const float* q, const float* keys, const float* values,
                                     float* out, float* scores, int heads, int kv_heads,
                                     int head_dim, int pos0, int stride, float scale) {
    __shared__ double scratch[THREADS];
    __shared__ float fscratch[THREADS];
    int head = blockIdx.x, t = blockIdx.y;
    int len = pos0 + t + 1;
    int kv_dim = kv_heads * head_dim;
    int offset = (head / (heads / kv_heads)) * head_dim;
    const float* qh = q + ((size_t)t * heads + head) * head_dim;
    float* s = scores + ((size_t)t * heads + head) * stride;
    float max = __int_as_float(0xff800000); // -infinity
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        const float* k = keys + (size_t)j * kv_dim + offset;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; d++) dot += qh[d] * k[d];
        s[j] = dot * scale;
        max = fmaxf(max, s[j]);
    }
    max = block_max(max, fscratch);
    double sum = 0.0;
    for (int j = threadIdx.x; j < len; j += blockDim.x) {
        float e = expf(s[j] - max);
        s[j] = e;
        sum += (double)e;
    }
    sum = block_sum(sum, scratch);
    float inverse = (float)(1.0 / sum);
    float* o = out + ((size_t)t * heads + head) * head_dim;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < len; j++) acc += (s[j] * inverse) * values[(size_t)j * kv_dim + offset + d];
        o[d] = acc;
    }
}
