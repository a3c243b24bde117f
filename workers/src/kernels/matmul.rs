//! The matrix product: one dot product per output for a single token
//! (decode), register-blocked tiles for a batch (prefill).

use super::{Encoded, Kernels, Matrix, TILE_MAX, Tile};
use crate::tensor::GgmlType;
use half::f16;
use rayon::prelude::*;

/// `y[t][r] = w.row(r) · x[t]` for each of the `n` activation rows of `x`;
/// `y` is `n × w.rows`. Work is split over weight rows; every output
/// element is computed by one thread in one fixed order, the order of the
/// type's one-row dot product, so the result depends neither on the number
/// of threads nor on how many tokens share the batch.
pub fn matmul(kernels: &Kernels, w: &Matrix, x: &Encoded, y: &mut [f32]) {
    assert_eq!(x.ty, w.ty.activation_type());
    let n = x.rows();
    assert_eq!(y.len(), n * w.rows);
    match kernels.tile(w.ty) {
        Some(tile) if n > 1 => tiled(tile, w, x, y),
        _ => by_dots(kernels, w, x, y),
    }
}

/// Products smaller than this many multiply-adds run on the calling
/// thread: handing them to the pool costs more than it saves.
const SERIAL_ELEMENTS: usize = 1 << 15;

/// Weight bytes one task keeps hot while it walks every token: about half
/// of a core's L2 cache, leaving room for the activations.
const TASK_WEIGHT_BYTES: usize = 256 << 10;

/// Rows per parallel task: enough tasks to balance the threads, few enough
/// that scheduling stays cheap next to the work, and a whole number of
/// tiles of `multiple` rows.
fn rows_per_task(w: &Matrix, multiple: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    let balanced = w.rows.div_ceil(threads * 4).max(16);
    let cached = (TASK_WEIGHT_BYTES / w.row_bytes().max(1)).max(multiple);
    balanced.min(cached).next_multiple_of(multiple)
}

fn by_dots(kernels: &Kernels, w: &Matrix, x: &Encoded, y: &mut [f32]) {
    let n = x.rows();
    let dot = kernels.dot(w.ty);
    if w.rows * w.cols * n < SERIAL_ELEMENTS {
        for t in 0..n {
            for r in 0..w.rows {
                y[t * w.rows + r] = dot(w.row(r), x.row(t));
            }
        }
        return;
    }
    let chunk = rows_per_task(w, 1);
    if n == 1 {
        y.par_chunks_mut(chunk).enumerate().for_each(|(c, out)| {
            for (i, o) in out.iter_mut().enumerate() {
                *o = dot(w.row(c * chunk + i), x.row(0));
            }
        });
        return;
    }
    let mut transposed = vec![0f32; n * w.rows];
    transposed
        .par_chunks_mut(chunk * n)
        .enumerate()
        .for_each(|(c, out)| {
            for (i, o) in out.chunks_exact_mut(n).enumerate() {
                let row = w.row(c * chunk + i);
                for (t, v) in o.iter_mut().enumerate() {
                    *v = dot(row, x.row(t));
                }
            }
        });
    transpose(&transposed, n, y);
}

/// f16 activation rows widened to f32, as little-endian bytes: exact, so
/// the tile kernels see the values the one-row kernel converts as it goes.
fn widened(x: &Encoded) -> Vec<u8> {
    assert_eq!(x.ty, GgmlType::F16);
    x.data
        .chunks_exact(2)
        .flat_map(|h| f16::from_le_bytes([h[0], h[1]]).to_f32().to_le_bytes())
        .collect()
}

fn tiled(tile: Tile, w: &Matrix, x: &Encoded, y: &mut [f32]) {
    assert!(tile.rows <= TILE_MAX && tile.tokens <= TILE_MAX);
    let n = x.rows();
    let wide;
    let (act, act_row_bytes) = if tile.widen_f16 {
        wide = widened(x);
        (&wide[..], 2 * x.row_bytes)
    } else {
        (&x.data[..], x.row_bytes)
    };
    let act_row = |t: usize| &act[t * act_row_bytes..(t + 1) * act_row_bytes];
    let chunk = rows_per_task(w, tile.rows);
    // Each task: its rows (kept in cache) against every token, a tile of
    // tokens at a time (kept in L1) against each tile of its rows.
    let task = |(c, out): (usize, &mut [f32])| {
        let first = c * chunk;
        let count = out.len() / n;
        let mut a: [&[u8]; TILE_MAX] = [&[]; TILE_MAX];
        let mut ws: [&[u8]; TILE_MAX] = [&[]; TILE_MAX];
        for t0 in (0..n).step_by(tile.tokens) {
            let tn = tile.tokens.min(n - t0);
            for (i, a) in a[..tn].iter_mut().enumerate() {
                *a = act_row(t0 + i);
            }
            for r0 in (0..count).step_by(tile.rows) {
                let rn = tile.rows.min(count - r0);
                for (i, wr) in ws[..rn].iter_mut().enumerate() {
                    *wr = w.row(first + r0 + i);
                }
                (tile.f)(&ws[..rn], &a[..tn], &mut out[r0 * n + t0..], n);
            }
        }
    };
    let mut transposed = vec![0f32; n * w.rows];
    if w.rows * w.cols * n < SERIAL_ELEMENTS {
        task((0, &mut transposed));
    } else {
        transposed
            .par_chunks_mut(chunk * n)
            .enumerate()
            .for_each(task);
    }
    transpose(&transposed, n, y);
}

/// `y[t * rows + r] = transposed[r * n + t]`, in parallel over tokens.
fn transpose(transposed: &[f32], n: usize, y: &mut [f32]) {
    let rows = transposed.len() / n;
    let per_task = n.div_ceil(rayon::current_num_threads().max(1) * 2).max(8);
    y.par_chunks_mut(per_task * rows)
        .enumerate()
        .for_each(|(c, out)| {
            for (i, row) in out.chunks_exact_mut(rows).enumerate() {
                let t = c * per_task + i;
                for (r, v) in row.iter_mut().enumerate() {
                    *v = transposed[r * n + t];
                }
            }
        });
}
