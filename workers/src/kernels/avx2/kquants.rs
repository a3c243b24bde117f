//! AVX2 dot products for bf16 and the k-quants (q4_K, q5_K, q6_K against
//! q8_K).
//! The integer sums are exact; only the order of the float sums differs
//! from the portable kernels.

use super::imp::{f16, hsum};
use super::ktile::{hsum_i32, load, q8k_sub_sums};
use crate::tensor::blocks::q4k_scale_min;
use std::arch::x86_64::*;

#[target_feature(enable = "avx2,fma")]
pub fn dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len(), a.len());
    let n = w.len() / 2;
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    let widen = |p: *const u8| {
        // SAFETY: callers pass a pointer with 16 readable bytes.
        let h = unsafe { _mm_loadu_si128(p as *const __m128i) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    };
    while i + 8 <= n {
        // SAFETY: bytes 2*i .. 2*i + 16 lie inside both rows.
        let (x, y) = unsafe { (widen(w.as_ptr().add(2 * i)), widen(a.as_ptr().add(2 * i))) };
        acc = _mm256_fmadd_ps(x, y, acc);
        i += 8;
    }
    let mut s = hsum(acc);
    for j in i..n {
        let x = half::bf16::from_le_bytes([w[2 * j], w[2 * j + 1]]).to_f32();
        let y = half::bf16::from_le_bytes([a[2 * j], a[2 * j + 1]]).to_f32();
        s += x * y;
    }
    s
}

#[inline]
fn q8k_scale(y: &[u8]) -> f32 {
    f32::from_le_bytes([y[0], y[1], y[2], y[3]])
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q4k(w: &[u8], a: &[u8]) -> f32 {
    dot_k45::<false>(w, a)
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q5k(w: &[u8], a: &[u8]) -> f32 {
    dot_k45::<true>(w, a)
}

/// q4_K, or q5_K (`FIVE`: 176-byte blocks, the fifth bits at byte 16 and
/// the nibbles at 48), against q8_K.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn dot_k45<const FIVE: bool>(w: &[u8], a: &[u8]) -> f32 {
    let (size, quants) = if FIVE { (176, 48) } else { (144, 16) };
    assert_eq!(w.len() % size, 0);
    assert_eq!(w.len() / size * 292, a.len());
    let mut acc = _mm256_setzero_ps();
    let mut acc_min = 0f32;
    let low = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    for (x, y) in w.chunks_exact(size).zip(a.chunks_exact(292)) {
        let dy = q8k_scale(y);
        let scales = &x[4..16];
        let mut mins = [0u8; 8];
        let mut sumi = _mm256_setzero_si256();
        let mut high = if FIVE {
            load(x, 16)
        } else {
            _mm256_setzero_si256()
        };
        // The next sub-block's fifth bits, as 0 or 16 a byte: bit k of each
        // high byte is sub-block k's, and each call shifts the next one
        // down (a 16-bit shift: what crosses into a byte's top bit is
        // never read).
        let mut fifth = || {
            let h = _mm256_slli_epi16::<4>(_mm256_and_si256(high, one));
            high = _mm256_srli_epi16::<1>(high);
            h
        };
        for j in 0..4 {
            let (sc_l, m_l) = q4k_scale_min(2 * j, scales);
            let (sc_h, m_h) = q4k_scale_min(2 * j + 1, scales);
            (mins[2 * j], mins[2 * j + 1]) = (m_l, m_h);
            let (q, q8l, q8h) = (
                load(x, quants + 32 * j),
                load(y, 4 + 64 * j),
                load(y, 36 + 64 * j),
            );
            let mut ql = _mm256_and_si256(q, low);
            let mut qh = _mm256_and_si256(_mm256_srli_epi16::<4>(q), low);
            if FIVE {
                ql = _mm256_or_si256(ql, fifth());
                qh = _mm256_or_si256(qh, fifth());
            }
            let pl = _mm256_madd_epi16(
                _mm256_set1_epi16(sc_l as i16),
                _mm256_maddubs_epi16(ql, q8l),
            );
            let ph = _mm256_madd_epi16(
                _mm256_set1_epi16(sc_h as i16),
                _mm256_maddubs_epi16(qh, q8h),
            );
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        // The mins against the sub-block sums: an exact integer.
        let mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(i64::from_le_bytes(mins)));
        let summ = hsum_i32(_mm_madd_epi16(mins, q8k_sub_sums(y)));
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(f16(x, 0) * dy),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
        acc_min = if FIVE {
            // Fused, as llama.cpp's build (contracting `summs += dmin *
            // m`) adds q5_K's mins; its q4_K is repacked, and ours packed
            // to match (`x8`), so q4_K keeps the plain steps.
            (-(f16(x, 2) * dy)).mul_add(summ as f32, acc_min)
        } else {
            acc_min - f16(x, 2) * dy * summ as f32
        };
    }
    hsum(acc) + acc_min
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn dot_q6k(w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len() % 210, 0);
    assert_eq!(w.len() / 210 * 292, a.len());
    let mut acc = _mm256_setzero_ps();
    let low = _mm256_set1_epi8(0x0F);
    for (x, y) in w.chunks_exact(210).zip(a.chunks_exact(292)) {
        let dy = q8k_scale(y);
        let sc = &x[192..208];
        let mut sumi = _mm256_setzero_si256();
        for half in 0..2 {
            // SAFETY: ql (64 bytes at 64h), qh (32 at 128 + 32h) inside the
            // 210-byte block; four 32-byte groups at 4 + 128h + 32k inside
            // the 292-byte one.
            let (ql1, ql2, qh, q8) = unsafe {
                let q8 = |k: usize| {
                    _mm256_loadu_si256(y.as_ptr().add(4 + 128 * half + 32 * k) as *const __m256i)
                };
                (
                    _mm256_loadu_si256(x.as_ptr().add(64 * half) as *const __m256i),
                    _mm256_loadu_si256(x.as_ptr().add(64 * half + 32) as *const __m256i),
                    _mm256_loadu_si256(x.as_ptr().add(128 + 32 * half) as *const __m256i),
                    [q8(0), q8(1), q8(2), q8(3)],
                )
            };
            let m3 = _mm256_set1_epi8(3);
            let hi = |shift: i32| -> __m256i {
                let bits = match shift {
                    0 => qh,
                    2 => _mm256_srli_epi16::<2>(qh),
                    4 => _mm256_srli_epi16::<4>(qh),
                    _ => _mm256_srli_epi16::<6>(qh),
                };
                _mm256_slli_epi16::<4>(_mm256_and_si256(bits, m3))
            };
            let q6 = [
                _mm256_or_si256(_mm256_and_si256(ql1, low), hi(0)),
                _mm256_or_si256(_mm256_and_si256(ql2, low), hi(2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql1), low), hi(4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(ql2), low), hi(6)),
            ];
            for k in 0..4 {
                // Unsigned quants 0..64; their offset comes off below.
                let p = _mm256_maddubs_epi16(q6[k], q8[k]);
                let s0 = sc[8 * half + 2 * k] as i8 as i16;
                let s1 = sc[8 * half + 2 * k + 1] as i8 as i16;
                let scale = _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(scale, p));
            }
        }
        let sumi = _mm256_sub_epi32(sumi, q6_offsets(x, y));
        acc = _mm256_fmadd_ps(
            _mm256_set1_ps(f16(x, 208) * dy),
            _mm256_cvtepi32_ps(sumi),
            acc,
        );
    }
    hsum(acc)
}

/// The four 32-value groups (`k`) of 6-bit quants of one half of a q6_K
/// block, as unsigned bytes 0..64.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn q6_group(x: &[u8], half: usize, k: usize) -> __m256i {
    let low = _mm256_set1_epi8(0x0F);
    let ql = load(x, 64 * half + 32 * (k % 2));
    let qh = load(x, 128 + 32 * half);
    let (ql, bits) = match k {
        0 => (ql, qh),
        1 => (ql, _mm256_srli_epi16::<2>(qh)),
        2 => (_mm256_srli_epi16::<4>(ql), _mm256_srli_epi16::<4>(qh)),
        _ => (_mm256_srli_epi16::<4>(ql), _mm256_srli_epi16::<6>(qh)),
    };
    let hi = _mm256_slli_epi16::<4>(_mm256_and_si256(bits, _mm256_set1_epi8(3)));
    _mm256_or_si256(_mm256_and_si256(ql, low), hi)
}

/// The offset of q6_K's unsigned quants (32) against a q8_K block, as
/// llama.cpp takes it off: lane `m` holds 32 (s[2m] S[2m] + s[2m+1]
/// S[2m+1]) for the weight block's 16 scales `s` and the activation
/// block's 16-value sums `S`. The lanes' integers, not only their total,
/// are llama.cpp's, so their float sums round alike.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) fn q6_offsets(x: &[u8], y: &[u8]) -> __m256i {
    assert!(x.len() >= 208);
    // SAFETY: 16 bytes at 192 of a block of at least 208 (checked above).
    let scales = unsafe { _mm_loadu_si128(x.as_ptr().add(192) as *const __m128i) };
    _mm256_slli_epi32::<5>(_mm256_madd_epi16(
        load(y, 260),
        _mm256_cvtepi8_epi16(scales),
    ))
}
