#!/usr/bin/env bash
# The ctest smoke of one fuzz target (label `fuzz`): replay every regression input and the seed
# corpus, then fuzz for a few seconds. New inputs and crash files go to a scratch folder, never
# into the committed corpus. Usage: smoke.sh FUZZER SCRATCH REGRESSIONS CORPUS SECONDS [FLAGS...]
set -euo pipefail
fuzzer=$1 scratch=$2 regressions=$3 corpus=$4 seconds=$5
shift 5
rm -rf "$scratch"
mkdir -p "$scratch"
common=(-timeout=10 -rss_limit_mb=2048 -artifact_prefix="$scratch/" "$@")
echo "== replay: $regressions $corpus"
"$fuzzer" "${common[@]}" -runs=0 "$regressions" "$corpus"
echo "== fuzz ${seconds}s"
"$fuzzer" "${common[@]}" -max_total_time="$seconds" -print_final_stats=1 "$scratch" "$regressions" "$corpus"
