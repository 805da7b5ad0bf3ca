#!/usr/bin/env bash
# The shader compiler for the modules that need GL_KHR_cooperative_matrix or
# GL_NV_cooperative_matrix2 (kernels.def's VK_KERNEL_KHR lines), which Debian 12's glslc and
# glslangValidator reject: glslang's standalone glslangValidator built from Debian trixie's source
# package (pinned below: version and sha256 of each file), into the user's cache folder
#   ${XDG_CACHE_HOME:-~/.cache}/vkllm/glslang-<version>/bin/glslang
# which CMake looks at by default (VKLLM_GLSLANG, src/backend/vulkan/CMakeLists.txt). When that
# binary is there and reports its version, nothing is fetched or built. The source package comes
# through apt from the Debian mirror the system's sources already name, with a private sources
# list and private lists: the system's apt configuration is left as it is. Needs cmake, ninja,
# python3 and g++ (scripts/setup.sh installs them first). Prints the binary's path on stdout;
# progress on stderr. Build from scratch: about 1.5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pinned source package (CMake reads glslang_version from this line to find the cache folder).
glslang_version=15.1.0+1.4.309.0
debian_revision=1
sha_dsc=5ce0f9040bd1f03575976a1599830ef86c22f2ff7b8721c50eb841b3e235e30b
sha_orig=180f17ea51e6b71bf57b9e0fea78ba3ecd76e3ec8e4c91f0771b922eb22bf4b2
sha_debian=1738dcf3cf37ea9a2fc9c11eb0e990cdfbc62ddd6a09d82675835fa310e57ff7

say() { echo "glslang: $*" >&2; }
root="${XDG_CACHE_HOME:-$HOME/.cache}/vkllm"
dest="$root/glslang-$glslang_version"
bin="$dest/bin/glslang"
if [ -x "$bin" ] && v=$("$bin" -dumpversion 2>/dev/null); then
  say "cached: $bin (glslang $v)"
  echo "$bin"
  exit 0
fi

t0=$SECONDS
mkdir -p "$root"
work=$(mktemp -d "$root/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log="$root/glslang-build.log"
: >"$log"

# A deb-src line for trixie on the system's own Debian mirror (the URI of its bookworm main).
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
uri=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 2>/dev/null |
  awk -v c="$codename" '$2 == c && $3 == "main" {print $1; exit}')
if [ -z "$uri" ]; then
  say "no Debian '$codename main' repository in apt's sources to fetch trixie's glslang source package from"
  exit 1
fi
mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri trixie main" \
  >"$work/apt/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
  -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
  -o "APT::Sandbox::User=$(id -un)")
say "fetching Debian trixie's source package glslang $glslang_version-$debian_revision"
if ! apt-get -q "${apt_opts[@]}" update >>"$log" 2>&1 ||
  ! (cd "$work/src" && apt-get -q "${apt_opts[@]}" source --download-only \
    "glslang=$glslang_version-$debian_revision") >>"$log" 2>&1; then
  say "fetching the source package failed (log: $log):"
  tail -5 "$log" >&2
  exit 1
fi

# Every file against its pin (apt has checked them against trixie's signed index already; the pin
# also catches a changed package under the same version).
check() {
  local file="$work/src/$1" want=$2 got
  got=$(sha256sum "$file" 2>/dev/null | cut -d' ' -f1)
  if [ "$got" != "$want" ]; then
    say "sha256 mismatch for $1: got ${got:-no file}, pinned $want (scripts/glslang.sh)"
    exit 1
  fi
}
check "glslang_$glslang_version-$debian_revision.dsc" "$sha_dsc"
check "glslang_$glslang_version.orig.tar.gz" "$sha_orig"
check "glslang_$glslang_version-$debian_revision.debian.tar.xz" "$sha_debian"
say "sha256 of the .dsc, .orig.tar.gz and .debian.tar.xz match the pins"

# The upstream tarball alone: Debian's patches touch only its pkg-config files.
tar -xzf "$work/src/glslang_$glslang_version.orig.tar.gz" -C "$work/src"
src="$work/src/glslang-$glslang_version"
say "configuring (no optimizer, no HLSL, no tests)"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DENABLE_OPT=OFF \
  -DGLSLANG_TESTS=OFF -DENABLE_HLSL=OFF -DBUILD_EXTERNAL=OFF >>"$log" 2>&1 ||
  { say "configure failed (log: $log)"; tail -20 "$log" >&2; exit 1; }
say "building glslang-standalone on $(nproc) cores (about 1.5 minutes on 2; a line every 10 steps)"
set +e
ninja -C "$work/build" -j "$(nproc)" glslang-standalone 2>&1 | tee -a "$log" |
  awk '/^\[[0-9]+\/[0-9]+\]/ { gsub(/[][]/, "", $1); split($1, s, "/"); if (s[1] % 10 == 0 || s[1] == s[2]) print "glslang: step " s[1] " of " s[2] > "/dev/stderr" }'
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" != 0 ]; then
  say "build failed (log: $log)"
  tail -20 "$log" >&2
  exit 1
fi

# Into the cache in one rename: a concurrent run that finished first keeps its copy.
stage="$work/install"
mkdir -p "$stage/bin"
cp "$work/build/StandAlone/glslang" "$stage/bin/glslang"
ln -s glslang "$stage/bin/glslangValidator"
cp "$src/LICENSE.txt" "$stage/"
[ -x "$bin" ] || rm -rf "$dest"
mv -T "$stage" "$dest" 2>/dev/null || [ -x "$bin" ]
say "built $bin (glslang $("$bin" -dumpversion)) in $((SECONDS - t0)) s"
echo "$bin"
