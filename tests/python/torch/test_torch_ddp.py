"""DDP over braid trains the example's model to gloo's weights (to float
tolerance), with DDP's built-in all-reduce and with a Python communication
hook that chains on braid's Work futures (on CPU tensors, and on CUDA
tensors where torch has a GPU)."""

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


def hooked_weights(group, device):
    model = ddp_train.make_model(ARGS.inputs, ARGS.hidden, ARGS.outputs).to(device)
    ddp = DistributedDataParallel(model, process_group=group, bucket_cap_mb=0.001)  # several buckets
    ddp.register_comm_hook(group, default_hooks.allreduce_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=ARGS.lr)
    for step in range(ARGS.steps):
        x, y = ddp_train.batch(step, dist.get_rank(), ARGS)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x.to(device)), y.to(device)).backward()
        optimizer.step()
    return ddp_train.flat_weights(model).cpu()


def test_ddp_comm_hook_matches_gloo(world, device):
    # braid's model on `device`, gloo's on the CPU.
    rank, size, gloo = world
    braid_weights = hooked_weights(dist.group.WORLD, device)
    gloo_weights = hooked_weights(gloo, torch.device("cpu"))
    # A GPU's float arithmetic differs from the CPU's in the last bits.
    tolerance = 1e-5 if device.type == "cpu" else 1e-4
    assert (braid_weights - gloo_weights).abs().max().item() <= tolerance
