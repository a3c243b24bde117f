//! A pipeline checked against its model before anything is rented: the
//! model file (fetched if the plan names a url), the stage split, each
//! stage's weights, and the table `drover plan` shows.

use super::download;
use super::model::Model;
use super::spec::{ModelSource, PipelineSpec};
use super::wire::WeightsRef;
use core_fsm::ids::LogicalNodeId;
use core_fsm::plan::RunPlan;
use core_fsm::run::{self, StageAssignment};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A pipeline checked against its model before anything is rented.
pub struct Prepared {
    /// The plan's sections.
    pub spec: PipelineSpec,
    /// The model.
    pub model: Arc<Model>,
    /// The stages.
    pub plan: Vec<StageAssignment>,
    /// Each stage's weights.
    pub weights: Vec<WeightsRef>,
    /// Repairs the run may make (the plan's replacements: 0 with policy
    /// `none`, `attempts_max - 1` per stage's node with `bounded`).
    pub repairs_max: u32,
}

impl Prepared {
    /// The stage table as JSON (`drover plan --json`).
    pub fn to_json(&self) -> serde_json::Value {
        let stages: Vec<_> = self
            .plan
            .iter()
            .zip(&self.weights)
            .map(|(a, w)| {
                serde_json::json!({
                    "stage": a.stage, "node": a.node.as_str(), "layers": a.layers.to_string(),
                    "tensor_bytes": w.slice_bytes, "header_bytes": w.header_len,
                })
            })
            .collect();
        serde_json::json!({
            "model": self.model.path.display().to_string(), "layers": self.model.layers(),
            "model_bytes": self.model.size, "sha256": self.model.digest, "stages": stages,
        })
    }

    /// The stage table `drover plan` shows.
    pub fn table(&self) -> String {
        let mut out = format!(
            "model {} ({} layers, {} bytes, sha256 {})\n",
            self.model.path.display(),
            self.model.layers(),
            self.model.size,
            &self.model.digest[..16]
        );
        out.push_str("stage  node          layers   slice bytes (header + tensors)\n");
        for (a, w) in self.plan.iter().zip(&self.weights) {
            out.push_str(&format!(
                "{:<6} {:<13} {:<8} {}\n",
                a.stage,
                a.node.as_str(),
                a.layers.to_string(),
                w.slice_bytes + w.header_len
            ));
        }
        out
    }
}

/// Why a pipeline could not be prepared.
#[derive(Debug)]
pub enum PrepareError {
    /// The plan, the model file or its digest is wrong (exit code 2).
    Plan(String),
    /// The model could not be fetched; running again resumes (exit code 1).
    Fetch(String),
}

impl std::fmt::Display for PrepareError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrepareError::Plan(e) | PrepareError::Fetch(e) => f.write_str(e),
        }
    }
}

/// The model file of `spec`: its path, or the file a url names, fetched
/// into the state dir unless it is there (`fetch` false: only if there).
pub async fn model_file(
    spec: &PipelineSpec,
    state_dir: &Path,
    fetch: bool,
) -> Result<std::path::PathBuf, PrepareError> {
    match &spec.model {
        ModelSource::Path(path) => Ok(path.clone()),
        ModelSource::Url { url, sha256 } => {
            let kept = crate::state_dir::StateDir::at(state_dir)
                .models()
                .join(format!("{sha256}.gguf"));
            if !fetch && !kept.is_file() {
                return Err(PrepareError::Fetch(format!(
                    "model url {url}: not fetched yet (`drover up` fetches it into {})",
                    kept.display()
                )));
            }
            download::model(state_dir, url, sha256).await
        }
    }
}

/// Opens the model at `path` and plans the stages; every problem is a plan
/// error.
pub fn prepare(plan: &RunPlan, spec: PipelineSpec, path: &Path) -> Result<Prepared, String> {
    let model = Model::open(path)?;
    let nodes = nodes_of(plan, &spec)?;
    let stages = nodes.len() as u32;
    let repairs_max = match plan.replacement {
        core_fsm::plan::ReplacementPolicy::None => 0,
        core_fsm::plan::ReplacementPolicy::Bounded { attempts_max, .. } => {
            attempts_max.saturating_sub(1).saturating_mul(stages)
        }
    };
    let plan = run::plan_split(model.config.blocks as u32, stages, &nodes, &spec.split)
        .map_err(|e| format!("pipeline: {e}"))?;
    let ranges: Vec<_> = plan
        .iter()
        .map(|a| a.layers.start as usize..a.layers.end_exclusive as usize)
        .collect();
    let (model, weights) = model.hash(&ranges, hashing(path))?;
    if let ModelSource::Url { sha256, .. } = &spec.model
        && model.digest != *sha256
    {
        return Err(format!(
            "{}: sha256 {}, the plan says {sha256}",
            path.display(),
            model.digest
        ));
    }
    Ok(Prepared {
        spec,
        model: Arc::new(model),
        plan,
        weights,
        repairs_max,
    })
}

/// How often hashing a model says how far it got (a model read in less
/// says nothing).
const HASHING_PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// Progress of hashing the model at `path`, on stderr.
fn hashing(path: &Path) -> impl FnMut(u64, u64) {
    let path = path.display().to_string();
    let mut shown = super::every::Every::new(HASHING_PROGRESS_EVERY);
    move |done, total| {
        if done < total && shown.due() {
            crate::say::err!(
                "drover: hashing the model {path}: {} of {} MiB",
                done >> 20,
                total >> 20
            );
        }
    }
}

fn nodes_of(plan: &RunPlan, spec: &PipelineSpec) -> Result<Vec<LogicalNodeId>, String> {
    let group = plan
        .groups
        .iter()
        .find(|g| g.group_id.as_str() == spec.group)
        .ok_or_else(|| format!("pipeline.group: no group `{}`", spec.group))?;
    Ok((0..group.count)
        .map(|i| core_fsm::plan::node_id(&group.group_id, i))
        .collect())
}
