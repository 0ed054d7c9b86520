"""The arithmetic and text of bench/compare: the CSV of every measurement,
best and median per size, and the ratio table (braid over the best peer of
the same transport class). Kept apart from the launching so that
tests/bench can check it on made-up records."""
import csv
import statistics

FIELDS = ["round", "library", "transport", "class", "collective", "ranks", "size", "time_us", "algbw_gbps",
          "busbw_gbps", "wrong"]


def write_csv(path, records):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        w.writeheader()
        for r in records:
            w.writerow({k: r[k] for k in FIELDS})


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["ranks"], r["size"], r["round"] = int(r["ranks"]), int(r["size"]), int(r["round"])
        for k in ("time_us", "algbw_gbps", "busbw_gbps"):
            r[k] = float(r[k])
    return rows


def summarize(records):
    """{(collective, ranks): {variant: {size: {best_us, median_us, best_busbw, median_busbw, rounds, class}}}},
    variant being "library/transport". Best is the fastest round; the busbw
    columns are those of the best and the median time."""
    groups = {}
    for r in records:
        key = (r["collective"], r["ranks"])
        variant = f"{r['library']}/{r['transport']}"
        groups.setdefault(key, {}).setdefault(variant, {}).setdefault(r["size"], []).append(r)
    summary = {}
    for key, variants in groups.items():
        for variant, sizes in variants.items():
            for size, rows in sizes.items():
                times = sorted(x["time_us"] for x in rows)
                best, median = times[0], statistics.median(times)
                bus_per_us = rows[0]["busbw_gbps"] * rows[0]["time_us"]  # busbw x time is fixed per size
                summary.setdefault(key, {}).setdefault(variant, {})[size] = {
                    "class": rows[0]["class"], "library": rows[0]["library"], "rounds": len(rows),
                    "by_round": {x["round"]: x["time_us"] for x in rows},
                    "best_us": best, "median_us": median,
                    "best_busbw": bus_per_us / best if best > 0 else 0.0,
                    "median_busbw": bus_per_us / median if median > 0 else 0.0,
                }
    return summary


def ratios(summary):
    """For each braid variant, collective, ranks and size: braid's busbw over
    the best peer's of the same class, on the medians and on the bests.
    Rows: dicts with the peer named; no row where the class has no peer."""
    out = []
    for (collective, ranks), variants in sorted(summary.items()):
        for braid, sizes in sorted(variants.items()):
            if not braid.startswith("braid/"):
                continue
            for size, mine in sorted(sizes.items()):
                peers = [(v, s[size]) for v, s in variants.items()
                         if not v.startswith("braid/") and size in s and s[size]["class"] == mine["class"]]
                if not peers:
                    continue
                peer, theirs = min(peers, key=lambda p: p[1]["median_us"])
                best_peer_best = min(p[1]["best_us"] for p in peers)
                # Round by round against the same peer: each round runs both
                # close together, so a machine that drifts between rounds
                # (this VM's two states) moves both sides of a ratio alike.
                paired = [theirs["by_round"][k] / t for k, t in mine["by_round"].items()
                          if k in theirs["by_round"] and t > 0]
                out.append({"collective": collective, "ranks": ranks, "size": size, "braid": braid,
                            "class": mine["class"], "peer": peer,
                            "braid_median_us": mine["median_us"], "peer_median_us": theirs["median_us"],
                            "braid_median_busbw": mine["median_busbw"],
                            "ratio_median": theirs["median_us"] / mine["median_us"],
                            "ratio_best": best_peer_best / mine["best_us"],
                            "ratio_paired": statistics.median(paired) if paired else float("nan")})
    return out


def human_size(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def format_tables(summary, table_sizes, rounds, tcp_stream_gbps=None, limit_us=None):
    """The per-variant tables and the ratio table. With tcp_stream_gbps (one
    loopback stream, bench/limits.py), TCP-class rows also show braid's busbw
    as a fraction of it; with limit_us(collective, class, ranks, size) (the
    least time bench/limits.py models, or None), rows show that limit over
    braid's median time, and the peer's median time over it ("ceiling": the
    most that any library could lead the peer by on this machine, so a
    ratio target above it cannot be met here)."""
    lines = []
    for (collective, ranks), variants in sorted(summary.items()):
        names = sorted(variants, key=lambda v: (not v.startswith("braid/"), variants[v][next(iter(variants[v]))]["class"], v))
        sizes = [s for s in table_sizes if any(s in variants[v] for v in names)]
        if not sizes:
            continue
        lines.append(f"{collective}, {ranks} ranks: median time in us (best of {rounds}), median busbw in GB/s")
        header = f"{'size':>8}  " + "  ".join(f"{v + ' [' + variants[v][next(iter(variants[v]))]['class'] + ']':>28}" for v in names)
        lines.append(header)
        for s in sizes:
            cells = []
            for v in names:
                x = variants[v].get(s)
                cells.append(f"{'-':>28}" if x is None else
                             f"{x['median_us']:>10.1f} ({x['best_us']:>9.1f}) {x['median_busbw']:>6.3f}")
            lines.append(f"{human_size(s):>8}  " + "  ".join(cells))
        lines.append("")
    table = [r for r in ratios(summary) if r["size"] in table_sizes]
    if table:
        lines.append("braid / best peer of the same transport class: busbw ratio (> 1: braid faster) = peer time / braid time; "
                     "paired: the median over rounds of each round's ratio")
        lines.append(f"{'collective':<11} {'ranks':>5} {'size':>8}  {'braid':<12} {'best peer':<18} "
                     f"{'braid us':>10} {'peer us':>10} {'median':>7} {'best':>7} {'paired':>7}" +
                     (f" {'busbw/TCP stream':>17}" if tcp_stream_gbps else "") +
                     (f" {'limit/braid':>12} {'ceiling':>8}" if limit_us else ""))
        for r in table:
            limit = limit_us(r["collective"], r["class"], r["ranks"], r["size"]) if limit_us else None
            lines.append(f"{r['collective']:<11} {r['ranks']:>5} {human_size(r['size']):>8}  {r['braid']:<12} "
                         f"{r['peer']:<18} {r['braid_median_us']:>10.1f} {r['peer_median_us']:>10.1f} "
                         f"{r['ratio_median']:>7.2f} {r['ratio_best']:>7.2f} {r['ratio_paired']:>7.2f}" +
                         (f" {r['braid_median_busbw'] / tcp_stream_gbps:>17.2f}"
                          if tcp_stream_gbps and r["class"] == "tcp" else
                          f" {'':>17}" if tcp_stream_gbps else "") +
                         (f" {limit / r['braid_median_us']:>12.2f} {r['peer_median_us'] / limit:>8.2f}"
                          if limit is not None else ""))
    lines += [""] + per_peer_ratios(summary, table_sizes)
    return "\n".join(lines)


def per_peer_ratios(summary, table_sizes):
    """Each braid variant's median busbw over each peer's, whatever the
    class (the ratio table above compares within a class only)."""
    lines = []
    for (collective, ranks), variants in sorted(summary.items()):
        braids = sorted(v for v in variants if v.startswith("braid/"))
        peers = sorted(v for v in variants if not v.startswith("braid/"))
        for braid in braids:
            sizes = [s for s in table_sizes if s in variants[braid]]
            if not sizes or not peers:
                continue
            if not lines:
                lines.append("braid's median busbw over each peer's (> 1: braid faster)")
            lines.append(f"{collective + ', ' + str(ranks) + ' ranks, ' + braid:<34}" +
                         "".join(f"{p:>17}" for p in peers))
            for size in sizes:
                cells = []
                for p in peers:
                    theirs = variants[p].get(size)
                    cells.append(f"{'-':>17}" if theirs is None else
                                 f"{theirs['median_us'] / variants[braid][size]['median_us']:>17.2f}")
                lines.append(f"{human_size(size):>34}" + "".join(cells))
    return lines
