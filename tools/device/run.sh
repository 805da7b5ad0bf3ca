#!/usr/bin/env bash
# Run THERE (the GPU machine, through the device tool, carry [".gl", ".dev"], and ".peer" for the
# tasks beside the peer: side, families-side, parallel, sizes):
#   tools/device/run.sh TASK...   with TASK one of: info goldens vulkan-tests op-perf twins e2e perf profile bench side ab families-side parallel parallel-profile serve-load schema sizes profile-all physics gemm matvec
# Brings the Vulkan loader, points at the NVIDIA ICD, unpacks the fixtures, runs the tasks and
# prints a short table last. Results go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/fixtures /tmp/twins
tar -C /tmp/fixtures -xJf .dev/fixtures.tar.xz
BIN=$PWD/.dev/vkllm
for t in .dev/*.tar.xz; do [ "$t" = .dev/fixtures.tar.xz ] || tar -C .dev -xJf "$t"; done
export LD_LIBRARY_PATH=$PWD/.dev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
summary=()

# synth_twins [name:family ...]: the twins (default the three seed twins) under /tmp/twins.
synth_twins() {
  for t in ${@:-tiny-qwen3:qwen3 tiny-llama3.2:llama3.2 tiny-phi4mini:phi4mini}; do
    name=${t%%:*}; fam=${t##*:}
    [ -d /tmp/twins/$name ] || "$BIN" synth --preset "$name" -o /tmp/twins/$name --tokenizer-dir /tmp/fixtures/$fam
  done
}

# full_artifact PRESET FAMILY RECIPE: the artifact of the preset's full-shape synth checkpoint at
# a 4,096-token context, made once a machine under /tmp; prints its path.
full_artifact() {
  local d=/tmp/full-$1 a=/tmp/$1.$3.vkllm
  [ -d "$d" ] || "$BIN" synth --preset "$1" -o "$d" --tokenizer-dir /tmp/fixtures/$2 -q >/dev/null
  [ -f "$a" ] || "$BIN" export "$d" --recipe "$3" --max-context 4096 -o "$a" -q 2>&1 | tail -1 >&2
  echo "$a"
}

# preset_family PRESET: the tokenizer fixture of a synth preset's checkpoint.
preset_family() {
  case $1 in llama*|smollm3*) echo llama3.2 ;; gemma*) echo gemma3 ;; phi*) echo phi4mini ;; *) echo qwen3 ;; esac
}

# peer_unpack: the peer's harness, libraries and vocabularies (carried in .peer) under /tmp/peer,
# where .peer/run.sh (task side) finds them too.
peer_unpack() {
  W=/tmp/peer
  [ -f $W/bench ] || {
    mkdir -p $W/lib $W/tok $W/models
    tar -xJf .peer/libs.tar.xz -C $W/lib
    [ ! -f .peer/tok.tar.xz ] || tar -xJf .peer/tok.tar.xz -C $W/tok
    cp .peer/bench $W/bench
  }
}

# peer_bench PRESET RUNS REPS: a Q4_0 GGUF of the preset's shapes and vocabulary
# (tools/device/peer_gguf.py), the peer's harness on it RUNS times (REPS repetitions each, flash
# attention on, 4,096-token context), then one line: PEER PRESET pp512 X | tg128 Y | gpu_mib Z,
# the better median of the runs (the peer's first repetitions after a load are often slow).
peer_bench() {
  peer_unpack
  local g=$W/models/$1.gguf
  python3 tools/device/peer_gguf.py "$1" "/tmp/fixtures/$(preset_family "$1")/tokenizer.json" "$g" >/dev/null || return 1
  : >/tmp/peer.txt
  local r ok=0
  for r in $(seq "$2"); do
    BENCH_THREADS=8 timeout 300 $W/bench $W/lib "$g" 1 "$3" 4096 "$1" >>/tmp/peer.txt 2>/tmp/peer.err && ok=1 || tail -2 /tmp/peer.err
  done
  rm -f "$g"
  best() { sed -n "s/.* $1 t\/s: median \([0-9.]*\).*/\1/p" /tmp/peer.txt | sort -g | tail -1; }
  local mem
  mem=$(sed -n 's/.*vk_mem_used_GiB: after_ctx [0-9.]* end \([0-9.]*\).*/\1/p' /tmp/peer.txt | tail -1)
  echo "PEER $1 pp512 $(best pp512) | tg128 $(best tg128) | gpu_mib $(python3 -c "print(round(float('${mem:-0}') * 1024))")"
  [ $ok = 1 ]
}

llama1b() {
  [ -f /tmp/llama1b.vkllm ] && return
  "$BIN" synth --preset llama-3.2-1b -o /tmp/llama1b --tokenizer-dir /tmp/fixtures/llama3.2 -q
  /usr/bin/time -v "$BIN" export /tmp/llama1b --recipe quantized-8da4w-fp16 -o /tmp/llama1b.vkllm 2>/tmp/export.time
  grep -E "Maximum resident|Elapsed" /tmp/export.time
  python3 -c "print('The quick brown fox jumps over the lazy dog. ' * 51)" > /tmp/p512.txt
}

for task in "$@"; do
  start=$(date +%s)
  case "$task" in
    info)
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
      python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
      "$BIN" devices || true
      ldd --version | head -1; grep PRETTY /etc/os-release
      rc=0 ;;
    goldens)
      # GOLDEN_TWINS (name:family ..., default the three seed twins) picks the twins.
      gt=${GOLDEN_TWINS:-tiny-qwen3:qwen3 tiny-llama3.2:llama3.2 tiny-phi4mini:phi4mini}
      synth_twins $gt
      mkdir -p "$OUT/goldens"
      dirs=(); for t in $gt; do dirs+=("/tmp/twins/${t%%:*}"); done
      PYTHONUNBUFFERED=1 python3 tools/goldens/make_goldens.py --out "$OUT/goldens" "${dirs[@]}"
      rc=$? ;;
    vulkan-tests)
      # One process per test, as ctest runs them (NVIDIA's driver refuses new instances after
      # about 17 validated instances in one process: VK_ERROR_INCOMPATIBLE_DRIVER).
      # VULKAN_TESTS_FILTER (a gtest filter, default every test) narrows the list;
      # VULKAN_TESTS_JOBS (default 4) processes run at once (the whole list took over 7 minutes
      # one at a time). test_vulkan_ops (the op case table) travels when VKLLM_DEVICE_TARGETS
      # names it. The log: each failed test's output, then the summary line.
      rc=0; rm -rf /tmp/vt; mkdir -p /tmp/vt
      for exe in .dev/test_vulkan .dev/test_vulkan_ops; do
        [ -x "$exe" ] || continue
        $exe --gtest_list_tests --gtest_filter="${VULKAN_TESTS_FILTER:-*}" | awk -v e="$exe" '/^[^ ]/ {s=$1} /^  / {print e, s $1}'
      done | xargs -P "${VULKAN_TESTS_JOBS:-4}" -L 1 sh -c 'n=$(echo "$1" | tr "/" "_"); if VKLLM_EXE='"$BIN"' "$0" --gtest_filter="$1" >"/tmp/vt/$n.log" 2>&1; then touch "/tmp/vt/$n.pass"; else touch "/tmp/vt/$n.fail"; fi'
      pass=$(ls /tmp/vt | grep -c '\.pass$'); failed=$(ls /tmp/vt | sed -n 's/\.fail$//p')
      for f in $failed; do cat "/tmp/vt/$f.log" >>"$OUT/vulkan-tests.log"; done
      [ -z "$failed" ] || rc=1
      echo "vulkan tests: $pass passed, $(echo $failed | wc -w) failed" $failed | tee -a "$OUT/vulkan-tests.log" ;;
    op-perf)
      # The op case table's perf mode (docs/vulkan.md, "Tests"): every case checked, then its
      # forward timed (VKLLM_OP_PERF repetitions, default 100; validation off), one "[perf]" line
      # a case in $OUT/op-perf.txt. One process per case (the validated-instance limit above).
      # VULKAN_TESTS_FILTER narrows the cases.
      rc=0; : >"$OUT/op-perf.txt"
      for t in $(.dev/test_vulkan_ops --gtest_list_tests --gtest_filter="${VULKAN_TESTS_FILTER:-*}" | awk '/^[^ ]/ {s=$1} /^  / {print s $1}'); do
        VKLLM_OP_PERF=${VKLLM_OP_PERF:-1} .dev/test_vulkan_ops --gtest_filter="$t" >/tmp/op-perf.log 2>&1 || { rc=1; echo "FAILED $t" >>"$OUT/op-perf.txt"; }
        grep '^\[perf\]' /tmp/op-perf.log >>"$OUT/op-perf.txt"
      done
      sort -k3 -n -r "$OUT/op-perf.txt" | head -20 ;;
    twins)
      # Every recipe on every twin: Vulkan's greedy decoding against the CPU reference on the same
      # artifact (vkllm verify --agree: logits NMSE per step, same token or a near tie). TWINS
      # (default all three, as name:family) narrows the twins.
      synth_twins
      rc=0
      for t in ${TWINS:-tiny-qwen3:qwen3 tiny-llama3.2:llama3.2 tiny-phi4mini:phi4mini}; do
        name=${t%%:*}; fam=${t##*:}
        for r in non-quantized fp16 quantized-8da4w quantized-8da4w-fp16 quantized-8da4w-embedding \
                 quantized-8da4w-fp16-embedding quantized-int4-weight-only; do
          a=/tmp/$name.$r.vkllm
          "$BIN" export /tmp/twins/$name --recipe "$r" -o "$a" -q || { rc=1; continue; }
          out=$("$BIN" verify "$a" --agree e2e/prompts/$fam.txt -n 50 2>&1) || rc=1
          line=$(grep -E "agreement" <<<"$out")
          v=$("$BIN" run -m "$a" -f e2e/prompts/$fam.txt -n 32 2>&1 >/dev/null | sed -n 's/.*"decode_tok_s":\([0-9.]*\).*/\1/p')
          printf '%-15s %-31s %s | decode %.0f tok/s\n' "$name" "$r" "${line#*agreement  }" "$v" | tee -a "$OUT/twins.txt"
          rm -f "$a"
        done
      done ;;
    e2e)
      # The eight-cell twin matrix (vkllm e2e --twins: loopback hub, goldens, verify --agree,
      # quality) on this GPU; results.tsv and report.html come back, the logs stay in /tmp.
      mkdir -p .fixtures && tar -C .fixtures -xJf .dev/fixtures.tar.xz
      "$BIN" e2e --twins --out /tmp/e2e; rc=$?
      cp /tmp/e2e/results.tsv /tmp/e2e/report.html "$OUT/" 2>/dev/null
      cut -f1-6 /tmp/e2e/results.tsv ;;
    perf)
      # First measurement: full-shape Llama-3.2-1B, quantized-8da4w-fp16, 512-token prompt, 128 new tokens.
      llama1b
      for i in 1 2 3; do
        "$BIN" run -m /tmp/llama1b.vkllm -f /tmp/p512.txt -n 128 --warmup 1 >/dev/null 2>>"$OUT/perf.txt"
      done
      grep vkllm-stats "$OUT/perf.txt"
      rc=$? ;;
    profile)
      # Per-op-family GPU time (timestamps) of the same model: 512-token prefill + 64 decode steps.
      llama1b
      VKLLM_PROFILE=1 "$BIN" run -m /tmp/llama1b.vkllm -f /tmp/p512.txt -n 64 >/dev/null 2>"$OUT/profile.txt"
      rc=$?
      cat "$OUT/profile.txt" ;;
    bench)
      # The seven cells' (model, recipe) pairs on full-shape synth checkpoints: vkllm bench
      # -p 512 -n 128 -r 5 (median of 5 after a warm-up) at a 4,096-token context, one markdown row each.
      rc=0
      for cell in qwen3-0.6b:qwen3:quantized-8da4w-fp16-embedding \
                  llama-3.2-1b:llama3.2:quantized-8da4w llama-3.2-1b:llama3.2:quantized-8da4w-fp16 \
                  llama-3.2-1b:llama3.2:quantized-8da4w-embedding llama-3.2-1b:llama3.2:quantized-8da4w-fp16-embedding \
                  llama-3.2-1b:llama3.2:quantized-int4-weight-only phi-4-mini:phi4mini:quantized-8da4w-embedding; do
        IFS=: read -r preset fam recipe <<<"$cell"
        [ -d /tmp/full-$preset ] || "$BIN" synth --preset "$preset" -o /tmp/full-$preset --tokenizer-dir /tmp/fixtures/$fam -q >/dev/null
        a=/tmp/$preset.$recipe.vkllm
        "$BIN" export /tmp/full-$preset --recipe "$recipe" --max-context 4096 -o "$a" -q 2>&1 | tail -1 || rc=1
        "$BIN" bench -m "$a" -p 512 -n 128 -r 5 --output json > /tmp/bench.json || rc=1
        python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" /tmp/bench.json >> "$OUT/bench.jsonl"
        python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('| %s | %s | %.0f MiB | %.0f ± %.0f | %.1f ± %.1f | %.0f | %.0f |' % (sys.argv[2], j['recipe'], j['weight_mib'], j['pp']['median_tok_s'], j['pp']['stddev_tok_s'], j['tg']['median_tok_s'], j['tg']['stddev_tok_s'], j['load_ms'], j.get('peak_gpu_mb', 0)))" /tmp/bench.json "$preset" | tee -a "$OUT/bench.md"
        rm -f "$a"
      done ;;
    side)
      # The side-by-side of issue 16/17: vkllm bench (-p 512 -n 128 -r 5, 4,096-token context) on
      # the three models' target recipes, then the peer (.peer/run.sh, llama.cpp Vulkan, Q4_0) on
      # the same shapes in the same call, and the ratios. Needs .peer carried.
      rc=0; : >"$OUT/side.txt"
      # SIDE_MODELS (default "llama qwen phi"): the models to run.
      for cell in llama-3.2-1b:llama3.2:quantized-8da4w-fp16:llama qwen3-0.6b:qwen3:quantized-8da4w-fp16-embedding:qwen \
                  phi-4-mini:phi4mini:quantized-8da4w-embedding:phi; do
        IFS=: read -r preset fam recipe peer <<<"$cell"
        [[ " ${SIDE_MODELS:-llama qwen phi} " == *" $peer "* ]] || continue
        a=$(full_artifact "$preset" "$fam" "$recipe")
        "$BIN" bench -m "$a" -p 512 -n 128 -r 5 --output json > /tmp/bench.json 2>/dev/null || rc=1
        python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('VKLLM', sys.argv[2], 'pp512', round(j['pp']['median_tok_s']), '| tg128', round(j['tg']['median_tok_s'],1), '| gpu_mib', round(j.get('peak_gpu_mb',0)), '| load_ms', round(j['load_ms']))" /tmp/bench.json "$peer" | tee -a "$OUT/side.txt"
      done
      # SIDE_RECIPES (default "l8 l8e l16e q4w"; "" for none; also "l16": the fp16 recipe, not one
      # of the seven cells, and "l16v": it with VKLLM_LINEAR_VEC8=1): Llama-3.2-1B's other recipes,
      # the same bench, each against the peer's Llama-3.2-1B figure (issue 16 asks for them too).
      for key in ${SIDE_RECIPES-l8 l8e l16e q4w}; do
        envs=()
        case "$key" in
          l8) recipe=quantized-8da4w ;; l8e) recipe=quantized-8da4w-embedding ;;
          l16e) recipe=quantized-8da4w-fp16-embedding ;; q4w) recipe=quantized-int4-weight-only ;;
          l16) recipe=fp16 ;; l16v) recipe=fp16 envs=(VKLLM_LINEAR_VEC8=1) ;;
          *) echo "side: unknown recipe key $key" >&2; continue ;;
        esac
        a=$(full_artifact llama-3.2-1b llama3.2 "$recipe")
        env "${envs[@]}" "$BIN" bench -m "$a" -p 512 -n 128 -r 5 --output json > /tmp/bench.json 2>/dev/null || rc=1
        python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('VKLLM', sys.argv[2], 'pp512', round(j['pp']['median_tok_s']), '| tg128', round(j['tg']['median_tok_s'],1), '| gpu_mib', round(j.get('peak_gpu_mb',0)), '| load_ms', round(j['load_ms']))" /tmp/bench.json "$key" | tee -a "$OUT/side.txt"
      done
      if [ -d .peer ]; then bash .peer/run.sh ${SIDE_MODELS:-llama qwen phi} 2>&1 | tee -a "$OUT/side.txt"; fi
      python3 - "$OUT/side.txt" <<'PY' | tee -a "$OUT/side.txt"
import sys, re
v, p = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r'(VKLLM|PEER) (\w+) pp512 ([0-9.]+) \| tg128 ([0-9.]+)', line)
    if m: (v if m[1] == 'VKLLM' else p)[m[2]] = (float(m[3]), float(m[4]))
for k in v:
    q = k if k in p else 'llama' if k in ('l8', 'l8e', 'l16e', 'q4w', 'l16', 'l16v') and 'llama' in p else None
    if q: print('RATIO %-6s pp512 %.2fx  tg128 %.2fx  (vkllm %.0f / %.1f, peer %s %.0f / %.1f)' % (k, v[k][0]/p[q][0], v[k][1]/p[q][1], *v[k], q, *p[q]))
PY
      ;;
    ab)
      # Two binaries in one call (a change's speed, before and after): .dev/old.tar.xz holds the
      # "before" binary as vkllm_b (tar -C DIR -cJf .dev/old.tar.xz vkllm_b), $BIN is "after". For
      # each of AB_MODELS (default "llama qwen phi": the three models' target recipes), bench -p 512
      # -n 128 -r 3 alternately B, A, B, A on one artifact, then each binary's better median.
      rc=0; : >"$OUT/ab.txt"
      [ -x .dev/vkllm_b ] || { echo "ab: no .dev/vkllm_b (.dev/old.tar.xz)"; rc=1; continue; }
      for cell in llama-3.2-1b:llama3.2:quantized-8da4w-fp16:llama qwen3-0.6b:qwen3:quantized-8da4w-fp16-embedding:qwen \
                  phi-4-mini:phi4mini:quantized-8da4w-embedding:phi; do
        IFS=: read -r preset fam recipe key <<<"$cell"
        [[ " ${AB_MODELS:-llama qwen phi} " == *" $key "* ]] || continue
        a=$(full_artifact "$preset" "$fam" "$recipe")
        for round in 1 2; do
          for side in before after; do
            exe=$BIN; [ $side = before ] && exe=$PWD/.dev/vkllm_b
            "$exe" bench -m "$a" -p 512 -n 128 -r 3 --output json > /tmp/ab.json 2>/dev/null || rc=1
            python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('AB', sys.argv[2], sys.argv[3], round(j['pp']['median_tok_s']), round(j['tg']['median_tok_s'], 1))" /tmp/ab.json "$key" "$side" | tee -a "$OUT/ab.txt"
          done
        done
      done
      python3 - "$OUT/ab.txt" <<'PY' | tee -a "$OUT/ab.txt"
import sys
best = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5 and f[0] == 'AB':
        b = best.setdefault((f[1], f[2]), [0.0, 0.0])
        b[0], b[1] = max(b[0], float(f[3])), max(b[1], float(f[4]))
for (k, side) in sorted(best):
    if side == 'after' and (k, 'before') in best:
        a, b = best[(k, 'after')], best[(k, 'before')]
        print('AB %-5s pp512 %.0f -> %.0f (%+.1f%%)  tg128 %.1f -> %.1f (%+.1f%%)' % (k, b[0], a[0], 100 * (a[0] / b[0] - 1), b[1], a[1], 100 * (a[1] / b[1] - 1)))
PY
      ;;
    families-side)
      # The new families beside the peer (issue 51): for each entry of FAMILIES (default
      # "gemma-3-1b qwen2.5-1.5b"; also qwen2.5-0.5b, smollm3-3b and the other presets
      # `python3 tools/device/peer_gguf.py --list` names; PRESET:RECIPE picks a recipe, else
      # FAMILIES_RECIPE, default quantized-8da4w-fp16-embedding: the models tie their head to the
      # embedding, which the peer's GGUF quantizes too), vkllm bench -p 512 -n 128 -r 5 of the
      # preset's full-shape synth checkpoint at a 4,096-token context, then the peer on a Q4_0 GGUF
      # of the same shapes and vocabulary (two runs of 5 repetitions, the better median), then the
      # ratios. Needs .peer carried (its harness and libraries) and the presets' tokenizer fixtures
      # in .dev (gemma3, qwen3, llama3.2).
      rc=0; : >"$OUT/families-side.txt"
      [ -d .peer ] || { echo "families-side: no .peer carried"; rc=1; continue; }
      for cell in ${FAMILIES:-gemma-3-1b qwen2.5-1.5b}; do
        preset=${cell%%:*} recipe=${cell#*:}
        [ "$recipe" != "$cell" ] || recipe=${FAMILIES_RECIPE:-quantized-8da4w-fp16-embedding}
        a=$(full_artifact "$preset" "$(preset_family "$preset")" "$recipe")
        if "$BIN" bench -m "$a" -p 512 -n 128 -r 5 --output json > /tmp/bench.json 2>/tmp/bench.err; then
          python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('VKLLM', sys.argv[2], 'pp512', round(j['pp']['median_tok_s']), '| tg128', round(j['tg']['median_tok_s'],1), '| gpu_mib', round(j.get('peak_gpu_mb',0)), '| load_ms', round(j['load_ms']), '|', sys.argv[3])" /tmp/bench.json "$preset" "$recipe" | tee -a "$OUT/families-side.txt"
        else
          rc=1; tail -2 /tmp/bench.err
        fi
        peer_bench "$preset" 2 5 | tee -a "$OUT/families-side.txt"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      done
      python3 - "$OUT/families-side.txt" <<'PY' | tee -a "$OUT/families-side.txt"
import sys, re
v, p = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r'(VKLLM|PEER) (\S+) pp512 ([0-9.]+) \| tg128 ([0-9.]+)', line)
    if m: (v if m[1] == 'VKLLM' else p)[m[2]] = (float(m[3]), float(m[4]))
for k in v:
    if k in p and min(p[k]) > 0:
        print('RATIO %-13s pp512 %.2fx  tg128 %.2fx  (vkllm %.0f / %.1f, peer %.0f / %.1f)' % (k, v[k][0] / p[k][0], v[k][1] / p[k][1], *v[k], *p[k]))
PY
      ;;
    parallel)
      # Many streams (issue 50): the three models' target recipes, 4,096-token context: vkllm
      # bench --parallel (B sequences a batched forward, -p 128 -n 128) and the single-stream tg128,
      # then the peer's BENCH_PARALLEL (needs .peer) in the same call, and the ratios.
      # PARALLEL (default 1,4,16,64): the batch sizes; PARALLEL_MODELS (default "llama qwen phi");
      # PARALLEL_AB="VAR=VALUE ...": vkllm's batched runs once more with those variables set, after
      # the default's (lines AB ...), for a same-call A/B of a tuning switch.
      rc=0; : >"$OUT/parallel.txt"
      par=${PARALLEL:-1,4,16,64}
      for cell in llama-3.2-1b:llama3.2:quantized-8da4w-fp16:llama qwen3-0.6b:qwen3:quantized-8da4w-fp16-embedding:qwen \
                  phi-4-mini:phi4mini:quantized-8da4w-embedding:phi; do
        IFS=: read -r preset fam recipe peer <<<"$cell"
        [[ " ${PARALLEL_MODELS:-llama qwen phi} " == *" $peer "* ]] || continue
        a=$(full_artifact "$preset" "$fam" "$recipe")
        "$BIN" bench -m "$a" -p 128 -n 128 -r 3 --parallel "$par" --output json > /tmp/par.json 2>"$OUT/par-$peer.err" || rc=1
        python3 -c "
import json,sys
for r in json.load(open(sys.argv[1]))['parallel']: print('VKLLM %s parallel%d aggregate_tg128 %.1f' % (sys.argv[2], r['sequences'], r['median_tok_s']))" /tmp/par.json "$peer" | tee -a "$OUT/parallel.txt"
        if [ -n "${PARALLEL_AB:-}" ]; then
          env $PARALLEL_AB "$BIN" bench -m "$a" -p 128 -n 128 -r 3 --parallel "$par" --output json > /tmp/par.json 2>>"$OUT/par-$peer.err" || rc=1
          python3 -c "
import json,sys
for r in json.load(open(sys.argv[1]))['parallel']: print('AB %s parallel%d aggregate_tg128 %.1f (%s)' % (sys.argv[2], r['sequences'], r['median_tok_s'], sys.argv[3]))" /tmp/par.json "$peer" "$PARALLEL_AB" | tee -a "$OUT/parallel.txt"
        fi
        "$BIN" bench -m "$a" -p 128 -n 128 -r 3 --output json > /tmp/bench.json 2>/dev/null || rc=1
        python3 -c "import json,sys; print('VKLLM %s single tg128 %.1f' % (sys.argv[2], json.load(open(sys.argv[1]))['tg']['median_tok_s']))" /tmp/bench.json "$peer" | tee -a "$OUT/parallel.txt"
      done
      if [ -d .peer ]; then BENCH_PARALLEL="${par//,/ }" bash .peer/run.sh ${PARALLEL_MODELS:-llama qwen phi} 2>&1 | tee -a "$OUT/parallel.txt"; fi
      python3 - "$OUT/parallel.txt" <<'PY' | tee -a "$OUT/parallel.txt"
import sys, re
v, p = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r'(VKLLM|PEER) (\w+) parallel(\d+) aggregate_tg128 ([0-9.]+)', line)
    if m: (v if m[1] == 'VKLLM' else p)[(m[2], int(m[3]))] = float(m[4])
for k in sorted(v):
    if k in p and p[k] > 0: print('RATIO %-5s parallel%-3d %.2fx  (vkllm %.0f, peer %.0f tok/s)' % (k[0], k[1], v[k] / p[k], v[k], p[k]))
PY
      ;;
    parallel-profile)
      # Where a batched step's time goes (issue 50): VKLLM_PROFILE of `vkllm bench --parallel B`
      # (8-token prompts, 256 steps: the steps dominate) for each B of PARALLEL (default 1,4,16,64),
      # on the artifact `parallel` makes; the per-op table of each.
      rc=0
      a=$(full_artifact llama-3.2-1b llama3.2 quantized-8da4w-fp16)
      par=${PARALLEL:-1,4,16,64}
      for b in ${par//,/ }; do
        VKLLM_PROFILE=1 "$BIN" bench -m "$a" -p 8 -n 256 -r 1 --parallel "$b" >/dev/null 2>"$OUT/parallel-profile-$b.txt" || rc=1
        echo "== parallel $b"; grep -A40 "prefill" "$OUT/parallel-profile-$b.txt" | head -45
      done ;;
    serve-load)
      # Many clients through HTTP (issue 50): `vkllm serve --parallel C` on Llama-3.2-1B
      # quantized-8da4w-fp16, then tools/serve_load.mjs with C concurrent streaming clients, 4 C
      # requests of ~100-word prompts and 128 generated tokens each (needs .dev/node:
      # VKLLM_DEVICE_NODE=1 tools/device/build.sh); beside it the engine's `bench --parallel C`
      # (128-token prompts, 128 steps). LOAD_C (default "4 16 64"): the concurrencies.
      rc=0; : >"$OUT/serve-load.txt"
      [ -x .dev/node ] || { echo "serve-load: no .dev/node (VKLLM_DEVICE_NODE=1 tools/device/build.sh)"; rc=1; continue; }
      a=$(full_artifact llama-3.2-1b llama3.2 quantized-8da4w-fp16)
      for C in ${LOAD_C:-4 16 64}; do
        "$BIN" serve -m "$a" --port 8091 --parallel "$C" --queue "$C" -q 2>"$OUT/serve-$C.err" &
        pid=$!
        for _ in $(seq 120); do .dev/node -e "fetch(\"http://127.0.0.1:8091/health\").then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))" && break; sleep 0.5; done
        .dev/node tools/serve_load.mjs --url http://127.0.0.1:8091 --concurrency "$C" --requests $((4 * C)) \
          --prompt-words 100 --max-tokens 128 | sed "s/^/HTTP C=$C /" | tee -a "$OUT/serve-load.txt" || rc=1
        kill -INT $pid; wait $pid
        "$BIN" bench -m "$a" -p 128 -n 128 -r 3 --parallel "$C" --output json 2>/dev/null | python3 -c "
import json,sys
for r in json.load(sys.stdin)['parallel']: print('ENGINE C=%d aggregate_tg128 %.1f' % (r['sequences'], r['median_tok_s']))" | tee -a "$OUT/serve-load.txt" || rc=1
      done ;;
    schema)
      # Structured output's cost (issue 52): greedy decode tok/s of `vkllm run` on Llama-3.2-1B
      # quantized-8da4w-fp16 without a constraint, with --json-schema (a long string property) and
      # with --json-object, interleaved over 3 rounds; the stats line's decode_tok_s. The -1 variants
      # one step a submit (VKLLM_DECODE_BATCH=1), the -sleep ones waiting on fences asleep, the -aC
      # ones VKLLM_CONSTRAINED_AHEAD=C (1: the submit doubles after each all-allowed one; 65536: one
      # step a submit). SCHEMA_VARIANTS (default "plain plain-1 schema object object-a1 object-a65536").
      rc=0; : >"$OUT/schema.txt"
      a=$(full_artifact llama-3.2-1b llama3.2 quantized-8da4w-fp16)
      echo '{"type": "object", "properties": {"text": {"type": "string", "minLength": 2000}}, "required": ["text"]}' > /tmp/schema.json
      for round in 1 2 3; do
        for v in ${SCHEMA_VARIANTS:-plain plain-1 schema object object-a1 object-a65536}; do
          case $v in plain*) f=(--ignore_eos) ;; schema*) f=(--json-schema /tmp/schema.json) ;; object*) f=(--json-object) ;; esac
          e=(); case $v in *-1*) e+=(VKLLM_DECODE_BATCH=1) ;; esac; case $v in *sleep) e+=(VKLLM_FENCE_SPIN=0) ;; esac
          case $v in *-a[0-9]*) e+=(VKLLM_CONSTRAINED_AHEAD=${v##*-a}) ;; esac
          env "${e[@]}" "$BIN" run -m "$a" -p "Describe the weather in a long JSON document." -n 256 --warmup 1 "${f[@]}" 2>&1 >/dev/null |
            sed -n 's/^vkllm-stats //p' | python3 -c "import json,sys; j=json.load(sys.stdin); print('SCHEMA %s round %s decode_tok_s %.1f generated %d masked_steps %d refused_steps %d constraint_ms %.1f logits_ms %.1f submits %d wasted %d' % (sys.argv[1], sys.argv[2], j['decode_tok_s'], j['generated_tokens'], j.get('masked_steps', -1), j.get('refused_steps', -1), j.get('constraint_ms', -1), j.get('constraint_logits_ms', -1), j.get('decode_submits', -1), j.get('wasted_steps', -1)))" "$v" "$round" | tee -a "$OUT/schema.txt" || rc=1
        done
      done ;;
    sizes)
      # The larger full shapes (issue 51): export time, load, pp512 / tg128 and GPU memory of
      # quantized-8da4w-fp16 at 4,096 tokens of context, then (with .peer carried) the peer on a
      # Q4_0 GGUF of the same shapes (tools/device/peer_gguf.py; one run of 3 repetitions).
      # SIZES (default "gemma-3-1b qwen2.5-1.5b llama-3.2-3b qwen3-4b llama-3.1-8b").
      rc=0; : >"$OUT/sizes.txt"
      for preset in ${SIZES:-gemma-3-1b qwen2.5-1.5b llama-3.2-3b qwen3-4b llama-3.1-8b}; do
        fam=$(preset_family "$preset")
        d=/tmp/full-$preset a=/tmp/$preset.quantized-8da4w-fp16.vkllm
        [ -d $d ] || "$BIN" synth --preset "$preset" -o $d --tokenizer-dir /tmp/fixtures/$fam -q >/dev/null || { rc=1; continue; }
        t0=$(date +%s.%N)
        [ -f "$a" ] || "$BIN" export $d --recipe quantized-8da4w-fp16 --max-context 4096 -o "$a" -q 2>&1 | tail -1
        t1=$(date +%s.%N); rm -rf $d
        "$BIN" bench -m "$a" -p 512 -n 128 -r 3 --output json > /tmp/bench.json 2>/tmp/bench.err || { rc=1; tail -2 /tmp/bench.err; continue; }
        python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('VKLLM', sys.argv[2], 'pp512', round(j['pp']['median_tok_s']), '| tg128', round(j['tg']['median_tok_s'],1), '| gpu_mib', round(j.get('peak_gpu_mb',0)), '| load_ms', round(j['load_ms']), '| export_s', round(float(sys.argv[5])-float(sys.argv[3]),1), '| artifact_mib', round(__import__('os').path.getsize(sys.argv[4])/2**20))" /tmp/bench.json "$preset" "$t0" "$a" "$t1" | tee -a "$OUT/sizes.txt"
        rm -f "$a"
        [[ " $(python3 tools/device/peer_gguf.py --list) " == *" $preset "* ]] && [ -d .peer ] || continue
        peer_bench "$preset" 1 3 | tee -a "$OUT/sizes.txt"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      done ;;
    physics)
      # The device's dispatch, grid-sync and bandwidth costs (vkllm bench --physics).
      "$BIN" bench --physics | tee "$OUT/physics.md"; rc=${PIPESTATUS[0]} ;;
    matvec)
      # The decode mat-vec kernels at the three models' shapes (vkllm bench --matvec: us, GB/s,
      # and whether linear_8da4w_mv has the old kernel's bits), and their registers.
      VKLLM_PIPELINE_STATS=1 "$BIN" bench --matvec 2>"$OUT/matvec_stats.txt" | tee "$OUT/matvec.md"; rc=${PIPESTATUS[0]}
      grep -E "linear_8da4w_(mv|b32)|linear_q4w" "$OUT/matvec_stats.txt" | sort -u | head -24 ;;
    gemm)
      # The cooperative-matrix ceiling and the prefill GEMM at prefill shapes (vkllm bench --gemm).
      "$BIN" bench --gemm | tee "$OUT/gemm.md"; rc=${PIPESTATUS[0]} ;;
    profile-all)
      # VKLLM_PROFILE of the three side-by-side artifacts (made by `side`): a 512-token prefill
      # and 64 decode steps each; the decode tables.
      rc=0
      python3 -c "print('The quick brown fox jumps over the lazy dog. ' * 51)" > /tmp/p512.txt
      for a in /tmp/llama-3.2-1b.quantized-8da4w-fp16.vkllm /tmp/qwen3-0.6b.quantized-8da4w-fp16-embedding.vkllm /tmp/phi-4-mini.quantized-8da4w-embedding.vkllm; do
        [ -f "$a" ] || continue
        echo "== $a" >> "$OUT/profile-all.txt"
        VKLLM_PROFILE=1 "$BIN" run -m "$a" -f /tmp/p512.txt -n 64 >/dev/null 2>>"$OUT/profile-all.txt" || rc=1
      done
      grep -A14 "profile, decode" "$OUT/profile-all.txt" | cut -c1-100 ;;
    *) echo "unknown task $task" >&2; rc=2 ;;
  esac
  summary+=("$(printf '%-14s rc=%-3s %4ss' "$task" "$rc" "$(( $(date +%s) - start ))")")
done
echo "== summary"
printf '%s\n' "${summary[@]}"
