//! The process exit codes every `drover` command returns. A leaf: `cli`
//! and `up` both use it, and neither imports the other for it.

/// Success, or a controlled shutdown after which every lease is gone.
pub const EXIT_OK: i32 = 0;
/// A runtime failure (a node failed, a destroy failed, I/O).
pub const EXIT_FAILURE: i32 = 1;
/// A configuration error (bad plan, bad arguments); nothing was written.
pub const EXIT_CONFIG: i32 = 2;
