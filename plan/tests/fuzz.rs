//! The `plan_validate` fuzz properties on every `cargo test`: the seeds, every crashing input
//! cargo-fuzz ever found (`fuzz/regressions/plan_validate/`), and a bounded, deterministic
//! mutation loop over the seeds (byte flips, cuts and insertions), so the validator is fuzzed
//! even where cargo-fuzz is not installed.

#[path = "../../fuzz/plan_checks.rs"]
mod plan_checks;

use std::path::Path;

fn inputs(dir: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .filter(|p| p.is_file())
        .filter_map(|p| std::fs::read(p).ok())
        .collect()
}

#[test]
fn seeds_and_regressions_hold_every_property() {
    let seeds = inputs("seeds/plan_validate");
    assert!(seeds.len() >= 3, "seeds missing");
    for input in seeds.iter().chain(&inputs("regressions/plan_validate")) {
        plan_checks::plan_validate(input);
    }
}

#[test]
fn thousands_of_mutated_seeds_hold_every_property() {
    let seeds = inputs("seeds/plan_validate");
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rand = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for round in 0..20_000usize {
        let mut input = seeds[round % seeds.len()].clone();
        for _ in 0..=(rand() % 4) {
            let at = (rand() as usize) % input.len().max(1);
            match rand() % 4 {
                0 if !input.is_empty() => input[at] ^= 1 << (rand() % 8),
                1 => input.truncate(at),
                2 => input.insert(at.min(input.len()), rand() as u8),
                _ if !input.is_empty() => input[at] = b"{}[]\":,0123abs"[(rand() % 14) as usize],
                _ => input.push(rand() as u8),
            }
        }
        plan_checks::plan_validate(&input);
    }
}
