"""The c10d store adapter (python/torch/c10d_store.hpp) through a c10d store
written in Python that records every call: two braid process groups of one
process (threads as ranks 0 and 1) join through it, so these tests need no
peer process and each braid-run rank runs them on its own.

The adapter must not call c10d's wait (with a timeout, TCPStore's falls out
of step with its server), must not store empty values (TCPStore answers a get
of one 200 ms late), and must report a failing store as a store failure."""

import collections
import datetime
import gc
import threading
import time

import pytest
import torch
import torch.distributed as dist

import braid
from braid import _braid_torch

TIMEOUT = datetime.timedelta(seconds=20)


class RecordingStore(dist.Store):
    """A c10d store in a dict that counts its calls; a call to wait fails."""

    def __init__(self):
        super().__init__()
        self.values = {}
        self.calls = collections.Counter()
        self.changed = threading.Condition()

    def set(self, key, value):
        with self.changed:
            self.calls["set"] += 1
            self.values[key] = bytes(value)
            self.changed.notify_all()

    def get(self, key):
        with self.changed:
            self.calls["get"] += 1
            if not self.changed.wait_for(lambda: key in self.values, timeout=TIMEOUT.total_seconds()):
                raise KeyError(f"RecordingStore: no key {key}")
            return self.values[key]

    def add(self, key, value):
        with self.changed:
            self.calls["add"] += 1
            total = int(self.values.get(key, b"0")) + value
            self.values[key] = str(total).encode()
            self.changed.notify_all()
            return total

    def check(self, keys):
        with self.changed:
            self.calls["check"] += 1
            return all(k in self.values for k in keys)

    def wait(self, keys, timeout=None):
        with self.changed:
            self.calls["wait"] += 1
        raise AssertionError("RecordingStore.wait: the adapter must not call c10d's wait")


def join_two_ranks(store, late_by):
    """Ranks 0 and 1 join through `store` (rank 1 `late_by` seconds late),
    all_reduce [r + 1] and return {rank: result or exception}."""
    results = {}

    def rank(r):
        try:
            time.sleep(late_by * r)
            group = _braid_torch.create_process_group(dist.PrefixStore("pair", store), r, 2, TIMEOUT)
            value = torch.tensor([float(r + 1)])
            group.allreduce([value]).wait()
            results[r] = value.item()
        except Exception as e:  # noqa: BLE001  (handed to the test)
            results[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=2 * TIMEOUT.total_seconds())
    assert not any(t.is_alive() for t in threads), "a rank did not finish joining"
    return results


def test_join_polls_without_c10d_wait():
    store = RecordingStore()
    # Rank 0 waits about 0.5 s for rank 1: braid's join loop waits in 200 ms
    # steps, each a wait on the store.
    results = join_two_ranks(store, late_by=0.5)
    assert results == {0: 3.0, 1: 3.0}
    assert store.calls["wait"] == 0
    assert store.calls["check"] > 0


def test_no_empty_values():
    store = RecordingStore()
    assert join_two_ranks(store, late_by=0.0) == {0: 3.0, 1: 3.0}
    braid_keys = {k: v for k, v in store.values.items() if "braid/" in k}
    assert braid_keys, f"braid stored nothing under braid/: {sorted(store.values)}"
    empty = sorted(k for k, v in braid_keys.items() if not v)
    assert not empty, f"empty values stored: {empty}"


class FailingStore(RecordingStore):
    def check(self, keys):
        raise RuntimeError("the store's disk is on fire")


def test_store_failure_is_reported_as_such():
    results = join_two_ranks(FailingStore(), late_by=0.0)
    for r in (0, 1):
        error = results[r]
        assert isinstance(error, braid.PeerLost), f"rank {r}: {error!r}"
        assert not isinstance(error, braid.Timeout)
        assert "the c10d store: check of key 'braid/" in str(error), str(error)
        assert "the store's disk is on fire" in str(error), str(error)


def test_lost_tcp_store_is_named():
    server = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=TIMEOUT)
    port = server.port
    client = dist.TCPStore("127.0.0.1", port, 1, False, timeout=TIMEOUT)
    del server  # closes the server's sockets: the client's next request fails
    gc.collect()
    with pytest.raises(braid.PeerLost) as error:
        _braid_torch.create_process_group(dist.PrefixStore("gone", client), 0, 2, TIMEOUT)
    assert f"the c10d TCPStore at 127.0.0.1:{port}: " in str(error.value), str(error.value)


def test_rank_alone_times_out():
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=TIMEOUT)
    started = time.monotonic()
    with pytest.raises(braid.Timeout) as error:
        _braid_torch.create_process_group(dist.PrefixStore("alone", store), 0, 2, datetime.timedelta(seconds=1))
    assert time.monotonic() - started < 10
    assert "rank 1 of 2 did not join" in str(error.value), str(error.value)
