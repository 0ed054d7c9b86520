#!/usr/bin/python3
"""A tf.distribute-style training loop in numpy on braid: linear regression
(y = x W + b) trained with MultiWorkerMirrored, one replica per process, or
Mirrored with several replicas (threads) per process.

    PYTHONPATH=build/python build/tools/braid-run -n 4 /usr/bin/python3 examples/python/train_mirrored.py
    PYTHONPATH=build/python build/tools/braid-run -n 2 /usr/bin/python3 examples/python/train_mirrored.py --local-replicas 2

Every replica reads its own part of each global batch (DataShard), computes
its gradient into the strategy's buffers, and apply_gradients() averages them
over all replicas and applies the same SGD update everywhere, so the replicas
stay bit-identical (checked each epoch). The loss is summed over replicas
with strategy.reduce. Rank 0 prints.
"""

import argparse
import os

import numpy as np

import braid
from braid import mirrored

FEATURES, OUTPUTS, SAMPLES = 16, 4, 4096


def dataset():
    """The same synthetic data on every rank (a fixed seed): y = x W* + b* + noise."""
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32)
    w_true = rng.standard_normal((FEATURES, OUTPUTS)).astype(np.float32)
    y = x @ w_true + 0.5 + 0.01 * rng.standard_normal((SAMPLES, OUTPUTS)).astype(np.float32)
    return x, y


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--local-replicas", type=int, default=1, help="more than 1: Mirrored, one thread per replica")
    p.add_argument("--checkpoint", help="save a checkpoint here after the last epoch")
    args = p.parse_args()

    if args.local_replicas > 1:
        strategy = mirrored.MirroredStrategy(args.local_replicas, braid.Comm.from_env())
    else:
        strategy = mirrored.MultiWorkerMirroredStrategy()
    chief = strategy.is_chief
    if chief:
        print(f"{strategy.name}: {strategy.num_replicas_in_sync} replicas in sync", flush=True)

    x, y = dataset()
    with strategy.scope():
        # Every rank passes an initial value; the chief's wins.
        rng = np.random.default_rng(os.getpid())
        w = strategy.create_variable("dense/kernel", 0.1 * rng.standard_normal((FEATURES, OUTPUTS)).astype(np.float32))
        b = strategy.create_variable("dense/bias", np.zeros(OUTPUTS, np.float32))
    optimizer = mirrored.Sgd(args.lr, momentum=0.9)

    def train_step(ctx, epoch, step):
        shard = strategy.shard(ctx, SAMPLES, args.global_batch, seed=7)
        idx = shard.batch(epoch, step)
        xb, yb = x[idx], y[idx]
        pred = xb @ w.value(ctx) + b.value(ctx)
        err = pred - yb
        # Gradients of the mean squared error over the global batch; written
        # in reverse creation order, as a backward pass produces them.
        scale = 2.0 / (args.global_batch * OUTPUTS) * ctx.num_replicas_in_sync
        ctx.gradients.of(b)[...] = scale * err.sum(axis=0)
        ctx.gradients.ready(b)
        ctx.gradients.of(w)[...] = scale * (xb.T @ err)
        ctx.gradients.ready(w)
        ctx.apply_gradients(optimizer)
        return float((err ** 2).sum())

    steps = SAMPLES // args.global_batch
    for epoch in range(args.epochs):
        total = 0.0
        for step in range(steps):
            per_replica = strategy.run(train_step, args=(epoch, step))
            total += strategy.reduce("sum", per_replica)
        report = strategy.verify_replicas()
        if chief:
            loss = total / (steps * args.global_batch * OUTPUTS)
            print(f"epoch {epoch}: loss {loss:.5f}  {report.describe()}  hash {strategy.replica_hash():016x}",
                  flush=True)
        if not report.consistent:
            raise SystemExit(f"replicas diverged: {report.describe()}")
    if args.checkpoint:
        strategy.save(args.checkpoint, epoch=args.epochs)
        if chief:
            print(f"saved {args.checkpoint}")


if __name__ == "__main__":
    main()
