"""comm.stats(): the counts, sizes and times of the operations a
communicator ran, per collective, size band and algorithm."""

import numpy as np


def rows_of(stats, collective):
    return stats.get(collective, [])


def test_stats_count_what_ran(fresh_comm):
    c = fresh_comm
    assert c.stats() == {}  # a new communicator has run nothing
    small = np.ones(16, dtype=np.float32)  # 64 bytes
    large = np.ones(64 * 1024, dtype=np.float32)  # 256 KiB
    for _ in range(7):
        c.all_reduce(small)
    for _ in range(3):
        c.all_reduce(large)
    for _ in range(2):
        c.broadcast(small, root=0)
    stats = c.stats()
    assert set(stats) == {"all_reduce", "broadcast"}
    by_band = {}
    for row in rows_of(stats, "all_reduce"):
        assert row["band_min_bytes"] <= row["bytes"] // row["count"] <= row["band_max_bytes"]
        by_band.setdefault(row["band_min_bytes"], []).append(row)
    assert sum(r["count"] for r in by_band[64]) == 7
    assert sum(r["bytes"] for r in by_band[64]) == 7 * 64
    assert sum(r["count"] for r in by_band[256 * 1024]) == 3
    assert sum(r["bytes"] for r in by_band[256 * 1024]) == 3 * 256 * 1024
    assert sum(r["count"] for r in rows_of(stats, "broadcast")) == 2
    for rows in stats.values():
        for r in rows:
            assert r["algorithm"]
            assert 0 < r["min_us"] <= r["p50_us"] <= r["p99_us"] <= r["max_us"]
            assert r["min_us"] * r["count"] <= r["total_us"] * (1 + 1e-9)
            assert r["total_us"] <= r["max_us"] * r["count"] * (1 + 1e-9)


def test_stats_keep_counting(fresh_comm):
    c = fresh_comm
    x = np.ones(4, dtype=np.int32)
    c.all_reduce(x)
    first = sum(r["count"] for r in c.stats()["all_reduce"])
    c.all_reduce(x)
    c.barrier()
    stats = c.stats()
    assert sum(r["count"] for r in stats["all_reduce"]) == first + 1 == 2
    assert sum(r["count"] for r in stats["barrier"]) == 1
