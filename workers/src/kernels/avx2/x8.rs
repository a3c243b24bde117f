//! The packed q4_0, iq4_nl and q4_K kernels (layout and order: `kernels::x8`):
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
//! ahead of its reading ([`AHEAD`]; the maker's choice, `avx2::Tuning`).

// Tokens index accumulators and activation rows together.
#![allow(clippy::needless_range_loop)]

use super::imp::f16;
use super::ktile::load;
use crate::kernels::x8::{Q4K_GROUP_BLOCK, ROWS};
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
/// On a 2-core AMD EPYC (Zen 4) asking for nothing is faster (see
/// `avx2::Tuning`).
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
fn load128(group: &[u8], at: usize) -> __m128i {
    assert!(at + 16 <= group.len());
    // SAFETY: bytes `at..at + 16` are inside `group` (checked above).
    unsafe { _mm_loadu_si128(group.as_ptr().add(at) as *const __m128i) }
}

/// The 8 bytes of `group` from `at`, each widened to an i32 lane.
#[inline]
#[target_feature(enable = "avx2")]
fn bytes_to_i32(group: &[u8], at: usize) -> __m256i {
    assert!(at + 8 <= group.len());
    // SAFETY: bytes `at..at + 8` are inside `group` (checked above).
    let v = unsafe { _mm_loadl_epi64(group.as_ptr().add(at) as *const __m128i) };
    _mm256_cvtepu8_epi32(v)
}

/// One packed q4_K block (at `at`) of eight rows against `T` q8_K
/// activation blocks (`b`-th of each token), `pair_sums(chunks, p)`
/// summing sub-blocks `2p` and `2p + 1` (the low and high nibbles of the
/// pair's chunks at `chunks`) of each row into its lane: adds the float
/// steps to `acc` and `macc`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)] // one block's view of a call
fn q4k_block<const T: usize>(
    group: &[u8],
    at: usize,
    a: &[&[u8]],
    b: usize,
    acc: &mut [__m256; T],
    macc: &mut [__m256; T],
    pair_sums: impl Fn(usize, usize) -> [[__m256i; T]; 2],
) {
    let mut isum = [_mm256_setzero_si256(); T];
    for p in 0..4 {
        let sums = pair_sums(at + 160 + 256 * p, p);
        for (k, sums) in sums.iter().enumerate() {
            let scales = bytes_to_i32(group, at + 32 + 8 * (2 * p + k));
            for t in 0..T {
                isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(sums[t], scales));
            }
        }
    }
    let mut msum = [_mm256_setzero_si256(); T];
    for t in 0..T {
        let y = &a[t][292 * b..292 * (b + 1)];
        let mut pairs = [0i32; 4];
        // SAFETY: `pairs` holds the 16 bytes stored.
        unsafe {
            _mm_storeu_si128(
                pairs.as_mut_ptr() as *mut __m128i,
                super::ktile::q8k_sub_sums(y),
            )
        };
        for (p, &pair) in pairs.iter().enumerate() {
            let mins = _mm256_cvtepu8_epi16(load128(group, at + 96 + 16 * p));
            let m = _mm256_madd_epi16(mins, _mm256_set1_epi32(pair));
            msum[t] = _mm256_add_epi32(msum[t], m);
        }
    }
    let dx = scales(group, at);
    let mx = scales(group, at + 16);
    for t in 0..T {
        let y = &a[t][292 * b..];
        let dy = _mm256_set1_ps(f32::from_le_bytes([y[0], y[1], y[2], y[3]]));
        acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dx, dy), _mm256_cvtepi32_ps(isum[t]), acc[t]);
        macc[t] = _mm256_fmadd_ps(_mm256_mul_ps(mx, dy), _mm256_cvtepi32_ps(msum[t]), macc[t]);
    }
}

/// Packed q4_K rows against `T` tokens with `vpdpbusd`.
#[target_feature(enable = "avx2,fma,f16c,avx512vnni,avx512vl")]
pub fn q4k_vnni<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    let blocks = q4k_blocks(g, a, out);
    let (mut acc, mut macc) = ([_mm256_setzero_ps(); T], [_mm256_setzero_ps(); T]);
    for b in 0..blocks {
        let at = b * Q4K_GROUP_BLOCK;
        ahead::<T, PF>(g, at, Q4K_GROUP_BLOCK);
        // The low nibbles of a pair's chunks against its first 32
        // activation bytes, the high ones against the next 32.
        let pair_sums = |chunks: usize, p: usize| {
            let mut dp = [[_mm256_setzero_si256(); T]; 2];
            for c in 0..8 {
                let (lo, hi) = nibbles(g, chunks + 32 * c);
                for t in 0..T {
                    let y = 292 * b + 4 + 64 * p + 4 * c;
                    dp[0][t] = _mm256_dpbusd_epi32(dp[0][t], lo, broadcast4(a[t], y));
                    dp[1][t] = _mm256_dpbusd_epi32(dp[1][t], hi, broadcast4(a[t], y + 32));
                }
            }
            dp
        };
        q4k_block(g, at, a, b, &mut acc, &mut macc, pair_sums);
    }
    q4k_store(acc, macc, out)
}

/// Packed q4_K rows against `T` tokens with AVX2: `maddubs` pairs summed
/// in 16 bits over the sub-block (at most 8 · 2 · 15 · 127), then `madd`.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn q4k_avx2<const T: usize, const PF: bool>(
    g: &[u8],
    a: &[&[u8]],
    _s: &[&[i32]],
    out: &mut [[f32; ROWS]],
) {
    let blocks = q4k_blocks(g, a, out);
    let ones = _mm256_set1_epi16(1);
    let (mut acc, mut macc) = ([_mm256_setzero_ps(); T], [_mm256_setzero_ps(); T]);
    for b in 0..blocks {
        let at = b * Q4K_GROUP_BLOCK;
        ahead::<T, PF>(g, at, Q4K_GROUP_BLOCK);
        let pair_sums = |chunks: usize, p: usize| {
            let mut ys: [&[u8]; T] = [&[]; T];
            for t in 0..T {
                ys[t] = &a[t][292 * b + 4 + 64 * p..292 * b + 68 + 64 * p];
            }
            let mut dp = q4k_pair_avx2::<T>(&g[chunks..chunks + 256], &ys);
            for d in dp.iter_mut().flatten() {
                *d = _mm256_madd_epi16(*d, ones);
            }
            dp
        };
        q4k_block(g, at, a, b, &mut acc, &mut macc, pair_sums);
    }
    q4k_store(acc, macc, out)
}

/// One pair of sub-blocks of a packed q4_K block (its eight chunks,
/// `chunks`) against each token's 64 activation bytes of the pair (`ys`):
/// the low nibbles against the first 32, the high ones against the next
/// 32, in 16-bit sums. Apart from [`q4k_avx2`] (not inlined) its sums
/// stay in registers; inlined, they went through the stack every chunk.
#[inline(never)]
#[target_feature(enable = "avx2")]
fn q4k_pair_avx2<const T: usize>(chunks: &[u8], ys: &[&[u8]; T]) -> [[__m256i; T]; 2] {
    assert!(chunks.len() == 256 && ys.iter().all(|y| y.len() == 64));
    let mut dp = [[_mm256_setzero_si256(); T]; 2];
    for c in 0..8 {
        let (lo, hi) = nibbles(chunks, 32 * c);
        for t in 0..T {
            let l = _mm256_maddubs_epi16(lo, broadcast4(ys[t], 4 * c));
            let h = _mm256_maddubs_epi16(hi, broadcast4(ys[t], 32 + 4 * c));
            dp[0][t] = _mm256_add_epi16(dp[0][t], l);
            dp[1][t] = _mm256_add_epi16(dp[1][t], h);
        }
    }
    dp
}

/// Checks a q4_K call's shapes and returns its number of blocks.
fn q4k_blocks(group: &[u8], a: &[&[u8]], out: &[[f32; ROWS]]) -> usize {
    let blocks = group.len() / Q4K_GROUP_BLOCK;
    assert_eq!(group.len(), blocks * Q4K_GROUP_BLOCK);
    assert!(out.len() >= a.len());
    assert!(a.iter().all(|y| y.len() == blocks * 292));
    blocks
}

/// Writes each token's eight outputs, `acc - macc`.
#[inline]
#[target_feature(enable = "avx2")]
fn q4k_store<const T: usize>(acc: [__m256; T], macc: [__m256; T], out: &mut [[f32; ROWS]]) {
    let mut diff = [_mm256_setzero_ps(); T];
    for t in 0..T {
        diff[t] = _mm256_sub_ps(acc[t], macc[t]);
    }
    store(diff, out)
}
