//! q5_0's and q5_1's fifth bits as bytes (for `imp`'s one-row products
//! and the VNNI tiles),
//! and q5_K rows unpacked for a batch's tiles (`ktile`).

use super::ktile::load;
use crate::tensor::blocks::q4k_scale_min;
use std::arch::x86_64::*;

/// The fifth bits of a q5_0 block (the word at byte 2 of `x`; for a q5_1
/// block, `x` starts at the block's byte 2), one byte a value: 0x10 where
/// value `i`'s bit is set, else 0.
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

/// Bytes of an unpacked q5_K block: its `d` and `dmin` as they are, its
/// eight six-bit scales and then its eight mins a byte each, 12 bytes of
/// padding, then its 256 values, one a byte (0..32), in order.
pub const UNPACKED_Q5K_BLOCK: usize = 32 + 256;

/// Unpacks a row of q5_K blocks into `out` (its [`UNPACKED_Q5K_BLOCK`]s).
#[target_feature(enable = "avx2")]
pub fn unpack_q5k(row: &[u8], out: &mut [u8]) {
    assert!(row.len().is_multiple_of(176) && out.len() == row.len() / 176 * UNPACKED_Q5K_BLOCK);
    let (low, one) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(1));
    for (x, o) in row
        .chunks_exact(176)
        .zip(out.chunks_exact_mut(UNPACKED_Q5K_BLOCK))
    {
        o[..4].copy_from_slice(&x[..4]);
        for j in 0..8 {
            (o[4 + j], o[12 + j]) = q4k_scale_min(j, &x[4..16]);
        }
        let mut high = load(x, 16);
        for j in 0..4 {
            let q = load(x, 48 + 32 * j);
            for (k, nibbles) in [q, _mm256_srli_epi16::<4>(q)].into_iter().enumerate() {
                let fifth = _mm256_slli_epi16::<4>(_mm256_and_si256(high, one));
                high = _mm256_srli_epi16::<1>(high);
                let v = _mm256_or_si256(_mm256_and_si256(nibbles, low), fifth);
                let at = 32 + 64 * j + 32 * k;
                // SAFETY: bytes at..at + 32 of the 288-byte block `o`.
                unsafe { _mm256_storeu_si256(o.as_mut_ptr().add(at) as *mut __m256i, v) };
            }
        }
    }
}
