#!/usr/bin/env bash
# Run THERE (the GPU machine, through the device tool, carry [".gl", ".dev"]):
#   tools/device/run.sh TASK...   with TASK one of: info goldens vulkan-tests
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
summary=()

synth_twins() {
  for t in tiny-qwen3:qwen3 tiny-llama3.2:llama3.2 tiny-phi4mini:phi4mini; do
    name=${t%%:*}; fam=${t##*:}
    [ -d /tmp/twins/$name ] || "$BIN" synth --preset "$name" -o /tmp/twins/$name --tokenizer-dir /tmp/fixtures/$fam
  done
}

for task in "$@"; do
  start=$(date +%s)
  case "$task" in
    info)
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
      python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
      "$BIN" devices || true
      rc=0 ;;
    goldens)
      synth_twins
      mkdir -p "$OUT/goldens"
      PYTHONUNBUFFERED=1 python3 tools/goldens/make_goldens.py --out "$OUT/goldens" /tmp/twins/tiny-qwen3 /tmp/twins/tiny-llama3.2 /tmp/twins/tiny-phi4mini
      rc=$? ;;
    vulkan-tests)
      VKLLM_VALIDATION=0 .dev/test_vulkan --gtest_brief=1 2>&1 | tee "$OUT/vulkan-tests.log" | tail -30
      rc=${PIPESTATUS[0]} ;;
    *) echo "unknown task $task" >&2; rc=2 ;;
  esac
  summary+=("$(printf '%-14s rc=%-3s %4ss' "$task" "$rc" "$(( $(date +%s) - start ))")")
done
echo "== summary"
printf '%s\n' "${summary[@]}"
