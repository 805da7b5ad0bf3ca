#!/usr/bin/env bash
# Run THERE after `tools/device/run.sh side` (artifacts in /tmp): the decode chain
# (linear_8da4w_chain.comp) against the CPU reference on the tiny twins (verify --agree), then
# tg128 (median of 3) of each model with chains off (the default) and on, and the decode profiles.
source "$(dirname "$0")/after_side.sh"
for t in tiny-llama3.2:llama3.2 tiny-qwen3:qwen3 tiny-phi4mini:phi4mini; do
  name=${t%%:*}; fam=${t##*:}
  [ -d /tmp/twins/$name ] || "$BIN" synth --preset "$name" -o /tmp/twins/$name --tokenizer-dir /tmp/fixtures/$fam >/dev/null
  for r in quantized-8da4w quantized-8da4w-fp16; do
    "$BIN" export /tmp/twins/$name --recipe $r -o /tmp/c.vkllm -q >/dev/null 2>&1
    line=$(VKLLM_CHAIN_GROUPS=-1 "$BIN" verify /tmp/c.vkllm --agree e2e/prompts/$fam.txt -n 50 2>&1 | grep agreement)
    echo "AGREE $name $r $line"
  done
done
# tg128 per switch and each model's decode profile (decode_variants.sh).
DECODE_VARIANTS=${CHAIN_VARIANTS:-"VKLLM_X=default VKLLM_CHAIN_GROUPS=-1"} \
  bash "$(dirname "$0")/decode_variants.sh"
