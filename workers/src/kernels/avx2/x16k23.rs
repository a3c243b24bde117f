//! Packed q2_K and q3_K (layout and order: `kernels::x8`, kernels:
//! `x8k23`) two groups of eight rows a call in 512-bit registers, as
//! `x16` takes the other packed types: the first group's rows in the low
//! half of every register, the second's in the high half. Each lane takes
//! exactly its row's steps in `x8k23`'s kernels, so the outputs are
//! theirs, bit for bit. A batch only, as `x16`'s.

// Tokens index accumulators and activation rows together.
#![allow(clippy::needless_range_loop)]

use super::x8::slices;
use super::x8k23::q2k_mins;
use super::x16::{both8, both16, both32, broadcast4, q8k_blocks, store, store_diff};
use crate::kernels::x8::{Q2K_GROUP_BLOCK, Q3K_GROUP_BLOCK, ROWS};
use std::arch::x86_64::*;

/// The exact integer sum of block `b` of two packed q2_K groups or
/// (`Q3`) q3_K ones (`g`, the second `half` bytes on; the block at `at`
/// in the first), sixteen row lanes a token: the sums `x8k23::run_sums`
/// takes, sub-block by sub-block in 512 bits, each sub-block's sums
/// (q3_K's less 4 times its activation sum) times the rows' scales. One
/// call a block, which the compiler keeps whole; a call for each run was
/// not inlined and passed its sums through memory (an all-q2_K 0.5B's
/// prefill on a Zen 5: 347 tok/s that way, 508 this way, 497 on the
/// 256-bit kernels alone; all-q3_K 379, 355 on the 256-bit ones).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
fn block_sums<const T: usize, const Q3: bool>(
    (g, half): (&[u8], usize),
    at: usize,
    a: &[&[u8]],
    b: usize,
) -> [__m512i; T] {
    let (three, four) = (_mm512_set1_epi8(3), _mm512_set1_epi8(4));
    let nibble = _mm512_set1_epi32(0xF);
    let (quants, scales) = if Q3 {
        (at + 144, at + 16)
    } else {
        (at + 160, at + 32)
    };
    let mut total = [_mm512_setzero_si512(); T];
    for sub in 0..16 {
        // Sub-block `sub`: run `p` of half `c`, its first 16 values or
        // (`k`) its last.
        let (c, p, k) = (sub / 8, sub % 8 / 2, sub % 2);
        let low_shift = _mm_cvtsi32_si128(2 * p as i32);
        let high_bit = _mm512_set1_epi8((1u8 << (4 * c + p)) as i8);
        let ys = slices::<T>(a, 292 * b + 4 + 16 * sub, 16);
        let mut sums = [_mm512_setzero_si512(); T];
        for j in 0..4 {
            let chunk = 4 * k + j;
            let q = both32(g, half, quants + 256 * c + 32 * chunk);
            let mut u = _mm512_and_si512(_mm512_srl_epi16(q, low_shift), three);
            if Q3 {
                // 4 more where the value's high bit is set: a byte mask
                // and a masked add, two instructions for four.
                let set = _mm512_test_epi8_mask(both32(g, half, at + 656 + 32 * chunk), high_bit);
                u = _mm512_mask_add_epi8(u, set, u, four);
            }
            for t in 0..T {
                sums[t] = _mm512_dpbusd_epi32(sums[t], u, broadcast4(ys[t], 4 * j));
            }
        }
        let s = both8(g, half, scales + 8 * sub);
        let s = if Q3 {
            _mm512_cvtepi8_epi32(s)
        } else {
            _mm512_and_si512(_mm512_cvtepu8_epi32(s), nibble)
        };
        for t in 0..T {
            if Q3 {
                let y = &a[t][292 * b + 260 + 2 * sub..];
                let sum = i16::from_le_bytes([y[0], y[1]]) as i32;
                sums[t] = _mm512_sub_epi32(sums[t], _mm512_set1_epi32(4 * sum));
            }
            total[t] = _mm512_add_epi32(total[t], _mm512_mullo_epi32(sums[t], s));
        }
    }
    total
}

/// Two packed q3_K groups back to back (`g`) against `T` tokens with
/// 512-bit `vpdpbusd`, each lane as `x8k23::q3k_vnni` sums its row ([`block_sums`]);
/// `out[t]` the first group's eight outputs, `out[T + t]` the second's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub fn q3k_vnni<const T: usize>(g: &[u8], a: &[&[u8]], _s: &[&[i32]], out: &mut [[f32; ROWS]]) {
    let half = g.len() / 2;
    let mut acc = [_mm512_setzero_ps(); T];
    for b in 0..q8k_blocks::<T>(g, a, out, Q3K_GROUP_BLOCK) {
        let at = b * Q3K_GROUP_BLOCK;
        let isum = block_sums::<T, true>((g, half), at, a, b);
        let dx = _mm512_cvtph_ps(both16(g, half, at));
        for t in 0..T {
            let y = &a[t][292 * b..];
            let dy = _mm512_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
        }
    }
    store(acc, out)
}

/// Two packed q2_K groups back to back (`g`) against `T` tokens with
/// 512-bit `vpdpbusd`, each lane as `x8k23::q2k_vnni` sums its row;
/// `out` as [`q3k_vnni`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub fn q2k_vnni<const T: usize>(g: &[u8], a: &[&[u8]], _s: &[&[i32]], out: &mut [[f32; ROWS]]) {
    let half = g.len() / 2;
    let (mut acc, mut macc) = ([_mm512_setzero_ps(); T], [_mm512_setzero_ps(); T]);
    for b in 0..q8k_blocks::<T>(g, a, out, Q2K_GROUP_BLOCK) {
        let at = b * Q2K_GROUP_BLOCK;
        let isum = block_sums::<T, false>((g, half), at, a, b);
        let mut msum = [_mm512_setzero_si512(); T];
        for q in 0..8 {
            let at = at + 32 + 16 * q;
            let m = _mm512_cvtepu8_epi16(_mm256_set_m128i(q2k_mins(g, half + at), q2k_mins(g, at)));
            for t in 0..T {
                let y = &a[t][292 * b + 260 + 4 * q..];
                let sums = _mm512_set1_epi32(i32::from_le_bytes([y[0], y[1], y[2], y[3]]));
                msum[t] = _mm512_add_epi32(msum[t], _mm512_madd_epi16(m, sums));
            }
        }
        // The float steps written out, as in `x16`'s kernels: a helper
        // for them was not inlined (3.5% of a q5_K_M prefill's samples).
        let dx = _mm512_cvtph_ps(both16(g, half, at));
        let mx = _mm512_cvtph_ps(both16(g, half, at + 16));
        for t in 0..T {
            let y = &a[t][292 * b..];
            let dy = _mm512_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy), _mm512_cvtepi32_ps(isum[t]), acc[t]);
            macc[t] = _mm512_fmadd_ps(_mm512_mul_ps(mx, dy), _mm512_cvtepi32_ps(msum[t]), macc[t]);
        }
    }
    store_diff(acc, macc, out)
}
