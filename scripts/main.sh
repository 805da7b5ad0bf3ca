#!/usr/bin/env bash
# The main job on the built-in default: set up, build, generate a tiny Qwen3 twin and generate
# text from it with the CPU reference engine.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release
bin=build/release/src/cli/vkllm
out=out/main
mkdir -p "$out"
"$bin" synth --preset tiny-qwen3 -o "$out/tiny-qwen3"
"$bin" run -m "$out/tiny-qwen3" --backend cpu --chat -p "What is the capital of France?" -n 32 --temperature 0
