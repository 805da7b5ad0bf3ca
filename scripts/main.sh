#!/usr/bin/env bash
# The main job on the built-in default: set up and build, then the whole pipeline on the tiny
# Qwen3 twin: synth -> export (cell 1's recipe) -> verify -> run on Vulkan (lavapipe when there is
# no GPU) and on the CPU reference, which must print the same greedy text.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release
bin=build/release/src/cli/vkllm
out=out/main
recipe=quantized-8da4w-fp16-embedding
mkdir -p "$out"
"$bin" synth --preset tiny-qwen3 -o "$out/tiny-qwen3"
"$bin" export "$out/tiny-qwen3" --recipe "$recipe" -o "$out/tiny-qwen3.vkllm"
"$bin" verify "$out/tiny-qwen3.vkllm" --recipe "$recipe"
echo "== vulkan"
"$bin" run -m "$out/tiny-qwen3.vkllm" --chat -p "What is the capital of France?" -n 32 | tee "$out/vulkan.txt"
echo "== cpu reference"
"$bin" run -m "$out/tiny-qwen3.vkllm" --backend cpu --chat -p "What is the capital of France?" -n 32 | tee "$out/cpu.txt"
if cmp -s "$out/vulkan.txt" "$out/cpu.txt"; then
  echo "main: Vulkan and CPU reference agree (greedy, 32 tokens); outputs in $out/"
else
  echo "main: Vulkan and CPU reference DIFFER; outputs in $out/" >&2
  exit 1
fi
