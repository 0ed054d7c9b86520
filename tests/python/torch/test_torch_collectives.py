"""The collectives of braid's torch.distributed backend against a local
reference: each rank's input is a known function of its rank, so every rank
computes what the result must be. Tests taking `device` run on CPU tensors
and again on CUDA tensors where torch has a GPU (conftest.py)."""

import pytest
import torch
import torch.distributed as dist

REDUCIBLE = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
             torch.int64]


def value(rank, n, dtype=torch.float32):
    """Rank `rank`'s input: small integers, exact in every dtype above."""
    return (torch.arange(n) % 5 + rank + 1).to(dtype)


def reference(inputs, op):
    stacked = torch.stack([t.to(torch.float64) for t in inputs])
    if op == dist.ReduceOp.SUM:
        return stacked.sum(0)
    if op == dist.ReduceOp.PRODUCT:
        return stacked.prod(0)
    if op == dist.ReduceOp.MIN:
        return stacked.min(0).values
    if op == dist.ReduceOp.MAX:
        return stacked.max(0).values
    raise AssertionError(op)


@pytest.mark.parametrize("dtype", REDUCIBLE)
@pytest.mark.parametrize("op", [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX],
                         ids=["sum", "product", "min", "max"])
def test_all_reduce(world, device, dtype, op):
    rank, size, _ = world
    t = value(rank, 33, dtype).to(device)
    dist.all_reduce(t, op=op)
    expected = reference([value(r, 33, dtype) for r in range(size)], op).to(dtype)
    assert t.dtype == dtype and t.device == device
    assert torch.equal(t.cpu(), expected)


def test_all_reduce_complex(world):
    # torch.distributed reduces a complex tensor as its real view (float32 pairs).
    rank, size, _ = world
    t = torch.full((5,), complex(rank, 1), dtype=torch.complex64)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((5,), complex(size * (size - 1) / 2, size), dtype=torch.complex64))


def test_all_reduce_avg_and_large(world, device):
    rank, size, gloo = world
    t = torch.full((3,), float(rank), device=device)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.allclose(t.cpu(), torch.full((3,), (size - 1) / 2))
    # A buffer of several MiB, against gloo's sum of the same inputs (on the CPU).
    g = torch.Generator().manual_seed(rank)
    b = torch.randn(1 << 20, generator=g)
    a = b.to(device)
    dist.all_reduce(a)
    dist.all_reduce(b, group=gloo)
    assert torch.allclose(a.cpu(), b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.complex64, torch.int16])
def test_broadcast_any_dtype(world, device, dtype):
    rank, size, _ = world
    for root in range(size):
        t = (torch.arange(10) * (rank + 1)).to(dtype).to(device)
        dist.broadcast(t, src=root)
        assert torch.equal(t.cpu(), (torch.arange(10) * (root + 1)).to(dtype))


def test_reduce(world, device):
    rank, size, _ = world
    root = size - 1
    t = value(rank, 17).to(device)
    dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
    if rank == root:
        assert torch.equal(t.cpu(), reference([value(r, 17) for r in range(size)], dist.ReduceOp.SUM).float())


def test_all_gather(world, device):
    rank, size, _ = world
    out = [torch.zeros(2, 3, device=device) for _ in range(size)]
    dist.all_gather(out, torch.full((2, 3), float(rank), device=device))
    for r in range(size):
        assert torch.equal(out[r].cpu(), torch.full((2, 3), float(r)))
    flat = torch.zeros(size * 4, dtype=torch.int64, device=device)
    dist.all_gather_into_tensor(flat, torch.full((4,), rank, dtype=torch.int64, device=device))
    assert torch.equal(flat.cpu(), torch.arange(size).repeat_interleave(4))


def test_gather_scatter(world, device):
    rank, size, _ = world
    root = 1 % size
    gathered = [torch.zeros(5, device=device) for _ in range(size)] if rank == root else None
    dist.gather(torch.full((5,), rank + 0.5, device=device), gather_list=gathered, dst=root)
    if rank == root:
        assert all(torch.equal(gathered[r].cpu(), torch.full((5,), r + 0.5)) for r in range(size))
    out = torch.zeros(3, dtype=torch.int32, device=device)
    parts = [torch.full((3,), 10 * r, dtype=torch.int32, device=device) for r in range(size)] if rank == 0 else None
    dist.scatter(out, scatter_list=parts, src=0)
    assert torch.equal(out.cpu(), torch.full((3,), 10 * rank, dtype=torch.int32))


def test_reduce_scatter(world, device):
    rank, size, _ = world
    inputs = [torch.full((4,), float(rank * 10 + p), device=device) for p in range(size)]
    out = torch.zeros(4, device=device)
    dist.reduce_scatter(out, inputs)
    assert torch.equal(out.cpu(), torch.full((4,), float(sum(r * 10 + rank for r in range(size)))))
    # Uneven blocks: block p holds p + 1 elements.
    inputs = [torch.ones(p + 1, dtype=torch.float64, device=device) * (rank + 1) for p in range(size)]
    out = torch.zeros(rank + 1, dtype=torch.float64, device=device)
    dist.reduce_scatter(out, inputs, op=dist.ReduceOp.MAX)
    assert torch.equal(out.cpu(), torch.full((rank + 1,), float(size), dtype=torch.float64))
    flat_in = (torch.arange(size * 3, dtype=torch.float32) + rank).to(device)
    flat_out = torch.zeros(3, device=device)
    dist.reduce_scatter_tensor(flat_out, flat_in)
    expected = sum(torch.arange(size * 3, dtype=torch.float32) + r for r in range(size))[rank * 3:rank * 3 + 3]
    assert torch.equal(flat_out.cpu(), expected)


def test_all_to_all_single(world, device):
    rank, size, _ = world
    # Even blocks: block p of rank r holds 100 r + p.
    inp = torch.tensor([100 * rank + p for p in range(size)], dtype=torch.float32).repeat_interleave(2).to(device)
    out = torch.zeros(2 * size, device=device)
    dist.all_to_all_single(out, inp)
    assert torch.equal(out.cpu(), torch.tensor([100 * p + rank for p in range(size)], dtype=torch.float32)
                       .repeat_interleave(2))
    # Split sizes: rank r sends r + p + 1 rows of width 3 to rank p.
    send_splits = [rank + p + 1 for p in range(size)]
    recv_splits = [p + rank + 1 for p in range(size)]
    inp = torch.cat([torch.full((s, 3), 100 * rank + p, dtype=torch.int64) for p, s in enumerate(send_splits)])
    out = torch.zeros(sum(recv_splits), 3, dtype=torch.int64, device=device)
    dist.all_to_all_single(out, inp.to(device), output_split_sizes=recv_splits, input_split_sizes=send_splits)
    expected = torch.cat([torch.full((s, 3), 100 * p + rank, dtype=torch.int64) for p, s in enumerate(recv_splits)])
    assert torch.equal(out.cpu(), expected)


def test_all_to_all_lists(world, device):
    rank, size, _ = world
    inputs = [torch.full((p + 1,), float(10 * rank + p), device=device) for p in range(size)]
    outputs = [torch.zeros(rank + 1, device=device) for _ in range(size)]
    dist.all_to_all(outputs, inputs)
    for p in range(size):
        assert torch.equal(outputs[p].cpu(), torch.full((rank + 1,), float(10 * p + rank)))


def test_lists_of_views_of_one_buffer(world, device):
    """Lists made by chunk() lie back to back in memory: braid reads and
    writes them in place, the input of all_gather and all_to_all included."""
    rank, size, _ = world
    out = torch.zeros(size * 3, device=device)
    dist.all_gather(list(out.chunk(size)), torch.full((3,), float(rank), device=device))
    assert torch.equal(out.cpu(), torch.arange(size, dtype=torch.float32).repeat_interleave(3))
    out = torch.zeros(size * 3, device=device)
    mine = out.chunk(size)[rank]
    mine.fill_(rank + 0.5)
    dist.all_gather(list(out.chunk(size)), mine)
    assert torch.equal(out.cpu(), (torch.arange(size, dtype=torch.float32) + 0.5).repeat_interleave(3))
    inp = (torch.arange(size * 2, dtype=torch.float32) + rank).to(device)
    block = torch.zeros(2, device=device)
    dist.reduce_scatter(block, list(inp.chunk(size)))
    expected = sum(torch.arange(size * 2, dtype=torch.float32) + r for r in range(size))[rank * 2:rank * 2 + 2]
    assert torch.equal(block.cpu(), expected)
    # Input and output the same views: block p goes to rank p, block p comes from rank p.
    buf = torch.tensor([100 * rank + p for p in range(size)], dtype=torch.float32).to(device)
    views = list(buf.chunk(size))
    dist.all_to_all(views, views)
    assert torch.equal(buf.cpu(), torch.tensor([100 * p + rank for p in range(size)], dtype=torch.float32))
    root = size - 1
    gathered = torch.zeros(size * 2, device=device)
    dist.gather(torch.full((2,), float(rank), device=device),
                gather_list=list(gathered.chunk(size)) if rank == root else None, dst=root)
    if rank == root:
        assert torch.equal(gathered.cpu(), torch.arange(size, dtype=torch.float32).repeat_interleave(2))
    source = torch.arange(size * 2, dtype=torch.float32).to(device)
    part = torch.zeros(2, device=device)
    dist.scatter(part, scatter_list=list(source.chunk(size)) if rank == 0 else None, src=0)
    assert torch.equal(part.cpu(), torch.arange(rank * 2, rank * 2 + 2, dtype=torch.float32))


def test_send_recv_ring(world, device):
    rank, size, _ = world
    if size < 2:
        pytest.skip("needs 2 ranks")
    right, left = (rank + 1) % size, (rank - 1) % size
    got = torch.zeros(6, device=device)
    if rank % 2 == 0:
        dist.send(torch.full((6,), float(rank), device=device), dst=right)
        dist.recv(got, src=left)
    else:
        dist.recv(got, src=left)
        dist.send(torch.full((6,), float(rank), device=device), dst=right)
    assert torch.equal(got.cpu(), torch.full((6,), float(left)))
    # Every rank sends first: batch_isend_irecv issues them together.
    got = torch.zeros(6, device=device)
    ops = [dist.P2POp(dist.isend, torch.full((6,), rank + 0.25, device=device), right),
           dist.P2POp(dist.irecv, got, left)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    assert torch.equal(got.cpu(), torch.full((6,), left + 0.25))


def test_async_work_and_future(world, device):
    rank, size, _ = world
    t = torch.ones(8, device=device) * (rank + 1)
    work = dist.all_reduce(t, async_op=True)
    doubled = work.get_future().then(lambda fut: fut.value()[0] * 2)
    assert work.wait()
    assert work.is_completed() and work.is_success()
    total = size * (size + 1) / 2
    assert torch.equal(doubled.wait().cpu(), torch.full((8,), 2 * total))
    assert torch.equal(t.cpu(), torch.full((8,), total))
    works = [dist.broadcast(torch.full((3,), float(rank), device=device), src=0, async_op=True) for _ in range(4)]
    for w in works:
        w.wait()
    dist.barrier()


def test_describe(world):
    import braid.torch
    line = braid.torch.describe()
    assert isinstance(line, str) and line
    assert dist.get_backend() == "braid"


def test_object_collectives(world):
    # Pickled objects of different sizes: all_gather of sizes, then of padded bytes.
    rank, size, _ = world
    gathered = [None] * size
    dist.all_gather_object(gathered, {"rank": rank, "payload": "x" * (rank * 100)})
    assert gathered == [{"rank": r, "payload": "x" * (r * 100)} for r in range(size)]
    objects = [("from", rank, list(range(rank + 3)))]
    dist.broadcast_object_list(objects, src=size - 1)
    assert objects == [("from", size - 1, list(range(size + 2)))]


def test_subgroups(world):
    # A braid group of the last rank alone, and one of every rank in reverse order.
    rank, size, _ = world
    alone = dist.new_group(ranks=[size - 1], backend="braid")
    if rank == size - 1:
        t = torch.full((3,), 5.0)
        dist.all_reduce(t, group=alone)
        assert torch.equal(t, torch.full((3,), 5.0))
    everyone = dist.new_group(ranks=list(reversed(range(size))), backend="braid")
    t = torch.full((2,), float(rank))
    dist.broadcast(t, src=0, group=everyone)  # src is a global rank
    assert torch.equal(t, torch.zeros(2))
    t = torch.full((2,), float(rank + 1))
    dist.all_reduce(t, group=everyone)
    assert torch.equal(t, torch.full((2,), size * (size + 1) / 2))
