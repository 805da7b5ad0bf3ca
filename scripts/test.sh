#!/usr/bin/env bash
# Runs the whole test suite (installs and builds first if needed). Every test runs once:
# - under the sanitizers: the asan preset (clang, AddressSanitizer + UndefinedBehaviorSanitizer)
#   builds everything and runs every test except the package and heavy tests: unit, cli, api,
#   vulkan (lavapipe, validation layer on), bad_inputs, serve and the fuzz smoke (label `fuzz`:
#   every libFuzzer target over its seeds and regression inputs);
# - in the dev build (g++, which scripts/setup.sh builds): the package tests, which build their own
#   producer and consumers with the normal compiler, so there is no sanitized code of ours in them;
#   and the tests labelled `e2e` and `heavy` (the twin e2e matrix and its gate proofs, the quality table of
#   every recipe, the perturbation table, the serve load test, tool calling through the openai SDK,
#   bench's model runs on Vulkan, the whole selftest runs: long runs over the twins,
#   4-30x slower sanitized (and the load test's memory figure is meaningless under ASan's
#   quarantine), through code the sanitized cli, api, serve, bad-input and fuzz tests reach on
#   smaller inputs; docs/robustness.md, "The sanitizer job").
# Running the dev suite a second time unsanitized would add about 4 minutes to CI and check
# nothing more (docs/robustness.md, "The sanitizer job", has the measured figures).
# VKLLM_SKIP_ASAN=1: no sanitizer job; the dev build runs the whole suite instead (quick local
# runs; CI never sets it). Extra args go to every ctest run. The exit status is non-zero if any
# test failed; both runs always happen.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
if [ "${VKLLM_SKIP_ASAN:-0}" = 1 ]; then
  scripts/setup.sh dev
  echo "test.sh: VKLLM_SKIP_ASAN=1: no sanitizer job; the whole suite runs in the dev build" >&2
  exec ctest --preset dev "$@"
fi
# The dev build compiles only what its run needs: the CLI and the heavy and e2e test executables
# (target vkllm_dev_suite; the package tests build their own), not the unit tests' copies that
# only the sanitizer job runs.
scripts/setup.sh dev vkllm_dev_suite
dev_rc=0
t1=$SECONDS
ctest --preset dev -L "package|heavy|e2e" "$@" || dev_rc=$?
t2=$SECONDS
asan_rc=0
cmake --preset asan >/dev/null
cmake --build --preset asan -j "$(nproc)"
t3=$SECONDS
ctest --preset asan -LE "package|heavy|e2e" "$@" || asan_rc=$?
t4=$SECONDS
echo "test.sh: dev setup and build $((t1 - t0)) s, package and heavy tests $((t2 - t1)) s (exit $dev_rc);" \
  "asan build $((t3 - t2)) s, tests $((t4 - t3)) s (exit $asan_rc); total $((t4 - t0)) s" >&2
[ "$dev_rc" = 0 ] && [ "$asan_rc" = 0 ]
