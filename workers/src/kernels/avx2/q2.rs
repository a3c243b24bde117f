//! q2_K against q8_K, in llama.cpp's order: per block, first the mins,
//! eight i32 lanes of `min · sum` over two sub-blocks each (the q8_K
//! block's 16-value sums) into `acc = fma(-dy · dmin, lanes, acc)`, then
//! the values as q3_K's (`q3.rs`): eight i32 lanes, lane `k` the scaled
//! products of values `32 v + 4 k .. 32 v + 4 k + 4` for each run of 32
//! (`v`), into `acc = fma(dy · d, lanes, acc)`; the lanes added as `hsum`
//! adds them. The integer sums are exact, so the tiles' outputs are the
//! one-row product's bits.

// Tiles index accumulators, rows and tokens together by their position.
#![allow(clippy::needless_range_loop)]

use super::imp::{f16, hsum};
use super::ktile::{blocks, load, prefetch_next, store};
use std::arch::x86_64::*;

/// A q2_K block's sixteen mins (its bytes 0..16's high nibbles), each an
/// i16 lane.
#[inline]
#[target_feature(enable = "avx2")]
fn mins(x: &[u8]) -> __m256i {
    assert!(x.len() >= 16);
    // SAFETY: the load reads bytes 0..16 of the block (checked above).
    let both = unsafe { _mm_loadu_si128(x.as_ptr() as *const __m128i) };
    _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(both), _mm_set1_epi8(0xF)))
}

/// The q8_K block's sixteen 16-value sums as i16 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn bsums(y: &[u8]) -> __m256i {
    load(y, 260)
}

/// Run `v` (0..8) of a q2_K block's values (0..=3) from its run's quant
/// bytes (`bits`, bytes 16 + 32 (v / 4)..), and the run's two scales
/// (the low nibbles of the block's bytes `2v` and `2v + 1`) as i16 lanes,
/// the first 16 values' in the low half.
#[inline]
#[target_feature(enable = "avx2")]
fn run(x: &[u8], bits: __m256i, v: usize) -> (__m256i, __m256i) {
    let shift = _mm_cvtsi32_si128(2 * (v % 4) as i32);
    let q = _mm256_and_si256(_mm256_srl_epi16(bits, shift), _mm256_set1_epi8(3));
    let scale = _mm256_setr_m128i(
        _mm_set1_epi16((x[2 * v] & 0xF) as i16),
        _mm_set1_epi16((x[2 * v + 1] & 0xF) as i16),
    );
    (q, scale)
}

/// Each i32 lane the scaled sum of four neighbouring products of `q`
/// (0..=3, unsigned) and the q8_K quants `qy`: no pair saturates.
#[inline]
#[target_feature(enable = "avx2")]
fn scaled_fours(q: __m256i, qy: __m256i, scale: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(q, qy), scale)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q2k(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len() % 84, 0);
    assert_eq!(w.len() / 84 * 292, a.len());
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.chunks_exact(84).zip(a.chunks_exact(292)) {
        let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
        let prod = _mm256_madd_epi16(mins(x), bsums(y));
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(-dy * f16(x, 82)),
            _mm256_cvtepi32_ps(prod),
            acc,
        );
        let mut sumi = _mm256_setzero_si256();
        for v in 0..8 {
            let (q, scale) = run(x, load(x, 16 + 32 * (v / 4)), v);
            sumi = _mm256_add_epi32(sumi, scaled_fours(q, load(y, 4 + 32 * v), scale));
        }
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(dy * f16(x, 80)),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
    }
    hsum(acc)
}

/// `R × T` q2_K weight rows against q8_K activation rows; `out[r * stride
/// + t]` receives row `r` · token `t`, [`dot_q2k`]'s bits.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q2k<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q2k_any::<R, T, false>(w, a, out, stride)
}

/// [`q2k`] asking for the next call's `R` rows while it sums (decode).
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q2k_next<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q2k_any::<R, T, true>(w, a, out, stride)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q2k_any<const R: usize, const T: usize, const NEXT: bool>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    assert!(w.len() == R && a.len() == T);
    let blocks = blocks(w, a, 84);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for b in 0..blocks {
        if NEXT {
            prefetch_next(w, R * b * 84, R * 84);
        }
        let mut m = [_mm256_setzero_si256(); R];
        for r in 0..R {
            m[r] = mins(&w[r][84 * b..84 * b + 84]);
        }
        let mut dmin = [0f32; R];
        for r in 0..R {
            dmin[r] = f16(&w[r][84 * b..], 82);
        }
        for t in 0..T {
            let y = &a[t][292 * b..292 * b + 292];
            let dy = f32::from_le_bytes([y[0], y[1], y[2], y[3]]);
            let sums = bsums(y);
            for r in 0..R {
                let prod = _mm256_madd_epi16(m[r], sums);
                let dmin = _mm256_set1_ps(-dy * dmin[r]);
                acc[r][t] = _mm256_fmadd_ps(dmin, _mm256_cvtepi32_ps(prod), acc[r][t]);
            }
        }
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        for v in 0..8 {
            let mut runs = [(_mm256_setzero_si256(), _mm256_setzero_si256()); R];
            for r in 0..R {
                let x = &w[r][84 * b..84 * b + 84];
                runs[r] = run(x, load(x, 16 + 32 * (v / 4)), v);
            }
            for t in 0..T {
                let qy = load(&a[t][292 * b..292 * b + 292], 4 + 32 * v);
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
                let d = _mm256_set1_ps(dy * f16(&w[r][84 * b..], 80));
                acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[r][t]), acc[r][t]);
            }
        }
    }
    store(&acc, out, stride);
}
