#!/usr/bin/env bash
# What BRAID_TRACE costs: braid-perf all_reduce at 8 B and 1 MiB on 2 and 4
# ranks, without and with BRAID_TRACE, interleaved (each round runs every
# mode once: this VM drifts 2x over minutes), then the best and the median
# over ROUNDS rounds (default 7) per mode, and on/off ratios.
#
#   bench/trace_overhead.sh [BASE_BUILD]
#
# BASE_BUILD: another braid's build folder (say the commit before the
# tracing work, built with `ninja -C DIR tools/braid-run bench/braid-perf`),
# run as a third mode, "base". SIZES, RANKS and ROUNDS override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
base=${1:-}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
modes="off on"
[ -n "$base" ] && modes="base $modes"
for round in $(seq 1 "${ROUNDS:-7}"); do
  for n in ${RANKS:-2 4}; do
    for size in ${SIZES:-8 1M}; do
      for mode in $modes; do
        dir=$build
        [ "$mode" = base ] && dir=$base
        if [ "$mode" = on ]; then trace="$out/t.%r.json"; else trace=""; fi
        t=$(env ${trace:+BRAID_TRACE=$trace} "$dir/tools/braid-run" -n "$n" "$dir/bench/braid-perf" all_reduce \
              -b "$size" -e "$size" -n 0 -c 0 --json 2>/dev/null |
            sed -n 's/^\[0\] {.*"time_us":\([0-9.]*\).*/\1/p' | head -1)
        echo "$n $size $mode $t" >> "$out/times"
      done
    done
  done
done
/usr/bin/python3 - "$out/times" <<'PY'
import collections, statistics, sys
times = collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, size, mode, t = (line.split() + [""])[:4]
    if t:
        times[(n, size, mode)].append(float(t))
for n, size in sorted({k[:2] for k in times}, key=lambda k: (int(k[0]), k[1] != "8")):
    row = {m: times[(n, size, m)] for m in ("base", "off", "on") if times[(n, size, m)]}
    text = "  ".join(f"{m} {min(v):.3f}/{statistics.median(v):.3f}" for m, v in row.items())
    ratio = f"on/off {min(row['on']) / min(row['off']):.3f}/{statistics.median(row['on']) / statistics.median(row['off']):.3f}"
    print(f"{n} ranks {size:>3}: us best/median  {text}  {ratio}")
PY
