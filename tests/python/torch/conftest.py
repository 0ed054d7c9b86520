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
