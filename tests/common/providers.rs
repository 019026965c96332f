//! The LLM providers' own code (`tests/providers/check.py`, in the test suite's virtualenv)
//! judging toolgate's tool lists.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::{ci_python, repo_root};

/// Runs `tests/providers/check.py` (each LLM provider's own code) on `dump`, written to `dir`;
/// fails the test saying which check failed; what the checks printed.
pub fn judged_by_providers(dir: &Path, dump: &Value) -> String {
    let path = dir.join("formats.json");
    std::fs::write(&path, serde_json::to_vec_pretty(dump).unwrap()).unwrap();
    let output = Command::new(ci_python())
        .arg(repo_root().join("tests/providers/check.py"))
        .arg(&path)
        .output()
        .expect("python runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the providers' checks failed:\n{said}"
    );
    said
}
