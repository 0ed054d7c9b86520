#!/bin/sh
# run_if_ucx.sh yes|no PROGRAM ARGS...: runs the program when the build has
# the UCX transport (meson's have_ucx, the first argument); otherwise says
# why and exits 77, which Meson reports as a skip.
compiled=$1
shift
if [ "$compiled" != yes ]; then
  echo "skipped: this braid was built without UCX (install libucx-dev, scripts/install-deps.sh, and configure again)"
  exit 77
fi
exec "$@"
