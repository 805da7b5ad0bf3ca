#!/usr/bin/env bash
# Run THERE after `tools/device/run.sh side` (which leaves the three side-by-side artifacts in
# /tmp): the prefill GEMM's measurement switches (PREFILL_VARIANTS, space-separated, each a
# comma-separated list of VAR=value) through `vkllm bench --gemm` (with the GEMM pipelines'
# registers) and on the pp512 (median of 3) of PREFILL_MODELS (default: Llama-3.2-1B's artifact; empty: none),
# then the prefill profile of each model (PREFILL_PROFILES= empty: none). PREFILL_ROWS (an
# extended regex, e.g. 'attention|rope|total'): also each variant's prefill profile rows that
# match, for each model of PREFILL_MODELS (a 511-token prompt).
# Same environment as run.sh.
source "$(dirname "$0")/after_side.sh"
python3 -c "print('The quick brown fox jumps over the lazy dog. ' * 51)" > /tmp/p512.txt
# One untimed bench first: a fresh machine's first GPU work runs slow (a first pp512 once read
# 20,018 against ~63,000 for the same build a minute later; decode_ab.sh does the same).
for m in ${PREFILL_MODELS-llama-3.2-1b.quantized-8da4w-fp16}; do
  timeout 120 "$BIN" bench -m /tmp/$m.vkllm -p 512 -n 16 -r 1 >/dev/null 2>&1 || true
  break
done
for v in ${PREFILL_VARIANTS:-VKLLM_X=default VKLLM_GEMM_TILE=32 VKLLM_GEMM_TILE=64 VKLLM_NO_COOPMAT=1}; do
  e=(${v//,/ })
  echo "== VARIANT $v"
  env "${e[@]}" VKLLM_PIPELINE_STATS=1 "$BIN" bench --gemm 2>&1 | grep -E 'linear_8da4w_mm' | cut -c1-400
  for m in ${PREFILL_MODELS-llama-3.2-1b.quantized-8da4w-fp16}; do
    env "${e[@]}" "$BIN" bench -m /tmp/$m.vkllm -p 512 -n 16 -r 3 --output json 2>/dev/null |
      python3 -c "import json,sys; j=json.load(sys.stdin); print('VARIANT', sys.argv[1], sys.argv[2], 'pp512', round(j['pp']['median_tok_s']))" "$v" "$m"
    [ -n "${PREFILL_ROWS-}" ] || continue
    env "${e[@]}" VKLLM_PROFILE=1 "$BIN" run -m /tmp/$m.vkllm -f /tmp/p512.txt -n 2 2>&1 >/dev/null |
      sed -n '/profile, prefill/,/total/p' | grep -E "$PREFILL_ROWS" | cut -c1-90 | sed "s|^|ROWS $v $m |"
  done
done
[ -n "${PREFILL_PROFILES-1}" ] || exit 0
for m in llama-3.2-1b.quantized-8da4w-fp16 qwen3-0.6b.quantized-8da4w-fp16-embedding phi-4-mini.quantized-8da4w-embedding; do
  [ -f /tmp/$m.vkllm ] || continue
  echo "== $m"
  VKLLM_PROFILE=1 "$BIN" run -m /tmp/$m.vkllm -f /tmp/p512.txt -n 2 2>&1 >/dev/null | sed -n '/profile, prefill/,/total/p' | cut -c1-80
done
