#!/usr/bin/env bash
# The main job: set up and build, then the end-to-end matrix (e2e/README.md) on the tiny twins of
# the eight cells (the seven of the design and cell 4 with a LoRA adapter): each twin is pulled
# from the loopback hub under the cell's model id and pinned revision, exported with the cell's
# recipe, verified, and run on Vulkan (lavapipe when there is no GPU), gated on the transformers
# goldens, the CPU reference backend and the recipe's quality gate.
# Writes out/e2e/results.tsv, out/e2e/report.html and out/e2e/logs/; exits non-zero if a cell
# failed. Extra arguments go to `vkllm e2e` (e.g. --cells 1,4).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release
exec build/release/src/cli/vkllm e2e --twins --out out/e2e "$@"
