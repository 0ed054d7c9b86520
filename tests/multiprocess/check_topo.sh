#!/usr/bin/env bash
# braid-topo on this host and under braid-run on 2 simulated hosts x 2 ranks
# (BRAID_HOST_ID): the host's machine, each host with its ranks and their
# CPUs, the plan, and a Graphviz file whose ring crosses hosts over tcp and
# stays inside them over shm.
#   check_topo.sh BRAID_RUN BRAID_TOPO
set -uo pipefail
run=$1 topo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_topo: $*" >&2; exit 1; }

"$topo" >"$tmp/alone" || fail "braid-topo alone failed"
grep -Eq '^[0-9]+ packages?, [0-9]+ NUMA nodes?, [0-9]+ cores?, [0-9]+ hardware threads?; this process may run on CPUs ' \
  "$tmp/alone" || fail "no machine line: $(cat "$tmp/alone")"
grep -q '^  net lo (loopback)' "$tmp/alone" || fail "loopback not listed as such: $(cat "$tmp/alone")"

BRAID_TIMEOUT=60s "$run" -n 4 --timeout 120s sh -c 'BRAID_HOST_ID=h$((BRAID_RANK / 2)) exec "$0" "$@"' \
  "$topo" --dot "$tmp/plan.dot" >"$tmp/job" 2>&1 || fail "braid-topo under braid-run failed: $(cat "$tmp/job")"
for want in 'braid-topo: 4 ranks' 'host h0: 2 rank(s)' 'host h1: 2 rank(s)' 'rank 3: pid ' \
            'shm (8 x 256 KiB slots per direction): 0-1 2-3; tcp'; do
  grep -qF "$want" "$tmp/job" || fail "missing '$want' in: $(cat "$tmp/job")"
done
# The transports braid may use, in order (ucx where it is built; it links
# nothing here, as no host has RDMA).
grep -qE 'plan: transports (cuda_ipc,)?shm,(ucx,)?tcp,' "$tmp/job" || fail "the plan's transports are not [cuda_ipc,]shm[,ucx],tcp: $(cat "$tmp/job")"
grep -qF 'r0 -- r1 [label="shm"' "$tmp/plan.dot" || fail "ring edge 0-1 is not shm: $(cat "$tmp/plan.dot")"
grep -qF 'r1 -- r2 [label="tcp"' "$tmp/plan.dot" || fail "ring edge 1-2 is not tcp: $(cat "$tmp/plan.dot")"
# Graphviz renders it (scripts/install-deps.sh installs graphviz): two host
# boxes, four ranks, shm and tcp edges.
if command -v dot >/dev/null; then
  dot -Tsvg "$tmp/plan.dot" -o "$tmp/plan.svg" 2>"$tmp/dot.err" || fail "dot could not render the plan: $(cat "$tmp/dot.err")"
  [ "$(grep -c '<g id="clust' "$tmp/plan.svg")" -eq 2 ] || fail "the rendered plan has no 2 host boxes: $(cat "$tmp/plan.svg")"
  [ "$(grep -c '<g id="node' "$tmp/plan.svg")" -eq 4 ] || fail "the rendered plan has no 4 ranks: $(cat "$tmp/plan.svg")"
  for label in shm tcp; do
    grep -q ">$label</text>" "$tmp/plan.svg" || fail "the rendered plan has no $label edge: $(cat "$tmp/plan.svg")"
  done
else
  echo "check_topo: dot (graphviz) is not installed; the picture was not rendered"
fi
echo "check_topo: ok"
