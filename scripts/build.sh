#!/usr/bin/env bash
# Configures (once) and builds braid in BUILD_DIR (default: build), release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release >/dev/null
fi
ninja -C "$build" >/dev/null
