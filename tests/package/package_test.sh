#!/usr/bin/env bash
# The installed package end to end (tests/package/CMakeLists.txt runs each step as a CTest test):
#   producer NAME [cmake args]   configure (one build tree for every NAME), build and install the
#                                library into a temporary prefix, check what was installed, then
#                                move the prefix (relocatable)
#   twin                         a tiny Qwen3 twin artifact and the CPU reference's greedy text
#   consumer NAME PRODUCER KIND  build examples/generate against PRODUCER's prefix with
#                                find_package (KIND: static, shared, or empty: the default, shared),
#                                check its link line, run it on Vulkan, compare with the reference
# Environment (set by CMake): VKLLM_SOURCE_DIR, VKLLM_PKG_WORK, VKLLM_EXE, CMAKE, CXX.
set -euo pipefail
src=$VKLLM_SOURCE_DIR
work=$VKLLM_PKG_WORK
prompt="The capital of France is"
ntok=4  # lavapipe: about a second per token for the 151936-row logits projection

die() {
  echo "package_test: $*" >&2
  exit 1
}

# The consumer's side of each private dependency (library file names on a link line).
private_libs='pcre2|utf8proc|curl|vulkan|crypto|ssl'

producer() {
  local name=$1
  shift
  local build=$work/producer-build stage=$work/$name-stage prefix=$work/$name-prefix
  rm -rf "$stage" "$prefix"
  # The library alone (no CLI, no tests), static and shared, unoptimized and without debug
  # information: this build checks packaging, not speed. One tree: a second configuration
  # rebuilds only the objects it changes. Installed fresh every time.
  "$CMAKE" -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE= -DCMAKE_CXX_COMPILER="$CXX" \
    -DVKLLM_BUILD_TESTS=OFF -DVKLLM_BUILD_CLI=OFF -DVKLLM_LIB_STATIC=ON -DVKLLM_LIB_SHARED=ON \
    "$@" >"$work/$name-configure.log" ||
    { cat "$work/$name-configure.log"; die "$name: configure failed"; }
  "$CMAKE" --build "$build" --parallel "$(nproc)" || die "$name: build failed"
  "$CMAKE" --install "$build" --prefix "$stage" >/dev/null || die "$name: install failed"
  local cfg=$stage/lib/cmake/vkllm
  for f in include/vkllm/vkllm.h lib/cmake/vkllm/vkllmConfig.cmake lib/cmake/vkllm/vkllmConfigVersion.cmake; do
    [ -f "$stage/$f" ] || die "$name: $f was not installed"
  done
  # Relocatable: no installed CMake file or header names the source, build or install folder.
  if grep -rlF -e "$src" -e "$build" -e "$stage" "$stage/lib/cmake" "$stage/include"; then
    die "$name: the installed files above name an absolute build or install path"
  fi
  if [ -f "$stage/lib/libvkllm.so" ]; then
    # Only the public API leaves the shared library: every exported symbol belongs to
    # vkllm::version, Error, Model, Session or Engine (members, type information, vtables) or the
    # constraint makers (json_schema_constraint, json_object_constraint).
    local exports leaked
    exports=$(nm -D --defined-only -C "$stage/lib/libvkllm.so" | sed -E 's/^[0-9a-f]+ [A-Za-z] //')
    [ -n "$exports" ] || die "$name: libvkllm.so exports nothing"
    leaked=$(
      grep -vE '^((typeinfo( name)?|vtable) for )?vkllm::(version\(|Error|Model|Session|Engine|json_(schema|object)_constraint\()' <<<"$exports"
      grep -E '^vkllm::[A-Za-z]+::Impl::' <<<"$exports"
    ) || true
    [ -z "$leaked" ] || die "$name: libvkllm.so exports more than the API:"$'\n'"$leaked"
    [ -f "$cfg/vkllm-shared-targets.cmake" ] || die "$name: no shared export"
  fi
  mv "$stage" "$prefix"
  echo "package_test: $name installed and moved to $prefix"
}

twin() {
  rm -rf "$work/twin" "$work/twin.vkllm"
  "$VKLLM_EXE" synth --preset tiny-qwen3 -o "$work/twin" --threads 2 >/dev/null
  # int4 weight-only: its Vulkan and CPU greedy texts are equal token for token; with int8
  # activations (8da4w) they may part at near ties (docs/vulkan.md), which is not what this checks.
  "$VKLLM_EXE" export "$work/twin" --recipe quantized-int4-weight-only --max-context 128 \
    -o "$work/twin.vkllm" -q
  # The reference: the CLI of this build on the CPU interpreter.
  "$VKLLM_EXE" run -m "$work/twin.vkllm" --backend cpu -p "$prompt" -n $ntok --no-stats \
    >"$work/expected.txt"
  [ -s "$work/expected.txt" ] || die "twin: the reference generated nothing"
}

consumer() {
  local name=$1 producer=$2 kind=$3
  shift 3
  local build=$work/consumer-$name prefix=$work/$producer-prefix
  rm -rf "$build"
  # The dependencies this consumer must not need are made unfindable: the package config would
  # fail if it looked for them.
  local hide=()
  case $name in
    shared) hide=(CURL OpenSSL Vulkan PkgConfig Threads) ;;
    nocurl) hide=(CURL OpenSSL) ;;
  esac
  local args=(-DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$CXX" -DVKLLM_LINK="$kind")
  for p in "${hide[@]}"; do args+=(-DCMAKE_DISABLE_FIND_PACKAGE_"$p"=ON); done
  "$CMAKE" -S "$src/examples/generate" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${args[@]}" \
    >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; die "$name: consumer configure failed"; }
  "$CMAKE" --build "$build" || die "$name: consumer build failed"
  local exe=$build/vkllm_generate link
  # The libraries on the consumer's link line, by file name (-lfoo or path/libfoo.so).
  link=$(ninja -C "$build" -t commands vkllm_generate | tail -n 1 | tr ' ' '\n' |
    grep -E '^-l|\.(a|so)(\.[0-9.]+)?$' | xargs -r -n1 basename | tr '\n' ' ')
  local needed
  needed=$(readelf -d "$exe" | grep NEEDED || true)
  case $name in
    shared)
      grep -q 'libvkllm\.so' <<<"$needed" || die "$name: the consumer does not load libvkllm.so"
      if grep -Eq "$private_libs" <<<"$link"; then
        die "$name: a private dependency reached the consumer's link line: $link"
      fi
      if grep -Eq "$private_libs" <<<"$needed"; then
        die "$name: the consumer itself needs a private dependency: $needed"
      fi
      ;;
    static | nocurl)
      grep -q 'libvkllm\.a' <<<"$link" || die "$name: the consumer does not link libvkllm.a: $link"
      if grep -q 'libvkllm' <<<"$needed"; then die "$name: a static consumer loads $needed"; fi
      for lib in pcre2 utf8proc vulkan; do
        grep -q "$lib" <<<"$link" || die "$name: the static link line lacks $lib: $link"
      done
      if [ "$name" = nocurl ]; then
        if grep -Eq 'curl|crypto|ssl' <<<"$link"; then
          die "$name: a VKLLM_WITH_CURL=OFF consumer links curl or OpenSSL: $link"
        fi
      else
        grep -q curl <<<"$link" || die "$name: the static link line lacks curl: $link"
      fi
      ;;
  esac
  # Run on the Vulkan device (lavapipe without a GPU): the same greedy text as the CPU reference.
  "$exe" "$work/twin.vkllm" "$prompt" $ntok >"$build/out.txt" 2>"$build/err.txt" ||
    { cat "$build/err.txt"; die "$name: the consumer failed"; }
  cat "$build/err.txt"
  # The example ends its text with a newline; `vkllm run` writes one only to a terminal.
  [ -s "$build/out.txt" ] || die "$name: the consumer generated nothing"
  if ! cmp -s <(cat "$work/expected.txt"; echo) "$build/out.txt"; then
    echo "expected (CPU reference): $(od -c "$work/expected.txt" | head -5)" >&2
    echo "got (consumer on Vulkan): $(od -c "$build/out.txt" | head -5)" >&2
    die "$name: the consumer's text differs from the CPU reference"
  fi
  # A vkllm::Error thrown inside the library is caught by the consumer as that type.
  local rc=0
  "$exe" "$work/no-such.vkllm" "$prompt" 2 >/dev/null 2>"$build/err.txt" || rc=$?
  [ $rc -eq 1 ] && grep -q "^error: .*no-such\.vkllm" "$build/err.txt" ||
    { cat "$build/err.txt"; die "$name: a bad path gave exit $rc, not a caught vkllm::Error"; }
  echo "package_test: consumer $name ($producer, ${kind:-default}) OK: $(cat "$build/out.txt")"
}

mkdir -p "$work"
step=$1
shift
"$step" "$@"
