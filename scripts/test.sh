#!/usr/bin/env bash
# Every test: installs and builds hyprof, then runs ctest (C unit tests, the
# Python cross-checks against scikit-learn and PyWavelets, the end-to-end CLI
# tests; GPU tests are skipped where no GPU exists).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The GDAL plugin's bad-input tests run again under AddressSanitizer
# (tests/test_gdal_plugin.py): a CPU-only ASan build of the plugin and the
# executable in build-asan/. HYPROF_ASAN=0 skips it (the test then says so).
if [ "${HYPROF_ASAN:-1}" != 0 ]; then
  cmake -S . -B build-asan -DHYPROF_CUDA=OFF -DHYPROF_ASAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >/dev/null
  cmake --build build-asan -j"$(nproc)" --target gdal_HYPROF hyprof_cli
fi
ctest --test-dir build --output-on-failure "$@"
