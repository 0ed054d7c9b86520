#!/usr/bin/python3
"""DistributedDataParallel training of a small MLP over braid's
torch.distributed backend, checked against gloo.

    # 2 ranks under braid-run (PYTHONPATH: the package the build stages)
    PYTHONPATH=build/python build/tools/braid-run -n 2 /usr/bin/python3 examples/python/ddp_train.py

    # the same weights as gloo's on the same data, else exit status 1
    ... ddp_train.py --check
    # step times of braid and gloo, interleaved over rounds (best and median)
    ... ddp_train.py --bench 5

Every rank starts from the same weights (DDP broadcasts rank 0's) and trains
on its own shard of a synthetic regression problem: a batch drawn from a
generator seeded by (step, rank), the same for every backend, so two runs
over different backends see the same data. DDP averages the gradients (an
all-reduce per bucket, through braid's Work futures) and every rank takes
the same SGD step. Under torchrun, the same script runs from RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
"""

import argparse
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import braid.torch


def make_model(inputs, hidden, outputs):
    torch.manual_seed(1234)
    return torch.nn.Sequential(
        torch.nn.Linear(inputs, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, outputs))


def batch(step, rank, args):
    """This rank's batch at `step`: the same whichever backend trains."""
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(args.batch, args.inputs, generator=g)
    # A fixed nonlinear target the MLP can learn.
    w = torch.Generator().manual_seed(7)
    target_weights = torch.randn(args.inputs, args.outputs, generator=w)
    y = torch.tanh(x @ target_weights)
    return x, y


def train(group, args, steps, timed=False):
    """Trains a fresh model with DDP over `group`; returns (model, seconds per
    step of the steps after the first two, or None)."""
    model = make_model(args.inputs, args.hidden, args.outputs)
    ddp = DistributedDataParallel(model, process_group=group)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    rank = dist.get_rank()
    warmup = 2 if timed else 0
    start = None
    for step in range(steps + warmup):
        if step == warmup:
            dist.barrier(group=group)
            start = time.perf_counter()
        x, y = batch(step, rank, args)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        optimizer.step()
    elapsed = time.perf_counter() - start
    return model, (elapsed / steps if timed else None)


def flat_weights(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check(args, gloo):
    """Trains over braid and over gloo; every rank's final weights must match
    gloo's to float tolerance, equal every other rank's, and differ from the
    initial ones."""
    initial = flat_weights(make_model(args.inputs, args.hidden, args.outputs))
    braid_weights = flat_weights(train(None, args, args.steps)[0])
    gloo_weights = flat_weights(train(gloo, args, args.steps)[0])
    difference = (braid_weights - gloo_weights).abs().max().item()
    moved = (gloo_weights - initial).abs().max().item()
    # Every rank holds the same weights (all-gathered over gloo, not braid).
    gathered = [torch.empty_like(braid_weights) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, braid_weights, group=gloo)
    spread = max((g - braid_weights).abs().max().item() for g in gathered)
    ok = difference <= 1e-5 and spread == 0 and moved > 1e-3
    if dist.get_rank() == 0:
        print(f"ddp_train --check: {dist.get_world_size()} ranks, {args.steps} steps, {braid_weights.numel()} "
              f"weights: max |braid - gloo| = {difference:.3g}, max |rank - rank 0| = {spread:.3g}, "
              f"training moved the weights by up to {moved:.3g}: {'OK' if ok else 'FAILED'}")
    return ok


def bench(args, gloo):
    """Step times of braid and gloo, alternating over rounds (braid first in
    even rounds, gloo first in odd ones)."""
    times = {"braid": [], "gloo": []}
    for r in range(args.bench):
        order = [("braid", None), ("gloo", gloo)]
        for name, group in (order if r % 2 == 0 else order[::-1]):
            times[name].append(train(group, args, args.steps, timed=True)[1])
    if dist.get_rank() == 0:
        for name, t in times.items():
            print(f"ddp_train --bench: {name:5s} {dist.get_world_size()} ranks, hidden {args.hidden}, "
                  f"{args.steps} steps x {args.bench} rounds: step time best {min(t) * 1e3:.3f} ms, "
                  f"median {statistics.median(t) * 1e3:.3f} ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="braid", help="braid or gloo (default braid)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--inputs", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--outputs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--check", action="store_true", help="train over braid and gloo, compare the weights")
    parser.add_argument("--bench", type=int, default=0, metavar="ROUNDS", help="time braid and gloo, interleaved")
    args = parser.parse_args()

    torch.set_num_threads(1)
    braid.torch.init_process_group(args.backend if not (args.check or args.bench) else "braid")
    status = 0
    if args.check or args.bench:
        gloo = dist.new_group(backend="gloo")
        if args.check and not check(args, gloo):
            status = 1
        if args.bench:
            bench(args, gloo)
    else:
        model, _ = train(None, args, args.steps)
        x, y = batch(args.steps, dist.get_rank(), args)
        loss = torch.nn.functional.mse_loss(model(x), y).item()
        print(f"rank {dist.get_rank()}: {args.backend}, {args.steps} steps, loss on a new batch {loss:.4f}")
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
