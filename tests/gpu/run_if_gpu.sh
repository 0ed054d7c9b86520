#!/bin/sh
# run_if_gpu.sh DEVICE_CHECK COMMAND...: runs COMMAND when DEVICE_CHECK
# --available finds a usable CUDA device; otherwise prints why and exits 77
# (a skip for meson).
check=$1
shift
"$check" --available || exit 77
exec "$@"
