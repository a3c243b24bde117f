//! The one-row AVX2 dot products and element-wise kernels, and the
//! helpers the tiles share (`hsum`, `f16`).

use crate::model::RopeLayout;
use std::arch::x86_64::*;

#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn hsum(v: __m256) -> f32 {
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps::<1>(v);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[inline]
#[target_feature(enable = "f16c")]
pub(super) fn f16(b: &[u8], i: usize) -> f32 {
    // One F16C conversion in line: a block's scale is converted per
    // block, so a call through `half`'s feature check costs.
    let bits = u16::from_le_bytes([b[i], b[i + 1]]) as i32;
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
}

/// `ops::swiglu` compiled for AVX2 and FMA: no float operation reordered,
/// so the portable bits (`attend::attend_heads` is written out instead).
#[target_feature(enable = "avx2,fma")]
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    crate::model::ops::swiglu(gate, up)
}

/// `ops::rope` compiled for AVX2 and FMA: its fused steps one instruction
/// each, the portable bits.
#[target_feature(enable = "avx2,fma")]
pub fn rope(x: &mut [f32], hd: usize, dims: usize, base: f32, l: RopeLayout, pos: usize) {
    crate::model::ops::rope(x, hd, dims, base, l, pos)
}

#[target_feature(enable = "avx2,fma")]
pub fn dot_f32(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    let n = w.len() / 4;
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    // SAFETY: each load reads 32 bytes starting at 4*i with i + 8 <= n.
    unsafe {
        while i + 32 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_loadu_ps(w.as_ptr().add(4 * (i + 8 * k)) as *const f32);
                let y = _mm256_loadu_ps(a.as_ptr().add(4 * (i + 8 * k)) as *const f32);
                *acc = _mm256_fmadd_ps(x, y, *acc);
            }
            i += 32;
        }
        while i + 8 <= n {
            let x = _mm256_loadu_ps(w.as_ptr().add(4 * i) as *const f32);
            let y = _mm256_loadu_ps(a.as_ptr().add(4 * i) as *const f32);
            acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
            i += 8;
        }
    }
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut s = hsum(sum);
    for j in i..n {
        s += f32::from_le_bytes(w[4 * j..4 * j + 4].try_into().unwrap())
            * f32::from_le_bytes(a[4 * j..4 * j + 4].try_into().unwrap());
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    let n = w.len() / 2;
    let mut acc = [_mm256_setzero_ps(); 2];
    let mut i = 0;
    // SAFETY: each load reads 16 bytes starting at 2*i with i + 8 <= n.
    unsafe {
        while i + 16 <= n {
            for (k, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_cvtph_ps(_mm_loadu_si128(
                    w.as_ptr().add(2 * (i + 8 * k)) as *const __m128i
                ));
                let y = _mm256_cvtph_ps(_mm_loadu_si128(
                    a.as_ptr().add(2 * (i + 8 * k)) as *const __m128i
                ));
                *acc = _mm256_fmadd_ps(x, y, *acc);
            }
            i += 16;
        }
        while i + 8 <= n {
            let x = _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().add(2 * i) as *const __m128i));
            let y = _mm256_cvtph_ps(_mm_loadu_si128(a.as_ptr().add(2 * i) as *const __m128i));
            acc[0] = _mm256_fmadd_ps(x, y, acc[0]);
            i += 8;
        }
    }
    let mut s = hsum(_mm256_add_ps(acc[0], acc[1]));
    for j in i..n {
        s += f16(w, 2 * j) * f16(a, 2 * j);
    }
    s
}

/// Sums of signed byte products, 8 lanes of i32 as f32.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn mul_sum_i8(x: __m256i, y: __m256i) -> __m256 {
    let ax = _mm256_sign_epi8(x, x);
    let sy = _mm256_sign_epi8(y, x);
    let dot = _mm256_maddubs_epi16(ax, sy);
    _mm256_cvtepi32_ps(_mm256_madd_epi16(dot, _mm256_set1_epi16(1)))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q8_0(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    assert_eq!(w.len() % 34, 0);
    let mut acc = _mm256_setzero_ps();
    for (x, y) in w.chunks_exact(34).zip(a.chunks_exact(34)) {
        let d = _mm256_set1_ps(f16(x, 0) * f16(y, 0));
        // SAFETY: both blocks are 34 bytes; the loads read bytes 2..34.
        let (qx, qy) = unsafe {
            (
                _mm256_loadu_si256(x.as_ptr().add(2) as *const __m256i),
                _mm256_loadu_si256(y.as_ptr().add(2) as *const __m256i),
            )
        };
        acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, qy), acc);
    }
    hsum(acc)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q4_0(w: &[u8], a: &[u8]) -> f32 {
    dot_x::<false, false>(w, a)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q5_0(w: &[u8], a: &[u8]) -> f32 {
    dot_x::<true, false>(w, a)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q4_1(w: &[u8], a: &[u8]) -> f32 {
    dot_x::<false, true>(w, a)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q5_1(w: &[u8], a: &[u8]) -> f32 {
    dot_x::<true, true>(w, a)
}

/// q4_0 (18-byte blocks, the nibbles at 2, offset 8), or q5_0 (`FIVE`:
/// 22 bytes, the fifth bits in the word at byte 2, the nibbles at 6,
/// offset 16), against q8_0; or (`MIN`) q4_1 (20 bytes, nibbles at 4) or
/// q5_1 (24, the fifth bits at 4, nibbles at 8), against q8_1. ggml's
/// order: each lane's integer sums scaled and accumulated fused; for
/// q4_1 and q5_1 the weights' mins times the activations' scaled sums
/// fused into one float apart, added last.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_x<const FIVE: bool, const MIN: bool>(w: &[u8], a: &[u8]) -> f32 {
    let (size, quants) = match (FIVE, MIN) {
        (false, false) => (18, 2),
        (true, false) => (22, 6),
        (false, true) => (20, 4),
        (true, true) => (24, 8),
    };
    let (act, at) = if MIN { (36, 4) } else { (34, 2) };
    assert_eq!(w.len() % size, 0);
    assert_eq!(w.len() / size * act, a.len());
    let mut acc = _mm256_setzero_ps();
    let mut mins = 0.0f32;
    let mask = _mm256_set1_epi8(0x0F);
    let offset = _mm256_set1_epi8(if FIVE { 16 } else { 8 });
    for (x, y) in w.chunks_exact(size).zip(a.chunks_exact(act)) {
        if MIN {
            mins = f16(x, 2).mul_add(f16(y, 2), mins);
        }
        let d = _mm256_set1_ps(f16(x, 0) * f16(y, 0));
        // SAFETY: the weight block's 16 quant bytes end at its end (load
        // of quants..quants + 16), and the activation block's 32 quants
        // end at its end (load of at..at + 32).
        let (nibbles, qy) = unsafe {
            (
                _mm_loadu_si128(x.as_ptr().add(quants) as *const __m128i),
                _mm256_loadu_si256(y.as_ptr().add(at) as *const __m256i),
            )
        };
        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(nibbles), nibbles);
        let mut q = _mm256_and_si256(both, mask);
        if FIVE {
            // The fifth bits sit in the word just before the nibbles.
            q = _mm256_or_si256(q, super::q5::q5_0_high(&x[quants - 6..]));
        }
        let sum = if MIN {
            // Unsigned quants (at most 31) by signed: no pair saturates.
            let pairs = _mm256_maddubs_epi16(q, qy);
            _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
        } else {
            mul_sum_i8(_mm256_sub_epi8(q, offset), qy)
        };
        acc = _mm256_fmadd_ps(d, sum, acc);
    }
    if MIN { hsum(acc) + mins } else { hsum(acc) }
}
