#!/usr/bin/env bash
# Run THERE after `tools/device/run.sh side` (which leaves the three side-by-side artifacts in
# /tmp): the prefill GEMM's measurement switches on Llama-3.2-1B (pp512 median of 3 for each),
# then the prefill profile of each model. Same environment as run.sh.
source "$(dirname "$0")/after_side.sh"
a=/tmp/llama-3.2-1b.quantized-8da4w-fp16.vkllm
for e in "VKLLM_X=default" "VKLLM_GEMM_TILE=32" "VKLLM_GEMM_TILE=64" "VKLLM_NO_COOPMAT=1"; do
  env $e "$BIN" bench -m "$a" -p 512 -n 16 -r 3 --output json 2>/dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin); print('VARIANT', sys.argv[1], 'pp512', round(j['pp']['median_tok_s']))" "$e"
done
python3 -c "print('The quick brown fox jumps over the lazy dog. ' * 51)" > /tmp/p512.txt
for m in llama-3.2-1b.quantized-8da4w-fp16 qwen3-0.6b.quantized-8da4w-fp16-embedding phi-4-mini.quantized-8da4w-embedding; do
  echo "== $m"
  VKLLM_PROFILE=1 "$BIN" run -m /tmp/$m.vkllm -f /tmp/p512.txt -n 2 2>&1 >/dev/null | sed -n '/profile, prefill/,/total/p' | cut -c1-80
done
