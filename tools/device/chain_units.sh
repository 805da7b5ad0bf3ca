#!/usr/bin/env bash
# Run THERE after run.sh has installed the loader (e.g. `tools/device/run.sh physics`): the decode
# chain (linear_8da4w_chain.comp) on Llama-3.2-1B 8da4w-fp16 (CHAIN_MODEL: llama, or qwen, phi,
# q4w as in decode_ab.sh) at a 4,096-token context: the
# compiler's statistics of the decode kernels (VKLLM_PIPELINE_STATS), tg128 (median of 3) per
# switch (CHAIN_VARIANTS: space-separated, each a comma-separated list of VAR=value), the chain's decode profile, then the chain against the CPU reference on
# the tiny twins (verify --agree; CHAIN_TWINS_ENV, default the default chains, CHAIN_TWINS_STEPS).
# Results also go to $OUT/chain_units.txt.
# CHAIN_PARTS (default "stats variants profile clock twins") picks the parts; clock: the chain's
# phases in SM cycles (VKLLM_CHAIN_CLOCK) at each CHAIN_CLOCK_GROUPS (default "264 132"; an entry
# may add comma-joined VAR=value, e.g. 264,VKLLM_CHAIN_MEASURE=noload).
source "$(dirname "$0")/after_side.sh"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/chain_units.txt") 2>&1
a=$(full_model "${CHAIN_MODEL:-llama}")
parts=" ${CHAIN_PARTS:-stats variants profile clock twins} "
has() { [[ "$parts" == *" $1 "* ]]; }
has stats && for e in VKLLM_X=default VKLLM_CHAIN_GROUPS=-1; do
  echo "== pipeline statistics, $e"
  env $e VKLLM_PIPELINE_STATS=1 timeout 60 "$BIN" bench -m "$a" -p 16 -n 8 -r 1 2>&1 >/dev/null | grep "vkllm: pipeline" | sort -u | cut -c1-300
done
has variants && for e in ${CHAIN_VARIANTS:-VKLLM_X=default VKLLM_CHAIN_GROUPS=-1}; do
  env ${e//,/ } timeout 120 "$BIN" bench -m "$a" -p 16 -n 128 -r 3 --output json 2>/tmp/bench_err.txt |
    python3 -c "import json,sys; j=json.load(sys.stdin); print('VARIANT', sys.argv[1], 'tg128', round(j['tg']['median_tok_s'], 1))" "$e" 2>/dev/null ||
    echo "VARIANT $e failed: $(grep -v '^vkllm: vulkan' /tmp/bench_err.txt | tail -2)"
done
has profile && {
  echo "== decode profile, chains on (${CHAIN_PROFILE_GROUPS:=-1} groups)"
  VKLLM_CHAIN_GROUPS=$CHAIN_PROFILE_GROUPS VKLLM_PROFILE=1 timeout 120 "$BIN" run -m "$a" -p "Hello" -n 64 2>&1 >/dev/null |
    sed -n -e '/profile, decode/,/total/p' | cut -c1-140
}
has clock && for g in ${CHAIN_CLOCK_GROUPS:-264 132}; do
  echo "== chain clock, $g groups"
  env VKLLM_CHAIN_GROUPS=${g//,/ } VKLLM_CHAIN_CLOCK=1 timeout 120 "$BIN" run -m "$a" -p "Hello" -n 128 2>&1 >/dev/null |
    sed -n -e '/chain clock/,$p' | cut -c1-200
done
has twins && for t in tiny-llama3.2:llama3.2 tiny-qwen3:qwen3 tiny-phi4mini:phi4mini; do
  name=${t%%:*}; fam=${t##*:}
  [ -d /tmp/twins/$name ] || "$BIN" synth --preset "$name" -o /tmp/twins/$name --tokenizer-dir /tmp/fixtures/$fam >/dev/null
  for r in quantized-8da4w quantized-8da4w-fp16; do
    "$BIN" export /tmp/twins/$name --recipe $r -o /tmp/c.vkllm -q >/dev/null 2>&1
    line=$(env ${CHAIN_TWINS_ENV:-VKLLM_X=default} timeout 120 "$BIN" verify /tmp/c.vkllm --agree e2e/prompts/$fam.txt -n ${CHAIN_TWINS_STEPS:-50} 2>&1 | grep "agreement\|resident")
    echo "AGREE $name $r ${line:0:200}"
  done
done
