//! The invariants ARCHITECTURE.md states about where knowledge lives, checked on the sources:
//! the lease engine has no I/O, only `leaseq-sqs` names SQS actions, and only the server reads
//! the real clock. A violation names the file and the line.

use std::path::{Path, PathBuf};

/// The workspace's `crates/` directory.
fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crates/server has a parent")
        .to_path_buf()
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                found.push((path, text));
            }
        }
    }
    found
}

/// The lines of `crate_name/src` (outside `#[cfg(test)]` modules, which follow their code)
/// that contain any of `needles`.
fn lines_with(crate_name: &str, needles: &[String]) -> Vec<String> {
    let mut hits = Vec::new();
    for (path, text) in sources(&crates_dir().join(crate_name).join("src")) {
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (number, line) in code.lines().enumerate() {
            let trimmed = line.trim_start();
            if trimmed.starts_with("//") {
                continue;
            }
            if needles.iter().any(|needle| line.contains(needle.as_str())) {
                hits.push(format!(
                    "{}:{}: {}",
                    path.display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    hits
}

/// The SQS action names the decoder knows, read off its dispatch (`"CreateQueue" => ...`).
fn action_names() -> Vec<String> {
    let decoder = crates_dir().join("sqs/src/decode/mod.rs");
    let text = std::fs::read_to_string(decoder).unwrap();
    let names: Vec<String> = text
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix('"')?;
            let (name, after) = rest.split_once('"')?;
            let is_arm =
                after.trim_start().starts_with("=>") || after.trim_start().starts_with('|');
            (is_arm && name.chars().all(|c| c.is_ascii_alphanumeric())).then(|| name.to_string())
        })
        .collect();
    assert!(
        names.iter().any(|name| name == "SendMessage") && names.len() >= 20,
        "the decoder's dispatch changed shape; found {names:?}"
    );
    names
}

#[test]
fn the_core_has_no_io() {
    let needles: Vec<String> = [
        "SystemTime",
        "Instant::now",
        "std::fs",
        "std::net",
        "tokio",
        "thread::spawn",
        "rand::",
        "thread_rng",
    ]
    .map(String::from)
    .to_vec();
    let hits = lines_with("core", &needles);
    assert!(hits.is_empty(), "I/O in leaseq-core:\n{}", hits.join("\n"));
}

#[test]
fn only_the_sqs_crate_names_sqs_actions() {
    let mut needles: Vec<String> = action_names()
        .into_iter()
        .map(|name| format!("\"{name}\""))
        .collect();
    needles.push("AmazonSQS.".to_string());
    for crate_name in ["core", "wal", "server"] {
        let hits = lines_with(crate_name, &needles);
        assert!(
            hits.is_empty(),
            "SQS action names outside leaseq-sqs:\n{}",
            hits.join("\n")
        );
    }
}

#[test]
fn only_the_server_clock_reads_the_real_time() {
    let needles = ["SystemTime::now".to_string()];
    let hits: Vec<String> = ["core", "wal", "sqs", "server"]
        .into_iter()
        .flat_map(|crate_name| lines_with(crate_name, &needles))
        .filter(|hit| !hit.contains("server/src/clock.rs"))
        .collect();
    assert!(
        hits.is_empty(),
        "wall-clock reads outside server::clock:\n{}",
        hits.join("\n")
    );
}
