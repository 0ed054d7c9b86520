#!/usr/bin/python3
"""bench/limits.py: what this machine allows, the yardstick for braid's busbw.

    bench/limits.py [--build DIR] [--out DIR] [--quick]

Measures, and prints as one table (and DIR/limits.csv):
  - memcpy and braid's reduction kernels (f32, bf16, f16; each build the CPU
    has) per size, one core (build/bench/kernel_bench);
  - one TCP stream over loopback and the 8-byte ping-pong half round trip,
    between two threads (build/bench/tcp_loopback), and one stream with
    iperf3 when it is installed (scripts/install-deps.sh --bench installs it).
A TCP transport on one host cannot beat the loopback stream per link; an
all-reduce over shared memory cannot beat memcpy (each byte is copied at
least once) nor the reduction kernel. bench/compare.py prints braid's busbw
as a fraction of the loopback stream.
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


def measure(build, quick=False):
    """{"kernels": [rows], "tcp": {"ping_pong_us", "stream_gbps", "iperf3_gbps"}}."""
    rounds, seconds = ("3", 1) if quick else ("7", 2)
    kernel = subprocess.run([os.path.join(build, "bench", "kernel_bench"), rounds, "--csv", "--sizes", KERNEL_SIZES],
                            capture_output=True, text=True, check=True, timeout=600)
    kernels = list(csv.DictReader(io.StringIO(kernel.stdout)))
    tcp = subprocess.run([os.path.join(build, "bench", "tcp_loopback"), "--csv", "--seconds", str(seconds)],
                         capture_output=True, text=True, check=True, timeout=120)
    values = {r["measure"]: float(r["value"]) for r in csv.DictReader(io.StringIO(tcp.stdout))}
    return {"kernels": kernels,
            "tcp": {"ping_pong_us": values["ping_pong_half_rtt_8B"], "stream_gbps": values["stream_throughput"],
                    "iperf3_gbps": iperf3_gbps(seconds)}}


def write_csv(path, limits):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["measure", "type", "build", "bytes", "median", "best", "unit"])
        for k in limits["kernels"]:
            w.writerow([k["kernel"], k["type"], k["build"], k["bytes"], k["median_gbps"], k["best_gbps"], "GB/s"])
        t = limits["tcp"]
        w.writerow(["tcp_ping_pong_half_rtt", "", "", 8, t["ping_pong_us"], "", "us"])
        w.writerow(["tcp_stream", "", "threads", "", t["stream_gbps"], "", "GB/s"])
        if t["iperf3_gbps"] is not None:
            w.writerow(["tcp_stream", "", "iperf3", "", f"{t['iperf3_gbps']:.3f}", "", "GB/s"])


def format_limits(limits):
    lines = ["this machine's limits (one core; median of rounds)",
             f"{'kernel':<8}{'type':<6}{'build':<10}" + "".join(f"{s:>9}" for s in KERNEL_SIZES.split(",")) + "  GB/s"]
    rows = {}
    for k in limits["kernels"]:
        rows.setdefault((k["kernel"], k["type"], k["build"]), []).append(float(k["median_gbps"]))
    for (kernel, type_, build), values in rows.items():
        lines.append(f"{kernel:<8}{type_:<6}{build:<10}" + "".join(f"{v:>9.2f}" for v in values))
    t = limits["tcp"]
    lines.append(f"TCP loopback: 8-byte ping-pong {t['ping_pong_us']:.2f} us half round trip; one stream "
                 f"{t['stream_gbps']:.2f} GB/s" +
                 (f" (iperf3: {t['iperf3_gbps']:.2f} GB/s)" if t["iperf3_gbps"] is not None
                  else " (no iperf3 result: not installed, or see above)"))
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
    print(f"csv: {os.path.join(out, 'limits.csv')}")


if __name__ == "__main__":
    sys.exit(main())
