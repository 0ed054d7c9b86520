"""DDP over braid trains the example's model to gloo's weights (to float
tolerance), with DDP's built-in all-reduce and with a Python communication
hook that chains on braid's Work futures."""

import argparse
import importlib.util
import pathlib

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "python" / "ddp_train.py"
spec = importlib.util.spec_from_file_location("ddp_train", EXAMPLE)
ddp_train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ddp_train)

ARGS = argparse.Namespace(steps=6, batch=16, inputs=16, hidden=32, outputs=4, lr=0.05)


def test_ddp_matches_gloo(world):
    rank, size, gloo = world
    assert ddp_train.check(ARGS, gloo)


def hooked_weights(group):
    model = ddp_train.make_model(ARGS.inputs, ARGS.hidden, ARGS.outputs)
    ddp = DistributedDataParallel(model, process_group=group, bucket_cap_mb=0.001)  # several buckets
    ddp.register_comm_hook(group, default_hooks.allreduce_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=ARGS.lr)
    for step in range(ARGS.steps):
        x, y = ddp_train.batch(step, dist.get_rank(), ARGS)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
    return ddp_train.flat_weights(model)


def test_ddp_comm_hook_matches_gloo(world):
    rank, size, gloo = world
    braid_weights = hooked_weights(dist.group.WORLD)
    gloo_weights = hooked_weights(gloo)
    assert (braid_weights - gloo_weights).abs().max().item() <= 1e-5
