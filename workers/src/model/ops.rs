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

/// Softmax in place, the denominator summed in f64.
pub fn softmax(x: &mut [f32]) {
    let max = x.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0f64;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v as f64;
    }
    let inv = (1.0 / sum) as f32;
    for v in x.iter_mut() {
        *v *= inv;
    }
}

/// `gate = silu(gate) * up`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

/// `x += y`.
pub fn add(x: &mut [f32], y: &[f32]) {
    for (a, &b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
