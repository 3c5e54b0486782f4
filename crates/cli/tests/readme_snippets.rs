//! README's "Use it from…" snippets are the tested ones: every file in `tests/snippets/` (which
//! `scripts/test-clients.sh` runs against a fresh server) must appear in README.md verbatim, as
//! a fenced code block of its language, so the two cannot drift apart.

use std::path::Path;

#[test]
fn readme_shows_every_tested_snippet_verbatim() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let mut snippets: Vec<_> = std::fs::read_dir(root.join("tests/snippets"))
        .expect("tests/snippets")
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    snippets.sort();
    assert!(snippets.len() >= 6, "snippets missing: {snippets:?}");
    let mut missing = Vec::new();
    for path in &snippets {
        let fence = match path.extension().and_then(|e| e.to_str()) {
            Some("py") => "python",
            Some("mjs") => "js",
            Some("tf") => "hcl",
            other => panic!("{}: no code-block language for {other:?}", path.display()),
        };
        let text = std::fs::read_to_string(path).expect("a snippet");
        assert!(
            text.ends_with('\n'),
            "{} must end with a newline",
            path.display()
        );
        if !readme.contains(&format!("```{fence}\n{text}```\n")) {
            missing.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "README.md does not show these tests/snippets files verbatim (copy them into its \
         \"Use it from…\" section): {missing:?}"
    );
}
