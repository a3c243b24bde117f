//! Register-blocked tiles of q4_K, q5_K and q6_K weight rows against q8_K
//! activation rows (prefill). The integer sums are exact whatever their
//! order; the float sums follow `kquants::dot_q4k`, `kquants::dot_q5k`
//! and `kquants::dot_q6k` step for step, so a batched product equals one token
//! at a time bit for bit.

// Tiles index accumulators, rows and tokens together by their position.
#![allow(clippy::needless_range_loop)]

use super::imp::{f16, hsum};
use super::kquants::{q6_group, q6_offsets};
use crate::tensor::blocks::q4k_scale_min;
use std::arch::x86_64::*;

/// The forms of a q4_K-like block the tiles read: q4_K, q5_K, and q5_K
/// unpacked (`q5::unpack_q5k`).
const Q4K: u8 = 0;
const Q5K: u8 = 1;
const Q5K_BYTES: u8 = 2;

/// Weight rows per k-quant tile.
pub const K_ROWS: usize = 2;
/// Tokens per k-quant tile.
pub const K_TOKENS: usize = 3;

/// Reads 32 bytes at `at` of `b`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load(b: &[u8], at: usize) -> __m256i {
    assert!(at + 32 <= b.len());
    // SAFETY: bytes at..at + 32 lie inside `b` (checked above).
    unsafe { _mm256_loadu_si256(b.as_ptr().add(at) as *const __m256i) }
}

/// A q8_K block's scale.
#[inline]
fn q8k_scale(y: &[u8]) -> f32 {
    f32::from_le_bytes([y[0], y[1], y[2], y[3]])
}

/// The sums of a q8_K block's values over each 32-value sub-block, as
/// eight i16 lanes (each at most 32 · 128 in magnitude).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn q8k_sub_sums(y: &[u8]) -> __m128i {
    let bsums = load(y, 260);
    _mm_hadd_epi16(
        _mm256_castsi256_si128(bsums),
        _mm256_extracti128_si256::<1>(bsums),
    )
}

/// The sum of four i32 lanes.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn hsum_i32(v: __m128i) -> i32 {
    let v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b01>(v));
    _mm_cvtsi128_si32(v)
}

/// Block `at..at + len` of each of `N` rows. Plain loops here and below,
/// not `array::from_fn`: its closure is not inlined into a kernel with
/// more target features than `from_fn` has.
#[inline]
fn block_rows<'a, const N: usize>(rows: &[&'a [u8]], at: usize, len: usize) -> [&'a [u8]; N] {
    let mut out: [&[u8]; N] = [&[]; N];
    for (o, row) in out.iter_mut().zip(rows) {
        *o = &row[at..at + len];
    }
    out
}

/// Checks a tile's shapes and returns its number of 256-value blocks.
pub(super) fn blocks(w: &[&[u8]], a: &[&[u8]], weight_block: usize) -> usize {
    let blocks = a[0].len() / 292;
    assert!(a.iter().all(|y| y.len() == blocks * 292));
    assert!(w.iter().all(|x| x.len() == blocks * weight_block));
    blocks
}

/// Each tile output's lanes added, row `r` · token `t` to
/// `out[r * stride + t]`.
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(super) fn store<const R: usize, const T: usize>(
    acc: &[[__m256; T]; R],
    out: &mut [f32],
    stride: usize,
) {
    for r in 0..R {
        for t in 0..T {
            out[r * stride + t] = hsum(acc[r][t]);
        }
    }
}

/// `acc + Σ` of the pairwise products of `a` and `b`'s i16 lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn madd_add_avx2(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
}

/// [`madd_add_avx2`] in one AVX-512 VNNI `vpdpwssd`: the same integers.
#[inline]
#[target_feature(enable = "avx2,avx512vnni,avx512vl")]
fn madd_add_vnni(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
    _mm256_dpwssd_epi32(acc, a, b)
}

/// Asks for bytes `from..from + len` of the `w.len()` rows after `w`'s
/// (contiguous with them in a product's matrix): a hint, sound for any
/// address, never a read.
///
/// A decode kernel walks its rows block by block, `R` interleaved streams
/// the hardware prefetcher does not keep up with; asking, at each block,
/// for as many bytes of the next call's rows as it reads of these, in
/// address order, makes one sequential stream of them (as `gemv.rs` does
/// for q8_0 and q4_0).
#[inline]
#[target_feature(enable = "sse")]
pub(super) fn prefetch_next(w: &[&[u8]], from: usize, len: usize) {
    let next = w[0].as_ptr().wrapping_add(w.len() * w[0].len() + from);
    for at in (0..len).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(at) as *const i8);
    }
}

/// The q4_K, q5_K and q6_K tiles for one set of target features, with its
/// multiply-add of i16 pairs into i32 lanes.
macro_rules! k_tiles {
    (
        $q4k:ident, $q6k:ident, $q4k_next:ident, $q6k_next:ident, $q4k_any:ident, $q6k_any:ident,
        $q5k:ident, $q5k_next:ident, $q5k_bytes:ident, $features:literal, $madd_add:ident
    ) => {
        /// `R × T` q4_K weight rows against q8_K activation rows;
        /// `out[r * stride + t]` receives row `r` · token `t`.
        #[target_feature(enable = $features)]
        pub fn $q4k<const R: usize, const T: usize>(
            w: &[&[u8]],
            a: &[&[u8]],
            out: &mut [f32],
            stride: usize,
        ) {
            $q4k_any::<R, T, false, Q4K>(w, a, out, stride)
        }

        /// The q4_K tile, asking for the next call's `R` rows while it
        /// sums these (decode: see [`prefetch_next`]).
        #[target_feature(enable = $features)]
        pub fn $q4k_next<const R: usize, const T: usize>(
            w: &[&[u8]],
            a: &[&[u8]],
            out: &mut [f32],
            stride: usize,
        ) {
            $q4k_any::<R, T, true, Q4K>(w, a, out, stride)
        }

        /// `R × T` q5_K weight rows against q8_K activation rows.
        #[target_feature(enable = $features)]
        pub fn $q5k<const R: usize, const T: usize>(
            w: &[&[u8]],
            a: &[&[u8]],
            out: &mut [f32],
            stride: usize,
        ) {
            $q4k_any::<R, T, false, Q5K>(w, a, out, stride)
        }

        /// The q5_K tile, asking for the next call's `R` rows.
        #[target_feature(enable = $features)]
        pub fn $q5k_next<const R: usize, const T: usize>(
            w: &[&[u8]],
            a: &[&[u8]],
            out: &mut [f32],
            stride: usize,
        ) {
            $q4k_any::<R, T, true, Q5K>(w, a, out, stride)
        }

        /// The q5_K tile on rows unpacked by `q5::unpack_q5k`: the same
        /// integers and float steps, without decoding the values again for
        /// every tile of tokens.
        #[target_feature(enable = $features)]
        pub fn $q5k_bytes<const R: usize, const T: usize>(
            w: &[&[u8]],
            a: &[&[u8]],
            out: &mut [f32],
            stride: usize,
        ) {
            $q4k_any::<R, T, false, Q5K_BYTES>(w, a, out, stride)
        }

        /// The q6_K tile, asking for the next call's `R` rows while it
        /// sums these.
        #[target_feature(enable = $features)]
        pub fn $q6k_next<const R: usize, const T: usize>(
            w: &[&[u8]],
            a: &[&[u8]],
            out: &mut [f32],
            stride: usize,
        ) {
            $q6k_any::<R, T, true>(w, a, out, stride)
        }

        /// `R × T` q6_K weight rows against q8_K activation rows;
        /// `out[r * stride + t]` receives row `r` · token `t`.
        #[target_feature(enable = $features)]
        pub fn $q6k<const R: usize, const T: usize>(
            w: &[&[u8]],
            a: &[&[u8]],
            out: &mut [f32],
            stride: usize,
        ) {
            $q6k_any::<R, T, false>(w, a, out, stride)
        }

        /// q4_K, q5_K (176-byte blocks, the fifth bits at byte 16 and the
        /// nibbles at 48) or q5_K unpacked (`FORM`); q5_K's mins added
        /// fused as `kquants::dot_q5k` adds them.
        #[inline]
        #[target_feature(enable = $features)]
        fn $q4k_any<const R: usize, const T: usize, const NEXT: bool, const FORM: u8>(
            w: &[&[u8]],
            a: &[&[u8]],
            out: &mut [f32],
            stride: usize,
        ) {
            assert!(w.len() == R && a.len() == T);
            let (size, quants) = match FORM {
                Q4K => (144, 16),
                Q5K => (176, 48),
                _ => (super::q5::UNPACKED_Q5K_BLOCK, 32),
            };
            let low = _mm256_set1_epi8(0x0F);
            let one = _mm256_set1_epi8(1);
            let mut acc = [[_mm256_setzero_ps(); T]; R];
            let mut acc_min = [[0f32; T]; R];
            for b in 0..blocks(w, a, size) {
                if NEXT {
                    prefetch_next(w, R * b * size, R * size);
                }
                let xs = block_rows::<R>(w, size * b, size);
                let ys = block_rows::<T>(a, 292 * b, 292);
                let mut scales = [[0u8; 8]; R];
                let mut mins = [_mm_setzero_si128(); R];
                let mut high = [_mm256_setzero_si256(); R];
                for r in 0..R {
                    let mut m = [0u8; 8];
                    if FORM == Q5K_BYTES {
                        // Decoded when unpacked.
                        scales[r].copy_from_slice(&xs[r][4..12]);
                        m.copy_from_slice(&xs[r][12..20]);
                    } else {
                        for j in 0..8 {
                            (scales[r][j], m[j]) = q4k_scale_min(j, &xs[r][4..16]);
                        }
                    }
                    mins[r] = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(i64::from_le_bytes(m)));
                    if FORM == Q5K {
                        high[r] = load(xs[r], 16);
                    }
                }
                // Sub-block k's fifth bits as 0 or 16 a byte, from bit k of
                // each high byte (shifted down one a sub-block).
                let mut fifth = |r: usize| {
                    let h = _mm256_slli_epi16::<4>(_mm256_and_si256(high[r], one));
                    high[r] = _mm256_srli_epi16::<1>(high[r]);
                    h
                };
                let mut sumi = [[_mm256_setzero_si256(); T]; R];
                for j in 0..4 {
                    let mut ql = [_mm256_setzero_si256(); R];
                    let mut qh = [_mm256_setzero_si256(); R];
                    let mut sc_l = [_mm256_setzero_si256(); R];
                    let mut sc_h = [_mm256_setzero_si256(); R];
                    for r in 0..R {
                        sc_l[r] = _mm256_set1_epi16(scales[r][2 * j] as i16);
                        sc_h[r] = _mm256_set1_epi16(scales[r][2 * j + 1] as i16);
                        if FORM == Q5K_BYTES {
                            // Sub-blocks 2j and 2j + 1, a value a byte.
                            ql[r] = load(xs[r], quants + 64 * j);
                            qh[r] = load(xs[r], quants + 64 * j + 32);
                            continue;
                        }
                        let q = load(xs[r], quants + 32 * j);
                        ql[r] = _mm256_and_si256(q, low);
                        qh[r] = _mm256_and_si256(_mm256_srli_epi16::<4>(q), low);
                        if FORM == Q5K {
                            ql[r] = _mm256_or_si256(ql[r], fifth(r));
                            qh[r] = _mm256_or_si256(qh[r], fifth(r));
                        }
                    }
                    for t in 0..T {
                        let (q8l, q8h) = (load(ys[t], 4 + 64 * j), load(ys[t], 36 + 64 * j));
                        for r in 0..R {
                            let pl = _mm256_maddubs_epi16(ql[r], q8l);
                            let ph = _mm256_maddubs_epi16(qh[r], q8h);
                            sumi[r][t] = $madd_add($madd_add(sumi[r][t], sc_l[r], pl), sc_h[r], ph);
                        }
                    }
                }
                let mut dx = [(0f32, 0f32); R];
                for r in 0..R {
                    dx[r] = (f16(xs[r], 0), f16(xs[r], 2));
                }
                for t in 0..T {
                    let dy = q8k_scale(ys[t]);
                    let sub_sums = q8k_sub_sums(ys[t]);
                    for r in 0..R {
                        // The mins against the sub-block sums: an exact
                        // integer, whatever the order of its terms.
                        let summ = hsum_i32(_mm_madd_epi16(mins[r], sub_sums));
                        acc[r][t] = _mm256_fmadd_ps(
                            _mm256_set1_ps(dx[r].0 * dy),
                            _mm256_cvtepi32_ps(sumi[r][t]),
                            acc[r][t],
                        );
                        acc_min[r][t] = if FORM != Q4K {
                            (-(dx[r].1 * dy)).mul_add(summ as f32, acc_min[r][t])
                        } else {
                            acc_min[r][t] - dx[r].1 * dy * summ as f32
                        };
                    }
                }
            }
            for r in 0..R {
                for t in 0..T {
                    out[r * stride + t] = hsum(acc[r][t]) + acc_min[r][t];
                }
            }
        }

        #[inline]
        #[target_feature(enable = $features)]
        fn $q6k_any<const R: usize, const T: usize, const NEXT: bool>(
            w: &[&[u8]],
            a: &[&[u8]],
            out: &mut [f32],
            stride: usize,
        ) {
            assert!(w.len() == R && a.len() == T);
            let mut acc = [[_mm256_setzero_ps(); T]; R];
            for b in 0..blocks(w, a, 210) {
                if NEXT {
                    prefetch_next(w, R * b * 210, R * 210);
                }
                let xs = block_rows::<R>(w, 210 * b, 210);
                let ys = block_rows::<T>(a, 292 * b, 292);
                let mut sumi = [[_mm256_setzero_si256(); T]; R];
                for half in 0..2 {
                    for k in 0..4 {
                        let mut q6 = [_mm256_setzero_si256(); R];
                        let mut scale = [_mm256_setzero_si256(); R];
                        for r in 0..R {
                            q6[r] = q6_group(xs[r], half, k);
                            let s0 = xs[r][192 + 8 * half + 2 * k] as i8 as i16;
                            let s1 = xs[r][192 + 8 * half + 2 * k + 1] as i8 as i16;
                            scale[r] = _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
                        }
                        for t in 0..T {
                            let q8 = load(ys[t], 4 + 128 * half + 32 * k);
                            for r in 0..R {
                                let p = _mm256_maddubs_epi16(q6[r], q8);
                                sumi[r][t] = $madd_add(sumi[r][t], scale[r], p);
                            }
                        }
                    }
                }
                for t in 0..T {
                    let dy = q8k_scale(ys[t]);
                    for r in 0..R {
                        let sumi = _mm256_sub_epi32(sumi[r][t], q6_offsets(xs[r], ys[t]));
                        acc[r][t] = _mm256_fmadd_ps(
                            _mm256_set1_ps(f16(xs[r], 208) * dy),
                            _mm256_cvtepi32_ps(sumi),
                            acc[r][t],
                        );
                    }
                }
            }
            store(&acc, out, stride);
        }
    };
}

k_tiles!(
    q4k,
    q6k,
    q4k_next,
    q6k_next,
    q4k_any,
    q6k_any,
    q5k,
    q5k_next,
    q5k_bytes,
    "avx2,fma,f16c",
    madd_add_avx2
);
k_tiles!(
    q4k_vnni,
    q6k_vnni,
    q4k_vnni_next,
    q6k_vnni_next,
    q4k_vnni_any,
    q6k_vnni_any,
    q5k_vnni,
    q5k_vnni_next,
    q5k_vnni_bytes,
    "avx2,fma,f16c,avx512vnni,avx512vl",
    madd_add_vnni
);
