//! `ops::attend_heads` for AVX2 and FMA, the same operations in the same
//! order as the portable copy (llama.cpp's AVX-512 order): a score's 64
//! lanes are eight registers, and each lane of a value's sum is a chain
//! over its positions kept in registers, 64 values of the head at a time.

use super::imp::hsum;
use crate::model::ops;
use std::arch::x86_64::*;

/// `heads = q.len() / hd` query heads attending to `len` cached positions
/// (see `ops::attend_heads`).
#[allow(clippy::too_many_arguments)] // `ops::attend_heads`'
#[target_feature(enable = "avx2,fma")]
pub fn attend_heads(
    q: &[f32],
    hd: usize,
    keys: &[f32],
    values: &[f32],
    stride: usize,
    offset: usize,
    len: usize,
    scale: f32,
    batch: bool,
    out: &mut [f32],
) {
    assert!(hd > 0 && out.len() == q.len() && q.len().is_multiple_of(hd));
    let end = len.checked_sub(1).map(|j| j.checked_mul(stride));
    let end = end.map(|at| at.and_then(|at| at.checked_add(offset + hd)));
    assert!(end.is_none_or(|end| end.is_some_and(|end| end <= keys.len())));
    let mut lanes = Vec::new();
    let mut scores = Vec::with_capacity(len);
    for (q, out) in q.chunks_exact(hd).zip(out.chunks_exact_mut(hd)) {
        scores.clear();
        for j in 0..len {
            scores.push(dot(&keys[j * stride + offset..j * stride + offset + hd], q) * scale);
        }
        ops::softmax(&mut scores);
        weigh(&scores, values, stride, offset, batch, &mut lanes, out);
    }
}

/// `ops::dot`: whole groups of 64 in eight registers (two a 16-lane
/// accumulator), `ops::reduce64` as two register additions and `hsum`
/// (which sums 8 lanes as `reduce16` sums its last three steps), then the
/// rest one by one.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let whole = a.len() / 64 * 64;
    let mut acc = [_mm256_setzero_ps(); 8];
    for i in (0..whole).step_by(64) {
        for (r, acc) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8r + 8 <= whole <= the length of both.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(a.as_ptr().add(i + 8 * r)),
                    _mm256_loadu_ps(b.as_ptr().add(i + 8 * r)),
                )
            };
            *acc = _mm256_fmadd_ps(x, y, *acc);
        }
    }
    // Accumulator j's lanes 0-7 are register 2j, its lanes 8-15 2j + 1.
    let half = |h: usize| {
        _mm256_add_ps(
            _mm256_add_ps(acc[h], acc[4 + h]),
            _mm256_add_ps(acc[2 + h], acc[6 + h]),
        )
    };
    let mut sum = hsum(_mm256_add_ps(half(1), half(0)));
    for i in whole..a.len() {
        sum += a[i] * b[i];
    }
    sum
}

/// `ops::weigh` after the softmax: lane `k` of a value's sum is the fused
/// chain over positions `k, k + slots, ...`, kept in registers for 64
/// values of the head at a time, stored as row `k` of `lanes`, then the
/// rows summed as `ops::weigh` sums them.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn weigh(
    p: &[f32],
    values: &[f32],
    stride: usize,
    offset: usize,
    batch: bool,
    lanes: &mut Vec<f32>,
    out: &mut [f32],
) {
    let w = out.len();
    let last = p.len().checked_sub(1).map(|j| j.checked_mul(stride));
    let end = last.map(|at| at.and_then(|at| at.checked_add(offset + w)));
    assert!(end.is_none_or(|end| end.is_some_and(|end| end <= values.len())));
    let slots = if batch { 16 } else { 64 };
    lanes.clear();
    lanes.resize(slots * w, 0.0);
    let whole = w / 64 * 64;
    for k in 0..slots.min(p.len()) {
        let lane = &mut lanes[k * w..(k + 1) * w];
        for d in (0..whole).step_by(64) {
            let mut acc = [_mm256_setzero_ps(); 8];
            for j in (k..p.len()).step_by(slots) {
                let at = j * stride + offset + d;
                let pj = _mm256_set1_ps(p[j]);
                for (r, acc) in acc.iter_mut().enumerate() {
                    // SAFETY: at + 8r + 8 <= j * stride + offset + w, within
                    // `values` (checked above for the last position).
                    let v = unsafe { _mm256_loadu_ps(values.as_ptr().add(at + 8 * r)) };
                    *acc = _mm256_fmadd_ps(v, pj, *acc);
                }
            }
            for (r, acc) in acc.iter().enumerate() {
                // SAFETY: d + 8r + 8 <= whole <= w, the lane's length.
                unsafe { _mm256_storeu_ps(lane.as_mut_ptr().add(d + 8 * r), *acc) };
            }
        }
        for d in whole..w {
            let mut acc = 0f32;
            for j in (k..p.len()).step_by(slots) {
                acc = values[j * stride + offset + d].mul_add(p[j], acc);
            }
            lane[d] = acc;
        }
    }
    ops::reduce_lanes(lanes, w, batch);
    out.copy_from_slice(&lanes[..w]);
}
