//! The `drover` orchestrator CLI: `up`, `plan`, `status`, `logs`, `down`
//! (and the hidden `local-node`, the process that plays a rented machine).
//! Exit codes: 0 success or controlled shutdown, 1 runtime failure, 2 a
//! configuration error (nothing was written).

fn main() {
    let cli = <runtime_real::cli::Cli as clap::Parser>::parse();
    std::process::exit(runtime_real::cli::main(cli));
}
