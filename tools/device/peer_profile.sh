#!/usr/bin/env bash
# Run THERE after `tools/device/run.sh side` (or `bash .peer/run.sh MODEL`, which writes the peer's
# GGUFs): llama.cpp's own per-op GPU timings (GGML_VK_PERF_LOGGER) for one model's decode, to put
# beside vkllm's VKLLM_PROFILE table of the same shapes. MODEL: llama (default), qwen, phi.
# Prints the logger's last report (an average over PEER_PROFILE_FREQ graphs, default 64).
set -uo pipefail
m=${1:-llama}
case $m in llama) g=llama32_1b ;; qwen) g=qwen3_0_6b ;; phi) g=phi4_mini ;; *) echo "unknown model $m" >&2; exit 2 ;; esac
W=${PEER_WORK:-/tmp/peer}
[ -f "$W/models/$g.gguf" ] || bash "$(dirname "$0")/../../.peer/run.sh" "$m" >/dev/null
GGML_VK_PERF_LOGGER=1 GGML_VK_PERF_LOGGER_FREQUENCY=${PEER_PROFILE_FREQ:-64} BENCH_THREADS=8 \
  "$W/bench" "$W/lib" "$W/models/$g.gguf" 1 1 4096 "$m" >"$W/profile.out" 2>"$W/profile.err"
# The last report: from the last "Vulkan Timings" header on.
awk '/Vulkan Timings/ {buf=""} {buf = buf $0 "\n"} END {printf "%s", buf}' "$W/profile.err" | head -80
grep -E "tg128|pp512" "$W/profile.out" "$W/profile.err" | head -4
