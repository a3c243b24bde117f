//! AVX2 + FMA + F16C dot products, chosen at run time when the processor
//! has all three. Each is tested against its portable twin in `scalar`.
//!
//! `unsafe` here is only the intrinsics and their loads: every load reads a
//! whole block inside slices whose lengths are checked before the loop.

use super::Kernels;
#[cfg(target_arch = "x86_64")]
use super::{Tile, TileFn, Unpacked, X8Fn, pairs};

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
            Tuning::Zen5 => "avx2+avx-vnni, zen 5",
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
            kernels.x16_iq4nl = Some(x16_iq4nl_vnni);
            kernels.x16_iq4xs = Some(x16_iq4xs_vnni);
            kernels.x16_q5k = Some(x16_q5k_vnni);
            kernels.x16_q3k = Some(x16_q3k_vnni);
            kernels.x16_q2k = Some(x16_q2k_vnni);
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
/// 155-160), 4 x 8 160; the 256-bit tile of 4 x 3 took 78-120.
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
            let (q5k, next_q5k, q5k_bytes): (TileFn, TileFn, TileFn) = if vnni {
                (vnni_q5k, vnni_next_q5k, vnni_q5k_bytes)
            } else {
                (tile_q5k, next_q5k, tile_q5k_bytes)
            };
            let name = match (vnni, tuning) {
                (true, Tuning::Amd) => "avx2+vnni, amd",
                (true, Tuning::Zen5) => "avx2+vnni, zen 5",
                (true, Tuning::Other) => "avx2+vnni",
                (false, Tuning::Amd) => "avx2, amd",
                (false, Tuning::Zen5) => "avx2, zen 5",
                (false, Tuning::Other) => "avx2",
            };
            let (next_q4k, next_q6k): (TileFn, TileFn) = if vnni {
                (vnni_next_q4k, vnni_next_q6k)
            } else {
                (next_q4k, next_q6k)
            };
            let (x8_q5k, x8_q5k_flat): (X8Fn, X8Fn) = if vnni {
                (x8_q5k_vnni, flat_q5k_vnni)
            } else {
                (x8_q5k_avx2, flat_q5k_avx2)
            };
            let (x8_q3k, x8_q2k): (X8Fn, X8Fn) = match (vnni, tuning.prefetch()) {
                (true, true) => (x8_q3k_vnni, x8_q2k_vnni),
                (true, false) => (flat_q3k_vnni, flat_q2k_vnni),
                (false, true) => (x8_q3k_avx2, x8_q2k_avx2),
                (false, false) => (flat_q3k_avx2, flat_q2k_avx2),
            };
            let x8_q5k = if tuning.prefetch() {
                x8_q5k
            } else {
                x8_q5k_flat
            };
            let (x8_q4_0, x8_q4k, x8_iq4nl, x8_iq4xs): (X8Fn, X8Fn, X8Fn, X8Fn) =
                match (vnni, tuning.prefetch()) {
                    (true, true) => (x8_q4_0_vnni, x8_q4k_vnni, x8_iq4nl_vnni, x8_iq4xs_vnni),
                    (true, false) => (
                        flat_q4_0_vnni,
                        flat_q4k_vnni,
                        flat_iq4nl_vnni,
                        flat_iq4xs_vnni,
                    ),
                    (false, true) => (x8_q4_0_avx2, x8_q4k_avx2, x8_iq4nl_avx2, x8_iq4xs_avx2),
                    (false, false) => (
                        flat_q4_0_avx2,
                        flat_q4k_avx2,
                        flat_iq4nl_avx2,
                        flat_iq4xs_avx2,
                    ),
                };
            return Some(Kernels {
                name,
                attend: attend_heads,
                swiglu,
                rope,
                f32: dot_f32,
                f16: dot_f16,
                bf16: dot_bf16,
                q8_0: dot_q8_0,
                q4_0: dot_q4_0,
                q5_0: dot_q5_0,
                q4_1: dot_q4_1,
                q5_1: dot_q5_1,
                q2k: dot_q2k,
                q3k: dot_q3k,
                q4k: dot_q4k,
                q5k: dot_q5k,
                q6k: dot_q6k,
                iq4nl: dot_iq4nl,
                iq4xs: dot_iq4xs,
                tile_q8_0: Some(tile(Q8_0_ROWS, Q8_0_TOKENS, q8_0)),
                tile_q4_0: Some(tile(Q0_ROWS, Q0_TOKENS, q4_0)),
                tile_f16: Some(Tile {
                    widen_f16: true,
                    ..tile(F16_ROWS, F16_TOKENS, tile_f16)
                }),
                // q5_0 only where VNNI's `vpdpbusd` takes its unsigned
                // quants; the one-row kernel elsewhere.
                tile_q5_0: vnni.then(|| tile(Q0_ROWS, Q0_TOKENS, vnni_q5_0)),
                decode_q5_0: vnni.then(|| tile(Q0_DECODE_ROWS, 1, vnni_q5_0)),
                // q4_1 and q5_1 likewise.
                tile_q4_1: vnni.then(|| tile(Q0_ROWS, Q0_TOKENS, vnni_q4_1)),
                decode_q4_1: vnni.then(|| tile(Q0_DECODE_ROWS, 1, vnni_q4_1)),
                tile_q5_1: vnni.then(|| tile(Q0_ROWS, Q0_TOKENS, vnni_q5_1)),
                decode_q5_1: vnni.then(|| tile(Q0_DECODE_ROWS, 1, vnni_q5_1)),
                tile_q4k: Some(tile(K_ROWS, K_TOKENS, q4k)),
                tile_q5k: Some(tile(K_ROWS, K_TOKENS, q5k)),
                unpacked_q5k: Some(Unpacked {
                    tile: tile(K_ROWS, K_TOKENS, q5k_bytes),
                    unpack: unpack_q5k,
                    block_bytes: q5::UNPACKED_Q5K_BLOCK,
                }),
                tile_q6k: Some(tile(K_ROWS, K_TOKENS, q6k)),
                tile_q3k: Some(tile(K_ROWS, K_TOKENS, tile_q3k)),
                decode_q3k: Some(tile(K_ROWS, 1, next_q3k)),
                tile_q2k: Some(tile(K_ROWS, K_TOKENS, tile_q2k)),
                decode_q2k: Some(tile(K_ROWS, 1, next_q2k)),
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
                decode_q5k: Some(tile(K_ROWS, 1, next_q5k)),
                decode_q6k: Some(tile(K_ROWS, 1, next_q6k)),
                x8_q4_0,
                x8_q4k,
                x8_iq4nl,
                x8_iq4xs,
                x8_q5k,
                x8_q3k,
                x8_q2k,
                x16_q4_0: None,
                x16_q4k: None,
                x16_iq4nl: None,
                x16_iq4xs: None,
                x16_q5k: None,
                x16_q3k: None,
                x16_q2k: None,
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
mod imp;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod attend;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod kquants;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod k23;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod q5;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod iq4;

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
#[allow(unsafe_code)]
mod x8k;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x8k23;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x16k23;

#[cfg(target_arch = "x86_64")]
use ktile::{K_ROWS, K_TOKENS};
#[cfg(target_arch = "x86_64")]
use tile::{F16_ROWS, F16_TOKENS, Q0_ROWS, Q0_TOKENS, Q8_0_ROWS, Q8_0_TOKENS};

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
