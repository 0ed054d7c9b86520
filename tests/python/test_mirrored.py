"""braid.mirrored from Python: each strategy trains one step with known
per-replica gradients and the result is checked against numpy's; replicas
stay identical; checkpoints, reduce, DataShard."""

import os

import numpy as np
import pytest

import braid
from braid import mirrored


def one_step(strategy, lr=0.5):
    """Creates w (the chief's initial value wins), applies one SGD step with
    gradient replica_id + 1 on every replica; returns w."""
    rank = strategy.rank
    with strategy.scope():
        w = strategy.create_variable("dense/w", np.full((3, 2), 10.0 + rank, np.float32))
    if strategy.runs_replicas:
        np.testing.assert_array_equal(w.value(), np.full((3, 2), 10.0, np.float32))

    def step(ctx, scale):
        grad = ctx.gradients.of(w)
        assert grad.shape == (3, 2) and grad.dtype == np.float32
        grad[...] = (ctx.replica_id_in_sync_group + 1) * scale
        ctx.gradients.ready(w)
        ctx.apply_gradients(mirrored.Sgd(lr))
        return ctx.replica_id_in_sync_group

    result = strategy.run(step, args=(1.0,)) if strategy.runs_replicas else None
    return w, result


def expected_after_step(replicas, lr=0.5):
    return np.full((3, 2), 10.0 - lr * np.mean(np.arange(1, replicas + 1)), np.float32)


def test_multi_worker_mirrored(comm, make_strategy):
    n, r = comm.size, comm.rank
    s = make_strategy(mirrored.MultiWorkerMirrored, timeout=30)
    assert s.num_replicas_in_sync == n and s.is_chief == (r == 0) and s.name == "MultiWorkerMirrored"
    w, replica_id = one_step(s)
    assert replica_id == r
    np.testing.assert_array_equal(w.value(), expected_after_step(n))
    np.testing.assert_array_equal(w.numpy(), expected_after_step(n))
    with s.scope():
        count = s.create_variable("count", np.int64(r), trainable=False)
    assert count.shape == () and count.value() == 0 and count.dtype == np.int64
    report = s.verify_replicas()
    assert report.consistent and report.variables_checked >= 2, report.describe()
    total = s.reduce("sum", float(r))
    assert isinstance(total, float) and total == sum(range(n))
    np.testing.assert_array_equal(s.reduce(braid.ReduceOp.MAX, np.array([r, -r], np.int64)), [n - 1, 0])
    assert s.reduce("avg", 2.0 * r) == pytest.approx(n - 1)


def test_mirrored_two_replicas_per_process(comm, make_strategy):
    n = comm.size
    s = make_strategy(lambda c, **kw: mirrored.Mirrored(2, c, **kw), timeout=30)
    assert s.num_replicas_in_sync == 2 * n and s.local_replicas == 2
    w, replica_ids = one_step(s)
    assert replica_ids == [2 * s.rank, 2 * s.rank + 1]
    for local in range(2):
        np.testing.assert_array_equal(w.value(local), expected_after_step(2 * n))
    assert s.verify_replicas().consistent
    assert s.reduce("sum", [1, 2]) == 3 * n

    def collectives(ctx):
        total = ctx.all_reduce("sum", np.array([ctx.replica_id, 1.0]))
        gathered = ctx.all_gather(np.array([ctx.replica_id], np.int32))
        return total, gathered

    for total, gathered in s.run(collectives):
        np.testing.assert_array_equal(total, [sum(range(2 * n)), 2 * n])
        np.testing.assert_array_equal(gathered, np.arange(2 * n, dtype=np.int32))


def test_central_storage(comm, make_strategy):
    n = comm.size
    s = make_strategy(mirrored.CentralStorage, timeout=30)
    w, _ = one_step(s)
    np.testing.assert_array_equal(w.value(), expected_after_step(n))
    assert s.verify_replicas().consistent


def test_parameter_server(comm, make_strategy):
    if comm.size < 2:
        pytest.skip("needs 2 ranks")
    s = make_strategy(mirrored.ParameterServer, optimizer=mirrored.Sgd(0.5), servers=1, staleness=1, timeout=30)
    assert s.is_server == (comm.rank == comm.size - 1)
    w, _ = one_step(s)
    if s.is_server:
        s.serve()
        assert s.updates_applied >= 1
        final = np.zeros((3, 2), np.float32)
    else:
        s.finish()
        final = w.value().copy()
        assert not np.array_equal(final, np.full((3, 2), 10.0, np.float32))  # the update reached the workers
    every = comm.all_gather(final)
    for worker in range(comm.size - 1):
        np.testing.assert_array_equal(every[worker], every[0])


def test_checkpoint_round_trip(make_strategy):
    s = make_strategy(mirrored.MultiWorkerMirrored, timeout=30)
    w, _ = one_step(s)
    after = w.value().copy()
    path = "/tmp/braid-pytest-%s.ckpt" % os.environ.get("BRAID_STORE_ADDR", "local").replace(":", "-")
    s.save(path, step=1, epoch=2, batch_in_epoch=3)
    w.assign(np.zeros((3, 2), np.float32))
    np.testing.assert_array_equal(w.value(), 0)
    restored = s.restore(path)
    assert (restored["step"], restored["epoch"], restored["batch_in_epoch"]) == (1, 2, 3)
    assert restored["replicas_when_saved"] == s.num_replicas_in_sync
    np.testing.assert_array_equal(w.value(), after)
    s.reduce("sum", 0)  # every rank restored before the chief removes the file
    if s.is_chief:
        os.remove(path)


def test_errors_in_strategies(make_strategy):
    s = make_strategy(mirrored.MultiWorkerMirrored, timeout=30)
    with pytest.raises(braid.InvalidArgument, match="scope"):
        s.create_variable("outside", np.zeros(2, np.float32))
    with s.scope():
        v = s.create_variable("v", np.zeros(2, np.float32))
        with pytest.raises(braid.InvalidArgument):
            s.create_variable("bad", np.zeros(2, np.int16))
    with pytest.raises(ZeroDivisionError):
        s.run(lambda ctx: 1 / 0)
    kept = []
    s.run(lambda ctx: kept.append(ctx))
    with pytest.raises(braid.InvalidArgument, match="returned"):
        kept[0].gradients.of(v)
    assert s.run(lambda ctx, a, b=0: a + b, args=(2,), kwargs={"b": 3}) == 5


def test_strategy_takes_the_comm(comm, fresh_comm):
    s = mirrored.MultiWorkerMirrored(fresh_comm, timeout=30)
    assert fresh_comm.closed  # the strategy took the communicator over
    assert s.reduce("sum", 1) == s.num_replicas_in_sync
    comm.barrier()  # every rank is done with s before any destroys it


def test_data_shard():
    replicas = 3
    shards = [mirrored.DataShard(100, 12, r, replicas, seed=7) for r in range(replicas)]
    assert shards[0].batches_per_epoch == 8 and shards[0].per_replica_batch_size == 4
    order = shards[0].epoch_order(1)
    assert sorted(order.tolist()) == list(range(100))
    for b in range(shards[0].batches_per_epoch):
        together = np.concatenate([s.batch(1, b) for s in shards])
        np.testing.assert_array_equal(together, order[b * 12:(b + 1) * 12])
    with pytest.raises(braid.InvalidArgument):
        mirrored.DataShard(10, 2, 5, 3)
