//! Single-token (decode) q8_0 and q4_0 products with 512-bit AVX-512
//! VNNI, chosen at run time where the processor has AVX-512 F, BW, VL and
//! VNNI (Zen 4, Ice Lake and later): up to [`ROWS`] weight rows against
//! one activation row.
//!
//! Decode streams every weight once, so the kernel keeps the per-block
//! work small and asks for the next rows early:
//! - one 512-bit `vpdpbusd` does the integer sums of two blocks; each
//!   block's eight i32 lanes are exactly those of the 256-bit VNNI tile
//!   (integer sums are exact however they are grouped);
//! - the f16 scales of eight blocks are gathered with one word permute
//!   and converted at once, and their products with the activation
//!   scales taken as eight lanes: each the same single rounding as the
//!   scalar `dx * dy`;
//! - the next call's rows (the `ROWS` after these, as a product walks
//!   contiguous rows) are prefetched in address order while these are
//!   summed: on a 2-core Zen 4 this took decode from 37 to 60 tok/s
//!   (q8_0) and from 42 to 90 (q4_0) at 0.5B parameters.
//!
//! The float steps stay the one-row kernel's: per block, in block order,
//! `acc = fma(dx * dy, sum, acc)` on the same eight lanes, then `hsum`,
//! so outputs match it (and the batched tiles) bit for bit.

// Rows and accumulators are indexed together by their position.
#![allow(clippy::needless_range_loop)]

use super::imp::{f16, hsum};
use super::vnni::unsigned_quants;
use std::arch::x86_64::*;

/// Weight rows per decode call.
pub const ROWS: usize = 4;

/// Blocks whose scales are converted together.
const CHUNK: usize = 8;

/// The f16 scales of the eight blocks at `p` (q4_0 blocks if `Q4`, else
/// q8_0 blocks), widened to f32.
///
/// # Safety
/// `p` must point at eight whole blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
unsafe fn scales<const Q4: bool>(p: *const u8) -> __m256 {
    let words = if Q4 {
        // Eight 18-byte blocks are 144 bytes: scales at words 0, 9, ..., 63
        // of the first 128.
        let idx = _mm512_zextsi128_si512(_mm_setr_epi16(0, 9, 18, 27, 36, 45, 54, 63));
        // SAFETY: both loads read inside the first 128 of 144 bytes.
        let (lo, hi) = unsafe {
            (
                _mm512_loadu_si512(p as *const __m512i),
                _mm512_loadu_si512(p.add(64) as *const __m512i),
            )
        };
        _mm512_castsi512_si128(_mm512_permutex2var_epi16(lo, idx, hi))
    } else {
        // Eight 34-byte blocks are 272 bytes: four scales at words 0, 17,
        // 34 and 51 of the 128 bytes at 0 and of the 128 at 136.
        let idx = _mm512_zextsi128_si512(_mm_setr_epi16(0, 17, 34, 51, 0, 0, 0, 0));
        // SAFETY: the loads read bytes 0..128 and 136..264 of 272.
        let (a, b, c, d) = unsafe {
            (
                _mm512_loadu_si512(p as *const __m512i),
                _mm512_loadu_si512(p.add(64) as *const __m512i),
                _mm512_loadu_si512(p.add(136) as *const __m512i),
                _mm512_loadu_si512(p.add(200) as *const __m512i),
            )
        };
        let first = _mm512_castsi512_si128(_mm512_permutex2var_epi16(a, idx, b));
        let second = _mm512_castsi512_si128(_mm512_permutex2var_epi16(c, idx, d));
        _mm_unpacklo_epi64(first, second)
    };
    _mm256_cvtph_ps(words)
}

/// The unsigned quants of the two weight blocks at `p`, in element order
/// block by block: q4_0 (`Q4`) nibbles as they are (offset 8), q8_0
/// quants plus 128.
///
/// # Safety
/// `p` must point at two whole blocks.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pair_quants<const Q4: bool>(p: *const u8) -> __m512i {
    if Q4 {
        // SAFETY: the loads read bytes 2..18 and 20..36 of 36.
        let (n0, n1) = unsafe {
            (
                _mm_loadu_si128(p.add(2) as *const __m128i),
                _mm_loadu_si128(p.add(20) as *const __m128i),
            )
        };
        // [n0, n0, n1, n1], the second of each shifted to its high nibbles.
        let both = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(n0), 0xFF00, n1);
        let shifted = _mm512_srlv_epi64(both, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
        _mm512_and_si512(shifted, _mm512_set1_epi8(0x0F))
    } else {
        // SAFETY: `p` points at two whole q8_0 blocks.
        let q = unsafe { act_pair(p) };
        _mm512_xor_si512(q, _mm512_set1_epi8(-128))
    }
}

/// The signed quants of the two 34-byte q8_0 blocks at `p`.
///
/// # Safety
/// `p` must point at two whole q8_0 blocks.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn act_pair(p: *const u8) -> __m512i {
    // SAFETY: the loads read bytes 2..34 and 36..68 of 68.
    let (q0, q1) = unsafe {
        (
            _mm256_loadu_si256(p.add(2) as *const __m256i),
            _mm256_loadu_si256(p.add(36) as *const __m256i),
        )
    };
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q0), q1)
}

/// Asks for the `len` bytes at `p` (at most 128), following a request
/// for the bytes just before them: a hint, sound for any address.
///
/// Each step of the kernel (a pair of blocks, or one block, of one row)
/// asks for as many bytes of the next call's rows as it reads of these,
/// in address order: one sequential stream the memory system keeps up
/// with, rather than `R` interleaved ones it does not.
#[inline]
#[target_feature(enable = "sse")]
fn prefetch(p: *const u8, len: usize) {
    if len > 64 {
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64) as *const i8);
    } else {
        // The line of the first byte was asked for with the bytes before.
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(len - 1) as *const i8);
    }
}

/// The high eight lanes of `v`.
#[inline]
#[target_feature(enable = "avx512f")]
fn high(v: __m512) -> __m256 {
    _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)))
}

/// `R` q4_0 (`Q4`) or q8_0 weight rows against one q8_0 activation row;
/// `out[r * stride]` receives row `r`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn q0<const Q4: bool, const R: usize>(w: &[&[u8]], a: &[&[u8]], out: &mut [f32], stride: usize) {
    let wb = if Q4 { 18 } else { 34 };
    assert!(w.len() == R && a.len() == 1);
    let y = a[0];
    let blocks = y.len() / 34;
    assert_eq!(y.len(), blocks * 34);
    assert!(w.iter().all(|x| x.len() == blocks * wb));
    // The next call's rows: the `R` rows after these, contiguous with
    // them in a product's matrix. Only ever a prefetch hint.
    let next = w[0].as_ptr().wrapping_add(R * blocks * wb);
    let offset = _mm512_set1_epi8(if Q4 { 8 } else { -128 });
    let mut acc = [_mm256_setzero_ps(); R];
    let chunks = blocks / CHUNK;
    for c in 0..chunks {
        let b0 = c * CHUNK;
        let mut d = [_mm256_setzero_ps(); R];
        // SAFETY: block `b0 + CHUNK <= blocks` of the activation row.
        let dy = unsafe { scales::<false>(y.as_ptr().add(34 * b0)) };
        for r in 0..R {
            // SAFETY: blocks `b0..b0 + CHUNK` are inside row `r`.
            let dx = unsafe { scales::<Q4>(w[r].as_ptr().add(wb * b0)) };
            d[r] = _mm256_mul_ps(dx, dy);
        }
        for p in 0..CHUNK / 2 {
            let b = b0 + 2 * p;
            // SAFETY: blocks `b` and `b + 1` are inside the activation row.
            let qy = unsafe { act_pair(y.as_ptr().add(34 * b)) };
            // Minus the offset times each group of four activations.
            let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, qy);
            let base = _mm512_sub_epi32(_mm512_setzero_si512(), sums);
            for r in 0..R {
                prefetch(next.wrapping_add((b * R + 2 * r) * wb), 2 * wb);
                // SAFETY: blocks `b` and `b + 1` are inside row `r`.
                let ux = unsafe { pair_quants::<Q4>(w[r].as_ptr().add(wb * b)) };
                let sum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, ux, qy));
                let first = _mm512_castps512_ps256(sum);
                let d0 = _mm256_permutexvar_ps(_mm256_set1_epi32(2 * p as i32), d[r]);
                let d1 = _mm256_permutexvar_ps(_mm256_set1_epi32(2 * p as i32 + 1), d[r]);
                acc[r] = _mm256_fmadd_ps(d0, first, acc[r]);
                acc[r] = _mm256_fmadd_ps(d1, high(sum), acc[r]);
            }
        }
    }
    for b in chunks * CHUNK..blocks {
        let yb = &y[34 * b..34 * b + 34];
        // SAFETY: the block has 34 bytes; the load reads bytes 2..34.
        let qy = unsafe { _mm256_loadu_si256(yb.as_ptr().add(2) as *const __m256i) };
        let sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(offset), qy);
        let base = _mm256_sub_epi32(_mm256_setzero_si256(), sums);
        let dy = _mm256_set1_ps(f16(yb, 0));
        for r in 0..R {
            prefetch(next.wrapping_add((b * R + r) * wb), wb);
            let x = &w[r][wb * b..wb * b + wb];
            let ux = unsigned_quants::<Q4>(x);
            let dx = _mm256_set1_ps(f16(x, 0));
            let sum = _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(base, ux, qy));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), sum, acc[r]);
        }
    }
    for r in 0..R {
        out[r * stride] = hsum(acc[r]);
    }
}

/// `R` q8_0 weight rows against one q8_0 activation row.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub fn q8_0<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<false, R>(w, a, out, stride)
}

/// `R` q4_0 weight rows against one q8_0 activation row.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub fn q4_0<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<true, R>(w, a, out, stride)
}
