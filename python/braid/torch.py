"""braid as a torch.distributed backend.

    import torch.distributed as dist
    import braid.torch  # registers the backend "braid"

    dist.init_process_group("braid", rank=r, world_size=n, init_method="tcp://127.0.0.1:29577")

Importing this module registers "braid" with
torch.distributed.Backend.register_backend. Its process groups find their
peers through the store torch hands them (the TCPStore or FileStore of
init_method), so braid hosts no store of its own, and run all_reduce,
broadcast, reduce, all_gather (and _all_gather_base), gather, scatter,
reduce_scatter (and _reduce_scatter_base), all_to_all and all_to_all_single
(with split sizes), send/recv, batch_isend_irecv and barrier on dense,
contiguous tensors, each returning a Work with a Future (what DDP's
communication hooks chain on). Tensors may be CUDA tensors where braid was
built with CUDA: braid moves them itself, after the work queued on the
caller's current stream is done, and the Work completes once the result is
in place. A tensor braid cannot read (on another device, not contiguous,
sparse, the tensors of one call on two devices) or a dtype it cannot reduce
fails at the call with a ValueError or TypeError naming the argument. Every
wait is bounded by the group's timeout (init_process_group's ``timeout``).

Under braid-run, ``braid.torch.init_process_group()`` takes the rank, the
world size and the store address from braid-run's environment (torch's store
listens at BRAID_STORE_ADDR, which braid-run picked free); under torchrun
from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
"""

import atexit
import datetime
import os

import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as _dist

from . import _braid_torch

__all__ = ["BACKEND", "describe", "init_process_group", "launch_env"]

BACKEND = "braid"

if not hasattr(_dist.Backend, BACKEND.upper()):
    _dist.Backend.register_backend(BACKEND, _braid_torch.create_process_group)

# Finalizes the communicators of live process groups and stops braid's
# threads, with the GIL released, before the interpreter finalizes: a group
# that was never destroyed, or one destroyed while its work completes, then
# ends in order instead of with a braid thread unwound by the finalizing
# interpreter (SIGABRT).
atexit.register(_braid_torch._shutdown)


def describe(group=None):
    """braid's one line on a braid process group (default: the default
    group): transport, algorithms, settings."""
    if group is None:
        group = _dist.distributed_c10d._get_default_group()
    return _braid_torch.describe(group)


def launch_env():
    """(rank, world_size, init_method) from the launcher's environment:
    braid-run's BRAID_RANK, BRAID_WORLD_SIZE and BRAID_STORE_ADDR, else
    torchrun's RANK and WORLD_SIZE with init_method "env://". Raises
    RuntimeError when neither is set."""
    env = os.environ
    if "BRAID_RANK" in env and "BRAID_WORLD_SIZE" in env and "BRAID_STORE_ADDR" in env:
        return int(env["BRAID_RANK"]), int(env["BRAID_WORLD_SIZE"]), "tcp://" + env["BRAID_STORE_ADDR"]
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), "env://"
    raise RuntimeError("braid.torch.launch_env: neither braid-run's BRAID_RANK, BRAID_WORLD_SIZE and "
                       "BRAID_STORE_ADDR nor torchrun's RANK and WORLD_SIZE are set")


def init_process_group(backend=BACKEND, timeout=datetime.timedelta(seconds=60), **kwargs):
    """dist.init_process_group(backend, ...) with the rank, world size and
    init_method of launch_env(), and a 60 s timeout (torch's default is 30
    minutes: a lost peer would hold every rank that long); keyword arguments
    override them."""
    rank, world_size, init_method = launch_env()
    kwargs.setdefault("rank", rank)
    kwargs.setdefault("world_size", world_size)
    kwargs.setdefault("init_method", init_method)
    _dist.init_process_group(backend, timeout=timeout, **kwargs)
