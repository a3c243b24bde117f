//! Stages chained in one process: the whole model (one stage), or a split
//! of it run as the pipeline would run it, activations handed on as f32.

use crate::gguf::file::ModelFile;
use crate::model::{Backend, Config, Logits, Stage, StageError, StageInput, StageOutput};
use std::ops::Range;
use std::path::Path;

/// The stages of one model, in order.
pub struct Chain {
    stages: Vec<Stage>,
}

/// Balanced contiguous layer ranges: `blocks` split into `parts`, the
/// earlier ranges one longer when it does not divide.
pub fn balanced_split(blocks: usize, parts: usize) -> Vec<Range<usize>> {
    let parts = parts.clamp(1, blocks.max(1));
    let (base, extra) = (blocks / parts, blocks % parts);
    let mut start = 0;
    (0..parts)
        .map(|i| {
            let len = base + usize::from(i < extra);
            let r = start..start + len;
            start += len;
            r
        })
        .collect()
}

/// Layer ranges from explicit sizes (`[1, 3, 1]`).
pub fn split_from_sizes(sizes: &[usize]) -> Vec<Range<usize>> {
    let mut start = 0;
    sizes
        .iter()
        .map(|&n| {
            let r = start..start + n;
            start += n;
            r
        })
        .collect()
}

impl Chain {
    /// Opens every range of `split` (which must cover the model's blocks in
    /// order) as a stage; an empty `split` means one stage.
    pub fn open(path: &Path, split: &[Range<usize>], context: usize) -> Result<Chain, StageError> {
        Chain::open_on(path, split, context, Backend::Cpu)
    }

    /// [`Chain::open`] with every stage on `backend`.
    pub fn open_on(
        path: &Path,
        split: &[Range<usize>],
        context: usize,
        backend: Backend,
    ) -> Result<Chain, StageError> {
        let file = ModelFile::open(path)?;
        let blocks = Config::from_header(file.header(), &path.display().to_string())?.blocks;
        let split = if split.is_empty() {
            std::iter::once(0..blocks).collect()
        } else {
            split.to_vec()
        };
        let covers = split.first().is_some_and(|r| r.start == 0)
            && split.last().is_some_and(|r| r.end == blocks)
            && split.windows(2).all(|w| w[0].end == w[1].start);
        if !covers {
            return Err(StageError::Invalid(format!(
                "the split {split:?} does not cover blocks 0..{blocks} in order"
            )));
        }
        let stages = split
            .iter()
            .map(|r| Stage::open_on(path, r.clone(), context, backend))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Chain { stages })
    }

    /// The stages.
    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// The first stage (the model's configuration is on every stage).
    pub fn first(&self) -> &Stage {
        &self.stages[0]
    }

    /// Runs `tokens` through every stage; the last returns logits.
    pub fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>, StageError> {
        let mut out = self.stages[0].forward(StageInput::Tokens(tokens), logits)?;
        for stage in &mut self.stages[1..] {
            let StageOutput::Activations(a) = out else {
                unreachable!("only the last stage returns logits")
            };
            out = stage.forward(StageInput::Activations(&a), logits)?;
        }
        match out {
            StageOutput::Logits(l) => Ok(l),
            StageOutput::Activations(_) => unreachable!("the last stage returns logits"),
        }
    }

    /// Forgets every position from `pos` on, on every stage.
    pub fn truncate(&mut self, pos: usize) {
        self.stages.iter_mut().for_each(|s| s.truncate(pos));
    }

    /// The next position.
    pub fn position(&self) -> usize {
        self.stages[0].position()
    }
}
