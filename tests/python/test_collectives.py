"""Every collective on every dtype against numpy's answer computed here from
each rank's known input (reference_values.rank_values)."""

import numpy as np
import pytest

import braid
from reference_values import DTYPES, rank_values

COUNT = 37  # odd on purpose: blocks of unequal size inside the algorithms


def all_inputs(comm, count, dtype):
    return [rank_values(r, count, dtype) for r in range(comm.size)]


def reference(op, inputs):
    stack = np.stack(inputs)
    if op == "sum":
        return stack.sum(axis=0, dtype=stack.dtype)
    if op == "prod":
        return stack.prod(axis=0, dtype=stack.dtype)
    if op == "min":
        return stack.min(axis=0)
    if op == "max":
        return stack.max(axis=0)
    if op == "avg":
        total = stack.sum(axis=0, dtype=stack.dtype)
        if np.issubdtype(stack.dtype, np.integer):
            return (total // len(inputs)).astype(stack.dtype)
        return (total.astype(np.float64) / len(inputs)).astype(stack.dtype)
    raise ValueError(op)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max", "avg"])
def test_all_reduce_in_place(comm, dtype, op):
    x = rank_values(comm.rank, COUNT, dtype)
    assert comm.all_reduce(x, op=op) is x
    np.testing.assert_array_equal(x, reference(op, all_inputs(comm, COUNT, dtype)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_reduce_out_of_place_and_enum(comm, dtype):
    x = rank_values(comm.rank, COUNT, dtype).reshape(1, COUNT)
    x.flags.writeable = False  # an input only: read-only is fine
    out = np.zeros_like(x)
    assert comm.all_reduce(x, braid.ReduceOp.MAX, out=out) is out
    np.testing.assert_array_equal(out[0], reference("max", all_inputs(comm, COUNT, dtype)))
    np.testing.assert_array_equal(x[0], rank_values(comm.rank, COUNT, dtype))


def test_all_reduce_bf16(comm):
    # bf16 bits of small integers: 1.0 = 0x3f80, ..., sums stay exact.
    values = rank_values(comm.rank, COUNT, np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    comm.all_reduce(bits, dtype="bf16")
    got = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(got, reference("sum", all_inputs(comm, COUNT, np.float32)))


def test_all_reduce_large(comm):
    x = np.full(1 << 20, comm.rank + 1, np.float32)
    comm.all_reduce(x)
    assert np.all(x == comm.size * (comm.size + 1) / 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast(comm, dtype):
    root = comm.size - 1
    x = rank_values(comm.rank, COUNT, dtype)
    comm.broadcast(x, root=root)
    np.testing.assert_array_equal(x, rank_values(root, COUNT, dtype))
    out = np.zeros_like(x)
    comm.broadcast(rank_values(comm.rank, COUNT, dtype), 0, out=out)
    np.testing.assert_array_equal(out, rank_values(0, COUNT, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce(comm, dtype):
    root = 1 % comm.size
    x = rank_values(comm.rank, COUNT, dtype)
    result = comm.reduce(x, op="sum", root=root)
    if comm.rank == root:
        assert result is x
        np.testing.assert_array_equal(x, reference("sum", all_inputs(comm, COUNT, dtype)))
    else:
        assert result is None
        np.testing.assert_array_equal(x, rank_values(comm.rank, COUNT, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_gather(comm, dtype):
    x = rank_values(comm.rank, COUNT, dtype).reshape(COUNT, 1)
    out = comm.all_gather(x)
    assert out.shape == (comm.size, COUNT, 1) and out.dtype == x.dtype
    np.testing.assert_array_equal(out[:, :, 0], np.stack(all_inputs(comm, COUNT, dtype)))
    # In place: this rank's block of out is the input.
    out2 = np.zeros((comm.size, COUNT), dtype)
    out2[comm.rank] = rank_values(comm.rank, COUNT, dtype)
    comm.all_gather(out2[comm.rank], out=out2)
    np.testing.assert_array_equal(out2, np.stack(all_inputs(comm, COUNT, dtype)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reduce_scatter(comm, dtype):
    n = comm.size
    x = rank_values(comm.rank, n * COUNT, dtype).reshape(n, COUNT)
    out = comm.reduce_scatter(x, op="max")
    full = reference("max", [rank_values(r, n * COUNT, dtype) for r in range(n)]).reshape(n, COUNT)
    assert out.shape == (1, COUNT)
    np.testing.assert_array_equal(out[0], full[comm.rank])


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_to_all(comm, dtype):
    n = comm.size
    x = (np.arange(n * COUNT) + 1000 * comm.rank).astype(np.int64)
    out = comm.all_to_all(x.astype(dtype))
    expect = np.concatenate([(np.arange(n * COUNT) + 1000 * p)[comm.rank * COUNT:(comm.rank + 1) * COUNT]
                             for p in range(n)]).astype(dtype)
    np.testing.assert_array_equal(out, expect)


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint64])
def test_gather_scatter(comm, dtype):
    n, root = comm.size, 0
    x = rank_values(comm.rank, COUNT, dtype)
    got = comm.gather(x, root=root)
    if comm.rank == root:
        np.testing.assert_array_equal(got, np.stack(all_inputs(comm, COUNT, dtype)))
    else:
        assert got is None
    send = np.stack(all_inputs(comm, COUNT, dtype)) if comm.rank == root else None
    out = np.zeros(COUNT, dtype)
    comm.scatter(send, out, root=root)
    np.testing.assert_array_equal(out, rank_values(comm.rank, COUNT, dtype))


def test_send_recv_ring(comm):
    n, r = comm.size, comm.rank
    if n < 2:
        pytest.skip("needs 2 ranks")
    x = rank_values(r, COUNT, np.float64)
    got = np.zeros_like(x)
    # Even ranks send first, odd ranks receive first: no cycle of blocking sends.
    if r % 2 == 0:
        comm.send(x, (r + 1) % n)
        comm.recv(got, (r - 1) % n)
    else:
        comm.recv(got, (r - 1) % n)
        comm.send(x, (r + 1) % n)
    np.testing.assert_array_equal(got, rank_values((r - 1) % n, COUNT, np.float64))


def test_sendrecv_shift(comm):
    n, r = comm.size, comm.rank
    got = comm.sendrecv(rank_values(r, COUNT, np.int32), (r + 1) % n, np.zeros(COUNT, np.int32), (r - 1) % n)
    np.testing.assert_array_equal(got, rank_values((r - 1) % n, COUNT, np.int32))


def test_async_and_barrier(comm):
    xs = [rank_values(comm.rank, COUNT, np.float32) * (i + 1) for i in range(4)]
    works = [comm.all_reduce_async(x) for x in xs]
    gathered = comm.all_gather_async(np.array([comm.rank], np.int32))
    for w in works:
        assert w.wait() is True
        assert w.is_completed()
    for i, x in enumerate(xs):
        np.testing.assert_array_equal(x, reference("sum", all_inputs(comm, COUNT, np.float32)) * (i + 1))
    np.testing.assert_array_equal(gathered.result(), np.arange(comm.size, dtype=np.int32).reshape(comm.size, 1))
    comm.barrier_async().wait(timeout=30)
    comm.barrier()


def test_async_dropped_work_keeps_buffer(comm):
    # The Work is dropped at once; its array must stay alive until it is done.
    comm.all_reduce_async(np.ones(1 << 16, np.float64))
    x = np.ones(8, np.float64)
    comm.all_reduce(x)
    assert np.all(x == comm.size)


def test_uneven(comm):
    n, r = comm.size, comm.rank
    # all_gatherv: rank p contributes p + 1 elements.
    counts = [p + 1 for p in range(n)]
    out = np.zeros(sum(counts), np.int32)
    comm.all_gatherv(np.full(r + 1, r, np.int32), out, counts)
    np.testing.assert_array_equal(out, np.concatenate([np.full(p + 1, p, np.int32) for p in range(n)]))
    # reduce_scatterv: rank p gets p + 1 elements of the sum.
    x = np.arange(sum(counts), dtype=np.float64) + r
    mine = np.zeros(r + 1, np.float64)
    comm.reduce_scatterv(x, mine, counts, op="sum")
    total = sum(np.arange(sum(counts), dtype=np.float64) + p for p in range(n))
    start = sum(counts[:r])
    np.testing.assert_array_equal(mine, total[start:start + r + 1])
    # all_to_allv: rank r sends q + 1 elements of value 100 r + q to rank q.
    send_counts = [q + 1 for q in range(n)]
    send = np.concatenate([np.full(q + 1, 100 * r + q, np.int64) for q in range(n)])
    recv_counts = [r + 1] * n
    got = np.zeros(n * (r + 1), np.int64)
    comm.all_to_allv(send, send_counts, got, recv_counts)
    np.testing.assert_array_equal(got, np.concatenate([np.full(r + 1, 100 * p + r, np.int64) for p in range(n)]))
    # gatherv / scatterv at root 0.
    root_out = np.zeros(sum(counts), np.int32) if r == 0 else None
    res = comm.gatherv(np.full(r + 1, r, np.int32), out=root_out, recv_counts=counts if r == 0 else None)
    if r == 0:
        np.testing.assert_array_equal(res, np.concatenate([np.full(p + 1, p, np.int32) for p in range(n)]))
    piece = np.zeros(r + 1, np.int32)
    src = np.concatenate([np.full(p + 1, 7 * p, np.int32) for p in range(n)]) if r == 0 else None
    comm.scatterv(src, counts if r == 0 else None, piece)
    np.testing.assert_array_equal(piece, np.full(r + 1, 7 * r, np.int32))


def test_async_uneven(comm):
    n, r = comm.size, comm.rank
    counts = [2] * n
    out = np.zeros(2 * n, np.float32)
    w = comm.all_gatherv_async(np.full(2, r, np.float32), out, counts)
    w.wait()
    np.testing.assert_array_equal(out, np.repeat(np.arange(n, dtype=np.float32), 2))


def test_identity(comm):
    assert 0 <= comm.rank < comm.size
    assert 0 <= comm.local_rank < comm.local_size
    assert isinstance(comm.describe(), str) and comm.describe()
    assert f"rank {comm.rank} of {comm.size}" in repr(comm)


def test_split(comm):
    n, r = comm.size, comm.rank
    half = comm.split(r % 2, key=-r)  # reversed order inside each half
    members = [p for p in range(n) if p % 2 == r % 2]
    assert half.size == len(members)
    assert half.rank == len(members) - 1 - members.index(r)
    x = np.array([r], np.int64)
    half.all_reduce(x)
    assert x[0] == sum(members)
    comm.barrier()  # every rank is done with half before any closes it
    half.close()
    assert comm.split(None) is None


def test_shrink(comm):
    n, r = comm.size, comm.rank
    # The last rank is left out and does not call shrink; the old Comm goes on.
    if r != n - 1:
        smaller = comm.shrink([n - 1])
        assert (smaller.rank, smaller.size) == (r, n - 1)
        x = np.array([r + 1], np.int64)
        smaller.all_reduce(x)
        assert x[0] == (n - 1) * n // 2
        smaller.close()
    with pytest.raises(braid.InvalidArgument, match="excluded twice"):
        comm.shrink([0, 0])
    if r == 0:
        with pytest.raises(braid.InvalidArgument, match="an excluded rank does not call shrink"):
            comm.shrink([0])
    comm.barrier()


def test_gil_released_while_waiting(comm):
    # Rank 0 enters the all-reduce 0.3 s late; meanwhile the others wait in
    # it, and a Python thread of theirs keeps running.
    import threading
    import time

    ticks, stop = [0], threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.005)

    thread = threading.Thread(target=tick)
    if comm.rank == 0:
        time.sleep(0.3)
    else:
        thread.start()
    before = ticks[0]
    x = np.ones(16, np.float32)
    comm.all_reduce(x)
    stop.set()
    if comm.rank != 0:
        thread.join()
        assert ticks[0] - before >= 5  # the thread ran while this one waited
    assert np.all(x == comm.size)


def test_empty_and_scalar_arrays(comm):
    empty = np.zeros(0, np.float32)
    assert comm.all_reduce(empty).size == 0
    assert comm.all_gather(empty).shape == (comm.size, 0)
    scalar = np.array(comm.rank + 1, np.int64)  # 0-d
    comm.all_reduce(scalar)
    assert scalar.shape == () and int(scalar) == comm.size * (comm.size + 1) // 2


def test_mem_alloc_all_reduce_and_registration(comm):
    # braid.mem_alloc's arrays: messages above 64K between the ranks of this
    # host are read in place (transport/shm/shared_memory.hpp).
    x = braid.mem_alloc((1 << 18,), np.float32)
    assert x.shape == (1 << 18,) and x.dtype == np.float32 and not x.any()
    x[:] = comm.rank + 1
    out = braid.mem_alloc(x.shape, x.dtype)
    assert comm.all_reduce(x, out=out) is out
    assert np.all(out == comm.size * (comm.size + 1) / 2)
    assert np.all(x == comm.rank + 1)
    handle = comm.register_buffer(out)
    comm.deregister_buffer(handle)
    with pytest.raises(braid.InvalidArgument, match="braid_mem_alloc"):
        comm.register_buffer(np.zeros(4, np.float32))
    with pytest.raises(braid.InvalidArgument):
        comm.deregister_buffer(handle)
