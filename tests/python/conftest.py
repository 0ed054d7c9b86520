"""Shared fixtures of the Python tests. They run under braid-run, every rank
running the same tests in the same order (the collectives are collective):

    build/tools/braid-run -n 4 /usr/bin/python3 -m pytest -q tests/python

with PYTHONPATH=build/python (the meson test `python/pytest_4_ranks` sets
it). Outside braid-run every test is skipped."""

import os

import numpy as np
import pytest

braid = pytest.importorskip("braid")

# braid.torch's tests run on their own (suite python_torch: pytest
# tests/python/torch): their torch store listens at the address that this
# session's communicator already holds.
collect_ignore = ["torch"]

def pytest_collection_modifyitems(config, items):
    if "BRAID_RANK" not in os.environ:
        skip = pytest.mark.skip(reason="run under braid-run (BRAID_RANK is not set)")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def comm():
    c = braid.Comm.from_env()  # BRAID_TIMEOUT: 60 s in the meson test
    yield c
    c.close()


@pytest.fixture
def fresh_comm(comm):
    """A communicator of its own for a test that breaks it (errors, abort) or
    hands it to a strategy: a split of the session's one, every rank in it."""
    c = comm.split(0, comm.rank)
    yield c
    c.close()


@pytest.fixture
def make_strategy(comm):
    """make_strategy(cls, *args, **kwargs): a strategy on a fresh split
    communicator, kept alive until every rank has finished the test (a
    barrier on the session communicator): a rank that destroys its strategy
    early would take away the links, and the store, that a slower peer still
    needs to finish the test's last collective."""
    made = []

    def make(cls, *args, **kwargs):
        c = comm.split(0, comm.rank)
        c.barrier()
        made.append(cls(c, *args, **kwargs))
        return made[-1]

    yield make
    comm.barrier()
    made.clear()
