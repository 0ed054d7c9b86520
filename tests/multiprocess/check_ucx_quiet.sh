#!/bin/sh
# check_ucx_quiet.sh BRAID_RUN BRAID_PERF: runs a 4-rank all-reduce sweep over
# BRAID_TRANSPORT=ucx three times and fails when one did not pass its check or
# UCX printed an error. Ranks that finish at different moments close their
# endpoints to peers that already exited, and a close that flushes towards a
# gone peer made UCX log "error during flush" at ERROR level on most runs
# over its tcp transport.
set -u
braid_run=$1
braid_perf=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for launch in 1 2 3; do
  if ! "$braid_run" -n 4 --timeout 60s "$braid_perf" all_reduce -b 8 -e 4M -f 16 -n 3 -w 1 --check >"$out" 2>&1; then
    cat "$out"
    echo "FAIL: launch $launch: braid-perf over ucx failed"
    exit 1
  fi
  if grep -a "UCX  ERROR" "$out"; then
    echo "FAIL: launch $launch: UCX logged the errors above"
    exit 1
  fi
done
echo "3 launches of 4 ranks over ucx: checked, and no UCX error logged"
