#!/usr/bin/env bash
# Every test: installs and builds hyprof, then runs ctest (C unit tests, the
# Python cross-checks against scikit-learn and PyWavelets, the end-to-end CLI
# tests; GPU tests are skipped where no GPU exists).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
ctest --test-dir build --output-on-failure "$@"
