#!/bin/sh
# refused_without_gpu.sh DEVICE_CHECK BRAID_RUN BRAID_PERF: where no CUDA
# device is usable, braid-perf --device must fail at once with the reason
# (no usable device, or a braid built without CUDA) rather than run on host
# memory or crash. Skipped (77) where a device is usable.
check=$1 run=$2 perf=$3
if "$check" --available >/dev/null; then
  echo "skipped: a CUDA device is usable here"
  exit 77
fi
out=$("$run" -n 1 --timeout 60s "$perf" all_reduce --device -b 8 -e 8 2>&1)
rc=$?
echo "$out"
[ "$rc" -ne 0 ] || { echo "FAILED: braid-perf --device succeeded without a device"; exit 1; }
echo "$out" | grep -q -E "no usable device|built without CUDA" ||
  { echo "FAILED: the error does not say why device buffers are refused"; exit 1; }
echo "refused with the reason, as it should"
