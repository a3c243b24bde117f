//! Packed q4_0, iq4_nl, q4_K, q5_K and iq4_xs (layout and order:
//! `kernels::x8`; q2_K and q3_K in `x16k23`) two groups of eight rows a call in 512-bit registers, where the processor
//! has AVX-512 F, BW, VL and VNNI: the low half of every register holds
//! the first group's eight rows, the high half the second's, so one
//! `vpdpbusd` sums sixteen rows against four activation bytes broadcast.
//!
//! Each lane takes exactly the steps of its row in the 256-bit kernels
//! (`x8::q4_0_vnni`, `x8k::q4k_vnni`, `iq4::iq4xs_vnni`): the same exact
//! integer sums, then per block `acc = fma(dx * dy, isum, acc)` (q4_K and
//! q5_K also `macc = fma(dmin * dy, msum, macc)`, then `acc - macc`); so
//! the outputs are their bits,
//! alone and in a batch. A batch only: one token reads the two groups as
//! two streams, slower than the 256-bit kernels' one (see `x8::AHEAD`).

// Tokens index accumulators and activation rows together.
#![allow(clippy::needless_range_loop)]

use super::imp::f16;
use super::ktile::{load, q8k_sub_sums};
use super::x8::slices;
use crate::kernels::x8::{IQ4XS_GROUP_BLOCK, Q4K_GROUP_BLOCK, Q5K_GROUP_BLOCK, ROWS};
use std::arch::x86_64::*;

/// The 32 bytes at `at` of the first group (low half) and of the second,
/// `half` bytes on.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
pub(super) fn both32(g: &[u8], half: usize, at: usize) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(load(g, at)), load(g, half + at))
}

/// The 16 bytes at `at` of each group, the first group's low.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn both16(g: &[u8], half: usize, at: usize) -> __m256i {
    assert!(half + at + 16 <= g.len() && at + 16 <= half);
    // SAFETY: both 16-byte loads lie inside `g` (checked above).
    unsafe {
        _mm256_set_m128i(
            _mm_loadu_si128(g.as_ptr().add(half + at) as *const __m128i),
            _mm_loadu_si128(g.as_ptr().add(at) as *const __m128i),
        )
    }
}

/// The 8 bytes at `at` of each group, the first group's low.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn both8(g: &[u8], half: usize, at: usize) -> __m128i {
    assert!(half + at + 8 <= g.len() && at + 8 <= half);
    // SAFETY: both 8-byte loads lie inside `g` (checked above).
    unsafe {
        _mm_unpacklo_epi64(
            _mm_loadl_epi64(g.as_ptr().add(at) as *const __m128i),
            _mm_loadl_epi64(g.as_ptr().add(half + at) as *const __m128i),
        )
    }
}

/// Checks a call on two groups of q8_K-activation blocks of `size` bytes
/// a group (`g`), and returns the blocks a group.
pub(super) fn q8k_blocks<const T: usize>(
    g: &[u8],
    a: &[&[u8]],
    out: &[[f32; ROWS]],
    size: usize,
) -> usize {
    let blocks = g.len() / 2 / size;
    assert_eq!(g.len(), 2 * blocks * size);
    assert!(a.len() == T && out.len() >= 2 * T);
    assert!(a.iter().all(|y| y.len() == blocks * 292));
    blocks
}

/// q5_K's fifth bits of one chunk of both groups (each group's eight
/// bytes at `at`, a byte a row, as `x8k::fifth_bits` reads them): the
/// bytes where the low values' fifth bit is set, and where the high
/// ones' is, as masks over the chunk's 64 bytes. One shuffle and two
/// byte tests for both groups; two 256-bit spreads, each with its
/// compares and masks, and the halves joined took more than the
/// products they fed.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
fn fifth_bits(g: &[u8], half: usize, at: usize) -> (__mmask64, __mmask64) {
    assert!(half + at + 8 <= g.len() && at + 8 <= half);
    // SAFETY: both 8-byte loads lie inside `g` (checked above).
    let (x1, x2) = unsafe {
        (
            _mm_loadl_epi64(g.as_ptr().add(at) as *const __m128i),
            _mm_loadl_epi64(g.as_ptr().add(half + at) as *const __m128i),
        )
    };
    let both = _mm512_inserti64x4::<1>(
        _mm512_castsi256_si512(_mm256_set_m128i(x1, x1)),
        _mm256_set_m128i(x2, x2),
    );
    // Row r's byte to bytes 4r..4r + 4 of its group's 32.
    let spread = _mm512_set_epi64(
        0x0707_0707_0606_0606,
        0x0505_0505_0404_0404,
        0x0303_0303_0202_0202,
        0x0101_0101_0000_0000,
        0x0707_0707_0606_0606,
        0x0505_0505_0404_0404,
        0x0303_0303_0202_0202,
        0x0101_0101_0000_0000,
    );
    let rows = _mm512_shuffle_epi8(both, spread);
    (
        _mm512_test_epi8_mask(rows, _mm512_set1_epi64(0x0804_0201_0804_0201)),
        _mm512_test_epi8_mask(rows, _mm512_set1_epi64(0x8040_2010_8040_2010u64 as i64)),
    )
}

/// Four bytes of `y` from `at` in every 32-bit lane.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn broadcast4(y: &[u8], at: usize) -> __m512i {
    // One checked four-byte read: four bytes each checked were four byte
    // loads, shifted and joined, in the kernels' innermost loop (iq4_xs
    // prefill on a Zen 5: a quarter of the kernel's samples).
    assert!(at + 4 <= y.len());
    // SAFETY: bytes `at..at + 4` are inside `y` (checked above).
    _mm512_set1_epi32(unsafe { (y.as_ptr().add(at) as *const i32).read_unaligned() })
}

/// Two packed q4_K (`FIVE`: q5_K) groups back to back (`g`) against `T`
/// tokens with 512-bit `vpdpbusd`: `out[t]` receives the first group's
/// eight outputs for token `t`, `out[T + t]` the second's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub fn q4k_vnni<const T: usize, const FIVE: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    let size = if FIVE {
        Q5K_GROUP_BLOCK
    } else {
        Q4K_GROUP_BLOCK
    };
    let pair = if FIVE { 320 } else { 256 };
    let half = g.len() / 2;
    let blocks = q8k_blocks::<T>(g, a, out, size);
    let (mask, sixteen) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(16));
    let (mut acc, mut macc) = ([_mm512_setzero_ps(); T], [_mm512_setzero_ps(); T]);
    for b in 0..blocks {
        let at = b * size;
        let mut isum = [_mm512_setzero_si512(); T];
        for p in 0..4 {
            // The low nibbles of a pair's chunks against its first 32
            // activation bytes, the high ones against the next 32.
            let chunks = at + 160 + pair * p;
            let ys = slices::<T>(a, 292 * b + 4 + 64 * p, 64);
            let mut dp = [[_mm512_setzero_si512(); T]; 2];
            for c in 0..8 {
                let w = both32(g, half, chunks + 32 * c);
                let mut lo = _mm512_and_si512(w, mask);
                let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(w), mask);
                if FIVE {
                    let (l5, h5) = fifth_bits(g, half, chunks + 256 + 8 * c);
                    lo = _mm512_mask_add_epi8(lo, l5, lo, sixteen);
                    hi = _mm512_mask_add_epi8(hi, h5, hi, sixteen);
                }
                for t in 0..T {
                    dp[0][t] = _mm512_dpbusd_epi32(dp[0][t], lo, broadcast4(ys[t], 4 * c));
                    dp[1][t] = _mm512_dpbusd_epi32(dp[1][t], hi, broadcast4(ys[t], 32 + 4 * c));
                }
            }
            for (k, dp) in dp.iter().enumerate() {
                let scales = _mm512_cvtepu8_epi32(both8(g, half, at + 32 + 8 * (2 * p + k)));
                for t in 0..T {
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dp[t], scales));
                }
            }
        }
        let mut msum = [_mm512_setzero_si512(); T];
        for t in 0..T {
            let y = &a[t][292 * b..292 * (b + 1)];
            let mut pairs = [0i32; 4];
            // SAFETY: `pairs` holds the 16 bytes stored.
            unsafe { _mm_storeu_si128(pairs.as_mut_ptr() as *mut __m128i, q8k_sub_sums(y)) };
            for (p, &pair) in pairs.iter().enumerate() {
                let mins = _mm512_cvtepu8_epi16(both16(g, half, at + 96 + 16 * p));
                let m = _mm512_madd_epi16(mins, _mm512_set1_epi32(pair));
                msum[t] = _mm512_add_epi32(msum[t], m);
            }
        }
        let dx = _mm512_cvtph_ps(both16(g, half, at));
        let mx = _mm512_cvtph_ps(both16(g, half, at + 16));
        for t in 0..T {
            let y = &a[t][292 * b..];
            let dy = _mm512_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
            macc[t] = _mm512_fmadd_ps(_mm512_mul_ps(mx, dy), _mm512_cvtepi32_ps(msum[t]), macc[t]);
        }
    }
    store_diff(acc, macc, out)
}

/// Two packed q4_0 groups (iq4_nl, `NL`) back to back (`g`) against `T`
/// tokens with 512-bit `vpdpbusd`, each lane as `x8::q4_0_vnni` sums its
/// row; `out` as [`q4k_vnni`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub fn q4_0_vnni<const T: usize, const NL: bool>(
    g: &[u8],
    a: &[&[u8]],
    sums: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    let half = g.len() / 2;
    let blocks = half / (ROWS * 18);
    assert_eq!(g.len(), 2 * blocks * ROWS * 18);
    assert!(a.len() == T && sums.len() == T && out.len() >= 2 * T);
    assert!(a.iter().all(|y| y.len() == blocks * 34));
    assert!(sums.iter().all(|s| s.len() == blocks));
    let mask = _mm512_set1_epi8(0x0F);
    let table = _mm512_broadcast_i32x4(_mm256_castsi256_si128(super::x8::iq4_table::<true>()));
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..blocks {
        let at = b * ROWS * 18;
        let ys = slices::<T>(a, 34 * b + 2, 32);
        let mut dp = [_mm512_setzero_si512(); T];
        for j in 0..4 {
            let w = both32(g, half, at + 16 + 32 * j);
            let mut lo = _mm512_and_si512(w, mask);
            let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(w), mask);
            if NL {
                (lo, hi) = (
                    _mm512_shuffle_epi8(table, lo),
                    _mm512_shuffle_epi8(table, hi),
                );
            }
            for t in 0..T {
                dp[t] = _mm512_dpbusd_epi32(dp[t], lo, broadcast4(ys[t], 4 * j));
                dp[t] = _mm512_dpbusd_epi32(dp[t], hi, broadcast4(ys[t], 16 + 4 * j));
            }
        }
        let dx = _mm512_cvtph_ps(both16(g, half, at));
        // The nibbles' offset, 8 (iq4_nl's values' 128), times the
        // activation block's sum, taken off each lane.
        for t in 0..T {
            let offset = sums[t][b].wrapping_shl(if NL { 7 } else { 3 });
            let isum = _mm512_sub_epi32(dp[t], _mm512_set1_epi32(offset));
            let dy = _mm512_set1_ps(f16(&a[t][34 * b..], 0));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy), _mm512_cvtepi32_ps(isum), acc[t]);
        }
    }
    store(acc, out)
}

/// Two packed iq4_xs groups back to back (`g`) against `T` tokens with
/// 512-bit `vpdpbusd`, each lane as `iq4::iq4xs_vnni` sums its row; `out`
/// as [`q4k_vnni`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub fn iq4xs_vnni<const T: usize>(g: &[u8], a: &[&[u8]], _s: &[&[i32]], out: &mut [[f32; ROWS]]) {
    let half = g.len() / 2;
    let blocks = q8k_blocks::<T>(g, a, out, IQ4XS_GROUP_BLOCK);
    let mask = _mm512_set1_epi8(0x0F);
    let table = _mm512_broadcast_i32x4(_mm256_castsi256_si128(super::x8::iq4_table::<true>()));
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..blocks {
        let at = b * IQ4XS_GROUP_BLOCK;
        let mut isum = [_mm512_setzero_si512(); T];
        for j in 0..8 {
            let chunks = at + 80 + 128 * j;
            let ys = slices::<T>(a, 292 * b + 4 + 32 * j, 32);
            let mut dp = [_mm512_setzero_si512(); T];
            for c in 0..4 {
                let w = both32(g, half, chunks + 32 * c);
                let lo = _mm512_shuffle_epi8(table, _mm512_and_si512(w, mask));
                let hi =
                    _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16::<4>(w), mask));
                for t in 0..T {
                    dp[t] = _mm512_dpbusd_epi32(dp[t], lo, broadcast4(ys[t], 4 * c));
                    dp[t] = _mm512_dpbusd_epi32(dp[t], hi, broadcast4(ys[t], 16 + 4 * c));
                }
            }
            let scales = _mm512_cvtepi8_epi32(both8(g, half, at + 16 + 8 * j));
            for t in 0..T {
                let y = &a[t][292 * b + 260 + 4 * j..];
                let sum = i16::from_le_bytes([y[0], y[1]]) as i32
                    + i16::from_le_bytes([y[2], y[3]]) as i32;
                let exact = _mm512_sub_epi32(dp[t], _mm512_set1_epi32(sum.wrapping_shl(7)));
                isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(exact, scales));
            }
        }
        let dx = _mm512_cvtph_ps(both16(g, half, at));
        for t in 0..T {
            let y = &a[t][292 * b..];
            let dy = _mm512_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    store(acc, out)
}

/// Writes each token's sixteen outputs `acc - macc` (as [`store`]).
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn store_diff<const T: usize>(
    acc: [__m512; T],
    macc: [__m512; T],
    out: &mut [[f32; ROWS]],
) {
    let mut diff = [_mm512_setzero_ps(); T];
    for t in 0..T {
        diff[t] = _mm512_sub_ps(acc[t], macc[t]);
    }
    store(diff, out)
}

/// Writes each token's sixteen outputs: the first group's eight to
/// `out[t]`, the second's to `out[T + t]`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) fn store<const T: usize>(sums: [__m512; T], out: &mut [[f32; ROWS]]) {
    for t in 0..T {
        let mut both = [0f32; 2 * ROWS];
        // SAFETY: `both` holds sixteen f32.
        unsafe { _mm512_storeu_ps(both.as_mut_ptr(), sums[t]) };
        out[t].copy_from_slice(&both[..ROWS]);
        out[T + t].copy_from_slice(&both[ROWS..]);
    }
}
