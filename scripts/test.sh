#!/usr/bin/env bash
# Runs the whole test suite (installs and builds first if needed). Extra args go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh dev
ctest --preset dev "$@"
