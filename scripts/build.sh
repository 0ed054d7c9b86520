#!/usr/bin/env bash
# Configures (once) and builds braid in BUILD_DIR (default: build), release
# mode with warnings as errors (braid builds without a warning with Debian
# 12's compilers, and CI keeps it so), showing Ninja's progress: one line
# per step, [done/total elapsed].
#
#   scripts/build.sh                   the library, the tools, the examples, the Python package
#   scripts/build.sh TARGET...         only those Ninja targets (tools/braid-run, examples/braid-demo, ...)
#
# The test programs are built by `meson test`, as the tests it runs need them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  echo "== configuring $build/ (meson setup; the full log: $build/meson-logs/meson-log.txt)"
  if ! setup_output=$(meson setup "$build" --buildtype=release --werror 2>&1); then
    tail -n 30 <<<"$setup_output" >&2
    exit 1
  fi
fi
echo "== building $build/ ${*:-(everything but the tests)}"
NINJA_STATUS="[%f/%t %es] " ninja -C "$build" "$@"
