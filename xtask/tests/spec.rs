//! SPEC.md is the join of `spec/`: it must be current and list every part.

use xtask::spec;

#[test]
fn spec_md_is_current() {
    let root = xtask::workspace_root();
    let want = spec::render(&root).expect("spec parts are readable");
    let have = std::fs::read_to_string(root.join("SPEC.md")).unwrap_or_default();
    assert!(
        have == want,
        "SPEC.md is stale: run `cargo xtask spec` and commit it"
    );
}

#[test]
fn every_part_is_placed() {
    let unlisted = spec::unlisted_parts(&xtask::workspace_root()).expect("spec/ is readable");
    assert!(
        unlisted.is_empty(),
        "add these to xtask::spec::PARTS: {unlisted:?}"
    );
}

#[test]
fn nested_headings_skip_code_fences() {
    let text = "# Title\n\n## Sub\n\n```toml\n# a comment\n```\n";
    assert_eq!(
        spec::nest_headings(text),
        "## Title\n\n### Sub\n\n```toml\n# a comment\n```\n"
    );
    let already = "## Part\n# not a heading here? it is, but the part starts at two\n";
    assert_eq!(spec::nest_headings(already), already);
}
