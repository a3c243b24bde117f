//! The BootstrapSession: SSH from endpoint to agent convergence (seed 000 §11-12).
