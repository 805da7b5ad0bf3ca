#!/usr/bin/env bash
# Run THERE after run.sh's setup (sourced environment): Llama-3.2-1B 8da4w-fp16 decode speed for
# each set of disabled fusion patterns (VKLLM_NO_FUSE), then prints the best set as BEST=...
B=${BIN:-.dev/vkllm}; A=/tmp/llama-3.2-1b.quantized-8da4w-fp16.vkllm
[ -d /tmp/full-llama-3.2-1b ] || $B synth --preset llama-3.2-1b -o /tmp/full-llama-3.2-1b --tokenizer-dir /tmp/fixtures/llama3.2 -q >/dev/null
[ -f $A ] || $B export /tmp/full-llama-3.2-1b --recipe quantized-8da4w-fp16 --max-context 4096 -o $A -q >/dev/null 2>&1
best=0; bestv=none
for v in none tail "swiglu tail" "rms_norm tail"; do
  tg=$(VKLLM_NO_FUSE="$v" $B bench -m $A -p 16 -n 128 -r 3 --output json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['tg']['median_tok_s'])")
  echo "COMBO no_fuse=$v tg128 $tg"
  if python3 -c "import sys; sys.exit(0 if float('$tg') > float('$best') else 1)"; then best=$tg; bestv=$v; fi
done
echo "BEST=$bestv"
