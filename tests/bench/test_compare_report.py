#!/usr/bin/python3
"""bench/compare_report.py on made-up records: best and median per size,
busbw at those times, and the ratio against the best peer of braid's class."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import compare_report  # noqa: E402


def rec(round_, library, transport, klass, time_us, size=1 << 20, busbw_at_1us=None):
    busbw = (busbw_at_1us or 1000.0) / time_us
    return {"round": round_, "library": library, "transport": transport, "class": klass, "collective": "all_reduce",
            "ranks": 2, "size": size, "time_us": time_us, "algbw_gbps": busbw, "busbw_gbps": busbw, "wrong": "0"}


records = [
    rec(0, "braid", "tcp", "tcp", 100), rec(1, "braid", "tcp", "tcp", 300), rec(2, "braid", "tcp", "tcp", 200),
    rec(0, "openmpi", "tcp", "tcp", 400), rec(1, "openmpi", "tcp", "tcp", 150), rec(2, "openmpi", "tcp", "tcp", 500),
    rec(0, "gloo", "tcp", "tcp", 250), rec(1, "gloo", "tcp", "tcp", 260), rec(2, "gloo", "tcp", "tcp", 270),
    rec(0, "openmpi", "vader", "shm", 10), rec(1, "openmpi", "vader", "shm", 12), rec(2, "openmpi", "vader", "shm", 11),
]
s = compare_report.summarize(records)
braid = s[("all_reduce", 2)]["braid/tcp"][1 << 20]
assert (braid["best_us"], braid["median_us"], braid["rounds"]) == (100, 200, 3), braid
assert abs(braid["median_busbw"] - 5.0) < 1e-9 and abs(braid["best_busbw"] - 10.0) < 1e-9, braid
r = compare_report.ratios(s)
assert len(r) == 1, r  # braid has tcp only: one row, against the tcp class (vader is shm)
r = r[0]
assert r["peer"] == "gloo/tcp", r  # lowest median among tcp peers (260 < 400)
assert abs(r["ratio_median"] - 260 / 200) < 1e-9, r
assert abs(r["ratio_best"] - 150 / 100) < 1e-9, r  # best peer round over braid's best
# Round by round against gloo: 250/100, 260/300, 270/200; their median.
assert abs(r["ratio_paired"] - 270 / 200) < 1e-9, r
text = compare_report.format_tables(s, [1 << 20], 3, tcp_stream_gbps=10.0)
assert "braid / best peer of the same transport class" in text and "1 MiB" in text, text
ratio_line = [line for line in text.splitlines() if line.startswith("all_reduce      2")][0]
assert ratio_line.endswith("0.50"), text  # braid's median busbw 5 GB/s over a 10 GB/s stream
assert text.splitlines()[-1].split() == ["1", "MiB", "1.30", "2.00", "0.06"], text  # over gloo, openmpi/tcp, vader
# With the modelled limit (50 us): limit/braid over braid's 200 us median,
# and the ceiling, gloo's 260 us median over it.
text = compare_report.format_tables(s, [1 << 20], 3, limit_us=lambda c, k, n, b: 50.0)
ratio_line = [line for line in text.splitlines() if line.startswith("all_reduce      2")][0]
assert ratio_line.split()[-2:] == ["0.25", "5.20"], text
assert "ceiling" in text, text
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "c.csv")
    compare_report.write_csv(path, records)
    back = compare_report.read_csv(path)
    assert len(back) == len(records) and back[0]["time_us"] == 100.0 and back[0]["size"] == 1 << 20
print("compare_report: ok")
