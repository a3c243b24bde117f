//! AVX2 + FMA + F16C dot products, chosen at run time when the processor
//! has all three. Each is tested against its portable twin in `scalar`.
//!
//! `unsafe` here is only the intrinsics and their loads: every load reads a
//! whole block inside slices whose lengths are checked before the loop.

use super::Kernels;
#[cfg(target_arch = "x86_64")]
use super::{Tile, TileFn, X8Fn, pairs};

mod tuning;
pub use tuning::Tuning;

#[cfg(target_arch = "x86_64")]
fn tile(rows: usize, tokens: usize, f: TileFn) -> Tile {
    Tile {
        rows,
        tokens,
        widen_f16: false,
        f,
    }
}

/// The AVX2 kernels, if this processor runs them, tuned for its maker:
/// with AVX-VNNI's q8_0 tile where the processor has it.
pub fn kernels() -> Option<Kernels> {
    let tuning = Tuning::detect();
    kernels_avx_vnni_for(tuning).or_else(|| kernels_for(tuning))
}

/// The AVX2 kernels with `tuning`'s choices and q8_0 batches on AVX-VNNI's
/// `vpdpbusd` (`vnni::q8_0_avx_vnni`), if this processor runs them: for a
/// processor with AVX-VNNI and without AVX-512 (Intel's client processors
/// since Alder Lake), where q8_0's tile would otherwise take three
/// instructions for each of its integer sums.
pub fn kernels_avx_vnni_for(tuning: Tuning) -> Option<Kernels> {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = tuning;
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avxvnni") {
        let mut kernels = build(false, tuning)?;
        kernels.name = match tuning {
            Tuning::Amd => "avx2+avx-vnni, amd",
            Tuning::Other => "avx2+avx-vnni",
        };
        kernels.tile_q8_0 = Some(tile(Q0_ROWS, Q0_TOKENS, avx_vnni_q8_0));
        return Some(kernels);
    }
    None
}

/// The AVX2 kernels with `tuning`'s choices, if this processor runs them.
pub fn kernels_for(tuning: Tuning) -> Option<Kernels> {
    build(false, tuning)
}

/// The AVX2 kernels with AVX-512 VNNI tiles for q8_0, q4_0 and the
/// k-quants, if this processor runs them, tuned for its maker.
pub fn kernels_vnni() -> Option<Kernels> {
    kernels_vnni_for(Tuning::detect())
}

/// [`kernels_vnni`] with `tuning`'s choices.
pub fn kernels_vnni_for(tuning: Tuning) -> Option<Kernels> {
    #[cfg(not(target_arch = "x86_64"))]
    let _ = tuning;
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl") {
        let mut kernels = build(true, tuning)?;
        // 512-bit decode kernels where AVX-512 F and BW are there too
        // (every processor with VNNI so far; the 256-bit tiles otherwise).
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
            kernels.decode_q8_0 = Some(decode_tile(gemv_q8_0));
            kernels.decode_q4_0 = Some(decode_tile(gemv_q4_0));
            kernels.tile_q8_0 = Some(tile(WIDE_Q8_0_ROWS, WIDE_Q8_0_TOKENS, wide_q8_0));
            if tuning.f16_pairs() {
                // Two pairs by four tokens a batch tile; one token takes
                // one pair a call (see `matmul`).
                kernels.pair_f16 = Some(Tile {
                    widen_f16: true,
                    ..tile(2 * pairs::ROWS, f16x16::TOKENS, wide_pair_f16)
                });
            } else {
                // f16 in 512-bit registers, mapped in place.
                kernels.tile_f16 = Some(Tile {
                    widen_f16: true,
                    ..tile(f16x16::ROWS, f16x16::TOKENS, wide_f16)
                });
                kernels.decode_f16 = Some(Tile {
                    widen_f16: true,
                    ..tile(WIDE_F16_DECODE_ROWS, 1, wide_next_f16)
                });
                kernels.pair_f16 = None;
            }
            kernels.x16_q4_0 = Some(x16_q4_0_vnni);
            kernels.x16_q4k = Some(x16_q4k_vnni);
        }
        return Some(kernels);
    }
    None
}

/// f16 weight rows per decode call, the next call's asked for meanwhile.
/// On a 2-core Zen 4, 0.5B decode after 64 positions, interleaved: one
/// row 28-30 tok/s, two 24-27, three 27; without asking ahead 18-19.
/// (On a Xeon two rows beat three, 20.8 against 20.2; one row asking
/// ahead was not measured there.)
#[cfg(target_arch = "x86_64")]
const F16_DECODE_ROWS: usize = 1;

/// The q8_0 batch tile in 512-bit registers (`vnni::q8_0_wide`, two
/// tokens a register): rows by tokens. On a 2-core Xeon (AVX-512), 0.5B
/// q8_0 prefill of 512 tokens, best of four interleaved runs: 4 x 4
/// 149 tok/s, 6 x 4 155, 4 x 6 167 (spread 125-167), 6 x 6 160 (spread
/// 155-160), 4 x 8 160; the 256-bit tile of 4 x 3 took 100-120.
#[cfg(target_arch = "x86_64")]
const WIDE_Q8_0_ROWS: usize = 6;
#[cfg(target_arch = "x86_64")]
const WIDE_Q8_0_TOKENS: usize = 6;

/// The same for the 512-bit f16 decode. On a 2-core Xeon, 0.5B decode
/// after 8 positions, interleaved: one row 18.1-18.3 tok/s, two 15.9-17.3.
#[cfg(target_arch = "x86_64")]
const WIDE_F16_DECODE_ROWS: usize = 1;

/// q8_0 and q4_0 weight rows per decode call (the 256-bit kernels), the
/// next call's asked for meanwhile. On a 2-core AMD EPYC (Zen 3, AVX2
/// without AVX-512), 0.5B decode after 8 positions against one row a call:
/// q4_0 22 -> 44-59 tok/s, q8_0 21 -> 36-47 (two rows and four within
/// that spread).
#[cfg(target_arch = "x86_64")]
const Q0_DECODE_ROWS: usize = 3;

/// Tokens per call of the f16 pair tile (`kernels::pairs`): two rows
/// by three tokens keeps its twelve sums in AVX2's sixteen registers.
#[cfg(target_arch = "x86_64")]
const F16_PAIR_TOKENS: usize = 3;

/// A one-token tile of `gemv::ROWS` rows.
#[cfg(target_arch = "x86_64")]
fn decode_tile(f: TileFn) -> Tile {
    tile(gemv::ROWS, 1, f)
}

#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
fn build(vnni: bool, tuning: Tuning) -> Option<Kernels> {
    #[cfg(target_arch = "x86_64")]
    {
        let ok = is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c");
        if ok {
            let (q8_0, q4_0, q4k, q6k): (TileFn, TileFn, TileFn, TileFn) = if vnni {
                (vnni_q8_0, vnni_q4_0, vnni_q4k, vnni_q6k)
            } else {
                (tile_q8_0, tile_q4_0, tile_q4k, tile_q6k)
            };
            let name = match (vnni, tuning) {
                (true, Tuning::Amd) => "avx2+vnni, amd",
                (true, Tuning::Other) => "avx2+vnni",
                (false, Tuning::Amd) => "avx2, amd",
                (false, Tuning::Other) => "avx2",
            };
            let (next_q4k, next_q6k): (TileFn, TileFn) = if vnni {
                (vnni_next_q4k, vnni_next_q6k)
            } else {
                (next_q4k, next_q6k)
            };
            let (x8_q4_0, x8_q4k): (X8Fn, X8Fn) = match (vnni, tuning.prefetch()) {
                (true, true) => (x8_q4_0_vnni, x8_q4k_vnni),
                (true, false) => (flat_q4_0_vnni, flat_q4k_vnni),
                (false, true) => (x8_q4_0_avx2, x8_q4k_avx2),
                (false, false) => (flat_q4_0_avx2, flat_q4k_avx2),
            };
            return Some(Kernels {
                name,
                attend: attend_heads,
                swiglu,
                f32: dot_f32,
                f16: dot_f16,
                bf16: dot_bf16,
                q8_0: dot_q8_0,
                q4_0: dot_q4_0,
                q4k: dot_q4k,
                q6k: dot_q6k,
                tile_q8_0: Some(tile(Q0_ROWS, Q0_TOKENS, q8_0)),
                tile_q4_0: Some(tile(Q0_ROWS, Q0_TOKENS, q4_0)),
                tile_f16: Some(Tile {
                    widen_f16: true,
                    ..tile(F16_ROWS, F16_TOKENS, tile_f16)
                }),
                tile_q4k: Some(tile(K_ROWS, K_TOKENS, q4k)),
                tile_q6k: Some(tile(K_ROWS, K_TOKENS, q6k)),
                decode_q8_0: Some(tile(Q0_DECODE_ROWS, 1, next_q8_0)),
                decode_q4_0: Some(tile(Q0_DECODE_ROWS, 1, next_q4_0)),
                // Rows asked for a call ahead (see F16_DECODE_ROWS). On a
                // 2-core Xeon (AVX-512), 0.5B decode after 8 positions:
                // q4_K_M 41 -> 54 tok/s at two rows a call (one row 51,
                // four 49), f16 17.5 -> 20.8 (three rows 20.2).
                decode_f16: Some(Tile {
                    widen_f16: true,
                    ..tile(F16_DECODE_ROWS, 1, next_f16)
                }),
                decode_q4k: Some(tile(K_ROWS, 1, next_q4k)),
                decode_q6k: Some(tile(K_ROWS, 1, next_q6k)),
                x8_q4_0,
                x8_q4k,
                x16_q4_0: None,
                x16_q4k: None,
                pair_f16: Some(Tile {
                    widen_f16: true,
                    ..tile(pairs::ROWS, F16_PAIR_TOKENS, pair_f16)
                }),
                pack: true,
            });
        }
    }
    None
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod imp {
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

    /// `ops::swiglu` compiled for AVX2 and FMA, as `attend::attend_heads`
    /// is `ops::attend_heads`.
    #[target_feature(enable = "avx2,fma")]
    pub fn swiglu(gate: &mut [f32], up: &[f32]) {
        crate::model::ops::swiglu(gate, up)
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
        assert_eq!(w.len() % 18, 0);
        assert_eq!(w.len() / 18 * 34, a.len());
        let mut acc = _mm256_setzero_ps();
        let mask = _mm256_set1_epi8(0x0F);
        let eight = _mm256_set1_epi8(8);
        for (x, y) in w.chunks_exact(18).zip(a.chunks_exact(34)) {
            let d = _mm256_set1_ps(f16(x, 0) * f16(y, 0));
            // SAFETY: the weight block is 18 bytes (load of 2..18) and the
            // activation block 34 (load of 2..34).
            let (nibbles, qy) = unsafe {
                (
                    _mm_loadu_si128(x.as_ptr().add(2) as *const __m128i),
                    _mm256_loadu_si256(y.as_ptr().add(2) as *const __m256i),
                )
            };
            let both = _mm256_set_m128i(_mm_srli_epi16::<4>(nibbles), nibbles);
            let qx = _mm256_sub_epi8(_mm256_and_si256(both, mask), eight);
            acc = _mm256_fmadd_ps(d, mul_sum_i8(qx, qy), acc);
        }
        hsum(acc)
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod attend;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod kquants;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod tile;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod ktile;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod vnni;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod gemv;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x8;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod f16x16;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x16;

#[cfg(target_arch = "x86_64")]
use ktile::{K_ROWS, K_TOKENS};
#[cfg(target_arch = "x86_64")]
use tile::{F16_ROWS, F16_TOKENS, Q0_ROWS, Q0_TOKENS};

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod shapes;
#[cfg(target_arch = "x86_64")]
use shapes::*;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod wrappers;
#[cfg(target_arch = "x86_64")]
use wrappers::*;
