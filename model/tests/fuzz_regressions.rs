//! Replays every input in `fuzz/regressions/host_pattern/` and `fuzz/seeds/host_pattern/`
//! through the checks the `host_pattern` fuzz target runs, so a crash it found stays fixed
//! under a plain `cargo test`.

#[path = "../../fuzz/host_checks.rs"]
mod host_checks;

use std::path::Path;

#[test]
fn host_pattern_regressions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    for dir in ["regressions", "seeds"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join("host_pattern")) else {
            continue;
        };
        for path in entries.flatten().map(|e| e.path()).filter(|p| p.is_file()) {
            let bytes = std::fs::read(&path).expect("read input");
            let result = std::panic::catch_unwind(|| host_checks::host_pattern(&bytes));
            assert!(result.is_ok(), "{} fails the check", path.display());
            replayed += 1;
        }
    }
    assert!(replayed > 0, "no inputs for host_pattern");
}
