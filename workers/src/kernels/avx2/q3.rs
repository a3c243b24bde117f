//! q3_K against q8_K, in llama.cpp's order: per block, eight i32 lanes,
//! lane `k` summing the products of values `32 v + 4 k .. 32 v + 4 k + 4`
//! for each of the block's eight runs of 32 (`v`), each run's halves by
//! their sub-blocks' scales; then `acc = fma(dy * dx, lanes, acc)`, block
//! after block, and the lanes added as `hsum` adds them. The integer sums
//! are exact, so each lane is llama.cpp's integer, and the tiles' outputs
//! are the one-row product's bits.

// Tiles index accumulators, rows and tokens together by their position.
#![allow(clippy::needless_range_loop)]

use super::imp::{f16, hsum};
use super::ktile::{blocks, load, prefetch_next, store};
use crate::tensor::blocks::q3k_scales;
use std::arch::x86_64::*;

/// Run `v` (0..8) of a q3_K block as signed bytes (-4..=3), from its
/// high-bit mask (`hmask`, bytes 0..32) and its run's quant bytes
/// (`bits`, bytes 32 + 32 (v / 4)..), with the run's two scales as i16
/// lanes (the first 16 values' in the low half).
#[inline]
#[target_feature(enable = "avx2")]
fn run(hmask: __m256i, bits: __m256i, v: usize, scales: &[i32; 16]) -> (__m256i, __m256i) {
    let shift = _mm_cvtsi32_si128(2 * (v % 4) as i32);
    let low = _mm256_and_si256(_mm256_srl_epi16(bits, shift), _mm256_set1_epi8(3));
    // 4 where the value's high bit is clear, else 0.
    let bit = _mm256_set1_epi8((1u8 << v) as i8);
    let clear = _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), _mm256_setzero_si256());
    let q = _mm256_sub_epi8(low, _mm256_and_si256(clear, _mm256_set1_epi8(4)));
    let scale = _mm256_setr_m128i(
        _mm_set1_epi16(scales[2 * v] as i16),
        _mm_set1_epi16(scales[2 * v + 1] as i16),
    );
    (q, scale)
}

/// Each i32 lane the scaled sum of four neighbouring products of `q`
/// (-4..=3) and the q8_K quants `qy` (-127..=127): through the sign
/// trick, no pair saturates, and the scale multiplies each pair's sum.
#[inline]
#[target_feature(enable = "avx2")]
fn scaled_fours(q: __m256i, qy: __m256i, scale: __m256i) -> __m256i {
    let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(qy, q));
    _mm256_madd_epi16(pairs, scale)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q3k(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len() % 110, 0);
    assert_eq!(w.len() / 110 * 292, a.len());
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.chunks_exact(110).zip(a.chunks_exact(292)) {
        let d = f32::from_le_bytes([y[0], y[1], y[2], y[3]]) * f16(x, 108);
        let (scales, hmask) = (q3k_scales(x), load(x, 0));
        let mut sumi = _mm256_setzero_si256();
        for v in 0..8 {
            let (q, scale) = run(hmask, load(x, 32 + 32 * (v / 4)), v, &scales);
            sumi = _mm256_add_epi32(sumi, scaled_fours(q, load(y, 4 + 32 * v), scale));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    hsum(acc)
}

/// `R × T` q3_K weight rows against q8_K activation rows; `out[r * stride
/// + t]` receives row `r` · token `t`, [`dot_q3k`]'s bits.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q3k<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q3k_any::<R, T, false>(w, a, out, stride)
}

/// [`q3k`] asking for the next call's `R` rows while it sums (decode).
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q3k_next<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q3k_any::<R, T, true>(w, a, out, stride)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q3k_any<const R: usize, const T: usize, const NEXT: bool>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    assert!(w.len() == R && a.len() == T);
    let blocks = blocks(w, a, 110);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for b in 0..blocks {
        if NEXT {
            prefetch_next(w, R * b * 110, R * 110);
        }
        let mut scales = [[0i32; 16]; R];
        let mut hmask = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let x = &w[r][110 * b..110 * b + 110];
            scales[r] = q3k_scales(x);
            hmask[r] = load(x, 0);
        }
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        for v in 0..8 {
            let mut runs = [(_mm256_setzero_si256(), _mm256_setzero_si256()); R];
            for r in 0..R {
                let bits = load(&w[r][110 * b..], 32 + 32 * (v / 4));
                runs[r] = run(hmask[r], bits, v, &scales[r]);
            }
            for t in 0..T {
                let qy = load(&a[t][292 * b..], 4 + 32 * v);
                for r in 0..R {
                    let (q, scale) = runs[r];
                    sumi[r][t] = _mm256_add_epi32(sumi[r][t], scaled_fours(q, qy, scale));
                }
            }
        }
        for t in 0..T {
            let y = &a[t][292 * b..];
            let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
            for r in 0..R {
                let d = _mm256_set1_ps(dy * f16(&w[r][110 * b..], 108));
                acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[r][t]), acc[r][t]);
            }
        }
    }
    store(&acc, out, stride);
}
