#!/usr/bin/python3
"""DDP and torch.distributed collectives over braid against Gloo (and MPI
where torch has it), on one set of ranks, the backends taking turns:

    PYTHONPATH=build/python build/tools/braid-run -n 4 /usr/bin/python3 bench/torch_ddp.py --json out.json

Every rank runs this script (under braid-run, or torchrun's environment);
the default process group is braid's, and a Gloo group (an MPI group where
torch.distributed.is_mpi_available()) spans the same ranks.

Part 1, DDP. One model per backend, made alike from one seed: a stack of
Linear layers of about --model-mb MB of float32 parameters, large ones (one
square layer of `width`) and small ones near the output, whose gradients
come first in the backward pass. With DDP's buckets (the first of 1 MiB,
then --bucket-cap-mb) the gradients travel in small and large buckets.
Each round, every backend in turn trains --steps steps of the same batches
(after one untimed step) and its mean step time is taken; the figure is the
median over --rounds rounds. A second DDP of each backend, whose
communication hook times each bucket's all_reduce from issue to completion,
trains the same steps: its figures are per bucket size. At the end the
plain models of every backend must hold the same weights (to float
tolerance), or the run fails.

Part 2, collectives. all_reduce (sum, float32), broadcast (root 0) and
all_gather (into the chunks of one buffer) from --min-bytes to --max-bytes,
each size times --factor, and --max-bytes itself; the size is the whole buffer (all_gather: the output,
each rank sending size / ranks), as nccl-tests counts it. At each size,
--rounds rounds of every backend in turn: a barrier, then ITERS calls (more
for small sizes, the same on every rank), the mean time per call, the
slowest rank's; the median over rounds. algbw = size / time; busbw = algbw x
2(n-1)/n for all_reduce, (n-1)/n for all_gather, 1 for broadcast. Each
result is checked once per size and backend.

torch uses --threads threads per rank (default: the CPUs the rank is bound
to, or, unbound, the cores / the ranks), so that ranks do not compete for
cores inside their own kernels. braid-run binds each rank to one core of
its own where the ranks fit (--bind-to core): torch's compute, braid's
progress thread and Gloo's threads then share that core. Run the
benchmark both ways (braid-run --bind-to core, and --bind-to none); a
machine's figures are only comparable under one binding.

Exits 1 when a check fails. --json FILE writes every figure.
"""

import argparse
import collections
import datetime
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import braid.torch

INPUTS, OUTPUTS = 256, 10
SMALL = [(256, 256), (256, 64), (64, OUTPUTS)]  # the head, near the output


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def model_width(model_mb):
    """The width w of the large layers (INPUTS x w, w x w, w x INPUTS) whose
    parameters, with the head's, make about model_mb MB of float32."""
    head = sum(i * o + o for i, o in SMALL)
    params = model_mb * 1e6 / 4 - head
    # w^2 + (2 INPUTS + 3) w + INPUTS = params
    b = 2 * INPUTS + 3
    return max(8, int((-b + math.sqrt(b * b + 4 * max(params - INPUTS, 0))) / 2))


def make_model(width, seed):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(INPUTS, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
              torch.nn.Linear(width, INPUTS), torch.nn.ReLU()]
    for i, o in SMALL:
        layers += [torch.nn.Linear(i, o), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def batch(step, rank, size):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(size, INPUTS, generator=g), torch.randn(size, OUTPUTS, generator=g)


def timed_allreduce_hook(state, bucket):
    """DDP's all-reduce of a bucket (average), recording how long it took
    from issue to completion, by the bucket's size in bytes."""
    group, times = state
    buffer = bucket.buffer()
    buffer.div_(group.size())
    started = time.perf_counter()
    future = dist.all_reduce(buffer, group=group, async_op=True).get_future()

    def done(f):
        times[buffer.numel() * buffer.element_size()].append(time.perf_counter() - started)
        return f.value()[0]

    return future.then(done)


class Trainer:
    """One backend's DDP model (and its twin with the timing hook)."""

    def __init__(self, group, width, bucket_cap_mb, batch_size):
        self.group = group
        self.batch_size = batch_size
        self.bucket_times = collections.defaultdict(list)
        self.models = []
        for hooked in (False, True):
            model = make_model(width, seed=1)
            ddp = DistributedDataParallel(model, process_group=group, bucket_cap_mb=bucket_cap_mb)
            if hooked:
                ddp.register_comm_hook((group, self.bucket_times), timed_allreduce_hook)
            self.models.append((ddp, torch.optim.SGD(ddp.parameters(), lr=0.01)))
        self.steps_done = [0, 0]  # of the plain model, of the hooked one

    def run(self, steps, rank, hooked):
        """Trains `steps` steps; returns the mean step time in seconds."""
        ddp, optimizer = self.models[hooked]
        started = time.perf_counter()
        for _ in range(steps):
            x, y = batch(self.steps_done[hooked], rank, self.batch_size)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            optimizer.step()
            self.steps_done[hooked] += 1
        return (time.perf_counter() - started) / steps

    def weights(self):
        return torch.cat([p.detach().reshape(-1) for p in self.models[0][0].parameters()])


def slowest(seconds, gloo):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.item()


def bench_ddp(args, groups, gloo, rank):
    width = model_width(args.model_mb)
    trainers = {name: Trainer(group, width, args.bucket_cap_mb, args.batch) for name, group in groups.items()}
    params = sum(p.numel() for p in trainers["braid"].models[0][0].parameters())
    step_times = collections.defaultdict(list)
    for name, trainer in trainers.items():  # one untimed step each: DDP's first builds its buckets
        trainer.run(1, rank, hooked=False)
        trainer.run(1, rank, hooked=True)
        trainer.bucket_times.clear()
    for _ in range(args.rounds):
        for name, trainer in trainers.items():
            dist.barrier(group=gloo)
            step_times[name].append(slowest(trainer.run(args.steps, rank, hooked=False), gloo))
            trainer.run(args.steps, rank, hooked=True)
    reference = trainers["braid"].weights()
    failures = []
    for name, trainer in trainers.items():
        if not torch.allclose(trainer.weights(), reference, rtol=1e-3, atol=1e-5):
            diff = (trainer.weights() - reference).abs().max().item()
            failures.append(f"DDP over {name} trained other weights than over braid (max difference {diff:.3g})")
    result = {"params": params, "bytes": 4 * params, "width": width, "batch": args.batch, "steps": args.steps,
              "rounds": args.rounds,
              "step_seconds": {n: statistics.median(t) for n, t in step_times.items()},
              "bucket_seconds": {n: {str(size): statistics.median(times) for size, times in sorted(t.bucket_times.items())}
                                 for n, t in trainers.items()}}
    return result, failures


class AllReduce:
    """Sum of float32; every rank gives rank + 1."""

    def __init__(self, size, n, rank):
        self.n, self.buffer = n, torch.full((max(size // 4, 1),), float(rank + 1))

    def bytes(self):
        return self.buffer.numel() * 4

    def bus_factor(self):
        return 2 * (self.n - 1) / self.n

    def run(self, group):
        dist.all_reduce(self.buffer, group=group)

    def correct_after_one(self):
        return bool((self.buffer == self.n * (self.n + 1) / 2).all())


class Broadcast:
    """Bytes from rank 0, which holds 7s."""

    def __init__(self, size, n, rank):
        self.buffer = torch.full((size,), 7 if rank == 0 else 0, dtype=torch.uint8)

    def bytes(self):
        return self.buffer.numel()

    def bus_factor(self):
        return 1.0

    def run(self, group):
        dist.broadcast(self.buffer, src=0, group=group)

    def correct_after_one(self):
        return bool((self.buffer == 7).all())


class AllGather:
    """Every rank's block of size / n bytes (rank + 1s) into one buffer, as
    a list of its chunks (Gloo has no all_gather_into_tensor in torch 1.13)."""

    def __init__(self, size, n, rank):
        block = max(size // n, 1)
        self.n, self.block = n, torch.full((block,), rank + 1, dtype=torch.uint8)
        self.output = torch.zeros(block * n, dtype=torch.uint8)
        self.blocks = list(self.output.chunk(n))

    def bytes(self):
        return self.output.numel()

    def bus_factor(self):
        return (self.n - 1) / self.n

    def run(self, group):
        dist.all_gather(self.blocks, self.block, group=group)

    def correct_after_one(self):
        ranks = torch.arange(1, self.n + 1, dtype=torch.uint8).view(self.n, 1)
        return bool((self.output.view(self.n, -1) == ranks).all())


COLLECTIVES = {"all_reduce": AllReduce, "broadcast": Broadcast, "all_gather": AllGather}


def iterations(size, scale):
    """Calls per timing: about 2^24 bytes' worth, 5 to 1000 (the same on every rank)."""
    return max(5, min(1000, int(scale * (1 << 24) / max(size, 1))))


def bench_collectives(args, groups, gloo, rank, n):
    sizes = []
    size = args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= args.factor
    if sizes[-1] < args.max_bytes:
        sizes.append(args.max_bytes)
    rows, failures = [], []
    for name, collective in COLLECTIVES.items():
        for size in sizes:
            iters = iterations(size, args.iters_scale)
            times = collections.defaultdict(list)
            cases = {backend: collective(size, n, rank) for backend in groups}
            for backend, group in groups.items():
                cases[backend].run(group)
                if not cases[backend].correct_after_one():
                    failures.append(f"{name} of {cases[backend].bytes()} bytes over {backend} gave a wrong result")
            for _ in range(args.rounds):
                for backend, group in groups.items():
                    dist.barrier(group=gloo)
                    started = time.perf_counter()
                    for _ in range(iters):
                        cases[backend].run(group)
                    times[backend].append(slowest((time.perf_counter() - started) / iters, gloo))
            for backend, samples in times.items():
                seconds = statistics.median(samples)
                case = cases[backend]
                algbw = case.bytes() / seconds / 1e9
                rows.append({"collective": name, "backend": backend, "bytes": case.bytes(), "iters": iters,
                             "seconds": seconds, "algbw_GBps": algbw, "busbw_GBps": algbw * case.bus_factor()})
    return rows, failures


def print_ddp(result, n):
    names = list(result["step_seconds"])
    print(f"\nDDP on {n} ranks: {result['params']} parameters ({result['bytes'] / 1e6:.1f} MB), "
          f"batch {result['batch']} per rank, median of {result['rounds']} rounds of {result['steps']} steps")
    base = result["step_seconds"]["braid"]
    for name in names:
        t = result["step_seconds"][name]
        ratio = f"   braid / {name} = {base / t:.2f}" if name != "braid" else ""
        print(f"  step time  {name:>6}: {1e3 * t:9.2f} ms{ratio}")
    sizes = sorted({int(s) for per in result["bucket_seconds"].values() for s in per})
    print("  bucket all_reduce (issue to done), ms:")
    print("  " + f"{'bucket bytes':>14}" + "".join(f"{name:>10}" for name in names))
    for size in sizes:
        cells = [result["bucket_seconds"][name].get(str(size)) for name in names]
        print("  " + f"{size:>14}" + "".join(f"{1e3 * c:10.2f}" if c is not None else f"{'-':>10}" for c in cells))


def print_collectives(rows, n):
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    print(f"\ntorch.distributed collectives on {n} ranks: time (us) and busbw (GB/s); ratio = braid busbw / other")
    for name in COLLECTIVES:
        print(f"  {name}")
        header = f"  {'bytes':>10}" + "".join(f"{b + ' us':>12}{b + ' GB/s':>12}" for b in backends)
        print(header + "".join(f"{'vs ' + b:>9}" for b in backends if b != "braid"))
        for size in sorted({r["bytes"] for r in rows if r["collective"] == name}):
            by = {r["backend"]: r for r in rows if r["collective"] == name and r["bytes"] == size}
            line = f"  {size:>10}" + "".join(f"{1e6 * by[b]['seconds']:12.1f}{by[b]['busbw_GBps']:12.3f}"
                                             for b in backends)
            line += "".join(f"{by['braid']['busbw_GBps'] / by[b]['busbw_GBps']:9.2f}" for b in backends if b != "braid")
            print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-mb", type=float, default=25.0, help="model size in MB of float32 (default 25)")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (default 25)")
    parser.add_argument("--batch", type=int, default=32,
                        help="samples per rank per step (default 32); fewer make a step's compute smaller "
                             "beside its communication")
    parser.add_argument("--steps", type=int, default=10, help="DDP steps per backend per round (default 10)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every backend in turn (default 5)")
    parser.add_argument("--min-bytes", type=parse_size, default=8, help="smallest collective size (default 8)")
    parser.add_argument("--max-bytes", type=parse_size, default=64 << 20, help="largest (default 64M)")
    parser.add_argument("--factor", type=int, default=4, help="size step (default 4)")
    parser.add_argument("--iters-scale", type=float, default=1.0, help="scales the calls per timing")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per rank (default: cores / ranks)")
    parser.add_argument("--skip-ddp", action="store_true")
    parser.add_argument("--skip-collectives", action="store_true")
    parser.add_argument("--json", help="write every figure to this file (rank 0)")
    args = parser.parse_args()
    if args.factor < 2 or not 1 <= args.min_bytes <= args.max_bytes or args.steps < 1 or args.rounds < 1:
        parser.error("--factor must be at least 2, --min-bytes at least 1 and at most --max-bytes, --steps and "
                     "--rounds at least 1")

    timeout = datetime.timedelta(seconds=300)
    braid.torch.init_process_group(timeout=timeout)
    rank, n = dist.get_rank(), dist.get_world_size()
    bound_to = len(os.sched_getaffinity(0))
    cores = os.cpu_count() or bound_to
    torch.set_num_threads(args.threads or (bound_to if bound_to < cores else max(1, cores // n)))
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    groups = {"braid": dist.group.WORLD, "gloo": gloo}
    if dist.is_mpi_available():
        groups["mpi"] = dist.new_group(backend="mpi", timeout=timeout)

    results, failures = {"ranks": n, "backends": list(groups), "torch": torch.__version__,
                         "threads": torch.get_num_threads(), "bound_to_cpus": bound_to, "cpus": cores}, []
    if not args.skip_ddp:
        results["ddp"], more = bench_ddp(args, groups, gloo, rank)
        failures += more
    if not args.skip_collectives:
        results["collectives"], more = bench_collectives(args, groups, gloo, rank, n)
        failures += more
    if rank == 0:
        print(f"braid.torch against {', '.join(b for b in groups if b != 'braid')}: torch {torch.__version__}, "
              f"{n} ranks, {torch.get_num_threads()} torch threads each, rank 0 bound to {bound_to} of {cores} "
              f"CPUs; braid: {braid.torch.describe()}")
        if "ddp" in results:
            print_ddp(results["ddp"], n)
        if "collectives" in results:
            print_collectives(results["collectives"], n)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    for failure in failures:
        print(f"rank {rank}: FAIL: {failure}", file=sys.stderr)
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
