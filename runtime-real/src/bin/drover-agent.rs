//! The `drover-agent` node agent.
fn main() {
    eprintln!("drover-agent: not yet wired");
    std::process::exit(1);
}
