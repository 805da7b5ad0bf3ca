#!/usr/bin/env bash
# Run THERE (the GPU machine's CPU cores, through the device tool, carry [".gl", ".dev", ".fuzz"]):
#   tools/device/fuzz.sh SECONDS TARGET:PROCESSES...     e.g. 540 artifact:6 hub:2
# Every target fuzzes at once, each in libFuzzer's fork mode with PROCESSES worker processes,
# for about SECONDS, starting from its committed corpus and regression inputs. Timeouts, out-of-memory
# inputs and crashes do not stop a target (they are counted and saved); the logs and every such
# input come back in $OUT/<target>/, and the last status line of each target is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
secs=$1; shift
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
OUT=${OUT:-/tmp/out}
mkdir -p /tmp/fixtures /tmp/fuzz
tar -C /tmp/fixtures -xJf .dev/fixtures.tar.xz
tar -C /tmp/fuzz -xJf .fuzz/bin.tar.xz
export VKLLM_FIXTURES_DIR=/tmp/fixtures
export LD_LIBRARY_PATH=$root/.dev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "binaries of commit $(cat /tmp/fuzz/bin/COMMIT), $(nproc) cores, $(date -u +%FT%TZ)"
for spec in "$@"; do
  t=${spec%%:*} n=${spec##*:}
  w=/tmp/fuzz/work/$t
  mkdir -p "$w/corpus" "$OUT/$t/findings"
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=(-dict="$root/fuzz/dict/$t.dict")
  # A fork-mode run ends after the job in flight at SECONDS (up to a few minutes): the timeout
  # interrupts it 90 s later (libFuzzer still prints its last status line).
  (cd "$w" && timeout -s INT -k 15 $((secs + 90)) /tmp/fuzz/bin/fuzz_$t -fork="$n" -ignore_crashes=1 -max_total_time="$secs" \
    -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/$t/findings/" \
    "${dict[@]}" "$w/corpus" "$root/fuzz/regressions/$t" "$root/fuzz/corpus/$t" \
    >"$OUT/$t/log" 2>&1) &
done
wait
echo "== last status line per target (#executions cov ft corp exec/s oom/timeout/crash time)"
for spec in "$@"; do
  t=${spec%%:*}
  printf '%-18s %s | findings: %s\n' "$t" "$(grep -E '^#[0-9]+' "$OUT/$t/log" | tail -1)" \
    "$(ls "$OUT/$t/findings" | wc -l)"
done
