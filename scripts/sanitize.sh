#!/usr/bin/env bash
# The test suite under the sanitizers: everything (unit, schedules, the
# transport conformance suite, multi-process, launcher, mirrored) with AddressSanitizer +
# UndefinedBehaviorSanitizer, and the threaded parts (the communicator's
# progress engine, the store, the mirrored layer's replica threads and
# parameter-server threads) with ThreadSanitizer. Any report fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

if [ ! -f build-asan/build.ninja ]; then
  meson setup build-asan --buildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false >/dev/null || exit 1
fi
ninja -C build-asan >/dev/null || exit 1
# The fault matrix measures times to error; it runs in the plain build only.
# To keep CI under its time, the schedule matrices run one case in 4
# (BRAID_SCHEDULE_SAMPLE) and the multi-process checks once, over the default
# transport (the TCP link runs under ASan in the transport suite); the plain
# build runs both whole.
BRAID_SCHEDULE_SAMPLE=4 meson test -C build-asan --num-processes 2 --timeout-multiplier 4 --print-errorlogs \
  --suite unit --suite collectives --suite transport --suite multiprocess --suite launcher --suite mirrored \
  --no-suite multiprocess_tcp || status=1

if [ ! -f build-tsan/build.ninja ]; then
  meson setup build-tsan --buildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false >/dev/null || exit 1
fi
ninja -C build-tsan tests/unit/unit_comm tests/unit/unit_store tests/unit/unit_store_jobs tests/unit/unit_auth tools/braid-run \
  tests/mirrored/mirrored_check tests/transport/transport_conformance >/dev/null || exit 1
meson test -C build-tsan --no-rebuild --num-processes 1 --timeout-multiplier 4 --print-errorlogs \
  unit/comm unit/store unit/store_jobs unit/auth mirrored/mirrored_1x3_replicas mirrored/mirrored_2x2_replicas \
  mirrored/parameter_server_2_workers_2_servers transport/conformance_shm || status=1
exit $status
