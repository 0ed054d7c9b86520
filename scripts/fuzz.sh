#!/usr/bin/env bash
# Builds braid's libFuzzer targets (tests/fuzz) with clang in FUZZ_BUILD_DIR
# (default: build-fuzz) and runs each for SECONDS (default 60), several at a
# time (FUZZ_JOBS, default: the CPU count). Prints one line per target and
# exits non-zero on any finding: a crash, a sanitizer report, a timeout, an
# out-of-memory, or a broken property (tests/fuzz/finding.hpp).
#
#   scripts/fuzz.sh [SECONDS]
#
# Each run starts from a temporary copy of tests/fuzz/corpus/<target>/ plus
# freshly generated seeds, so CI never grows the committed corpus. A finding
# leaves its input and log in $FUZZ_BUILD_DIR/fuzz-findings/; reproduce with
#   $FUZZ_BUILD_DIR/tests/fuzz/fuzz_<target> <input>
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
case "$seconds" in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS]" >&2; exit 2 ;; esac
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_JOBS:-$(nproc)}

scripts/install-deps.sh --fuzz || exit 1
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$build" -Dfuzz=enabled -Db_lundef=false -Dgpu=disabled -Ducx=disabled \
    -Db_sanitize=address,undefined --buildtype=debugoptimized -Doptimization=1 >/dev/null || exit 1
fi

targets=()
for src in tests/fuzz/fuzz_*.cpp; do
  name=$(basename "$src" .cpp)
  targets+=("${name#fuzz_}")
done
ninja -C "$build" "${targets[@]/#/tests/fuzz/fuzz_}" tests/fuzz/fuzz_seeds >/dev/null || exit 1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
findings="$build/fuzz-findings"
rm -rf "$findings"
mkdir -p "$findings"
"$build/tests/fuzz/fuzz_seeds" "$work/fresh" >/dev/null || exit 1

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# One target: fuzz, then write its summary line to $work/<target>.line.
fuzz_one() {
  local t=$1 corpus="$work/corpus/$1" log="$work/$1.log"
  mkdir -p "$corpus" "$work/fresh/$t"
  cp tests/fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null
  # New inputs go to the first folder, the copy; the fresh seeds are read only.
  "$build/tests/fuzz/fuzz_$t" "$corpus" "$work/fresh/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/$t-" >"$log" 2>&1
  local rc=$?
  local runs cov
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  local artifact
  artifact=$(ls "$work/$t"-* 2>/dev/null | head -1)
  if [ "$rc" -eq 0 ] && [ -z "$artifact" ]; then
    printf '%-16s ok       %s s, %s runs, %s\n' "$t" "$seconds" "${runs:-?}" "${cov:-cov: ?}" >"$work/$t.line"
  else
    cp "$log" "$findings/$t.log"
    [ -n "$artifact" ] && cp "$artifact" "$findings/"
    printf '%-16s FINDING  exit %s; input %s, log %s\n' "$t" "$rc" \
      "${artifact:+$findings/$(basename "$artifact")}" "$findings/$t.log" >"$work/$t.line"
  fi
}

for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  fuzz_one "$t" &
done
wait

status=0
for t in "${targets[@]}"; do
  if [ -f "$work/$t.line" ]; then cat "$work/$t.line"; else printf '%-16s FINDING  no result\n' "$t"; fi
  grep -q ' FINDING ' "$work/$t.line" 2>/dev/null && status=1
  [ -f "$work/$t.line" ] || status=1
done
exit $status
