#!/usr/bin/env bash
# Builds the cargo-fuzz targets in fuzz/ and runs each for a bounded time, one process each,
# one after the other. Not part of scripts/test.sh: crashes it finds become regression inputs
# in fuzz/regressions/<target>/, which `cargo test -p ari-runtime --test fuzz_regressions` replays.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     # default 60 s; host_pattern allowlist attestation load
#
# Environment: ARI_FUZZ_TARGET_DIR (build dir, default ~/.cache/ari/fuzz-target),
# FUZZ_SANITIZER (none|address, default none: the code under test is safe Rust plus Wasmtime;
# `address` finds memory errors in unsafe code at ~3x the cost).
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`) and a nightly toolchain
# (`rustup toolchain install nightly --profile minimal`); without nightly it falls back to
# RUSTC_BOOTSTRAP=1 on stable.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
secs="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(host_pattern allowlist attestation load)
target_dir="${ARI_FUZZ_TARGET_DIR:-$HOME/.cache/ari/fuzz-target}"
sanitizer="${FUZZ_SANITIZER:-none}"

command -v cargo-fuzz >/dev/null || {
  echo "fuzz: cargo-fuzz missing: cargo install cargo-fuzz --locked" >&2
  exit 2
}
if rustup toolchain list | grep -q '^nightly'; then
  cargo=(cargo +nightly)
else
  echo "fuzz: no nightly toolchain; using RUSTC_BOOTSTRAP=1 on stable" >&2
  export RUSTC_BOOTSTRAP=1
  cargo=(cargo)
fi

cd "$repo/fuzz"
for t in "${targets[@]}"; do
  "${cargo[@]}" fuzz build -s "$sanitizer" -a --target-dir "$target_dir" "$t"
done

status=0
summary=()
for t in "${targets[@]}"; do
  corpus="$repo/fuzz/corpus/$t"
  mkdir -p "$corpus" "$repo/fuzz/artifacts/$t"
  # Real agent components are the best starting points for mutating modules.
  if [ "$t" = load ] && [ -d "$repo/target/agents" ]; then
    cp -n "$repo"/target/agents/*.wasm "$corpus/" 2>/dev/null || true
  fi
  dict=()
  [ -f "$repo/fuzz/$t.dict" ] && dict=(-dict="$repo/fuzz/$t.dict")
  log="$repo/fuzz/artifacts/$t/last-run.log"
  echo "fuzz: $t for ${secs}s"
  set +e
  "${cargo[@]}" fuzz run -s "$sanitizer" -a --target-dir "$target_dir" "$t" \
    "$corpus" "$repo/fuzz/seeds/$t" "$repo/fuzz/regressions/$t" -- \
    -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -max_len=1048576 \
    -print_final_stats=1 "${dict[@]}" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  if [ "$rc" -ne 0 ]; then
    status=1
    crash=$(grep -o "Test unit written to .*" "$log" | tail -1 | sed 's/Test unit written to //')
    summary+=("$t: FAILED after ${execs:-?} executions; input: ${crash:-see $log}")
    grep -m3 -E "panicked|ERROR: libFuzzer" "$log" >&2 || true
  else
    summary+=("$t: ${secs}s, ${execs:-?} executions, corpus $(ls "$corpus" | wc -l) inputs, no crash")
  fi
done
printf 'fuzz: %s\n' "${summary[@]}"
if [ "$status" -ne 0 ]; then
  echo "fuzz: copy each crashing input to fuzz/regressions/<target>/, fix the cause, and" \
    "cargo test -p ari-runtime --test fuzz_regressions" >&2
fi
exit "$status"
