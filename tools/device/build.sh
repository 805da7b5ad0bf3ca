#!/usr/bin/env bash
# Run HERE (the Debian build machine): builds the portable `vkllm` binary and the Vulkan test
# binary, packs them with the tokenizer fixtures into .dev/ (git-ignored) for the GPU machine.
# Then call the device tool with carry [".gl", ".dev"] and command `tools/device/run.sh TASK...`.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -d .gl ] || { echo "missing .gl/: fetch libvulkan1 as ../.library/device/README.md says" >&2; exit 1; }
cmake --preset device >/dev/null
cmake --build --preset device -j2 --target vkllm ${VKLLM_DEVICE_TARGETS:-}
rm -rf .dev && mkdir -p .dev
cp build/device/src/cli/vkllm .dev/
strip .dev/vkllm
for t in ${VKLLM_DEVICE_TARGETS:-}; do
  f=$(find build/device/tests -name "$t" -type f -perm -u+x | head -1)
  [ -n "$f" ] && cp "$f" .dev/ && strip ".dev/$t"
done
# Shared libraries the GPU machine's image may lack travel beside the binary (run.sh sets LD_LIBRARY_PATH).
ldd .dev/vkllm | awk '/=> \// {print $3}' | grep -Ev 'libc\.so|libm\.so|libvulkan|ld-linux|libstdc|libgcc' | xargs -r -I{} cp -L {} .dev/
# libcurl and its dependencies, to find out whether a hub-enabled build would load there
# (run.sh info checks them).
mkdir -p .dev/curl
curl_so=$(ldconfig -p | awk '/libcurl\.so\.4 .*x86-64/ {print $NF; exit}')
if [ -n "$curl_so" ]; then
  cp -L "$curl_so" .dev/curl/
  ldd "$curl_so" | awk '/=> \// {print $3}' | grep -Ev 'libc\.so|libm\.so|ld-linux' | xargs -r -I{} cp -L {} .dev/curl/
fi
tar -C .fixtures -cJf .dev/fixtures.tar.xz .
du -sh .dev .dev/*
