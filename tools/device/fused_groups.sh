#!/usr/bin/env bash
# Run THERE (after run.sh has installed the loader, e.g. `tools/device/run.sh physics`): Llama-3.2-1B
# 8da4w-fp16 at a 4,096-token context, decode tg128 (median of 3) at the default and with every
# fused mat-vec run on (VKLLM_FUSE=all) at several grid sizes (VKLLM_FUSED_GROUPS): does the fused
# prologue cost per workgroup or per run?
source "$(dirname "$0")/after_side.sh"
a=/tmp/llama-3.2-1b.quantized-8da4w-fp16.vkllm
[ -d /tmp/full-llama-3.2-1b ] || "$BIN" synth --preset llama-3.2-1b -o /tmp/full-llama-3.2-1b --tokenizer-dir /tmp/fixtures/llama3.2 -q >/dev/null
[ -f "$a" ] || "$BIN" export /tmp/full-llama-3.2-1b --recipe quantized-8da4w-fp16 --max-context 4096 -o "$a" -q 2>&1 | tail -1
for e in ${FUSED_VARIANTS:-VKLLM_X=default VKLLM_FUSE=all "VKLLM_FUSE=all VKLLM_FUSED_GROUPS=132" "VKLLM_FUSE=all VKLLM_FUSED_GROUPS=264" "VKLLM_FUSE=all VKLLM_FUSED_GROUPS=528"}; do
  env $e "$BIN" bench -m "$a" -p 16 -n 128 -r 3 --output json 2>/dev/null |
    python3 -c "import json,sys; j=json.load(sys.stdin); print('VARIANT', sys.argv[1], 'tg128', round(j['tg']['median_tok_s'], 1))" "$e"
done
