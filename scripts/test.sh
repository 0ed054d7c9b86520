#!/usr/bin/env bash
# Installs what is missing, builds, and runs everything CI runs:
#   1. the test suite (unit, schedules, multi-process, launcher, fault matrix)
#   2. the same under ASan+UBSan, and the threaded parts under TSan (scripts/sanitize.sh)
#   3. every fuzz target for FUZZ_SECONDS (default 10) each (scripts/fuzz.sh)
# QUICK=1 runs only step 1. Ends with one line counting passed and failed
# tests; exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
full=$([ "${QUICK:-0}" = 1 ] && echo 0 || echo 1)
if [ "$full" = 1 ]; then
  scripts/install-deps.sh --fuzz || exit 1  # clang for steps 2 and 3, before anything runs beside
else
  scripts/install-deps.sh || exit 1
fi
scripts/build.sh || exit 1
build=${BUILD_DIR:-build}
status=0

# The sanitizer builds compile at the lowest priority while the suite runs:
# most multi-process tests run alone and leave a core waiting (on a peer, a
# timeout, a process start), which the compiler takes; a test that wants the
# CPU gets it back (nice 19 weighs 15 against nice 0's 1024). CI's time,
# not its checks: the tests already pass beside two busy loops at nice 0.
if [ "$full" = 1 ]; then
  prebuild_log=$(mktemp)
  nice -n 19 scripts/sanitize.sh --build >"$prebuild_log" 2>&1 &
  prebuild=$!
fi

meson test -C "$build" --print-errorlogs --num-processes 2 || status=1
logs=("$build/meson-logs/testlog.json")

if [ "$full" = 1 ]; then
  if ! wait "$prebuild"; then
    echo "== the sanitizer builds failed:"
    cat "$prebuild_log"
  fi
  rm -f "$prebuild_log"
  echo "== sanitizers"
  scripts/sanitize.sh || status=1
  logs+=("${ASAN_BUILD_DIR:-build-asan}/meson-logs/testlog.json" "${TSAN_BUILD_DIR:-build-tsan}/meson-logs/testlog.json")
  echo "== fuzzing, ${FUZZ_SECONDS:-10} s per target"
  # In the ASan build folder, which sanitize.sh configured for the fuzz targets too.
  FUZZ_BUILD_DIR=${FUZZ_BUILD_DIR:-${ASAN_BUILD_DIR:-build-asan}} scripts/fuzz.sh "${FUZZ_SECONDS:-10}" |
    tee /tmp/braid-fuzz.$$.log
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi

python3 - "${logs[@]}" /tmp/braid-fuzz.$$.log <<'PY'
import json, os, re, sys
passed = failed = skipped = 0
*logs, fuzz = sys.argv[1:]
for path in logs:
    if not os.path.exists(path):
        failed += 1
        continue
    for line in open(path):
        r = json.loads(line)["result"]
        if r in ("OK", "EXPECTEDFAIL"): passed += 1
        elif r == "SKIP": skipped += 1
        else: failed += 1
if os.path.exists(fuzz):
    for line in open(fuzz):
        if re.match(r"^\S+\s+ok\s", line): passed += 1
        elif " FINDING " in line: failed += 1
    os.remove(fuzz)
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
exit $status
