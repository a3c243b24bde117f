// The k-quant products (Q2_K to Q6_K, and IQ4_XS) and their Q8_K
// activations, in `quant.cu`'s shape (one warp per output, grid
// (ceil(rows / warps), tokens); each block's integer sums exact and
// scaled in the portable CPU kernels' steps; the SIMD ones order some
// float steps as llama.cpp does).

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

// Q3_K's six-bit scale `k` (of 16) from its 12 scale bytes at `s`, less 32.
__device__ __forceinline__ int q3k_scale(const u8* s, int k) {
    int low = k < 8 ? (s[k] & 0xF) : (s[k - 8] >> 4);
    int high = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (low | (high << 4)) - 32;
}

// Value 32 j + l of a Q6_K block: lane j's values are one quarter of one
// half of the block.
__device__ __forceinline__ int q6k_value(const u8* blk, int j, int l) {
    int half = j / 4, quarter = j % 4;
    const u8* ql = blk + half * 64 + (quarter & 1) * 32;
    const u8* qh = blk + 128 + half * 32;
    int nibble = quarter >= 2 ? (ql[l] >> 4) : (ql[l] & 0xF);
    return (nibble | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
}

// Value 32 j + l of a Q3_K block: its two low bits at bits 2 (j % 4) of
// quant byte 32 (j / 4) + l (quants from byte 32), its high bit at bit j
// of mask byte l; 0..3, less 4 where that bit is clear.
__device__ __forceinline__ int q3k_value(const u8* blk, int j, int l) {
    int low = (blk[32 + (j / 4) * 32 + l] >> (2 * (j % 4))) & 3;
    return low - (((blk[l] >> j) & 1) ? 0 : 4);
}

// The k-quants · Q8_K, `BITS` 2 to 6 (and IQ4_XS, below): eight lanes per 256-value block,
// lane j the 32 values 32 j .. 32 j + 32; the group's integer sums meet in
// its first lane, which scales them.
// - Q4_K (144 bytes) and Q5_K (176): lane j's values are sub-block j, its
//   6-bit scale and min at bytes 4..16; Q4_K's nibbles at 16, Q5_K's at
//   48 with its fifth bits at 16 (bit j of byte l: sub-block j's value l).
// - Q2_K (84), Q3_K (110) and Q6_K (210): lane j's values are two
//   16-value sub-blocks, two scales: Q2_K's 4-bit scales and mins at
//   bytes 0..16 and its values' two bits at bits 2 (j % 4) of bytes
//   16 + 32 (j / 4) .. + 32; Q3_K's six-bit scales at 96; Q6_K's signed
//   bytes at 192.
// - d at 0 (Q4_K, Q5_K), 80 (Q2_K), 108 (Q3_K), 208 (Q6_K); where there
//   are mins (Q2_K, Q4_K, Q5_K), dmin right after it, against the
//   activations' 16-value sums.
// - IQ4_XS (`XS`, with BITS 4; 136 bytes): lane j's values are sub-block
//   j, 16 bytes at 8 + 16 j (low nibbles its values 0..16, high ones
//   16..32), each an index into the table of values; its six-bit scale
//   less 32 (low four bits in byte 4 + j / 2, high two at bits 2 j of
//   the word at 2); d at 0, no mins.
template <int BITS, bool XS = false>
__device__ __forceinline__ void matvec_kq(const u8* w, const i8* aq, const float* ad,
                                          const int* sums, float* y, int rows, int cols) {
    const bool mins = !XS && (BITS == 2 || BITS == 4 || BITS == 5);
    const int size = XS ? 136 : BITS == 2 ? 84 : BITS == 3 ? 110 : BITS == 4 ? 144
                   : BITS == 5 ? 176 : 210;
    const int d_at = XS ? 0 : BITS == 2 ? 80 : BITS == 3 ? 108 : BITS == 6 ? 208 : 0;
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
            if (XS) {
                const u8* q = blk + 8 + 16 * j;
                const int* aw = (const int*)a;
                int s = 0;
                for (int l = 0; l < 4; l++) {
                    u32 word = (u32)load_i32_b2(q + 4 * l);
                    s = __dp4a(iq4_lookup(word & 0x0F0F0F0Fu), aw[l], s);
                    s = __dp4a(iq4_lookup((word >> 4) & 0x0F0F0F0Fu), aw[4 + l], s);
                }
                u32 high = (u32)blk[2] | ((u32)blk[3] << 8);
                int scale = (((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((high >> (2 * j)) & 3) << 4)) - 32;
                sumi = scale * s;
            } else if (BITS == 4 || BITS == 5) {
                const int* bs = sums + ((size_t)t * blocks + b) * 16;
                int scale, min;
                q4k_scale_min(j, blk + 4, &scale, &min);
                const u8* q = blk + (BITS == 5 ? 48 : 16) + (j / 2) * 32;
                int shift = (j % 2) * 4, s = 0;
                for (int l = 0; l < 32; l++) {
                    int v = (q[l] >> shift) & 0xF;
                    if (BITS == 5) v |= ((blk[16 + l] >> j) & 1) << 4;
                    s += v * a[l];
                }
                sumi = scale * s;
                summ = min * (bs[2 * j] + bs[2 * j + 1]);
            } else {
                int lo = 0, hi = 0;
                for (int l = 0; l < 32; l++) {
                    int q = BITS == 2 ? (blk[16 + (j / 4) * 32 + l] >> (2 * (j % 4))) & 3
                          : BITS == 3 ? q3k_value(blk, j, l)
                                      : q6k_value(blk, j, l);
                    if (l < 16) lo += q * a[l]; else hi += q * a[l];
                }
                if (BITS == 2) {
                    const int* bs = sums + ((size_t)t * blocks + b) * 16;
                    int s0 = blk[2 * j], s1 = blk[2 * j + 1];
                    sumi = (s0 & 0xF) * lo + (s1 & 0xF) * hi;
                    summ = (s0 >> 4) * bs[2 * j] + (s1 >> 4) * bs[2 * j + 1];
                } else if (BITS == 3) {
                    sumi = q3k_scale(blk + 96, 2 * j) * lo + q3k_scale(blk + 96, 2 * j + 1) * hi;
                } else {
                    const i8* sc = (const i8*)(blk + 192);
                    sumi = sc[2 * j] * lo + sc[2 * j + 1] * hi;
                }
            }
        }
        sumi = group_sum(sumi, 8);
        if (mins) summ = group_sum(summ, 8);
        if (b < blocks && j == 0) {
            const u8* d = wrow + b * size + d_at;
            float dy = ad[(size_t)t * blocks + b];
            if (mins) {
                sum += load_f16(d) * dy * (float)sumi - load_f16(d + 2) * dy * (float)summ;
            } else {
                sum += load_f16(d) * dy * (float)sumi;
            }
        }
    }
    sum = warp_sum(sum);
    if (lane == 0) y[(size_t)t * rows + row] = sum;
}

extern "C" __global__ void matvec_q2_k(const u8* w, const i8* aq, const float* ad,
                                       const int* sums, float* y, int rows, int cols) {
    matvec_kq<2>(w, aq, ad, sums, y, rows, cols);
}

extern "C" __global__ void matvec_q4_k(const u8* w, const i8* aq, const float* ad,
                                       const int* sums, float* y, int rows, int cols) {
    matvec_kq<4>(w, aq, ad, sums, y, rows, cols);
}

extern "C" __global__ void matvec_q5_k(const u8* w, const i8* aq, const float* ad,
                                       const int* sums, float* y, int rows, int cols) {
    matvec_kq<5>(w, aq, ad, sums, y, rows, cols);
}

extern "C" __global__ void matvec_q6_k(const u8* w, const i8* aq, const float* ad, float* y,
                                       int rows, int cols) {
    matvec_kq<6>(w, aq, ad, nullptr, y, rows, cols);
}

extern "C" __global__ void matvec_q3_k(const u8* w, const i8* aq, const float* ad, float* y,
                                       int rows, int cols) {
    matvec_kq<3>(w, aq, ad, nullptr, y, rows, cols);
}

extern "C" __global__ void matvec_iq4_xs(const u8* w, const i8* aq, const float* ad, float* y,
                                         int rows, int cols) {
    matvec_kq<4, true>(w, aq, ad, nullptr, y, rows, cols);
}
