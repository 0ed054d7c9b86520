"""Input braid cannot take fails at the call with a Python exception naming
the argument (every rank passes the same bad input, so no rank is left
waiting), and the group stays usable; a rank whose peer never calls fails
within the group's timeout instead of hanging."""

import datetime
import time

import pytest
import torch
import torch.distributed as dist


def still_works(size):
    t = torch.ones(4)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((4,), float(size)))


def test_non_contiguous(world):
    rank, size, _ = world
    t = torch.ones(4, 6).t()
    with pytest.raises(ValueError, match=r"all_reduce: argument 'tensor' is not contiguous"):
        dist.all_reduce(t)
    with pytest.raises(ValueError, match=r"all_gather: argument 'tensor_list\[0\]' is not contiguous"):
        dist.all_gather([torch.ones(6, 4).t() for _ in range(size)], torch.ones(4, 6))
    still_works(size)


def test_dtype_braid_cannot_reduce(world):
    rank, size, _ = world
    for dtype in (torch.int16, torch.bool):
        with pytest.raises(TypeError, match=r"all_reduce: argument 'tensor' has dtype .* which braid cannot reduce"):
            dist.all_reduce(torch.ones(3, dtype=dtype))
    with pytest.raises(TypeError, match=r"reduce_scatter: argument 'output'"):
        dist.reduce_scatter(torch.ones(2, dtype=torch.int16), [torch.ones(2, dtype=torch.int16)] * size)
    with pytest.raises(ValueError, match=r"ReduceOp.BAND is not supported"):
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND)
    still_works(size)


def test_device_braid_cannot_read(world):
    rank, size, _ = world
    # A tensor without host memory: braid refuses it, or torch's dispatcher
    # finds no c10d kernel for its device; either way an exception, not a crash.
    with pytest.raises((ValueError, RuntimeError, NotImplementedError), match=r"(?i)device|meta"):
        dist.all_reduce(torch.ones(3, device="meta"))
    with pytest.raises((TypeError, RuntimeError, NotImplementedError), match=r"(?i)sparse|strided"):
        dist.broadcast(torch.ones(3).to_sparse(), src=0)
    still_works(size)


def test_tensors_on_two_devices(world):
    rank, size, _ = world
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    on_gpu = torch.device("cuda", rank % torch.cuda.device_count())
    with pytest.raises(ValueError, match=r"all_gather: argument 'tensor_list\[0\]' is on device 'cuda"):
        dist.all_gather([torch.zeros(2, device=on_gpu) for _ in range(size)], torch.ones(2))
    with pytest.raises(ValueError, match=r"all_gather_into_tensor: argument 'output_tensor' is on device 'cpu'"):
        dist.all_gather_into_tensor(torch.zeros(2 * size), torch.ones(2, device=on_gpu))
    still_works(size)


def test_wrong_sizes(world):
    rank, size, _ = world
    with pytest.raises(ValueError, match=r"all_gather: argument 'tensor_list' has 1 tensors"):
        dist.all_gather([torch.ones(2)], torch.ones(2))
    with pytest.raises(ValueError, match=r"all_gather_into_tensor: argument 'output_tensor' has 3 elements"):
        dist.all_gather_into_tensor(torch.ones(3), torch.ones(2))
    with pytest.raises(ValueError, match=r"all_to_all_single: argument 'input_split_sizes' sums to"):
        dist.all_to_all_single(torch.ones(size * 2), torch.ones(size * 2), input_split_sizes=[1] * size)
    with pytest.raises(ValueError, match=r"broadcast: argument 'src' is 7"):
        dist.broadcast(torch.ones(2), src=7)
    still_works(size)


def test_peer_never_calls_fails_within_timeout(world):
    """Rank 0 all-reduces on a group with a 2 s timeout that no other rank
    calls: the wait raises within the timeout (plus slack), naming braid."""
    rank, size, _ = world
    if size < 2:
        pytest.skip("needs 2 ranks")
    group = dist.new_group(backend="braid", timeout=datetime.timedelta(seconds=2))
    if rank == 0:
        start = time.monotonic()
        with pytest.raises(RuntimeError) as error:
            dist.all_reduce(torch.ones(4), group=group)
        elapsed = time.monotonic() - start
        assert elapsed < 10, f"the all_reduce failed only after {elapsed:.1f} s"
        assert "braid" in str(error.value) or "all_reduce" in str(error.value)
    dist.barrier()
    still_works(size)
