//! The stand-in model: integer "activations", one mixing function per
//! layer, and a sampler that hashes the last stage's whole cache, so the
//! next token is a pure function of the token prefix and any cache position
//! a stage gets wrong changes the text.

use core_fsm::rng::DetRng;
use core_fsm::run::DoneReason;

/// Tokens the model knows; prompts use `1..VOCAB`.
pub const VOCAB: u64 = 48;
/// The end-of-sequence token.
pub const EOS: u32 = 0;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A token's row as stage 0 reads it.
pub fn embed(token: u32) -> u64 {
    u64::from(token)
}

/// One layer applied to one row.
pub fn layer(row: u64, layer: u32) -> u64 {
    mix(row ^ (u64::from(layer) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// The layers `start..end` applied to one row.
pub fn layers(row: u64, start: u32, end: u32) -> u64 {
    (start..end).fold(row, layer)
}

/// The next token after the positions whose last-layer rows are `cache`.
pub fn sample(cache: &[u64]) -> u32 {
    let h = cache
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, x| mix(h ^ x));
    (h % VOCAB) as u32
}

/// What a request must produce: every token record (the EOS one included)
/// and how it ends, by the run's rules (`core_fsm::run` serving).
pub fn reference(
    prompt: &[u32],
    model_layers: u32,
    max_tokens: u32,
    context: u32,
) -> (Vec<u32>, u64, DoneReason) {
    let mut cache: Vec<u64> = prompt
        .iter()
        .map(|t| layers(embed(*t), 0, model_layers))
        .collect();
    let mut records = Vec::new();
    loop {
        let token = sample(&cache);
        records.push(token);
        let produced = records.len() as u64;
        let eos = token == EOS;
        let capped = max_tokens > 0 && produced >= u64::from(max_tokens);
        let full = context > 0 && prompt.len() as u64 + produced > u64::from(context);
        let reason = if eos {
            Some(DoneReason::Eos)
        } else if capped {
            Some(DoneReason::MaxTokens)
        } else if full {
            Some(DoneReason::Context)
        } else {
            None
        };
        if let Some(reason) = reason {
            return (records, produced - u64::from(eos), reason);
        }
        cache.push(layers(embed(token), 0, model_layers));
    }
}

/// The prompt and `max_tokens` of request `index` (the first asks for at
/// least 3 tokens, so the faults keyed on its steps are reached).
pub fn request(
    seed: u64,
    index: u32,
    prompt_max: u32,
    max_tokens_max: u32,
    context: u32,
) -> (Vec<u32>, u32) {
    let mut rng = DetRng::new(seed).derive(u64::from(index));
    let len = rng.between(1, u64::from(prompt_max.max(1)));
    let prompt = (0..len).map(|_| rng.between(1, VOCAB - 1) as u32).collect();
    let low = if index == 0 { 3 } else { 1 };
    let mut max_tokens = rng.between(low, u64::from(max_tokens_max.max(low as u32))) as u32;
    // No cap at all only where the context ends the request.
    if context > 0 && index > 0 && rng.ratio(1, 4) {
        max_tokens = 0;
    }
    (prompt, max_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_does_not_change_the_text() {
        let whole = layers(embed(7), 0, 6);
        let split = layers(layers(layers(embed(7), 0, 2), 2, 5), 5, 6);
        assert_eq!(whole, split);
        assert_ne!(sample(&[1, 2]), sample(&[2, 1]).wrapping_add(VOCAB as u32));
    }

    #[test]
    fn reference_follows_the_run_rules() {
        let (records, tokens, reason) = reference(&[5, 6], 4, 3, 0);
        match reason {
            DoneReason::Eos => assert_eq!(tokens + 1, records.len() as u64),
            DoneReason::MaxTokens => assert_eq!((tokens, records.len()), (3, 3)),
            DoneReason::Context => panic!("no context limit"),
        }
        // A context of 3 with a prompt of 2 ends after 2 tokens at most.
        let (records, _, _) = reference(&[5, 6], 4, 0, 3);
        assert!(records.len() <= 2);
    }
}
