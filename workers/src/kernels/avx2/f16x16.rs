//! f16 products with 512-bit AVX-512 F, chosen at run time where the
//! processor has it. On the rows as stored: up to four weight rows against
//! up to four activation rows (prefill), and one row at a time asking for
//! the next (decode). On rows packed in pairs (`kernels::pairs`, on AMD
//! processors): up to two pairs against up to four activation rows, and
//! one pair a call for one token.
//!
//! One 512-bit register holds what the 256-bit kernels keep in two: its
//! low eight lanes are the first sum (values `16s..16s + 8` of every step
//! `s`) and its high eight the second (`16s + 8..16s + 16`). Each lane
//! takes the same fused multiply-adds in the same order, and the end is
//! the same (the 8-value rest into the first sum, `hsum(s0 + s1)`, the
//! scalar tail), so the outputs equal `imp::dot_f16` bit for bit. With
//! thirty-two registers, a tile of four rows by four tokens keeps its
//! sixteen sums, its four weight rows and one activation row in them.

// Tiles index accumulators, rows and tokens together by their position.
#![allow(clippy::needless_range_loop)]

use super::imp::f16;
use super::tile::f16_end;
use std::arch::x86_64::*;

/// Weight rows per tile.
pub const ROWS: usize = 4;
/// Tokens per tile.
pub const TOKENS: usize = 4;

/// `R × T` f16 weight rows against activation rows of f16 values widened
/// to f32 (exactly); `out[r * stride + t]` receives row `r` · token `t`.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub fn rows<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    any::<R, T, false>(w, a, out, stride)
}

/// [`rows`] asking for the next call's `R` rows while it sums these
/// (decode: see `ktile::prefetch_next`).
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub fn next<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    any::<R, T, true>(w, a, out, stride)
}

#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn any<const R: usize, const T: usize, const NEXT: bool>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    assert!(w.len() == R && a.len() == T);
    let n = w[0].len() / 2;
    assert!(w.iter().all(|x| x.len() == 2 * n));
    assert!(a.iter().all(|y| y.len() == 4 * n));
    let acc = steps::<R, T, NEXT>(w, a, n / 16);
    for r in 0..R {
        for t in 0..T {
            out[r * stride + t] = end(acc[r][t], w[r], |j| 2 * j, a[t], 16 * (n / 16));
        }
    }
}

/// One output from its 512-bit sums over the whole 16-value steps (values
/// `..i`): the 8-value rest, if any, into the first sum, then the one-row
/// end. `at(j)`: where value `j` of the weight row is in `w`, values
/// `j..j + 8` contiguous from there where `j` is a multiple of 8.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn end(both: __m512, w: &[u8], at: impl Fn(usize) -> usize, y: &[u8], i: usize) -> f32 {
    let mut sums = [
        _mm512_castps512_ps256(both),
        _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(both))),
    ];
    let rest = i + 8 <= y.len() / 4;
    if rest {
        let o = at(i);
        assert!(o + 16 <= w.len());
        // SAFETY: 16 bytes at `o` of the weights (checked above) and 32 at
        // 4*i of the activation row (i + 8 values, checked above).
        let (x, y) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().add(o) as *const __m128i)),
                _mm256_loadu_ps(y.as_ptr().add(4 * i) as *const f32),
            )
        };
        sums[0] = _mm256_fmadd_ps(x, y, sums[0]);
    }
    let from = if rest { i + 8 } else { i };
    f16_end(&sums, y, from, |j| f16(w, at(j)))
}

/// The whole 16-value steps: each row's sums per token. Not inlined: kept
/// apart from the ends, the sums stay in registers.
#[inline(never)]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn steps<const R: usize, const T: usize, const NEXT: bool>(
    w: &[&[u8]],
    a: &[&[u8]],
    steps: usize,
) -> [[__m512; T]; R] {
    assert!(w.len() == R && a.len() == T);
    assert!(w.iter().all(|x| x.len() >= 32 * steps));
    assert!(a.iter().all(|y| y.len() >= 64 * steps));
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    for s in 0..steps {
        if NEXT {
            super::ktile::prefetch_next(w, R * 32 * s, R * 32);
        }
        let mut x = [_mm512_setzero_ps(); R];
        for (r, x) in x.iter_mut().enumerate() {
            // SAFETY: 32 bytes of step `s`, inside the row (checked above).
            *x = _mm512_cvtph_ps(unsafe {
                _mm256_loadu_si256(w[r].as_ptr().add(32 * s) as *const __m256i)
            });
        }
        for t in 0..T {
            // SAFETY: 64 bytes of step `s`, inside the row (checked above).
            let y = unsafe { _mm512_loadu_ps(a[t].as_ptr().add(64 * s) as *const f32) };
            for r in 0..R {
                acc[r][t] = _mm512_fmadd_ps(x[r], y, acc[r][t]);
            }
        }
    }
    acc
}

/// `S` pairs of f16 weight rows packed together (`kernels::pairs`, `w`
/// one slice a pair) against `T` activation rows widened to f32, in the
/// one-row order (each row's two sums in one 512-bit register, as [`rows`]
/// keeps them); `out[r * stride + t]` receives row `r` (pair `r / 2`'s row
/// `r % 2`) · token `t`. One token reads one stream per pair, two
/// registers of sums in flight for each, where [`next`] has one.
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub fn pair<const S: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    use crate::kernels::pairs::{ROWS, STEP, offset, pair_bytes};
    assert!(w.len() == S && a.len() == T);
    let n = a[0].len() / 4;
    assert!(w.iter().all(|p| p.len() == pair_bytes(n)) && a.iter().all(|y| y.len() == 4 * n));
    let acc = pair_steps::<S, T>(w, a, n / STEP);
    for (p, pair) in w.iter().enumerate() {
        for r in 0..ROWS {
            let at = |j| offset(n, r, j);
            for t in 0..T {
                let o = &mut out[(ROWS * p + r) * stride + t];
                *o = end(acc[p][r][t], pair, at, a[t], STEP * (n / STEP));
            }
        }
    }
}

/// [`pair`]'s whole 16-value steps: a step of a pair is its row 0's 32
/// bytes, then its row 1's. Not inlined, so that the sums stay in registers.
#[inline(never)]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn pair_steps<const S: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    steps: usize,
) -> [[[__m512; T]; 2]; S] {
    use crate::kernels::pairs::ROWS;
    assert!(w.len() == S && w.iter().all(|p| p.len() >= ROWS * 32 * steps));
    assert!(a.len() == T && a.iter().all(|y| y.len() >= 64 * steps));
    let mut acc = [[[_mm512_setzero_ps(); T]; ROWS]; S];
    for s in 0..steps {
        let mut x = [[_mm512_setzero_ps(); ROWS]; S];
        for (p, x) in x.iter_mut().enumerate() {
            for (r, x) in x.iter_mut().enumerate() {
                // SAFETY: 32 bytes of step `s`'s 64, inside the pair
                // (checked above).
                *x = _mm512_cvtph_ps(unsafe {
                    _mm256_loadu_si256(w[p].as_ptr().add(ROWS * 32 * s + 32 * r) as *const __m256i)
                });
            }
        }
        for t in 0..T {
            // SAFETY: 64 bytes of step `s`, inside the row (checked above).
            let y = unsafe { _mm512_loadu_ps(a[t].as_ptr().add(64 * s) as *const f32) };
            for p in 0..S {
                for r in 0..ROWS {
                    acc[p][r][t] = _mm512_fmadd_ps(x[p][r], y, acc[p][r][t]);
                }
            }
        }
    }
    acc
}
