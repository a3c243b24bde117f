//! CPU kernels: dot products on encoded blocks, picked once at run time by
//! the processor's features, and the matrix product built on them.

pub mod avx2;
pub mod scalar;

use crate::tensor::GgmlType;
use crate::tensor::quantize::quantize_row;
use rayon::prelude::*;
use std::sync::OnceLock;

/// A dot product of one encoded weight row with one encoded activation row.
pub type DotFn = fn(&[u8], &[u8]) -> f32;

/// Four activation rows against one weight row.
pub type Dot4Fn = fn(&[u8], [&[u8]; 4]) -> [f32; 4];

/// The dot products in use, one per weight type.
#[derive(Clone, Copy)]
pub struct Kernels {
    /// Which implementation was picked: `avx2` or `portable`.
    pub name: &'static str,
    f32: DotFn,
    f16: DotFn,
    bf16: DotFn,
    q8_0: DotFn,
    q4_0: DotFn,
    q4k: DotFn,
    q6k: DotFn,
    dot4_q8_0: Option<Dot4Fn>,
    dot4_q4_0: Option<Dot4Fn>,
    dot4_f16: Option<Dot4Fn>,
}

impl Kernels {
    /// The portable kernels.
    pub fn portable() -> Kernels {
        Kernels {
            name: "portable",
            f32: scalar::dot_f32,
            f16: scalar::dot_f16,
            bf16: scalar::dot_bf16,
            q8_0: scalar::dot_q8_0,
            q4_0: scalar::dot_q4_0,
            q4k: scalar::dot_q4k,
            q6k: scalar::dot_q6k,
            dot4_q8_0: None,
            dot4_q4_0: None,
            dot4_f16: None,
        }
    }

    /// The fastest kernels this processor runs.
    pub fn detect() -> Kernels {
        avx2::kernels().unwrap_or_else(Kernels::portable)
    }

    /// The kernels chosen for this process (detected once; `DROVER_KERNELS=portable`
    /// forces the fallback).
    pub fn current() -> &'static Kernels {
        static CURRENT: OnceLock<Kernels> = OnceLock::new();
        CURRENT.get_or_init(|| match std::env::var("DROVER_KERNELS").as_deref() {
            Ok("portable") => Kernels::portable(),
            _ => Kernels::detect(),
        })
    }

    /// The dot product for weights of `ty`.
    pub fn dot(&self, ty: GgmlType) -> DotFn {
        match ty {
            GgmlType::F32 => self.f32,
            GgmlType::F16 => self.f16,
            GgmlType::BF16 => self.bf16,
            GgmlType::Q8_0 => self.q8_0,
            GgmlType::Q4_0 => self.q4_0,
            GgmlType::Q4K => self.q4k,
            GgmlType::Q6K => self.q6k,
            GgmlType::Q8K => panic!("q8_K is an activation type, not a weight type"),
        }
    }

    /// The four-row dot product for weights of `ty`, where there is one.
    pub fn dot4(&self, ty: GgmlType) -> Option<Dot4Fn> {
        match ty {
            GgmlType::Q8_0 => self.dot4_q8_0,
            GgmlType::Q4_0 => self.dot4_q4_0,
            GgmlType::F16 => self.dot4_f16,
            _ => None,
        }
    }
}

/// A weight matrix in place: `rows` rows of `cols` values of `ty`.
#[derive(Clone, Copy)]
pub struct Matrix<'a> {
    /// Element type.
    pub ty: GgmlType,
    /// Output features.
    pub rows: usize,
    /// Input features (the contiguous dimension).
    pub cols: usize,
    /// The encoded rows, back to back.
    pub data: &'a [u8],
}

impl Matrix<'_> {
    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.ty.row_bytes(self.cols as u64) as usize
    }

    /// Encoded row `r`.
    pub fn row(&self, r: usize) -> &[u8] {
        let n = self.row_bytes();
        &self.data[r * n..(r + 1) * n]
    }
}

/// Activations encoded for a product with weights of one type.
pub struct Encoded {
    ty: GgmlType,
    row_bytes: usize,
    data: Vec<u8>,
}

impl Encoded {
    /// Encodes `n` rows of `cols` f32 values (`x.len() == n * cols`) for
    /// weights of `weight_ty`.
    pub fn new(weight_ty: GgmlType, x: &[f32], cols: usize) -> Encoded {
        let ty = weight_ty.activation_type();
        let row_bytes = ty.row_bytes(cols as u64) as usize;
        let mut data = Vec::with_capacity(row_bytes * (x.len() / cols));
        for row in x.chunks_exact(cols) {
            quantize_row(ty, row, &mut data);
        }
        Encoded {
            ty,
            row_bytes,
            data,
        }
    }

    fn row(&self, t: usize) -> &[u8] {
        &self.data[t * self.row_bytes..(t + 1) * self.row_bytes]
    }

    fn rows(&self) -> usize {
        self.data.len() / self.row_bytes
    }
}

/// `y[t][r] = w.row(r) · x[t]` for each of the `n` activation rows of `x`;
/// `y` is `n × w.rows`. Work is split over weight rows, each weight row read
/// once for all `n` activations; every output element is computed by one
/// thread in one fixed order, so the result does not depend on the number
/// of threads.
pub fn matmul(kernels: &Kernels, w: &Matrix, x: &Encoded, y: &mut [f32]) {
    assert_eq!(x.ty, w.ty.activation_type());
    let n = x.rows();
    assert_eq!(y.len(), n * w.rows);
    let dot = kernels.dot(w.ty);
    if w.rows * w.cols * n < SERIAL_ELEMENTS {
        for t in 0..n {
            for r in 0..w.rows {
                y[t * w.rows + r] = dot(w.row(r), x.row(t));
            }
        }
        return;
    }
    let chunk = rows_per_task(w.rows);
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
    for r in 0..w.rows {
        for t in 0..n {
            y[t * w.rows + r] = transposed[r * n + t];
        }
    }
}

/// Products smaller than this many multiply-adds run on the calling
/// thread: handing them to the pool costs more than it saves.
const SERIAL_ELEMENTS: usize = 1 << 15;

/// Rows per parallel task: enough tasks to balance the threads, few enough
/// that scheduling stays cheap next to the work.
fn rows_per_task(rows: usize) -> usize {
    let threads = rayon::current_num_threads().max(1);
    rows.div_ceil(threads * 4).max(16)
}
