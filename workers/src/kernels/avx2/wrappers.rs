//! The one-row dot products and element-wise kernels as plain `fn`s, the
//! type the kernel table holds.

use super::attend;
use super::imp;
use super::kquants as imp_k;
use super::q5;
use crate::model::RopeLayout;
// SAFETY (all): these are only installed by `kernels()` after the
// features they enable were detected on this processor.
pub fn dot_f32(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp::dot_f32(w, a) }
}
#[allow(clippy::too_many_arguments)] // `ops::attend_heads`'
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
    unsafe { attend::attend_heads(q, hd, keys, values, stride, offset, len, scale, batch, out) }
}
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    unsafe { imp::swiglu(gate, up) }
}
pub fn rope(x: &mut [f32], hd: usize, dims: usize, base: f32, l: RopeLayout, pos: usize) {
    unsafe { imp::rope(x, hd, dims, base, l, pos) }
}
pub fn dot_f16(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp::dot_f16(w, a) }
}
pub fn dot_q8_0(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp::dot_q8_0(w, a) }
}
pub fn dot_q4_0(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp::dot_q4_0(w, a) }
}
pub fn dot_bf16(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp_k::dot_bf16(w, a) }
}
pub fn dot_q4k(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp_k::dot_q4k(w, a) }
}
pub fn dot_q5_0(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp::dot_q5_0(w, a) }
}
pub fn dot_q4_1(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp::dot_q4_1(w, a) }
}
pub fn dot_q5_1(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp::dot_q5_1(w, a) }
}
pub fn dot_q2k(w: &[u8], a: &[u8]) -> f32 {
    unsafe { super::k23::dot_q2k(w, a) }
}
pub fn dot_q3k(w: &[u8], a: &[u8]) -> f32 {
    unsafe { super::k23::dot_q3k(w, a) }
}
pub fn dot_q5k(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp_k::dot_q5k(w, a) }
}
pub fn unpack_q5k(row: &[u8], out: &mut [u8]) {
    unsafe { q5::unpack_q5k(row, out) }
}
pub fn dot_q6k(w: &[u8], a: &[u8]) -> f32 {
    unsafe { imp_k::dot_q6k(w, a) }
}
pub fn dot_iq4nl(w: &[u8], a: &[u8]) -> f32 {
    unsafe { super::iq4::dot_iq4nl(w, a) }
}
pub fn dot_iq4xs(w: &[u8], a: &[u8]) -> f32 {
    unsafe { super::iq4::dot_iq4xs(w, a) }
}
