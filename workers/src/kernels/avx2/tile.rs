//! Register-blocked tiles for batched products (prefill): up to `R` weight
//! rows against up to `T` activation rows, each weight block unpacked once
//! per tile row and each activation block loaded once per tile column.
//!
//! Every output is accumulated in exactly the order of the one-row kernel
//! in `imp` (per-lane sums over blocks in block order, then `hsum`), so a
//! batched product equals one token at a time bit for bit.

// Tiles index accumulators, rows and tokens together by their position.
#![allow(clippy::needless_range_loop)]

use super::imp::{f16, hsum};
use std::arch::x86_64::*;

/// Weight rows per q8_0/q4_0 tile.
pub const Q0_ROWS: usize = 4;
/// Tokens per q8_0/q4_0 tile.
pub const Q0_TOKENS: usize = 3;
/// Weight rows per q8_0 tile of the plain AVX2 kernels (no VNNI of either
/// kind). q8_0 is not packed (its sums are llama.cpp's lanes), so every
/// batch runs this tile; 4 x 2 is llama.cpp's own shape for 16 registers.
/// 0.5B q8_0 prefill of 512 tokens on a 2-core Zen 3, interleaved runs:
/// 4 x 2 103.6-110.5 tok/s, 4 x 3 82.8-96.2 (it spills), 3 x 2 91.5-97.1,
/// 2 x 3 78.8-88.8.
pub const Q8_0_ROWS: usize = 4;
/// Tokens per q8_0 tile of the plain AVX2 kernels.
pub const Q8_0_TOKENS: usize = 2;
/// Weight rows per f16 tile.
pub const F16_ROWS: usize = 3;
/// Tokens per f16 tile.
pub const F16_TOKENS: usize = 2;

/// The signed quants of a q4_0 (`Q4`) or q8_0 block.
#[inline]
#[target_feature(enable = "avx2")]
fn q0_quants<const Q4: bool>(block: &[u8]) -> __m256i {
    if Q4 {
        assert!(block.len() >= 18);
        // SAFETY: the block has 18 bytes; the load reads bytes 2..18.
        let nibbles = unsafe { _mm_loadu_si128(block.as_ptr().add(2) as *const __m128i) };
        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(nibbles), nibbles);
        let low = _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
        _mm256_sub_epi8(low, _mm256_set1_epi8(8))
    } else {
        assert!(block.len() >= 34);
        // SAFETY: the block has 34 bytes; the load reads bytes 2..34.
        unsafe { _mm256_loadu_si256(block.as_ptr().add(2) as *const __m256i) }
    }
}

/// `R × T` q4_0 (`Q4`) or q8_0 weight rows against q8_0 activation rows;
/// `out[r * stride + t]` receives row `r` · token `t`. `NEXT`: each block
/// asks for as many bytes of the next call's rows (decode: see
/// `ktile::prefetch_next`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn q0<const Q4: bool, const R: usize, const T: usize, const NEXT: bool>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    let wb = if Q4 { 18 } else { 34 };
    assert!(w.len() == R && a.len() == T);
    let blocks = a[0].len() / 34;
    assert!(a.iter().all(|y| y.len() == blocks * 34));
    assert!(w.iter().all(|x| x.len() == blocks * wb));
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for b in 0..blocks {
        if NEXT {
            super::ktile::prefetch_next(w, R * wb * b, R * wb);
        }
        // Plain loops, not `array::from_fn`: its closure is not inlined
        // into a kernel with more target features than `from_fn` has.
        // The scale of each pair is `dx * dy` as in the one-row kernel,
        // multiplied lane-wise from broadcasts (the same rounding).
        let mut ys: [&[u8]; T] = [&[]; T];
        let mut dy = [_mm256_setzero_ps(); T];
        for t in 0..T {
            ys[t] = &a[t][34 * b..34 * b + 34];
            dy[t] = _mm256_set1_ps(f16(ys[t], 0));
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let x = &w[r][wb * b..wb * b + wb];
            let qx = q0_quants::<Q4>(x);
            let ax = _mm256_sign_epi8(qx, qx);
            let dx = _mm256_set1_ps(f16(x, 0));
            for (t, acc) in acc.iter_mut().enumerate() {
                let qy = q0_quants::<false>(ys[t]);
                let dot = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx));
                let sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, ones));
                *acc = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy[t]), sum, *acc);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (t, acc) in acc.iter().enumerate() {
            out[r * stride + t] = hsum(*acc);
        }
    }
}

/// `R × T` q8_0 weight rows against q8_0 activation rows.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q8_0<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<false, R, T, false>(w, a, out, stride)
}

/// [`q8_0`] asking for the next call's `R` rows while it sums these.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q8_0_next<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<false, R, T, true>(w, a, out, stride)
}

/// `R × T` q4_0 weight rows against q8_0 activation rows.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q4_0<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<true, R, T, false>(w, a, out, stride)
}

/// [`q4_0`] asking for the next call's `R` rows while it sums these.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q4_0_next<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<true, R, T, true>(w, a, out, stride)
}

/// `R × T` f16 weight rows against activation rows of f16 values widened
/// to f32 (exactly), accumulated as `imp::dot_f16` accumulates: two sums
/// of 8 lanes over 16-value steps, the remaining 8-value steps into the
/// first, then the scalar tail.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn f16_rows<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    f16_any::<R, T, false>(w, a, out, stride)
}

/// [`f16_rows`] asking for the next call's `R` rows while it sums these
/// (decode: see `ktile::prefetch_next`).
#[target_feature(enable = "avx2,fma,f16c")]
pub fn f16_next<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    f16_any::<R, T, true>(w, a, out, stride)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn f16_any<const R: usize, const T: usize, const NEXT: bool>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    assert!(w.len() == R && a.len() == T);
    let n = w[0].len() / 2;
    assert!(w.iter().all(|x| x.len() == 2 * n));
    assert!(a.iter().all(|y| y.len() == 4 * n));
    let wx = |r: usize, i: usize| {
        assert!(i + 8 <= n);
        // SAFETY: 16 bytes at 2*i, inside the row (checked above).
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(w[r].as_ptr().add(2 * i) as *const __m128i) })
    };
    let ay = |t: usize, i: usize| {
        assert!(i + 8 <= n);
        // SAFETY: 32 bytes at 4*i, inside the row (checked above).
        unsafe { _mm256_loadu_ps(a[t].as_ptr().add(4 * i) as *const f32) }
    };
    let mut acc = [[[_mm256_setzero_ps(); 2]; T]; R];
    let mut i = 0;
    while i + 16 <= n {
        if NEXT {
            super::ktile::prefetch_next(w, R * 2 * i, R * 32);
        }
        for k in 0..2 {
            let mut x = [_mm256_setzero_ps(); R];
            for (r, x) in x.iter_mut().enumerate() {
                *x = wx(r, i + 8 * k);
            }
            for t in 0..T {
                let y = ay(t, i + 8 * k);
                for (r, x) in x.iter().enumerate() {
                    acc[r][t][k] = _mm256_fmadd_ps(*x, y, acc[r][t][k]);
                }
            }
        }
        i += 16;
    }
    while i + 8 <= n {
        let mut x = [_mm256_setzero_ps(); R];
        for (r, x) in x.iter_mut().enumerate() {
            *x = wx(r, i);
        }
        for t in 0..T {
            let y = ay(t, i);
            for (r, x) in x.iter().enumerate() {
                acc[r][t][0] = _mm256_fmadd_ps(*x, y, acc[r][t][0]);
            }
        }
        i += 8;
    }
    for (r, acc) in acc.iter().enumerate() {
        for (t, acc) in acc.iter().enumerate() {
            out[r * stride + t] = f16_end(acc, a[t], i, |j| f16(w[r], 2 * j));
        }
    }
}

/// One output's end in the one-row f16 order: `hsum(s0 + s1)`, then the
/// products of the values `from..` of the activation row `y` (f32) and
/// the weights `x(j)`, in order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn f16_end(acc: &[__m256; 2], y: &[u8], from: usize, x: impl Fn(usize) -> f32) -> f32 {
    let mut s = hsum(_mm256_add_ps(acc[0], acc[1]));
    for j in from..y.len() / 4 {
        s += x(j) * f32::from_le_bytes(y[4 * j..4 * j + 4].try_into().unwrap());
    }
    s
}

/// A pair of f16 weight rows packed together (`kernels::pairs`, `w` its
/// one slice) against `T` activation rows of f16 values widened to f32,
/// each row in [`f16_rows`]'s order; `out[r * stride + t]` receives row
/// `r` · token `t`. One token (decode) reads one stream with four sums in
/// flight. `S`, the slices, is 1.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn f16_pair<const S: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    use crate::kernels::pairs::{ROWS, STEP, offset, pair_bytes};
    assert!(S == 1 && w.len() == S && a.len() == T);
    let n = a[0].len() / 4;
    let pair = w[0];
    assert!(pair.len() == pair_bytes(n) && a.iter().all(|y| y.len() == 4 * n));
    let wx = |r: usize, i: usize| {
        let at = offset(n, r, i);
        assert!(at + 16 <= pair.len());
        // SAFETY: 16 bytes at `at`, inside the pair (checked above).
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(pair.as_ptr().add(at) as *const __m128i) })
    };
    let ay = |t: usize, i: usize| {
        assert!(i + 8 <= n);
        // SAFETY: 32 bytes at 4*i, inside the row (checked above).
        unsafe { _mm256_loadu_ps(a[t].as_ptr().add(4 * i) as *const f32) }
    };
    let mut acc = pair_steps::<T>(pair, a, n);
    let mut i = STEP * (n / STEP);
    while i + 8 <= n {
        for r in 0..ROWS {
            let x = wx(r, i);
            for t in 0..T {
                acc[r][t][0] = _mm256_fmadd_ps(x, ay(t, i), acc[r][t][0]);
            }
        }
        i += 8;
    }
    for (r, acc) in acc.iter().enumerate() {
        for (t, acc) in acc.iter().enumerate() {
            out[r * stride + t] = f16_end(acc, a[t], i, |j| f16(pair, offset(n, r, j)));
        }
    }
}

/// [`f16_pair`]'s whole 16-value steps: each row's two sums per token.
/// Not inlined: kept apart from the rest of the kernel, the twelve sums
/// stay in registers (inlined, they went through the stack every step).
#[inline(never)]
#[target_feature(enable = "avx2,fma,f16c")]
fn pair_steps<const T: usize>(pair: &[u8], a: &[&[u8]], n: usize) -> [[[__m256; 2]; T]; 2] {
    use crate::kernels::pairs::{ROWS, STEP};
    assert!(a.len() == T && a.iter().all(|y| y.len() == 4 * n));
    let steps = n / STEP;
    assert!(pair.len() >= ROWS * 2 * STEP * steps);
    let mut acc = [[[_mm256_setzero_ps(); 2]; T]; ROWS];
    for s in 0..steps {
        let i = STEP * s;
        for k in 0..2 {
            let mut x = [_mm256_setzero_ps(); ROWS];
            for (r, x) in x.iter_mut().enumerate() {
                // SAFETY: 16 bytes of step `s`'s 64 at byte `4 * i`, inside
                // the pair (checked above).
                *x = _mm256_cvtph_ps(unsafe {
                    _mm_loadu_si128(
                        pair.as_ptr().add(ROWS * 2 * i + 2 * STEP * r + 16 * k) as *const __m128i
                    )
                });
            }
            for t in 0..T {
                // SAFETY: 32 bytes at `4 * (i + 8k)`, inside the row
                // (checked above).
                let y =
                    unsafe { _mm256_loadu_ps(a[t].as_ptr().add(4 * (i + 8 * k)) as *const f32) };
                for (r, x) in x.iter().enumerate() {
                    acc[r][t][k] = _mm256_fmadd_ps(*x, y, acc[r][t][k]);
                }
            }
        }
    }
    acc
}
