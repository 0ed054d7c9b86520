#!/usr/bin/python3
"""bench/limits.py: what this machine allows, the yardstick for braid's busbw.

    bench/limits.py [--build DIR] [--out DIR] [--quick]

Measures, and prints as one table (and DIR/limits.csv):
  - memcpy and braid's reduction kernels (f32, bf16, f16; each build the CPU
    has) per size, one core (build/bench/kernel_bench);
  - one TCP stream over loopback and the 8-byte ping-pong half round trip,
    between two threads (build/bench/tcp_loopback), and one stream with
    iperf3 when it is installed (scripts/install-deps.sh --bench installs it);
    and the rate each direction gets when two streams run in opposite
    directions at once, one thread a side sending and receiving (printed
    beside the model, not in it: a collective's bursts can beat it);
  - between two processes through shared memory (build/bench/shm_pingpong):
    the 8-byte half round trip of a spinning waiter, and the one-way copy
    rate per CPU second of the busier side at 1, 16 and 64 MiB, the best of
    braid's ring copies and a CMA read (each byte crossing from one core's
    cache to another's, which a one-core memcpy does not pay); and the
    share of it each side keeps when two CMA reads run in opposite
    directions at once, as the ranks of an all-reduce copy.
A TCP transport on one host cannot beat the loopback stream per link; an
all-reduce over shared memory cannot beat those copies nor the reduction
kernel. From them it models, per size, the least time an all-reduce of n
ranks can take (modelled_us, the "limit" table for 2 and 4 ranks over shm
and tcp): every rank must take in (n-1)/n of the buffer twice, once reducing
it and once copying it (a reduce-scatter and an all-gather, the fewest bytes
any algorithm moves), in at least ceil(log2 n) message latencies; over shm
the reduction reads the peer's bytes as it goes (one crossing, fused, at the
one-way rate times the duplex share, since every rank copies at once), over
tcp each byte also goes through the kernel at the stream's rate; ranks
beyond the cores take turns on them. bench/compare.py prints braid's busbw
as a fraction of the loopback stream, and braid's median time against this
limit ("limit/braid", at most 1 unless the machine ran faster than when it
was measured).
"""
import argparse
import csv
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KERNEL_SIZES = "4K,64K,1M,16M,64M"


def iperf3_gbps(seconds):
    """One iperf3 stream over 127.0.0.1 in GB/s, or None without iperf3 or
    when it fails (the reason goes to stderr)."""
    if shutil.which("iperf3") is None:
        return None
    with socket.socket() as s:  # a free port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    error = ""
    try:
        for _ in range(20):  # bounded: the server may not listen yet on a busy machine
            time.sleep(0.3)
            done = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
                                  capture_output=True, text=True, timeout=seconds + 30)
            try:
                result = json.loads(done.stdout)
                if done.returncode == 0:
                    return result["end"]["sum_received"]["bits_per_second"] / 8e9
                error = result.get("error", done.stderr.strip())
            except ValueError:
                error = done.stderr.strip() or done.stdout.strip()
        print(f"limits: iperf3 failed: {error}", file=sys.stderr)
        return None
    except (subprocess.TimeoutExpired, KeyError) as e:
        print(f"limits: iperf3 failed: {e!r}", file=sys.stderr)
        return None
    finally:
        server.kill()
        server.wait()


def shm_rates(build, runs):
    """{"half_rtt_us", "copy_gbps": {bytes: GB/s}} from shm_pingpong, or None
    when it fails (the reason goes to stderr)."""
    tool = os.path.join(build, "bench", "shm_pingpong")
    try:
        lat = subprocess.run([tool, "latency", "--runs", runs], capture_output=True, text=True, check=True,
                             timeout=300).stdout
        bw = subprocess.run([tool, "bandwidth", "--runs", runs], capture_output=True, text=True, check=True,
                            timeout=600).stdout
    except (OSError, subprocess.SubprocessError) as e:
        print(f"limits: shm_pingpong failed: {e!r}", file=sys.stderr)
        return None
    half_rtt = None
    for line in lat.splitlines():
        if line.startswith("spin 20 us + futex"):
            half_rtt = float(line.split()[-2])
    copy, duplex = {}, {}
    header = []
    for line in bw.splitlines():
        words = line.split()
        if words[:1] == ["size"]:
            header = words[1:]
        elif len(words) >= 3 and words[1] == "MiB" and words[2] == "cpu" and header:
            rates = dict(zip(header, (float(w) for w in words[3:])))
            # What braid's links do: ring copies (either way) or a CMA read.
            size = int(words[0]) << 20
            copy[size] = max(rates.get(k, 0.0) for k in ("ring", "by_size", "cma"))
            if rates.get("cma") and rates.get("duplex"):
                duplex[size] = rates["duplex"] / rates["cma"]
    if half_rtt is None or not copy:
        print("limits: shm_pingpong printed no figures this reads", file=sys.stderr)
        return None
    return {"half_rtt_us": half_rtt, "copy_gbps": copy, "duplex_share": duplex}


def rate_at(rates, size):
    """The rate measured at the size nearest `size` (by ratio)."""
    import math
    return rates[min(rates, key=lambda s: abs(math.log(s / max(size, 1))))]


def modelled_us(limits, transport, ranks, size, cores=None):
    """The least time (us) an all-reduce of `size` bytes of f32 on `ranks`
    ranks can take over `transport` ("shm" or "tcp") on this machine: the
    module's docstring says how. None without the figures it needs."""
    cores = cores or os.cpu_count() or 1
    if ranks < 2:
        return 0.0
    share = (ranks - 1) / ranks * size
    turns = max(1.0, ranks / cores)
    steps = (ranks - 1).bit_length()  # ceil(log2 ranks)
    reduce_rates = {int(k["bytes"]): float(k["median_gbps"]) for k in limits["kernels"]
                    if k["kernel"] == "reduce" and k["type"] == "f32" and k["build"] != "baseline"} or \
        {int(k["bytes"]): float(k["median_gbps"]) for k in limits["kernels"]
         if k["kernel"] == "reduce" and k["type"] == "f32"}
    if not reduce_rates:
        return None
    reduce_gbps = rate_at(reduce_rates, size)
    if transport == "shm":
        shm = limits.get("shm")
        if not shm:
            return None
        copy_gbps = rate_at(shm["copy_gbps"], size)
        # Every rank copies at once: each gets the share of its one-way rate
        # that two CMA reads in opposite directions at once each get (the
        # duplex column; up to 1, where the two do not slow each other).
        if shm.get("duplex_share"):
            copy_gbps *= min(1.0, rate_at(shm["duplex_share"], size))
        # The reduction reads the peer's bytes as it goes: it runs at the
        # slower of the crossing and the kernel; the all-gather is a crossing.
        per_byte = 1 / min(copy_gbps, reduce_gbps) + 1 / copy_gbps
        return steps * shm["half_rtt_us"] + turns * share * per_byte / 1e3
    if transport == "tcp":
        t = limits["tcp"]
        per_byte = 2 / t["stream_gbps"] + 1 / reduce_gbps
        latency = min(x for x in (t["ping_pong_us"], t.get("ping_pong_polling_us")) if x is not None)
        return steps * latency + turns * share * per_byte / 1e3
    return None


def measure(build, quick=False):
    """{"kernels": [rows], "tcp": {"ping_pong_us", "stream_gbps", "iperf3_gbps"},
    "shm": {"half_rtt_us", "copy_gbps"} or None}."""
    rounds, seconds = ("3", 1) if quick else ("7", 2)
    kernel = subprocess.run([os.path.join(build, "bench", "kernel_bench"), rounds, "--csv", "--sizes", KERNEL_SIZES],
                            capture_output=True, text=True, check=True, timeout=600)
    kernels = list(csv.DictReader(io.StringIO(kernel.stdout)))
    tcp = subprocess.run([os.path.join(build, "bench", "tcp_loopback"), "--csv", "--seconds", str(seconds)],
                         capture_output=True, text=True, check=True, timeout=120)
    values = {r["measure"]: float(r["value"]) for r in csv.DictReader(io.StringIO(tcp.stdout))}
    return {"kernels": kernels,
            "tcp": {"ping_pong_us": values["ping_pong_half_rtt_8B"],
                    "ping_pong_polling_us": values.get("ping_pong_half_rtt_8B_polling"),
                    "stream_gbps": values["stream_throughput"], "duplex_gbps": values.get("duplex_throughput"),
                    "iperf3_gbps": iperf3_gbps(seconds)},
            "shm": shm_rates(build, "3" if quick else "5")}


def write_csv(path, limits):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["measure", "type", "build", "bytes", "median", "best", "unit"])
        for k in limits["kernels"]:
            w.writerow([k["kernel"], k["type"], k["build"], k["bytes"], k["median_gbps"], k["best_gbps"], "GB/s"])
        t = limits["tcp"]
        w.writerow(["tcp_ping_pong_half_rtt", "", "", 8, t["ping_pong_us"], "", "us"])
        if t.get("ping_pong_polling_us") is not None:
            w.writerow(["tcp_ping_pong_half_rtt", "", "polling", 8, t["ping_pong_polling_us"], "", "us"])
        w.writerow(["tcp_stream", "", "threads", "", t["stream_gbps"], "", "GB/s"])
        if t.get("duplex_gbps") is not None:
            w.writerow(["tcp_duplex", "", "threads", "", t["duplex_gbps"], "", "GB/s"])
        if t["iperf3_gbps"] is not None:
            w.writerow(["tcp_stream", "", "iperf3", "", f"{t['iperf3_gbps']:.3f}", "", "GB/s"])
        shm = limits.get("shm")
        if shm:
            w.writerow(["shm_half_rtt", "", "spin", 8, shm["half_rtt_us"], "", "us"])
            for size, gbps in sorted(shm["copy_gbps"].items()):
                w.writerow(["shm_copy", "", "cross_process", size, gbps, "", "GB/s"])
            for size, share in sorted(shm.get("duplex_share", {}).items()):
                w.writerow(["shm_duplex_share", "", "cma", size, f"{share:.3f}", "", "ratio"])


MODEL_SIZES = [8, 256, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20]


def read_csv(path):
    """The limits a write_csv file holds (kernels, tcp, shm), for compare.py."""
    limits = {"kernels": [], "tcp": {"iperf3_gbps": None}, "shm": {"copy_gbps": {}}}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            m = r["measure"]
            if m in ("memcpy", "reduce"):
                limits["kernels"].append({"kernel": m, "type": r["type"], "build": r["build"], "bytes": r["bytes"],
                                          "median_gbps": r["median"], "best_gbps": r["best"]})
            elif m == "tcp_ping_pong_half_rtt":
                limits["tcp"]["ping_pong_polling_us" if r["build"] == "polling" else "ping_pong_us"] = float(r["median"])
            elif m == "tcp_stream" and r["build"] == "threads":
                limits["tcp"]["stream_gbps"] = float(r["median"])
            elif m == "tcp_duplex":
                limits["tcp"]["duplex_gbps"] = float(r["median"])
            elif m == "shm_half_rtt":
                limits["shm"]["half_rtt_us"] = float(r["median"])
            elif m == "shm_copy":
                limits["shm"]["copy_gbps"][int(r["bytes"])] = float(r["median"])
            elif m == "shm_duplex_share":
                limits["shm"].setdefault("duplex_share", {})[int(r["bytes"])] = float(r["median"])
    if "half_rtt_us" not in limits["shm"] or not limits["shm"]["copy_gbps"]:
        limits["shm"] = None
    if "ping_pong_us" not in limits["tcp"] or "stream_gbps" not in limits["tcp"]:
        return None
    return limits


def format_model(limits, cores=None):
    """The modelled least all-reduce time per size, 2 and 4 ranks, shm and tcp."""
    cores = cores or os.cpu_count() or 1
    cols = [(t, n) for t in ("shm", "tcp") for n in (2, 4)]
    lines = [f"all_reduce f32, the least time this machine allows (us; {cores} cores; modelled_us)",
             f"{'size':>10}" + "".join(f"{t + ' ' + str(n) + ' ranks':>14}" for t, n in cols)]
    for size in MODEL_SIZES:
        cells = []
        for t, n in cols:
            v = modelled_us(limits, t, n, size, cores)
            cells.append(f"{'-':>14}" if v is None else f"{v:>14.2f}")
        lines.append(f"{size:>10}" + "".join(cells))
    return "\n".join(lines)


def format_limits(limits):
    lines = ["this machine's limits (one core; median of rounds)",
             f"{'kernel':<8}{'type':<6}{'build':<10}" + "".join(f"{s:>9}" for s in KERNEL_SIZES.split(",")) + "  GB/s"]
    rows = {}
    for k in limits["kernels"]:
        rows.setdefault((k["kernel"], k["type"], k["build"]), []).append(float(k["median_gbps"]))
    for (kernel, type_, build), values in rows.items():
        lines.append(f"{kernel:<8}{type_:<6}{build:<10}" + "".join(f"{v:>9.2f}" for v in values))
    t = limits["tcp"]
    polled = t.get("ping_pong_polling_us")
    lines.append(f"TCP loopback: 8-byte ping-pong {t['ping_pong_us']:.2f} us half round trip" +
                 (f" ({polled:.2f} polling)" if polled is not None else "") + "; one stream "
                 f"{t['stream_gbps']:.2f} GB/s" +
                 (f" (iperf3: {t['iperf3_gbps']:.2f} GB/s)" if t["iperf3_gbps"] is not None
                  else " (no iperf3 result: not installed, or see above)"))
    if t.get("duplex_gbps") is not None:
        lines.append(f"  two streams in opposite directions at once (each rank of an all-reduce sends and receives): "
                     f"{t['duplex_gbps']:.2f} GB/s each")
    shm = limits.get("shm")
    if shm:
        lines.append(f"shared memory between two processes: 8-byte half round trip {shm['half_rtt_us']:.2f} us "
                     "(spinning); one-way copies " +
                     ", ".join(f"{gbps:.1f} GB/s at {size >> 20} MiB" for size, gbps in sorted(shm["copy_gbps"].items())))
        if shm.get("duplex_share"):
            lines.append("  both ways at once, each side gets of its one-way rate (CMA): " +
                         ", ".join(f"{share:.2f} at {size >> 20} MiB" for size, share in sorted(shm["duplex_share"].items())))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--out", default=None, help="directory for limits.csv (default: BUILD/bench-results)")
    p.add_argument("--quick", action="store_true", help="fewer rounds, 1 s streams")
    args = p.parse_args()
    build = os.path.abspath(args.build)
    out = os.path.abspath(args.out or os.path.join(build, "bench-results"))
    os.makedirs(out, exist_ok=True)
    limits = measure(build, args.quick)
    write_csv(os.path.join(out, "limits.csv"), limits)
    print(format_limits(limits))
    print()
    print(format_model(limits))
    print(f"csv: {os.path.join(out, 'limits.csv')}")


if __name__ == "__main__":
    sys.exit(main())
