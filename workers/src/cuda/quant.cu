// Products of weight rows with activation rows, one warp per output: the
// weights stay in their GGUF blocks, the activations are encoded first as
// ggml encodes them for the CPU dot products (Q8_0 for Q8_0, Q5_0 and
// Q4_0 weights, Q8_K for the k-quants, the weight's own type for floats).
//
// Launch: blocks of (warps × 32) threads, grid (ceil(rows / warps), tokens);
// warp w of block b computes row b * warps + w for token blockIdx.y, and
// writes y[token * rows + row]. The `_tiled` Q8_0 and Q4_0 products take
// TILE tokens per block along y instead (grid (ceil(rows / warps),
// ceil(tokens / TILE))).
//
// Each block's integer sum is exact and is scaled as the CPU scales it
// (the host compiles with --fmad=false so no multiply-add is fused); only
// the order in which block results are added differs from the CPU's.

#define WARP 32

__device__ __forceinline__ int warp_row(int rows) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    return row < rows ? row : -1;
}

// Q8_0 activations: one warp per 32-value block. `q` gets the values,
// `d` the block scale rounded to f16 as the CPU stores it.
extern "C" __global__ void quantize_q8_0(const float* x, i8* q, float* d, int blocks) {
    int block = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (block >= blocks) return;
    int lane = threadIdx.x % WARP;
    float v = x[block * 32 + lane];
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    }
    float scale = amax / 127.0f;
    float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
    q[block * 32 + lane] = (i8)__float2int_rn(v * inverse);
    if (lane == 0) d[block] = f16_to_f32(f32_to_f16(scale));
}

// Q8_K activations: one warp per 256-value block, 8 values a lane. The
// scale is set by the first value of largest magnitude, as the CPU's.
extern "C" __global__ void quantize_q8_k(const float* x, i8* q, float* d, int* sums, int blocks) {
    int block = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    if (block >= blocks) return;
    int lane = threadIdx.x % WARP;
    const float* v = x + block * 256 + lane * 8;
    float max = 0.0f;
    int at = 1 << 30;
    for (int i = 0; i < 8; i++) {
        if (fabsf(v[i]) > fabsf(max)) {
            max = v[i];
            at = lane * 8 + i;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float m = __shfl_xor_sync(0xffffffffu, max, o);
        int a = __shfl_xor_sync(0xffffffffu, at, o);
        if (fabsf(m) > fabsf(max) || (fabsf(m) == fabsf(max) && a < at)) {
            max = m;
            at = a;
        }
    }
    int sum = 0;
    if (max == 0.0f) {
        for (int i = 0; i < 8; i++) q[block * 256 + lane * 8 + i] = 0;
        if (lane == 0) d[block] = 0.0f;
    } else {
        float iscale = -127.0f / max;
        for (int i = 0; i < 8; i++) {
            int l = min(__float2int_rn(iscale * v[i]), 127);
            q[block * 256 + lane * 8 + i] = (i8)l;
            sum += l;
        }
        if (lane == 0) d[block] = 1.0f / iscale;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    if (lane % 2 == 0) sums[block * 16 + lane / 2] = sum;
}

// f32 activations rounded to a 16-bit float type for F16 or BF16 weights.
extern "C" __global__ void encode_f16(const float* x, u16* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = f32_to_f16(x[i]);
}

extern "C" __global__ void encode_bf16(const float* x, u16* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = f32_to_bf16(x[i]);
}

// Two bytes at a 2-byte alignment (blocks of 34 and 18 bytes leave their
// quants there) as one 16-bit load each: four bytes as one word.
__device__ __forceinline__ int load_i32_b2(const u8* p) {
    const u16* h = (const u16*)p;
    return (int)((u32)h[0] | ((u32)h[1] << 16));
}

// Q8_0 · Q8_0: four lanes per block, eight values each (two words of
// weights, 16-bit loads, against two of activations); the block's integer
// sum meets in its first lane, which scales it. A warp reads eight
// neighbouring blocks per step, every lane a load of its own.
extern "C" __global__ void matvec_q8_0(const u8* w, const i8* aq, const float* ad, float* y,
                                       int rows, int cols) {
    int row = warp_row(rows);
    if (row < 0) return;
    int lane = threadIdx.x % WARP, t = blockIdx.y, blocks = cols / 32;
    int part = lane % 4;
    const u8* wrow = w + (size_t)row * blocks * 34;
    const i8* a = aq + (size_t)t * cols;
    float sum = 0.0f;
#pragma unroll 4
    for (int first = 0; first < blocks; first += WARP / 4) {
        int b = first + lane / 4;
        int s = 0;
        if (b < blocks) {
            const u8* q = wrow + b * 34 + 2 + part * 8;
            const int* ab = (const int*)(a + b * 32 + part * 8);
            s = __dp4a(load_i32_b2(q), ab[0], s);
            s = __dp4a(load_i32_b2(q + 4), ab[1], s);
        }
        s = group_sum(s, 4);
        if (part == 0 && b < blocks) {
            sum += (float)s * (load_f16(wrow + b * 34) * ad[t * blocks + b]);
        }
    }
    sum = warp_sum(sum);
    if (lane == 0) y[(size_t)t * rows + row] = sum;
}

// Four fifth bits (bits 0..4 of `b`) as bit 4 of four bytes.
__device__ __forceinline__ int fifth_bits(u32 b) {
    return (int)(((b & 1) << 4) | ((b & 2) << 11) | ((b & 4) << 18) | ((b & 8) << 25));
}

// Q4_0 (and Q5_0, `FIVE`) · Q8_0: two lanes per block. Lane `half` takes
// quant bytes 8 * half .. 8 * half + 8: their low nibbles are values
// 8 * half + i, their high nibbles values 16 + 8 * half + i; a Q5_0 block
// (22 bytes, quants at 6) keeps value v's fifth bit as bit v of the word
// at byte 2. The values go through __dp4a unsigned, and the offset (8, or
// 16) times the activations' sum comes off after (sum((q - 8) a) =
// sum(q a) - 8 sum(a)), exactly. A warp reads sixteen neighbouring blocks
// per step.
template <bool FIVE>
__device__ __forceinline__ void matvec_q45_0(const u8* w, const i8* aq, const float* ad, float* y,
                                             int rows, int cols) {
    const int size = FIVE ? 22 : 18, quants = FIVE ? 6 : 2, offset = FIVE ? 16 : 8;
    int row = warp_row(rows);
    if (row < 0) return;
    int lane = threadIdx.x % WARP, t = blockIdx.y, blocks = cols / 32;
    int half = lane % 2;
    const u8* wrow = w + (size_t)row * blocks * size;
    const i8* a = aq + (size_t)t * cols;
    float sum = 0.0f;
#pragma unroll 4
    for (int first = 0; first < blocks; first += WARP / 2) {
        int b = first + lane / 2;
        int s = 0;
        if (b < blocks) {
            const u8* blk = wrow + b * size;
            const u8* q = blk + quants + half * 8;
            const int* lo = (const int*)(a + b * 32 + half * 8);
            const int* hi = (const int*)(a + b * 32 + 16 + half * 8);
            int w0 = load_i32_b2(q), w1 = load_i32_b2(q + 4);
            int l0 = w0 & 0x0F0F0F0F, l1 = w1 & 0x0F0F0F0F;
            int h0 = (w0 >> 4) & 0x0F0F0F0F, h1 = (w1 >> 4) & 0x0F0F0F0F;
            if (FIVE) {
                u32 qh = (u32)load_i32_b2(blk + 2);
                int v = half * 8;
                l0 |= fifth_bits(qh >> v);
                l1 |= fifth_bits(qh >> (v + 4));
                h0 |= fifth_bits(qh >> (v + 16));
                h1 |= fifth_bits(qh >> (v + 20));
            }
            s = __dp4a(l0, lo[0], s);
            s = __dp4a(l1, lo[1], s);
            s = __dp4a(h0, hi[0], s);
            s = __dp4a(h1, hi[1], s);
            int total = __dp4a(0x01010101, lo[0], 0);
            total = __dp4a(0x01010101, lo[1], total);
            total = __dp4a(0x01010101, hi[0], total);
            total = __dp4a(0x01010101, hi[1], total);
            s -= offset * total;
        }
        s = group_sum(s, 2);
        if (half == 0 && b < blocks) {
            sum += (float)s * (load_f16(wrow + b * size) * ad[t * blocks + b]);
        }
    }
    sum = warp_sum(sum);
    if (lane == 0) y[(size_t)t * rows + row] = sum;
}

extern "C" __global__ void matvec_q4_0(const u8* w, const i8* aq, const float* ad, float* y,
                                       int rows, int cols) {
    matvec_q45_0<false>(w, aq, ad, y, rows, cols);
}

// Q5_0 takes this one kernel for a batch too, one token per grid row.
extern "C" __global__ void matvec_q5_0(const u8* w, const i8* aq, const float* ad, float* y,
                                       int rows, int cols) {
    matvec_q45_0<true>(w, aq, ad, y, rows, cols);
}

// The Q8_0 and Q4_0 products for a batch (a prefill): TILE tokens per
// block along y (`launch::TOKEN_TILE`), so each weight word is loaded once
// and used for up to TILE tokens, whose sums stay in registers. The lanes
// do as in the one-token kernels above, and each token's sum is taken in
// the same order, so a token's result is the same bits either way. (One
// token runs the kernels above: on an H200 the tiled ones made decode
// slower, 225 -> 191 tok/s on a 7B q4_0, and a 128-token prefill faster,
// 614 -> 787.)
#define TILE 8

// Q8_0 · Q8_0 for a batch: block y takes tokens TILE * y .. TILE * y +
// TILE (fewer at the end).
extern "C" __global__ void matvec_q8_0_tiled(const u8* w, const i8* aq, const float* ad, float* y,
                                       int rows, int cols, int tokens) {
    int row = warp_row(rows);
    if (row < 0) return;
    int lane = threadIdx.x % WARP, blocks = cols / 32;
    int t0 = blockIdx.y * TILE, nt = min(TILE, tokens - t0);
    int part = lane % 4;
    const u8* wrow = w + (size_t)row * blocks * 34;
    float sum[TILE];
#pragma unroll
    for (int i = 0; i < TILE; i++) sum[i] = 0.0f;
    for (int first = 0; first < blocks; first += WARP / 4) {
        int b = first + lane / 4;
        bool live = b < blocks;
        int w0 = 0, w1 = 0;
        float wd = 0.0f;
        if (live) {
            const u8* q = wrow + b * 34 + 2 + part * 8;
            w0 = load_i32_b2(q);
            w1 = load_i32_b2(q + 4);
            wd = load_f16(wrow + b * 34);
        }
#pragma unroll
        for (int i = 0; i < TILE; i++) {
            if (i < nt) {
                int t = t0 + i, s = 0;
                if (live) {
                    const int* ab = (const int*)(aq + (size_t)t * cols + b * 32 + part * 8);
                    s = __dp4a(w0, ab[0], s);
                    s = __dp4a(w1, ab[1], s);
                }
                s = group_sum(s, 4);
                if (part == 0 && live) sum[i] += (float)s * (wd * ad[t * blocks + b]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < TILE; i++) {
        if (i < nt) {
            float total = warp_sum(sum[i]);
            if (lane == 0) y[(size_t)(t0 + i) * rows + row] = total;
        }
    }
}

// Q4_0 · Q8_0 for a batch, tokens along y as for Q8_0.
extern "C" __global__ void matvec_q4_0_tiled(const u8* w, const i8* aq, const float* ad, float* y,
                                       int rows, int cols, int tokens) {
    int row = warp_row(rows);
    if (row < 0) return;
    int lane = threadIdx.x % WARP, blocks = cols / 32;
    int t0 = blockIdx.y * TILE, nt = min(TILE, tokens - t0);
    int half = lane % 2;
    const u8* wrow = w + (size_t)row * blocks * 18;
    float sum[TILE];
#pragma unroll
    for (int i = 0; i < TILE; i++) sum[i] = 0.0f;
    for (int first = 0; first < blocks; first += WARP / 2) {
        int b = first + lane / 2;
        bool live = b < blocks;
        int lo0 = 0, lo1 = 0, hi0 = 0, hi1 = 0;
        float wd = 0.0f;
        if (live) {
            const u8* q = wrow + b * 18 + 2 + half * 8;
            int w0 = load_i32_b2(q), w1 = load_i32_b2(q + 4);
            lo0 = w0 & 0x0F0F0F0F;
            lo1 = w1 & 0x0F0F0F0F;
            hi0 = (w0 >> 4) & 0x0F0F0F0F;
            hi1 = (w1 >> 4) & 0x0F0F0F0F;
            wd = load_f16(wrow + b * 18);
        }
#pragma unroll
        for (int i = 0; i < TILE; i++) {
            if (i < nt) {
                int t = t0 + i, s = 0;
                if (live) {
                    const i8* a = aq + (size_t)t * cols + b * 32;
                    const int* lo = (const int*)(a + half * 8);
                    const int* hi = (const int*)(a + 16 + half * 8);
                    s = __dp4a(lo0, lo[0], s);
                    s = __dp4a(lo1, lo[1], s);
                    s = __dp4a(hi0, hi[0], s);
                    s = __dp4a(hi1, hi[1], s);
                    int total = __dp4a(0x01010101, lo[0], 0);
                    total = __dp4a(0x01010101, lo[1], total);
                    total = __dp4a(0x01010101, hi[0], total);
                    total = __dp4a(0x01010101, hi[1], total);
                    s -= 8 * total;
                }
                s = group_sum(s, 2);
                if (half == 0 && live) sum[i] += (float)s * (wd * ad[t * blocks + b]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < TILE; i++) {
        if (i < nt) {
            float total = warp_sum(sum[i]);
            if (lane == 0) y[(size_t)(t0 + i) * rows + row] = total;
        }
    }
}

// ggml's get_scale_min_k4: sub-block j's 6-bit scale and min.
__device__ __forceinline__ void q4k_scale_min(int j, const u8* s, int* scale, int* min) {
    if (j < 4) {
        *scale = s[j] & 63;
        *min = s[j + 4] & 63;
    } else {
        *scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q4_K · Q8_K (and Q5_K, `FIVE`): eight lanes per 256-value block, one
// 32-value sub-block each; the group's integer sums meet in its first
// lane, which scales them. A Q5_K block (176 bytes) keeps its fifth bits
// at byte 16 (bit j of byte l: sub-block j's value l) and its nibbles at
// 48; a Q4_K block (144 bytes) its nibbles at 16.
template <bool FIVE>
__device__ __forceinline__ void matvec_k45(const u8* w, const i8* aq, const float* ad,
                                           const int* sums, float* y, int rows, int cols) {
    const int size = FIVE ? 176 : 144, quants = FIVE ? 48 : 16;
    int row = warp_row(rows);
    if (row < 0) return;
    int lane = threadIdx.x % WARP, t = blockIdx.y, blocks = cols / 256;
    int group = lane / 8, j = lane % 8;
    const u8* wrow = w + (size_t)row * blocks * size;
    float sum = 0.0f;
    for (int b0 = 0; b0 < blocks; b0 += 4) {
        int b = b0 + group;
        int sumi = 0, summ = 0;
        if (b < blocks) {
            const u8* blk = wrow + b * size;
            const i8* a = aq + (size_t)t * cols + b * 256 + j * 32;
            const int* bs = sums + ((size_t)t * blocks + b) * 16;
            int scale, min;
            q4k_scale_min(j, blk + 4, &scale, &min);
            const u8* q = blk + quants + (j / 2) * 32;
            int shift = (j % 2) * 4, s = 0;
            for (int l = 0; l < 32; l++) {
                int v = (q[l] >> shift) & 0xF;
                if (FIVE) v |= ((blk[16 + l] >> j) & 1) << 4;
                s += v * a[l];
            }
            sumi = scale * s;
            summ = min * (bs[2 * j] + bs[2 * j + 1]);
        }
        sumi = group_sum(sumi, 8);
        summ = group_sum(summ, 8);
        if (b < blocks && j == 0) {
            const u8* blk = wrow + b * size;
            float dy = ad[(size_t)t * blocks + b];
            sum += load_f16(blk) * dy * (float)sumi - load_f16(blk + 2) * dy * (float)summ;
        }
    }
    sum = warp_sum(sum);
    if (lane == 0) y[(size_t)t * rows + row] = sum;
}

extern "C" __global__ void matvec_q4_k(const u8* w, const i8* aq, const float* ad,
                                       const int* sums, float* y, int rows, int cols) {
    matvec_k45<false>(w, aq, ad, sums, y, rows, cols);
}

extern "C" __global__ void matvec_q5_k(const u8* w, const i8* aq, const float* ad,
                                       const int* sums, float* y, int rows, int cols) {
    matvec_k45<true>(w, aq, ad, sums, y, rows, cols);
}

// Q6_K · Q8_K: eight lanes per block, 32 values (two 16-value sub-blocks)
// each. Lane j's values are one quarter of one half of the block.
extern "C" __global__ void matvec_q6_k(const u8* w, const i8* aq, const float* ad, float* y,
                                       int rows, int cols) {
    int row = warp_row(rows);
    if (row < 0) return;
    int lane = threadIdx.x % WARP, t = blockIdx.y, blocks = cols / 256;
    int group = lane / 8, j = lane % 8;
    int half = j / 4, quarter = j % 4;
    const u8* wrow = w + (size_t)row * blocks * 210;
    float sum = 0.0f;
    for (int b0 = 0; b0 < blocks; b0 += 4) {
        int b = b0 + group;
        int sumi = 0;
        if (b < blocks) {
            const u8* blk = wrow + b * 210;
            const u8* ql = blk + half * 64 + (quarter & 1) * 32;
            const u8* qh = blk + 128 + half * 32;
            const i8* sc = (const i8*)(blk + 192);
            const i8* a = aq + (size_t)t * cols + b * 256 + j * 32;
            int lo = 0, hi = 0;
            for (int l = 0; l < 32; l++) {
                int nibble = quarter >= 2 ? (ql[l] >> 4) : (ql[l] & 0xF);
                int q = (nibble | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
                if (l < 16) lo += q * a[l]; else hi += q * a[l];
            }
            sumi = sc[2 * j] * lo + sc[2 * j + 1] * hi;
        }
        sumi = group_sum(sumi, 8);
        if (b < blocks && j == 0) {
            float dy = ad[(size_t)t * blocks + b];
            sum += load_f16(wrow + b * 210 + 208) * dy * (float)sumi;
        }
    }
    sum = warp_sum(sum);
    if (lane == 0) y[(size_t)t * rows + row] = sum;
}

// Float weights without cuBLAS: the activations already in the weight's
// type (f32 as they are).
extern "C" __global__ void matvec_f32(const float* w, const float* x, float* y, int rows, int cols) {
    int row = warp_row(rows);
    if (row < 0) return;
    int lane = threadIdx.x % WARP, t = blockIdx.y;
    const float* wr = w + (size_t)row * cols;
    const float* a = x + (size_t)t * cols;
    float sum = 0.0f;
    for (int i = lane; i < cols; i += WARP) sum += wr[i] * a[i];
    sum = warp_sum(sum);
    if (lane == 0) y[(size_t)t * rows + row] = sum;
}

extern "C" __global__ void matvec_f16(const u16* w, const u16* x, float* y, int rows, int cols) {
    int row = warp_row(rows);
    if (row < 0) return;
    int lane = threadIdx.x % WARP, t = blockIdx.y;
    const u16* wr = w + (size_t)row * cols;
    const u16* a = x + (size_t)t * cols;
    float sum = 0.0f;
    for (int i = lane; i < cols; i += WARP) sum += f16_to_f32(wr[i]) * f16_to_f32(a[i]);
    sum = warp_sum(sum);
    if (lane == 0) y[(size_t)t * rows + row] = sum;
}

extern "C" __global__ void matvec_bf16(const u16* w, const u16* x, float* y, int rows, int cols) {
    int row = warp_row(rows);
    if (row < 0) return;
    int lane = threadIdx.x % WARP, t = blockIdx.y;
    const u16* wr = w + (size_t)row * cols;
    const u16* a = x + (size_t)t * cols;
    float sum = 0.0f;
    for (int i = lane; i < cols; i += WARP) sum += bf16_to_f32(wr[i]) * bf16_to_f32(a[i]);
    sum = warp_sum(sum);
    if (lane == 0) y[(size_t)t * rows + row] = sum;
}
