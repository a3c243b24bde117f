//! The one effect loop.
