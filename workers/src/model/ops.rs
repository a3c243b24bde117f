//! The element-wise parts of a transformer block, computed as ggml's CPU
//! backend computes them (sums of squares and softmax denominators in f64),
//! so that results stay within rounding of llama.cpp's.

use super::config::RopeLayout;

/// `out = x / rms(x) * weight`, per row of `weight.len()` values.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let n = weight.len();
    for (row, o) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let sum: f64 = row.iter().map(|&v| (v * v) as f64).sum();
        let mean = (sum / n as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for ((o, &v), &w) in o.iter_mut().zip(row).zip(weight) {
            *o = v * scale * w;
        }
    }
}

/// Adds `bias` to each row of `x`.
pub fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}

/// Rotates the first `dims` dimensions of each `head_dim` head of `x` (one
/// token's heads, back to back) for position `pos`. The angle steps by
/// multiplication, as ggml's rope does, not by a fresh `powf` per pair.
/// The rotation is GCC's contraction of ggml's `x0*cos - x1*sin` and
/// `x0*sin + x1*cos`: the first product of each fused, the second rounded.
/// Inlined into the kernels' copies as [`swiglu`] is (`Kernels::rope`),
/// where each `mul_add` is one instruction rather than a call.
#[inline(always)]
pub fn rope(
    x: &mut [f32],
    head_dim: usize,
    dims: usize,
    base: f32,
    layout: RopeLayout,
    pos: usize,
) {
    let theta_scale = base.powf(-2.0 / dims as f32);
    let mut cache = Vec::with_capacity(dims / 2);
    let mut theta = pos as f32;
    for _ in 0..dims / 2 {
        cache.push((theta.cos(), theta.sin()));
        theta *= theta_scale;
    }
    for head in x.chunks_exact_mut(head_dim) {
        for (i, &(cos, sin)) in cache.iter().enumerate() {
            let (a, b) = match layout {
                RopeLayout::Adjacent => (2 * i, 2 * i + 1),
                RopeLayout::Neox => (i, i + dims / 2),
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0.mul_add(cos, -(x1 * sin));
            head[b] = x0.mul_add(sin, x1 * cos);
        }
    }
}

/// `exp(x)` as ggml's 16-wide AVX-512 `ggml_v_expf` computes it, lane by
/// lane (Arm's optimized-routines approximation: a degree-5 polynomial
/// after a reduction by ln 2, the constant term inside the polynomial and
/// `scalef` for the power of two).
#[inline(always)]
pub fn v_expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // log2(e)
    let n = z - r;
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),
        (-n).mul_add(f32::from_bits(0x3f31_7200), x),
    );
    if n.abs() > 192.0 {
        return if n <= 0.0 { 0.0 } else { f32::INFINITY };
    }
    let u = b * b;
    let j = f32::from_bits(0x3c07_2010)
        .mul_add(b, f32::from_bits(0x3d2b_9f17))
        .mul_add(
            u,
            f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)),
        )
        .mul_add(u, f32::from_bits(0x3f7f_fff6).mul_add(b, 1.0));
    // `scalef(j, n)`: j · 2^n rounded once (n is whole, |n| <= 192).
    let pow = f64::from_bits(((n as i64 + 1023) as u64) << 52);
    (j as f64 * pow) as f32
}

/// Sums 16 lanes as GCC's `_mm512_reduce_add_ps` does: the halves, then
/// the quarters, then pairs.
#[inline(always)]
fn reduce16(v: &[f32; 16]) -> f32 {
    let a: [f32; 8] = std::array::from_fn(|i| v[i + 8] + v[i]);
    let b: [f32; 4] = std::array::from_fn(|i| a[i + 4] + a[i]);
    (b[0] + b[2]) + (b[1] + b[3])
}

/// Sums four 16-lane accumulators as ggml's `GGML_F32x16_REDUCE` does.
#[inline(always)]
fn reduce64(acc: &[[f32; 16]; 4]) -> f32 {
    let x: [f32; 16] = std::array::from_fn(|l| (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]));
    reduce16(&x)
}

/// Softmax in place as ggml's AVX-512 build computes it over a row padded
/// to whole groups of 16: [`v_expf`] per value, each group's sum (in
/// [`reduce16`]'s order) added to an f64 denominator.
#[inline(always)]
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0f64;
    for group in x.chunks_mut(16) {
        let mut lanes = [0f32; 16];
        for (l, v) in lanes.iter_mut().zip(group.iter_mut()) {
            *v = v_expf(*v - max);
            *l = *v;
        }
        sum += reduce16(&lanes) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// `gate = silu(gate) * up`, as ggml's fused SwiGLU: groups of 16 with
/// [`v_expf`], the rest with `expf`. Inlined into the kernels' copies
/// compiled for wider vectors (`Kernels::swiglu`); no float operation is
/// reordered there, so every copy gives the same bits.
#[inline(always)]
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    let whole = gate.len() / 16 * 16;
    for (g, &u) in gate[..whole].iter_mut().zip(up) {
        *g = *g / (1.0 + v_expf(0.0 - *g)) * u;
    }
    for (g, &u) in gate[whole..].iter_mut().zip(&up[whole..]) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// `a · b` as ggml's AVX-512 `ggml_vec_dot_f32`: whole groups of 64 in
/// four 16-lane accumulators (a fused multiply-add per lane), summed as
/// [`reduce64`], then the rest one by one, not fused (GCC leaves that
/// `sumf += x[i]*y[i]` unfused; the f16 golden tells the two apart).
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let whole = a.len() / 64 * 64;
    let mut acc = [[0f32; 16]; 4];
    for (x, y) in a[..whole].chunks_exact(64).zip(b.chunks_exact(64)) {
        for (j, acc) in acc.iter_mut().enumerate() {
            for (l, acc) in acc.iter_mut().enumerate() {
                *acc = x[16 * j + l].mul_add(y[16 * j + l], *acc);
            }
        }
    }
    let mut sum = reduce64(&acc);
    for (x, y) in a[whole..].iter().zip(&b[whole..]) {
        sum += x * y;
    }
    sum
}

/// One query head `q` attending to `len` cached positions: the keys and
/// values of position `j` are `keys[j * stride + offset..][..q.len()]`
/// (and the same in `values`); the weighted sum of values goes to `out`.
/// `batch`: one of several tokens computed together (see [`weigh`]);
/// `lanes`: scratch, reused from call to call. The portable copy; the
/// AVX2 kernels have their own (`kernels/avx2/attend.rs`), the same bits.
#[allow(clippy::too_many_arguments)] // one head's view of the cache
#[inline(always)]
pub fn attend(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    stride: usize,
    offset: usize,
    len: usize,
    scale: f32,
    batch: bool,
    lanes: &mut Vec<f32>,
    out: &mut [f32],
) {
    let hd = q.len();
    let mut scores = Vec::with_capacity(len);
    for j in 0..len {
        scores.push(dot(&keys[j * stride + offset..j * stride + offset + hd], q) * scale);
    }
    weigh(&mut scores, values, stride, offset, batch, lanes, out);
}

/// [`attend`] for each of the query heads in `q` (`hd` values each, back
/// to back) that share one KV head, the outputs back to back in `out`.
#[allow(clippy::too_many_arguments)] // [`attend`]'s and the head width
#[inline(always)]
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
    let mut lanes = Vec::new();
    for (q, out) in q.chunks_exact(hd).zip(out.chunks_exact_mut(hd)) {
        attend(
            q, keys, values, stride, offset, len, scale, batch, &mut lanes, out,
        );
    }
}

/// Tokens llama.cpp computes together (its default `n_ubatch`): a longer
/// batch goes as pieces of this many, and a piece of one token is summed
/// as one token alone.
const UBATCH: usize = 512;

/// Whether token `t` of `n` computed together is summed in a batch's
/// order (see [`weigh`]): its piece of [`UBATCH`] tokens holds another.
pub fn in_batch(n: usize, t: usize) -> bool {
    let start = t / UBATCH * UBATCH;
    n.min(start + UBATCH) - start > 1
}

/// The rest of [`attend`] once the scaled scores are known: their softmax,
/// then the weighted sum of the values into `out`, each value's sum in
/// llama.cpp's order (its cache holds values transposed, so this sum is a
/// dot product over positions): a batch's, llamafile's `tinyBLAS` on
/// AVX-512, keeps 16 lanes, position `j` fused into lane `j % 16`, summed
/// as [`reduce16`]; one token's, `ggml_vec_dot_f32`, keeps 64 lanes summed
/// as [`reduce64`]. The lanes are rows of `out.len()` values in `lanes`,
/// so every step runs across a whole head.
#[inline(always)]
fn weigh(
    scores: &mut [f32],
    values: &[f32],
    stride: usize,
    offset: usize,
    batch: bool,
    lanes: &mut Vec<f32>,
    out: &mut [f32],
) {
    softmax(scores);
    let w = out.len();
    let slots = if batch { 16 } else { 64 };
    lanes.clear();
    lanes.resize(slots * w, 0.0);
    for (j, &p) in scores.iter().enumerate() {
        let lane = &mut lanes[(j % slots) * w..(j % slots + 1) * w];
        let v = &values[j * stride + offset..j * stride + offset + w];
        for (l, &v) in lane.iter_mut().zip(v) {
            *l = v.mul_add(p, *l);
        }
    }
    reduce_lanes(lanes, w, batch);
    out.copy_from_slice(&lanes[..w]);
}

/// [`weigh`]'s lanes (rows of `w` values, 16 for a batch, 64 for one
/// token) summed into the first row: [`reduce64`]'s first steps, then
/// [`reduce16`]'s, lane by lane, a whole row a step.
#[inline(always)]
pub fn reduce_lanes(lanes: &mut [f32], w: usize, batch: bool) {
    let row = |k: usize| k * w..(k + 1) * w;
    if !batch {
        // GGML_F32x16_REDUCE: accumulators 0 + 2 and 1 + 3, then their
        // sum, into the first 16 rows.
        for k in 0..16 {
            for d in 0..w {
                lanes[k * w + d] = (lanes[k * w + d] + lanes[(32 + k) * w + d])
                    + (lanes[(16 + k) * w + d] + lanes[(48 + k) * w + d]);
            }
        }
    }
    for half in [8, 4, 2, 1] {
        for k in 0..half {
            let (to, from) = lanes.split_at_mut(row(k + half).start);
            for (a, &b) in to[row(k)].iter_mut().zip(&from[..w]) {
                *a += b;
            }
        }
    }
}

/// `x += y`.
pub fn add(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;

    /// Value `d`'s sum as llama.cpp forms it, one value at a time: lane
    /// `k`'s fused chain over positions `k, k + slots, ...`, the lanes
    /// summed as the 512-bit reductions sum them.
    fn value_sum(p: &[f32], v: impl Fn(usize) -> f32, slots: usize) -> f32 {
        let lane = |k: usize| {
            (k..p.len())
                .step_by(slots)
                .fold(0f32, |acc, j| v(j).mul_add(p[j], acc))
        };
        if slots == 16 {
            reduce16(&std::array::from_fn(lane))
        } else {
            reduce64(&std::array::from_fn(|a| {
                std::array::from_fn(|l| lane(16 * a + l))
            }))
        }
    }

    #[test]
    fn weighing_sums_each_value_in_llama_cpps_lanes() {
        let mut rng = SplitMix64::new(9);
        // Heads narrower than 64 values and wider; fewer positions than
        // 16 lanes, between 16 and 64, and more than 64.
        for (hd, stride, offset) in [(24, 72, 24), (128, 512, 256), (130, 400, 7)] {
            for len in [1, 2, 7, 17, 64, 150] {
                let values: Vec<f32> = (0..len * stride + offset + hd)
                    .map(|_| rng.symmetric(1.0))
                    .collect();
                let scores: Vec<f32> = (0..len).map(|_| rng.symmetric(3.0)).collect();
                let mut p = scores.clone();
                softmax(&mut p);
                for batch in [false, true] {
                    let mut got = vec![0f32; hd];
                    let mut lanes = Vec::new();
                    let mut s = scores.clone();
                    weigh(&mut s, &values, stride, offset, batch, &mut lanes, &mut got);
                    for (d, got) in got.iter().enumerate() {
                        let v = |j: usize| values[j * stride + offset + d];
                        let want = value_sum(&p, v, if batch { 16 } else { 64 });
                        assert_eq!(got.to_bits(), want.to_bits(), "hd {hd} len {len} value {d}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_token_is_summed_as_one_alone_only_in_a_piece_of_its_own() {
        assert!(!in_batch(1, 0));
        assert!(in_batch(2, 0) && in_batch(2, 1));
        assert!((0..512).all(|t| in_batch(512, t)));
        // 513: a piece of 512, then the last token alone.
        assert!((0..512).all(|t| in_batch(513, t)));
        assert!(!in_batch(513, 512));
        assert!(in_batch(514, 512) && in_batch(514, 513));
        assert!(!in_batch(1025, 1024) && in_batch(1025, 1023));
    }

    #[test]
    fn a_score_sums_whole_groups_of_64_in_16_lane_accumulators_then_the_rest() {
        let mut rng = SplitMix64::new(4);
        for n in [1, 32, 63, 64, 65, 128, 200] {
            let a: Vec<f32> = (0..n).map(|_| rng.symmetric(2.0)).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.symmetric(2.0)).collect();
            let whole = n / 64 * 64;
            let lane = |k: usize| {
                (k..whole)
                    .step_by(64)
                    .fold(0f32, |acc, i| a[i].mul_add(b[i], acc))
            };
            let acc = std::array::from_fn(|j| std::array::from_fn(|l| lane(16 * j + l)));
            let want = (whole..n).fold(reduce64(&acc), |s, i| s + a[i] * b[i]);
            assert_eq!(dot(&a, &b).to_bits(), want.to_bits(), "n {n}");
        }
    }

    #[test]
    fn v_expf_is_within_two_ulps_of_expf_and_flushes_as_ggml_does() {
        let mut x = -103.0f32;
        while x < 88.0 {
            let (got, want) = (v_expf(x), x.exp());
            let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(
                ulps <= 2 || want < f32::MIN_POSITIVE,
                "v_expf({x}) = {got}, expf {want}"
            );
            x += 0.0137;
        }
        assert_eq!(v_expf(f32::NEG_INFINITY), 0.0);
        assert_eq!(v_expf(-200.0), 0.0);
        assert_eq!(v_expf(200.0), f32::INFINITY);
        assert_eq!(v_expf(0.0), 1.0);
    }
}
