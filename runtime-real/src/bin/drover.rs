//! The `drover` orchestrator CLI.
fn main() {
    eprintln!("drover: not yet wired");
    std::process::exit(1);
}
