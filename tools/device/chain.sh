#!/usr/bin/env bash
# Run THERE after `tools/device/run.sh side` (artifacts in /tmp): the decode chain
# (linear_8da4w_chain.comp) against the CPU reference on the tiny twins (verify --agree), then
# tg128 (median of 3) of each model with chains on (default), off (VKLLM_NO_CHAIN=1) and at other
# grid sizes, and the chain's decode profile.
source "$(dirname "$0")/after_side.sh"
for t in tiny-llama3.2:llama3.2 tiny-qwen3:qwen3 tiny-phi4mini:phi4mini; do
  name=${t%%:*}; fam=${t##*:}
  [ -d /tmp/twins/$name ] || "$BIN" synth --preset "$name" -o /tmp/twins/$name --tokenizer-dir /tmp/fixtures/$fam >/dev/null
  for r in quantized-8da4w quantized-8da4w-fp16; do
    "$BIN" export /tmp/twins/$name --recipe $r -o /tmp/c.vkllm -q >/dev/null 2>&1
    echo "AGREE $name $r $("$BIN" verify /tmp/c.vkllm --agree e2e/prompts/$fam.txt -n 50 2>&1 | grep agreement)"
  done
done
models="llama-3.2-1b.quantized-8da4w-fp16 qwen3-0.6b.quantized-8da4w-fp16-embedding phi-4-mini.quantized-8da4w-embedding"
for m in $models; do
  for e in ${CHAIN_VARIANTS:-VKLLM_X=default VKLLM_NO_CHAIN=1 VKLLM_CHAIN_GROUPS=264 VKLLM_CHAIN_STAGES=1}; do
    env $e "$BIN" bench -m /tmp/$m.vkllm -p 16 -n 128 -r 3 --output json 2>/dev/null |
      python3 -c "import json,sys; j=json.load(sys.stdin); print('VARIANT', sys.argv[1], sys.argv[2], 'tg128', round(j['tg']['median_tok_s'], 1))" "$m" "$e"
  done
done
for m in $models; do
  echo "== $m"
  VKLLM_PROFILE=1 "$BIN" run -m /tmp/$m.vkllm -p "Hello" -n 64 2>&1 >/dev/null |
    sed -n -e '/profile, decode/,/total/p' | cut -c1-150
done
