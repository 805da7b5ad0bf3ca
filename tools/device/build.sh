#!/usr/bin/env bash
# Run HERE (the Debian build machine): builds the portable `vkllm` binary and the Vulkan test
# binary, packs them with the tokenizer fixtures into .dev/ (git-ignored) for the GPU machine.
# Then call the device tool with carry [".gl", ".dev"] and command `tools/device/run.sh TASK...`.
# VKLLM_DEVICE_PRESET=device-measure builds with the measurement switches (chain clocks, ablations:
# docs/tuning.md), which the release preset `device` refuses.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .gl ] || { echo "missing .gl/: (mkdir .gl && cd .gl && apt-get download libvulkan1 vulkan-validationlayers) and the GL libraries ../.library/device/README.md lists" >&2; exit 1; }
ls .gl/vulkan-validationlayers_*.deb >/dev/null 2>&1 || echo "build.sh: no vulkan-validationlayers deb in .gl: test_vulkan will fail there (its tests validate)" >&2
preset=${VKLLM_DEVICE_PRESET:-device}
# The KHR cooperative-matrix modules need glslang from trixie's source package (built once into
# the user's cache folder; docs/vulkan.md, "Shader toolchain"): named, so configure fails without.
glslang=$(scripts/glslang.sh)
cmake --preset "$preset" -DVKLLM_GLSLANG="$glslang" >/dev/null
cmake --build --preset "$preset" -j2 --target vkllm ${VKLLM_DEVICE_TARGETS:-}
rm -rf .dev && mkdir -p .dev
cp "build/$preset/src/cli/vkllm" .dev/
strip .dev/vkllm
for t in ${VKLLM_DEVICE_TARGETS:-}; do
  f=$(find "build/$preset/tests" -name "$t" -type f -perm -u+x | head -1)
  [ -n "$f" ] && cp "$f" .dev/ && strip ".dev/$t"
done
# Shared libraries the GPU machine's image may lack travel beside the binary (run.sh sets
# LD_LIBRARY_PATH). Binaries and libraries travel xz-packed (.dev/bin.tar.xz, ~3x smaller; run.sh
# unpacks every .dev/*.tar.xz but the fixtures; -9e: the test binaries share most of their
# bytes with vkllm, ~1.5 MB more packed together) so that .dev, .gl, .peer and the tree fit the
# device tool's 64 MiB carry together; a second binary for an A/B can travel the same way
# (tar -C DIR -cJf .dev/old.tar.xz vkllm_b).
mkdir -p .dev/bin
ldd .dev/vkllm | awk '/=> \// {print $3}' | grep -Ev 'libc\.so|libm\.so|libvulkan|ld-linux|libstdc|libgcc' | xargs -r -I{} cp -L {} .dev/bin/
mv .dev/vkllm .dev/bin/
for t in ${VKLLM_DEVICE_TARGETS:-}; do [ -f ".dev/$t" ] && mv ".dev/$t" .dev/bin/; done
XZ_OPT=-9e tar -C .dev/bin -cJf .dev/bin.tar.xz . && rm -rf .dev/bin
# VKLLM_DEVICE_FIXTURES: the tokenizer fixtures that travel (default all; e.g. "llama3.2").
(cd .fixtures && tar -cJf ../.dev/fixtures.tar.xz ${VKLLM_DEVICE_FIXTURES:-.})
# VKLLM_DEVICE_NODE=1: this machine's node (the setup script's), stripped, travels too, for run.sh
# serve-load's HTTP clients (tools/serve_load.mjs): ~22 MB packed, so such a call carries no .peer
# and only the fixtures it needs (VKLLM_DEVICE_FIXTURES=llama3.2).
if [ "${VKLLM_DEVICE_NODE:-0}" = 1 ]; then
  rm -rf .dev/nodebin && mkdir .dev/nodebin && cp "$(readlink -f "$(command -v node)")" .dev/nodebin/node
  strip .dev/nodebin/node && XZ_OPT=-9e tar -C .dev/nodebin -cJf .dev/node.tar.xz node && rm -rf .dev/nodebin
fi
du -sh .dev .dev/*
