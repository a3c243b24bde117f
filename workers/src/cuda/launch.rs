//! Launch shapes of the kernels, as plain arithmetic the tests check on
//! any machine: which grid covers which work, with the thread counts the
//! CUDA sources assume.

use cudarc::driver::LaunchConfig;

/// Warps per block of the one-warp-per-output kernels (`quant.cu`).
pub const WARPS_PER_BLOCK: u32 = 4;

/// Threads per block of the block-reduction kernels (`ops.cu`'s THREADS,
/// which sizes their shared scratch: the two must agree).
pub const REDUCE_THREADS: u32 = 256;

/// Threads per block of the element-wise kernels.
pub const ELEMENTWISE_THREADS: u32 = 256;

/// A count as the `int` a kernel takes, or why it is too large.
pub fn int(n: usize) -> Result<i32, String> {
    i32::try_from(n).map_err(|_| format!("{n} does not fit a kernel's 32-bit index"))
}

fn count(n: usize) -> Result<u32, String> {
    u32::try_from(n).map_err(|_| format!("{n} blocks do not fit a CUDA grid"))
}

/// The most blocks a CUDA grid has along y, where the kernels put tokens.
pub const MAX_GRID_Y: usize = 65_535;

/// The floats of attention score scratch one launch may use (1 GiB).
pub const SCORES_FLOATS: usize = 1 << 28;

/// Tokens along a grid's y, or why a batch has too many for one launch.
fn tokens_y(tokens: usize) -> Result<u32, String> {
    if tokens > MAX_GRID_Y {
        return Err(format!(
            "a batch of {tokens} tokens: the CUDA backend takes at most {MAX_GRID_Y} \
             tokens a forward (a grid's y limit); forward fewer at a time"
        ));
    }
    count(tokens)
}

/// Tokens per attention launch over `n` new tokens, each with `stride`
/// positions of scores per head: as many as keep the scratch within
/// [`SCORES_FLOATS`] and the grid within [`MAX_GRID_Y`], at least one.
pub fn attention_chunk(heads: usize, stride: usize, n: usize) -> usize {
    let per_token = (heads * stride).max(1);
    (SCORES_FLOATS / per_token)
        .clamp(1, MAX_GRID_Y)
        .min(n.max(1))
}

/// One warp per output row for each of `tokens` tokens: grid
/// (ceil(rows / warps), tokens).
pub fn per_row(rows: usize, tokens: usize) -> Result<LaunchConfig, String> {
    Ok(LaunchConfig {
        grid_dim: (
            count(rows.div_ceil(WARPS_PER_BLOCK as usize))?,
            tokens_y(tokens)?,
            1,
        ),
        block_dim: (WARPS_PER_BLOCK * 32, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// Tokens per block along y of the Q8_0 and Q4_0 products (`quant.cu`'s
/// TILE: the two must agree).
pub const TOKEN_TILE: usize = 8;

/// One warp per output row, each for up to [`TOKEN_TILE`] of `tokens`
/// tokens: grid (ceil(rows / warps), ceil(tokens / TOKEN_TILE)).
pub fn per_row_tiled(rows: usize, tokens: usize) -> Result<LaunchConfig, String> {
    let mut c = per_row(rows, 1)?;
    c.grid_dim.1 = tokens_y(tokens.div_ceil(TOKEN_TILE))?;
    Ok(c)
}

/// One warp per quantization block, `blocks` of them.
pub fn per_block(blocks: usize) -> Result<LaunchConfig, String> {
    per_row(blocks, 1)
}

/// One thread per value, `total` values.
pub fn elementwise(total: usize) -> Result<LaunchConfig, String> {
    Ok(LaunchConfig {
        grid_dim: (count(total.div_ceil(ELEMENTWISE_THREADS as usize))?, 1, 1),
        block_dim: (ELEMENTWISE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// One reducing block per row (RMSNorm).
pub fn per_norm_row(rows: usize) -> Result<LaunchConfig, String> {
    Ok(LaunchConfig {
        grid_dim: (count(rows)?, 1, 1),
        block_dim: (REDUCE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// One reducing block per (query head, token) (attention).
pub fn per_head(heads: usize, tokens: usize) -> Result<LaunchConfig, String> {
    Ok(LaunchConfig {
        grid_dim: (count(heads)?, tokens_y(tokens)?, 1),
        block_dim: (REDUCE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_row_grids_cover_every_row_with_no_spare_block() {
        for rows in [1, 3, 4, 5, 64, 172, 4097, 151_936] {
            for tokens in [1, 7] {
                let c = per_row(rows, tokens).unwrap();
                let warps = (c.grid_dim.0 * c.block_dim.0 / 32) as usize;
                assert!(warps >= rows, "{rows}");
                assert!(warps - rows < WARPS_PER_BLOCK as usize, "{rows}");
                assert_eq!(c.grid_dim.1 as usize, tokens);
                assert_eq!(c.block_dim.0 % 32, 0);
            }
        }
    }

    #[test]
    fn tiled_grids_cover_every_token_once() {
        let quant = include_str!("quant.cu");
        assert!(quant.contains(&format!("#define TILE {TOKEN_TILE}")));
        for tokens in [1, 7, 8, 9, 512, 513] {
            let c = per_row_tiled(4097, tokens).unwrap();
            assert_eq!(c.grid_dim.0, per_row(4097, 1).unwrap().grid_dim.0);
            let y = c.grid_dim.1 as usize;
            // Block y takes tokens TILE * y ..: the last block starts
            // inside the batch and the blocks reach its end.
            assert!(y * TOKEN_TILE >= tokens && (y - 1) * TOKEN_TILE < tokens);
        }
        assert!(per_row_tiled(4, TOKEN_TILE * MAX_GRID_Y + 1).is_err());
    }

    #[test]
    fn elementwise_grids_cover_every_value() {
        for total in [1, 255, 256, 257, 1 << 20] {
            let c = elementwise(total).unwrap();
            let threads = (c.grid_dim.0 * c.block_dim.0) as usize;
            assert!(threads >= total && threads - total < c.block_dim.0 as usize);
        }
    }

    #[test]
    fn reductions_use_the_threads_the_sources_size_their_scratch_for() {
        let ops = include_str!("ops.cu");
        assert!(ops.contains(&format!("#define THREADS {REDUCE_THREADS}")));
        assert_eq!(per_norm_row(3).unwrap().block_dim.0, REDUCE_THREADS);
        assert_eq!(per_head(8, 2).unwrap().grid_dim, (8, 2, 1));
        // The block sums halve the stride: a power of two.
        assert!(REDUCE_THREADS.is_power_of_two());
    }

    #[test]
    fn counts_too_large_for_a_kernel_are_errors() {
        assert!(int(1 << 31).is_err());
        assert_eq!(int(7), Ok(7));
        assert!(per_row(usize::MAX, 1).is_err());
    }

    #[test]
    fn batches_past_the_grid_y_limit_are_errors_that_name_it() {
        assert_eq!(per_row(8, MAX_GRID_Y).unwrap().grid_dim.1, 65_535);
        for e in [per_row(8, MAX_GRID_Y + 1), per_head(8, MAX_GRID_Y + 1)] {
            assert!(e.unwrap_err().contains("at most 65535 tokens"));
        }
    }

    #[test]
    fn attention_chunks_bound_the_scratch_and_the_grid() {
        assert_eq!(attention_chunk(8, 40, 7), 7);
        assert_eq!(attention_chunk(8, 100_000, 100_000), 335);
        assert_eq!(attention_chunk(1, 1, 200_000), MAX_GRID_Y);
        assert_eq!(attention_chunk(64, SCORES_FLOATS, 9), 1);
        for (heads, n) in [(8, 7), (14, 32_768), (64, 200_000)] {
            let chunk = attention_chunk(heads, n, n);
            assert!(chunk <= MAX_GRID_Y && (chunk == 1 || chunk * heads * n <= SCORES_FLOATS));
        }
    }
}
