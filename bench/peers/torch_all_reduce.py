#!/usr/bin/env python3
"""All-reduce timed through torch.distributed, for comparing braid with
PyTorch's backends where PyTorch is installed (the GPU machines):

    torch_all_reduce.py --ranks 2 --backend gloo --device cuda --sizes 8,1M,16M,64M

Starts the ranks itself (multiprocessing, loopback rendezvous), float32 sum,
out of place as braid-perf's first columns (a copy, then in-place all_reduce
is what torch offers: the copy is outside the timed loop). Prints one line per
size: bytes, mean microseconds per call, busbw (GB/s, 2(n-1)/n x size / time).
"""
import argparse
import os
import time


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def worker(rank, args, port):
    import torch
    import torch.distributed as dist
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(args.backend, rank=rank, world_size=args.ranks)
    device = torch.device("cuda", rank % max(1, torch.cuda.device_count())) if args.device == "cuda" else torch.device("cpu")
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        t = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
        iters = args.iters if size <= (1 << 20) else max(5, args.iters // 10)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        if args.device == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        if args.device == "cuda":
            torch.cuda.synchronize(device)
        us = (time.perf_counter() - start) / iters * 1e6
        mean = torch.tensor([us], dtype=torch.float64)
        dist.all_reduce(mean)
        us = mean.item() / args.ranks
        if rank == 0:
            busbw = 2 * (args.ranks - 1) / args.ranks * size / us / 1e3
            print(f"{args.backend}/{args.device} {size:>12} bytes {us:10.2f} us {busbw:7.2f} GB/s", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--sizes", default="8,1M,16M,64M")
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--port", type=int, default=29533)
    args = p.parse_args()
    import torch.multiprocessing as mp
    mp.spawn(worker, args=(args, args.port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
