#!/usr/bin/env bash
# The main job: install what is missing, build, and run 4 local ranks that
# all-reduce real buffers over TCP and keep the replicas of a small model in
# sync, with a readable summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build=${BUILD_DIR:-build}
ranks=${RANKS:-4}
echo "== braid-run -n $ranks braid-demo"
"$build/tools/braid-run" -n "$ranks" --timeout 300s -- "$build/examples/braid-demo"
echo
echo "== braid-run -n $ranks braid-perf all_reduce -b 8 -e 16M -f 16 --check"
"$build/tools/braid-run" -n "$ranks" --no-prefix --timeout 300s -- "$build/bench/braid-perf" all_reduce -b 8 -e 16M -f 16 --check
