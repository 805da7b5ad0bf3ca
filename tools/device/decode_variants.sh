#!/usr/bin/env bash
# Run THERE after `tools/device/run.sh side` (which leaves the three side-by-side artifacts in
# /tmp): the decode mat-vec's measurement switches (DECODE_VARIANTS, default: rows per subgroup,
# VKLLM_MATVEC_RPS) on each model (tg128 median of 3 for each), then each model's load breakdown
# and decode profile at the default. Same environment as run.sh.
source "$(dirname "$0")/after_side.sh"
models="llama-3.2-1b.quantized-8da4w-fp16 qwen3-0.6b.quantized-8da4w-fp16-embedding phi-4-mini.quantized-8da4w-embedding"
for m in $models; do
  for e in ${DECODE_VARIANTS:-VKLLM_X=default VKLLM_MATVEC_RPS=1 VKLLM_MATVEC_RPS=2 VKLLM_MATVEC_RPS=4}; do
    env $e "$BIN" bench -m /tmp/$m.vkllm -p 16 -n 128 -r 3 --output json 2>/dev/null |
      python3 -c "import json,sys; j=json.load(sys.stdin); print('VARIANT', sys.argv[1], sys.argv[2], 'tg128', round(j['tg']['median_tok_s'], 1))" "$m" "$e"
  done
done
for m in $models; do
  echo "== $m"
  VKLLM_PROFILE=1 "$BIN" run -m /tmp/$m.vkllm -p "Hello" -n 64 2>&1 >/dev/null |
    sed -n -e '/vulkan load/p' -e '/vulkan executor/p' -e '/profile, decode/,/total/p' | cut -c1-96
done
