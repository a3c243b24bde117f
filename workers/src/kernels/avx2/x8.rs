//! The packed q4_0 and iq4_nl kernels (layout and order: `kernels::x8`;
//! q4_K's and q5_K's are in `x8k`):
//! one group of eight rows against up to `x8::TOKENS` tokens a call, with
//! AVX2's `maddubs`/`madd` or AVX-512 VNNI's 256-bit `vpdpbusd`.
//!
//! Each 32-byte chunk of a group holds four quants of each of the eight
//! rows; four bytes of a token's activations broadcast to every lane
//! multiply it, so each 32-bit lane sums one row's products. Per block,
//! the eight rows' exact integer sums then take one conversion and one
//! multiply-add for all eight outputs of a token.
//!
//! The q4_0 nibbles are the unsigned side as stored (`vpdpbusd`, or
//! AVX2's `maddubs` with eight products summed in 16 bits: at most
//! 8 · 2 · 15 · 127 = 30480, no overflow), and 8 times the activation
//! block's sum (`Encoded`'s block sums) is taken off the lane. iq4_nl's
//! nibbles index its table of values: plus 128 for `vpdpbusd` (128 times
//! the sum taken off), signed for AVX2 (its `maddubs` would overflow on
//! the values plus 128).
//!
//! Each kernel's `PF` says whether a one-token call asks for its bytes
//! ahead of its reading ([`AHEAD`]; the maker's and family's choice,
//! `avx2::Tuning`).

// Tokens index accumulators and activation rows together.
#![allow(clippy::needless_range_loop)]

use super::imp::f16;
use super::ktile::load;
use crate::kernels::x8::ROWS;
use std::arch::x86_64::*;

/// Checks the shapes one q4_0 call reads and returns the number of blocks.
fn blocks(group: &[u8], a: &[&[u8]], sums: &[&[i32]], out: &[[f32; ROWS]]) -> usize {
    let blocks = group.len() / (ROWS * 18);
    assert_eq!(group.len(), blocks * ROWS * 18);
    assert!(sums.len() == a.len() && out.len() >= a.len());
    assert!(a.iter().all(|y| y.len() == blocks * 34));
    assert!(sums.iter().all(|s| s.len() == blocks));
    blocks
}

/// How far ahead of its reading a one-token call asks for a group's
/// bytes, where it does (`PF`). The groups of a matrix lie back to back,
/// so past a group's end this asks for the next group's (or nothing: a
/// hint, never a read). On a 2-core Xeon, 0.5B q4_0 decode, interleaved:
/// none 34-37 tok/s, 1 KiB 40-43, 4 KiB 39-51, 8 KiB 47-54, 16 KiB 45-51.
/// On a 2-core AMD EPYC (Zen 4) asking for nothing is faster, on a Zen 5
/// asking is again (see `avx2::Tuning`).
const AHEAD: usize = 8192;

/// Asks for the `len` bytes at `at + AHEAD` of `group` when the call has
/// one token and `PF` (decode streams every group once; a batch reads
/// each group from the cache again for every tile of tokens).
#[inline]
#[target_feature(enable = "sse")]
pub(super) fn ahead<const T: usize, const PF: bool>(group: &[u8], at: usize, len: usize) {
    if T == 1 && PF {
        let p = group.as_ptr().wrapping_add(at + AHEAD);
        for k in (0..len).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(k) as *const i8);
        }
    }
}

/// Each token's `len` activation bytes from `at`, sliced once for an
/// inner loop: indexing `a[t]` there reloaded each token's slice and
/// checked its bounds for every chunk (the 512-bit kernels' prefill on a
/// Zen 5). (Those kernels' float steps are written out in each for a like
/// reason: a helper for them was not inlined, 3.5% of a q5_K_M prefill.)
#[inline]
pub(super) fn slices<'a, const T: usize>(a: &[&'a [u8]], at: usize, len: usize) -> [&'a [u8]; T] {
    let mut ys: [&[u8]; T] = [&[]; T];
    for t in 0..T {
        ys[t] = &a[t][at..at + len];
    }
    ys
}

/// Four bytes of `y` from `at` in every 32-bit lane.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn broadcast4(y: &[u8], at: usize) -> __m256i {
    assert!(at + 4 <= y.len());
    // SAFETY: bytes `at..at + 4` are inside `y` (checked above; the
    // callers' loops keep it true, so the check folds away).
    _mm256_set1_epi32(unsafe { (y.as_ptr().add(at) as *const i32).read_unaligned() })
}

/// The low and high nibbles of the 32 bytes of `group` from `at`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn nibbles(group: &[u8], at: usize) -> (__m256i, __m256i) {
    let packed = load(group, at);
    let low = _mm256_set1_epi8(0x0F);
    let hi = _mm256_srli_epi16::<4>(packed);
    (_mm256_and_si256(packed, low), _mm256_and_si256(hi, low))
}

/// The eight rows' scales of the block at `at`, as f32.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(super) fn scales(group: &[u8], at: usize) -> __m256 {
    _mm256_cvtph_ps(load128(group, at))
}

/// `acc = fma(dx * dy, isum, acc)` for one token's eight outputs, where
/// `isum` is `dp` less `offset` (the weights' offset times the
/// activation block's sum).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn accumulate(acc: __m256, dx: __m256, y: &[u8], dp: __m256i, offset: i32) -> __m256 {
    let isum = _mm256_sub_epi32(dp, _mm256_set1_epi32(offset));
    let dy = _mm256_set1_ps(f16(y, 0));
    _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), _mm256_cvtepi32_ps(isum), acc)
}

/// Writes each token's eight sums.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn store<const T: usize>(acc: [__m256; T], out: &mut [[f32; ROWS]]) {
    for t in 0..T {
        // SAFETY: `out[t]` holds eight f32.
        unsafe { _mm256_storeu_ps(out[t].as_mut_ptr(), acc[t]) };
    }
}

/// The table of iq4_nl's values (`tensor::iq4::IQ4_VALUES`) in both
/// 128-bit halves, each value plus 128 (`UNSIGNED`: the unsigned side of
/// `vpdpbusd`, 1..=241) or as it is.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn iq4_table<const UNSIGNED: bool>() -> __m256i {
    let values = crate::tensor::iq4::IQ4_VALUES.map(|v| if UNSIGNED { v ^ -128 } else { v });
    // SAFETY: `values` holds the 16 bytes loaded.
    let half = unsafe { _mm_loadu_si128(values.as_ptr() as *const __m128i) };
    _mm256_set_m128i(half, half)
}

/// Packed q4_0 rows (or, `NL`, iq4_nl rows: each nibble looked up in the
/// table plus 128, and 128 times the sum taken off) against `T` tokens
/// with `vpdpbusd`.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn q4_0_vnni<const T: usize, const PF: bool, const NL: bool>(
    group: &[u8],
    a: &[&[u8]],
    sums: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    let blocks = blocks(group, a, sums, out);
    assert_eq!(a.len(), T);
    let table = iq4_table::<true>();
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..blocks {
        let at = b * ROWS * 18;
        ahead::<T, PF>(group, at, ROWS * 18);
        let y0 = 34 * b + 2;
        let mut dp = [_mm256_setzero_si256(); T];
        for j in 0..4 {
            let (mut lo, mut hi) = nibbles(group, at + 16 + 32 * j);
            if NL {
                (lo, hi) = (
                    _mm256_shuffle_epi8(table, lo),
                    _mm256_shuffle_epi8(table, hi),
                );
            }
            for t in 0..T {
                dp[t] = _mm256_dpbusd_epi32(dp[t], lo, broadcast4(a[t], y0 + 4 * j));
                dp[t] = _mm256_dpbusd_epi32(dp[t], hi, broadcast4(a[t], y0 + 16 + 4 * j));
            }
        }
        let dx = scales(group, at);
        for t in 0..T {
            let offset = sums[t][b].wrapping_shl(if NL { 7 } else { 3 });
            acc[t] = accumulate(acc[t], dx, &a[t][34 * b..], dp[t], offset);
        }
    }
    store(acc, out)
}

/// Packed q4_0 rows against `T` tokens with AVX2; `NL`: iq4_nl rows,
/// their signed values by the sign trick (`maddubs` of the values'
/// magnitudes and the activations signed by them: at most 2 · 127 · 127
/// a pair, so each goes to 32 bits at once).
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q4_0_avx2<const T: usize, const PF: bool, const NL: bool>(
    group: &[u8],
    a: &[&[u8]],
    sums: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    let blocks = blocks(group, a, sums, out);
    assert_eq!(a.len(), T);
    let ones = _mm256_set1_epi16(1);
    let table = iq4_table::<false>();
    let mut acc = [_mm256_setzero_ps(); T];
    for b in 0..blocks {
        let at = b * ROWS * 18;
        ahead::<T, PF>(group, at, ROWS * 18);
        let y0 = 34 * b + 2;
        let dx = scales(group, at);
        let mut dp = [_mm256_setzero_si256(); T];
        for j in 0..4 {
            let (mut lo, mut hi) = nibbles(group, at + 16 + 32 * j);
            if NL {
                (lo, hi) = (
                    _mm256_shuffle_epi8(table, lo),
                    _mm256_shuffle_epi8(table, hi),
                );
            }
            for t in 0..T {
                let (ylo, yhi) = (
                    broadcast4(a[t], y0 + 4 * j),
                    broadcast4(a[t], y0 + 16 + 4 * j),
                );
                if NL {
                    let l = super::iq4::pair_sums(lo, ylo);
                    let h = super::iq4::pair_sums(hi, yhi);
                    let both =
                        _mm256_add_epi32(_mm256_madd_epi16(l, ones), _mm256_madd_epi16(h, ones));
                    dp[t] = _mm256_add_epi32(dp[t], both);
                } else {
                    let l = _mm256_maddubs_epi16(lo, ylo);
                    let h = _mm256_maddubs_epi16(hi, yhi);
                    dp[t] = _mm256_add_epi16(dp[t], _mm256_add_epi16(l, h));
                }
            }
        }
        for t in 0..T {
            let (dp, offset) = if NL {
                (dp[t], 0)
            } else {
                (_mm256_madd_epi16(dp[t], ones), sums[t][b].wrapping_shl(3))
            };
            acc[t] = accumulate(acc[t], dx, &a[t][34 * b..], dp, offset);
        }
    }
    store(acc, out)
}

/// The 16 bytes of `group` from `at`.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn load128(group: &[u8], at: usize) -> __m128i {
    assert!(at + 16 <= group.len());
    // SAFETY: bytes `at..at + 16` are inside `group` (checked above).
    unsafe { _mm_loadu_si128(group.as_ptr().add(at) as *const __m128i) }
}
