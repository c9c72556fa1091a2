#!/usr/bin/env bash
# Every test, as CI runs it (.ci/run), in three stages; each runs even when an
# earlier one failed, and the script fails when any did:
#   1. the suite (ctest: C unit tests, the Python cross-checks against
#      scikit-learn and PyWavelets, the end-to-end CLI, plugin, QGIS and fault
#      tests; GPU tests are skipped where no GPU exists) on the release build
#      of scripts/setup.sh in ./build;
#   2. the same suite on a CPU-only AddressSanitizer + UndefinedBehaviorSanitizer
#      build in ./build-asan: every invalid access, leak or undefined behaviour
#      in the executable, the plugin, the library or the C tests aborts the
#      test that caused it (all but py_classify_accuracy, the accuracy protocol:
#      the same train/classify code as py_classify on more data, and three times
#      its release time, which CI's 90 minutes cannot spare);
#   3. the libFuzzer targets (scripts/fuzz.sh), 30 s each, or fewer when that
#      would take CI past its budget.
# Arguments go to both ctest runs (e.g. -R core, -L python). Environment:
#   HYPROF_ASAN=0            skip stage 2
#   HYPROF_FUZZ_SECONDS=N    seconds per fuzz target (0: skip stage 3)
#   HYPROF_FUZZ_SEED=N       libFuzzer's seed (1, so a reported failure replays;
#                            0: a new seed each run)
#   HYPROF_CI_BUDGET_S=N     CI's time limit in seconds (5400: 90 minutes)
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
budget=${HYPROF_CI_BUDGET_S:-5400}
failed=()
stage() { printf '\nhyprof test: %s (%d s since the start)\n' "$1" $((SECONDS - t0)); }

bash scripts/setup.sh || exit 1

stage "1/3 the suite on the release build"
ctest --test-dir build --output-on-failure "$@" || failed+=(suite)
echo "hyprof test: the suite took $((SECONDS - t0)) s with setup"

# Stage 2. The Python process that loads the ASan plugin must have libasan
# first among its libraries (LD_PRELOAD), and libstdc++ with it: Python does
# not link it, and ASan must find the real __cxa_throw when it starts (PROJ
# throws and catches internally). Children inherit the preload: the ones that
# load the plugin too (gdal_translate, qgis_process, Python) need it. Leaks are
# detected in every process except in stacks through the Python interpreter
# (CPython does not free what it holds at exit; the plugin's leaks inside
# Python go unchecked with them) and through QGIS, Qt, fontconfig and OpenSSL
# (QGIS leaks at exit, in qgis_process and in the Python process of the
# provider's tests): the executable's, the C tests' and GDAL's are checked.
if [ "${HYPROF_ASAN:-1}" != 0 ]; then
  stage "2/3 the suite under AddressSanitizer and UndefinedBehaviorSanitizer"
  t2=$SECONDS
  cmake -S . -B build-asan -DHYPROF_CUDA=OFF -DHYPROF_ASAN=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
    cmake --build build-asan -j"$(nproc)" || failed+=(asan-build)
  echo "hyprof test: the ASan build took $((SECONDS - t2)) s"
  printf 'leak:%s\n' python3 libpython3 libqgis libQt5 qgis_process libcrypto libssl \
    libfontconfig >build-asan/lsan.supp
  t2=$SECONDS
  LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libstdc++.so)" \
    HYPROF_UNDER_ASAN=1 \
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0 \
    LSAN_OPTIONS="suppressions=$PWD/build-asan/lsan.supp:print_suppressions=0" \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -E '^py_classify_accuracy$' "$@" ||
    failed+=(asan-suite)
  echo "hyprof test: the ASan+UBSan suite took $((SECONDS - t2)) s"
fi

# Stage 3: what is left of the budget, less a margin, shared among the
# targets, at most 30 s each (the fuzz targets run longer by hand: scripts/fuzz.sh SECONDS).
fuzz_seconds=${HYPROF_FUZZ_SECONDS:-}
if [ "$fuzz_seconds" != 0 ]; then
  stage "3/3 fuzzing"
  t3=$SECONDS
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHYPROF_CUDA=OFF -DHYPROF_FUZZ=ON >/dev/null &&
    cmake --build build-fuzz -j"$(nproc)" --target hyprof_fuzz || failed+=(fuzz-build)
  echo "hyprof test: the fuzz build took $((SECONDS - t3)) s"
  ntargets=$(find tests/fuzz -maxdepth 1 -name 'fuzz_*.c' | wc -l)
  if [ -z "$fuzz_seconds" ]; then
    left=$((budget - (SECONDS - t0) - 600))
    fuzz_seconds=$((ntargets > 0 ? left / ntargets : 30))
    ((fuzz_seconds > 30)) && fuzz_seconds=30
    if ((fuzz_seconds < 5)); then
      echo "hyprof test: ${left} s of the CI budget left for ${ntargets} fuzz targets:" \
        "5 s each instead of 30" >&2
      fuzz_seconds=5
    fi
  fi
  HYPROF_FUZZ_SEED=${HYPROF_FUZZ_SEED:-1} bash scripts/fuzz.sh "$fuzz_seconds" || failed+=(fuzz)
fi

echo
echo "hyprof test: $((SECONDS - t0)) s in all"
if ((${#failed[@]})); then
  echo "hyprof test: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "hyprof test: all stages passed"
