#!/usr/bin/env bash
# Run THERE after `tools/device/run.sh info` (which installs the loader): decode A/B of builds and
# switches on full-shape models at a 4,096-token context. AB_MODELS (default "llama"; also qwen,
# phi, and q4w: Llama-3.2-1B quantized-int4-weight-only) picks the models (synthesized and exported if /tmp lacks them); AB_VARIANTS holds
# space-separated entries BIN[:VAR=v,VAR=v] (BIN a binary in .dev, e.g. vkllm or vkllm_old); each
# variant's tg128 (median of 3) is measured AB_ROUNDS times (default 2), the variants interleaved so
# that the machine's drift falls on all of them alike. Prints "AB <model> <variant> <round> <tg128>".
# AB_DEPTH (default 0): bench's -d, the prompt before the 128 decoded tokens (e.g. 3500: decode at
# positions 3,500-3,628 of the 4,096-token context; 0: after a one-token prompt).
# AB_PROFILE=REGEX: instead, each variant's decode profile (VKLLM_PROFILE, 512-token prompt, 64
# steps), its rows matching REGEX, as "PROF <model> <variant> <round> <row>".
source "$(dirname "$0")/after_side.sh"
# One untimed bench first: the GPU's first work after a cold start ran 3.8x slower on every
# profile row (docs/perf.md, "Measuring").
w=${AB_MODELS:-llama}
w=$(full_model "${w%% *}")
timeout 120 "$BIN" bench -m "$w" -p 16 -n 64 -r 1 >/dev/null 2>&1 || true
for m in ${AB_MODELS:-llama}; do
  a=$(full_model "$m")
  for round in $(seq 1 ${AB_ROUNDS:-2}); do
    for v in ${AB_VARIANTS:-vkllm}; do
      b=${v%%:*}; e=; [[ "$v" == *:* ]] && e=${v#*:}
      if [ -n "${AB_PROFILE:-}" ]; then  # the decode profile's rows matching AB_PROFILE instead
        [ -f /tmp/p512.txt ] || python3 -c "print('The quick brown fox jumps over the lazy dog. ' * 51)" > /tmp/p512.txt
        env ${e//,/ } VKLLM_PROFILE=1 timeout 120 "$PWD/.dev/$b" run -m "$a" -f /tmp/p512.txt -n 64 2>&1 >/dev/null |
          sed -n '/profile, decode/,/total/p' | grep -E "$AB_PROFILE" | sed "s/^/PROF $m $v $round /" | cut -c1-160
        continue
      fi
      env ${e//,/ } timeout 120 "$PWD/.dev/$b" bench -m "$a" -p 16 -d ${AB_DEPTH:-0} -n 128 -r 3 --output json 2>/tmp/ab_err.txt |
        python3 -c "import json,sys; j=json.load(sys.stdin); print('AB', sys.argv[1], sys.argv[2], sys.argv[3], round(j['tg']['median_tok_s'], 1))" "$m" "$v" "$round" 2>/dev/null ||
        echo "AB $m $v $round failed: $(grep -v '^vkllm: vulkan' /tmp/ab_err.txt | tail -2)"
    done
  done
done
