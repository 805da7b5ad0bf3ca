# Sourced by the scripts that run THERE after `tools/device/run.sh side` (which installed the
# Vulkan loader and left the side-by-side artifacts in /tmp): run.sh's environment for them.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
for t in .dev/*.tar.xz; do [ "$t" = .dev/fixtures.tar.xz ] || tar -C .dev -xJf "$t"; done
export LD_LIBRARY_PATH=$PWD/.dev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$PWD/.dev/vkllm
