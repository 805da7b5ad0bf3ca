#!/usr/bin/env bash
# Run HERE: packs the libFuzzer targets of an asan build (default build/asan, VKLLM_FUZZ_BUILD
# elsewhere) into .fuzz/ (git-ignored) for a fuzz campaign on the GPU machine's CPU cores. The
# shared libraries come from .dev/ (tools/device/build.sh). Then call the device tool with carry
# [".gl", ".dev", ".fuzz"] and command `tools/device/fuzz.sh SECONDS TARGET:PROCESSES...`.
# Keep the unstripped build: ASan reports from there are addresses, symbolized here with it.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${VKLLM_FUZZ_BUILD:-build/asan}")
[ -d .dev ] || { echo "missing .dev/: run tools/device/build.sh first" >&2; exit 1; }
rm -rf .fuzz && mkdir -p .fuzz/bin
for f in "$build"/fuzz/fuzz_*; do
  [ -x "$f" ] && [ -f "$f" ] && strip -g -o ".fuzz/bin/$(basename "$f")" "$f"
done
src=$(sed -n "s/^CMAKE_HOME_DIRECTORY:INTERNAL=//p" "$build/CMakeCache.txt")
git -C "$src" rev-parse --short HEAD > .fuzz/bin/COMMIT  # the sources the build was made from
tar -C .fuzz -cJf .fuzz/bin.tar.xz bin
rm -rf .fuzz/bin
du -sh .fuzz/bin.tar.xz
