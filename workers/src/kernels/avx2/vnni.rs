//! q8_0, q4_0, q5_0, q4_1 and q5_1 tiles with AVX-512 VNNI's 256-bit `vpdpbusd`, chosen at
//! run time where the processor has it (Zen 4, Ice Lake and later), in
//! the AVX2 tiles' shape (`tile::Q0_ROWS × tile::Q0_TOKENS`); the q8_0 one
//! also with AVX-VNNI's, where a processor has that without AVX-512, and
//! in 512-bit registers two tokens a register ([`q8_0_wide`], the batch
//! tile where the processor has AVX-512 F and BW too).
//!
//! `vpdpbusd` multiplies unsigned by signed bytes and adds each group of
//! four products to an i32 lane. Weights are made unsigned by an offset
//! (q4_0 nibbles as they are, offset 8; q5_0's five bits, offset 16; q8_0
//! quants plus 128), and the
//! accumulator starts at minus the offset times the activation's group
//! sums, so each lane ends at exactly the integer the AVX2 kernel's
//! `maddubs`/`madd` pair gives (neither can saturate on these ranges).
//! q4_1 and q5_1 quants are unsigned already (no offset); their mins
//! times the q8_1 activations' scaled sums are added apart, as the one-row
//! kernel adds them. The float steps are the one-row kernel's, so outputs
//! match it bit for bit.

// Tiles index accumulators, rows and tokens together by their position.
#![allow(clippy::needless_range_loop)]

use super::imp::{f16, hsum};
use std::arch::x86_64::*;

/// The unsigned quants of a q4_0 (`Q4`: nibbles, offset 8) or q8_0
/// (quants + 128) block.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn unsigned_quants<const Q4: bool>(block: &[u8]) -> __m256i {
    if Q4 {
        assert!(block.len() >= 18);
        // SAFETY: the block has 18 bytes; the load reads bytes 2..18.
        let nibbles = unsafe { _mm_loadu_si128(block.as_ptr().add(2) as *const __m128i) };
        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(nibbles), nibbles);
        _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
    } else {
        _mm256_xor_si256(signed_quants(block), _mm256_set1_epi8(-128))
    }
}

/// The weight kinds of [`q0`]: q4_0, q5_0, q8_0, q4_1, q5_1.
const Q4_0: u8 = 4;
const Q5_0: u8 = 5;
const Q8_0: u8 = 8;
const Q4_1: u8 = 41;
const Q5_1: u8 = 51;

/// A weight block of `KIND`'s bytes, and whether it has a min (a q8_1
/// activation, 36 bytes, its quants at 4; else q8_0, 34, at 2).
const fn kind_layout(kind: u8) -> (usize, bool) {
    match kind {
        Q4_0 => (18, false),
        Q5_0 => (22, false),
        Q4_1 => (20, true),
        Q5_1 => (24, true),
        _ => (34, false),
    }
}

/// The unsigned quants of a q4/q5 weight block: nibbles at byte `at`,
/// and (`FIVE`) their fifth bits from the word just before them.
#[inline]
#[target_feature(enable = "avx2")]
fn unsigned_nibbles<const FIVE: bool>(block: &[u8], at: usize) -> __m256i {
    assert!(block.len() >= at + 16);
    // SAFETY: the load reads bytes at..at + 16 of the block.
    let nibbles = unsafe { _mm_loadu_si128(block.as_ptr().add(at) as *const __m128i) };
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(nibbles), nibbles);
    let low = _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
    if FIVE {
        _mm256_or_si256(low, super::q5::q5_0_high(&block[at - 6..]))
    } else {
        low
    }
}

/// The unsigned quants of a block of `KIND` and its weight block's bytes.
#[inline]
#[target_feature(enable = "avx2")]
fn unsigned_kind<const KIND: u8>(block: &[u8]) -> __m256i {
    match KIND {
        Q4_0 => unsigned_quants::<true>(block),
        Q5_0 => unsigned_nibbles::<true>(block, 6),
        Q4_1 => unsigned_nibbles::<false>(block, 4),
        Q5_1 => unsigned_nibbles::<true>(block, 8),
        _ => unsigned_quants::<false>(block),
    }
}

/// The 32 signed quants of a 34-byte q8_0 block.
#[inline]
#[target_feature(enable = "avx2")]
fn signed_quants(block: &[u8]) -> __m256i {
    signed_quants_at(block, 2)
}

/// The 32 signed quants of a q8_0 block (`at` 2) or q8_1 block (`at` 4).
#[inline]
#[target_feature(enable = "avx2")]
fn signed_quants_at(block: &[u8], at: usize) -> __m256i {
    assert!(block.len() >= at + 32);
    // SAFETY: the load reads bytes at..at + 32 of the block.
    unsafe { _mm256_loadu_si256(block.as_ptr().add(at) as *const __m256i) }
}

/// The body of a `R × T` tile of weights of `$kind` (`out[r * stride + t]`
/// receives row `r` · token `t`), with `$dpbusd` the 256-bit `vpdpbusd` of
/// the instruction set: AVX-512 VNNI's (EVEX) or AVX-VNNI's (VEX), the
/// same sums.
macro_rules! q0_tile {
    ($dpbusd:ident, $kind:expr, $r:expr, $t:expr, $w:expr, $a:expr, $out:expr, $stride:expr) => {{
        let (w, a, out, stride) = ($w, $a, $out, $stride);
        let (wb, min) = kind_layout($kind);
        let (ab, at) = if min { (36, 4) } else { (34, 2) };
        let offset = _mm256_set1_epi8(match $kind {
            Q4_0 => 8,
            Q5_0 => 16,
            _ => -128,
        });
        assert!(w.len() == $r && a.len() == $t);
        let blocks = a[0].len() / ab;
        assert!(a.iter().all(|y| y.len() == blocks * ab));
        assert!(w.iter().all(|x| x.len() == blocks * wb));
        let mut acc = [[_mm256_setzero_ps(); $t]; $r];
        let mut mins = [[0.0f32; $t]; $r];
        for b in 0..blocks {
            if $kind != Q4_0 && $kind != Q8_0 && $t == 1 {
                // Decode: the next call's rows asked for while these sum.
                super::ktile::prefetch_next(w, $r * b * wb, $r * wb);
            }
            let mut qy = [_mm256_setzero_si256(); $t];
            let mut base = [_mm256_setzero_si256(); $t];
            let mut dy = [_mm256_setzero_ps(); $t];
            let mut sy = [0.0f32; $t];
            for t in 0..$t {
                let y = &a[t][ab * b..ab * b + ab];
                qy[t] = signed_quants_at(y, at);
                if min {
                    sy[t] = f16(y, 2);
                } else {
                    // Minus the offset times each group of four activations.
                    let sums = $dpbusd(_mm256_setzero_si256(), offset, qy[t]);
                    base[t] = _mm256_sub_epi32(_mm256_setzero_si256(), sums);
                }
                dy[t] = _mm256_set1_ps(f16(y, 0));
            }
            for r in 0..$r {
                let x = &w[r][wb * b..wb * b + wb];
                let ux = unsigned_kind::<{ $kind }>(x);
                let dx = _mm256_set1_ps(f16(x, 0));
                let mx = if min { f16(x, 2) } else { 0.0 };
                for t in 0..$t {
                    let sum = _mm256_cvtepi32_ps($dpbusd(base[t], ux, qy[t]));
                    acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy[t]), sum, acc[r][t]);
                    if min {
                        mins[r][t] = mx.mul_add(sy[t], mins[r][t]);
                    }
                }
            }
        }
        for r in 0..$r {
            for t in 0..$t {
                out[r * stride + t] = if min {
                    hsum(acc[r][t]) + mins[r][t]
                } else {
                    hsum(acc[r][t])
                };
            }
        }
    }};
}

/// `R × T` weight rows of `KIND` against q8_0 activation rows (q8_1 for
/// q4_1 and q5_1); `out[r * stride + t]` receives row `r` · token `t`.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
fn q0<const KIND: u8, const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0_tile!(_mm256_dpbusd_epi32, KIND, R, T, w, a, out, stride)
}

/// [`q8_0`] with AVX-VNNI's `vpdpbusd` (VEX), for a processor that has it
/// without AVX-512 (Intel's client processors since Alder Lake, and its
/// E-core Xeons): the same sums, so the same bits.
#[target_feature(enable = "avx2,fma,f16c,avxvnni")]
pub fn q8_0_avx_vnni<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0_tile!(_mm256_dpbusd_avx_epi32, Q8_0, R, T, w, a, out, stride)
}

/// `R × T` q8_0 weight rows against q8_0 activation rows.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn q8_0<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<Q8_0, R, T>(w, a, out, stride)
}

/// `R × T` q4_0 weight rows against q8_0 activation rows.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn q4_0<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<Q4_0, R, T>(w, a, out, stride)
}

/// `R × T` q5_0 weight rows against q8_0 activation rows.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn q5_0<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<Q5_0, R, T>(w, a, out, stride)
}

/// `R × T` q4_1 weight rows against q8_1 activation rows.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn q4_1<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<Q4_1, R, T>(w, a, out, stride)
}

/// `R × T` q5_1 weight rows against q8_1 activation rows.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn q5_1<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    q0::<Q5_1, R, T>(w, a, out, stride)
}

/// The 32 quants of the q8_0 block at the start of `y` and those of `z`,
/// `y`'s in the low half.
#[inline]
#[target_feature(enable = "avx512f,avx2")]
fn two_quants(y: &[u8], z: &[u8]) -> __m512i {
    _mm512_inserti64x4::<1>(_mm512_castsi256_si512(signed_quants(y)), signed_quants(z))
}

/// `R × T` q8_0 weight rows against q8_0 activation rows in 512-bit
/// registers, two tokens a register (token `2p` in the low half, `2p + 1`
/// in the high; an odd last token fills both): each half takes exactly
/// the steps of [`q8_0`]'s lanes, so the outputs are its bits, with half
/// the instructions for the integer and float steps.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub fn q8_0_wide<const R: usize, const T: usize>(
    w: &[&[u8]],
    a: &[&[u8]],
    out: &mut [f32],
    stride: usize,
) {
    const PAIRS: usize = 3;
    assert!(w.len() == R && a.len() == T && T <= 2 * PAIRS);
    let pairs = T.div_ceil(2);
    let blocks = a[0].len() / 34;
    assert!(a.iter().all(|y| y.len() == blocks * 34));
    assert!(w.iter().all(|x| x.len() == blocks * 34));
    let offset = _mm512_set1_epi8(-128);
    let mut acc = [[_mm512_setzero_ps(); PAIRS]; R];
    for b in 0..blocks {
        let mut qy = [_mm512_setzero_si512(); PAIRS];
        let mut base = [_mm512_setzero_si512(); PAIRS];
        let mut dy = [_mm512_setzero_ps(); PAIRS];
        for p in 0..pairs {
            let y = &a[2 * p][34 * b..34 * b + 34];
            let z = &a[(2 * p + 1).min(T - 1)][34 * b..34 * b + 34];
            qy[p] = two_quants(y, z);
            // Minus the offset times each group of four activations.
            let sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, qy[p]);
            base[p] = _mm512_sub_epi32(_mm512_setzero_si512(), sums);
            dy[p] =
                _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f16(y, 0)), _mm512_set1_ps(f16(z, 0)));
        }
        for r in 0..R {
            let x = &w[r][34 * b..34 * b + 34];
            let ux = _mm512_xor_si512(two_quants(x, x), offset);
            let dx = _mm512_set1_ps(f16(x, 0));
            for p in 0..pairs {
                let sum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base[p], ux, qy[p]));
                acc[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy[p]), sum, acc[r][p]);
            }
        }
    }
    for r in 0..R {
        for t in 0..T {
            let both = _mm512_castps_pd(acc[r][t / 2]);
            let half = if t % 2 == 0 {
                _mm512_castpd512_pd256(both)
            } else {
                _mm512_extractf64x4_pd::<1>(both)
            };
            out[r * stride + t] = hsum(_mm256_castpd_ps(half));
        }
    }
}
