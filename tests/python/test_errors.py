"""Bad input raises a Python exception naming the argument, before anything
is sent; braid's own errors arrive as braid.Error subclasses with braid's
message; a missing peer is an error within the timeout, never a hang."""

import time

import numpy as np
import pytest

import braid


def test_error_classes():
    assert issubclass(braid.InvalidArgument, braid.Error) and issubclass(braid.InvalidArgument, ValueError)
    assert issubclass(braid.InvalidUsage, braid.InvalidArgument)
    assert issubclass(braid.Timeout, braid.Error) and issubclass(braid.Timeout, TimeoutError)
    assert issubclass(braid.PeerLost, braid.Error) and issubclass(braid.PeerLost, ConnectionError)
    assert issubclass(braid.Aborted, braid.Error) and issubclass(braid.Error, RuntimeError)


@pytest.mark.parametrize("call, argument", [
    (lambda c: c.all_reduce(np.zeros((4, 4), np.float32)[:, 0]), "'array' is not C-contiguous"),
    (lambda c: c.all_reduce(np.zeros(4, np.int16)), "'array' has dtype int16"),
    (lambda c: c.all_reduce(np.zeros(4, bool)), "'array' has dtype bool"),
    (lambda c: c.all_reduce([1.0, 2.0]), "'array' must be a numpy.ndarray, not list"),
    (lambda c: c.all_reduce(np.zeros(4, np.float32), op="median"), "argument 'op'"),
    (lambda c: c.all_reduce(np.zeros(4, np.float32), out=np.zeros(5, np.float32)), "'out' has 5 elements"),
    (lambda c: c.all_reduce(np.zeros(4, np.float32), out=np.zeros(4, np.float64)), "'out' holds f64"),
    (lambda c: c.all_reduce(np.zeros(4, np.float32), dtype="bf16"), "cannot hold bf16"),
    (lambda c: c.all_reduce(np.zeros(4, np.float32), dtype="complex64"), "argument 'dtype'"),
    (lambda c: c.all_gather(np.zeros(4, np.float32), out=np.zeros(4, np.float32)), "'out' has 4 elements"),
    (lambda c: c.reduce_scatter(np.zeros(c.size * 3 + 1, np.float32)), "do not divide"),
    (lambda c: c.scatter(None, np.zeros(3, np.float32), root=c.rank), "'array' is required"),
    (lambda c: c.all_gatherv(np.zeros(1, np.int32), np.zeros(c.size - 1, np.int32), [1] * c.size), "does not fit"),
    (lambda c: c.all_gatherv(np.zeros(1, np.int32), np.zeros(8, np.int32), [-1] * c.size), "negative"),
    (lambda c: c.recv(np.zeros(3, np.float32), peer=c.size), "peer"),
    (lambda c: c.broadcast(np.zeros(3, np.float32), root=-1), "root"),
])
def test_bad_arguments(comm, call, argument):
    with pytest.raises(braid.InvalidArgument) as info:
        call(comm)
    assert argument in str(info.value)
    assert info.value.code == "invalid_argument"


def test_read_only_output(comm):
    x = np.zeros(4, np.float32)
    x.flags.writeable = False
    with pytest.raises(braid.InvalidArgument, match="'array' is read-only"):
        comm.all_reduce(x)
    with pytest.raises(braid.InvalidArgument, match="'out' is read-only"):
        comm.all_reduce(np.zeros(4, np.float32), out=x)
    with pytest.raises(braid.InvalidArgument, match="read-only"):
        comm.all_reduce_async(x)
    # The communicator still works after refused arguments.
    y = np.ones(4, np.float32)
    comm.all_reduce(y)
    assert np.all(y == comm.size)


def test_mismatched_counts_across_ranks(fresh_comm):
    # Rank 0 passes one more element: every rank gets braid's error naming the mismatch.
    c = fresh_comm
    x = np.ones(8 + (c.rank == 0), np.float32)
    with pytest.raises(braid.Error) as info:
        c.all_reduce(x)
    assert "rank" in str(info.value)


def new_comm_by_id(comm, timeout):
    """A communicator of the same ranks started from a UniqueId made by rank 0."""
    text = np.zeros(256, np.uint8)
    if comm.rank == 0:
        uid = braid.UniqueId.create().hex().encode()
        text[:len(uid)] = np.frombuffer(uid, np.uint8)
    comm.broadcast(text, root=0)
    uid = braid.UniqueId.from_hex(bytes(text[text != 0]).decode())
    return braid.Comm.init(uid, comm.rank, comm.size, timeout=timeout)


def test_timeout_when_a_rank_is_missing(comm):
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    c = new_comm_by_id(comm, timeout=1.5)
    c.barrier()  # everyone connected
    if comm.rank != comm.size - 1:
        start = time.monotonic()
        with pytest.raises((braid.Timeout, braid.PeerLost)) as info:
            c.all_reduce(np.ones(4, np.float32))
        assert time.monotonic() - start < 10
        assert "rank" in str(info.value)
    comm.barrier()
    c.close()


def test_abort(comm):
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    c = new_comm_by_id(comm, timeout=20)
    c.barrier()
    if comm.rank == 0:
        c.abort()
        with pytest.raises(braid.Aborted):
            c.all_reduce(np.ones(4, np.float32))
    else:
        start = time.monotonic()
        with pytest.raises(braid.Error) as info:
            c.all_reduce(np.ones(4, np.float32))
        assert isinstance(info.value, (braid.PeerLost, braid.Aborted, braid.Timeout))
        assert time.monotonic() - start < 15
    comm.barrier()
    c.close()


def test_async_error_at_wait(comm):
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    c = new_comm_by_id(comm, timeout=20)
    c.barrier()
    if comm.rank == 0:
        c.abort()
    w = c.all_reduce_async(np.ones(4, np.float32)) if comm.rank == 0 else None
    if w is not None:
        with pytest.raises(braid.Aborted):
            w.wait()
    comm.barrier()
    c.close()


def test_closed_comm(comm):
    c = comm.split(0, comm.rank)
    comm.barrier()
    c.close()
    with pytest.raises(braid.InvalidUsage, match="closed") as info:
        c.all_reduce(np.ones(4, np.float32))
    assert info.value.code == "invalid_usage"
    with pytest.raises(braid.InvalidArgument, match="closed"):
        _ = c.rank


def test_abort_from_another_thread(comm):
    # Rank 0 never calls: the others wait in an all-reduce that a watchdog
    # thread of theirs aborts after 0.3 s.
    import threading

    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    c = new_comm_by_id(comm, timeout=30)
    c.barrier()
    if comm.rank != 0:
        watchdog = threading.Timer(0.3, c.abort)
        watchdog.start()
        start = time.monotonic()
        with pytest.raises((braid.Aborted, braid.PeerLost)):
            c.all_reduce(np.ones(4, np.float32))
        assert time.monotonic() - start < 10
        watchdog.join()
    comm.barrier()
    c.close()


def test_second_thread_refused_while_a_call_waits(comm):
    # Rank 0 enters the all-reduce 0.5 s late; meanwhile another thread of
    # each other rank waits in it, and this thread's call is refused.
    import threading

    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    x = np.ones(8, np.float32)
    if comm.rank == 0:
        time.sleep(0.5)
        comm.all_reduce(x)
    else:
        waiting = threading.Thread(target=comm.all_reduce, args=(x,))
        waiting.start()
        time.sleep(0.1)
        with pytest.raises(braid.InvalidArgument, match="another Python thread"):
            comm.all_reduce(np.ones(8, np.float32))
        waiting.join()
    assert np.all(x == comm.size)
