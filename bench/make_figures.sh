#!/usr/bin/env bash
# Regenerates bench/figures/ (the README's busbw_all_reduce.png and the other
# plots, compare.csv, limits.csv) with bench/compare.py: every braid transport
# this build has (tcp, shm, and ucx over UCX's tcp and shared memory) against
# Open MPI and Gloo, all_reduce and broadcast, 2 and 4 ranks, ROUNDS rounds
# (default 5; about 10 minutes on the 2-core development VM).
#
#   bench/make_figures.sh            refuses to start while the load average is above LOAD_MAX (0.5)
#   bench/make_figures.sh --force    measures anyway
#
# Other jobs' load slows and scatters every library's numbers, so measure on
# an idle machine; the load before and after is printed for
# bench/figures/README.md, which says how the figures were made.
set -euo pipefail
cd "$(dirname "$0")/.."
load=$(cut -d' ' -f1 /proc/loadavg)
if [ "${1:-}" != --force ] && awk -v l="$load" -v max="${LOAD_MAX:-0.5}" 'BEGIN { exit !(l > max) }'; then
  echo "make_figures: the load average is $load (above ${LOAD_MAX:-0.5}): other jobs would skew the figures." >&2
  echo "make_figures: run it on an idle machine, or with --force." >&2
  exit 1
fi
scripts/install-deps.sh --bench
scripts/build.sh
out=$(mktemp -d /tmp/braid-figures.XXXXXX)
echo "== measuring into $out (load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
bench/compare.py --no-install --rounds "${ROUNDS:-5}" --out "$out"
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
cp "$out/compare.csv" "$out/limits.csv" bench/figures/
bench/compare.py --from-csv bench/figures/compare.csv --out bench/figures
echo "== bench/figures/ redrawn from $out; update bench/figures/README.md (date, machine, load, commit)"
