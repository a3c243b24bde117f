//! f16 products with 512-bit AVX-512 F, chosen at run time where the
//! processor has it: up to four weight rows against up to four activation
//! rows (prefill), and one row at a time asking for the next (decode).
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
    // The 8-value rest, if any, goes into the first sum.
    let i = 16 * (n / 16);
    let rest = i + 8 <= n;
    for r in 0..R {
        for t in 0..T {
            let both = acc[r][t];
            let mut sums = [
                _mm512_castps512_ps256(both),
                _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(both))),
            ];
            if rest {
                // SAFETY: 16 bytes at 2*i of the weight row and 32 at 4*i
                // of the activation row, inside both (i + 8 <= n).
                let (x, y) = unsafe {
                    (
                        _mm256_cvtph_ps(
                            _mm_loadu_si128(w[r].as_ptr().add(2 * i) as *const __m128i),
                        ),
                        _mm256_loadu_ps(a[t].as_ptr().add(4 * i) as *const f32),
                    )
                };
                sums[0] = _mm256_fmadd_ps(x, y, sums[0]);
            }
            let from = if rest { i + 8 } else { i };
            out[r * stride + t] = f16_end(&sums, a[t], from, |j| f16(w[r], 2 * j));
        }
    }
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
