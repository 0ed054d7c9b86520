#!/usr/bin/env bash
# Compares braid with Open MPI on 2 local ranks over TCP loopback, float32
# sum, interleaving the two several times (timings on a shared machine drift,
# so only interleaved runs are comparable).
#
#   bench/compare_mpi.sh [BUILD_DIR] [ROUNDS]
#
# Open MPI is forced onto its TCP transport over loopback:
#   mpirun --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo
# Prints, for 8 B, 1 MiB, 16 MiB and 64 MiB, the best of ROUNDS for each side.
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
ranks=2
sizes="8 1048576 16777216 67108864"
here=$(cd "$(dirname "$0")/.." && pwd)
perf="$here/$build/bench/braid-perf"
mpi_bench="$here/$build/bench/mpi_allreduce"
run="$here/$build/tools/braid-run"
[ -x "$mpi_bench" ] || { echo "compare_mpi.sh: $mpi_bench is missing (install libopenmpi-dev and rebuild)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for r in $(seq 1 "$rounds"); do
  for size in $sizes; do
    iters=200; [ "$size" -le 8 ] && iters=2000; [ "$size" -ge 16777216 ] && iters=20; [ "$size" -ge 67108864 ] && iters=10
    BRAID_SOCKET_IFNAME=lo "$run" -n $ranks --no-prefix -- "$perf" all_reduce -b "$size" -e "$size" -n $iters -w 5 \
      | awk -v s="$size" '$1 == s {print "braid", $1, $6, $8}' >> "$out/results"
    mpirun --allow-run-as-root --oversubscribe -np $ranks --mca pml ob1 --mca btl tcp,self \
      --mca btl_tcp_if_include lo "$mpi_bench" -b "$size" -e "$size" -n $iters -w 5 \
      | awk -v s="$size" '$1 == s {print "openmpi", $1, $6, $8}' >> "$out/results"
  done
done

printf "%-10s %12s %14s %14s %14s %14s\n" "size" "" "braid us" "braid busbw" "OpenMPI us" "OpenMPI busbw"
for size in $sizes; do
  best() { awk -v who="$1" -v s="$size" '$1 == who && $2 == s {print $3, $4}' "$out/results" | sort -g | head -1; }
  read -r bt bb <<< "$(best braid)"
  read -r mt mb <<< "$(best openmpi)"
  printf "%-10s %12s %14s %14s %14s %14s\n" "$size" "" "$bt" "$bb" "$mt" "$mb"
done
echo "(best of $rounds interleaved rounds each; busbw in GB/s = algbw x 2(n-1)/n)"
