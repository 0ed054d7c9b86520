#!/usr/bin/env bash
# Ranks started the way other launchers start them, each joining with
# Comm::from_env() from that launcher's variables alone (launch_check.cpp):
#
#   launch_envs.sh CASE LAUNCH_CHECK
#
#   mpirun    4 ranks under Open MPI's mpirun (OMPI_COMM_WORLD_*), the store
#             address passed with -x BRAID_STORE_ADDR
#   torchrun  2 ranks with torchrun's RANK, WORLD_SIZE, LOCAL_RANK,
#             LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT
#   slurm     2 ranks with Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
#             SLURM_JOB_ID and SLURM_JOB_NODELIST=localhost,node[02-04]
#             (the store on its first host), MASTER_PORT for the port
#
# Every case sets BRAID_PORT_RANGE to 40 ports (the store's port is the first)
# and each rank checks that every socket it listens on is in it. Traffic
# stays on loopback. Each rank is killed after 60 s. Exits 0 when every rank
# did, 77 when the launcher is not installed (mpirun), 1 otherwise.
set -uo pipefail
case_name=$1
check=$2

for v in $(env | sed -n 's/^\(BRAID_[A-Z_]*\|RANK\|WORLD_SIZE\|LOCAL_RANK\|LOCAL_WORLD_SIZE\|MASTER_[A-Z]*\|SLURM_[A-Z_]*\|OMPI_[A-Z_]*\|PMIX_[A-Z_]*\|TF_CONFIG\|TORCHELASTIC_[A-Z_]*\)=.*/\1/p'); do
  unset "$v"
done
# A range of its own per run, so that cases running in parallel do not meet,
# above Linux's ephemeral ports (32768-60999), which any outgoing connection
# on this machine may hold at the moment rank 0 binds.
base=$((61000 + ($$ % 90) * 50))
range="$base-$((base + 39))"
export BRAID_PORT_RANGE=$range BRAID_TIMEOUT=30s BRAID_SOCKET_IFNAME=lo
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

# run_ranks N SOURCE VAR-SETTER: starts N ranks, each with the variables
# that `VAR-SETTER RANK` prints (one NAME=VALUE a line), waits for all.
run_ranks() {
  local n=$1 source=$2 setter=$3 pids=() status=0
  for ((r = 0; r < n; r++)); do
    mapfile -t vars < <("$setter" "$r")
    env "${vars[@]}" timeout -k 5 60 "$check" --expect-source "$source" --port-range "$range" \
      >"$logdir/out$r" 2>"$logdir/err$r" &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    if ! wait "${pids[$r]}"; then status=1; fi
  done
  report "$n" "$status"
}

report() {
  local n=$1 status=$2
  for ((r = 0; r < n; r++)); do
    if [ -f "$logdir/out$r" ]; then sed "s/^/[$r] /" "$logdir/out$r"; sed "s/^/[$r] /" "$logdir/err$r" >&2; fi
  done
  if [ "$status" != 0 ]; then echo "$case_name: FAILED"; exit 1; fi
  echo "$case_name: $n ranks all-reduced correctly; every listening port in $range"
}

torchrun_vars() {
  printf '%s\n' "RANK=$1" WORLD_SIZE=2 "LOCAL_RANK=$1" LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "MASTER_PORT=$base"
}
slurm_vars() {
  printf '%s\n' "SLURM_PROCID=$1" SLURM_NTASKS=2 "SLURM_LOCALID=$1" "SLURM_JOB_ID=launch-$$" \
    'SLURM_JOB_NODELIST=localhost,node[02-04]' "MASTER_PORT=$base"
}

case $case_name in
  mpirun)
    if ! command -v mpirun >/dev/null; then echo "mpirun: SKIPPED: Open MPI's mpirun is not installed"; exit 77; fi
    # mpirun prefixes each rank's lines itself (--tag-output); its own
    # timeout ends a hang.
    timeout -k 5 90 mpirun --allow-run-as-root --oversubscribe -np 4 --tag-output \
      -x BRAID_STORE_ADDR="127.0.0.1:$base" -x BRAID_PORT_RANGE -x BRAID_TIMEOUT -x BRAID_SOCKET_IFNAME \
      "$check" --expect-source "Open MPI" --port-range "$range"
    status=$?
    if [ "$status" != 0 ]; then echo "mpirun: FAILED (status $status)"; exit 1; fi
    echo "mpirun: 4 ranks all-reduced correctly; every listening port in $range"
    ;;
  torchrun) run_ranks 2 "torchrun" torchrun_vars ;;
  slurm) run_ranks 2 "Slurm" slurm_vars ;;
  *) echo "unknown case $case_name" >&2; exit 2 ;;
esac
