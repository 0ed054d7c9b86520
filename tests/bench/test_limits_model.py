#!/usr/bin/python3
"""bench/limits.py's model on made-up rates: the least all-reduce time over
shm and tcp, the duplex share slowing the shm copies, and limits.csv read
back as written (the two-way TCP rate with it)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import limits  # noqa: E402

MiB = 1 << 20
machine = {
    "kernels": [{"kernel": "reduce", "type": "f32", "build": "avx2", "bytes": str(MiB), "median_gbps": "40",
                 "best_gbps": "41"}],
    "tcp": {"ping_pong_us": 30.0, "ping_pong_polling_us": 5.0, "stream_gbps": 4.0, "iperf3_gbps": None},
    "shm": {"half_rtt_us": 0.5, "copy_gbps": {MiB: 10.0}},
}


def close(a, b):
    return abs(a - b) < 1e-9 * max(1.0, abs(b))


# 2 ranks, 1 MiB over shm: half the buffer (524288 bytes) reduced while
# crossing at min(10, 40) GB/s, then copied at 10 GB/s, after one latency.
share = MiB / 2
assert close(limits.modelled_us(machine, "shm", 2, MiB, cores=2), 0.5 + share * (1 / 10 + 1 / 10) / 1e3)
# Two ways at once, each side keeps half its one-way rate: the copies take twice as long.
machine["shm"]["duplex_share"] = {MiB: 0.5}
assert close(limits.modelled_us(machine, "shm", 2, MiB, cores=2), 0.5 + share * (1 / 5 + 1 / 5) / 1e3)
# A share above 1 (noise: the two did not slow each other) counts as 1.
machine["shm"]["duplex_share"] = {MiB: 1.2}
assert close(limits.modelled_us(machine, "shm", 2, MiB, cores=2), 0.5 + share * (1 / 10 + 1 / 10) / 1e3)
# tcp: the stream twice (send and receive side) and the reduction, after the polled latency.
assert close(limits.modelled_us(machine, "tcp", 2, MiB, cores=2), 5.0 + share * (2 / 4 + 1 / 40) / 1e3)
# 4 ranks on 2 cores take turns: twice the share's time, two latencies.
machine["shm"]["duplex_share"] = {MiB: 0.5}
assert close(limits.modelled_us(machine, "shm", 4, MiB, cores=2), 2 * 0.5 + 2 * (3 * MiB / 4) * (2 / 5) / 1e3)


def written_and_read(m):
    """`m` through limits.csv: write_csv, then read_csv."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "limits.csv")
        limits.write_csv(path, m)
        return limits.read_csv(path)


back = written_and_read(machine)
assert back["shm"]["duplex_share"] == {MiB: 0.5}, back["shm"]
assert back["shm"]["copy_gbps"] == {MiB: 10.0}, back["shm"]
assert close(limits.modelled_us(back, "shm", 2, MiB, cores=2), limits.modelled_us(machine, "shm", 2, MiB, cores=2))
assert "duplex_gbps" not in back["tcp"], back["tcp"]
# The two-way TCP rate is written, read back and printed, and left out of the model.
machine["tcp"]["duplex_gbps"] = 1.75
back = written_and_read(machine)
assert back["tcp"]["duplex_gbps"] == 1.75, back["tcp"]
assert close(limits.modelled_us(back, "tcp", 2, MiB, cores=2), 5.0 + share * (2 / 4 + 1 / 40) / 1e3)
printed = limits.format_limits(back)
assert "opposite directions at once" in printed and "1.75 GB/s each" in printed, printed
print("limits model: ok")
