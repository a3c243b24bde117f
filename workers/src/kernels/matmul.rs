//! The matrix product: one dot product per output for a single token
//! (decode), register-blocked tiles for a batch (prefill). Products that
//! share their activations (Q, K and V; gate and up) run as one set of
//! parallel tasks: one wait for the pool instead of one per matrix.

use super::{Encoded, Kernels, Matrix, TILE_MAX, Tile, Unpacked, X8Fn, pairs, x8};
use crate::tensor::GgmlType;
use half::f16;
use rayon::prelude::*;

/// `y[t][r] = w.row(r) · x[t]` for each of the `n` activation rows of `x`;
/// `y` is `n × w.rows`. Work is split over weight rows; every output
/// element is computed by one thread in one fixed order, the order of the
/// type's one-row dot product, so the result depends neither on the number
/// of threads nor on how many tokens share the batch.
pub fn matmul(kernels: &Kernels, w: &Matrix, x: &Encoded, y: &mut [f32]) {
    matmuls(kernels, x, &mut [(*w, y)]);
}

/// [`matmul`] of each `(w, y)` against the same activations.
pub fn matmuls(kernels: &Kernels, x: &Encoded, products: &mut [(Matrix, &mut [f32])]) {
    let n = x.rows();
    let weights: Vec<Matrix> = products.iter().map(|(w, _)| *w).collect();
    for (w, y) in products.iter() {
        assert_eq!(x.ty, w.ty.activation_type());
        assert_eq!(y.len(), n * w.rows);
    }
    let plans: Vec<Plan> = weights
        .iter()
        .map(|w| {
            match (
                kernels.decode(w.ty),
                kernels.tile(w.ty),
                kernels.unpacked(w.ty),
            ) {
                _ if w.packed => match kernels.pair(w.ty) {
                    // One token: one pair a call, one stream (see `pairs`).
                    Some(tile) if n == 1 => Plan::Pairs(Tile {
                        rows: pairs::ROWS,
                        ..tile
                    }),
                    Some(tile) => Plan::Pairs(tile),
                    // Two groups a call for a batch only: one token reads
                    // one stream faster than two (see `x8::AHEAD`).
                    None => Plan::Packed(
                        kernels.x8(w.ty).expect("only packable types pack"),
                        kernels.x16(w.ty).filter(|_| n > 1),
                    ),
                },
                (Some(decode), _, _) if n == 1 => Plan::Tiles(decode),
                (_, _, Some(unpacked)) if n >= UNPACK_TOKENS => Plan::Unpacked(unpacked),
                (_, Some(tile), _) if n > 1 => Plan::Tiles(tile),
                _ => Plan::Dots(kernels.dot(w.ty)),
            }
        })
        .collect();
    let wide = plans
        .iter()
        .any(|p| matches!(p, Plan::Tiles(t) | Plan::Pairs(t) if t.widen_f16))
        .then(|| widened(x));
    // Each task owns a range of one product's weight rows: its piece of
    // every token's output row, so outputs go straight to their place.
    let mut tasks: Vec<(usize, usize, Vec<&mut [f32]>)> = Vec::new();
    for (p, (w, y)) in products.iter_mut().enumerate() {
        let multiple = match plans[p] {
            Plan::Tiles(tile) => tile.rows,
            Plan::Unpacked(u) => u.tile.rows,
            Plan::Pairs(tile) => tile.rows,
            // Whole pairs of groups where two go a call.
            Plan::Packed(_, two) => x8::ROWS * if two.is_some() { 2 } else { 1 },
            Plan::Dots(_) => 1,
        };
        let chunk = rows_per_task(w, multiple);
        let first_task = tasks.len();
        for c in 0..w.rows.div_ceil(chunk) {
            tasks.push((p, c * chunk, Vec::with_capacity(n)));
        }
        for token in y.chunks_mut(w.rows) {
            for (c, piece) in token.chunks_mut(chunk).enumerate() {
                tasks[first_task + c].2.push(piece);
            }
        }
    }
    let run = |(p, first, mut out): (usize, usize, Vec<&mut [f32]>)| {
        let w = &weights[p];
        let act = |tile: Tile| match (&wide, tile.widen_f16) {
            (Some(wide), true) => Activations::new(&wide[..], 2 * x.row_bytes),
            _ => Activations::new(&x.data, x.row_bytes),
        };
        match plans[p] {
            Plan::Tiles(tile) => tiles(tile, w, first, None, &act(tile), &mut out),
            Plan::Pairs(tile) => tiles(tile, w, first, None, &act(tile), &mut out),
            Plan::Unpacked(u) => UNPACKED.with_borrow_mut(|rows| {
                // The task's rows, unpacked once for all its tokens, into
                // the thread's buffer (kept: a fresh one each task was
                // pages faulted in each time).
                let count = out[0].len();
                let row_bytes = w.cols / w.ty.block_elements() as usize * u.block_bytes;
                rows.resize(count * row_bytes, 0);
                for (i, o) in rows.chunks_exact_mut(row_bytes).enumerate() {
                    (u.unpack)(w.row(first + i), o);
                }
                let unpacked = Some((&rows[..], row_bytes));
                tiles(u.tile, w, first, unpacked, &act(u.tile), &mut out)
            }),
            Plan::Packed(f, f2) => groups(f, f2, w, first, x, &mut out),
            Plan::Dots(dot) => {
                for i in 0..out[0].len() {
                    let row = w.row(first + i);
                    for (t, o) in out.iter_mut().enumerate() {
                        o[i] = dot(row, x.row(t));
                    }
                }
            }
        }
    };
    let work: usize = weights.iter().map(|w| w.rows * w.cols * n).sum();
    if work < SERIAL_ELEMENTS {
        tasks.into_iter().for_each(run);
    } else {
        tasks.into_par_iter().for_each(run);
    }
}

/// How one product is computed.
#[derive(Clone, Copy)]
enum Plan {
    Tiles(Tile),
    /// A batch on rows unpacked first, a task's at a time.
    Unpacked(Unpacked),
    /// Rows packed in pairs (`pairs`): the tile takes one pair's slice.
    Pairs(Tile),
    /// Packed groups: one a call, or two where the second kernel is there.
    Packed(X8Fn, Option<X8Fn>),
    Dots(super::DotFn),
}

thread_local! {
    /// Each thread's unpacked rows ([`Plan::Unpacked`]): a pool thread's,
    /// or the calling thread's for a product small enough to run there;
    /// a task's rows' worth (about 420 KiB for q5_K), kept at the largest.
    static UNPACKED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Batches of at least this many tokens unpack their rows first, where
/// the kernels can: below it, the unpacking costs more than the tiles of
/// tokens save (one decode a tile of three).
const UNPACK_TOKENS: usize = 8;

/// Products smaller than this many multiply-adds run on the calling
/// thread: handing them to the pool costs more than it saves. Waking a
/// sleeping pool thread costs tens of microseconds on a VM whose idle
/// vCPU halts; 2^17 multiply-adds take about as long on one core. (At
/// 2^15, TinyStories 260K's output matrix, 512 x 64, woke the pool on
/// every token: 0.7-1 sleeps a token for the tiny model, 0.04 at 2^17.)
const SERIAL_ELEMENTS: usize = 1 << 17;

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

/// Activation rows as a tile kernel reads them.
struct Activations<'a> {
    data: &'a [u8],
    row_bytes: usize,
}

impl<'a> Activations<'a> {
    fn new(data: &'a [u8], row_bytes: usize) -> Activations<'a> {
        Activations { data, row_bytes }
    }

    fn row(&self, t: usize) -> &'a [u8] {
        &self.data[t * self.row_bytes..(t + 1) * self.row_bytes]
    }
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

/// Rows `first..` of `w` (as many as each of `out`'s token pieces holds)
/// against every token, `out[t][r]`: a tile of tokens at a time (kept in
/// L1) against each tile of the rows (kept in L2). A matrix packed in
/// pairs ([`pairs`]) goes a pair a tile, handed over as its one slice;
/// `unpacked`, the rows `first..` unpacked ([`Unpacked`]) and their bytes
/// each, stands in for the rows of `w`.
fn tiles(
    tile: Tile,
    w: &Matrix,
    first: usize,
    unpacked: Option<(&[u8], usize)>,
    act: &Activations,
    out: &mut [&mut [f32]],
) {
    assert!(tile.rows <= TILE_MAX && tile.tokens <= TILE_MAX);
    let n = out.len();
    let count = out[0].len();
    let mut a: [&[u8]; TILE_MAX] = [&[]; TILE_MAX];
    let mut ws: [&[u8]; TILE_MAX] = [&[]; TILE_MAX];
    let mut results = [0f32; TILE_MAX * TILE_MAX];
    for t0 in (0..n).step_by(tile.tokens) {
        let tn = tile.tokens.min(n - t0);
        for (i, a) in a[..tn].iter_mut().enumerate() {
            *a = act.row(t0 + i);
        }
        for r0 in (0..count).step_by(tile.rows) {
            let rn = tile.rows.min(count - r0);
            let slices = if w.packed {
                // Pairs of rows packed together: one slice a pair.
                assert!(rn.is_multiple_of(pairs::ROWS) && (first + r0).is_multiple_of(pairs::ROWS));
                let bytes = pairs::pair_bytes(w.cols);
                let first_pair = (first + r0) / pairs::ROWS;
                for (i, wr) in ws[..rn / pairs::ROWS].iter_mut().enumerate() {
                    let at = (first_pair + i) * bytes;
                    *wr = &w.data[at..at + bytes];
                }
                rn / pairs::ROWS
            } else {
                for (i, wr) in ws[..rn].iter_mut().enumerate() {
                    *wr = match unpacked {
                        Some((rows, bytes)) => &rows[(r0 + i) * bytes..(r0 + i + 1) * bytes],
                        None => w.row(first + r0 + i),
                    };
                }
                rn
            };
            (tile.f)(&ws[..slices], &a[..tn], &mut results, TILE_MAX);
            for (t, o) in out[t0..t0 + tn].iter_mut().enumerate() {
                for (r, v) in o[r0..r0 + rn].iter_mut().enumerate() {
                    *v = results[r * TILE_MAX + t];
                }
            }
        }
    }
}

/// Rows `first..` of the packed `w` (as many as each of `out`'s token
/// pieces holds, a whole number of groups) against every token, as
/// [`tiles`] does: up to `x8::TOKENS` tokens against each group in turn,
/// or against two groups a call where `two` is given.
fn groups(
    one: X8Fn,
    two: Option<X8Fn>,
    w: &Matrix,
    first: usize,
    x: &Encoded,
    out: &mut [&mut [f32]],
) {
    assert!(w.packed && first.is_multiple_of(x8::ROWS));
    let n = out.len();
    let count = out[0].len();
    assert_eq!(count % x8::ROWS, 0);
    let group_bytes = x8::group_bytes(w.ty, w.cols);
    let mut a: [&[u8]; x8::TOKENS] = [&[]; x8::TOKENS];
    let mut sums: [&[i32]; x8::TOKENS] = [&[]; x8::TOKENS];
    let mut results = [[0f32; x8::ROWS]; 2 * x8::TOKENS];
    for t0 in (0..n).step_by(x8::TOKENS) {
        let tn = x8::TOKENS.min(n - t0);
        for i in 0..tn {
            a[i] = x.row(t0 + i);
            sums[i] = x.sums(t0 + i);
        }
        let mut r0 = 0;
        while r0 < count {
            let g = (first + r0) / x8::ROWS;
            let (f, k) = match two {
                Some(f2) if r0 + 2 * x8::ROWS <= count => (f2, 2),
                _ => (one, 1),
            };
            let group = &w.data[g * group_bytes..(g + k) * group_bytes];
            f(group, &a[..tn], &sums[..tn], &mut results[..k * tn]);
            for (j, r) in results[..k * tn].iter().enumerate() {
                let (o, rows) = (&mut out[t0 + j % tn], r0 + j / tn * x8::ROWS);
                o[rows..rows + x8::ROWS].copy_from_slice(r);
            }
            r0 += k * x8::ROWS;
        }
    }
}
