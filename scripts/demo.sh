#!/usr/bin/env bash
# The main job: install what is missing, build the four programs it runs,
# and run 4 local ranks that all-reduce real buffers over TCP, then train a
# small model data-parallel with the mirrored layer (MultiWorkerMirrored),
# printing loss, replica hashes and the 1-replica comparison per epoch, with
# a readable summary, then nccl-tests' table from braid-perf.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== braid demo: checking the Debian packages braid needs (scripts/install-deps.sh)"
scripts/install-deps.sh
scripts/build.sh tools/braid-run examples/braid-demo examples/braid-train bench/braid-perf
build=${BUILD_DIR:-build}
ranks=${RANKS:-4}
echo
echo "== 1. braid-run -n $ranks braid-demo   (all-reduce, every result checked)"
"$build/tools/braid-run" -n "$ranks" --timeout 300s -- "$build/examples/braid-demo"
echo
echo "== 2. braid-run -n $ranks braid-train   (mirrored training: MultiWorkerMirrored, $ranks replicas)"
"$build/tools/braid-run" -n "$ranks" --no-prefix --timeout 300s -- "$build/examples/braid-train" --strategy multi_worker_mirrored
echo
echo "== 3. braid-run -n $ranks braid-perf all_reduce -b 8 -e 16M -f 16 --check"
"$build/tools/braid-run" -n "$ranks" --no-prefix --timeout 300s -- "$build/bench/braid-perf" all_reduce -b 8 -e 16M -f 16 --check
