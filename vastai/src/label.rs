//! The provider label drover writes on every instance:
//! `drover:run-<run>:<logical node>:nonce-<nonce>`. The one label of every
//! provider lives beside the nonce it carries, in `core_fsm::ids`.

pub use core_fsm::ids::{LABEL_PREFIX, LeaseLabel};

/// Vast.ai accepts labels up to this many characters at create time.
pub const LABEL_LEN_MAX: usize = 256;
