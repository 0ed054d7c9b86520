#!/usr/bin/env bash
# A smoke run of bench/compare.py (seconds): 2 ranks, 8 B to 4 KiB, one
# round, every variant this build has, no timing asserted. braid's part must
# work; when neither Open MPI's nor Gloo's harness was built, the test then
# reports a skip (77) rather than a pass.
#   compare_smoke.sh SOURCE_ROOT BUILD_DIR
set -u
root=$1 build=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
/usr/bin/python3 "$root/bench/compare.py" --smoke --no-install --build "$build" --out "$out" >"$out/stdout" 2>"$out/stderr"
rc=$?
cat "$out/stdout" "$out/stderr"
[[ $rc == 0 ]] || { echo "FAIL: compare.py exited $rc"; exit 1; }
csv=$out/compare.csv
[[ $(head -1 "$csv") == "round,library,transport,class,collective,ranks,size,time_us,algbw_gbps,busbw_gbps,wrong" ]] \
  || { echo "FAIL: CSV header"; exit 1; }
grep -q '^0,braid,tcp,tcp,all_reduce,2,8,' "$csv" || { echo "FAIL: no braid row at 8 B"; exit 1; }
grep -q '^0,braid,tcp,tcp,all_reduce,2,4096,' "$csv" || { echo "FAIL: no braid row at 4 KiB"; exit 1; }
if ! grep -qE '^0,(openmpi|gloo),' "$csv"; then
  echo "SKIP: no peer harness built (scripts/install-deps.sh --bench, then reconfigure)"
  exit 77
fi
grep -q "braid / best peer of the same transport class" "$out/stdout" || { echo "FAIL: no ratio table"; exit 1; }
if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  [[ -s $out/busbw_all_reduce.png && -s $out/latency_all_reduce.png ]] || { echo "FAIL: no PNG"; exit 1; }
fi
echo "compare smoke run: ok"
