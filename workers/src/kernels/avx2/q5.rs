//! The AVX2 dot product of q5_0 against q8_0, and its fifth bits (q5_K's
//! is `kquants::dot_q5k`). The integer sums are exact; only the order of
//! the float sums differs from the portable kernels.

use super::imp::{f16, hsum, mul_sum_i8};
use std::arch::x86_64::*;

/// The fifth bits of a q5_0 block (the word at byte 2 of `x`), one byte a
/// value: 0x10 where value `i`'s bit is set, else 0.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn q5_0_high(x: &[u8]) -> __m256i {
    let bits = i32::from_le_bytes([x[2], x[3], x[4], x[5]]);
    // Byte i of the vector takes byte i / 8 of the word, then keeps only
    // bit i % 8 of it.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let which = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, which), which);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q5_0(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len() % 22, 0);
    assert_eq!(w.len() / 22 * 34, a.len());
    let mut acc = _mm256_setzero_ps();
    let low = _mm256_set1_epi8(0x0F);
    let sixteen = _mm256_set1_epi8(16);
    for (x, y) in w.chunks_exact(22).zip(a.chunks_exact(34)) {
        let d = _mm256_set1_ps(f16(x, 0) * f16(y, 0));
        // SAFETY: the weight block is 22 bytes (load of 6..22) and the
        // activation block 34 (load of 2..34).
        let (nibbles, qy) = unsafe {
            (
                _mm_loadu_si128(x.as_ptr().add(6) as *const __m128i),
                _mm256_loadu_si256(y.as_ptr().add(2) as *const __m256i),
            )
        };
        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(nibbles), nibbles);
        let q5 = _mm256_or_si256(_mm256_and_si256(both, low), q5_0_high(x));
        let qx = _mm256_sub_epi8(q5, sixteen);
        acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, qy), acc);
    }
    hsum(acc)
}
