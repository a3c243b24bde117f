//! f16 weights packed two rows together, so that a one-token product
//! reads a single stream of weights with four independent sums in flight.
//!
//! Two rows read side by side from their own places are two streams, and
//! on the 2-core AMD EPYC measured that halves decode speed; one row at a
//! time gives only the one-row order's two sums. Packed, a pair is one
//! stream: for each 16-value step `s` (`cols / 16` of them), row 0's
//! values `16s..16s + 16` (32 bytes), then row 1's; then the values left
//! over (`cols % 16`), row 0's and then row 1's. Each row keeps the
//! one-row kernel's order (its two sums over 16-value steps), so a packed
//! product equals the rows as stored bit for bit, for one token or a
//! batch, and a packed matrix takes the bytes the plain one did.

use crate::tensor::GgmlType;
use rayon::prelude::*;

/// Rows per pair.
pub const ROWS: usize = 2;

/// Values of a row per step.
pub const STEP: usize = 16;

/// Whether a matrix of `ty` with `rows` rows packs in pairs.
pub fn packable(ty: GgmlType, rows: usize) -> bool {
    ty == GgmlType::F16 && rows.is_multiple_of(ROWS) && rows > 0
}

/// Bytes of one pair of rows of `cols` f16 values.
pub fn pair_bytes(cols: usize) -> usize {
    ROWS * 2 * cols
}

/// Where, in a pair of rows of `cols` values, row `r`'s value `i` is (in
/// bytes). Values `i..i + 8` are contiguous where `i` is a multiple of 8.
#[inline]
pub fn offset(cols: usize, r: usize, i: usize) -> usize {
    let steps = cols / STEP;
    if i < steps * STEP {
        ROWS * 2 * STEP * (i / STEP) + 2 * STEP * r + 2 * (i % STEP)
    } else {
        let rest = cols - steps * STEP;
        ROWS * 2 * STEP * steps + 2 * rest * r + 2 * (i - steps * STEP)
    }
}

/// `data`, `rows` f16 rows of `cols` values back to back, packed.
pub fn pack(rows: usize, cols: usize, data: &[u8]) -> Vec<u8> {
    assert!(packable(GgmlType::F16, rows));
    let mut out = vec![0u8; data.len()];
    pack_into(cols, data, &mut out);
    out
}

/// Packs `data`, whole pairs of f16 rows of `cols` values, into `out`
/// (as long), the pairs on the thread pool.
pub fn pack_into(cols: usize, data: &[u8], out: &mut [u8]) {
    let bytes = pair_bytes(cols);
    assert!(data.len().is_multiple_of(bytes) && out.len() == data.len());
    out.par_chunks_exact_mut(bytes)
        .zip(data.par_chunks_exact(bytes))
        .for_each(|(out, pair)| {
            for r in 0..ROWS {
                let row = &pair[r * 2 * cols..(r + 1) * 2 * cols];
                for i in (0..cols).step_by(8) {
                    let n = 8.min(cols - i);
                    let at = offset(cols, r, i);
                    out[at..at + 2 * n].copy_from_slice(&row[2 * i..2 * (i + n)]);
                }
            }
        });
}

/// Row `r` of a packed pair, as stored in a GGUF.
pub fn unpacked_row(pair: &[u8], cols: usize, r: usize) -> Vec<u8> {
    (0..cols)
        .flat_map(|i| {
            let at = offset(cols, r, i);
            [pair[at], pair[at + 1]]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_moves_every_value_once_and_keeps_each_row() {
        // Distinct values; steps, an 8-value rest and a tail of 3.
        for cols in [16, 27, 48, 8, 5] {
            let data: Vec<u8> = (0..2 * cols)
                .flat_map(|v| (v as u16).to_le_bytes())
                .collect();
            let packed = pack(2, cols, &data);
            let mut seen: Vec<u16> = packed
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..2 * cols as u16).collect::<Vec<_>>());
            for r in 0..2 {
                let row = &data[r * 2 * cols..(r + 1) * 2 * cols];
                assert_eq!(unpacked_row(&packed, cols, r), row, "cols {cols} row {r}");
            }
        }
    }
}
