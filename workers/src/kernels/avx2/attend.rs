//! `ops::attend_heads` for AVX2 and FMA: the query heads that share a KV
//! head attend together, up to four at a time, so each key is loaded once
//! for all of them and their chains of additions run side by side (one
//! head alone waited on each addition in turn). Each score is summed in
//! `ops::dot`'s order (a multiply and an add per lane, then ggml's
//! horizontal add, then the tail) and each head's softmax and weighted sum
//! are `ops::weigh` compiled for these features: the portable bits.

// Heads index accumulators, queries and scores together.
#![allow(clippy::needless_range_loop)]

use super::imp::hsum;
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
    out: &mut [f32],
) {
    assert!(hd > 0 && q.len().is_multiple_of(hd) && out.len() == q.len());
    let cache = Cache {
        keys,
        values,
        stride,
        offset,
        len,
    };
    let mut h = 0;
    while h < q.len() / hd {
        let n = (q.len() / hd - h).min(4);
        let (q, out) = (&q[h * hd..(h + n) * hd], &mut out[h * hd..(h + n) * hd]);
        match n {
            1 => heads::<1>(q, hd, &cache, scale, out),
            2 => heads::<2>(q, hd, &cache, scale, out),
            3 => heads::<3>(q, hd, &cache, scale, out),
            _ => heads::<4>(q, hd, &cache, scale, out),
        }
        h += n;
    }
}

/// One KV head's view of a block's cache.
struct Cache<'a> {
    keys: &'a [f32],
    values: &'a [f32],
    stride: usize,
    offset: usize,
    len: usize,
}

/// `Q` heads (`q` and `out` hold `Q * hd` values) over the cache.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn heads<const Q: usize>(q: &[f32], hd: usize, c: &Cache, scale: f32, out: &mut [f32]) {
    let whole = hd / 8 * 8;
    let key = |j: usize| &c.keys[j * c.stride + c.offset..j * c.stride + c.offset + hd];
    let mut qs: [&[f32]; Q] = [&[]; Q];
    for h in 0..Q {
        qs[h] = &q[h * hd..(h + 1) * hd];
    }
    let score = |q: &[f32], k: &[f32], acc: __m256| {
        let mut sum = hsum(acc);
        for i in whole..hd {
            sum += q[i] * k[i];
        }
        sum * scale
    };
    // SAFETY (the loads): `i + 8 <= whole <= hd`, the length of every
    // query and key.
    let load = |v: &[f32], i: usize| unsafe { _mm256_loadu_ps(v.as_ptr().add(i)) };
    let mut scores: [Vec<f32>; Q] = std::array::from_fn(|_| Vec::with_capacity(c.len));
    let mut j = 0;
    // Two keys a pass against every head: 2 · Q sums in registers.
    while j + 2 <= c.len {
        let ks = [key(j), key(j + 1)];
        let mut acc = [[_mm256_setzero_ps(); 2]; Q];
        for i in (0..whole).step_by(8) {
            let (k0, k1) = (load(ks[0], i), load(ks[1], i));
            for h in 0..Q {
                let x = load(qs[h], i);
                acc[h][0] = _mm256_add_ps(acc[h][0], _mm256_mul_ps(x, k0));
                acc[h][1] = _mm256_add_ps(acc[h][1], _mm256_mul_ps(x, k1));
            }
        }
        for h in 0..Q {
            scores[h].push(score(qs[h], ks[0], acc[h][0]));
            scores[h].push(score(qs[h], ks[1], acc[h][1]));
        }
        j += 2;
    }
    if j < c.len {
        let k = key(j);
        let mut acc = [_mm256_setzero_ps(); Q];
        for i in (0..whole).step_by(8) {
            let k0 = load(k, i);
            for h in 0..Q {
                acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(load(qs[h], i), k0));
            }
        }
        for h in 0..Q {
            scores[h].push(score(qs[h], k, acc[h]));
        }
    }
    for (h, out) in out.chunks_exact_mut(hd).enumerate() {
        crate::model::ops::weigh(&mut scores[h], c.values, c.stride, c.offset, out);
    }
}
