//! The operands of a product: a weight matrix in place ([`Matrix`]) and
//! activations encoded for its type ([`Encoded`]).

use super::x8;
use crate::tensor::GgmlType;
use crate::tensor::quantize::quantize_row;
use rayon::prelude::*;

/// A weight matrix in place: `rows` rows of `cols` values of `ty`.
#[derive(Clone, Copy)]
pub struct Matrix<'a> {
    /// Element type.
    pub ty: GgmlType,
    /// Output features.
    pub rows: usize,
    /// Input features (the contiguous dimension).
    pub cols: usize,
    /// The encoded rows, back to back, or groups of eight rows packed
    /// (`packed`, see [`super::x8`]).
    pub data: &'a [u8],
    /// Whether `data` is packed.
    pub packed: bool,
}

impl Matrix<'_> {
    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.cols as u64) as usize
    }

    /// Encoded row `r` of a matrix that is not packed.
    pub fn row(&self, r: usize) -> &[u8] {
        assert!(!self.packed, "a packed matrix has no rows in place");
        let n = self.row_bytes();
        &self.data[r * n..(r + 1) * n]
    }
}

/// Batches of at least this many rows are encoded on the thread pool.
const ENCODE_PARALLEL_ROWS: usize = 16;

/// Activations encoded for a product with weights of one type.
pub struct Encoded {
    pub(super) ty: GgmlType,
    pub(super) row_bytes: usize,
    pub(super) data: Vec<u8>,
    /// For q8_0 activations, each block's sum of quants (what the packed
    /// q4_0 kernels take the weights' offset off with, see [`super::X8Fn`]; an
    /// encoding made for q8_0 weights can serve a packed q4_0 matrix too).
    sums: Vec<i32>,
}

impl Encoded {
    /// Encodes `n` rows of `cols` f32 values (`x.len() == n * cols`) for
    /// weights of `weight_ty`.
    pub fn new(weight_ty: GgmlType, x: &[f32], cols: usize) -> Encoded {
        let ty = weight_ty.activation_type();
        let row_bytes = ty.row_bytes(cols as u64) as usize;
        let rows = x.len() / cols;
        let mut data = Vec::with_capacity(row_bytes * rows);
        if rows < ENCODE_PARALLEL_ROWS {
            for row in x.chunks_exact(cols) {
                quantize_row(ty, row, &mut data);
            }
        } else {
            let per_task = ENCODE_PARALLEL_ROWS / 2;
            let parts: Vec<Vec<u8>> = x
                .par_chunks(per_task * cols)
                .map(|part| {
                    let mut out = Vec::with_capacity(row_bytes * per_task);
                    for row in part.chunks_exact(cols) {
                        quantize_row(ty, row, &mut out);
                    }
                    out
                })
                .collect();
            parts.iter().for_each(|p| data.extend_from_slice(p));
        }
        let sums = match ty {
            GgmlType::Q8_0 => x8::block_sums(&data),
            _ => Vec::new(),
        };
        Encoded {
            ty,
            row_bytes,
            data,
            sums,
        }
    }

    /// The activation type the rows are encoded in.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    pub(super) fn row(&self, t: usize) -> &[u8] {
        &self.data[t * self.row_bytes..(t + 1) * self.row_bytes]
    }

    pub(super) fn sums(&self, t: usize) -> &[i32] {
        if self.sums.is_empty() {
            return &[];
        }
        let blocks = self.row_bytes / 34;
        &self.sums[t * blocks..(t + 1) * blocks]
    }

    pub(super) fn rows(&self) -> usize {
        self.data.len() / self.row_bytes
    }
}
