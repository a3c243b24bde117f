//! `cargo xtask`: drover's developer tasks.
fn main() {
    eprintln!("xtask: not yet written");
    std::process::exit(2);
}
