"""One rank of a braid-run job that uses braid.torch the way a training
script does at its end, then leaves:

    braid-run -n 2 /usr/bin/python3 group_exit.py --end destroy    # destroy_process_group(), then exit
    braid-run -n 2 /usr/bin/python3 group_exit.py --end exit       # just exit, groups still alive

It makes the default braid group (torch's env:// rendezvous at braid-run's
store address) and a new_group of every rank (a second communicator), runs every
collective on both (checking each result), starts one all_reduce on each
with async_op=True whose Future has a Python callback, and ends. The process
must exit with status 0: braid finalizes the groups' communicators from its
atexit hook and stops its threads before the interpreter finalizes, so no
braid thread is unwound by it (std::terminate, SIGABRT) and no peer that is
slower to finish fails because this rank left. Exits 1 naming the first
wrong result.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist

import braid.torch  # noqa: F401  (registers the backend)


def check(what, got, expected):
    if not torch.equal(got, expected):
        raise AssertionError(f"{what}: got {got.tolist()}, expected {expected.tolist()}")


def collectives(group, rank, size, to_world):
    """Every collective on `group` (of every rank; this rank is `rank` in it),
    each result checked."""
    g = {"group": group}
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t, **g)
    check("all_reduce", t, torch.full((4,), float(size * (size + 1) // 2)))
    t = torch.full((3,), float(rank))
    dist.broadcast(t, src=to_world(size - 1), **g)  # torch names roots by world rank
    check("broadcast", t, torch.full((3,), float(size - 1)))
    t = torch.full((2,), float(rank + 1))
    dist.reduce(t, dst=to_world(0), op=dist.ReduceOp.MAX, **g)
    if rank == 0:
        check("reduce", t, torch.full((2,), float(size)))
    parts = [torch.zeros(2) for _ in range(size)]
    dist.all_gather(parts, torch.full((2,), float(rank)), **g)
    check("all_gather", torch.stack(parts), torch.arange(size, dtype=torch.float32).repeat_interleave(2).view(size, 2))
    out = torch.zeros(2)
    dist.reduce_scatter(out, [torch.full((2,), float(rank + r)) for r in range(size)], **g)
    check("reduce_scatter", out, torch.full((2,), float(sum(q + rank for q in range(size)))))
    src = torch.arange(size, dtype=torch.float32) + 100 * rank
    dst = torch.zeros(size)
    dist.all_to_all_single(dst, src, **g)
    check("all_to_all_single", dst, torch.tensor([100.0 * q + rank for q in range(size)]))
    gathered = [torch.zeros(1) for _ in range(size)] if rank == 0 else None
    dist.gather(torch.full((1,), float(rank)), gathered, dst=to_world(0), **g)
    if rank == 0:
        check("gather", torch.cat(gathered), torch.arange(size, dtype=torch.float32))
    piece = torch.zeros(1)
    dist.scatter(piece, [torch.full((1,), float(r * 10)) for r in range(size)] if rank == 0 else None, src=to_world(0), **g)
    check("scatter", piece, torch.full((1,), float(rank * 10)))
    if size > 1:
        # send/recv name world ranks: group rank q is world rank to_world(q).
        ahead, behind = to_world((rank + 1) % size), to_world((rank - 1) % size)
        got = torch.zeros(1)
        sending = dist.isend(torch.full((1,), float(rank)), dst=ahead, **g)
        dist.recv(got, src=behind, **g)
        sending.wait()
        check("send/recv", got, torch.full((1,), float((rank - 1) % size)))
    dist.barrier(**g)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--end", choices=["destroy", "exit"], required=True)
    args = parser.parse_args()
    rank, size = int(os.environ["BRAID_RANK"]), int(os.environ["BRAID_WORLD_SIZE"])
    host, port = os.environ["BRAID_STORE_ADDR"].rsplit(":", 1)
    os.environ.setdefault("MASTER_ADDR", host)
    os.environ.setdefault("MASTER_PORT", port)
    torch.set_num_threads(1)
    dist.init_process_group("braid", init_method="env://", rank=rank, world_size=size)
    # torch orders a new group's ranks as the world's (it sorts the list).
    group = dist.new_group(list(reversed(range(size))), backend="braid")
    collectives(None, rank, size, lambda q: q)
    collectives(group, rank, size, lambda q: q)
    # Work still completing as the script ends, with a callback in Python.
    seen = []
    for group in (None, group):
        work = dist.all_reduce(torch.ones(1 << 16), group=group, async_op=True)
        work.get_future().then(lambda fut: seen.append(fut.value()))
    if args.end == "destroy":
        dist.destroy_process_group(group)
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
