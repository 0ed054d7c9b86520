#!/usr/bin/env bash
# The test suite under the sanitizers: everything (unit, schedules, the
# transport conformance suite, multi-process, launcher, mirrored) with AddressSanitizer +
# UndefinedBehaviorSanitizer, and the threaded parts (the communicator's
# progress engine, the store, the mirrored layer's replica threads and
# parameter-server threads, an elastic job's shrink, store move and rejoin)
# with ThreadSanitizer. Any report fails the run.
# Build folders: ASAN_BUILD_DIR (default build-asan) and TSAN_BUILD_DIR
# (default build-tsan).
#
#   scripts/sanitize.sh           build both folders, then run their tests
#   scripts/sanitize.sh --build   build both folders only (scripts/test.sh
#                                 does this at the lowest priority beside
#                                 the main suite)
set -uo pipefail
cd "$(dirname "$0")/.."
build_only=0
case "${1:-}" in
  '') ;;
  --build) build_only=1 ;;
  *) echo "usage: scripts/sanitize.sh [--build]" >&2; exit 2 ;;
esac
asan=${ASAN_BUILD_DIR:-build-asan}
tsan=${TSAN_BUILD_DIR:-build-tsan}
status=0
scripts/install-deps.sh --fuzz || exit 1  # clang and its sanitizer runtimes
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

# suite_targets DIR ARGS...: the build outputs that the tests selected by
# meson test ARGS (only --suite S and --no-suite S) need, from Meson's own
# record of each test (its program, the targets among its arguments, its
# depends); the same set meson test itself rebuilds before a run.
suite_targets() {
  /usr/bin/python3 - "$@" <<'PY'
import json, os, sys
build, args = sys.argv[1], sys.argv[2:]
want = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "--suite"}
skip = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "--no-suite"}
info = os.path.join(build, "meson-info")
outputs = {t["id"]: t["filename"] for t in json.load(open(os.path.join(info, "intro-targets.json")))}
needed = set()
for test in json.load(open(os.path.join(info, "intro-tests.json"))):
    suites = {s.split(":")[-1] for s in test["suite"]}
    if suites & want and not suites & skip:
        needed.update(os.path.relpath(f, build) for d in test["depends"] for f in outputs[d])
print("\n".join(sorted(needed)))
PY
}

# The fault matrix measures times to error; it runs in the plain build only
# (the elastic one, whose bounds are loose, in both).
# To keep CI under its time, the schedule matrices run one case in 4
# (BRAID_SCHEDULE_SAMPLE) and the multi-process checks once, over the default
# transport (the TCP link runs under ASan in the transport suite); the plain
# build runs both whole.
asan_suites=(--suite unit --suite collectives --suite transport --suite multiprocess --suite launcher --suite mirrored
             --suite elastic --no-suite multiprocess_tcp)
# Without UCX: its libucm replaces madvise() for the whole process, and
# under TSan that hook takes a lock while glibc sets up a new thread's stack,
# before TSan knows the thread, and crashes (SIGSEGV in every threaded test).
tsan_setup() {
  [ -f "$tsan/build.ninja" ] ||
    meson setup "$tsan" --buildtype=debugoptimized -Doptimization=1 -Db_sanitize=thread -Db_lundef=false -Dgpu=disabled \
      -Ducx=disabled -Dtorch=disabled >/dev/null
}
tsan_targets=(tests/unit/unit_comm tests/unit/unit_store tests/unit/unit_store_jobs tests/unit/unit_auth tools/braid-run
              tests/mirrored/mirrored_check tests/transport/transport_conformance tests/multiprocess/group_uneven_check
              tests/faults/elastic_worker)

# -O1, the level ASan's authors recommend (it reports what -O2 may optimise
# away), compiles in about a quarter less CPU time than debugoptimized's -O2
# (tests/unit/test_store.cpp: 68 s against 93 s). braid.torch's suite is not
# sanitized (a Python extension would need the sanitizer runtime preloaded
# into python): -Dtorch=disabled also skips its probe, an import of torch.
# Clang compiles with ASan and UBSan two to four times faster than GCC 12
# (the same file, -O1: 27 s against 60-124 s): the ASan build is clang's, the
# TSan build GCC's, so both compilers' sanitizers see the code. The same
# folder builds the libFuzzer targets (-Dfuzz=enabled; scripts/test.sh fuzzes
# there), which then share its libraries instead of building a third copy.
if [ ! -f "$asan/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$asan" --buildtype=debugoptimized -Doptimization=1 \
    -Db_sanitize=address,undefined -Db_lundef=false -Dtorch=disabled -Dgpu=disabled -Dfuzz=enabled >/dev/null || exit 1
fi
# Only what those suites run: the fault worker, the benchmarks and the MPI
# and Gloo peers stay unbuilt.
asan_targets=$(suite_targets "$asan" "${asan_suites[@]}") && [ -n "$asan_targets" ] || exit 1
# shellcheck disable=SC2086  # one target a word; none has a space
ninja -C "$asan" $asan_targets >/dev/null || exit 1
if [ "$build_only" = 1 ]; then
  tsan_setup || exit 1
  ninja -C "$tsan" "${tsan_targets[@]}" >/dev/null || exit 1
  exit 0
fi
BRAID_SCHEDULE_SAMPLE=4 meson test -C "$asan" --num-processes 2 --timeout-multiplier 4 --print-errorlogs \
  "${asan_suites[@]}" || status=1

tsan_setup || exit 1
ninja -C "$tsan" "${tsan_targets[@]}" >/dev/null || exit 1
meson test -C "$tsan" --no-rebuild --num-processes 1 --timeout-multiplier 4 --print-errorlogs \
  unit/comm unit/store unit/store_jobs unit/auth mirrored/mirrored_1x3_replicas mirrored/mirrored_2x2_replicas \
  mirrored/parameter_server_2_workers_2_servers transport/conformance_shm multiprocess/group_uneven_3_ranks \
  elastic/kill9 elastic/store || status=1
exit $status
