// Helpers every kernel source starts with (the host prepends this file).
// NVRTC compiles without the toolkit's headers, so the half conversions are
// written here: f16 through the PTX conversion instructions (round to
// nearest even, as the CPU's `half::f16::from_f32`), bf16 by the bit rule
// of `half::bf16::from_f32`.

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf16_to_f32(u16 b) {
    return __uint_as_float(((u32)b) << 16);
}

__device__ __forceinline__ u16 f32_to_bf16(float v) {
    u32 x = __float_as_uint(v);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (u16)((x >> 16) | 0x40u);
    }
    if ((x & 0x8000u) != 0u && (x & 0x17fffu) != 0u) {
        return (u16)((x >> 16) + 1u);
    }
    return (u16)(x >> 16);
}

// Two bytes at a 2-byte alignment (blocks of 34 and 18 bytes leave their
// quants there) as one 16-bit load each: four bytes as one word.
__device__ __forceinline__ int load_i32_b2(const u8* p) {
    const u16* h = (const u16*)p;
    return (int)((u32)h[0] | ((u32)h[1] << 16));
}

// The little-endian f16 at `p` (block scales sit at 2-byte offsets).
__device__ __forceinline__ float load_f16(const u8* p) {
    return f16_to_f32((u16)p[0] | ((u16)p[1] << 8));
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

// Integer sums across a group of `width` lanes (a power of two): exact.
__device__ __forceinline__ int group_sum(int v, int width) {
    for (int o = width / 2; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

// Lanes per warp; warp w of a block of warps computes output row
// blockIdx.x * warps + w (-1 past the last row).
#define WARP 32

__device__ __forceinline__ int warp_row(int rows) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    return row < rows ? row : -1;
}

// iq4_nl's and iq4_xs's table of 16 values (`tensor::iq4::IQ4_VALUES`) as
// four little-endian words: values 0..4, 4..8, 8..12, 12..16.
#define IQ4_WORD0 0xBFAD9881u
#define IQ4_WORD1 0xF6EADDCFu
#define IQ4_WORD2 0x26190D01u
#define IQ4_WORD3 0x71594535u

// The table's values of four indices (each byte of `q` 0..15), as four
// signed bytes: __byte_perm picks each byte's value among values 0..8 and
// among 8..16 by the index's low three bits, and its fourth bit chooses.
__device__ __forceinline__ int iq4_lookup(u32 q) {
    u32 select = (q & 0x7u) | ((q >> 4) & 0x70u) | ((q >> 8) & 0x700u) | ((q >> 12) & 0x7000u);
    u32 low = __byte_perm(IQ4_WORD0, IQ4_WORD1, select);
    u32 high = __byte_perm(IQ4_WORD2, IQ4_WORD3, select);
    u32 upper = ((q >> 3) & 0x01010101u) * 0xFFu;
    return (int)((high & upper) | (low & ~upper));
}
