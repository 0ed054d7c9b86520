#!/usr/bin/env bash
# Restoring a checkpoint onto another replica count: train and save with 4
# processes, restore with 2 processes and with 2 processes x 2 threads, and
# check the restored values hash to what was saved.
set -euo pipefail
braid_run=$1 check=$2 dir=$3
path="$dir/across_replicas.ckpt"
rm -f "$path" "$path.hash"
"$braid_run" -n 4 --timeout 120s "$check" --strategy multi_worker_mirrored --save "$path"
"$braid_run" -n 2 --timeout 120s "$check" --strategy multi_worker_mirrored --restore "$path"
"$braid_run" -n 1 --timeout 120s "$check" --strategy mirrored --local-replicas 2 --restore "$path"
echo "checkpoint saved by 4 replicas restored onto 2 and onto 1 x 2"
