"""TensorFlow-style distribution strategies on braid (braid::mirrored).

    from braid import mirrored
    strategy = mirrored.MultiWorkerMirrored()         # one replica per process, from braid-run's environment
    with strategy.scope():
        w = strategy.create_variable("dense/w", np.zeros((16, 4), np.float32))
    sgd = mirrored.Sgd(0.1, momentum=0.9)

    def step(ctx, batch):
        ctx.gradients.of(w)[...] = gradient(w.value(ctx), batch)   # numpy view of this replica's buffer
        ctx.gradients.ready(w)                                      # its bucket may start all-reducing
        ctx.apply_gradients(sgd)                                    # aggregated, applied on every replica
        return loss

    loss = strategy.run(step, args=(batch,))
    total = strategy.reduce("sum", loss)

Strategies (and tf.distribute's names for them, also accepted here):
MultiWorkerMirrored (MultiWorkerMirroredStrategy), Mirrored(local_replicas)
(MirroredStrategy; one thread per replica, each calling the function given to
run() with the GIL held, released while braid waits), CentralStorage
(CentralStorageStrategy) and ParameterServer (ParameterServerStrategy: the
last `servers` ranks serve(), the others train and finish()). A strategy
takes over the braid.Comm it is given (None: from the environment).

Differences from tf.distribute: variables are created with
strategy.create_variable(name, initial) inside scope() (there is no tf.Variable
to intercept); run() passes the ReplicaContext as the function's first
argument (also available as get_replica_context() inside it); gradients are
written into ctx.gradients.of(variable) rather than returned by a tape; the
optimizers are braid's C++ ones (Sgd).
"""

import threading as _threading

from ._braid import mirrored as _m

CentralStorage = _m.CentralStorage
DataShard = _m.DataShard
Divergence = _m.Divergence
Gradients = _m.Gradients
Mirrored = _m.Mirrored
MultiWorkerMirrored = _m.MultiWorkerMirrored
Optimizer = _m.Optimizer
ParameterServer = _m.ParameterServer
ReplicaContext = _m.ReplicaContext
ReplicaReport = _m.ReplicaReport
Scope = _m.Scope
Sgd = _m.Sgd
Strategy = _m.Strategy
Variable = _m.Variable

# tf.distribute's names.
MultiWorkerMirroredStrategy = MultiWorkerMirrored
MirroredStrategy = Mirrored
CentralStorageStrategy = CentralStorage
ParameterServerStrategy = ParameterServer

_current = _threading.local()
_run = Strategy.run


def _run_with_context(self, fn, args=(), kwargs=None):
    """Calls fn(ctx, *args, **kwargs) once per local replica; returns its
    result (a list of them, in local replica order, with several)."""

    def replica(ctx, *a, **k):
        _current.context = ctx
        try:
            return fn(ctx, *a, **k)
        finally:
            _current.context = None

    return _run(self, replica, tuple(args), dict(kwargs or {}))


Strategy.run = _run_with_context


def get_replica_context():
    """The running replica's ReplicaContext inside Strategy.run, else None (as tf.distribute's)."""
    return getattr(_current, "context", None)


__all__ = [
    "CentralStorage", "CentralStorageStrategy", "DataShard", "Divergence", "Gradients", "Mirrored",
    "MirroredStrategy", "MultiWorkerMirrored", "MultiWorkerMirroredStrategy", "Optimizer", "ParameterServer",
    "ParameterServerStrategy", "ReplicaContext", "ReplicaReport", "Scope", "Sgd", "Strategy", "Variable",
    "get_replica_context",
]
