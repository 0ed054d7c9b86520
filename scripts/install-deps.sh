#!/usr/bin/env bash
# Installs the Debian packages braid's build and tests need, and nothing when
# they are all present (so it is quick to run before every build).
#
#   scripts/install-deps.sh           build + tests
#   scripts/install-deps.sh --bench   also iperf3 (bench/limits.py)
#   scripts/install-deps.sh --fuzz    also clang and its libFuzzer runtime, for scripts/fuzz.sh
set -euo pipefail

# openssl: the command scripts/make-test-certs.sh (and so the TLS tests) runs.
# iproute2: `ip netns` and veth for the fault matrix's two-host case.
# libhwloc-dev: the machine topology (topology/machine.cpp, braid-topo).
# libibverbs-dev, ibverbs-providers: the RDMA devices it lists (topology/rdma.cpp;
# without the providers libibverbs sees no device).
# libucx-dev: the ucx transport (transport/ucx/; built when found).
# openmpi-bin, libopenmpi-dev, libgloo-dev: the peers of bench/compare.py,
# whose smoke run is a test (tests/bench).
# graphviz: `dot`, which renders braid-topo --dot's picture (tests/multiprocess/check_topo.sh).
# pkg-config, make, cmake: the packaging test builds examples/external against
# an installed braid with them (tests/packaging; cmake for braidConfig.cmake).
# pybind11-dev, python3-numpy, python3-pytest: the Python package (python/)
# and its tests (tests/python/); python3-mesonpy: `pip install .` (pyproject.toml).
# libxxhash-dev: XXH3 for the checkpoint checksum and the replica hashes
# (mirrored/content_hash.hpp); xxhash: xxhsum, which the checkpoint test
# checks that checksum with (tests/mirrored).
# python3-torch, libtorch-dev: braid.torch, the torch.distributed backend
# (python/torch/, built when found) and its tests (tests/python/torch/,
# suite python_torch).
# python3-matplotlib: `braid-trace plot` (tools/braid_trace.py), which
# docs/tracing.md runs.
packages=(g++ make cmake meson ninja-build pkg-config catch2 python3 libssl-dev openssl iproute2 libhwloc-dev libibverbs-dev ibverbs-providers libucx-dev
          openmpi-bin libopenmpi-dev libgloo-dev graphviz pybind11-dev python3-numpy python3-pytest python3-mesonpy python3-torch libtorch-dev
          libxxhash-dev xxhash python3-matplotlib)
for arg in "$@"; do
  case "$arg" in
    --bench) packages+=(iperf3) ;;
    --fuzz) packages+=(clang libclang-rt-14-dev) ;;
    *) echo "install-deps: unknown option $arg (use --bench, --fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
