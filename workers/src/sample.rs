//! Choosing the next token from the last stage's logits.

use crate::rng::SplitMix64;

/// How to sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// 0 is greedy.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// The seed of the random draws.
    pub seed: u64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

/// A sampler: greedy, or seeded draws (same seed and logits, same tokens).
pub struct Sampler {
    sampling: Sampling,
    rng: SplitMix64,
}

impl Sampler {
    /// A sampler for `sampling`.
    pub fn new(sampling: Sampling) -> Sampler {
        Sampler {
            sampling,
            rng: SplitMix64::new(sampling.seed),
        }
    }

    /// The next token for `logits`.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.sampling.temperature <= 0.0 {
            return greedy(logits);
        }
        let mut ranked: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if self.sampling.top_k > 0 {
            ranked.truncate(self.sampling.top_k.max(1));
        }
        let max = ranked[0].1;
        let t = self.sampling.temperature;
        let weights: Vec<f64> = ranked
            .iter()
            .map(|&(_, l)| (((l - max) / t) as f64).exp())
            .collect();
        let total: f64 = weights.iter().sum();
        let mut keep = weights.len();
        if self.sampling.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, w) in weights.iter().enumerate() {
                acc += w / total;
                if acc >= self.sampling.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        let kept: f64 = weights[..keep].iter().sum();
        let mut r = self.rng.next_unit() * kept;
        for (i, w) in weights[..keep].iter().enumerate() {
            if r < *w {
                return ranked[i].0;
            }
            r -= w;
        }
        ranked[keep - 1].0
    }
}

/// The most likely token; of equal logits, the lowest id.
pub fn greedy(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_lowest_id_of_a_tie() {
        assert_eq!(greedy(&[0.5, 2.0, 2.0, 1.0]), 1);
        assert_eq!(greedy(&[3.0, 3.0]), 0);
    }

    #[test]
    fn a_seed_fixes_the_draws_and_another_seed_changes_them() {
        let logits: Vec<f32> = (0..64).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let run = |seed| {
            let mut s = Sampler::new(Sampling {
                temperature: 1.0,
                top_k: 40,
                top_p: 0.95,
                seed,
            });
            (0..50).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn top_k_one_is_greedy() {
        let logits = [0.1, 0.9, 0.3, 0.9];
        let mut s = Sampler::new(Sampling {
            temperature: 2.0,
            top_k: 1,
            top_p: 1.0,
            seed: 3,
        });
        assert!((0..20).all(|_| s.sample(&logits) == 1));
    }
}
