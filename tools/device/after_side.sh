# Sourced by the scripts that run THERE after `tools/device/run.sh side` (which installed the
# Vulkan loader and left the side-by-side artifacts in /tmp): run.sh's environment for them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
for t in .dev/*.tar.xz; do [ "$t" = .dev/fixtures.tar.xz ] || tar -C .dev -xJf "$t"; done
export LD_LIBRARY_PATH=$PWD/.dev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$PWD/.dev/vkllm

# full_model M (llama, qwen, phi; q4w: Llama-3.2-1B quantized-int4-weight-only; and Llama-3.2-1B's
# other 8da4w recipes: l8 quantized-8da4w, l8e quantized-8da4w-embedding, l16e
# quantized-8da4w-fp16-embedding): the path of M's full-shape synth artifact at a 4,096-token
# context, synthesized and exported if /tmp lacks it.
full_model() {
  local -A preset=([llama]=llama-3.2-1b [qwen]=qwen3-0.6b [phi]=phi-4-mini [q4w]=llama-3.2-1b
                   [l8]=llama-3.2-1b [l8e]=llama-3.2-1b [l16e]=llama-3.2-1b)
  local -A recipe=([llama]=quantized-8da4w-fp16 [qwen]=quantized-8da4w-fp16-embedding [phi]=quantized-8da4w-embedding [q4w]=quantized-int4-weight-only
                   [l8]=quantized-8da4w [l8e]=quantized-8da4w-embedding [l16e]=quantized-8da4w-fp16-embedding)
  local -A tok=([llama]=llama3.2 [qwen]=qwen3 [phi]=phi4mini [q4w]=llama3.2 [l8]=llama3.2 [l8e]=llama3.2 [l16e]=llama3.2)
  local m=$1 a=/tmp/${preset[$1]}.${recipe[$1]}.vkllm
  [ -d /tmp/full-${preset[$m]} ] || "$BIN" synth --preset ${preset[$m]} -o /tmp/full-${preset[$m]} --tokenizer-dir /tmp/fixtures/${tok[$m]} -q >/dev/null
  [ -f "$a" ] || "$BIN" export /tmp/full-${preset[$m]} --recipe ${recipe[$m]} --max-context 4096 -o "$a" -q 2>&1 | tail -1 >&2
  echo "$a"
}
