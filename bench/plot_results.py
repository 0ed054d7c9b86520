#!/usr/bin/python3
"""Plots of bench/compare's CSV, with Debian's python3-matplotlib:

    bench/plot_results.py compare.csv OUT_DIR

For each collective, OUT_DIR/busbw_<collective>.png (median busbw against
message size, one line per library/transport, one panel per rank count) and
OUT_DIR/latency_<collective>.png (median time at sizes up to 64 KiB). Solid
lines are braid, dashed lines the peers; a transport class keeps one marker.
"""
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_report  # noqa: E402

LATENCY_MAX_BYTES = 64 * 1024
MARKERS = {"tcp": "o", "shm": "s"}


def size_label(n, _pos=None):
    n = int(round(n))
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n}"


def _panel(ax, variants, value, max_size=None):
    for name in sorted(variants, key=lambda v: (not v.startswith("braid/"), v)):
        points = sorted((s, x) for s, x in variants[name].items() if max_size is None or s <= max_size)
        if not points:
            continue
        klass = points[0][1]["class"]
        ax.plot([s for s, _ in points], [value(x) for _, x in points], label=f"{name} [{klass}]",
                linestyle="-" if name.startswith("braid/") else "--", marker=MARKERS.get(klass, "^"),
                linewidth=2.2 if name.startswith("braid/") else 1.3, markersize=4)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    ax.grid(True, which="major", alpha=0.3)


def plot(csv_path, out_dir):
    summary = compare_report.summarize(compare_report.read_csv(csv_path))
    written = []
    for collective in sorted({c for c, _ in summary}):
        rank_counts = sorted(r for c, r in summary if c == collective)
        for kind in ("busbw", "latency"):
            fig, axes = plt.subplots(1, len(rank_counts), figsize=(6.4 * len(rank_counts), 4.6), squeeze=False)
            for ax, ranks in zip(axes[0], rank_counts):
                variants = summary[(collective, ranks)]
                if kind == "busbw":
                    _panel(ax, variants, lambda x: x["median_busbw"])
                    ax.set_ylabel("bus bandwidth, GB/s (median)")
                else:
                    _panel(ax, variants, lambda x: x["median_us"], LATENCY_MAX_BYTES)
                    ax.set_yscale("log")
                    ax.set_ylabel("time per operation, us (median)")
                ax.set_xlabel("message size (bytes)")
                ax.set_title(f"{collective}, {ranks} ranks, one host")
                ax.legend(fontsize=8)
            fig.suptitle(f"braid vs Open MPI and Gloo: {collective} f32, "
                         f"{'busbw' if kind == 'busbw' else 'latency at small sizes'} (bench/compare.py, interleaved rounds)",
                         fontsize=10)
            fig.tight_layout()
            path = os.path.join(out_dir, f"{kind}_{collective}.png")
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    for p in plot(sys.argv[1], sys.argv[2]):
        print(p)
