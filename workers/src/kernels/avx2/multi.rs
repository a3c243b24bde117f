//! Four activation rows against one weight row at once (prefill): each
//! weight block is loaded and unpacked once for four tokens.

use super::imp::{f16, hsum, mul_sum_i8};
use std::arch::x86_64::*;

/// Loads the 32 quants of a 34-byte q8_0 block.
#[inline]
#[target_feature(enable = "avx2")]
fn q8_quants(block: &[u8]) -> __m256i {
    assert!(block.len() >= 34);
    // SAFETY: the block has 34 bytes; the load reads bytes 2..34.
    unsafe { _mm256_loadu_si256(block.as_ptr().add(2) as *const __m256i) }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot4_q8_0(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    assert_eq!(w.len() % 34, 0);
    assert!(a.iter().all(|r| r.len() == w.len()));
    let mut acc = [_mm256_setzero_ps(); 4];
    for (b, x) in w.chunks_exact(34).enumerate() {
        let qx = q8_quants(x);
        let dx = f16(x, 0);
        for (t, acc) in acc.iter_mut().enumerate() {
            let y = &a[t][34 * b..34 * b + 34];
            let d = _mm256_set1_ps(dx * f16(y, 0));
            *acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, q8_quants(y)), *acc);
        }
    }
    acc.map(|v| hsum(v))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot4_q4_0(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    assert_eq!(w.len() % 18, 0);
    assert!(a.iter().all(|r| r.len() == w.len() / 18 * 34));
    let mut acc = [_mm256_setzero_ps(); 4];
    let mask = _mm256_set1_epi8(0x0F);
    let eight = _mm256_set1_epi8(8);
    for (b, x) in w.chunks_exact(18).enumerate() {
        // SAFETY: the block has 18 bytes; the load reads bytes 2..18.
        let nibbles = unsafe { _mm_loadu_si128(x.as_ptr().add(2) as *const __m128i) };
        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(nibbles), nibbles);
        let qx = _mm256_sub_epi8(_mm256_and_si256(both, mask), eight);
        let dx = f16(x, 0);
        for (t, acc) in acc.iter_mut().enumerate() {
            let y = &a[t][34 * b..34 * b + 34];
            let d = _mm256_set1_ps(dx * f16(y, 0));
            *acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, q8_quants(y)), *acc);
        }
    }
    acc.map(|v| hsum(v))
}

/// Four f16 activation rows against one f16 weight row, each accumulated
/// exactly as the one-row kernel accumulates it.
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::needless_range_loop)] // acc[t][k] and a[t] walk together
pub fn dot4_f16(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    assert!(a.iter().all(|r| r.len() == w.len()));
    let n = w.len() / 2;
    let load = |r: &[u8], i: usize| {
        assert!(2 * i + 16 <= r.len());
        // SAFETY: 16 bytes at 2*i, inside the row (checked above).
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(r.as_ptr().add(2 * i) as *const __m128i) })
    };
    let mut acc = [[_mm256_setzero_ps(); 2]; 4];
    let mut i = 0;
    while i + 16 <= n {
        for k in 0..2 {
            let x = load(w, i + 8 * k);
            for t in 0..4 {
                acc[t][k] = _mm256_fmadd_ps(x, load(a[t], i + 8 * k), acc[t][k]);
            }
        }
        i += 16;
    }
    while i + 8 <= n {
        let x = load(w, i);
        for t in 0..4 {
            acc[t][0] = _mm256_fmadd_ps(x, load(a[t], i), acc[t][0]);
        }
        i += 8;
    }
    std::array::from_fn(|t| {
        let mut s = hsum(_mm256_add_ps(acc[t][0], acc[t][1]));
        for j in i..n {
            s += f16(w, 2 * j) * f16(a[t], 2 * j);
        }
        s
    })
}
