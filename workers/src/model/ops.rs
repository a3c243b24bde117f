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
            head[a] = x0 * cos - x1 * sin;
            head[b] = x0 * sin + x1 * cos;
        }
    }
}

/// `exp(x)` as ggml's 8-wide AVX2 `ggml_v_expf` computes it, lane by lane
/// (Arm's optimized-routines approximation: a degree-5 polynomial after a
/// reduction by ln 2, at most 1.5 ulp from `expf`). llama.cpp's CPU backend
/// computes softmax and SiLU with it; matching it keeps the rounding of
/// every activation that a quantized product then encodes the same.
#[inline(always)]
pub fn v_expf(x: f32) -> f32 {
    let r = f32::from_bits(0x4b40_0000); // 0x1.8p23
    let z = x.mul_add(f32::from_bits(0x3fb8_aa3b), r); // log2(e)
    let n = z - r;
    let b = (-n).mul_add(
        f32::from_bits(0x35bf_be8e),
        (-n).mul_add(f32::from_bits(0x3f31_7200), x),
    );
    let e = z.to_bits().wrapping_shl(23);
    let k = f32::from_bits(e.wrapping_add(1f32.to_bits()));
    let u = b * b;
    let p = f32::from_bits(0x3c07_2010)
        .mul_add(b, f32::from_bits(0x3d2b_9f17))
        .mul_add(
            u,
            f32::from_bits(0x3e2a_af33).mul_add(b, f32::from_bits(0x3eff_fedb)),
        );
    let j = p.mul_add(u, f32::from_bits(0x3f7f_fff6) * b);
    if n.abs() <= 126.0 {
        return j.mul_add(k, k);
    }
    let g: u32 = if n <= 0.0 { 0x8200_0000 } else { 0 };
    let s1 = f32::from_bits(g.wrapping_add(0x7f00_0000));
    let s2 = f32::from_bits(e.wrapping_sub(g));
    if n.abs() > 192.0 {
        s1 * s1
    } else {
        s2.mul_add(j, s2) * s1
    }
}

/// Sums 8 lanes in the order of ggml's AVX2 horizontal add.
#[inline(always)]
fn hsum8(v: &[f32]) -> f32 {
    let s: [f32; 4] = std::array::from_fn(|i| v[i + 4] + v[i]);
    (s[0] + s[2]) + (s[1] + s[3])
}

/// Softmax in place as ggml computes it over a row padded to whole groups
/// of 8: [`v_expf`] per value, each group's sum (in ggml's order) added to
/// an f64 denominator.
#[inline(always)]
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0f64;
    for group in x.chunks_mut(8) {
        let mut lanes = [0f32; 8];
        for (l, v) in lanes.iter_mut().zip(group.iter_mut()) {
            *v = v_expf(*v - max);
            *l = *v;
        }
        sum += hsum8(&lanes) as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// `gate = silu(gate) * up`, as ggml's fused SwiGLU: groups of 8 with
/// [`v_expf`], the rest with `expf`. Inlined into the kernels' copies
/// compiled for wider vectors (`Kernels::swiglu`); no float operation is
/// reordered there, so every copy gives the same bits.
#[inline(always)]
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    let whole = gate.len() / 8 * 8;
    for (g, &u) in gate[..whole].iter_mut().zip(up) {
        *g = *g / (1.0 + v_expf(0.0 - *g)) * u;
    }
    for (g, &u) in gate[whole..].iter_mut().zip(&up[whole..]) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// `a · b` in eight interleaved sums (which the compiler keeps in vector
/// registers), added pairwise at the end, then the tail: one fixed order on
/// every processor, and no chain of dependent additions.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let mut lanes = [0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for i in 0..8 {
            lanes[i] += x[i] * y[i];
        }
    }
    let mut sum = hsum8(&lanes);
    let whole = a.len() / 8 * 8;
    for (x, y) in a[whole..].iter().zip(&b[whole..]) {
        sum += x * y;
    }
    sum
}

/// One query head `q` attending to `len` cached positions: the keys and
/// values of position `j` are `keys[j * stride + offset..][..q.len()]`
/// (and the same in `values`); the weighted sum of values goes to `out`.
/// Inlined into the kernels' copies as [`swiglu`] is.
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
    out: &mut [f32],
) {
    let hd = q.len();
    let key = |j: usize| &keys[j * stride + offset..j * stride + offset + hd];
    // Four keys at a time: four independent chains of additions, each
    // summed exactly as [`dot`] sums it. Loops, not iterator closures: a
    // closure keeps the features of the function it is written in, not
    // of the copy this is inlined into.
    let mut scores = Vec::with_capacity(len);
    let mut j = 0;
    while j + 4 <= len {
        let ks = [key(j), key(j + 1), key(j + 2), key(j + 3)];
        for s in dot4(q, ks) {
            scores.push(s * scale);
        }
        j += 4;
    }
    for j in j..len {
        scores.push(dot(q, key(j)) * scale);
    }
    weigh(&mut scores, values, stride, offset, out);
}

/// [`attend`] for each of the query heads in `q` (`hd` values each, back
/// to back) that share one KV head, the outputs back to back in `out`.
#[allow(clippy::too_many_arguments)] // [`attend`]'s and the head width
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
    assert!(hd > 0 && out.len() == q.len());
    for (q, out) in q.chunks_exact(hd).zip(out.chunks_exact_mut(hd)) {
        attend(q, keys, values, stride, offset, len, scale, out);
    }
}

/// The rest of [`attend`] once the scaled scores are known: their softmax,
/// then the weighted sum of the values into `out`. Inlined as `attend` is.
#[inline(always)]
pub fn weigh(scores: &mut [f32], values: &[f32], stride: usize, offset: usize, out: &mut [f32]) {
    softmax(scores);
    // A piece of `out` at a time, held in registers over every position
    // (the whole row went through memory on each pass): each value's sum
    // is still two positions per step, added in position order.
    let whole = out.len() / WEIGH_PIECE * WEIGH_PIECE;
    let (pieces, rest) = out.split_at_mut(whole);
    for (c, piece) in pieces.chunks_exact_mut(WEIGH_PIECE).enumerate() {
        let mut acc = [0f32; WEIGH_PIECE];
        acc.copy_from_slice(piece);
        weigh_piece(&mut acc, scores, values, stride, offset + c * WEIGH_PIECE);
        piece.copy_from_slice(&acc);
    }
    weigh_piece(rest, scores, values, stride, offset + whole);
}

/// Values a piece of [`weigh`]'s output holds (eight 8-wide registers).
const WEIGH_PIECE: usize = 64;

/// `out += Σ scores[j] · value(j)`, two positions per step, in position
/// order, for the values from `offset` of each position's row.
#[inline(always)]
fn weigh_piece(out: &mut [f32], scores: &[f32], values: &[f32], stride: usize, offset: usize) {
    let (w, len) = (out.len(), scores.len());
    let value = |j: usize| &values[j * stride + offset..j * stride + offset + w];
    let mut j = 0;
    while j + 2 <= len {
        let (p0, p1, v0, v1) = (scores[j], scores[j + 1], value(j), value(j + 1));
        for ((o, &a), &b) in out.iter_mut().zip(v0).zip(v1) {
            *o = (*o + p0 * a) + p1 * b;
        }
        j += 2;
    }
    if j < len {
        let (p, v) = (scores[j], value(j));
        for (o, &a) in out.iter_mut().zip(v) {
            *o += p * a;
        }
    }
}

/// [`dot`] of `a` with four rows at once.
#[inline(always)]
fn dot4(a: &[f32], b: [&[f32]; 4]) -> [f32; 4] {
    let whole = a.len() / 8 * 8;
    let mut lanes = [[0f32; 8]; 4];
    let mut i = 0;
    while i < whole {
        let x = &a[i..i + 8];
        for (lanes, b) in lanes.iter_mut().zip(&b) {
            let y = &b[i..i + 8];
            for l in 0..8 {
                lanes[l] += x[l] * y[l];
            }
        }
        i += 8;
    }
    let mut out = [0f32; 4];
    for k in 0..4 {
        out[k] = hsum8(&lanes[k]);
        for i in whole..a.len() {
            out[k] += a[i] * b[k][i];
        }
    }
    out
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

    #[test]
    fn weighing_in_pieces_sums_each_value_in_position_order() {
        let mut rng = SplitMix64::new(9);
        // Heads narrower than a piece, whole pieces, and pieces with a rest;
        // odd and even position counts.
        for (hd, stride, offset) in [(24, 72, 24), (128, 512, 256), (130, 400, 7)] {
            for len in [1, 2, 7, 64] {
                let values: Vec<f32> = (0..len * stride + offset + hd)
                    .map(|_| rng.symmetric(1.0))
                    .collect();
                let scores: Vec<f32> = (0..len).map(|_| rng.symmetric(3.0)).collect();
                let mut got = vec![0f32; hd];
                weigh(&mut scores.clone(), &values, stride, offset, &mut got);
                let mut p = scores.clone();
                softmax(&mut p);
                for (i, got) in got.iter().enumerate() {
                    let v = |j: usize| values[j * stride + offset + i];
                    let mut want = 0f32;
                    let mut j = 0;
                    while j + 2 <= len {
                        want = (want + p[j] * v(j)) + p[j + 1] * v(j + 1);
                        j += 2;
                    }
                    if j < len {
                        want += p[j] * v(j);
                    }
                    assert_eq!(got.to_bits(), want.to_bits(), "hd {hd} len {len} value {i}");
                }
            }
        }
    }
}
