//! The packed q2_K and q3_K kernels (layout and order: `kernels::x8`):
//! one group of eight rows against up to `x8::TOKENS` tokens a call.
//! Both hold their two-bit quants in the same chunks; each chunk's
//! values are made unsigned (q2_K's are, 0..=3; q3_K's 0..8 with its
//! high bit, 4 times each 16-value activation sum taken off after) and
//! summed per 16-value sub-block into eight row lanes, AVX2's
//! `maddubs`/`madd` or AVX-512 VNNI's 256-bit `vpdpbusd`, then times the
//! rows' sub-block scales (`vpmulld`).

// Tokens index accumulators and activation rows together.
#![allow(clippy::needless_range_loop)]

use super::ktile::load;
use super::x8::{ahead, broadcast4, load128, scales, slices};
use super::x8k::{add_scaled, q4k_store, scaled_blocks};
use crate::kernels::x8::{Q2K_GROUP_BLOCK, Q3K_GROUP_BLOCK, ROWS};
use std::arch::x86_64::*;

/// Run `p` (0..4) of half `c` of a packed q2_K or q3_K block (block `b`
/// of the call): its two sub-blocks' sums (`[0]` values `32p..32p + 16`
/// of the half, `[1]` the next 16), eight row lanes a token, through
/// `product(lanes, values, four activations broadcast)`. The values are
/// bits `2p` of the half's chunks at `quants`, and with `high` (q3_K) 4
/// more where bit `4c + p` of the high-bit chunks there is set.
#[inline]
#[target_feature(enable = "avx2")]
fn run_sums<const T: usize>(
    g: &[u8],
    (quants, high): (usize, Option<usize>),
    (c, p): (usize, usize),
    a: &[&[u8]],
    b: usize,
    product: &impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) -> [[__m256i; T]; 2] {
    let (three, one) = (_mm256_set1_epi8(3), _mm256_set1_epi8(1));
    let low_shift = _mm_cvtsi32_si128(2 * p as i32);
    let high_shift = _mm_cvtsi32_si128((4 * c + p) as i32);
    let mut dp = [[_mm256_setzero_si256(); T]; 2];
    for (k, dp) in dp.iter_mut().enumerate() {
        // Each sub-block's sums in an array of their own and each token's
        // 16 activations sliced once: indexed by a loop over both
        // sub-blocks' chunks, the sums went through the stack every chunk
        // (an all-q3_K 0.5B's prefill on a Zen 5: 222 tok/s before, 355
        // after).
        let ys = slices::<T>(a, 292 * b + 4 + 128 * c + 32 * p + 16 * k, 16);
        let mut sums = [_mm256_setzero_si256(); T];
        for j in 4 * k..4 * k + 4 {
            let q = load(g, quants + 32 * j);
            let mut u = _mm256_and_si256(_mm256_srl_epi16(q, low_shift), three);
            if let Some(h) = high {
                let h = _mm256_and_si256(_mm256_srl_epi16(load(g, h + 32 * j), high_shift), one);
                u = _mm256_or_si256(u, _mm256_slli_epi16::<2>(h));
            }
            for t in 0..T {
                sums[t] = product(sums[t], u, broadcast4(ys[t], 4 * (j % 4)));
            }
        }
        *dp = sums;
    }
    dp
}

/// Packed q3_K rows against `T` tokens: [`run_sums`] with the high bits,
/// 4 times each sub-block's activation sum taken off, times the rows'
/// signed scales, summed ([`scaled_blocks`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q3k_packed<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    out: &mut [[f32; ROWS]],
    product: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) {
    let block_sums = |at: usize, b: usize| {
        let mut total = [_mm256_setzero_si256(); T];
        for c in 0..2 {
            for p in 0..4 {
                let chunks = (at + 144 + 256 * c, Some(at + 656));
                let mut dp = run_sums::<T>(g, chunks, (c, p), a, b, &product);
                for (k, dp) in dp.iter_mut().enumerate() {
                    let sub = 8 * c + 2 * p + k;
                    for t in 0..T {
                        let y = &a[t][292 * b + 260 + 2 * sub..];
                        let sum = i16::from_le_bytes([y[0], y[1]]) as i32;
                        dp[t] = _mm256_sub_epi32(dp[t], _mm256_set1_epi32(4 * sum));
                    }
                    add_scaled(&mut total, dp, g, at + 16 + 8 * sub);
                }
            }
        }
        total
    };
    scaled_blocks::<T, PF>(g, a, out, Q3K_GROUP_BLOCK, block_sums)
}

/// Packed q2_K rows against `T` tokens: per block, [`run_sums`] times the
/// rows' scales (the low nibbles of the `[sub-block][row]` bytes) into
/// `isum`, the mins (the high nibbles) times the activation's 16-value
/// sums into `msum`, two sub-blocks a `madd`; then `acc = fma(d · dy,
/// isum, acc)`, `macc = fma(dmin · dy, msum, macc)`, `acc - macc` written.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q2k_packed<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    out: &mut [[f32; ROWS]],
    product: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) {
    let blocks = g.len() / Q2K_GROUP_BLOCK;
    assert_eq!(g.len(), blocks * Q2K_GROUP_BLOCK);
    assert!(a.len() == T && out.len() >= T);
    assert!(a.iter().all(|y| y.len() == blocks * 292));
    let nibble = _mm256_set1_epi32(0xF);
    let (mut acc, mut macc) = ([_mm256_setzero_ps(); T], [_mm256_setzero_ps(); T]);
    for b in 0..blocks {
        let at = b * Q2K_GROUP_BLOCK;
        ahead::<T, PF>(g, at, Q2K_GROUP_BLOCK);
        let mut isum = [_mm256_setzero_si256(); T];
        for c in 0..2 {
            for p in 0..4 {
                let dp = run_sums::<T>(g, (at + 160 + 256 * c, None), (c, p), a, b, &product);
                for (k, dp) in dp.iter().enumerate() {
                    let s = load128(g, at + 32 + 8 * (8 * c + 2 * p + k));
                    let s = _mm256_and_si256(_mm256_cvtepu8_epi32(s), nibble);
                    for t in 0..T {
                        isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dp[t], s));
                    }
                }
            }
        }
        let mut msum = [_mm256_setzero_si256(); T];
        for q in 0..8 {
            let mins = _mm256_cvtepu8_epi16(q2k_mins(g, at + 32 + 16 * q));
            for t in 0..T {
                let y = &a[t][292 * b + 260 + 4 * q..];
                let sums = _mm256_set1_epi32(i32::from_le_bytes([y[0], y[1], y[2], y[3]]));
                msum[t] = _mm256_add_epi32(msum[t], _mm256_madd_epi16(mins, sums));
            }
        }
        let (dx, mx) = (scales(g, at), scales(g, at + 16));
        for t in 0..T {
            let y = &a[t][292 * b..];
            let dy = _mm256_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), _mm256_cvtepi32_ps(isum[t]), acc[t]);
            macc[t] = _mm256_fmadd_ps(_mm256_mul_ps(mx, dy), _mm256_cvtepi32_ps(msum[t]), macc[t]);
        }
    }
    q4k_store(acc, macc, out)
}

/// The mins (high nibbles) of sub-blocks `2q` and `2q + 1` of eight rows'
/// `[sub-block][row]` scale bytes at `at`, each row's two side by side.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn q2k_mins(g: &[u8], at: usize) -> __m128i {
    let v = load128(g, at);
    let pairs = _mm_unpacklo_epi8(v, _mm_srli_si128::<8>(v));
    _mm_and_si128(_mm_srli_epi16::<4>(pairs), _mm_set1_epi8(0xF))
}

/// `dp + u · y` four bytes a lane with `vpdpbusd`.
#[inline]
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
fn dpbusd(dp: __m256i, u: __m256i, y: __m256i) -> __m256i {
    _mm256_dpbusd_epi32(dp, u, y)
}

/// `dp + u · y` four bytes a lane with AVX2's `maddubs` (at most 2 · 7 ·
/// 128 a pair) and `madd`.
#[inline]
#[target_feature(enable = "avx2")]
fn maddubs(dp: __m256i, u: __m256i, y: __m256i) -> __m256i {
    _mm256_add_epi32(
        dp,
        _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1)),
    )
}

/// Packed q3_K rows against `T` tokens with `vpdpbusd`.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn q3k_vnni<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    q3k_packed::<T, PF>(g, a, out, |dp, u, y| dpbusd(dp, u, y))
}

/// Packed q3_K rows against `T` tokens with AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q3k_avx2<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    q3k_packed::<T, PF>(g, a, out, |dp, u, y| maddubs(dp, u, y))
}

/// Packed q2_K rows against `T` tokens with `vpdpbusd`.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn q2k_vnni<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    q2k_packed::<T, PF>(g, a, out, |dp, u, y| dpbusd(dp, u, y))
}

/// Packed q2_K rows against `T` tokens with AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q2k_avx2<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    q2k_packed::<T, PF>(g, a, out, |dp, u, y| maddubs(dp, u, y))
}
