// Products of weight rows with activation rows, one warp per output: the
// weights stay in their GGUF blocks, the activations are encoded first as
// ggml encodes them for the CPU dot products (Q8_0 for Q8_0, Q5_0 and
// Q4_0 weights, Q8_1 for Q4_1 and Q5_1, the weight's own type for
// floats; the k-quants and their Q8_K are in `kquant.cu`).
//
// Launch: blocks of (warps × 32) threads, grid (ceil(rows / warps), tokens);
// warp w of block b computes row b * warps + w for token blockIdx.y, and
// writes y[token * rows + row]. The `_tiled` Q8_0 and Q4_0 products take
// TILE tokens per block along y instead (grid (ceil(rows / warps),
// ceil(tokens / TILE))).
//
// Each block's integer sum is exact and is scaled as the CPU scales it
// (the host compiles with --fmad=false so no multiply-add is fused); only
// the order in which block results are added differs from the CPU's. (A
// Q4_1 or Q5_1 block's min times the activations' scaled sum is added
// to its scaled sum unfused, as the portable CPU kernel adds it; the SIMD
// ones keep those products apart, fused, as llama.cpp does.)

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

// Q8_1 activations: Q8_0's, and `s` the block scale (unrounded) times the
// sum of the values, rounded to f16 as the CPU stores it.
extern "C" __global__ void quantize_q8_1(const float* x, i8* q, float* d, float* s, int blocks) {
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
    int value = __float2int_rn(v * inverse);
    q[block * 32 + lane] = (i8)value;
    int sum = value;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) {
        d[block] = f16_to_f32(f32_to_f16(scale));
        s[block] = f16_to_f32(f32_to_f16(scale * (float)sum));
    }
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

// Q4_0 (and Q5_0, `FIVE`) · Q8_0, and Q4_1 and Q5_1 · Q8_1 (`MIN`): two
// lanes per block. Lane `half` takes quant bytes 8 * half .. 8 * half + 8:
// their low nibbles are values 8 * half + i, their high nibbles values 16
// + 8 * half + i. A Q5_0 block (22 bytes, quants at 6) keeps value v's
// fifth bit as bit v of the word at byte 2; a Q4_1 block (20 bytes) has
// its scale and min before its quants (at 4), a Q5_1 block (24) its
// fifth bits after them (the word at 4, quants at 8). The values go
// through __dp4a unsigned. For Q4_0 and Q5_0 the offset (8, or 16) times
// the activations' sum comes off after (sum((q - 8) a) = sum(q a) - 8
// sum(a)), exactly; for Q4_1 and Q5_1 the block's min times the
// activations' `as` (the Q8_1 block's scaled sum) is added to the scaled
// sum. IQ4_NL (`NL`, 18 bytes, Q4_0's layout) looks each nibble up in
// its table of values, signed, with no offset. A warp reads sixteen
// neighbouring blocks per step.
template <bool FIVE, bool MIN, bool NL = false>
__device__ __forceinline__ void matvec_q45(const u8* w, const i8* aq, const float* ad,
                                           const float* as, float* y, int rows, int cols) {
    const int size = MIN ? (FIVE ? 24 : 20) : (FIVE ? 22 : 18);
    const int quants = MIN ? (FIVE ? 8 : 4) : (FIVE ? 6 : 2);
    const int fifth = MIN ? 4 : 2, offset = MIN || NL ? 0 : (FIVE ? 16 : 8);
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
                u32 qh = (u32)load_i32_b2(blk + fifth);
                int v = half * 8;
                l0 |= fifth_bits(qh >> v);
                l1 |= fifth_bits(qh >> (v + 4));
                h0 |= fifth_bits(qh >> (v + 16));
                h1 |= fifth_bits(qh >> (v + 20));
            }
            if (NL) {
                l0 = iq4_lookup(l0);
                l1 = iq4_lookup(l1);
                h0 = iq4_lookup(h0);
                h1 = iq4_lookup(h1);
            }
            s = __dp4a(l0, lo[0], s);
            s = __dp4a(l1, lo[1], s);
            s = __dp4a(h0, hi[0], s);
            s = __dp4a(h1, hi[1], s);
            if (offset != 0) {
                int total = __dp4a(0x01010101, lo[0], 0);
                total = __dp4a(0x01010101, lo[1], total);
                total = __dp4a(0x01010101, hi[0], total);
                total = __dp4a(0x01010101, hi[1], total);
                s -= offset * total;
            }
        }
        s = group_sum(s, 2);
        if (half == 0 && b < blocks) {
            const u8* blk = wrow + b * size;
            int at = t * blocks + b;
            if (MIN) {
                sum += (float)s * (load_f16(blk) * ad[at]) + load_f16(blk + 2) * as[at];
            } else {
                sum += (float)s * (load_f16(blk) * ad[at]);
            }
        }
    }
    sum = warp_sum(sum);
    if (lane == 0) y[(size_t)t * rows + row] = sum;
}

extern "C" __global__ void matvec_q4_0(const u8* w, const i8* aq, const float* ad, float* y,
                                       int rows, int cols) {
    matvec_q45<false, false>(w, aq, ad, nullptr, y, rows, cols);
}

// Q5_0, Q4_1 and Q5_1 take these one kernels for a batch too, one token
// per grid row.
extern "C" __global__ void matvec_q5_0(const u8* w, const i8* aq, const float* ad, float* y,
                                       int rows, int cols) {
    matvec_q45<true, false>(w, aq, ad, nullptr, y, rows, cols);
}

extern "C" __global__ void matvec_q4_1(const u8* w, const i8* aq, const float* ad,
                                       const float* as, float* y, int rows, int cols) {
    matvec_q45<false, true>(w, aq, ad, as, y, rows, cols);
}

extern "C" __global__ void matvec_q5_1(const u8* w, const i8* aq, const float* ad,
                                       const float* as, float* y, int rows, int cols) {
    matvec_q45<true, true>(w, aq, ad, as, y, rows, cols);
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

extern "C" __global__ void matvec_iq4_nl(const u8* w, const i8* aq, const float* ad, float* y,
                                         int rows, int cols) {
    matvec_q45<false, false, true>(w, aq, ad, nullptr, y, rows, cols);
}
