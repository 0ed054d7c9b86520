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
if [ $# -eq 0 ]; then
  # Meson 1.0's default target builds the test programs too (its `all`
  # includes meson-test-prereq), whatever build_by_default says: name the
  # targets that are built by default instead, from Meson's record of them,
  # once build.ninja is up to date with meson.build.
  ninja -C "$build" build.ninja >/dev/null
  mapfile -t targets < <(/usr/bin/python3 - "$build" <<'PY'
import json, os, sys
build = sys.argv[1]
for target in json.load(open(os.path.join(build, "meson-info", "intro-targets.json"))):
    if target["build_by_default"]:
        for output in target["filename"]:
            print(os.path.relpath(output, build))
PY
  )
  echo "== building $build/ (everything but the tests)"
else
  targets=("$@")
  echo "== building $build/ ${targets[*]}"
fi
NINJA_STATUS="[%f/%t %es] " ninja -C "$build" "${targets[@]}"
