#!/usr/bin/env bash
# The long fuzz campaign (docs/robustness.md), outside CI: each target in turn, one process at the
# lowest CPU priority, until 10 million executions or one hour, whichever comes first.
#   fuzz/run_campaign.sh [TARGET...]        (default: every target)
# Environment: VKLLM_FUZZ_BUILD (default build/asan), VKLLM_FUZZ_RUNS (10000000),
# VKLLM_FUZZ_SECONDS (3600). The work corpus, libFuzzer's log (fuzz-0.log) and any crash file go
# to $VKLLM_FUZZ_BUILD/fuzz/campaign/<target>/; the last lines printed per target are the figures
# of the table in docs/robustness.md. A crash input belongs in fuzz/regressions/<target>/ once
# fixed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$(realpath "${VKLLM_FUZZ_BUILD:-build/asan}")
runs=${VKLLM_FUZZ_RUNS:-10000000}
secs=${VKLLM_FUZZ_SECONDS:-3600}
targets=("$@")
[ ${#targets[@]} -gt 0 ] ||
  targets=(safetensors st_index config tokenizer_load tokenizer_encode artifact artifact_meta hub)
for t in "${targets[@]}"; do
  w=$build/fuzz/campaign/$t
  mkdir -p "$w/corpus" "$w/crashes"
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  echo "== $t: start $(date -u +%FT%TZ)"
  start=$SECONDS
  (cd "$w" && nice -n 19 "$build/fuzz/fuzz_$t" -jobs=1 -workers=1 -runs="$runs" \
    -max_total_time="$secs" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$w/crashes/" "${dict[@]}" "$w/corpus" "$root/fuzz/regressions/$t" \
    "$root/fuzz/corpus/$t" > "$w/driver.log" 2>&1)
  echo "   exit $?, $((SECONDS - start)) s: $(grep -E '^#[0-9]+' "$w/fuzz-0.log" | tail -1)"
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$w/fuzz-0.log"
  ls "$w/crashes" | sed 's/^/   finding: /'
done
