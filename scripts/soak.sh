#!/usr/bin/env bash
# A soak of the tests that guard races at a communicator's birth and death,
# longer than CI runs them (CI keeps its time; see docs/testing.md):
#
#   scripts/soak.sh [K]     K times as many (default 4)
#
# The lifecycle matrix's race cases, the early-exit and churn jobs (suite
# lifecycle) and the PyTorch exit jobs (suite torch_cycles) run K times as
# many jobs in a row (BRAID_SOAK=K); the fault and elastic matrices run K
# times each (meson test --repeat). Everything else as scripts/test.sh: in
# BUILD_DIR (default build), one test at a time. Exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."
k=${1:-4}
case "$k" in '' | *[!0-9]* | 0) echo "usage: scripts/soak.sh [K]  (K: a whole number of 1 or more)" >&2; exit 2 ;; esac
build=${BUILD_DIR:-build}
scripts/install-deps.sh || exit 1
scripts/build.sh || exit 1
status=0
BRAID_SOAK=$k meson test -C "$build" --num-processes 1 --timeout-multiplier "$k" --print-errorlogs \
  --suite lifecycle --suite torch_cycles || status=1
meson test -C "$build" --num-processes 1 --repeat "$k" --print-errorlogs --suite faults --suite elastic || status=1
exit $status
