"""Every rank of a braid-run job runs the same pytest session: the tests
call collectives in the same order on every rank. The session joins one
braid process group (the default group) and one gloo group over the same
ranks, for comparisons, and leaves both at the end."""

import datetime

import pytest
import torch
import torch.distributed as dist

import braid.torch

TIMEOUT = datetime.timedelta(seconds=30)


@pytest.fixture(scope="session")
def world():
    torch.set_num_threads(1)
    braid.torch.init_process_group(timeout=TIMEOUT)
    gloo = dist.new_group(backend="gloo", timeout=TIMEOUT)
    yield dist.get_rank(), dist.get_world_size(), gloo
    dist.destroy_process_group()


@pytest.fixture(params=["cpu", "cuda"])
def device(request, world):
    """Where a test's tensors live: the CPU, then this rank's CUDA device
    (ranks share the devices in turn), skipped on every rank alike where
    torch sees none."""
    if request.param == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    rank = world[0]
    index = rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)
