#!/usr/bin/python3
"""braid-trace: the ranks' BRAID_TRACE files as one timeline (docs/tracing.md).

    braid-trace merge OUT.json IN.json...   one trace on rank 0's clock, for
                                            Perfetto (ui.perfetto.dev) or chrome://tracing
    braid-trace check MERGED.json [--ranks N] [--tolerance-us 100]
                                            checks a merged trace (every rank's
                                            operations, steps inside them, clocks
                                            aligned); exit status 1 with the reasons
    braid-trace plot MERGED.json OUT.png [--span NAME] [--index K] [--from US --to US]
                                            a Gantt chart (matplotlib), one row per
                                            rank and track

Each rank's file carries its clock offset to rank 0, measured through the
store when the communicator started (otherData.clock_offset_us); merge adds it
to every timestamp and starts the timeline at 0. Standard library only,
except plot (matplotlib).
"""

import argparse
import json
import sys

# Collectives whose every rank's result needs every rank's input: no rank can
# end one before every rank started it, which check uses to test the clocks.
ALL_TO_ALL = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"}


def load(path):
    with open(path) as f:
        trace = json.load(f)
    if "otherData" not in trace or "braid_trace" not in trace["otherData"]:
        raise SystemExit(f"braid-trace: {path} is not a braid trace (no otherData.braid_trace)")
    return trace


def merge(paths):
    traces = [load(p) for p in paths]
    ranks = {}
    events = []
    for path, t in zip(paths, traces):
        info = t["otherData"]
        if info["rank"] in ranks:
            raise SystemExit(f"braid-trace: {path} and {ranks[info['rank']]['file']} are both rank {info['rank']}")
        ranks[info["rank"]] = dict(info, file=path)
        offset = info.get("clock_offset_us", 0.0)
        for e in t["traceEvents"]:
            if "ts" in e:
                e = dict(e, ts=e["ts"] + offset)
            events.append(e)
    timed = [e["ts"] for e in events if "ts" in e]
    origin = min(timed) if timed else 0.0
    for e in events:
        if "ts" in e:
            e["ts"] = round(e["ts"] - origin, 3)
    events.sort(key=lambda e: (e.get("ts", -1.0), e.get("pid", 0)))
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "braid_trace_merged": 1,
            "time_origin_us": origin,
            "ranks": {str(r): {k: v for k, v in info.items() if k != "braid_trace"} for r, info in sorted(ranks.items())},
        },
    }


def check(trace, ranks=None, tolerance_us=100.0):
    """The reasons the merged trace is wrong (empty when it is right)."""
    problems = []
    info = trace.get("otherData", {}).get("ranks", {})
    present = sorted(int(r) for r in info)
    size = ranks if ranks is not None else (info[str(present[0])]["size"] if present else 0)
    if present != list(range(size)):
        problems.append(f"ranks in the trace: {present}, expected 0..{size - 1}")
    for r, i in info.items():
        if abs(i.get("clock_offset_us", 0.0)) > 1e6 and i.get("host") == info.get("0", {}).get("host"):
            problems.append(f"rank {r}: offset {i['clock_offset_us']} us to rank 0 on the same host")
    ops = {}  # (rank, track, seq, point-to-point) -> op event
    by_id = {}  # (rank, id) -> op event
    steps = []
    for e in trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        if e.get("cat") == "op":
            by_id[(e["pid"], e["args"]["id"])] = e
            if not e["args"]["p2p"]:
                ops[(e["pid"], e["tid"], e["args"]["seq"], False)] = e
        elif e.get("cat") == "step":
            steps.append(e)
    if not ops:
        problems.append("no operations in the trace")
    # Every collective of every rank's first communicator (track 0) on every rank.
    per_rank = {}
    for (pid, tid, seq, p2p), e in ops.items():
        if tid == 0 and not p2p:
            per_rank.setdefault(pid, {})[seq] = (e["args"]["collective"], e["args"]["bytes"])
    reference = per_rank.get(0, {})
    for r in range(size):
        mine = per_rank.get(r)
        if mine is None:
            problems.append(f"rank {r}: no operations")
        elif mine != reference:
            diff = sorted(set(mine.items()) ^ set(reference.items()))[:3]
            problems.append(f"rank {r}: its collectives differ from rank 0's ({len(mine)} against {len(reference)}; "
                            f"first differences {diff})")
    # Steps nest inside their operation, on the lanes of its track.
    epsilon = 0.002  # the timestamps' rounding, us
    for s in steps:
        op = by_id.get((s["pid"], s["args"]["op"]))
        if op is None or op["tid"] != s["tid"] - s["tid"] % 64:
            problems.append(f"rank {s['pid']}: step {s['args']['step']} of op #{s['args']['op']} has no operation")
            continue
        if s["ts"] < op["ts"] - epsilon or s["ts"] + s["dur"] > op["ts"] + op["dur"] + epsilon:
            problems.append(f"rank {s['pid']}: {s['name']} (step {s['args']['step']}) of op #{s['args']['op']} at "
                            f"{s['ts']}+{s['dur']} us is not inside its operation at {op['ts']}+{op['dur']} us")
    # Clocks: on rank 0's timeline no rank ends an all-to-all collective
    # before every rank started it.
    worst = 0.0
    for seq, (collective, _) in reference.items():
        if collective not in ALL_TO_ALL:
            continue
        spans = [ops.get((r, 0, seq, False)) for r in range(size)]
        if None in spans:
            continue
        late_start = max(e["ts"] for e in spans)
        early_end = min(e["ts"] + e["dur"] for e in spans)
        worst = max(worst, late_start - early_end)
    if worst > tolerance_us:
        problems.append(f"clocks: a rank ended a collective {worst:.1f} us before another rank started it "
                        f"(tolerance {tolerance_us} us)")
    trace.setdefault("otherData", {})["check_worst_causality_us"] = worst
    return problems[:20]


def plot(trace, out, span=None, index=0, start=None, end=None):
    try:
        import matplotlib
    except ImportError:
        sys.exit("braid-trace plot: needs matplotlib (Debian: apt-get install python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    if span is not None:
        marks = sorted((e for e in events if e.get("cat") == "app" and e["name"] == span and e["pid"] == 0),
                       key=lambda e: e["ts"])
        if len(marks) <= index:
            raise SystemExit(f"braid-trace plot: rank 0 has {len(marks)} spans named '{span}'")
        start, end = marks[index]["ts"], marks[index]["ts"] + marks[index]["dur"]
    if start is None:
        start = min(e["ts"] for e in events)
    if end is None:
        end = max(e["ts"] + e["dur"] for e in events)
    shown = [e for e in events if e["ts"] < end and e["ts"] + e["dur"] > start]
    names = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    # Rows: per rank, the application's threads (a row per nesting depth of
    # their spans), then each communicator's operations and its steps (all
    # lanes on one row).
    depth = {}
    open_spans = {}
    for e in sorted((e for e in shown if e.get("cat") == "app"), key=lambda e: (e["ts"], -e["dur"])):
        stack = open_spans.setdefault((e["pid"], e["tid"]), [])
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        depth[id(e)] = len(stack)
        stack.append(e["ts"] + e["dur"])

    def row_key(e):
        if e.get("cat") == "app":
            return (e["pid"], 0, e["tid"], depth[id(e)])
        return (e["pid"], 1, e["tid"] - e["tid"] % 64, 0 if e.get("cat") == "op" else 1)
    rows = sorted({row_key(e) for e in shown})
    row_of = {k: i for i, k in enumerate(rows)}
    colors = {"send": "tab:blue", "recv": "tab:orange", "recv_reduce": "tab:red", "reduce": "tab:purple",
              "copy": "tab:gray", "average": "tab:brown"}
    op_colors = ["tab:green", "tab:olive", "tab:cyan", "tab:pink"]
    collectives = sorted({e["args"]["collective"] for e in shown if e.get("cat") == "op"})
    fig, ax = plt.subplots(figsize=(12, 0.32 * len(rows) + 1.6))
    for e in shown:
        y = row_of[row_key(e)]
        left = (max(e["ts"], start) - start) / 1e3
        width = max((min(e["ts"] + e["dur"], end) - max(e["ts"], start)) / 1e3, 1e-4)
        if e.get("cat") == "app":
            color = "0.75"
        elif e.get("cat") == "op":
            color = op_colors[collectives.index(e["args"]["collective"]) % len(op_colors)]
        else:
            color = colors.get(e["name"], "black")
        ax.barh(y, width, left=left, height=0.8, color=color, edgecolor="black", linewidth=0.2, zorder=2)
        queued = e.get("args", {}).get("queued_us", 0) if e.get("cat") == "op" else 0
        if queued > 0 and e["ts"] > start:
            # Submitted (*_async) before it started: its wait in the queue.
            q_left = max(e["ts"] - queued, start)
            ax.barh(y, (e["ts"] - q_left) / 1e3, left=(q_left - start) / 1e3, height=0.5, color="white",
                    edgecolor=color, hatch="////", linewidth=0.5, zorder=1)
        if e.get("cat") == "app" and width > (end - start) / 1e3 * 0.06:
            ax.text(left + width / 2, y, e["name"], ha="center", va="center", fontsize=7)
    labels = []
    for pid, kind, tid, sub in rows:
        name = names.get((pid, tid), f"tid {tid}")
        labels.append(f"rank {pid}: {name}" + (" steps" if kind == 1 and sub == 1 else ""))
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms (rank 0's clock)")
    ax.set_xlim(0, (end - start) / 1e3)
    legend = [Patch(color="0.75", label="application (TraceSpan)"),
              Patch(facecolor="white", edgecolor="tab:green", hatch="////", label="queued (async)")]
    legend += [Patch(color=op_colors[i % len(op_colors)], label=c) for i, c in enumerate(collectives)]
    legend += [Patch(color=c, label=k) for k, c in colors.items()
               if any(e.get("cat") == "step" and e["name"] == k for e in shown)]
    ax.legend(handles=legend, fontsize=7, loc="upper right", ncol=3)
    ax.grid(axis="x", linewidth=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="braid-trace", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="join the ranks' BRAID_TRACE files on rank 0's clock")
    m.add_argument("out")
    m.add_argument("inputs", nargs="+")
    c = sub.add_parser("check", help="check a merged trace")
    c.add_argument("trace")
    c.add_argument("--ranks", type=int)
    c.add_argument("--tolerance-us", type=float, default=100.0)
    p = sub.add_parser("plot", help="draw a merged trace as a Gantt chart (PNG)")
    p.add_argument("trace")
    p.add_argument("out")
    p.add_argument("--span", help="show the stretch of rank 0's application span of this name")
    p.add_argument("--index", type=int, default=0, help="which of those spans (from 0)")
    p.add_argument("--from", dest="start", type=float, help="from this time, us")
    p.add_argument("--to", dest="end", type=float, help="to this time, us")
    args = parser.parse_args(argv)
    if args.command == "merge":
        merged = merge(args.inputs)
        with open(args.out, "w") as f:
            json.dump(merged, f, separators=(",", ":"))
        ops = sum(1 for e in merged["traceEvents"] if e.get("cat") == "op")
        offsets = ", ".join(f"rank {r} {i.get('clock_offset_us', 0):+.1f} us (measured {i.get('clock_measured_offset_us', 0):+.1f}, "
                            f"round trip {i.get('clock_round_trip_us', 0):.0f})" for r, i in merged["otherData"]["ranks"].items())
        print(f"braid-trace: {args.out}: {len(merged['otherData']['ranks'])} ranks, {ops} operations; clock offsets: {offsets}")
        return 0
    with open(args.trace) as f:
        trace = json.load(f)
    if args.command == "check":
        problems = check(trace, args.ranks, args.tolerance_us)
        for p in problems:
            print("braid-trace check:", p, file=sys.stderr)
        if not problems:
            print(f"braid-trace check: {args.trace} is right (ranks' collectives agree, steps nest, the worst clock "
                  f"disagreement is {trace['otherData']['check_worst_causality_us']:.1f} us)")
        return 1 if problems else 0
    plot(trace, args.out, args.span, args.index, args.start, args.end)
    print(f"braid-trace: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
