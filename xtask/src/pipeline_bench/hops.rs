//! The hop tables of `cargo xtask bench pipeline`: models whose compute
//! does not hide what an extra stage adds to a token.

use super::{Rates, stage_rates};
use crate::worker::{bench_model, stories};
use std::path::Path;

/// A table of a model whose compute is small: 200 decode tokens, 9
/// interleaved rounds, every core.
fn hop_rates(bin: &Path, model: &Path, name: &str) -> Result<(), String> {
    let rates = Rates {
        model,
        name,
        decode: 200,
        repeats: 9,
        threads: 0,
        prefill: None,
        reference: None,
    };
    stage_rates(bin, &rates)
}

/// The hop tables: what an extra stage adds to a token when the stages'
/// compute does not hide it.
pub(super) fn hops(bin: &Path) -> Result<(), String> {
    let worker = bin.join("drover-worker");
    // The hop alone: a model whose compute is a few microseconds a token,
    // so what each extra stage adds is its edge (worker, agent, iroh, the
    // next agent and worker), not the arithmetic.
    println!(
        "model {} (TinyStories 260K: compute is negligible, so this is the hop itself); 200 decode tokens, 9 interleaved rounds",
        stories().display()
    );
    hop_rates(bin, &stories(), "stories")?;
    // The hop of the 0.5B fixture's 1536-wide activation row (6 KiB a
    // token) with little arithmetic: one head of 16 and ff 32, so a block
    // is 0.2M weights and every block's product (q, k and v together; gate
    // and up together) stays under the size that goes to the worker's
    // pool (the last stage's output head goes to it, once a token at every
    // stage count): what an extra stage adds is the row's hop.
    let row = bench_model(
        &worker,
        "tiny,dim=1536,layers=4,heads=1,kv_heads=1,head_dim=16,ff=32",
        "q8_0",
    )?;
    println!(
        "model {} (the 0.5B's width, 1536, with one head of 16 and ff 32: the hop of a 6 KiB activation row); 200 decode tokens, 9 interleaved rounds",
        row.display()
    );
    hop_rates(bin, &row, "row")?;
    // The same row behind the 0.5B's attention (12 heads of 128, ff 64):
    // about 1 ms of compute a token on two cores, spread over the stages,
    // each of which now wakes its pool's threads for its products. What an
    // extra stage adds here is the hop and the cost of one more pool.
    let wide = bench_model(
        &worker,
        "tiny,dim=1536,layers=4,heads=12,kv_heads=2,ff=64",
        "q8_0",
    )?;
    println!(
        "model {} (the 0.5B's width and attention, 12 heads, ff 64: about 1 ms of compute a token in pools, spread over the stages); 200 decode tokens, 9 interleaved rounds",
        wide.display()
    );
    hop_rates(bin, &wide, "wide")
}
