#!/usr/bin/env bash
# Fuzzes every parser that reads outside text: builds the libFuzzer targets of
# tests/fuzz/ with clang, ASan and UBSan in build-fuzz/, then runs each one for
# SECONDS seconds (first argument or $HYPROF_FUZZ_SECONDS, default 60) from a
# scratch copy of its seed corpus tests/fuzz/corpus/<name without fuzz_>/, so
# the inputs it finds do not change the tree. Prints the executions of each
# target; fails when any target crashes, leaks, times out or runs out of
# memory, keeping the input under build-fuzz/artifacts/ (add it to the corpus
# once fixed: it then stays a regression test, replayed by ctest -L fuzz).
#
# HYPROF_FUZZ_SEED fixes libFuzzer's seed (default 0: a new one each run); CI
# fixes it so that a failure it reports replays with the same command.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${HYPROF_FUZZ_SECONDS:-60}}
seed=${HYPROF_FUZZ_SEED:-0}
shift || true
build=build-fuzz

CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHYPROF_CUDA=OFF -DHYPROF_FUZZ=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target hyprof_fuzz

targets=("$@")
if ((${#targets[@]} == 0)); then
  for src in tests/fuzz/fuzz_*.c; do
    targets+=("$(basename "$src" .c)")
  done
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$build/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
printf '%-28s %12s %10s  %s\n' target executions exec/s result
for t in "${targets[@]}"; do
  corpus=tests/fuzz/corpus/${t#fuzz_}
  work=$scratch/$t
  mkdir -p "$work"
  [ -d "$corpus" ] && cp -r "$corpus/." "$work/"
  log=$build/artifacts/$t.log
  set +e
  "$build/tests/fuzz/$t" -max_total_time="$seconds" -seed="$seed" -timeout=25 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-" "$work" >"$log" 2>&1
  rc=$?
  set -e
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if ((rc == 0)); then
    result=ok
  else
    result="FAILED (exit $rc; log $log)"
    failed+=("$t")
  fi
  printf '%-28s %12s %10s  %s\n' "$t" "${runs:-?}" "${rate:-?}" "$result"
  if ((rc != 0)); then
    grep -E "ERROR|SUMMARY|runtime error|Test unit written|deadly signal" "$log" | head -8 || true
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: ${#failed[@]} of ${#targets[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} target(s), ${seconds} s each, no failure"
