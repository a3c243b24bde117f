//! The transformer: hyperparameters, a stage's weights, its forward pass.

pub mod backend;
mod cache;
pub mod config;
pub mod ops;
pub mod stage;
pub mod weights;

pub use backend::Backend;
pub use config::{Arch, Config, RopeLayout};
pub use stage::{Logits, Stage, StageError, StageInput, StageOutput};
