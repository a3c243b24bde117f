//! The packed q4_K and q5_K kernels (layout and order: `kernels::x8`):
//! one group of eight rows against up to `x8::TOKENS` tokens a call, with
//! AVX2's `maddubs`/`madd` or AVX-512 VNNI's 256-bit `vpdpbusd`, each
//! sub-block's eight row lanes times the rows' scales (`vpmulld`). q5_K's
//! fifth bits sit after each pair of sub-blocks' chunks, a byte a row a
//! chunk, spread over the chunk's bytes with one `pshufb`.

// Tokens index accumulators and activation rows together.
#![allow(clippy::needless_range_loop)]

use super::x8::{ahead, broadcast4, load128, nibbles, scales, slices, store};
use crate::kernels::x8::{Q4K_GROUP_BLOCK, Q5K_GROUP_BLOCK, ROWS};
use std::arch::x86_64::*;

/// The 8 bytes of `group` from `at`, each widened to an i32 lane.
#[inline]
#[target_feature(enable = "avx2")]
fn bytes_to_i32(group: &[u8], at: usize) -> __m256i {
    assert!(at + 8 <= group.len());
    // SAFETY: bytes `at..at + 8` are inside `group` (checked above).
    let v = unsafe { _mm_loadl_epi64(group.as_ptr().add(at) as *const __m128i) };
    _mm256_cvtepu8_epi32(v)
}

/// Packed q4_K (`FIVE`: q5_K) rows against `T` q8_K activation rows:
/// for each block `b`, `pair_sums(chunks, p, b)` sums sub-blocks `2p` and
/// `2p + 1` (the low and high nibbles of the pair's chunks at `chunks`,
/// and q5_K's fifth bits after them) of each row into its lane; then the
/// scales, the mins and the float steps, `acc - macc` written out.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q4k_packed<const T: usize, const PF: bool, const FIVE: bool>(
    group: &[u8],
    a: &[&[u8]],
    out: &mut [[f32; ROWS]],
    pair_sums: impl Fn(usize, usize, usize) -> [[__m256i; T]; 2],
) {
    let (blocks, size) = q4k_blocks::<FIVE>(group, a, out);
    let (mut acc, mut macc) = ([_mm256_setzero_ps(); T], [_mm256_setzero_ps(); T]);
    for b in 0..blocks {
        let at = b * size;
        ahead::<T, PF>(group, at, size);
        q4k_block::<T, FIVE>(group, at, a, b, &mut acc, &mut macc, &pair_sums);
    }
    q4k_store(acc, macc, out)
}

/// One packed block of [`q4k_packed`] (at `at`, block `b`): adds its
/// float steps to `acc` and `macc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)] // one block's view of a call
fn q4k_block<const T: usize, const FIVE: bool>(
    group: &[u8],
    at: usize,
    a: &[&[u8]],
    b: usize,
    acc: &mut [__m256; T],
    macc: &mut [__m256; T],
    pair_sums: &impl Fn(usize, usize, usize) -> [[__m256i; T]; 2],
) {
    let mut isum = [_mm256_setzero_si256(); T];
    for p in 0..4 {
        let sums = pair_sums(at + 160 + pair_bytes::<FIVE>() * p, p, b);
        for (k, sums) in sums.iter().enumerate() {
            let scales = bytes_to_i32(group, at + 32 + 8 * (2 * p + k));
            for t in 0..T {
                isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(sums[t], scales));
            }
        }
    }
    let mut msum = [_mm256_setzero_si256(); T];
    for t in 0..T {
        let y = &a[t][292 * b..292 * (b + 1)];
        let mut pairs = [0i32; 4];
        // SAFETY: `pairs` holds the 16 bytes stored.
        unsafe {
            _mm_storeu_si128(
                pairs.as_mut_ptr() as *mut __m128i,
                super::ktile::q8k_sub_sums(y),
            )
        };
        for (p, &pair) in pairs.iter().enumerate() {
            let mins = _mm256_cvtepu8_epi16(load128(group, at + 96 + 16 * p));
            let m = _mm256_madd_epi16(mins, _mm256_set1_epi32(pair));
            msum[t] = _mm256_add_epi32(msum[t], m);
        }
    }
    let dx = scales(group, at);
    let mx = scales(group, at + 16);
    for t in 0..T {
        let y = &a[t][292 * b..];
        let dy = _mm256_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        macc[t] = _mm256_fmadd_ps(_mm256_mul_ps(mx, dy), _mm256_cvtepi32_ps(msum[t]), macc[t]);
    }
}

/// Packed q4_K (`FIVE`: q5_K) rows against `T` tokens with `vpdpbusd`.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn q4k_vnni<const T: usize, const PF: bool, const FIVE: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    // The low nibbles of a pair's chunks against its first 32 activation
    // bytes, the high ones against the next 32.
    let pair_sums = |chunks: usize, p: usize, b: usize| {
        let mut dp = [[_mm256_setzero_si256(); T]; 2];
        for c in 0..8 {
            let (lo, hi) = values::<FIVE>(g, chunks, c);
            for t in 0..T {
                let y = 292 * b + 4 + 64 * p + 4 * c;
                dp[0][t] = _mm256_dpbusd_epi32(dp[0][t], lo, broadcast4(a[t], y));
                dp[1][t] = _mm256_dpbusd_epi32(dp[1][t], hi, broadcast4(a[t], y + 32));
            }
        }
        dp
    };
    q4k_packed::<T, PF, FIVE>(g, a, out, pair_sums)
}

/// Packed q4_K (`FIVE`: q5_K) rows against `T` tokens with AVX2:
/// `maddubs` pairs summed in 16 bits over four chunks (at most 4 · 2 ·
/// 31 · 127; q4_K's over all eight, 8 · 2 · 15 · 127), then `madd`.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q4k_avx2<const T: usize, const PF: bool, const FIVE: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    let pair_sums = |chunks: usize, p: usize, b: usize| {
        let ys = slices::<T>(a, 292 * b + 4 + 64 * p, 64);
        q4k_pair_avx2::<T, FIVE>(&g[chunks..chunks + pair_bytes::<FIVE>()], &ys)
    };
    q4k_packed::<T, PF, FIVE>(g, a, out, pair_sums)
}

/// One pair of sub-blocks of a packed q4_K or q5_K block (its eight
/// chunks and q5_K's fifth bits, `chunks`) against each token's 64
/// activation bytes of the pair (`ys`): the low nibbles against the first
/// 32, the high ones against the next 32, in 16-bit sums (q5_K's
/// widened every four chunks), returned in 32-bit lanes. Apart from
/// [`q4k_avx2`] (not inlined) its sums stay in registers; inlined, they
/// went through the stack every chunk.
#[inline(never)]
#[target_feature(enable = "avx2")]
fn q4k_pair_avx2<const T: usize, const FIVE: bool>(
    chunks: &[u8],
    ys: &[&[u8]; T],
) -> [[__m256i; T]; 2] {
    assert!(chunks.len() == pair_bytes::<FIVE>() && ys.iter().all(|y| y.len() == 64));
    let ones = _mm256_set1_epi16(1);
    let mut wide = [[_mm256_setzero_si256(); T]; 2];
    let mut dp = [[_mm256_setzero_si256(); T]; 2];
    for c in 0..8 {
        let (lo, hi) = values::<FIVE>(chunks, 0, c);
        for t in 0..T {
            let l = _mm256_maddubs_epi16(lo, broadcast4(ys[t], 4 * c));
            let h = _mm256_maddubs_epi16(hi, broadcast4(ys[t], 32 + 4 * c));
            dp[0][t] = _mm256_add_epi16(dp[0][t], l);
            dp[1][t] = _mm256_add_epi16(dp[1][t], h);
        }
        if c == 7 || (FIVE && c == 3) {
            for (w, d) in wide.iter_mut().flatten().zip(dp.iter_mut().flatten()) {
                *w = _mm256_add_epi32(*w, _mm256_madd_epi16(*d, ones));
                *d = _mm256_setzero_si256();
            }
        }
    }
    wide
}

/// Bytes of one pair of sub-blocks in a packed block: eight chunks, and
/// q5_K's 64 bytes of fifth bits.
const fn pair_bytes<const FIVE: bool>() -> usize {
    if FIVE { 320 } else { 256 }
}

/// Chunk `c`'s values of the pair at `chunks` in `g`: its low and high
/// nibbles, and (`FIVE`) their fifth bits from the pair's eight bytes of
/// chunk `c` after its chunks (a byte a row: bits `i` the low values'
/// `i`-th, bits `4 + i` the high ones').
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn values<const FIVE: bool>(g: &[u8], chunks: usize, c: usize) -> (__m256i, __m256i) {
    let (lo, hi) = nibbles(g, chunks + 32 * c);
    if !FIVE {
        return (lo, hi);
    }
    let (l5, h5) = fifth_bits(g, chunks + 256 + 8 * c);
    (_mm256_or_si256(lo, l5), _mm256_or_si256(hi, h5))
}

/// The eight rows' fifth-bit bytes at `at` spread over a chunk's 32
/// bytes (row `r`'s four at `4r`), as 16 where set: the low values', then
/// the high ones'.
#[inline]
#[target_feature(enable = "avx2")]
fn fifth_bits(g: &[u8], at: usize) -> (__m256i, __m256i) {
    assert!(at + 8 <= g.len());
    // SAFETY: the load reads bytes at..at + 8 of `g` (checked above).
    let bytes = unsafe { _mm_loadl_epi64(g.as_ptr().add(at) as *const __m128i) };
    let rows = _mm256_shuffle_epi8(
        _mm256_set_m128i(bytes, bytes),
        _mm256_set_epi64x(
            0x0707_0707_0606_0606,
            0x0505_0505_0404_0404,
            0x0303_0303_0202_0202,
            0x0101_0101_0000_0000,
        ),
    );
    let bit = |mask: i64| {
        let m = _mm256_set1_epi64x(mask);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(rows, m), m);
        _mm256_and_si256(set, _mm256_set1_epi8(16))
    };
    (
        bit(0x0804_0201_0804_0201),
        bit(0x8040_2010_8040_2010u64 as i64),
    )
}

/// Checks a q4_K (`FIVE`: q5_K) call's shapes and returns its number of
/// blocks and a packed block's bytes.
fn q4k_blocks<const FIVE: bool>(group: &[u8], a: &[&[u8]], out: &[[f32; ROWS]]) -> (usize, usize) {
    let size = if FIVE {
        Q5K_GROUP_BLOCK
    } else {
        Q4K_GROUP_BLOCK
    };
    let blocks = group.len() / size;
    assert_eq!(group.len(), blocks * size);
    assert!(out.len() >= a.len());
    assert!(a.iter().all(|y| y.len() == blocks * 292));
    (blocks, size)
}

/// Writes each token's eight outputs, `acc - macc`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn q4k_store<const T: usize>(
    acc: [__m256; T],
    macc: [__m256; T],
    out: &mut [[f32; ROWS]],
) {
    let mut diff = [_mm256_setzero_ps(); T];
    for t in 0..T {
        diff[t] = _mm256_sub_ps(acc[t], macc[t]);
    }
    store(diff, out)
}

/// The packed kernels' float steps for the types with signed sub-block
/// scales and no mins (q3_K, iq4_xs): per block of `size` bytes,
/// `block_sums(at, b)` gives each token's eight row lanes of block `b`'s
/// exact integer sum (its bytes at `at`); then `acc = fma(dx * dy, isum,
/// acc)`, `dx` the eight f16 scales the block starts with.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn scaled_blocks<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    out: &mut [[f32; ROWS]],
    size: usize,
    block_sums: impl Fn(usize, usize) -> [__m256i; T],
) {
    let blocks = g.len() / size;
    assert_eq!(g.len(), blocks * size);
    assert!(a.len() == T && out.len() >= T);
    assert!(a.iter().all(|y| y.len() == blocks * 292));
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..blocks {
        let at = b * size;
        ahead::<T, PF>(g, at, size);
        let total = block_sums(at, b);
        let dx = scales(g, at);
        for t in 0..T {
            let y = &a[t][292 * b..];
            let dy = _mm256_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), _mm256_cvtepi32_ps(total[t]), acc[t]);
        }
    }
    store(acc, out)
}

/// `total[t] += lanes[t] · scales`, the eight rows' signed byte scales at
/// `g[at..at + 8]` (a sub-block's, `[sub-block][row]`).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn add_scaled<const T: usize>(
    total: &mut [__m256i; T],
    lanes: &[__m256i; T],
    g: &[u8],
    at: usize,
) {
    let s = &g[at..at + 8];
    // SAFETY: `s` holds the 8 bytes loaded.
    let scales = _mm256_cvtepi8_epi32(unsafe { _mm_loadl_epi64(s.as_ptr() as *const __m128i) });
    for t in 0..T {
        total[t] = _mm256_add_epi32(total[t], _mm256_mullo_epi32(lanes[t], scales));
    }
}
