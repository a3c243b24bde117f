//! q2_K and q3_K against q8_K, in llama.cpp's AVX2 order. Per block, for
//! q2_K first the mins: eight i32 lanes of `min · sum` over two
//! sub-blocks each (the q8_K block's 16-value sums) into
//! `acc = fma(-dy · dmin, lanes, acc)`. Then, for both, the values: eight
//! i32 lanes, lane `k` summing the products of values
//! `32 v + 4 k .. 32 v + 4 k + 4` for each of the block's eight runs of 32
//! (`v`), each run's halves by their sub-blocks' scales, into
//! `acc = fma(dy · d, lanes, acc)`; at the end the lanes added as `hsum`
//! adds them. The integer sums are exact, so each lane is llama.cpp's
//! integer. The one-row product is the tile of one row by one token, so
//! every shape gives the same bits.

// Tiles index accumulators, rows and tokens together by their position.
#![allow(clippy::needless_range_loop)]

use super::imp::f16;
use super::ktile::{blocks, load, prefetch_next, store};
use crate::tensor::blocks::q3k_scales;
use std::arch::x86_64::*;

/// The kinds: q2_K and q3_K.
const Q2: u8 = 2;
const Q3: u8 = 3;

/// Bytes of a block of `KIND`, and where its f16 scale `d` is.
const fn layout(kind: u8) -> (usize, usize) {
    if kind == Q2 { (84, 80) } else { (110, 108) }
}

/// What a row's block gives every run: q3_K's sixteen scales and high-bit
/// mask, q2_K's sixteen mins as i16 lanes (its scales are read per run).
#[derive(Clone, Copy)]
struct Block {
    scales: [i32; 16],
    hmask: __m256i,
    mins: __m256i,
}

#[inline]
#[target_feature(enable = "avx2")]
fn block<const KIND: u8>(x: &[u8]) -> Block {
    if KIND == Q2 {
        assert!(x.len() >= 16);
        // SAFETY: the load reads bytes 0..16 of the block (checked above).
        let both = unsafe { _mm_loadu_si128(x.as_ptr() as *const __m128i) };
        let mins = _mm_and_si128(_mm_srli_epi16::<4>(both), _mm_set1_epi8(0xF));
        Block {
            scales: [0; 16],
            hmask: _mm256_setzero_si256(),
            mins: _mm256_cvtepu8_epi16(mins),
        }
    } else {
        Block {
            scales: q3k_scales(x),
            hmask: load(x, 0),
            mins: _mm256_setzero_si256(),
        }
    }
}

/// Run `v` (0..8) of a block's values (q2_K's 0..=3, q3_K's -4..=3 as
/// signed bytes) from its two low bits at bits `2 (v % 4)` of the quant
/// bytes (q2_K's from byte 16, q3_K's from 32, a run of 32 bytes for each
/// four runs) and, for q3_K, the high-bit mask; with the run's two scales
/// as i16 lanes (the first 16 values' in the low half).
#[inline]
#[target_feature(enable = "avx2")]
fn run<const KIND: u8>(x: &[u8], p: &Block, v: usize) -> (__m256i, __m256i) {
    let quants = if KIND == Q2 { 16 } else { 32 };
    let bits = load(x, quants + 32 * (v / 4));
    let shift = _mm_cvtsi32_si128(2 * (v % 4) as i32);
    let low = _mm256_and_si256(_mm256_srl_epi16(bits, shift), _mm256_set1_epi8(3));
    let (q, s0, s1) = if KIND == Q2 {
        (low, (x[2 * v] & 0xF) as i16, (x[2 * v + 1] & 0xF) as i16)
    } else {
        // Less 4 where the value's high bit is clear.
        let bit = _mm256_set1_epi8((1u8 << v) as i8);
        let clear = _mm256_cmpeq_epi8(_mm256_and_si256(p.hmask, bit), _mm256_setzero_si256());
        let q = _mm256_sub_epi8(low, _mm256_and_si256(clear, _mm256_set1_epi8(4)));
        (q, p.scales[2 * v] as i16, p.scales[2 * v + 1] as i16)
    };
    (q, _mm256_setr_m128i(_mm_set1_epi16(s0), _mm_set1_epi16(s1)))
}

/// Each i32 lane the scaled sum of four neighbouring products of `q` and
/// the q8_K quants `qy` (-127..=127): q2_K's values are unsigned, q3_K's
/// go through the sign trick; no pair saturates, and the scale
/// multiplies each pair's sum.
#[inline]
#[target_feature(enable = "avx2")]
fn scaled_fours<const KIND: u8>(q: __m256i, qy: __m256i, scale: __m256i) -> __m256i {
    let pairs = if KIND == Q2 {
        _mm256_maddubs_epi16(q, qy)
    } else {
        _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(qy, q))
    };
    _mm256_madd_epi16(pairs, scale)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q2k(w: &[u8], a: &[u8]) -> f32 {
    let mut out = [0f32];
    any::<Q2, 1, 1, false>(&[w], &[a], &mut out, 1);
    out[0]
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q3k(w: &[u8], a: &[u8]) -> f32 {
    let mut out = [0f32];
    any::<Q3, 1, 1, false>(&[w], &[a], &mut out, 1);
    out[0]
}

/// `R × T` q2_K weight rows against q8_K activation rows; `out[r * stride
/// + t]` receives row `r` · token `t`.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q2k<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    any::<Q2, R, T, false>(w, a, out, stride)
}

/// [`q2k`] asking for the next call's `R` rows while it sums (decode).
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q2k_next<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    any::<Q2, R, T, true>(w, a, out, stride)
}

/// `R × T` q3_K weight rows against q8_K activation rows.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q3k<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    any::<Q3, R, T, false>(w, a, out, stride)
}

/// [`q3k`] asking for the next call's `R` rows while it sums (decode).
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q3k_next<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    any::<Q3, R, T, true>(w, a, out, stride)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn any<const KIND: u8, const R: usize, const T: usize, const NEXT: bool>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    let (size, d_at) = layout(KIND);
    assert!(w.len() == R && a.len() == T);
    let blocks = blocks(w, a, size);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for b in 0..blocks {
        if NEXT {
            prefetch_next(w, R * b * size, R * size);
        }
        let mut xs: [&[u8]; R] = [&[]; R];
        for r in 0..R {
            xs[r] = &w[r][size * b..size * b + size];
        }
        let mut ys: [&[u8]; T] = [&[]; T];
        let mut dy = [0f32; T];
        for t in 0..T {
            ys[t] = &a[t][292 * b..292 * b + 292];
            dy[t] = f32::from_le_bytes([ys[t][0], ys[t][1], ys[t][2], ys[t][3]]);
        }
        let mut p = [block::<KIND>(xs[0]); R];
        for r in 1..R {
            p[r] = block::<KIND>(xs[r]);
        }
        if KIND == Q2 {
            for t in 0..T {
                let sums = load(ys[t], 260);
                for r in 0..R {
                    let prod = _mm256_cvtepi32_ps(_mm256_madd_epi16(p[r].mins, sums));
                    let dmin = _mm256_set1_ps(-dy[t] * f16(xs[r], 82));
                    acc[r][t] = _mm256_fmadd_ps(dmin, prod, acc[r][t]);
                }
            }
        }
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        for v in 0..8 {
            let mut runs = [(_mm256_setzero_si256(), _mm256_setzero_si256()); R];
            for r in 0..R {
                runs[r] = run::<KIND>(xs[r], &p[r], v);
            }
            for t in 0..T {
                let qy = load(ys[t], 4 + 32 * v);
                for r in 0..R {
                    let (q, scale) = runs[r];
                    let lanes = scaled_fours::<KIND>(q, qy, scale);
                    sumi[r][t] = _mm256_add_epi32(sumi[r][t], lanes);
                }
            }
        }
        for t in 0..T {
            for r in 0..R {
                let d = _mm256_set1_ps(dy[t] * f16(xs[r], d_at));
                acc[r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi[r][t]), acc[r][t]);
            }
        }
    }
    store(&acc, out, stride);
}
