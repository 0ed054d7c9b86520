#!/usr/bin/env bash
# The topology file end to end: a job of 2 simulated hosts x 2 ranks
# (BRAID_HOST_ID, hosts interleaved) dumps its inputs (BRAID_TOPO_DUMP_FILE,
# %r: one file per rank, all alike); braid-topo --load plans them again with
# no note of a difference; a 4-rank job plans from the file (BRAID_TOPO_FILE),
# a 2-rank job refuses it, a file from other hosts is used with a warning,
# and a broken file is refused naming its line.
#   check_topo_file.sh BRAID_RUN BRAID_TOPO
set -uo pipefail
run=$1 topo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_topo_file: $*" >&2; exit 1; }
export BRAID_TIMEOUT=60s
hosts() { "$run" -n "$1" --timeout 120s sh -c 'BRAID_HOST_ID=h$((BRAID_RANK % 2)) exec "$0" "$@"' "$topo"; }

BRAID_TOPO_DUMP_FILE="$tmp/job.%r.topo" hosts 4 >"$tmp/dump" 2>&1 || fail "the dumping job failed: $(cat "$tmp/dump")"
for r in 0 1 2 3; do [ -s "$tmp/job.$r.topo" ] || fail "rank $r wrote no $tmp/job.$r.topo"; done
cmp -s "$tmp/job.0.topo" "$tmp/job.3.topo" || fail "ranks 0 and 3 dumped different files"
[ "$(grep -c '^machine host_id=' "$tmp/job.0.topo")" = 2 ] || fail "not 2 machine sections: $(cat "$tmp/job.0.topo")"
grep -q '^rank 3 .* host_id_env=1 ' "$tmp/job.0.topo" || fail "rank 3's BRAID_HOST_ID not recorded"

"$topo" --load "$tmp/job.0.topo" >"$tmp/load" 2>&1 || fail "--load failed: $(cat "$tmp/load")"
for want in 'braid-topo: 4 ranks from ' 'ring: 0 2 1 3' 'host 1 (' '): ranks 1, 3'; do
  grep -qF "$want" "$tmp/load" || fail "missing '$want' in: $(cat "$tmp/load")"
done
grep -q '^note:' "$tmp/load" && fail "the reloaded plan differs from the dumped one: $(cat "$tmp/load")"

BRAID_TOPO_FILE="$tmp/job.0.topo" "$run" -n 4 --timeout 120s "$topo" >"$tmp/use" 2>&1 ||
  fail "a 4-rank job could not plan from the file: $(cat "$tmp/use")"
grep -qF 'ring: 0 2 1 3' "$tmp/use" || fail "the job did not plan from the file: $(cat "$tmp/use")"

BRAID_TOPO_FILE="$tmp/job.0.topo" "$run" -n 2 --timeout 120s "$topo" >"$tmp/two" 2>&1 &&
  fail "a 2-rank job accepted a 4-rank file: $(cat "$tmp/two")"
grep -qF 'describes 4 ranks, but this job has 2' "$tmp/two" || fail "no rank-count error: $(cat "$tmp/two")"

sed 's/ hostname=[^ ]*/ hostname=elsewhere/' "$tmp/job.0.topo" >"$tmp/other.topo"
BRAID_TOPO_FILE="$tmp/other.topo" hosts 4 >"$tmp/other" 2>&1 || fail "a file of other hosts failed: $(cat "$tmp/other")"
grep -q 'WARN BRAID_TOPO_FILE=.* describes ranks on elsewhere, this job runs on ' "$tmp/other" ||
  fail "no warning for a file of other hosts: $(cat "$tmp/other")"

sed 's/^rank 2 \(.*\) pid=[0-9]*/rank 2 \1 pid=none/' "$tmp/job.0.topo" >"$tmp/bad.topo"
"$topo" --load "$tmp/bad.topo" >"$tmp/bad" 2>&1 && fail "a broken file was accepted"
grep -qF "bad.topo:7: rank 2: field 'pid': expected a process id" "$tmp/bad" || fail "unclear error: $(cat "$tmp/bad")"
echo "check_topo_file: ok"
