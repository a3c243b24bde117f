//! The one-row iq4_nl and iq4_xs products (`tensor::iq4`) in llama.cpp's
//! AVX2 order (`ggml_vec_dot_iq4_nl_q8_0`, `ggml_vec_dot_iq4_xs_q8_K`).
//!
//! A block's 16 bytes of nibbles index the table of values with
//! `pshufb`: low nibbles values 0..16 in the low half, high ones 16..32 in
//! the high half, each against its activation byte. The signed products
//! go through the sign trick (`maddubs` of the values' magnitudes and the
//! activations signed by them), so each 32-bit lane `k` sums values `4k
//! .. 4k + 4` of a 32-value run, exactly as ggml's lanes do.
//!
//! - iq4_nl: blocks in pairs, the even one's lanes scaled into one
//!   accumulator (`fma(dx · dy, lanes, acc)`), the odd one's into
//!   another; the two added, summed across, then an odd last block whole
//!   (`fma(dx · dy, isum, sum)`, fused as llama.cpp's build fuses it).
//!   llama.cpp repacks a matrix of iq4_nl whose rows are a multiple of 8;
//!   drover-worker packs those too (`kernels::x8`), so this serves only
//!   the others. For those llama.cpp sums one token so, but a batch of
//!   two or more in llamafile's tinyBLAS (one 8-lane accumulator an
//!   output); drover-worker sums a batch as one token at a time.
//! - iq4_xs: each sub-block's lanes times its scale (`madd`), summed over
//!   the block in integers, then one `fma(dx · dy, lanes, acc)` a block
//!   and a sum across at the end. A matrix of whole groups of eight rows
//!   is packed instead (`kernels::x8`; its kernels are the last here):
//!   eight rows in eight lanes, each sub-block's exact sum times its
//!   scale, the block's total into `fma(dx · dy, isum, acc)`.
//!
//! (Tokens index accumulators and activation rows together.)

#![allow(clippy::needless_range_loop)]

use super::imp::{f16, hsum};
use super::x8::{broadcast4, iq4_table, nibbles};
use super::x8k::{add_scaled, scaled_blocks};
use crate::kernels::x8::{IQ4XS_GROUP_BLOCK, ROWS};
use crate::tensor::iq4::{iq4_value, iq4xs_scale};
use std::arch::x86_64::*;

/// The 32 signed values of the 16 bytes of nibbles at `q[at..]`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn values(q: &[u8], at: usize, table: __m256i) -> __m256i {
    assert!(at + 16 <= q.len());
    // SAFETY: the load reads bytes at..at + 16 of `q` (checked above).
    let nibbles = unsafe { _mm_loadu_si128(q.as_ptr().add(at) as *const __m128i) };
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(nibbles), nibbles);
    _mm256_shuffle_epi8(table, _mm256_and_si256(both, _mm256_set1_epi8(0x0F)))
}

/// The 32 activation bytes at `y[at..]`.
#[inline]
#[target_feature(enable = "avx2")]
fn acts(y: &[u8], at: usize) -> __m256i {
    assert!(at + 32 <= y.len());
    // SAFETY: the load reads bytes at..at + 32 of `y` (checked above).
    unsafe { _mm256_loadu_si256(y.as_ptr().add(at) as *const __m256i) }
}

/// The pairs' sums of signed `x` · signed `y` in 16-bit lanes (at most
/// 2 · 127 · 127: neither side is ever -128).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn pair_sums(x: __m256i, y: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_iq4nl(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len() % 18, 0);
    assert_eq!(w.len() / 18 * 34, a.len());
    let blocks = w.len() / 18;
    let table = iq4_table::<false>();
    let ones = _mm256_set1_epi16(1);
    let lanes = |b: usize| {
        let (x, y) = (&w[18 * b..18 * b + 18], &a[34 * b..34 * b + 34]);
        let p = _mm256_madd_epi16(pair_sums(values(x, 2, table), acts(y, 2)), ones);
        (_mm256_set1_ps(f16(y, 0) * f16(x, 0)), _mm256_cvtepi32_ps(p))
    };
    let (mut even, mut odd) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut b = 0;
    while b + 1 < blocks {
        let (d, p) = lanes(b);
        even = _mm256_fmadd_ps(d, p, even);
        let (d, p) = lanes(b + 1);
        odd = _mm256_fmadd_ps(d, p, odd);
        b += 2;
    }
    let mut sum = hsum(_mm256_add_ps(even, odd));
    if b < blocks {
        let (x, y) = (&w[18 * b..], &a[34 * b..]);
        let isum: i32 = (0..32)
            .map(|j| y[2 + j] as i8 as i32 * iq4_value(&x[2..], j))
            .sum();
        sum = (f16(y, 0) * f16(x, 0)).mul_add(isum as f32, sum);
    }
    sum
}

/// One iq4_xs block's eight lanes against a q8_K block: each
/// sub-block's lanes times its scale, summed.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn iq4xs_lanes(x: &[u8], y: &[u8], table: __m256i) -> __m256i {
    let mut sum = _mm256_setzero_si256();
    for j in 0..8 {
        let p = pair_sums(values(x, 8 + 16 * j, table), acts(y, 4 + 32 * j));
        let scaled = _mm256_madd_epi16(p, _mm256_set1_epi16(iq4xs_scale(x, j) as i16));
        sum = _mm256_add_epi32(sum, scaled);
    }
    sum
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_iq4xs(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len() % 136, 0);
    assert_eq!(w.len() / 136 * 292, a.len());
    let table = iq4_table::<false>();
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.chunks_exact(136).zip(a.chunks_exact(292)) {
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let d = _mm256_set1_ps(f16(x, 0) * dy);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(iq4xs_lanes(x, y, table)), acc);
    }
    hsum(acc)
}

/// Packed iq4_xs rows (`kernels::x8`: eight rows a group) against `T`
/// tokens: per block, each sub-block's eight row lanes (each chunk's
/// values, looked up in the table plus 128 where `UNSIGNED`, into
/// `product(lanes, values, four activations broadcast)`; where
/// `UNSIGNED`, 128 times the activations' sum taken off) times the rows'
/// scales, summed; then `acc = fma(dx * dy, isum, acc)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn iq4xs_packed<const T: usize, const PF: bool, const UNSIGNED: bool>(
    g: &[u8],
    a: &[&[u8]],
    out: &mut [[f32; ROWS]],
    product: impl Fn(__m256i, __m256i, __m256i) -> __m256i,
) {
    let table = iq4_table::<UNSIGNED>();
    let block_sums = |at: usize, b: usize| {
        let mut total = [_mm256_setzero_si256(); T];
        for j in 0..8 {
            let mut dp = [_mm256_setzero_si256(); T];
            for c in 0..4 {
                let (lo, hi) = nibbles(g, at + 80 + 128 * j + 32 * c);
                let (lo, hi) = (
                    _mm256_shuffle_epi8(table, lo),
                    _mm256_shuffle_epi8(table, hi),
                );
                for t in 0..T {
                    let y = 292 * b + 4 + 32 * j + 4 * c;
                    dp[t] = product(dp[t], lo, broadcast4(a[t], y));
                    dp[t] = product(dp[t], hi, broadcast4(a[t], y + 16));
                }
            }
            if UNSIGNED {
                for t in 0..T {
                    let offset = sub_block_sum(a[t], b, j).wrapping_shl(7);
                    dp[t] = _mm256_sub_epi32(dp[t], _mm256_set1_epi32(offset));
                }
            }
            add_scaled(&mut total, &dp, g, at + 16 + 8 * j);
        }
        total
    };
    scaled_blocks::<T, PF>(g, a, out, IQ4XS_GROUP_BLOCK, block_sums)
}

/// The sum of token `y`'s 32 activations of sub-block `j` of block `b`
/// (two of its q8_K block's 16-value sums).
#[inline]
fn sub_block_sum(y: &[u8], b: usize, j: usize) -> i32 {
    let at = 292 * b + 260 + 4 * j;
    i16::from_le_bytes([y[at], y[at + 1]]) as i32
        + i16::from_le_bytes([y[at + 2], y[at + 3]]) as i32
}

/// Packed iq4_xs rows against `T` tokens with `vpdpbusd`: each value plus
/// 128 (unsigned), 128 times the activations' sum taken off a sub-block.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn iq4xs_vnni<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    let product = |dp, w, y| _mm256_dpbusd_epi32(dp, w, y);
    iq4xs_packed::<T, PF, true>(g, a, out, product)
}

/// Packed iq4_xs rows against `T` tokens with AVX2: signed values by the
/// sign trick, each `maddubs` to 32 bits at once.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn iq4xs_avx2<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    let ones = _mm256_set1_epi16(1);
    let product = |dp, w, y| _mm256_add_epi32(dp, _mm256_madd_epi16(pair_sums(w, y), ones));
    iq4xs_packed::<T, PF, false>(g, a, out, product)
}
